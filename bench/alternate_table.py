#!/usr/bin/env python3
"""Summarizes scripts/bench-alternate.sh's output as one Markdown table per
suite: each run's row, in the order the runs were made (old, new, old, new).

    python3 bench/alternate_table.py bench/results/2026-11-24/layout
"""
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])


def runs(kind):
    found = []
    for path in sorted(out.glob(f"{kind}-*-*")):
        _, which, pair = path.name.split("-")
        found.append((int(pair), 0 if which == "old" else 1, which, path))
    return [(pair, which, path) for pair, _, which, path in sorted(found)]


def by_name(results, prefix):
    return next((r for r in results if r["name"].startswith(prefix)), None)


print("| pair | build | tern GET req/s | GET p99 ms | tern PUT req/s | PUT p99 ms | hello GET req/s | GET open loop at 50%: p99 ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for pair, which, path in runs("suite"):
    data = json.loads((path / "results.json").read_text())
    results = data["results"]
    get, put, hello = by_name(results, "tern GET"), by_name(results, "tern PUT"), by_name(results, "hello GET")
    opens = [r for r in results if r["name"].startswith("tern GET") and r["mode"] != "closed"]
    open50 = opens[-1]["p99_us"] / 1000 if opens else float("nan")
    print(
        f"| {pair} | {which} | {get['throughput_per_s']:,.0f} | {get['p99_us'] / 1000:.2f} | {put['throughput_per_s']:,.0f} | "
        f"{put['p99_us'] / 1000:.2f} | {hello['throughput_per_s']:,.0f} | {open50:.2f} |"
    )
print()
print("| pair | build | SSE over HTTP/2 p50 / p99 ms | server / harness CPU µs per event | WebSocket (multiplexed) p50 / p99 ms | server / harness CPU µs per event |")
print("|---|---|---:|---:|---:|---:|")
for pair, which, path in runs("watch"):
    rows = json.loads((path / "watch.json").read_text())
    cells = []
    for prefix in ("Tern SSE (HTTP/2)", "Tern WebSocket"):
        row = next(r for r in rows if r["peer"].startswith(prefix))
        cells.append(f"{row['p50_ms']:.2f} / {row['p99_ms']:.2f}")
        cells.append(f"{row['server_cpu_us_per_event']:.1f} / {row['harness_cpu_us_per_event']:.1f}")
    print(f"| {pair} | {which} | " + " | ".join(cells) + " |")
