//! How Tern talks to Kafka: the brokers, the topic prefix, the client's
//! bounds and batching (`KafkaLogConfig`), and its TLS and SASL
//! (`KafkaSecurity`, whose password never prints).

use super::Membership;
use rdkafka::config::ClientConfig;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct KafkaLogConfig {
    /// `HOST:PORT[,HOST:PORT]`.
    pub bootstrap_servers: String,
    pub client_id: String,
    /// Sets `client.rack`, so consumers may fetch from a same-region replica.
    pub rack: String,
    pub topic_prefix: String,
    /// `None`: chosen from the cluster's broker count (`replication`).
    pub replication_factor: Option<i32>,
    /// `None`: 2 with a replication factor of 3 or more, else 1.
    pub min_insync_replicas: Option<i32>,
    /// Bound on admin and metadata calls.
    pub request_timeout: Duration,
    /// Bound on one produce, queueing and delivery included (`delivery.timeout.ms`).
    pub delivery_timeout: Duration,
    /// How long the producer waits to fill a batch (`linger.ms`).
    pub linger: Duration,
    /// Consumer: the longest a fetch waits for `fetch_min_bytes` (`fetch.wait.max.ms`).
    pub fetch_wait_max: Duration,
    /// Consumer: bytes the broker gathers before answering a fetch (`fetch.min.bytes`).
    pub fetch_min_bytes: usize,
    pub membership: Membership,
    /// How the client reaches the brokers: TLS, SASL.
    pub security: KafkaSecurity,
    /// Signs Tern's own entries in source topics (`entry_mac.rs`); from
    /// `cluster_key_file`. None: no namespace may read a source topic.
    pub entry_key: Option<super::EntryKey>,
    /// The topics namespaces may read as source topics: exact names, or
    /// prefixes ending in `*` (`kafka_source_topics`). Empty: none.
    pub source_topics_allowed: Vec<String>,
}

/// The Kafka client's security settings (librdkafka's names in the docs).
#[derive(Clone, Default)]
pub struct KafkaSecurity {
    /// `security.protocol`: `plaintext`, `ssl`, `sasl_plaintext`, `sasl_ssl`.
    pub protocol: String,
    /// `ssl.ca.location`: the CA that signed the brokers' certificates (none: the system's).
    pub ca_file: Option<std::path::PathBuf>,
    /// `ssl.certificate.location` and `ssl.key.location`: a client certificate, for brokers that require one.
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
    /// `sasl.mechanism`: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`.
    pub sasl_mechanism: String,
    pub sasl_username: Option<String>,
    /// Read from a file at start; never printed (`Debug` hides it).
    pub sasl_password: Option<String>,
}

impl std::fmt::Debug for KafkaSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSecurity")
            .field("protocol", &self.protocol)
            .field("ca_file", &self.ca_file)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field("sasl_password", &self.sasl_password.as_ref().map(|_| "…"))
            .finish()
    }
}

impl KafkaSecurity {
    /// Sets these on a client's config.
    pub(super) fn apply(&self, config: &mut ClientConfig) {
        if self.protocol.is_empty() {
            return;
        }
        config.set("security.protocol", &self.protocol);
        let path = |p: &std::path::PathBuf| p.display().to_string();
        if let Some(ca) = &self.ca_file {
            config.set("ssl.ca.location", path(ca));
        }
        if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
            config.set("ssl.certificate.location", path(cert)).set("ssl.key.location", path(key));
        }
        if self.protocol.starts_with("sasl") {
            config.set("sasl.mechanism", &self.sasl_mechanism);
            if let Some(username) = &self.sasl_username {
                config.set("sasl.username", username);
            }
            if let Some(password) = &self.sasl_password {
                config.set("sasl.password", password);
            }
        }
    }
}

impl KafkaLogConfig {
    pub fn new(bootstrap_servers: &str) -> KafkaLogConfig {
        KafkaLogConfig {
            bootstrap_servers: bootstrap_servers.to_string(),
            client_id: "tern".into(),
            rack: String::new(),
            topic_prefix: "tern.".into(),
            replication_factor: None,
            min_insync_replicas: None,
            request_timeout: Duration::from_secs(10),
            delivery_timeout: Duration::from_secs(10),
            linger: Duration::from_millis(1),
            fetch_wait_max: Duration::from_millis(2),
            fetch_min_bytes: 16 * 1024,
            membership: Membership::AssignAll,
            security: KafkaSecurity::default(),
            entry_key: None,
            source_topics_allowed: Vec::new(),
        }
    }

    /// Whether the operator allows namespaces to read `topic` as a source.
    pub(super) fn source_allowed(&self, topic: &str) -> bool {
        self.source_topics_allowed.iter().any(|allowed| match allowed.strip_suffix('*') {
            Some(prefix) => topic.starts_with(prefix),
            None => topic == allowed,
        })
    }
}
