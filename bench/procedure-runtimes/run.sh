#!/usr/bin/env bash
# Measures the procedure runtime candidates (issue 23); see src/main.rs.
#   bench/procedure-runtimes/run.sh [RECORDS]
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
(cd guests && npm ci --no-audit --no-fund --loglevel=error && npx asc assembly/index.ts -O3 --runtime stub --noAssert -o aggdemo_step.wasm)
cargo build --release --quiet
"$CARGO_TARGET_DIR/release/procedure-runtimes" "${1:-300000}" guests
