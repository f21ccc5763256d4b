#!/usr/bin/env python3
"""Where aggdemo's rows wait, burst by burst.

Reads the `TRACE trigger_ms until_queued_ms total_ms session` lines that
`AGG_TRACE=1 tern-bench aggdemo ...` prints (stderr), the measured pass's
only (those after the `MEASURED PASS` line, when there is one), groups
them into bursts (the workload closes its 5,000 open sessions together
every 500,000 records: a burst is rows whose triggers follow each other by
under 200 ms; groups of 50 rows or fewer are left out), and prints each
burst's time until Tern's publisher queued its rows and their total
latency (ms): min / median / max, and the total's p99.

    AGG_TRACE=1 tern-bench aggdemo ... 2> run.log
    python3 bench/aggdemo_bursts.py run.log
"""
import datetime
import sys

MARK = "MEASURED PASS"
GAP_MS = 200
ROWS_MIN = 51


def measured_lines(path):
    lines = open(path).read().splitlines()
    marks = [at for at, line in enumerate(lines) if line.strip() == MARK]
    return lines[marks[-1] + 1 :] if marks else lines


def bursts(rows):
    group = []
    for row in rows:
        if group and row[0] - group[-1][0] >= GAP_MS:
            yield group
            group = []
        group.append(row)
    if group:
        yield group


def main(path):
    rows = sorted(tuple(map(int, line.split()[1:4])) for line in measured_lines(path) if line.startswith("TRACE"))
    for burst in bursts(rows):
        if len(burst) < ROWS_MIN:
            continue
        queued = sorted(r[1] for r in burst)
        total = sorted(r[2] for r in burst)
        at = datetime.datetime.fromtimestamp(burst[0][0] / 1000, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
        print(
            f"{at} {len(burst)} rows over {burst[-1][0] - burst[0][0]} ms: until queued min/med/max {queued[0]} {queued[len(queued) // 2]} {queued[-1]}"
            f" | total min/med/p99/max {total[0]} {total[len(total) // 2]} {total[int(len(total) * 0.99)]} {total[-1]}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
