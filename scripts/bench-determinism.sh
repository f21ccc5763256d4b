#!/usr/bin/env bash
# What issue 36 (determinism) costs, two `tern` builds in alternating runs
# measured by one harness, so the machine's drift hits both alike:
#   scripts/bench-determinism.sh OLD_TERN NEW_TERN OUT_DIR [PAIRS]
# Each pair runs both builds, the old first in odd pairs and the new first
# in even ones (so the order within a pair is not taken for the build):
# - a procedure's cost per record (aggdemo against no procedure, 2 rounds
#   of 200,000 records): each call now runs on a fresh instance image;
# - PUT acknowledgement, sequenced next to journaled (3 rounds of 10 s, the
#   embedded log and Kafka): ripcord is now per partition, each journaled
#   write carries its place in its lane.
# Results: OUT_DIR/{procedures,journal}-{old,new}-N/. TERN_BENCH: a
# harness to use as is (default: this tree's, built first).
set -euo pipefail
cd "$(dirname "$0")/.."
old="$1" new="$2" out="$3" pairs="${4:-2}"
scripts/setup.sh bench
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
BENCH="${TERN_BENCH:-}"
if [[ -z "$BENCH" ]]; then
  cargo build --release --quiet --workspace
  BENCH="$CARGO_TARGET_DIR/release/tern-bench"
fi
for ((i = 1; i <= pairs; i++)); do
  order="old new"
  ((i % 2 == 0)) && order="new old"
  for which in $order; do
    tern="$old"
    [[ "$which" == new ]] && tern="$new"
    echo "== pair $i: $which ($tern)" >&2
    "$BENCH" --tern "$tern" procedures --out "$out/procedures-$which-$i" --rounds 2 --records 200000
    "$BENCH" --tern "$tern" journal --out "$out/journal-$which-$i" --rounds 3 --configs embedded,kafka
  done
done
