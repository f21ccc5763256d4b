//! `KafkaLog`: the log on Kafka — one idempotent producer (`acks=all`),
//! one assign-mode consumer, an admin client for topics, and the `Log`
//! interface over them: appends, offsets, readers, topics (a namespace's
//! own, or a source topic), the outbox's publisher.

use super::super::{Assignment, CreateOutcome, Log, LogError, LogReader, TopicInfo, TopicPartition};
use super::config::KafkaLogConfig;
use super::producer::{Persisted, ReportingProducer};
use super::{acked_ends, breaker, fetch_source, group, outputs, publisher, reader, rebootstrap, sources, topic_id, topic_limits, Membership};
use async_trait::async_trait;
use bytes::Bytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::Duration;

/// Watermark requests (a partition's start and end offsets) in flight at
/// once; each is a broker round trip on a blocking thread.
pub(super) const WATERMARK_REQUESTS_MAX: usize = 16;

/// Replicas per partition when the cluster has enough brokers: with
/// `min.insync.replicas` 2 and `acks=all`, one broker can be lost with no
/// acknowledged write lost and writes going on.
pub(super) const SAFE_REPLICATION_FACTOR: i32 = 3;

pub(super) struct Inner {
    pub(super) config: KafkaLogConfig,
    pub(super) producer: Arc<ReportingProducer>,
    pub(super) admin: AdminClient<DefaultClientContext>,
    pub(super) consumer: Arc<fetch_source::LogConsumer>,
    /// Set with `Membership::Group`.
    pub(super) group: Option<group::GroupMember>,
    /// The client settings every Kafka client of this node shares.
    pub(super) base: ClientConfig,
    /// Bounds the short-lived consumers of `history_reader` (each is a
    /// librdkafka client with threads of its own).
    pub(super) history_slots: Arc<tokio::sync::Semaphore>,
    /// Bounds the consumers of `reader_elsewhere` (each a librdkafka
    /// client with threads of its own, kept while its apply loop reads).
    pub(super) elsewhere_slots: Arc<tokio::sync::Semaphore>,
    /// What this node's acknowledged appends prove about each end offset.
    pub(super) acked_ends: acked_ends::AckedEnds,
    /// Where each partition read by a `reader_elsewhere` consumer is
    /// fetched from (its consumer's statistics), while that reader lives.
    pub(super) elsewhere_sources: reader::ElsewhereSources,
    /// Bounds the watermark (start/end offset) requests in flight.
    pub(super) watermark_slots: Arc<tokio::sync::Semaphore>,
    /// The task serving the consumer's main queue. It holds a clone of the
    /// consumer, so it is stopped when the log is dropped; otherwise the
    /// consumer (its threads and broker connections) would outlive the log.
    pub(super) main_queue: tokio::task::AbortHandle,
    /// Fails writes at once to a partition whose last write failed (`breaker.rs`).
    pub(super) breaker: breaker::Breaker,
    /// Namespaces reading existing topics (`sources.rs`).
    pub(super) sources: Arc<sources::Sources>,
    /// Each namespace's largest entry, as its topic takes (`topic_limits.rs`).
    pub(super) topic_limits: topic_limits::TopicLimits,
    /// The appends' turns on partitions whose topic takes one at a time.
    pub(super) turns: topic_limits::Turns,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.main_queue.abort();
    }
}

/// Most history readers (watches replaying the log) open at once.
pub(super) const HISTORY_READERS_MAX: usize = 4;

/// Most apply loops reading on a consumer of their own at once
/// (`reader_elsewhere`); past it, a stuck reader is opened again on the
/// shared consumer.
pub(super) const ELSEWHERE_READERS_MAX: usize = 16;

/// The Kafka log. Cheap to clone.
#[derive(Clone)]
pub struct KafkaLog {
    pub(super) inner: Arc<Inner>,
}

/// How often the producer refreshes the leaders of the topics it writes
/// (see `KafkaLog::connect`): bounds how long a write keeps going to a
/// leader that was replaced while unreachable.
pub(super) const PRODUCER_METADATA_REFRESH_MS: u64 = 1_000;

/// The largest entry Tern appends to Kafka: the embedded log's bound, above
/// the largest mutation the API makes (4 MiB of keys and values, encoded).
/// Kafka's defaults (librdkafka's `message.max.bytes`, a topic's
/// `max.message.bytes`: about 1 MB) would refuse a record of the spec's
/// largest value; so the producer and the topics Tern creates allow it, and
/// a larger entry is refused before it is written (`node::write`).
pub const ENTRY_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The producer's request and a topic's record batch: one entry of
/// `ENTRY_BYTES_MAX` and the framing around it.
pub(super) const MESSAGE_BYTES_MAX: usize = ENTRY_BYTES_MAX + 64 * 1024;

pub(super) fn unavailable(e: impl std::fmt::Display) -> LogError {
    LogError::Unavailable(format!("kafka: {e}"))
}

/// The settings of a consumer that feeds apply loops: assign mode, no
/// commits of its own, never a silent jump, and batched fetches.
fn reader_client_config(mut client: ClientConfig, config: &KafkaLogConfig) -> ClientConfig {
    client
        .set("statistics.interval.ms", fetch_source::STATISTICS_INTERVAL_MS.to_string())
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "error")
        .set("enable.partition.eof", "false")
        // Under load the broker answers a fetch once `fetch_min_bytes` are
        // ready; idle, within `fetch_wait_max`. Answering every fetch at the
        // first byte (librdkafka's default) cost a third of write throughput
        // on a shared 2-core machine (broker CPU per fetch); this bounds the
        // extra visibility delay at `fetch_wait_max`.
        .set("fetch.wait.max.ms", config.fetch_wait_max.as_millis().to_string())
        .set("fetch.min.bytes", config.fetch_min_bytes.to_string())
        // Every fetched record batch is checked against its CRC32C (off by
        // default in librdkafka): a batch damaged on a broker's disk or in
        // transit is never applied. librdkafka reports it and skips it; the
        // reader stops there instead (`reader.rs`: `Fetched::Damaged`).
        .set("check.crcs", "true");
    client
}

/// As `serve_main_queue`, until `stop` is sent or dropped; the task's
/// handle on the consumer is then dropped off the runtime's workers.
fn serve_main_queue_until(consumer: Arc<fetch_source::LogConsumer>, mut stop: tokio::sync::oneshot::Receiver<()>) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop => break,
                message = consumer.recv() => match message {
                    Ok(m) => tracing::error!(topic = m.topic(), partition = m.partition(), "kafka message on the main queue"),
                    Err(e) => tracing::warn!(error = %e, "kafka consumer error"),
                },
            }
        }
        drop_off_runtime(consumer);
    });
}

/// Gives each long-lived client of the log its bootstrap servers again
/// when it lost every broker (`rebootstrap.rs`), every
/// `rebootstrap::CHECK_INTERVAL` until the log is dropped.
fn keep_brokers(inner: std::sync::Weak<Inner>) {
    let Some(strong) = inner.upgrade() else { return };
    let Ok(bootstrap) = std::ffi::CString::new(strong.config.bootstrap_servers.clone()) else {
        tracing::error!("the Kafka bootstrap servers hold a NUL byte; a client that loses every broker will not get them back");
        return;
    };
    drop(strong);
    tokio::spawn(async move {
        let mut watched: [rebootstrap::Watched; 4] = Default::default();
        let mut interval = tokio::time::interval(rebootstrap::CHECK_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let Some(inner) = inner.upgrade() else { return };
            let [producer, consumer, admin, group] = &mut watched;
            inner.producer.with_client(|client| rebootstrap::check("producer", client, producer, &bootstrap));
            rebootstrap::check("consumer", inner.consumer.client(), consumer, &bootstrap);
            rebootstrap::check("admin", inner.admin.inner(), admin, &bootstrap);
            if let Some(member) = &inner.group {
                member.with_client(|client| rebootstrap::check("group consumer", client, group, &bootstrap));
            }
            // The log was dropped meanwhile: this is its last handle, and
            // closing its clients blocks.
            if Arc::strong_count(&inner) == 1 {
                drop_off_runtime(inner);
            }
        }
    });
}

/// Whether the partition's leader answered an append: it took it, or
/// refused it for its size (the partition takes writes). (librdkafka's own
/// refusal, over the producer's `message.max.bytes`, is never reached: the
/// write path refuses entries over `ENTRY_BYTES_MAX` first.)
fn answered(appended: &Result<u64, LogError>) -> bool {
    matches!(appended, Ok(_) | Err(LogError::TooLargeForTopic { .. }))
}

/// Drops `value` on a blocking thread: the last handle on a librdkafka
/// client closes it, which blocks.
fn drop_off_runtime<T: Send + 'static>(value: T) {
    tokio::task::spawn_blocking(move || drop(value));
}

/// `host:port`, with an IPv6 host in brackets.
fn address(host: &str, port: i32) -> String {
    match host.contains(':') && !host.starts_with('[') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

/// Serves a consumer's main queue, which must be served for callbacks
/// (statistics, errors); every message goes to a partition queue, so
/// anything arriving here is logged and dropped. Abort the task to let the
/// consumer go (it holds a clone).
fn serve_main_queue(consumer: Arc<fetch_source::LogConsumer>) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        loop {
            match consumer.recv().await {
                Ok(m) => tracing::error!(topic = m.topic(), partition = m.partition(), "kafka message on the main queue"),
                Err(e) => tracing::warn!(error = %e, "kafka consumer error"),
            }
        }
    })
    .abort_handle()
}

impl KafkaLog {
    pub fn connect(config: KafkaLogConfig) -> Result<KafkaLog, LogError> {
        let mut base = ClientConfig::new();
        base.set("bootstrap.servers", &config.bootstrap_servers)
            .set("client.id", &config.client_id)
            // Small produce and fetch requests must not wait for Nagle's algorithm
            // (librdkafka leaves it on): it cost milliseconds per write.
            .set("socket.nagle.disable", "true");
        if !config.rack.is_empty() {
            base.set("client.rack", &config.rack);
        }
        config.security.apply(&mut base);
        // librdkafka's own debug contexts (e.g. `metadata,fetch,topic`), for
        // diagnosing a Kafka cluster's faults; logged at debug level.
        if let Ok(contexts) = std::env::var("TERN_KAFKA_DEBUG") {
            base.set("debug", contexts);
        }
        let mut producer_config = base.clone();
        producer_config
            // Never a topic made by a write: one in flight to a namespace
            // just deleted would make its topic again with the broker's
            // defaults (a namespace the deletion did not remove).
            .set("allow.auto.create.topics", "false")
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.max.bytes", MESSAGE_BYTES_MAX.to_string())
            // A topic that takes smaller batches gets one record at a time (`topic_limits.rs`).
            .set("batch.size", topic_limits::PRODUCER_BATCH_BYTES.to_string())
            // Batch a little: waiting up to `linger` for more writes to the same
            // broker amortizes produce requests (the broker's CPU is per request).
            .set("linger.ms", config.linger.as_millis().to_string())
            .set("delivery.timeout.ms", config.delivery_timeout.as_millis().to_string())
            // How long the leader may wait for its in-sync replicas before it
            // answers a produce with a timeout: the whole delivery bound, so
            // that the client's own request timeout (`socket.timeout.ms`
            // below, a third of it, checked once a second) comes first. A leader cut from the
            // other brokers would otherwise answer "timed out" at the same
            // instant now and then; the connection then stays up, librdkafka
            // retries on it, and asks that leader who leads (see
            // `enable.sparse.connections` below).
            .set("request.timeout.ms", config.delivery_timeout.as_millis().max(1).to_string())
            // A produce the leader never answers (its region cut off) is sent
            // again, to the new leader, after a third of the delivery bound,
            // not after librdkafka's default 30 s, past the bound (the
            // client's request timeout is `socket.timeout.ms`, below) ...
            // and only if the producer has learned the new leader by then.
            // librdkafka asks for metadata when a broker connection fails, but
            // a cut-off leader's connection does not fail, it goes silent:
            // the ask after the first timed-out produce can come before the
            // controller moved the leadership, and the next one came only
            // after `topic.metadata.refresh.interval.ms` (5 min), so the write
            // failed at the delivery bound (10 s) on the region bed. Asking
            // every second (one small request, topics in use only) redirects
            // it within a second of the move.
            .set("topic.metadata.refresh.interval.ms", PRODUCER_METADATA_REFRESH_MS.to_string())
            // The ask for metadata can itself go to the silent broker (its
            // connection still looks up), and while one ask is out no other
            // is sent: with librdkafka's default `socket.timeout.ms` (60 s)
            // a write still failed at the delivery bound in 1 of ~10 cuts.
            // Bounded like a produce, the ask times out, the silent
            // connection is dropped (`socket.max.fails` 1), and the next
            // ask goes to a broker that answers.
            .set("socket.timeout.ms", (config.delivery_timeout.as_millis() / 3).max(10).to_string())
            // A deposed leader cut from the other brokers still answers
            // Metadata, naming itself leader at its old epoch, and librdkafka
            // asks the least idle broker, which is the one it produces to:
            // with connections only to the brokers it needs, a node's
            // producer asked nothing but the deposed leader for up to 40 s
            // (issue 36: the leader-cut test's node b, whose strong reads'
            // barriers then failed). Connected to every broker, it asks
            // another as soon as a produce times out and drops the deposed
            // leader's connection ("broker down"); once one answer names the
            // new leader at its newer epoch, librdkafka ignores the deposed
            // one's older epoch. (An ask before the controller moved the
            // leadership names the old leader again: the next timeout, a
            // third of the delivery bound later, asks again.) The cost is
            // one idle connection per broker per node. The property is
            // librdkafka's `enable.sparse.connections`, not in its documented
            // list (kept since 1.0; a librdkafka that drops it refuses to
            // start the producer, which the Kafka tests would show).
            .set("enable.sparse.connections", "false");
        let producer = Arc::new(ReportingProducer::create(&producer_config).map_err(unavailable)?);
        let consumer: fetch_source::LogConsumer = reader_client_config(base.clone(), &config)
            .set("group.id", format!("{}node.{}", config.topic_prefix, config.client_id))
            .create_with_context(fetch_source::FetchContext::default())
            .map_err(unavailable)?;
        let admin: AdminClient<DefaultClientContext> = base.create().map_err(unavailable)?;
        let consumer = Arc::new(consumer);
        let main_queue = serve_main_queue(consumer.clone());
        let sources = Arc::new(sources::Sources::default());
        let group = match &config.membership {
            Membership::AssignAll => None,
            Membership::Group { group, instance_id, session_timeout } => {
                Some(group::GroupMember::start(&base, &config.topic_prefix, sources.clone(), group, instance_id, *session_timeout)?)
            }
        };
        let history_slots = Arc::new(tokio::sync::Semaphore::new(HISTORY_READERS_MAX));
        let elsewhere_slots = Arc::new(tokio::sync::Semaphore::new(ELSEWHERE_READERS_MAX));
        let watermark_slots = Arc::new(tokio::sync::Semaphore::new(WATERMARK_REQUESTS_MAX));
        let inner = Arc::new(Inner {
            config,
            producer,
            admin,
            consumer,
            group,
            base,
            history_slots,
            elsewhere_slots,
            acked_ends: acked_ends::AckedEnds::default(),
            elsewhere_sources: reader::ElsewhereSources::default(),
            watermark_slots,
            main_queue,
            breaker: breaker::Breaker::default(),
            sources,
            topic_limits: topic_limits::TopicLimits::default(),
            turns: topic_limits::Turns::default(),
        });
        keep_brokers(Arc::downgrade(&inner));
        Ok(KafkaLog { inner })
    }

    /// The Kafka topic of `namespace`: its source topic, or `<prefix><namespace>`.
    pub(super) fn topic_name(&self, namespace: &str) -> String {
        match self.inner.sources.topic_of(namespace) {
            Some(source) => source,
            None => format!("{}{namespace}", self.inner.config.topic_prefix),
        }
    }

    /// Creates one topic through the admin API: true if created, false if
    /// it existed already (its settings are the caller's to check).
    pub(super) async fn create_one(&self, new_topic: &NewTopic<'_>, name: &str) -> Result<bool, LogError> {
        let options = AdminOptions::new().operation_timeout(Some(Timeout::After(self.inner.config.request_timeout)));
        let results = self.inner.admin.create_topics([new_topic], &options).await.map_err(unavailable)?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(true),
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
            Some(Err((_, code))) => Err(unavailable(format!("creating topic {name}: {code}"))),
            None => Err(unavailable(format!("creating topic {name}: no result"))),
        }
    }

    /// Every topic's partition count, from one metadata request.
    pub(super) async fn topic_partitions(&self) -> Result<std::collections::HashMap<String, u32>, LogError> {
        let (consumer, timeout) = (self.inner.consumer.clone(), self.inner.config.request_timeout);
        tokio::task::spawn_blocking(move || {
            let metadata = consumer.fetch_metadata(None, timeout).map_err(unavailable)?;
            Ok(metadata
                .topics()
                .iter()
                .filter(|t| t.error().is_none() && !t.partitions().is_empty())
                .map(|t| (t.name().to_string(), t.partitions().len() as u32))
                .collect())
        })
        .await
        .map_err(unavailable)?
    }

    pub(super) async fn partition_count(&self, topic: &str) -> Result<Option<u32>, LogError> {
        let (consumer, topic, timeout) = (self.inner.consumer.clone(), topic.to_string(), self.inner.config.request_timeout);
        tokio::task::spawn_blocking(move || {
            let metadata = consumer.fetch_metadata(Some(&topic), timeout).map_err(unavailable)?;
            Ok(metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map(|t| t.partitions().len() as u32).filter(|n| *n > 0))
        })
        .await
        .map_err(unavailable)?
    }

    /// The replication factor and `min.insync.replicas` of a new topic: as
    /// configured, else safe for production (3 and 2) when the cluster has
    /// at least 3 brokers, else the broker count and 1, loudly: with fewer
    /// than 3 replicas a lost broker can lose acknowledged writes.
    pub(super) async fn replication(&self) -> Result<(i32, i32), LogError> {
        let config = &self.inner.config;
        let factor = match config.replication_factor {
            Some(factor) => factor,
            None => {
                let (consumer, timeout) = (self.inner.consumer.clone(), config.request_timeout);
                let brokers = tokio::task::spawn_blocking(move || consumer.fetch_metadata(None, timeout).map(|m| m.brokers().len()))
                    .await
                    .map_err(unavailable)?
                    .map_err(unavailable)?;
                let factor = brokers.clamp(1, SAFE_REPLICATION_FACTOR as usize) as i32;
                if factor < SAFE_REPLICATION_FACTOR {
                    tracing::warn!(
                        brokers,
                        replication_factor = factor,
                        "the Kafka cluster has fewer than {SAFE_REPLICATION_FACTOR} brokers: new topics get a replication \
                         factor of {factor}, so losing a broker can lose acknowledged writes. Fine for development; in \
                         production run 3 or more brokers (or set kafka_replication_factor explicitly)"
                    );
                }
                factor
            }
        };
        let min_isr = config.min_insync_replicas.unwrap_or(if factor >= SAFE_REPLICATION_FACTOR { 2 } else { 1 });
        Ok((factor, min_isr))
    }

    /// The topic's `retention.ms` (None: unlimited, -1).
    pub async fn topic_retention_ms(&self, namespace: &str) -> Result<Option<u64>, LogError> {
        let topic = self.topic_name(namespace);
        let value = self.topic_config(&topic, "retention.ms").await?.unwrap_or_else(|| "-1".into());
        let ms: i64 = value.parse().map_err(|_| unavailable(format!("{topic} has retention.ms {value:?}")))?;
        Ok((ms >= 0).then_some(ms as u64))
    }

    /// The effective value of `topic`'s configuration `key` (its own, or
    /// its broker's default), described now.
    async fn topic_config(&self, topic: &str, key: &str) -> Result<Option<String>, LogError> {
        let options = AdminOptions::new().request_timeout(Some(Timeout::After(self.inner.config.request_timeout)));
        let results = self.inner.admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options).await.map_err(unavailable)?;
        let resource = results
            .into_iter()
            .next()
            .ok_or_else(|| unavailable(format!("no configuration returned for {topic}")))?
            .map_err(|e| unavailable(format!("describing {topic}: {e}")))?;
        Ok(resource.get(key).and_then(|e| e.value.clone()))
    }

    pub(super) async fn watermarks(&self, tp: &TopicPartition) -> Result<(u64, u64), LogError> {
        let (consumer, topic, timeout) = (self.inner.consumer.clone(), self.topic_name(&tp.topic), self.inner.config.request_timeout);
        let partition = tp.partition as i32;
        // The permit travels into the blocking call and is released when the
        // call ends, even if the caller stopped waiting (a bounded describe, a
        // strong read's timeout): broker round trips in flight stay bounded
        // however many callers give up on them.
        let permit = self.inner.watermark_slots.clone().acquire_owned().await.map_err(|_| LogError::Closed)?;
        let (low, high) = tokio::task::spawn_blocking(move || {
            let answer = consumer.fetch_watermarks(&topic, partition, timeout);
            drop(permit);
            answer
        })
        .await
        .map_err(unavailable)?
        .map_err(unavailable)?;
        Ok((low.max(0) as u64, high.max(0) as u64))
    }

    /// The addresses (`host:port,…`) of every broker the cluster's metadata
    /// lists but those of `avoid` and `topic`/`partition`'s leader as that
    /// metadata names it; were that none, every broker but the last of
    /// `avoid` (the newest suspect). Broker addresses are the same whoever
    /// answers; the leader may be stale, which is the point.
    async fn brokers_but(&self, topic: &str, partition: i32, avoid: &[i32]) -> Result<String, LogError> {
        let (consumer, topic, timeout) = (self.inner.consumer.clone(), topic.to_string(), self.inner.config.request_timeout);
        let avoid = avoid.to_vec();
        tokio::task::spawn_blocking(move || {
            let metadata = consumer.fetch_metadata(Some(&topic), timeout).map_err(unavailable)?;
            let leader = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic)
                .and_then(|t| t.partitions().iter().find(|p| p.id() == partition).map(|p| p.leader()));
            let but = |skip: &[i32]| -> Vec<String> {
                metadata.brokers().iter().filter(|b| !skip.contains(&b.id())).map(|b| address(b.host(), b.port())).collect()
            };
            let mut all_suspects = avoid.clone();
            all_suspects.extend(leader);
            let mut others = but(&all_suspects);
            if others.is_empty() {
                others = but(&avoid[avoid.len().saturating_sub(1)..]);
            }
            Ok(others.join(","))
        })
        .await
        .map_err(unavailable)?
    }
}

#[async_trait]
impl Log for KafkaLog {
    fn entry_bytes_max(&self) -> usize {
        ENTRY_BYTES_MAX
    }

    fn entry_bytes_max_of(&self, namespace: &str) -> usize {
        self.inner.topic_limits.of(namespace)
    }

    async fn learn_entry_limits(&self, namespaces: &[String]) -> Result<(), LogError> {
        let due: Vec<(&String, String)> =
            namespaces.iter().filter(|ns| self.inner.topic_limits.due(ns)).map(|ns| (ns, self.topic_name(ns))).collect();
        if due.is_empty() {
            return Ok(());
        }
        // Each topic once (two namespaces may read one source topic; a
        // topic named twice fails the whole answer). Results come back in
        // the order asked.
        let mut topics: Vec<&str> = due.iter().map(|(_, topic)| topic.as_str()).collect();
        topics.sort_unstable();
        topics.dedup();
        let resources: Vec<ResourceSpecifier> = topics.iter().map(|topic| ResourceSpecifier::Topic(topic)).collect();
        let options = AdminOptions::new().request_timeout(Some(Timeout::After(self.inner.config.request_timeout)));
        let results = self.inner.admin.describe_configs(&resources, &options).await.map_err(unavailable)?;
        let described: std::collections::HashMap<&str, u64> = topics
            .iter()
            .zip(results)
            .filter_map(|(topic, result)| {
                let value = result.ok()?.get("max.message.bytes")?.value.clone()?;
                Some((*topic, value.parse::<u64>().ok()?))
            })
            .collect();
        let mut failed = Vec::new();
        for (namespace, topic) in &due {
            let Some(&max_message_bytes) = described.get(topic.as_str()) else {
                failed.push(topic.as_str());
                continue;
            };
            let limit = self.inner.topic_limits.learned(namespace, max_message_bytes);
            if limit < ENTRY_BYTES_MAX {
                tracing::info!(%topic, max_message_bytes, entry_bytes_max = limit, "the topic takes smaller entries than Tern's bound: larger writes are refused with 413, and appends go one at a time per partition");
            }
        }
        match failed.is_empty() {
            true => Ok(()),
            false => Err(unavailable(format!("the max.message.bytes of {} could not be described", failed.join(", ")))),
        }
    }

    async fn create_topic(&self, name: &str, partitions: u32) -> Result<CreateOutcome, LogError> {
        let prefix = &self.inner.config.topic_prefix;
        let topic = format!("{prefix}{name}");
        // A namespace on a source topic has no topic of its own; never give it one.
        let bound = self.topic_partitions().await?.into_keys().find(|t| sources::parse_marker(prefix, t).is_some_and(|(ns, _)| ns == name));
        if let Some(marker) = bound {
            let (_, source) = sources::parse_marker(prefix, &marker).expect("found by parsing");
            return Err(LogError::SourceConflict(format!("namespace {name:?} exists and reads the topic {source:?}")));
        }
        let config = &self.inner.config;
        let (factor, min_isr) = self.replication().await?;
        let min_isr = min_isr.to_string();
        let max_message_bytes = MESSAGE_BYTES_MAX.to_string();
        let new_topic = NewTopic::new(&topic, partitions as i32, TopicReplication::Fixed(factor))
            .set("min.insync.replicas", &min_isr)
            .set("max.message.bytes", &max_message_bytes)
            // The leader broker stamps every record: the reference clock that
            // bounds how far one entry moves a partition's log time (`LogRecord::appended_ms`).
            .set("message.timestamp.type", "LogAppendTime");
        let created = self.create_one(&new_topic, &topic).await?;
        // Wait (bounded) until the topic's metadata shows its partitions.
        let deadline = tokio::time::Instant::now() + config.request_timeout;
        loop {
            if let Some(existing) = self.partition_count(&topic).await? {
                if existing != partitions {
                    return Err(LogError::PartitionCountMismatch { topic: name.to_string(), existing, requested: partitions });
                }
                return Ok(if created { CreateOutcome::Created } else { CreateOutcome::AlreadyExists });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(unavailable(format!("topic {topic} did not appear within {:?}", config.request_timeout)));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn list_topics(&self) -> Result<Vec<TopicInfo>, LogError> {
        let prefix = &self.inner.config.topic_prefix;
        let all = self.topic_partitions().await?;
        let mut topics = Vec::new();
        for (name, partitions) in &all {
            if let Some((namespace, source)) = sources::parse_marker(prefix, name) {
                // A marker whose source topic is gone: its namespace cannot be read.
                let Some(partitions) = all.get(source) else {
                    tracing::warn!(namespace, source, "the source topic of a namespace does not exist; the namespace is not opened");
                    continue;
                };
                self.inner.sources.bind(namespace, source);
                topics.push(TopicInfo { name: namespace.to_string(), partitions: *partitions, source_topic: Some(source.to_string()) });
                continue;
            }
            let Some(namespace) = name.strip_prefix(prefix.as_str()) else { continue };
            if crate::limits::check_namespace_name(namespace).is_ok() {
                topics.push(TopicInfo { name: namespace.to_string(), partitions: *partitions, source_topic: None });
            }
        }
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(topics)
    }

    /// Deletes the namespace's own topic (`<prefix><name>`) and waits,
    /// bounded by the request timeout, until metadata no longer shows it
    /// (past that, the deletion stands: the brokers took it). A namespace
    /// on a source topic is not deleted (its entries stay in the source
    /// topic: one created again on it would read them again).
    async fn delete_topic(&self, name: &str) -> Result<bool, LogError> {
        if let Some(source) = self.inner.sources.topic_of(name) {
            return Err(LogError::SourceConflict(format!(
                "namespace {name:?} reads the topic {source:?}: a namespace on a source topic cannot be deleted \
                 (its entries stay in that topic, and a namespace created again on it would read them again)"
            )));
        }
        let prefix = self.inner.config.topic_prefix.clone();
        let all = self.topic_partitions().await?;
        let topic = format!("{prefix}{name}");
        if !all.contains_key(&topic) {
            return Ok(false);
        }
        let options = AdminOptions::new().operation_timeout(Some(Timeout::After(self.inner.config.request_timeout)));
        let results = self.inner.admin.delete_topics(&[topic.as_str()], &options).await.map_err(unavailable)?;
        match results.into_iter().next() {
            Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::UnknownTopicOrPartition))) => {}
            Some(Err((_, code))) => return Err(unavailable(format!("deleting topic {topic}: {code}"))),
            None => return Err(unavailable(format!("deleting topic {topic}: no result"))),
        }
        let deadline = tokio::time::Instant::now() + self.inner.config.request_timeout;
        while self.partition_count(&topic).await.map_or(true, |count| count.is_some()) {
            if tokio::time::Instant::now() > deadline {
                tracing::warn!(%topic, "the deleted topic still shows in metadata after {:?}; the brokers took its deletion", self.inner.config.request_timeout);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.forget_topic(name);
        Ok(true)
    }

    /// What this log keeps of a deleted namespace's topic by its name: the
    /// acknowledged ends and the breaker's state (a topic created again
    /// under the name starts at 0).
    fn forget_topic(&self, name: &str) {
        let topic = self.topic_name(name);
        self.inner.acked_ends.forget(name);
        self.inner.breaker.forget(&topic);
        self.inner.topic_limits.forget(name);
    }

    async fn create_sourced(&self, name: &str, source: &str, requested: Option<u32>) -> Result<(CreateOutcome, u32), LogError> {
        let prefix = self.inner.config.topic_prefix.clone();
        sources::check_source_name(&prefix, name, source).map_err(LogError::Unsupported)?;
        if !self.inner.config.source_allowed(source) {
            return Err(LogError::Unsupported(format!(
                "source_topic {source:?} is not one the operator allows namespaces to read (kafka_source_topics: {:?}); \
                 a topic is bound only when the operator lists it",
                self.inner.config.source_topics_allowed
            )));
        }
        if self.inner.config.entry_key.is_none() {
            return Err(LogError::Unsupported(
                "a source topic needs cluster_key_file: Tern signs its own entries in a topic other producers write, \
                 so that theirs never pass for Tern's"
                    .into(),
            ));
        }
        let all = self.topic_partitions().await?;
        let Some(&partitions) = all.get(source) else {
            return Err(LogError::Unsupported(format!(
                "source_topic {source:?} does not exist in the Kafka cluster; create it first (Tern reads it, never creates it)"
            )));
        };
        if let Some(requested) = requested.filter(|r| *r != partitions) {
            return Err(LogError::PartitionCountMismatch { topic: source.to_string(), existing: partitions, requested });
        }
        if all.contains_key(&format!("{prefix}{name}")) {
            return Err(LogError::SourceConflict(format!("namespace {name:?} exists with a log of its own; it cannot read {source:?}")));
        }
        for topic in all.keys() {
            let Some((namespace, bound)) = sources::parse_marker(&prefix, topic) else { continue };
            if namespace == name && bound == source {
                self.inner.sources.bind(name, source);
                return Ok((CreateOutcome::AlreadyExists, partitions));
            }
            if namespace == name {
                return Err(LogError::SourceConflict(format!("namespace {name:?} exists and reads the topic {bound:?}")));
            }
            if bound == source {
                return Err(LogError::SourceConflict(format!(
                    "the topic {source:?} is already the source of namespace {namespace:?}; a topic is the log of one namespace"
                )));
            }
        }
        let marker = sources::marker_name(&prefix, name, source);
        let (factor, _) = self.replication().await?;
        let new_topic = NewTopic::new(&marker, 1, TopicReplication::Fixed(factor));
        let created = self.create_one(&new_topic, &marker).await?;
        // Bounded wait until the marker shows in metadata (other nodes find it there).
        let deadline = tokio::time::Instant::now() + self.inner.config.request_timeout;
        while self.partition_count(&marker).await?.is_none() {
            if tokio::time::Instant::now() > deadline {
                return Err(unavailable(format!("topic {marker} did not appear within {:?}", self.inner.config.request_timeout)));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.inner.sources.bind(name, source);
        Ok((if created { CreateOutcome::Created } else { CreateOutcome::AlreadyExists }, partitions))
    }

    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
        let topic = self.topic_name(&tp.topic);
        let failing = |failing_ms: u64| {
            unavailable(format!(
                "{topic}/{} took no write for {failing_ms} ms (its leader is unreachable: a broker or region \
                 lost?); failing at once while one write probes it; nothing was written, retry later",
                tp.partition
            ))
        };
        let ticket = self.inner.breaker.admit(&topic, tp.partition).map_err(failing)?;
        let appended = match self.inner.topic_limits.one_at_a_time(&tp.topic) {
            false => self.append_now(&topic, tp, &payload).await,
            // On a topic that takes smaller batches than the producer makes,
            // one record per batch (`topic_limits.rs`). A write whose
            // partition started failing while it waited its turn fails at
            // once, as it would have at its ticket (each queued write would
            // otherwise wait out the delivery bound in turn).
            true => {
                let turn = self.inner.turns.of(&topic, tp.partition).lock_owned().await;
                if let Some(failing_ms) = self.inner.breaker.failing_ms(&topic, tp.partition).filter(|_| !ticket.is_probe()) {
                    return Err(failing(failing_ms));
                }
                // The turn is released when the produce ends, not when the
                // caller stops waiting: its record may still be in the
                // producer's queue, and the next one must not join its batch.
                let (log, topic, tp, payload) = (self.clone(), topic.clone(), tp.clone(), payload.clone());
                // Its end is noted before the turn passes on, so the write
                // next in turn sees a failure (its caller ends the ticket
                // only once this task's answer reaches it).
                let produce = tokio::spawn(async move {
                    let appended = log.append_now(&topic, &tp, &payload).await;
                    log.inner.breaker.note(&topic, tp.partition, answered(&appended));
                    drop(turn);
                    appended
                });
                produce.await.map_err(unavailable)?
            }
        };
        ticket.ended(answered(&appended));
        if let Ok(offset) = appended {
            self.inner.acked_ends.acknowledged(tp, offset);
        }
        appended
    }

    async fn identity(&self, topic: &str) -> Result<String, LogError> {
        let (consumer, topic, timeout) = (self.inner.consumer.clone(), self.topic_name(topic), self.inner.config.request_timeout);
        tokio::task::spawn_blocking(move || {
            let cluster = consumer.client().fetch_cluster_id(timeout).ok_or_else(|| unavailable("the cluster id is unknown"))?;
            // SAFETY: the consumer (and so its librdkafka handle) lives for the call.
            let id = unsafe { topic_id::describe(consumer.client().native_ptr(), &topic, timeout) }.map_err(unavailable)?;
            Ok(format!("kafka:{cluster}/{topic}#{id}"))
        })
        .await
        .map_err(unavailable)?
    }

    async fn end_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        Ok(self.watermarks(tp).await?.1)
    }

    /// One past this node's own acknowledged appends (`acked_ends.rs`): a
    /// deposed leader's high watermark is old.
    fn known_end_at(&self, tp: &TopicPartition) -> Option<(u64, std::time::Instant)> {
        self.inner.acked_ends.end_at(tp)
    }

    async fn start_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        Ok(self.watermarks(tp).await?.0)
    }

    fn fetch_source(&self, tp: &TopicPartition) -> Option<crate::log::FetchSource> {
        let (topic, partition) = (self.topic_name(&tp.topic), tp.partition as i32);
        match self.inner.elsewhere_sources.of(tp) {
            Some(context) => context.source(&topic, partition),
            None => self.inner.consumer.context().source(&topic, partition),
        }
    }

    fn check_outputs(&self, namespace: &str, topics: &[&str]) -> Result<(), String> {
        let prefix = &self.inner.config.topic_prefix;
        outputs::check_namespace(prefix, namespace)?;
        topics.iter().try_for_each(|topic| outputs::check_topic(prefix, &self.inner.sources, namespace, topic))
    }

    fn has_output_topics(&self) -> bool {
        true
    }

    async fn publisher(&self, tp: &TopicPartition, partitions: u32) -> Result<Box<dyn crate::log::Publisher>, LogError> {
        let (factor, _) = self.replication().await?;
        let config = &self.inner.config;
        let topic = self.topic_name(&tp.topic);
        let publisher = publisher::KafkaPublisher::start(
            &self.inner.base,
            &config.topic_prefix,
            self.inner.sources.clone(),
            &tp.topic,
            &topic,
            tp.partition,
            partitions,
            factor,
            config.delivery_timeout,
        )
        .await?;
        Ok(Box::new(publisher))
    }

    async fn reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        let topic = self.topic_name(&tp.topic);
        let sourced = self.records_of(tp)?;
        Ok(Box::new(reader::KafkaReader::open(&self.inner.consumer, tp.clone(), &topic, from, sourced)?))
    }

    /// A consumer of its own, bootstrapped from every broker but `avoid`
    /// and the partition's leader as the shared consumer's metadata names it
    /// (or, were that every broker, but the stuck reader's own suspects):
    /// its first metadata comes from a broker that knows the current
    /// leader, and librdkafka then ignores older leader epochs, so a deposed
    /// leader no longer strands the reader. Bounded by `elsewhere_slots`;
    /// past it, or with no other broker, the shared consumer's reader.
    async fn reader_elsewhere(&self, tp: &TopicPartition, from: u64, avoid: &[i32]) -> Result<Box<dyn LogReader>, LogError> {
        let Ok(permit) = self.inner.elsewhere_slots.clone().try_acquire_owned() else {
            tracing::warn!(%tp, "every reader slot of its own is taken; reading on the shared consumer again");
            return self.reader(tp, from).await;
        };
        let topic = self.topic_name(&tp.topic);
        let sourced = self.records_of(tp)?;
        let bootstrap = self.brokers_but(&topic, tp.partition as i32, avoid).await?;
        if bootstrap.is_empty() {
            return self.reader(tp, from).await;
        }
        tracing::info!(%tp, from, ?avoid, %bootstrap, "reading the partition from other brokers");
        let mut client = reader_client_config(self.inner.base.clone(), &self.inner.config);
        client
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", format!("{}reader.{}", self.inner.config.topic_prefix, self.inner.config.client_id));
        let consumer: fetch_source::LogConsumer = client.create_with_context(fetch_source::FetchContext::default()).map_err(unavailable)?;
        let consumer = Arc::new(consumer);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        serve_main_queue_until(consumer.clone(), stopped);
        // On failure `stop` drops with it: the task stops.
        let reader = reader::KafkaReader::open(&consumer, tp.clone(), &topic, from, sourced)?;
        let sources = self.inner.elsewhere_sources.register(tp, consumer.context());
        drop_off_runtime(consumer);
        Ok(Box::new(reader::ElsewhereReader { reader: Some(reader), main_queue_stop: Some(stop), _sources: sources, _permit: permit }))
    }

    /// A consumer of its own (assign mode, no commits) for one watch's
    /// look at history, so the apply loop's reader is never disturbed.
    async fn history_reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        let permit = self.inner.history_slots.clone().acquire_owned().await.map_err(|_| LogError::Closed)?;
        let consumer: fetch_source::LogConsumer = self
            .inner
            .base
            .clone()
            .set("group.id", format!("{}history.{}", self.inner.config.topic_prefix, self.inner.config.client_id))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set("enable.partition.eof", "false")
            // As the apply loops' readers: a damaged batch is never replayed
            // to a watch (review of issue 37: history readers did not check).
            .set("check.crcs", "true")
            .create_with_context(fetch_source::FetchContext::default())
            .map_err(unavailable)?;
        let topic = self.topic_name(&tp.topic);
        let sourced = self.records_of(tp)?;
        let reader = reader::KafkaReader::open(&Arc::new(consumer), tp.clone(), &topic, from, sourced)?;
        Ok(Box::new(reader::HistoryReader { reader, _permit: permit }))
    }

    /// Called after the partition's store became durable below `offset`:
    /// commits it as the consumer group's offset, so standard Kafka tooling
    /// (`kafka-consumer-groups`, lag exporters) sees how far this node is.
    /// For monitoring only: Tern never reads its position back from Kafka.
    fn release_below(&self, tp: &TopicPartition, offset: u64) {
        let topic = self.topic_name(&tp.topic);
        if let Some(group) = &self.inner.group {
            group.commit(&topic, tp, offset);
            return;
        }
        let mut committed = TopicPartitionList::new();
        if let Err(e) = committed.add_partition_offset(&topic, tp.partition as i32, Offset::Offset(offset as i64)) {
            tracing::warn!(%tp, error = %e, "cannot build the offset commit");
            return;
        }
        if let Err(e) = self.inner.consumer.commit(&committed, CommitMode::Async) {
            tracing::warn!(%tp, error = %e, "kafka offset commit (for lag monitoring) failed");
        }
    }

    fn assignment(&self) -> tokio::sync::watch::Receiver<Assignment> {
        match &self.inner.group {
            Some(group) => group.assignment(),
            None => tokio::sync::watch::channel(Assignment::All).1,
        }
    }

    fn follow_topics(&self, namespaces: &[String]) {
        if let Some(group) = &self.inner.group {
            group.follow(namespaces);
        }
    }

    async fn close(&self) {
        let producer = self.inner.producer.clone();
        let timeout = self.inner.config.delivery_timeout;
        let _ = tokio::task::spawn_blocking(move || producer.flush(timeout)).await;
    }
}

impl KafkaLog {
    /// Makes the producer fail for good, as a broker can (tests of what follows).
    #[doc(hidden)]
    pub fn fail_producer_for_test(&self) {
        self.inner.producer.fail_for_test();
    }

    /// Whose records `tp`'s topic holds: Tern's alone, or a source topic's.
    /// A source topic is not read without the key: every entry of Tern's
    /// would be taken for a foreign record, and this replica would silently
    /// become another one than its peers.
    fn records_of(&self, tp: &TopicPartition) -> Result<reader::Records, LogError> {
        match (self.inner.sources.is_sourced(&tp.topic), self.inner.config.entry_key) {
            (false, _) => Ok(reader::Records::Tern),
            (true, Some(key)) => Ok(reader::Records::Sourced(Some(key))),
            (true, None) => Err(LogError::Unsupported(format!(
                "namespace {:?} reads a source topic, and this node has no cluster_key_file: without the key that \
                 signs Tern's entries there it cannot tell them from other producers' records; give it the cluster's key",
                tp.topic
            ))),
        }
    }

    /// One produce, acknowledged by every in-sync replica (`acks=all`).
    pub(super) async fn append_now(&self, topic: &str, tp: &TopicPartition, payload: &Bytes) -> Result<u64, LogError> {
        // In a source topic, Tern's entries are told from the topic's own
        // records by a header holding their MAC (`entry_mac.rs`).
        let mut headers = None;
        if self.inner.sources.is_sourced(&tp.topic) {
            let Some(key) = &self.inner.config.entry_key else {
                return Err(LogError::Unsupported(format!(
                    "namespace {:?} reads a source topic and this node has no cluster_key_file: it cannot sign Tern's entries there",
                    tp.topic
                )));
            };
            let mac = key.mac(topic, tp.partition, payload);
            let header = rdkafka::message::Header { key: crate::log::TERN_ENTRY_HEADER, value: Some(&mac[..]) };
            headers = Some(rdkafka::message::OwnedHeaders::new().insert(header));
        }
        let delivery_timeout = self.inner.config.delivery_timeout;
        match self.inner.producer.send(topic, tp.partition as i32, payload, headers, delivery_timeout).await {
            // A retried idempotent send the broker already had (a leader
            // moving mid-send) is reported delivered with no offset
            // (-1001): in the log, position unknown. Never a version.
            Ok(offset) if offset < 0 => Err(LogError::Ambiguous(format!(
                "the write to {topic}/{} is in the log but the broker did not say at which offset (a retried send it \
                 already had); read the record, or retry with the same Idempotency-Key header, which applies it at most once",
                tp.partition
            ))),
            Ok(offset) => Ok(offset as u64),
            // Refused before it was sent (or by the broker for the topic's
            // `max.message.bytes`): never in the log, and never will be.
            // The topic's limit is learned again (at the node's next ask),
            // so that the next such write is refused before it is journaled.
            Err(failed) if failed.error == KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge) => {
                self.inner.topic_limits.refused(&tp.topic);
                Err(LogError::TooLargeForTopic {
                    size_bytes: payload.len(),
                    reason: format!("{topic} takes smaller records (its max.message.bytes); raise it or write less at once"),
                })
            }
            Err(failed) if failed.persisted == Persisted::No => Err(unavailable(format!(
                "produce to {topic}/{} failed ({}); the write was never sent, so it is not in the log",
                tp.partition, failed.error
            ))),
            Err(failed) => Err(LogError::Ambiguous(format!(
                "produce to {topic}/{} failed ({}) with the write in flight: it may or may not be in the log; retry it \
                 with the same Idempotency-Key header to apply it exactly once",
                tp.partition, failed.error
            ))),
        }
    }
}
