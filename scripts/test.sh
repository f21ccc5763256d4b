#!/usr/bin/env bash
# The full test suite: unit tests, integration tests against real `tern`
# processes, crash tests. One release build serves tests and benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
cargo build --release --all-targets
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
set +e
cargo test --release --all-targets 2>&1 | tee "${TMPDIR:-/tmp}/tern-test.log"
status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "${TMPDIR:-/tmp}/tern-test.log"
exit "$status"
