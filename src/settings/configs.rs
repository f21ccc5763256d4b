//! Each subsystem's config, built from the settings here and nowhere else:
//! the node, the apply loop, watches, snapshots, the embedded log, Kafka.

use std::time::Duration;

use super::table::Settings;

impl Settings {
    /// Whether this node joins its replica group's Kafka consumer group.
    pub fn kafka_group_membership(&self) -> bool {
        match self.kafka_membership.as_str() {
            "group" => true,
            "assign" => false,
            _ => self.gossip.is_some(),
        }
    }

    /// The apply loops' settings.
    pub fn apply_config(&self) -> crate::apply::ApplyConfig {
        crate::apply::ApplyConfig {
            batch_entries_max: self.apply_batch_max,
            fsync_interval: Duration::from_millis(self.store_fsync_interval_ms),
            linger: Duration::from_millis(self.apply_linger_ms),
            recovery: crate::apply::Recovery::default(),
        }
    }

    /// The watches' settings.
    pub fn watch_config(&self) -> crate::watch::WatchConfig {
        crate::watch::WatchConfig {
            queue: crate::fanout::QueueLimits { events_max: self.watch_queue_events_max, bytes_max: self.watch_queue_bytes_max },
            progress_interval: Duration::from_millis(self.watch_progress_ms),
            keep_alive_interval: Duration::from_millis(self.watch_keep_alive_ms),
            watches_max: self.watch_subscribers_max,
            ring: crate::fanout::RingLimits { events_max: self.watch_ring_events_max, bytes_max: self.watch_ring_bytes_max },
        }
    }

    /// The node's settings, with the snapshot store it restores from (if any).
    pub fn node_config(&self, snapshots: Option<crate::snapshot::Snapshots>) -> crate::node::NodeConfig {
        let recovery = crate::apply::Recovery {
            snapshots: snapshots.clone(),
            into_new_log: self.restore,
            store_cache_bytes: self.store_cache_bytes,
            damaged_dir: Some(self.data_dir.join("damaged")),
            // The embedded log settles the offsets it lost itself (`embedded_log_config`).
            accept_lost: (self.log != "embedded").then(|| self.accepted_losses().expect("checked by validate")),
        };
        crate::node::NodeConfig {
            data_dir: self.data_dir.clone(),
            store_cache_bytes: self.store_cache_bytes,
            apply: crate::apply::ApplyConfig { recovery, ..self.apply_config() },
            snapshots,
            snapshot_retain: self.snapshot_retain,
            watch: self.watch_config(),
            journal: crate::journal::JournalLimits {
                entries_max: self.journal_entries_max,
                bytes_max: self.journal_bytes_max,
                age_max: Duration::from_millis(self.journal_age_max_ms),
            },
            journal_accept_lost: self.accepted_journal_losses().expect("checked by validate"),
            ripcord: self.ripcord,
            journal_objects: self.journal_objects,
            journal_claim_after: Duration::from_millis(self.journal_claim_after_ms),
            procedure_tick: Duration::from_millis(self.procedure_tick_ms),
            procedure_publish: self.procedure_publish,
            scrub: crate::node::ScrubConfig {
                entries_per_second: self.scrub_entries_per_second,
                interval: Duration::from_millis(self.scrub_interval_ms),
            },
            node_id: self.node_id.clone(),
        }
    }

    /// When this node takes snapshots.
    pub fn snapshot_policy(&self) -> crate::node::snapshots::SnapshotPolicy {
        crate::node::snapshots::SnapshotPolicy {
            interval: Duration::from_millis(self.snapshot_interval_ms),
            entries: self.snapshot_entries,
            retain: self.snapshot_retain,
        }
    }

    /// The embedded log's settings.
    pub fn embedded_log_config(&self) -> anyhow::Result<crate::log::embedded::EmbeddedLogConfig> {
        Ok(crate::log::embedded::EmbeddedLogConfig {
            segment_bytes_max: self.log_segment_bytes,
            retention_bytes: self.log_retention_bytes,
            retention_ms: self.log_retention_ms,
            accept_lost: self.accepted_losses()?,
            ..crate::log::embedded::EmbeddedLogConfig::new(self.data_dir.join("log"))
        })
    }

    /// `accept_journal_loss`, parsed (checked by `validate`).
    pub fn accepted_journal_losses(&self) -> anyhow::Result<Vec<crate::log::embedded::AcceptLost>> {
        let parse = |text: &String| crate::log::embedded::AcceptLost::parse_flag("--accept-journal-loss", text).map_err(anyhow::Error::msg);
        self.accept_journal_loss.iter().map(parse).collect()
    }

    /// `accept_loss`, parsed (checked by `validate`).
    pub fn accepted_losses(&self) -> anyhow::Result<Vec<crate::log::embedded::AcceptLost>> {
        self.accept_loss.iter().map(|text| crate::log::embedded::AcceptLost::parse(text).map_err(anyhow::Error::msg)).collect()
    }

    /// The Kafka log's settings, for the brokers `servers`.
    pub fn kafka_log_config(&self, servers: &str) -> anyhow::Result<crate::log::kafka::KafkaLogConfig> {
        use crate::log::kafka::{KafkaLogConfig, Membership};
        Ok(KafkaLogConfig {
            client_id: self.node_id.clone(),
            rack: self.region.clone(),
            topic_prefix: self.kafka_topic_prefix.clone(),
            replication_factor: self.kafka_replication_factor,
            min_insync_replicas: self.kafka_min_insync_replicas,
            linger: Duration::from_millis(self.kafka_linger_ms),
            fetch_wait_max: Duration::from_millis(self.kafka_fetch_wait_max_ms),
            fetch_min_bytes: self.kafka_fetch_min_bytes,
            membership: match self.kafka_group_membership() {
                false => Membership::AssignAll,
                true => Membership::Group {
                    group: self.group.clone(),
                    instance_id: self.node_id.clone(),
                    session_timeout: Duration::from_millis(self.kafka_session_timeout_ms),
                },
            },
            security: self.kafka_security()?,
            entry_key: self.source_entry_key()?,
            source_topics_allowed: self.kafka_source_topics.clone(),
            ..KafkaLogConfig::new(servers)
        })
    }

    /// The Kafka client's security settings, with the SASL password read from its file.
    pub(super) fn kafka_security(&self) -> anyhow::Result<crate::log::kafka::KafkaSecurity> {
        let sasl = self.kafka_security_protocol.starts_with("sasl");
        anyhow::ensure!(
            !sasl || (self.kafka_sasl_username.is_some() && self.kafka_sasl_password_file.is_some()),
            "kafka_security_protocol = {} needs kafka_sasl_username and kafka_sasl_password_file",
            self.kafka_security_protocol
        );
        anyhow::ensure!(
            self.kafka_ssl_cert_file.is_some() == self.kafka_ssl_key_file.is_some(),
            "kafka_ssl_cert_file and kafka_ssl_key_file go together"
        );
        let sasl_password = match &self.kafka_sasl_password_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("kafka_sasl_password_file {}: {e}", path.display()))?
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
            ),
            None => None,
        };
        Ok(crate::log::kafka::KafkaSecurity {
            protocol: self.kafka_security_protocol.clone(),
            ca_file: self.kafka_ssl_ca_file.clone(),
            cert_file: self.kafka_ssl_cert_file.clone(),
            key_file: self.kafka_ssl_key_file.clone(),
            sasl_mechanism: self.kafka_sasl_mechanism.clone(),
            sasl_username: self.kafka_sasl_username.clone(),
            sasl_password,
        })
    }
}
