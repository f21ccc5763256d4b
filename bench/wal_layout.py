"""Measures the choice behind the embedded log's layout (ARCHITECTURE.md):
one shared write-ahead file vs one file per partition, for group commits that
touch N partitions. Each group commit appends one 200-byte frame per partition
touched and makes it durable (fdatasync), as the log's writer does.

    python3 bench/wal_layout.py [DIR]
"""
import os
import sys
import tempfile
import time

COMMITS = 400
FRAME = b"x" * 200


def run(directory, partitions_touched, shared):
    files = [os.open(os.path.join(directory, f"p{i}.seg"), os.O_CREAT | os.O_WRONLY | os.O_APPEND)
             for i in range(1 if shared else partitions_touched)]
    times = []
    for _ in range(COMMITS):
        start = time.perf_counter()
        if shared:
            os.write(files[0], FRAME * partitions_touched)
            os.fdatasync(files[0])
        else:
            for fd in files:
                os.write(fd, FRAME)
            for fd in files:
                os.fdatasync(fd)
        times.append(time.perf_counter() - start)
    for fd in files:
        os.close(fd)
    times.sort()
    return times[len(times) // 2] * 1e3, times[int(len(times) * 0.99)] * 1e3


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else "."
    print("| partitions touched per commit | layout | p50 ms | p99 ms |")
    print("|---:|---|---:|---:|")
    for n in (1, 4, 16):
        for shared in (True, False):
            with tempfile.TemporaryDirectory(dir=base) as d:
                p50, p99 = run(d, n, shared)
            print(f"| {n} | {'shared WAL' if shared else 'file per partition'} | {p50:.3f} | {p99:.3f} |")


if __name__ == "__main__":
    main()
