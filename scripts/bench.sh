#!/usr/bin/env bash
# The benchmark suite, run by `tern-bench` (bench/, a program of its own):
# Tern, the hello server and etcd measured in one run.
# Results: bench/results/latest/{results.json,results.md,results.png}.
# Extra arguments go to `tern-bench suite` (e.g. --seconds 20).
#   scripts/bench.sh kafka [ARGS]    instead runs `tern-bench kafka`: Tern on Apache Kafka next to
#                                    Kafka's EndToEndLatency and ProducerPerformance (results: kafka.json/md).
#   scripts/bench.sh watch [ARGS]    instead runs `tern-bench watch`: put → event latency at 1,000 and
#                                    10,000 subscribers (SSE, WebSocket) next to etcd's watch and two SSE fan-out floors (results: watch.json/md).
#   scripts/bench.sh firebase [ARGS] instead runs `tern-bench firebase`: Firebase REST GET of a small node next to
#                                    /v1 GET and hello, and a 10 MB tree written and read (results: firebase.json/md).
#   scripts/bench.sh journal [ARGS]  instead runs `tern-bench journal`: PUT acknowledgement, sequenced next to
#                                    journaled (durability=journaled), alternating rounds (results: journal.json/md).
#   scripts/bench.sh security [ARGS] instead runs `tern-bench security`: GET and PUT with authentication, TLS, both and
#                                    neither, alternating rounds (results: security.json/md).
#   scripts/bench.sh regions [ARGS]  instead runs `tern-bench regions`: the three-region bed (scripts/regions.sh,
#                                    30 ms one way): GET in region with and without the delay, put → visible in another
#                                    region next to Kafka alone through the same proxies, PUT throughput (RF 3) next to
#                                    librdkafka alone, and the write gap when a region is cut (results: regions.json/md).
#   scripts/bench.sh read-path [ARGS] instead runs `tern-bench read-path`: GET against the bare hello server, with and
#                                    without an API key, alternating rounds, median ratios (results: read-path.json/md).
#   scripts/bench.sh kafka-put [ARGS] instead runs `tern-bench kafka-put`: single-record PUT through Kafka against
#                                    librdkafka alone, alternating rounds, CPU per record (results: kafka-put.json/md).
#   scripts/bench.sh procedures [ARGS] instead runs `tern-bench procedures`: the same batched writes into a namespace
#                                    without a procedure and one running aggdemo, alternating rounds (results: procedures.json/md).
#   scripts/bench.sh aggdemo [ARGS]  instead runs `tern-bench aggdemo`: issue 23's workload from Kafka to Kafka through
#                                    Tern (records/s, violations, latency, CPU per record of each process) next to a
#                                    floor that consumes and produces without Tern (results: aggdemo.json/md).
#   scripts/bench.sh snapshot [ARGS] instead runs `tern-bench snapshot`: snapshot and restore of one
#                                    partition of 1,000,000 records, file:// and S3 (results: snapshot.json/md).
#   scripts/bench.sh scale [ARGS]    instead runs `tern-bench scale`: 1M and 10M records (--records 1000000,10000000,100000000
#                                    for 100M) against 10,000: load, GET, list, watch, PUT, RSS, disk, snapshot and restore
#                                    (results: scale.json/md/png).
# `--tern PATH` measures another `tern` binary (e.g. an older build, for alternating runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh bench
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
cargo build --release --quiet --workspace
BENCH="$CARGO_TARGET_DIR/release/tern-bench"
case "${1:-}" in
  snapshot | scale | watch | kafka | firebase | journal | security | read-path | kafka-put | regions | procedures | aggdemo)
    suite="$1"
    shift
    exec "$BENCH" "$suite" --out bench/results/latest "$@"
    ;;
esac
exec "$BENCH" suite --out bench/results/latest "$@"
