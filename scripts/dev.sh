#!/usr/bin/env bash
# Runs one Tern node with the embedded log: `tern dev`, built if needed.
# Extra arguments go to `tern dev` (e.g. --listen 127.0.0.1:7070 --data-dir ./tern-data).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what building needs: no Java, Maven, Node.js or chromium to start a node.
scripts/setup.sh build
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
cargo build --release --quiet -p tern --bin tern
exec "$CARGO_TARGET_DIR/release/tern" dev "$@"
