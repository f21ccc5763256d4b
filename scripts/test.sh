#!/usr/bin/env bash
# The full test suite: unit tests, integration tests against real `tern`
# processes, crash tests. One release build serves tests and benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
# The procedure test guests (WebAssembly built from AssemblyScript, read by
# the tests) are committed: they must match their sources.
examples/procedures/build.sh >/dev/null
examples/aggdemo/build.sh >/dev/null
git diff --exit-code --quiet -- examples/procedures/build examples/aggdemo/build \
  || { echo "examples/procedures/build or examples/aggdemo/build is stale: run their build.sh and commit the result"; exit 1; }
# The formatter and the linter hold (rustfmt.toml; Cargo.toml's [lints],
# warnings are errors), before anything is built for the tests.
cargo fmt --all --check || { echo "the code is not formatted: run cargo fmt --all and commit the result"; exit 1; }
cargo clippy --release --workspace --all-targets -- -D warnings
cargo build --release --workspace --all-targets
# A real Kafka broker for the Kafka tests, on a free loopback port, stopped on exit.
KAFKA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/tern-test-kafka.XXXXXX")"
# A real S3-compatible server (moto) for the snapshot tests, likewise.
S3_DIR="$(mktemp -d "${TMPDIR:-/tmp}/tern-test-s3.XXXXXX")"
trap 'scripts/kafka.sh stop --dir "$KAFKA_DIR" || true; rm -rf "$KAFKA_DIR"; scripts/s3.sh stop --dir "$S3_DIR" || true; rm -rf "$S3_DIR"' EXIT
TERN_TEST_S3="$(scripts/s3.sh start --dir "$S3_DIR" | tail -1)"
export TERN_TEST_S3
echo "test S3 server: $TERN_TEST_S3"
TERN_TEST_KAFKA="$(scripts/kafka.sh start --dir "$KAFKA_DIR" | tail -1)"
export TERN_TEST_KAFKA
export TERN_TEST_KAFKA_DIR="$KAFKA_DIR"
echo "test Kafka broker: $TERN_TEST_KAFKA"
LOG="${TMPDIR:-/tmp}/tern-test.log"
set +e
cargo test --release --workspace --all-targets 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
# The TypeScript client against a real `tern`, then the demo page and the
# console in Debian's chromium (playwright-core drives it; the screenshots
# land in test-artifacts/).
# Its compiled dist/ is embedded in the binary: it must match its sources.
export TERN_BIN="$CARGO_TARGET_DIR/release/tern"
(
  set -e
  cd clients/typescript
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
  git diff --exit-code -- dist || { echo "clients/typescript/dist is stale: run npm run build there and commit it"; exit 1; }
  # Bounded: a test over 2 minutes fails, and the runner exits when the
  # tests are done even if a failed one left a watch reconnecting.
  node --test --test-concurrency=1 --test-timeout=120000 --test-force-exit --test-reporter=tap test/*.test.mjs test/demo.browser.mjs test/console.browser.mjs
) 2>&1 | tee -a "$LOG"
ts_status=${PIPESTATUS[0]}
# The official Firebase SDKs for JavaScript (`firebase` v12, `firebase-admin`)
# over the realtime protocol against real `tern` nodes, then the Firebase demo
# page in chromium (docs/firebase.md).
(
  set -e
  cd tests/firebase-js
  npm ci --no-audit --no-fund --loglevel=error
  node --test --test-concurrency=1 --test-timeout=180000 --test-force-exit --test-reporter=tap *.test.mjs
) 2>&1 | tee -a "$LOG"
fb_js_status=${PIPESTATUS[0]}
# The official Firebase Admin SDK for Python against a real `tern dev`
# (docs/firebase.md), from a venv kept beside the shared target directory.
FIREBASE_VENV="${TERN_FIREBASE_VENV:-$HOME/.cache/tern-firebase-venv}"
FIREBASE_ADMIN_VERSION=6.9.0
(
  set -e
  if ! "$FIREBASE_VENV/bin/python" -c "import firebase_admin, pytest; assert firebase_admin.__version__ == '$FIREBASE_ADMIN_VERSION'" 2>/dev/null; then
    python3 -m venv "$FIREBASE_VENV"
    "$FIREBASE_VENV/bin/pip" install -q "firebase-admin==$FIREBASE_ADMIN_VERSION" pytest
  fi
  "$FIREBASE_VENV/bin/python" -m pytest tests/firebase -q -p no:cacheprovider
) 2>&1 | tee -a "$LOG"
py_status=${PIPESTATUS[0]}
# The Python client (clients/python, sync and asyncio) against real `tern
# dev` nodes, from a venv of its own beside the target directory.
PY_CLIENT_VENV="${TERN_PY_CLIENT_VENV:-$HOME/.cache/tern-python-client-venv}"
(
  set -e
  if ! "$PY_CLIENT_VENV/bin/python" -c "import httpx, pytest; assert httpx.__version__ == '0.28.1'" 2>/dev/null; then
    python3 -m venv "$PY_CLIENT_VENV"
    "$PY_CLIENT_VENV/bin/pip" install -q "httpx==0.28.1" "pytest==8.3.4"
  fi
  cd clients/python
  "$PY_CLIENT_VENV/bin/python" -m pytest tests -q -p no:cacheprovider
) 2>&1 | tee -a "$LOG"
py_client_status=${PIPESTATUS[0]}
# The API's OpenAPI description, validated by a standard validator
# (tests/it/openapi.rs checks it against the route table).
OPENAPI_VENV="${TERN_OPENAPI_VENV:-$HOME/.cache/tern-openapi-venv}"
(
  set -e
  if ! "$OPENAPI_VENV/bin/python" -c "import openapi_spec_validator" 2>/dev/null; then
    python3 -m venv "$OPENAPI_VENV"
    "$OPENAPI_VENV/bin/pip" install -q "openapi-spec-validator==0.7.1"
  fi
  "$OPENAPI_VENV/bin/python" -m openapi_spec_validator src/api/openapi.json
) 2>&1 | tee -a "$LOG"
openapi_status=${PIPESTATUS[0]}
# The Go client (clients/go, the standard library only) likewise.
(
  set -e
  cd clients/go
  go vet ./...
  go test -count=1 -v ./... | grep -E '^(--- |=== RUN|ok|FAIL|panic)'
  exit "${PIPESTATUS[0]}"
) 2>&1 | tee -a "$LOG"
go_client_status=${PIPESTATUS[0]}
# The Debian package: built from this build, installed with dpkg into a
# scratch root, started from there as its own user, removed and purged.
(
  set -e
  deb="$(scripts/package.sh)"
  scripts/test-package.sh "$deb"
) 2>&1 | tee -a "$LOG"
package_status=${PIPESTATUS[0]}
set -e
# Why each failed Rust test failed, gathered at the end where a short tail
# of this output shows it (the panics are otherwise far above, among the
# nodes' logs): each panic's first lines, at most 120 lines in all.
awk '/^---- .* stdout ----$/ { name = $0 } /panicked at/ && name != "" { print name; left = 8 }
     left > 0 && !/^\x1b\[/ { print; left-- }' "$LOG" | head -n 120
# One closing line over every test binary and the client's tests.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^# pass / { p += $3 } /^# fail / { f += $3 }
     /^--- PASS: / { p++ } /^--- FAIL: / { f++ }
     /^package: [0-9]+ checks passed/ { p += $2 } /^package: FAILED/ { f++ }
     !/^test result:/ && / in [0-9.]+s( \([0-9:]+\))?$/ && /(passed|failed)/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$LOG"
if ((status != 0)); then exit "$status"; fi
if ((ts_status != 0)); then exit "$ts_status"; fi
if ((fb_js_status != 0)); then exit "$fb_js_status"; fi
if ((py_status != 0)); then exit "$py_status"; fi
if ((py_client_status != 0)); then exit "$py_client_status"; fi
if ((openapi_status != 0)); then exit "$openapi_status"; fi
if ((package_status != 0)); then exit "$package_status"; fi
exit "$go_client_status"
