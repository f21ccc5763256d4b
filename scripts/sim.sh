#!/usr/bin/env bash
# The deterministic simulation (src/sim/) over many seeds:
#   scripts/sim.sh --seeds N [--first S]
# Each seed is one reproducible run; a failing seed is printed with the
# command that replays it (TERN_SIM_SEED=<seed> cargo test --release --lib sim::tests::replay).
# CI runs the fixed seeds as part of the unit tests (cargo test --lib sim::).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=10000
first=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --first) first="$2"; shift 2 ;;
    *) echo "usage: scripts/sim.sh [--seeds N] [--first S]" >&2; exit 2 ;;
  esac
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
TERN_SIM_SEEDS="$seeds" TERN_SIM_FIRST="$first" \
  cargo test --release -p tern --lib sim::tests::fixed_seeds_keep_every_guarantee -- --nocapture
