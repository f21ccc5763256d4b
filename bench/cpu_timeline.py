#!/usr/bin/env python3
"""The machine's busy cores every 50 ms, and named processes' CPU every 100 ms.

Samples /proc/stat (all cores) and /proc/PID/stat of every process whose
name is given, for SECONDS, and writes one line per sample:
`<unix time> busy_cores=<n>` and `<unix time> <name>=<cores> ...` (the
cores each used since its last line, about 100 ms before: 1.0 is one core,
from ticks of 1/100 s over the measured interval). Used beside
`AGG_TRACE=1 tern-bench aggdemo` to see whether a burst finds the cores
saturated (BENCHMARKS.md, aggdemo).

    python3 bench/cpu_timeline.py 75 out.txt java tern tern-bench &
"""
import os
import sys
import time


def processes(names):
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            name = open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            continue
        if name in names:
            found[pid] = name
    return found


def ticks(pid):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        fields = stat[stat.rindex(")") + 2 :].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError):
        return None


def machine():
    fields = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(fields), fields[3] + fields[4]


def main(seconds, path, names):
    cores = os.cpu_count() or 1
    end = time.time() + seconds
    out = open(path, "w")
    (total_before, idle_before), before, found, scanned = machine(), {}, {}, 0.0
    step, sampled_at = 0, time.time()
    while time.time() < end:
        time.sleep(0.05)
        step += 1
        total, idle = machine()
        busy = 1 - (idle - idle_before) / max(1, total - total_before)
        out.write(f"{time.time():.3f} busy_cores={busy * cores:.2f}\n")
        total_before, idle_before = total, idle
        if step % 2:
            continue
        if time.time() - scanned > 2:
            found, scanned = processes(names), time.time()
        now, now_at = {pid: ticks(pid) for pid in found}, time.time()
        seconds = max(now_at - sampled_at, 1e-3)
        parts = [
            f"{found[pid]}={(now[pid] - before[pid]) / 100 / seconds:.2f}"
            for pid in sorted(now, key=found.get)
            if before.get(pid) is not None and now[pid] is not None
        ]
        if parts:
            out.write(f"{now_at:.3f} {' '.join(parts)}\n")
            out.flush()
        before, sampled_at = now, now_at


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2], set(sys.argv[3:]))
