//! Node settings: defaults, overridden by a TOML config file, overridden by
//! `TERN_*` environment variables and command-line flags (clap merges those
//! two, flags winning). Every setting has the same name in all three places:
//! `data_dir` in the file is `TERN_DATA_DIR` and `--data-dir`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub node_id: String,
    pub listen: String,
    pub data_dir: PathBuf,
    /// `embedded`, or `kafka://HOST:PORT[,HOST:PORT]`.
    pub log: String,
    pub region: String,
    pub group: String,
    /// UDP `IP:PORT` to gossip on; unset: this node is alone (no routing).
    pub gossip: Option<String>,
    /// Gossip addresses of other nodes to join through.
    pub seeds: Vec<String>,
    /// How often gossip rounds run.
    pub gossip_interval_ms: u64,
    /// Object store URL for partition snapshots (`file:///dir`, `s3://bucket/prefix`, ...).
    pub snapshots: Option<String>,
    /// Object store settings (object_store config keys, e.g. `aws_endpoint`,
    /// `aws_region`, `aws_access_key_id`, `aws_secret_access_key`,
    /// `aws_allow_http`); they override the standard AWS_* environment.
    pub snapshot_options: std::collections::BTreeMap<String, String>,
    /// Whether this node writes snapshots (any node restores).
    pub snapshot_writer: bool,
    /// Longest time between two snapshots of a partition that changed.
    pub snapshot_interval_ms: u64,
    /// Snapshot a partition sooner once this many entries were applied since its last one.
    pub snapshot_entries: u64,
    /// Snapshots kept per partition.
    pub snapshot_retain: usize,
    /// Embedded log: roll segments at this size.
    pub log_segment_bytes: u64,
    /// Embedded log: delete old segments past this total size (never ones still needed locally).
    pub log_retention_bytes: Option<u64>,
    /// Embedded log: delete segments older than this (never ones still needed locally).
    pub log_retention_ms: Option<u64>,
    /// Embedded log: how often retention runs.
    pub log_retention_check_ms: u64,
    /// Per partition store: redb page cache.
    pub store_cache_bytes: usize,
    /// How often each store is made durable.
    pub store_fsync_interval_ms: u64,
    /// Most log entries applied per store transaction.
    pub apply_batch_max: usize,
    /// Least time between two commits of a busy partition's store.
    pub apply_linger_ms: u64,
    /// `text` or `json` logs.
    pub log_format: String,
    /// Kafka log: topic of namespace N is `<prefix>N`.
    pub kafka_topic_prefix: String,
    /// Kafka log: replication factor of the topics Tern creates.
    pub kafka_replication_factor: i32,
    /// Kafka log: `min.insync.replicas` of the topics Tern creates.
    pub kafka_min_insync_replicas: i32,
    /// Kafka log: `group` (the replica group is a Kafka consumer group that
    /// shares the partitions among its members; alone, a node gets them all),
    /// `assign` (hold every partition, no consumer group), or `auto`: `group`
    /// when the node gossips (it can forward requests for partitions others
    /// hold), `assign` when it does not.
    pub kafka_membership: String,
    /// Kafka log: how long the producer waits to batch writes (`linger.ms`).
    pub kafka_linger_ms: u64,
    /// Kafka log: the longest the broker holds a fetch for more data
    /// (`fetch.wait.max.ms`): at most this much added visibility delay.
    pub kafka_fetch_wait_max_ms: u64,
    /// Kafka log: bytes the broker gathers before answering a fetch
    /// (`fetch.min.bytes`); fewer fetches under load, more write throughput.
    pub kafka_fetch_min_bytes: usize,
    /// Kafka log, `group` membership: how long the group waits for a silent
    /// member before moving its partitions to the others.
    pub kafka_session_timeout_ms: u64,
    /// API: a connection with no request in flight is closed after this long
    /// without a byte of a request (HTTP/1.1 between requests and within a
    /// request's head; any connection before its first byte). Longer than
    /// clients keep idle connections open (reqwest: 90 s), so they close
    /// first and a request never races the close.
    pub http_idle_ms: u64,
    /// Subscriptions: events one subscriber's queue holds before it is
    /// conflated (`mode=state`) or cancelled (`mode=log`).
    pub watch_queue_events_max: usize,
    /// Subscriptions: bytes one subscriber's queue holds (same consequences).
    pub watch_queue_bytes_max: usize,
    /// Subscriptions: how often an idle subscriber gets its advanced position (`progress`).
    pub watch_progress_ms: u64,
    /// Subscriptions: how often a quiet subscription gets a `keep-alive` event.
    pub watch_keep_alive_ms: u64,
    /// Subscriptions: most a node serves at once.
    pub watch_subscribers_max: usize,
    /// Subscriptions: recent events each partition keeps in memory for
    /// resuming subscribers (older history is read from the log).
    pub watch_ring_events_max: usize,
    /// Subscriptions: bytes of recent events each partition keeps.
    pub watch_ring_bytes_max: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node_id: "node-1".into(),
            listen: "127.0.0.1:7070".into(),
            data_dir: PathBuf::from("./tern-data"),
            log: "embedded".into(),
            region: "local".into(),
            group: "default".into(),
            gossip: None,
            seeds: Vec::new(),
            gossip_interval_ms: 200,
            snapshots: None,
            snapshot_options: std::collections::BTreeMap::new(),
            snapshot_writer: true,
            snapshot_interval_ms: 60_000,
            snapshot_entries: 100_000,
            snapshot_retain: 3,
            log_segment_bytes: 64 * 1024 * 1024,
            log_retention_bytes: None,
            log_retention_ms: None,
            log_retention_check_ms: 10_000,
            store_cache_bytes: 32 * 1024 * 1024,
            http_idle_ms: 120_000,
            store_fsync_interval_ms: 1000,
            apply_batch_max: 1000,
            apply_linger_ms: 1,
            log_format: "text".into(),
            kafka_topic_prefix: "tern.".into(),
            kafka_replication_factor: 1,
            kafka_min_insync_replicas: 1,
            kafka_membership: "auto".into(),
            kafka_session_timeout_ms: 10_000,
            kafka_linger_ms: 1,
            kafka_fetch_wait_max_ms: 2,
            kafka_fetch_min_bytes: 16 * 1024,
            watch_queue_events_max: 4096,
            watch_queue_bytes_max: 8 * 1024 * 1024,
            watch_progress_ms: 2_000,
            watch_keep_alive_ms: 15_000,
            watch_subscribers_max: 100_000,
            watch_ring_events_max: 8192,
            watch_ring_bytes_max: 4 * 1024 * 1024,
        }
    }
}

impl Settings {
    /// Whether this node joins its replica group's Kafka consumer group.
    pub fn kafka_group_membership(&self) -> bool {
        match self.kafka_membership.as_str() {
            "group" => true,
            "assign" => false,
            _ => self.gossip.is_some(),
        }
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
    }

    /// Checks values that cannot be checked by their type.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.node_id.is_empty(), "node_id must not be empty");
        anyhow::ensure!(self.log_segment_bytes >= 1024 * 1024, "log_segment_bytes must be at least 1 MiB");
        anyhow::ensure!(self.log_segment_bytes <= 1024 * 1024 * 1024, "log_segment_bytes must be at most 1 GiB");
        anyhow::ensure!((1..=10_000).contains(&self.apply_batch_max), "apply_batch_max must be 1..=10000");
        anyhow::ensure!(self.apply_linger_ms <= 100, "apply_linger_ms must be at most 100");
        anyhow::ensure!((1_000..=3_600_000).contains(&self.http_idle_ms), "http_idle_ms must be 1000..=3600000");
        anyhow::ensure!(self.store_cache_bytes >= 1024 * 1024, "store_cache_bytes must be at least 1 MiB");
        anyhow::ensure!(
            (1..=60_000).contains(&self.store_fsync_interval_ms),
            "store_fsync_interval_ms must be 1..=60000"
        );
        anyhow::ensure!(matches!(self.log_format.as_str(), "text" | "json"), "log_format must be text or json");
        anyhow::ensure!((1..=16).contains(&self.kafka_replication_factor), "kafka_replication_factor must be 1..=16");
        anyhow::ensure!(
            (1..=self.kafka_replication_factor).contains(&self.kafka_min_insync_replicas),
            "kafka_min_insync_replicas must be 1..=kafka_replication_factor"
        );
        anyhow::ensure!(
            matches!(self.kafka_membership.as_str(), "auto" | "group" | "assign"),
            "kafka_membership must be `auto`, `group` or `assign`, got {:?}",
            self.kafka_membership
        );
        anyhow::ensure!(
            (1_000..=1_800_000).contains(&self.kafka_session_timeout_ms),
            "kafka_session_timeout_ms must be 1000..=1800000"
        );
        anyhow::ensure!(!self.group.is_empty(), "group must not be empty");
        anyhow::ensure!((1_000..=86_400_000).contains(&self.snapshot_interval_ms), "snapshot_interval_ms must be 1000..=86400000");
        anyhow::ensure!((100..=3_600_000).contains(&self.log_retention_check_ms), "log_retention_check_ms must be 100..=3600000");
        anyhow::ensure!(self.snapshot_entries >= 1, "snapshot_entries must be at least 1");
        anyhow::ensure!((1..=1_000).contains(&self.snapshot_retain), "snapshot_retain must be 1..=1000");
        anyhow::ensure!(self.kafka_linger_ms <= 1_000, "kafka_linger_ms must be at most 1000");
        anyhow::ensure!((1..=1_000).contains(&self.kafka_fetch_wait_max_ms), "kafka_fetch_wait_max_ms must be 1..=1000");
        anyhow::ensure!(
            (1..=16 * 1024 * 1024).contains(&self.kafka_fetch_min_bytes),
            "kafka_fetch_min_bytes must be 1..=16777216"
        );
        anyhow::ensure!(
            !(self.kafka_membership == "group" && self.gossip.is_none()),
            "kafka_membership = group needs gossip: a node that shares partitions must be able to forward \
             requests for the ones it does not hold (set gossip, or use kafka_membership = assign)"
        );
        anyhow::ensure!((10..=10_000).contains(&self.gossip_interval_ms), "gossip_interval_ms must be 10..=10000");
        anyhow::ensure!((1..=1_000_000).contains(&self.watch_queue_events_max), "watch_queue_events_max must be 1..=1000000");
        anyhow::ensure!(
            (64 * 1024..=1024 * 1024 * 1024).contains(&self.watch_queue_bytes_max),
            "watch_queue_bytes_max must be 65536..=1073741824"
        );
        anyhow::ensure!((10..=600_000).contains(&self.watch_progress_ms), "watch_progress_ms must be 10..=600000");
        anyhow::ensure!((100..=600_000).contains(&self.watch_keep_alive_ms), "watch_keep_alive_ms must be 100..=600000");
        anyhow::ensure!((1..=10_000_000).contains(&self.watch_subscribers_max), "watch_subscribers_max must be 1..=10000000");
        anyhow::ensure!((1..=10_000_000).contains(&self.watch_ring_events_max), "watch_ring_events_max must be 1..=10000000");
        anyhow::ensure!(
            (1024..=1024 * 1024 * 1024).contains(&self.watch_ring_bytes_max),
            "watch_ring_bytes_max must be 1024..=1073741824"
        );
        anyhow::ensure!(
            self.log == "embedded" || self.log.strip_prefix("kafka://").is_some_and(|hosts| !hosts.is_empty()),
            "log must be `embedded` or kafka://HOST:PORT[,HOST:PORT], got {:?}",
            self.log
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_kafka_and_snapshot_settings_are_checked() {
        let bad = |change: fn(&mut Settings), needle: &str| {
            let mut s = Settings::default();
            change(&mut s);
            let error = s.validate().unwrap_err().to_string();
            assert!(error.contains(needle), "{error}");
        };
        bad(|s| s.kafka_membership = "sometimes".into(), "kafka_membership must be");
        bad(|s| s.kafka_membership = "group".into(), "needs gossip");
        bad(|s| s.kafka_session_timeout_ms = 10, "kafka_session_timeout_ms");
        bad(|s| s.kafka_linger_ms = 5_000, "kafka_linger_ms");
        bad(|s| s.kafka_fetch_wait_max_ms = 0, "kafka_fetch_wait_max_ms");
        bad(|s| s.kafka_fetch_min_bytes = 0, "kafka_fetch_min_bytes");
        bad(|s| s.gossip_interval_ms = 1, "gossip_interval_ms");
        bad(|s| s.group = String::new(), "group must not be empty");
        bad(|s| s.snapshot_interval_ms = 10, "snapshot_interval_ms");
        bad(|s| s.snapshot_entries = 0, "snapshot_entries");
        bad(|s| s.snapshot_retain = 0, "snapshot_retain");
        bad(|s| s.log_retention_check_ms = 1, "log_retention_check_ms");
        bad(|s| s.watch_queue_events_max = 0, "watch_queue_events_max");
        bad(|s| s.watch_queue_bytes_max = 10, "watch_queue_bytes_max");
        bad(|s| s.watch_progress_ms = 0, "watch_progress_ms");
        bad(|s| s.watch_keep_alive_ms = 1, "watch_keep_alive_ms");
        bad(|s| s.watch_subscribers_max = 0, "watch_subscribers_max");
        bad(|s| s.watch_ring_events_max = 0, "watch_ring_events_max");
        bad(|s| s.watch_ring_bytes_max = 0, "watch_ring_bytes_max");
        let mut s = Settings::default();
        assert!(!s.kafka_group_membership(), "auto without gossip: hold every partition");
        s.gossip = Some("127.0.0.1:7946".into());
        assert!(s.kafka_group_membership(), "auto with gossip: join the replica group");
        s.kafka_membership = "group".into();
        s.validate().unwrap();
    }

    #[test]
    fn file_overrides_defaults_and_rejects_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tern.toml");
        std::fs::write(&path, "node_id = \"n7\"\nstore_fsync_interval_ms = 250\n").unwrap();
        let s = Settings::from_file(&path).unwrap();
        assert_eq!(s.node_id, "n7");
        assert_eq!(s.store_fsync_interval_ms, 250);
        assert_eq!(s.listen, "127.0.0.1:7070");
        s.validate().unwrap();
        std::fs::write(&path, "node_idd = \"x\"\n").unwrap();
        assert!(Settings::from_file(&path).unwrap_err().to_string().contains("node_idd"));
    }
}

impl Settings {
    /// The subscription settings as the node uses them.
    pub fn watch_config(&self) -> crate::subscriptions::WatchConfig {
        crate::subscriptions::WatchConfig {
            queue: crate::subscriptions::QueueLimits { events_max: self.watch_queue_events_max, bytes_max: self.watch_queue_bytes_max },
            progress_interval: std::time::Duration::from_millis(self.watch_progress_ms),
            keep_alive_interval: std::time::Duration::from_millis(self.watch_keep_alive_ms),
            subscribers_max: self.watch_subscribers_max,
            ring: crate::subscriptions::feed::RingLimits {
                events_max: self.watch_ring_events_max,
                bytes_max: self.watch_ring_bytes_max,
            },
        }
    }
}
