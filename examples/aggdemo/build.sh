#!/usr/bin/env bash
# Compiles the aggdemo procedure (AssemblyScript) to build/aggdemo.wasm,
# with the compiler pinned in examples/procedures/package.json. The build
# is committed; scripts/test.sh checks it matches a fresh one.
set -euo pipefail
cd "$(dirname "$0")"
(cd ../procedures && npm ci --no-audit --no-fund --loglevel=error)
mkdir -p build
../procedures/node_modules/.bin/asc aggdemo.ts -O3 --runtime incremental --noAssert -o build/aggdemo.wasm
