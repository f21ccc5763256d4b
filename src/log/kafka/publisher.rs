//! The outbox publisher's Kafka side: Kafka transactions make each
//! procedure output appear in its topic exactly once (issue 23).
//!
//! One transactional producer per namespace partition, `transactional.id`
//! `<prefix>publisher.<namespace>.<partition>`. A batch is one transaction:
//! the messages, plus the outbox id `(input offset, index)` of the next
//! one, committed as the offset (and, in its metadata, the index) of
//! consumer group `<prefix>publisher.<namespace>` on the namespace's own
//! topic partition (`send_offsets_to_transaction`). So the messages and the
//! position after them become visible together or not at all, and a new
//! publisher starts where the last committed one ended:
//! - killed mid-batch: the open transaction is aborted (by the broker's
//!   transaction timeout, or at once by the next `init_transactions` with
//!   the same id); its messages are never visible to `read_committed`
//!   consumers, and the batch is published again;
//! - a zombie (a node that lost the partition but still runs): the new
//!   publisher's `init_transactions` fences it; its commits fail;
//! - broker restarted: the transaction fails or aborts; the batch is retried.
//!
//! Consumers of the output topics read with `isolation.level=read_committed`
//! (librdkafka's default; the Java client's is `read_uncommitted`).
//! Every message carries the header `tern.id` = `<ns>/<partition>/<offset>.<index>`.
//!
//! Owns: the producer, the committed position, creating output topics that
//! do not exist yet. Never: reads the outbox (the node's publisher does).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};

use super::kafka_log::MESSAGE_BYTES_MAX;
use super::outputs;
use super::sources::Sources;
use crate::log::{LogError, Outgoing, Publisher};

/// The header naming an output's deterministic id.
pub const ID_HEADER: &str = "tern.id";
/// Bound on one transaction's calls (init, commit, abort, offsets).
const TRANSACTION_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The broker aborts a transaction its producer left open this long (a
/// publisher killed mid-batch with no successor).
const TRANSACTION_TIMEOUT_MS: u64 = 60_000;
/// Longest wait, once every message is delivered, for the producer's thread
/// to hand back their reports (it takes microseconds; a stuck thread fails
/// the transaction instead of holding it).
const DELIVERED_WAIT_MAX: Duration = Duration::from_secs(5);
/// How often that wait looks.
const DELIVERED_POLL: Duration = Duration::from_millis(1);
/// How long a message waits before trying a full producer queue again.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(5);
/// Output topics this publisher has made sure of (bounded by the outputs of a namespace's procedures).
const ENSURED_TOPICS_MAX: usize = 4_096;

pub(super) struct KafkaPublisher {
    producer: FutureProducer,
    consumer: Arc<BaseConsumer>,
    admin: Arc<AdminClient<DefaultClientContext>>,
    /// The namespace's topic (its log) and partition: where the position is committed.
    topic: String,
    partition: i32,
    partitions: u32,
    replication_factor: i32,
    /// Output topics made (or found) so far, with their partition counts:
    /// an unkeyed output goes to the partition of this input partition's
    /// number (modulo the count), so it keeps its input partition's order.
    ensured: std::collections::HashMap<String, i32>,
    /// Tern's topic prefix, the namespace and the bound source topics: what
    /// an output may not be sent to (`outputs.rs`).
    prefix: String,
    namespace: String,
    sources: Arc<Sources>,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> LogError {
    LogError::Unavailable(format!("kafka publisher: {what}: {e}"))
}

/// An output Kafka did not take, said with its topic and size. Too large
/// for its topic is an output topic made outside Tern (or by a Tern before
/// it set the limit) with a smaller `max.message.bytes`, which bounds a
/// batch of outputs too: its partition's outbox is tried again until an
/// operator raises it, so the error says how. Over `MESSAGE_BYTES_MAX`
/// itself no topic setting helps (no output is made that large: a
/// procedure's is a value and its key, a dead letter is bounded however
/// large its input, `procedure::DEAD_LETTER_BYTES_MAX`).
fn refused(topic: &str, bytes: usize, e: KafkaError) -> LogError {
    let what = format!("an output of {bytes} bytes to {topic}");
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageSizeTooLarge) if bytes > MESSAGE_BYTES_MAX => unavailable(
            &what,
            format!("{e}; it is over the largest message Tern's producer sends ({MESSAGE_BYTES_MAX} bytes) and cannot be published"),
        ),
        Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
            unavailable(&what, format!("{e}; raise the topic's max.message.bytes to {MESSAGE_BYTES_MAX}, the largest output Tern sends"))
        }
        _ => unavailable(&what, e),
    }
}

impl KafkaPublisher {
    /// Creates the producer and fences any earlier one of the partition
    /// (`init_transactions`), which also ends its open transaction.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start(
        base: &ClientConfig,
        prefix: &str,
        sources: Arc<Sources>,
        namespace: &str,
        topic: &str,
        partition: u32,
        partitions: u32,
        replication_factor: i32,
        delivery_timeout: Duration,
    ) -> Result<KafkaPublisher, LogError> {
        let producer: FutureProducer = base
            .clone()
            .set("transactional.id", format!("{prefix}publisher.{namespace}.{partition}"))
            .set("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS.to_string())
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // A transaction's messages are all sent at once and awaited
            // before its commit: waiting to fill batches only delays it.
            .set("linger.ms", "1")
            // A transaction begun right after the last one committed is told
            // CONCURRENT_TRANSACTIONS until the broker wrote the last one's
            // markers, and retried after `retry.backoff.ms`: librdkafka's
            // 100 ms made a transaction take ~110 ms (BENCHMARKS.md, aggdemo).
            // Its backoff doubles up to the max: kept low, the retry comes
            // soon after the markers are written.
            .set("retry.backoff.ms", "5")
            .set("retry.backoff.max.ms", "20")
            .set("delivery.timeout.ms", delivery_timeout.as_millis().to_string())
            // An output is as large as a value and its key (1 MiB and
            // 1 KiB): librdkafka's default (1,000,000) would refuse the
            // largest, and refuse it again on every try of its batch.
            .set("message.max.bytes", MESSAGE_BYTES_MAX.to_string())
            // Output topics are made by `ensure_topics`, with their limit; a
            // topic deleted meanwhile is not made again with the broker's defaults.
            .set("allow.auto.create.topics", "false")
            .create()
            .map_err(|e| unavailable("creating the producer", e))?;
        let consumer: BaseConsumer = base
            .clone()
            .set("group.id", format!("{prefix}publisher.{namespace}"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .map_err(|e| unavailable("creating the position reader", e))?;
        let admin: AdminClient<DefaultClientContext> = base.create().map_err(|e| unavailable("creating the admin client", e))?;
        let init = producer.clone();
        tokio::task::spawn_blocking(move || init.init_transactions(TRANSACTION_CALL_TIMEOUT))
            .await
            .map_err(|e| unavailable("init_transactions", e))?
            .map_err(|e| unavailable("init_transactions", e))?;
        Ok(KafkaPublisher {
            producer,
            consumer: Arc::new(consumer),
            admin: Arc::new(admin),
            topic: topic.to_string(),
            partition: partition as i32,
            partitions,
            replication_factor,
            ensured: std::collections::HashMap::new(),
            prefix: prefix.to_string(),
            namespace: namespace.to_string(),
            sources,
        })
    }

    /// The position's partition list: the input offset as the offset, the index as the metadata.
    fn position_list(&self, next: Option<(u64, u32)>) -> Result<TopicPartitionList, LogError> {
        let mut list = TopicPartitionList::new();
        let mut element = list.add_partition(&self.topic, self.partition);
        if let Some((offset, index)) = next {
            element.set_offset(Offset::Offset(offset as i64)).map_err(|e| unavailable("the position", e))?;
            element.set_metadata(index.to_string());
        }
        Ok(list)
    }

    /// Creates the output topics of `messages` that do not exist (the
    /// namespace's partition count, the cluster's replication).
    async fn ensure_topics(&mut self, messages: &[Outgoing]) -> Result<(), LogError> {
        let batch: HashSet<String> = messages.iter().map(|m| m.topic.clone()).collect();
        // Cleared before, never between a batch's topics: every topic of a
        // batch keeps its count while the batch is sent (`send_all`).
        if self.ensured.len() + batch.len() > ENSURED_TOPICS_MAX {
            self.ensured.clear();
        }
        let new: Vec<String> = batch.into_iter().filter(|t| !self.ensured.contains_key(t)).collect();
        if new.is_empty() {
            return Ok(());
        }
        // Kafka's default max.message.bytes (about 1 MB) is below the
        // largest output: the topics Tern makes take what its producer sends.
        let max_message_bytes = MESSAGE_BYTES_MAX.to_string();
        let topics: Vec<NewTopic> = new
            .iter()
            .map(|t| {
                NewTopic::new(t, self.partitions as i32, TopicReplication::Fixed(self.replication_factor))
                    .set("max.message.bytes", &max_message_bytes)
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(Timeout::After(TRANSACTION_CALL_TIMEOUT)));
        let mut results = self.admin.create_topics(&topics, &options).await.map_err(|e| unavailable("creating output topics", e))?;
        // A cluster that caps max.message.bytes (a managed one's policy)
        // refuses the setting: those topics are made with its default, and
        // an output larger than it waits, said (`refused`).
        let capped: Vec<String> = results
            .iter()
            .filter_map(|r| match r {
                Err((topic, RDKafkaErrorCode::InvalidConfig | RDKafkaErrorCode::PolicyViolation)) => Some(topic.clone()),
                _ => None,
            })
            .collect();
        if !capped.is_empty() {
            tracing::warn!(topics = ?capped, max_message_bytes = MESSAGE_BYTES_MAX, "the cluster refused the output topics' max.message.bytes; they are made with its default, and larger outputs wait until it is raised");
            let plain: Vec<NewTopic> =
                capped.iter().map(|t| NewTopic::new(t, self.partitions as i32, TopicReplication::Fixed(self.replication_factor))).collect();
            results.retain(|r| !matches!(r, Err((t, _)) if capped.contains(t)));
            results.extend(self.admin.create_topics(&plain, &options).await.map_err(|e| unavailable("creating output topics", e))?);
        }
        let mut existing = Vec::new();
        for result in results {
            match result {
                // Made now, with the count asked for (metadata may not show it yet).
                Ok(topic) => {
                    self.ensured.insert(topic, self.partitions as i32);
                }
                Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => existing.push(topic),
                Err((topic, code)) => return Err(unavailable(&format!("creating output topic {topic}"), code)),
            }
        }
        if existing.is_empty() {
            return Ok(());
        }
        // Made before (by Tern or someone else): its count, from one
        // metadata request; one not shown whole yet fails this batch (the
        // publisher tries again).
        let consumer = self.consumer.clone();
        let counts = tokio::task::spawn_blocking(move || {
            let metadata = consumer.fetch_metadata(None, TRANSACTION_CALL_TIMEOUT)?;
            Ok::<_, KafkaError>(
                existing
                    .into_iter()
                    .map(|topic| {
                        let count =
                            metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map_or(0, |t| t.partitions().len() as i32);
                        (topic, count)
                    })
                    .collect::<Vec<(String, i32)>>(),
            )
        })
        .await
        .map_err(|e| unavailable("reading output topics' partitions", e))?
        .map_err(|e| unavailable("reading output topics' partitions", e))?;
        if let Some((topic, _)) = counts.iter().find(|(_, count)| *count <= 0) {
            return Err(unavailable("reading output topics' partitions", format!("{topic} shows no partitions yet")));
        }
        self.ensured.extend(counts);
        Ok(())
    }

    /// The messages whose topic this namespace may publish to. The others
    /// (from a definition the API would refuse: forged, or older than the
    /// check) are dropped, each with an error and a count: they can never be
    /// sent, and holding them would stop every later output.
    fn allowed(&self, messages: Vec<Outgoing>) -> Vec<Outgoing> {
        messages
            .into_iter()
            .filter(|m| match outputs::check_topic(&self.prefix, &self.sources, &self.namespace, &m.topic) {
                Ok(()) => true,
                Err(why) => {
                    tracing::error!(ns = %self.namespace, id = %m.id, "a procedure output is not published: {why}");
                    crate::metrics::PROCEDURE_OUTPUTS_REFUSED.with_label_values(&[&self.namespace]).inc();
                    false
                }
            })
            .collect()
    }

    /// The open transaction's work: its messages go out while its position
    /// is added (one round trip less than waiting for every delivery
    /// first), then every delivery is awaited, then the commit. Any error
    /// leaves the transaction to the caller's abort.
    async fn send_offer_commit(&self, messages: &[Outgoing], next: (u64, u32), steps: &mut Steps<'_>) -> Result<(), LogError> {
        let deliveries = self.send_all(messages).await?;
        steps.done("send");
        let offsets = self.position_list(Some(next))?;
        let metadata = self.consumer.group_metadata().ok_or_else(|| unavailable("group metadata", "none"))?;
        self.blocking("send_offsets_to_transaction", move |p| p.send_offsets_to_transaction(&offsets, &metadata, TRANSACTION_CALL_TIMEOUT)).await?;
        steps.done("offsets");
        self.delivered(deliveries).await?;
        steps.done("delivered");
        self.blocking("commit_transaction", |p| p.commit_transaction(TRANSACTION_CALL_TIMEOUT)).await?;
        steps.done("commit");
        Ok(())
    }

    /// Queues every message inside the open transaction, without waiting
    /// for their delivery; returns their deliveries (`delivered` awaits
    /// them before the commit).
    async fn send_all(&self, messages: &[Outgoing]) -> Result<Vec<DeliveryFuture>, LogError> {
        if let Some(m) = messages.iter().find(|m| m.key.is_none() && !self.ensured.contains_key(&m.topic)) {
            return Err(unavailable("sending an output", format!("{}: its partition count is not known", m.topic)));
        }
        let mut deliveries = Vec::with_capacity(messages.len());
        for m in messages {
            let headers = OwnedHeaders::new().insert(Header { key: ID_HEADER, value: Some(m.id.as_bytes()) });
            let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&m.topic).payload(&m.value[..]).headers(headers);
            match &m.key {
                Some(key) => record = record.key(&key[..]),
                // Unkeyed: this input partition's number in the output topic,
                // so its outputs keep the input partition's order (a
                // random partition each would keep none).
                None => {
                    let count = self.ensured.get(&m.topic).copied().unwrap_or(1).max(1);
                    record = record.partition(self.partition % count);
                }
            }
            let queued = self.queue(record).await.map_err(|e| refused(&m.topic, m.value.len(), e))?;
            deliveries.push(queued);
        }
        Ok(deliveries)
    }

    /// Queues one message. A full queue (its bytes: a batch of large
    /// outputs can pass librdkafka's queue, which empties as they are
    /// delivered) is waited on, up to `TRANSACTION_CALL_TIMEOUT`, as
    /// rust-rdkafka's `send` does; failing at once would fail the same
    /// batch again on every try, and the outbox would never move.
    async fn queue<'r>(&self, mut record: FutureRecord<'r, [u8], [u8]>) -> Result<DeliveryFuture, KafkaError> {
        let deadline = std::time::Instant::now() + TRANSACTION_CALL_TIMEOUT;
        loop {
            match self.producer.send_result(record) {
                Ok(delivery) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) if std::time::Instant::now() < deadline => {
                    record = back;
                    tokio::time::sleep(QUEUE_FULL_WAIT).await;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Waits until every message of the transaction was delivered and its
    /// report handed back, so the commit finds nothing to flush. Why not
    /// leave it to the commit: rust-rdkafka's `commit_transaction` flushes
    /// first, and its flush, finding a message still counted, polls for a
    /// full 100 ms (while this producer's own thread takes the reports):
    /// most transactions took 100 ms longer than Kafka needed.
    async fn delivered(&self, deliveries: Vec<DeliveryFuture>) -> Result<(), LogError> {
        for delivery in deliveries {
            match delivery.await {
                Ok(Ok(_)) => {}
                Ok(Err((e, message))) => return Err(refused(message.topic(), message.payload().map_or(0, <[u8]>::len), e)),
                Err(_) => return Err(unavailable("delivering an output", "the producer dropped its delivery report")),
            }
        }
        // A report is counted until the producer's thread is done with it,
        // just after the future above resolved: wait for that, bounded.
        let deadline = std::time::Instant::now() + DELIVERED_WAIT_MAX;
        while self.producer.flush(Timeout::After(Duration::ZERO)).is_err() {
            if std::time::Instant::now() > deadline {
                return Err(unavailable("delivering an output", format!("reports still counted after {DELIVERED_WAIT_MAX:?}")));
            }
            tokio::time::sleep(DELIVERED_POLL).await;
        }
        Ok(())
    }

    async fn blocking<T: Send + 'static>(
        &self,
        what: &'static str,
        call: impl FnOnce(FutureProducer) -> Result<T, KafkaError> + Send + 'static,
    ) -> Result<T, LogError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || call(producer)).await.map_err(|e| unavailable(what, e))?.map_err(|e| unavailable(what, e))
    }
}

/// Times each step of one transaction into
/// `tern_outbox_transaction_step_seconds` (where a row's wait goes).
struct Steps<'a> {
    namespace: &'a str,
    since: std::time::Instant,
}

impl<'a> Steps<'a> {
    fn new(namespace: &'a str) -> Self {
        Self { namespace, since: std::time::Instant::now() }
    }

    fn done(&mut self, step: &str) {
        let now = std::time::Instant::now();
        crate::metrics::OUTBOX_TRANSACTION_STEP_SECONDS.with_label_values(&[self.namespace, step]).observe((now - self.since).as_secs_f64());
        self.since = now;
    }
}

#[async_trait]
impl Publisher for KafkaPublisher {
    async fn position(&mut self) -> Result<(u64, u32), LogError> {
        let (consumer, list) = (self.consumer.clone(), self.position_list(None)?);
        let committed = tokio::task::spawn_blocking(move || consumer.committed_offsets(list, TRANSACTION_CALL_TIMEOUT))
            .await
            .map_err(|e| unavailable("reading the position", e))?
            .map_err(|e| unavailable("reading the position", e))?;
        let Some(element) = committed.find_partition(&self.topic, self.partition) else { return Ok((0, 0)) };
        let Offset::Offset(offset) = element.offset() else { return Ok((0, 0)) };
        if offset < 0 {
            return Ok((0, 0));
        }
        let metadata = element.metadata();
        if metadata.is_empty() {
            return Ok((offset as u64, 0));
        }
        let index = metadata.parse::<u32>().map_err(|_| {
            unavailable(
                "reading the position",
                format!("the committed position of {}/{} has metadata {metadata:?}, not an index", self.topic, self.partition),
            )
        })?;
        Ok((offset as u64, index))
    }

    async fn publish(&mut self, messages: Vec<Outgoing>, next: (u64, u32)) -> Result<(), LogError> {
        let messages = self.allowed(messages);
        self.ensure_topics(&messages).await?;
        let mut steps = Steps::new(&self.namespace);
        self.blocking("begin_transaction", |p| p.begin_transaction()).await?;
        steps.done("begin");
        let committed = self.send_offer_commit(&messages, next, &mut steps).await;
        if let Err(e) = committed {
            // Nothing of the batch becomes visible, except after a commit
            // that timed out (librdkafka then refuses the abort, and the
            // commit may still land). Either way the caller drops this
            // publisher; the next one's init_transactions ends or completes
            // the transaction, and it starts from the committed position.
            let _ = self.blocking("abort_transaction", |p| p.abort_transaction(TRANSACTION_CALL_TIMEOUT)).await;
            return Err(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_too_large_for_its_topic_says_what_to_raise() {
        let e = refused("ns.out", 200_051, KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge));
        let said = e.to_string();
        assert!(said.contains("an output of 200051 bytes to ns.out"), "{said}");
        assert!(said.contains(&format!("raise the topic's max.message.bytes to {MESSAGE_BYTES_MAX}")), "{said}");
        let other = refused("ns.out", 3, KafkaError::MessageProduction(RDKafkaErrorCode::TopicAuthorizationFailed)).to_string();
        assert!(other.contains("an output of 3 bytes to ns.out") && !other.contains("raise"), "{other}");
    }
}
