#!/usr/bin/env bash
# Two `tern` builds measured in alternating runs by one harness, so the
# machine's drift hits both alike:
#   scripts/bench-alternate.sh OLD_TERN NEW_TERN OUT_DIR [PAIRS]
# Each pair runs, for OLD then NEW: the GET/PUT suite (2 rounds of 8 s) and
# the 10,000-subscriber watch rows (SSE over HTTP/2 and multiplexed
# WebSocket, 300 puts). Results: OUT_DIR/{suite,watch}-{old,new}-N/.
set -euo pipefail
cd "$(dirname "$0")/.."
old="$1" new="$2" out="$3" pairs="${4:-2}"
scripts/setup.sh bench
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
cargo build --release --quiet --workspace
BENCH="$CARGO_TARGET_DIR/release/tern-bench"
for ((i = 1; i <= pairs; i++)); do
  for which in old new; do
    tern="$old"
    [[ "$which" == new ]] && tern="$new"
    echo "== pair $i: $which ($tern)" >&2
    "$BENCH" --tern "$tern" suite --out "$out/suite-$which-$i" --seconds 8 --rounds 2
    "$BENCH" --tern "$tern" watch --out "$out/watch-$which-$i" --subscribers 10000 --runs sse-h2,ws-mux --puts 300
  done
done
