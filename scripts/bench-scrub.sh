#!/usr/bin/env bash
# What the scrub costs the read and write paths: one `tern serve` node with
# the scrub off, then one scrubbing without pause (a round every second at
# the default 10,000 entries/s over 10,000 records: the worst case of the
# default rate), alternating, measured by `tern-bench http`:
#   scripts/bench-scrub.sh OUT_DIR [PAIRS]
# Each run: PUT 10,000 keys of 100 bytes (closed loop, 64 connections, 8 s),
# then GET them (8 s). Results: OUT_DIR/{off,on}-N-{put,get}.json and a table.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$1" pairs="${2:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
cargo build --release --quiet -p tern -p tern-bench
TERN="$CARGO_TARGET_DIR/release/tern" BENCH="$CARGO_TARGET_DIR/release/tern-bench"
mkdir -p "$out"
port=17311
run() { # which pair
  local which="$1" pair="$2" data scrub=()
  data="$(mktemp -d)"
  [[ "$which" == off ]] && scrub=(--scrub-entries-per-second 0) || scrub=(--scrub-interval-ms 1000)
  "$TERN" serve --listen "127.0.0.1:$port" --data-dir "$data" --namespace default:16 "${scrub[@]}" >"$out/$which-$pair-node.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  "$BENCH" http --url "http://127.0.0.1:$port" --op put --seconds 8 --connections 64 >"$out/$which-$pair-put.json"
  "$BENCH" http --url "http://127.0.0.1:$port" --op get --seconds 8 --connections 64 >"$out/$which-$pair-get.json"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^tern_scrub_(entries|passes)' >"$out/$which-$pair-scrub.txt" || true
  kill "$pid"; wait "$pid" || true
  rm -rf "$data"
}
for ((i = 1; i <= pairs; i++)); do
  for which in off on; do
    echo "== pair $i: scrub $which" >&2
    run "$which" "$i"
  done
done
python3 - "$out" "$pairs" <<'PY'
import json, pathlib, sys
out, pairs = pathlib.Path(sys.argv[1]), int(sys.argv[2])
print("| pair | scrub | GET req/s | GET p99 ms | PUT req/s | PUT p99 ms | entries scrubbed |")
print("|---|---|---:|---:|---:|---:|---:|")
for i in range(1, pairs + 1):
    for which in ("off", "on"):
        get = json.loads((out / f"{which}-{i}-get.json").read_text())
        put = json.loads((out / f"{which}-{i}-put.json").read_text())
        scrub = (out / f"{which}-{i}-scrub.txt").read_text().split("\n")
        entries = next((l.split()[-1] for l in scrub if l.startswith("tern_scrub_entries_total")), "0")
        print(f"| {i} | {which} | {get['throughput_per_s']:,.0f} | {get['p99_us'] / 1000:.2f} | {put['throughput_per_s']:,.0f} | {put['p99_us'] / 1000:.2f} | {int(float(entries)):,} |")
PY
