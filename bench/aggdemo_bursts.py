#!/usr/bin/env python3
"""Where aggdemo's rows wait, burst by burst.

Reads the `TRACE trigger_ms until_queued_ms total_ms session` lines that
`AGG_TRACE=1 tern-bench aggdemo ...` prints (stderr) and, for every 100 ms
of trigger time with more than 50 rows (the bursts: the workload closes its
5,000 open sessions together every 500,000 records), prints the rows'
time until Tern's publisher queued them and their total latency (ms):
min / median / max, and the total's p99.

    AGG_TRACE=1 tern-bench aggdemo ... 2> run.log
    python3 bench/aggdemo_bursts.py run.log
"""
import datetime
import sys
from collections import Counter


def main(path):
    rows = sorted(tuple(map(int, line.split()[1:4])) for line in open(path) if line.startswith("TRACE"))
    per_slot = Counter(trigger // 100 for trigger, _, _ in rows)
    for slot, count in sorted(per_slot.items()):
        if count <= 50:
            continue
        burst = [r for r in rows if r[0] // 100 == slot]
        queued = sorted(r[1] for r in burst)
        total = sorted(r[2] for r in burst)
        at = datetime.datetime.fromtimestamp(slot / 10, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
        print(
            f"{at} {count} rows: until queued min/med/max {queued[0]} {queued[len(queued) // 2]} {queued[-1]}"
            f" | total min/med/p99/max {total[0]} {total[len(total) // 2]} {total[int(len(total) * 0.99)]} {total[-1]}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
