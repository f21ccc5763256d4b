#!/usr/bin/env bash
# Runs one Tern node with the embedded log: `tern dev`, built if needed.
# Extra arguments go to `tern dev` (e.g. --listen 127.0.0.1:7070 --data-dir ./tern-data).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
cargo build --release --quiet --workspace
exec "$CARGO_TARGET_DIR/release/tern" dev "$@"
