#!/usr/bin/env bash
# The benchmark suite: Tern, the hello server and etcd measured in one run.
# Results: bench/results/latest/{results.json,results.md,results.png}.
# Extra arguments go to `tern bench suite` (e.g. --seconds 20).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh bench
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
cargo build --release --quiet
exec "$CARGO_TARGET_DIR/release/tern" bench suite --out bench/results/latest "$@"
