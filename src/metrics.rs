//! Prometheus metrics, registered once in the default registry and served at
//! `/metrics`. Names carry units last, as Prometheus wants.

use std::sync::LazyLock;

use prometheus::{
    register_gauge_vec, register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec, register_int_gauge,
    register_int_gauge_vec, GaugeVec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
};

/// Buckets from 25 µs to ~6.5 s: reads are microseconds, waits are seconds.
fn latency_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.000_025, 2.0, 19).expect("valid buckets")
}

pub(crate) static HTTP_REQUEST_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "tern_http_request_duration_seconds",
        "HTTP request latency by method, route (the path's pattern) and status class (2xx, 4xx, 5xx)",
        &["method", "route", "status"],
        latency_buckets()
    )
    .expect("metric registers")
});

pub(crate) static FORWARD_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!("tern_forward_duration_seconds", "Latency of one request forwarded to the node that holds its partition", latency_buckets())
        .expect("metric registers")
});

pub(crate) static AUTH_FAILURES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_auth_failures_total",
        "Requests refused for their credentials: missing, invalid, or rate_limited (the source failed too often)",
        &["reason"]
    )
    .expect("metric registers")
});

pub(crate) static CONNECTIONS_REFUSED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_connections_refused_total", "Connections closed as accepted: the node had http_connections_max open")
        .expect("metric registers")
});

pub(crate) static SLOW_CLIENTS_CLOSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_slow_clients_closed_total",
        "Connections closed because the client did not read what it was sent (its queue stayed over its bound)",
        &["protocol"]
    )
    .expect("metric registers")
});

pub(crate) static AUTH_DENIED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_auth_denied_total", "Authenticated requests refused for a missing grant (403)").expect("metric registers")
});

pub(crate) static TLS_HANDSHAKE_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_tls_handshake_failures_total",
        "Connections to the TLS listener whose handshake failed or timed out (plaintext, a refused client certificate, ...)"
    )
    .expect("metric registers")
});

pub(crate) static FIREBASE_REALTIME_CONNECTIONS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("tern_firebase_realtime_connections", "Open Firebase realtime protocol connections (/.ws)").expect("metric registers")
});

pub(crate) static FIREBASE_ONDISCONNECT: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_firebase_ondisconnect_total",
        "onDisconnect registrations fired: by their connection's close, by a sweep (an orphan: its node restarted or died, or its close could not write), or already (another firer's entry applied first: nothing done twice); discarded: not made, the connection's credential was revoked or expired; fired_while_open: a connection found its writes made while it lived (a sweeper took its node for dead) and was closed",
        &["by"]
    )
    .expect("metric registers")
});

pub(crate) static GOSSIP_REJECTED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_gossip_rejected_total",
        "Gossip datagrams dropped before chitchat saw them: forged (the MAC does not verify: no key, another key, tampered), stale (time over 30 s from this node's: replayed), malformed",
        &["reason"]
    )
    .expect("metric registers")
});

pub(crate) static FORWARDS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_forwards_total",
        "Requests forwarded to a holder, by where it is: same_region or other_region (a read served in the \
         caller's region never counts as other_region when that region holds the partition)",
        &["to"]
    )
    .expect("metric registers")
});

pub(crate) static PEER_RTT_SECONDS: LazyLock<GaugeVec> = LazyLock::new(|| {
    register_gauge_vec!(
        "tern_peer_rtt_seconds",
        "Smoothed round trip to a peer node, measured by this node's probes (absent while the peer does not answer: \
         see tern_peer_reachable)",
        &["peer", "region"]
    )
    .expect("metric registers")
});

pub(crate) static PEER_REACHABLE: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!("tern_peer_reachable", "1 when this node's last probe of the peer was answered, 0 when it was not", &["peer", "region"])
        .expect("metric registers")
});

pub(crate) static FORWARD_FAILURES: LazyLock<IntCounter> =
    LazyLock::new(|| register_int_counter!("tern_forward_failures_total", "Forwarded requests that reached no holder").expect("metric registers"));

pub(crate) static SCRUB_ENTRIES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_scrub_entries_total", "Entries of partition stores the scrub read and verified").expect("metric registers")
});

pub(crate) static SCRUB_PASSES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_scrub_passes_total",
        "Scrub passes over a partition's store, by outcome: intact (every record verified and the state hash \
         agrees), changed (every record verified; the store changed during the pass, so the hash was not \
         compared), damaged (damage found: the partition is rebuilt)",
        &["outcome"]
    )
    .expect("metric registers")
});

pub(crate) static SCRUB_LAST_ROUND: LazyLock<prometheus::Gauge> = LazyLock::new(|| {
    prometheus::register_gauge!(
        "tern_scrub_last_round_timestamp_seconds",
        "Unix time the scrub last finished a round over every partition this node serves (0: none yet)"
    )
    .expect("metric registers")
});

pub(crate) static LOG_OFFSETS_ACCEPTED_LOST: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_log_offsets_accepted_lost_total",
        "Log offsets a replica went past without their entries because an operator accepted them as lost \
         (--accept-loss on Kafka: deleted below the partition's start, and no snapshot reached past them)"
    )
    .expect("metric registers")
});

pub(crate) static KAFKA_BATCHES_DAMAGED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_kafka_batches_damaged_total",
        "Kafka record batches fetched that failed their CRC32C check (damaged on a broker's disk or in transit): never \
         applied or passed, fetched again"
    )
    .expect("metric registers")
});

pub(crate) static KAFKA_BOOTSTRAP_READDED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_kafka_bootstrap_readded_total",
        "Times a Kafka client of the node had lost every broker (a Metadata answer named none, as a broker shutting \
         down or starting gives) and its bootstrap servers were added again"
    )
    .expect("metric registers")
});

pub(crate) static KAFKA_PRODUCER_REMADE: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_kafka_producer_remade_total",
        "Times the Kafka producer failed for good (a fatal error: the broker lost its state or sequence) and a new \
         one was made; the writes it held were answered as failed"
    )
    .expect("metric registers")
});

pub(crate) static LOG_READERS_REOPENED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_log_readers_reopened_total",
        "Times a partition's reader delivered nothing for a while though this node knew of acknowledged entries it \
         had not applied (a deposed Kafka leader still answering), and a reader was opened on other brokers"
    )
    .expect("metric registers")
});

pub(crate) static GROUP_PARTITIONS_ASSIGNED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_replica_group_assigned_partitions_total", "Partitions the replica group's consumer group assigned to this node")
        .expect("metric registers")
});

pub(crate) static GROUP_CONSUMER_REBUILT: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_replica_group_consumer_rebuilt_total",
        "Times the replica group's consumer failed for good (fenced by another member with this node's id, a fatal \
         error) and was made again; while it is, the node holds no partition and /readyz says why"
    )
    .expect("metric registers")
});

pub(crate) static GROUP_PARTITIONS_REVOKED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_replica_group_revoked_partitions_total",
        "Partitions the replica group's consumer group revoked from this node (or this node lost)"
    )
    .expect("metric registers")
});

pub(crate) static SNAPSHOT_BYTES_UPLOADED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_snapshot_uploaded_bytes_total",
        "Bytes snapshots uploaded to object storage (chunks not already stored, and manifests)"
    )
    .expect("metric registers")
});

pub(crate) static KAFKA_RETENTION_SHORT: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "tern_kafka_retention_shorter_than_snapshots",
        "1 when the namespace's Kafka topic keeps entries for less than the snapshot interval",
        &["ns"]
    )
    .expect("metric registers")
});

pub(crate) static JOURNAL_SEQUENCED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_journal_sequenced_total", "Journaled writes the sequencer appended to the log").expect("metric registers")
});

pub(crate) static JOURNAL_BACKLOG_ENTRIES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("tern_journal_backlog_entries", "Journaled writes not yet sequenced and applied").expect("metric registers")
});

pub(crate) static JOURNAL_BACKLOG_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("tern_journal_backlog_bytes", "Bytes of the journal's files while it holds writes not yet applied").expect("metric registers")
});

pub(crate) static JOURNAL_OLDEST_AGE_SECONDS: LazyLock<prometheus::Gauge> = LazyLock::new(|| {
    prometheus::register_gauge!("tern_journal_oldest_age_seconds", "How long the journal's oldest write not yet applied has waited")
        .expect("metric registers")
});

pub(crate) static JOURNAL_REPLAYED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_journal_replayed_total", "Journaled writes found not yet applied when this node opened its journal")
        .expect("metric registers")
});

pub(crate) static JOURNAL_OBJECTS_PUT: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_journal_objects_put_total", "Group commits of journaled writes put in object storage (one object each)")
        .expect("metric registers")
});

pub(crate) static JOURNAL_CLAIMS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_journal_claims_total", "Journals of other nodes (lost, their lease expired) this node claimed to replay")
        .expect("metric registers")
});

pub(crate) static JOURNAL_CLAIMED_SEQUENCED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_journal_claimed_sequenced_total", "Writes of claimed journals this node appended to the log")
        .expect("metric registers")
});

pub(crate) static FIREBASE_INDEX_BUILDS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_firebase_index_builds_total", "Firebase query indexes built from a read of their whole location")
        .expect("metric registers")
});

pub(crate) static FIREBASE_INDEX_CHILDREN_UPDATED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_firebase_index_children_updated_total",
        "Children re-read to bring a Firebase query index up to date (instead of a rebuild)"
    )
    .expect("metric registers")
});

pub(crate) static FIREBASE_INDEX_ENTRIES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("tern_firebase_index_entries", "Entries in this node's Firebase query indexes (bounded by INDEX_ENTRIES_MAX)")
        .expect("metric registers")
});

pub(crate) static SNAPSHOT_RESTORES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_snapshot_restores_total", "Partitions restored from a snapshot at start").expect("metric registers")
});

pub(crate) static SNAPSHOT_RECORDS_RESTORED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_snapshot_records_restored_total",
        "Records written into partition stores from snapshots (as a restore streams; a restore that fails its check counts what it wrote)"
    )
    .expect("metric registers")
});

pub(crate) static STORES_SET_ASIDE: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_store_set_aside_total",
        "Partition stores found damaged (a page failing its checksum, a file cut short) and set aside to be rebuilt"
    )
    .expect("metric registers")
});

pub(crate) static NAMESPACES_DELETED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_namespaces_deleted_total", "Namespaces closed on this node because they were deleted (here or through another node)")
        .expect("metric registers")
});

pub(crate) static SNAPSHOT_REJECTED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_snapshot_rejected_total", "Snapshots that failed verification on restore (an older one was tried)")
        .expect("metric registers")
});

pub(crate) static LOG_APPEND_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!("tern_log_append_seconds", "Latency of one append until durable in the log", latency_buckets()).expect("metric registers")
});

pub(crate) static LOG_FSYNC_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!("tern_log_fsync_seconds", "Embedded log: write+fsync time of one group commit", latency_buckets()).expect("metric registers")
});

pub(crate) static LOG_FSYNC_BATCH_ENTRIES: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "tern_log_fsync_batch_entries",
        "Embedded log: entries made durable by one fsync (group commit size)",
        prometheus::exponential_buckets(1.0, 2.0, 13).expect("valid buckets")
    )
    .expect("metric registers")
});

pub(crate) static APPLY_BATCH_ENTRIES: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "tern_apply_batch_entries",
        "Log entries applied by one store transaction",
        prometheus::exponential_buckets(1.0, 2.0, 11).expect("valid buckets")
    )
    .expect("metric registers")
});

pub(crate) static STORE_FSYNC_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!("tern_store_fsync_seconds", "Time of one durable store commit", latency_buckets()).expect("metric registers")
});

pub(crate) static APPLY_SKIPPED_ENTRIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("tern_apply_skipped_entries_total", "Malformed log entries skipped by the apply loop", &["ns", "reason"])
        .expect("metric registers")
});

pub(crate) static APPLY_DUPLICATES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_apply_duplicate_writes_total",
        "Log entries not applied because their write id was applied within the window (retried writes)",
        &["ns"]
    )
    .expect("metric registers")
});

pub(crate) static APPLY_CONDITION_FAILED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("tern_apply_condition_failed_total", "Mutations not applied because a condition failed", &["ns"])
        .expect("metric registers")
});

pub(crate) static PARTITION_APPLIED_NEXT_OFFSET: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "tern_partition_applied_next_offset",
        "This replica's position in the partition: every log offset below it is applied (0: none), as a position \
         NS:PARTITION:OFFSET says; tern_partition_log_end_offset minus it is the lag",
        &["ns", "partition"]
    )
    .expect("metric registers")
});

pub(crate) static PARTITION_LOG_END_OFFSET: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!("tern_partition_log_end_offset", "Next offset to be written to the log", &["ns", "partition"]).expect("metric registers")
});

pub(crate) static PARTITION_STALENESS_SECONDS: LazyLock<GaugeVec> = LazyLock::new(|| {
    register_gauge_vec!(
        "tern_partition_staleness_seconds",
        "Upper bound on how stale this replica's local reads are: time since it was last known to have applied \
         every write the log acknowledged (+Inf: not known yet, as after a start before the log answered)",
        &["ns", "partition"]
    )
    .expect("metric registers")
});

pub(crate) static PARTITION_LAG: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!("tern_partition_lag", "Log entries not yet applied by this replica", &["ns", "partition"]).expect("metric registers")
});

pub(crate) static PARTITION_HELD: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "tern_partition_held",
        "1 when this node holds (serves) the partition; 0 when another member of its replica group does, and this \
         replica's lag and staleness of it say nothing (alerts filter on it)",
        &["ns", "partition"]
    )
    .expect("metric registers")
});

pub(crate) static PARTITION_REBUILDING: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "tern_partition_rebuilding",
        "1 while this replica rebuilds the partition's store (found damaged and set aside); it serves no read until caught up",
        &["ns", "partition"]
    )
    .expect("metric registers")
});

pub(crate) static PARTITION_BLOCKED: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "tern_partition_blocked",
        "1 while this replica's reader cannot read past an entry of the log (a Kafka record batch failing its \
         CRC32C check on the broker it fetches from): it serves its last state, falling behind, and /readyz says why",
        &["ns", "partition"]
    )
    .expect("metric registers")
});

pub(crate) static PARTITION_REFUSED: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "tern_partition_refused",
        "1 when this replica refuses to serve the partition (see /readyz for why)",
        &["ns", "partition"]
    )
    .expect("metric registers")
});

pub(crate) static NODE_READY: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("tern_ready", "1 when /readyz answers ready as of this scrape (every held partition caught up, none refused), else 0")
        .expect("metric registers")
});

pub(crate) static RIPCORD_ENGAGED: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "tern_ripcord_engaged",
        "1 as of this scrape while the log refuses writes and they are journaled instead (acknowledged, not yet sequenced)"
    )
    .expect("metric registers")
});

pub(crate) static BUILD_INFO: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!("tern_build_info", "1, labelled with this binary's version and the commit it was built from", &["version", "commit"])
        .expect("metric registers")
});

/// Registers every family and makes each series whose labels are a closed
/// set (reasons, outcomes, protocols) exist at 0, so an alert on `rate()`
/// or `increase()` sees 0 from the start rather than nothing. Series keyed
/// by a namespace, partition, procedure or peer appear with it (a
/// partition's when its replica opens it). Also the process's own metrics
/// (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds`, ...) and `tern_build_info`. Called once at start.
pub(crate) fn register_every_family() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        force_every_family();
        let closed: [(&IntCounterVec, &[&str]); 8] = [
            (&AUTH_FAILURES, &["missing", "invalid", "rate_limited"]),
            (&SLOW_CLIENTS_CLOSED, &["realtime"]),
            (&FIREBASE_ONDISCONNECT, &["close", "sweep", "already", "discarded", "fired_while_open"]),
            (&GOSSIP_REJECTED, &["forged", "stale", "malformed"]),
            (&FORWARDS, &["same_region", "other_region"]),
            (&SCRUB_PASSES, &["intact", "changed", "damaged"]),
            (&WATCH_RESETS, &["history_gone", "slow_consumer"]),
            (&WATCH_CANCELLED, &["slow_consumer"]),
        ];
        for (family, values) in closed {
            for value in values {
                family.with_label_values(&[*value]);
            }
        }
        // The process collector reads /proc: Linux only (elsewhere the process metrics are absent).
        #[cfg(target_os = "linux")]
        let _ = prometheus::register(Box::new(prometheus::process_collector::ProcessCollector::for_self()));
        BUILD_INFO.with_label_values(&[env!("CARGO_PKG_VERSION"), env!("TERN_GIT_COMMIT")]).set(1);
    });
}

/// The series of a namespace whose labels besides `ns` are a closed set,
/// made at 0 when a replica opens one of its partitions; `skip_reasons`:
/// every reason an entry is skipped for (`codec::Malformed::LABELS`).
pub(crate) fn register_namespace(ns: &str, skip_reasons: &[&str]) {
    for reason in skip_reasons {
        APPLY_SKIPPED_ENTRIES.with_label_values(&[ns, reason]);
    }
    APPLY_DUPLICATES.with_label_values(&[ns]);
    APPLY_CONDITION_FAILED.with_label_values(&[ns]);
}

/// Drops the series of a deleted namespace's partition (its gauges would
/// otherwise show a partition not held, or lagging, for good).
pub(crate) fn forget_partition(ns: &str, partition: u32) {
    let labels = [ns, &partition.to_string()];
    for gauge in [
        &PARTITION_APPLIED_NEXT_OFFSET,
        &PARTITION_HELD,
        &PARTITION_LOG_END_OFFSET,
        &PARTITION_LAG,
        &PARTITION_REFUSED,
        &PARTITION_REBUILDING,
        &PARTITION_BLOCKED,
    ] {
        let _ = gauge.remove_label_values(&labels);
    }
    let _ = PARTITION_STALENESS_SECONDS.remove_label_values(&labels);
}

/// Registers every family above (each is registered on first use).
/// `tests/it/metrics.rs` checks that every family in this file is listed.
fn force_every_family() {
    LazyLock::force(&HTTP_REQUEST_SECONDS);
    LazyLock::force(&FORWARD_SECONDS);
    LazyLock::force(&AUTH_FAILURES);
    LazyLock::force(&CONNECTIONS_REFUSED);
    LazyLock::force(&SLOW_CLIENTS_CLOSED);
    LazyLock::force(&AUTH_DENIED);
    LazyLock::force(&TLS_HANDSHAKE_FAILURES);
    LazyLock::force(&FIREBASE_REALTIME_CONNECTIONS);
    LazyLock::force(&FIREBASE_ONDISCONNECT);
    LazyLock::force(&GOSSIP_REJECTED);
    LazyLock::force(&FORWARDS);
    LazyLock::force(&PEER_RTT_SECONDS);
    LazyLock::force(&PEER_REACHABLE);
    LazyLock::force(&FORWARD_FAILURES);
    LazyLock::force(&SCRUB_ENTRIES);
    LazyLock::force(&SCRUB_PASSES);
    LazyLock::force(&SCRUB_LAST_ROUND);
    LazyLock::force(&LOG_OFFSETS_ACCEPTED_LOST);
    LazyLock::force(&KAFKA_BATCHES_DAMAGED);
    LazyLock::force(&KAFKA_BOOTSTRAP_READDED);
    LazyLock::force(&KAFKA_PRODUCER_REMADE);
    LazyLock::force(&LOG_READERS_REOPENED);
    LazyLock::force(&GROUP_PARTITIONS_ASSIGNED);
    LazyLock::force(&GROUP_CONSUMER_REBUILT);
    LazyLock::force(&GROUP_PARTITIONS_REVOKED);
    LazyLock::force(&SNAPSHOT_BYTES_UPLOADED);
    LazyLock::force(&KAFKA_RETENTION_SHORT);
    LazyLock::force(&JOURNAL_SEQUENCED);
    LazyLock::force(&JOURNAL_BACKLOG_ENTRIES);
    LazyLock::force(&JOURNAL_BACKLOG_BYTES);
    LazyLock::force(&JOURNAL_OLDEST_AGE_SECONDS);
    LazyLock::force(&JOURNAL_REPLAYED);
    LazyLock::force(&JOURNAL_OBJECTS_PUT);
    LazyLock::force(&JOURNAL_CLAIMS);
    LazyLock::force(&JOURNAL_CLAIMED_SEQUENCED);
    LazyLock::force(&FIREBASE_INDEX_BUILDS);
    LazyLock::force(&FIREBASE_INDEX_CHILDREN_UPDATED);
    LazyLock::force(&FIREBASE_INDEX_ENTRIES);
    LazyLock::force(&SNAPSHOT_RESTORES);
    LazyLock::force(&SNAPSHOT_RECORDS_RESTORED);
    LazyLock::force(&STORES_SET_ASIDE);
    LazyLock::force(&NAMESPACES_DELETED);
    LazyLock::force(&SNAPSHOT_REJECTED);
    LazyLock::force(&LOG_APPEND_SECONDS);
    LazyLock::force(&LOG_FSYNC_SECONDS);
    LazyLock::force(&LOG_FSYNC_BATCH_ENTRIES);
    LazyLock::force(&APPLY_BATCH_ENTRIES);
    LazyLock::force(&STORE_FSYNC_SECONDS);
    LazyLock::force(&APPLY_SKIPPED_ENTRIES);
    LazyLock::force(&APPLY_DUPLICATES);
    LazyLock::force(&APPLY_CONDITION_FAILED);
    LazyLock::force(&PARTITION_APPLIED_NEXT_OFFSET);
    LazyLock::force(&PARTITION_LOG_END_OFFSET);
    LazyLock::force(&PARTITION_STALENESS_SECONDS);
    LazyLock::force(&PARTITION_LAG);
    LazyLock::force(&PARTITION_REBUILDING);
    LazyLock::force(&PARTITION_BLOCKED);
    LazyLock::force(&PARTITION_REFUSED);
    LazyLock::force(&WATCHES_OPEN);
    LazyLock::force(&WATCH_RESETS);
    LazyLock::force(&WATCH_CANCELLED);
    LazyLock::force(&WATCH_CONFLATED_EVENTS);
    LazyLock::force(&WATCH_REPLAYED_EVENTS);
    LazyLock::force(&WATCH_DISPATCH_LOST);
    LazyLock::force(&PROCEDURE_RECORDS);
    LazyLock::force(&SOURCE_ENTRIES_UNVERIFIED);
    LazyLock::force(&PROCEDURE_OUTPUTS_REFUSED);
    LazyLock::force(&PROCEDURE_OUTPUTS);
    LazyLock::force(&PROCEDURE_DEAD_LETTERS);
    LazyLock::force(&PROCEDURE_FUEL);
    LazyLock::force(&PROCEDURE_TIMERS_FIRED);
    LazyLock::force(&PROCEDURE_CALL_SECONDS);
    LazyLock::force(&PROCEDURE_TICKS);
    LazyLock::force(&OUTBOX_PUBLISHED);
    LazyLock::force(&OUTBOX_PUBLISH_ERRORS);
    LazyLock::force(&OUTBOX_UNPUBLISHED);
    LazyLock::force(&OUTBOX_PUBLISH_SECONDS);
    LazyLock::force(&OUTBOX_TRANSACTION_STEP_SECONDS);
    LazyLock::force(&PARTITION_HELD);
    LazyLock::force(&NODE_READY);
    LazyLock::force(&RIPCORD_ENGAGED);
    LazyLock::force(&BUILD_INFO);
}

/// Text exposition of every registered metric.
pub(crate) fn render() -> String {
    use prometheus::Encoder;
    let mut out = Vec::new();
    prometheus::TextEncoder::new().encode(&prometheus::gather(), &mut out).expect("text encoding cannot fail");
    String::from_utf8(out).expect("prometheus text is UTF-8")
}

pub(crate) static WATCHES_OPEN: LazyLock<prometheus::IntGauge> = LazyLock::new(|| {
    prometheus::register_int_gauge!("tern_watch_subscribers", "Subscriptions (SSE and WebSocket) this node serves now").expect("metric registers")
});

pub(crate) static WATCH_RESETS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_watch_resets_total",
        "Subscribers sent a reset (the full state) instead of the changes they missed, by reason",
        &["reason"]
    )
    .expect("metric registers")
});

pub(crate) static WATCH_CANCELLED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("tern_watch_cancelled_total", "Subscriptions the node ended, by reason", &["reason"]).expect("metric registers")
});

pub(crate) static WATCH_CONFLATED_EVENTS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_watch_conflated_events_total", "Events sent conflated (latest value per key) to slow state-mode watches")
        .expect("metric registers")
});

pub(crate) static WATCH_REPLAYED_EVENTS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_watch_replayed_events_total", "Events sent to resuming watches from the ring or the log").expect("metric registers")
});

pub(crate) static WATCH_DISPATCH_LOST: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_watch_dispatch_fell_behind_total",
        "Times a partition's dispatcher fell a whole ring behind (its watches resynchronized)"
    )
    .expect("metric registers")
});

/// Buckets from 1 µs to ~1 s: a procedure's call is microseconds when it is healthy.
fn procedure_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.000_001, 2.0, 21).expect("valid buckets")
}

pub(crate) static PROCEDURE_RECORDS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("tern_procedure_records_total", "Input records a procedure was called on (on_record)", &["ns", "procedure"])
        .expect("metric registers")
});

pub(crate) static SOURCE_ENTRIES_UNVERIFIED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "tern_source_entries_unverified_total",
        "Source-topic records with a Tern entry header that does not verify (log/kafka/entry_mac.rs): read as foreign records"
    )
    .expect("metric registers")
});

pub(crate) static PROCEDURE_OUTPUTS_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_procedure_outputs_refused_total",
        "Outbox messages not published: their topic is not the namespace's to write (log/kafka/outputs.rs)",
        &["ns"]
    )
    .expect("metric registers")
});

pub(crate) static PROCEDURE_OUTPUTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("tern_procedure_outputs_total", "Messages procedures emitted into the outbox", &["ns", "procedure"])
        .expect("metric registers")
});

pub(crate) static PROCEDURE_DEAD_LETTERS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_procedure_dead_letters_total",
        "Records (and timers) a procedure failed on (an error, fuel or memory exhausted, a bound passed): sent to its dead-letter topic",
        &["ns", "procedure"]
    )
    .expect("metric registers")
});

pub(crate) static PROCEDURE_FUEL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_procedure_fuel_used_total",
        "Fuel procedures used (interrupts at calls and loop back-edges)",
        &["ns", "procedure"]
    )
    .expect("metric registers")
});

pub(crate) static PROCEDURE_TIMERS_FIRED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("tern_procedure_timers_fired_total", "Timers that fired (on_timer)", &["ns", "procedure"]).expect("metric registers")
});

pub(crate) static PROCEDURE_CALL_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "tern_procedure_call_seconds",
        "Time of one procedure call (on_record or on_timer), effects not included",
        &["ns", "procedure"],
        procedure_buckets()
    )
    .expect("metric registers")
});

pub(crate) static PROCEDURE_TICKS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("tern_procedure_ticks_total", "Ticks this node appended to idle partitions with procedures (their timers fire in log time)")
        .expect("metric registers")
});

pub(crate) static OUTBOX_PUBLISHED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_outbox_published_total",
        "Procedure outputs this node's publishers committed to their Kafka topics (exactly once: one transaction per batch)",
        &["ns"]
    )
    .expect("metric registers")
});

pub(crate) static OUTBOX_PUBLISH_ERRORS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "tern_outbox_publish_errors_total",
        "Outbox publishers that failed (the batch was aborted, nothing of it is visible) and start again from the committed position",
        &["ns"]
    )
    .expect("metric registers")
});

pub(crate) static OUTBOX_UNPUBLISHED: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "tern_outbox_unpublished_messages",
        "Per partition this node publishes: outbox messages not yet published (the publisher's lag; counted up to 100,000)",
        &["ns", "partition"]
    )
    .expect("metric registers")
});

pub(crate) static OUTBOX_PUBLISH_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "tern_outbox_publish_seconds",
        "Time of one publisher transaction (send, position, commit)",
        &["ns"],
        prometheus::exponential_buckets(0.000_5, 2.0, 16).expect("valid buckets")
    )
    .expect("metric registers")
});

pub(crate) static OUTBOX_TRANSACTION_STEP_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "tern_outbox_transaction_step_seconds",
        "Time of each step of one publisher transaction: begin, send (queueing the messages), offsets (adding the position), delivered (the rest of the messages acknowledged), commit (ending the transaction)",
        &["ns", "step"],
        prometheus::exponential_buckets(0.000_5, 2.0, 16).expect("valid buckets")
    )
    .expect("metric registers")
});

/// One procedure's counters on this node since it started (what `tern ns
/// show` prints): the same series `/metrics` exports.
pub(crate) fn procedure_counters(ns: &str, procedure: &str) -> serde_json::Value {
    let labels = [ns, procedure];
    let calls = PROCEDURE_CALL_SECONDS.with_label_values(&labels);
    let count = calls.get_sample_count();
    let mean_us = if count == 0 { 0.0 } else { (calls.get_sample_sum() / count as f64 * 1e7).round() / 10.0 };
    serde_json::json!({
        "records": PROCEDURE_RECORDS.with_label_values(&labels).get(),
        "outputs": PROCEDURE_OUTPUTS.with_label_values(&labels).get(),
        "dead_letters": PROCEDURE_DEAD_LETTERS.with_label_values(&labels).get(),
        "fuel_used": PROCEDURE_FUEL.with_label_values(&labels).get(),
        "timers_fired": PROCEDURE_TIMERS_FIRED.with_label_values(&labels).get(),
        "calls": count,
        "call_us_mean": mean_us,
    })
}

/// Outbox messages not yet published of a partition this node publishes.
pub(crate) fn outbox_unpublished(ns: &str, partition: u32) -> i64 {
    OUTBOX_UNPUBLISHED.with_label_values(&[ns, &partition.to_string()]).get()
}
