#!/usr/bin/env bash
# Compiles the AssemblyScript procedures here to WebAssembly (build/*.wasm).
# The test guests (counter, timers) are committed; scripts/test.sh checks
# they match a fresh build.
#   examples/procedures/build.sh [NAME...]
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
mkdir -p build
names=("$@")
((${#names[@]})) || names=(counter timers ticker)
for name in "${names[@]}"; do
  npx asc "assembly/$name.ts" -O3 --runtime incremental --noAssert -o "build/$name.wasm"
done
