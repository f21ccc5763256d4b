#!/usr/bin/env bash
# Runs Tern's fuzz targets (src/fuzz.rs) with libFuzzer, coverage-guided:
#   scripts/fuzz.sh TARGET [SECONDS]     one target (default 600 s); "T1 T2" several
#   scripts/fuzz.sh all [SECONDS]        every target in turn
#   scripts/fuzz.sh list                 the targets
# Installs what it needs (the nightly toolchain, cargo-fuzz). Every target
# starts from fuzz/corpus/TARGET and adds what it finds there; a crash is
# written to fuzz/artifacts/TARGET/ and the run stops: fix it, then copy the
# input into fuzz/corpus/TARGET/ so every run (the test command's too) replays it.
# Prints one summary line per target: executions, seconds, crashes.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${TERN_FUZZ_TARGET_DIR:-$HOME/.cache/tern-fuzz-target}"

targets() { sed -n 's/^    ("\([a-z0-9_]*\)", [a-z0-9_]*),$/\1/p' src/fuzz.rs; }

if [[ "${1:-}" == "list" || -z "${1:-}" ]]; then targets; exit 0; fi
seconds="${2:-600}"

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

# Every target, built once (debug assertions on, as cargo-fuzz does).
build_all() {
  (cd fuzz && cargo +nightly fuzz build --sanitizer none)
}

run_one() {
  local target="$1" log
  log="$(mktemp)"
  mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
  local status=0
  # The corpus is copied: what the run adds stays out of the repository
  # unless a person keeps it.
  local work; work="$(mktemp -d)"
  cp -r "fuzz/corpus/$target/." "$work/"
  # The binary built by `build_all`: a run never rebuilds, so sources
  # edited meanwhile change nothing under way.
  (cd fuzz && "$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/$target" "$work" \
      -max_total_time="$seconds" -max_len=16384 -rss_limit_mb=4096 \
      -artifact_prefix="artifacts/$target/" >"$log" 2>&1) || status=$?
  local runs; runs="$(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' | tail -1 || true)"
  [[ -z "$runs" ]] && runs="$(grep -o '#[0-9]*' "$log" | tail -1 | tr -d '#' || true)"
  local crashes; crashes="$(ls "fuzz/artifacts/$target" 2>/dev/null | wc -l)"
  echo "fuzz $target: ${runs:-0} executions in $seconds s, $crashes crashes (exit $status)"
  if [[ $status -ne 0 ]]; then tail -40 "$log"; fi
  rm -rf "$work" "$log"
  return "$status"
}

build_all
if [[ "$1" == "all" ]]; then
  failed=0
  for target in $(targets); do run_one "$target" || failed=1; done
  exit "$failed"
fi
# One target, or several separated by spaces.
failed=0
for target in $1; do run_one "$target" || failed=1; done
exit "$failed"
