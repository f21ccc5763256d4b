//! Reading one partition of a Kafka topic from an offset the store chose.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use rdkafka::consumer::stream_consumer::StreamPartitionQueue;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::entry_mac::EntryKey;
use super::fetch_source::{FetchContext, LogConsumer};
use crate::log::{ForeignRecord, LogError, LogReader, LogRecord, TopicPartition, FOREIGN_HEADERS_MAX, TERN_ENTRY_HEADER};

pub(super) struct KafkaReader {
    tp: TopicPartition,
    consumer: Arc<LogConsumer>,
    topic: String,
    queue: StreamPartitionQueue<FetchContext>,
    next: u64,
    sourced: Records,
    /// Set when a fetched record batch at `next` failed its checks: the
    /// reader delivers nothing more (librdkafka went on past the batch).
    damaged: Option<String>,
    /// A fetch error met after records were gathered into a batch: the
    /// batch is returned, the error at the next call (returning the error
    /// then would lose the records, which `next` is already past).
    deferred: Option<LogError>,
}

/// Whose records a topic holds.
#[derive(Clone, Copy)]
pub(super) enum Records {
    /// A namespace's own topic: every record is one of Tern's entries.
    Tern,
    /// A namespace's source topic: a record is Tern's only if its entry
    /// header verifies with the key (`entry_mac.rs`); every other record is
    /// foreign (`LogRecord::foreign`). Without a key, every record is.
    Sourced(Option<EntryKey>),
}

impl KafkaReader {
    /// Splits off the partition's queue, then assigns the partition at `from`
    /// (in that order, so no message can land on the shared main queue).
    pub(super) fn open(consumer: &Arc<LogConsumer>, tp: TopicPartition, topic: &str, from: u64, sourced: Records) -> Result<KafkaReader, LogError> {
        let queue = consumer.split_partition_queue(topic, tp.partition as i32).ok_or_else(|| LogError::UnknownPartition(tp.to_string()))?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, tp.partition as i32, Offset::Offset(from as i64))
            .map_err(|e| LogError::Unavailable(format!("kafka: {e}")))?;
        consumer.incremental_assign(&assignment).map_err(|e| LogError::Unavailable(format!("kafka: {e}")))?;
        // A reader before it on this consumer may have paused the partition
        // at a damaged batch (`stop_at_damage`): this one fetches again.
        if let Err(e) = consumer.resume(&assignment) {
            tracing::warn!(tp = %tp, error = %e, "resuming a partition's fetches failed");
        }
        Ok(KafkaReader { tp, consumer: consumer.clone(), topic: topic.to_string(), queue, next: from, sourced, damaged: None, deferred: None })
    }
}

#[async_trait]
impl LogReader for KafkaReader {
    /// Nothing, once a batch failed its checks (`damaged`): the apply loop
    /// finds the reader stuck behind the log's end and opens it again,
    /// elsewhere first (another broker's copy may be intact), at what it
    /// applied: the damaged batch is fetched again, never passed.
    async fn next_batch(&mut self, records_max: usize, wait: Duration) -> Result<Vec<LogRecord>, LogError> {
        if self.damaged.is_some() {
            tokio::time::sleep(wait).await;
            return Ok(Vec::new());
        }
        if let Some(error) = self.deferred.take() {
            return Err(error);
        }
        let first = match tokio::time::timeout(wait, self.queue.recv()).await {
            Ok(message) => Fetched::of(message, self.sourced, &self.topic),
            Err(_) => {
                self.skip_markers();
                return Ok(Vec::new());
            }
        };
        let mut records = Vec::with_capacity(records_max.clamp(1, 1024));
        let mut fetched = Some(first);
        while let Some(one) = fetched.take() {
            if let Fetched::Damaged = one {
                self.stop_at_damage();
                break;
            }
            match self.accept(one) {
                Ok(record) => records.push(record),
                Err(error) if records.is_empty() => return Err(error),
                Err(error) => {
                    self.deferred = Some(error);
                    break;
                }
            }
            if records.len() < records_max {
                fetched = self.queue.recv().now_or_never().map(|message| Fetched::of(message, self.sourced, &self.topic));
            }
        }
        Ok(records)
    }

    fn position(&self) -> Option<u64> {
        Some(self.next)
    }

    fn blocked(&self) -> Option<&str> {
        self.damaged()
    }

    fn suspects(&self) -> Vec<i32> {
        let Some(source) = self.consumer.context().source(&self.topic, self.tp.partition as i32) else { return Vec::new() };
        let mut suspects = vec![source.fetching_from, source.leader];
        suspects.dedup();
        suspects
    }
}

/// One message taken off the partition queue: its payload copied once into
/// `Bytes`, so the borrowed librdkafka message can be released at once.
enum Fetched {
    Record(LogRecord),
    OffsetOutOfRange,
    /// A record batch that failed its CRC32C (or did not parse): librdkafka
    /// reports it and goes on after it.
    Damaged,
    Failed(KafkaError),
}

impl Fetched {
    /// Takes a message off the queue; from a source topic, a record that is
    /// not a verified Tern entry is foreign, and keeps its key, headers and timestamp.
    fn of(message: Result<rdkafka::message::BorrowedMessage<'_>, KafkaError>, sourced: Records, topic: &str) -> Fetched {
        match message {
            Ok(m) => {
                let payload = Bytes::copy_from_slice(m.payload().unwrap_or_default());
                let foreign = match sourced {
                    Records::Tern => None,
                    Records::Sourced(key) => foreign_of(&m, key.as_ref(), topic, &payload),
                };
                let record = LogRecord { offset: m.offset() as u64, payload, foreign, appended_ms: appended_ms(&m) };
                Fetched::Record(record)
            }
            // With auto.offset.reset=error, librdkafka reports an out-of-range
            // fetch position as AUTO_OFFSET_RESET and stops fetching the
            // partition: retention overtook this reader. Never "unavailable".
            Err(KafkaError::MessageConsumption(RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset)) => Fetched::OffsetOutOfRange,
            Err(KafkaError::MessageConsumption(RDKafkaErrorCode::BadMessage)) => Fetched::Damaged,
            Err(e) => Fetched::Failed(e),
        }
    }
}

/// A source topic's record as a foreign record, or None when its entry
/// header verifies with `key` (one of Tern's own entries, written by Tern).
/// A header that does not verify is counted and kept as a header like any other.
fn foreign_of(m: &rdkafka::message::BorrowedMessage<'_>, key: Option<&EntryKey>, topic: &str, payload: &[u8]) -> Option<Box<ForeignRecord>> {
    use rdkafka::message::Headers;
    let mut headers = Vec::new();
    if let Some(all) = m.headers() {
        for header in all.iter() {
            if header.key == TERN_ENTRY_HEADER {
                let mac = header.value.unwrap_or_default();
                if key.is_some_and(|key| key.verifies(topic, m.partition() as u32, payload, mac)) {
                    return None;
                }
                crate::metrics::SOURCE_ENTRIES_UNVERIFIED.inc();
                tracing::debug!(
                    topic,
                    partition = m.partition(),
                    offset = m.offset(),
                    "a record claims to be a Tern entry and does not verify: foreign"
                );
            }
            if headers.len() < FOREIGN_HEADERS_MAX {
                headers.push((header.key.to_string(), Bytes::copy_from_slice(header.value.unwrap_or_default())));
            }
        }
    }
    let key = m.key().map(Bytes::copy_from_slice);
    let timestamp_ms = m.timestamp().to_millis().filter(|t| *t >= 0).unwrap_or(0) as u64;
    Some(Box::new(ForeignRecord { key, headers, timestamp_ms }))
}

/// The broker's append time of a record of a topic with
/// `message.timestamp.type=LogAppendTime` (every namespace topic Tern creates; not its output topics); None
/// for a producer's `CreateTime`, which no one but that producer vouches for.
fn appended_ms(m: &rdkafka::message::BorrowedMessage<'_>) -> Option<u64> {
    match m.timestamp() {
        rdkafka::Timestamp::LogAppendTime(ms) if ms >= 0 => Some(ms as u64),
        _ => None,
    }
}

impl KafkaReader {
    /// When idle: librdkafka's position for the partition moves past control
    /// records (transaction markers) it consumed without delivering; take it
    /// (never backwards, and only what it has consumed: entries are never skipped).
    fn skip_markers(&mut self) {
        if self.damaged.is_some() {
            // librdkafka's position is past the damaged batch: never taken.
            return;
        }
        let Ok(positions) = self.consumer.position() else { return };
        let position = positions.find_partition(&self.topic, self.tp.partition as i32).and_then(|p| match p.offset() {
            rdkafka::Offset::Offset(o) if o >= 0 => Some(o as u64),
            _ => None,
        });
        if let Some(position) = position.filter(|p| *p > self.next) {
            tracing::debug!(tp = %self.tp, from = self.next, to = position, "past offsets without entries (transaction markers)");
            self.next = position;
        }
    }

    /// A batch at `next` failed its checks: stop there, saying so once.
    fn stop_at_damage(&mut self) {
        let why = format!(
            "a Kafka record batch of {} at offset {} failed its CRC32C check (damaged on a broker's disk or in transit); \
             it is fetched again, never applied or passed: if it stays, move the partition's leadership to a broker \
             holding an intact copy (docs/damage.md)",
            self.tp, self.next
        );
        tracing::error!(tp = %self.tp, offset = self.next, "{why}");
        crate::metrics::KAFKA_BATCHES_DAMAGED.inc();
        // librdkafka would fetch on past the batch (or fetch it again and
        // again): nothing more is fetched for this reader.
        let mut paused = TopicPartitionList::new();
        paused.add_partition(&self.topic, self.tp.partition as i32);
        if let Err(e) = self.consumer.pause(&paused) {
            tracing::warn!(tp = %self.tp, error = %e, "pausing a partition's fetches failed");
        }
        self.damaged = Some(why);
    }

    /// Why this reader stopped, when a fetched batch failed its checks.
    pub(super) fn damaged(&self) -> Option<&str> {
        self.damaged.as_deref()
    }

    /// Advances past a fetched record, or turns a fetch error into a log error.
    fn accept(&mut self, fetched: Fetched) -> Result<LogRecord, LogError> {
        match fetched {
            Fetched::Record(record) => {
                // Kafka offsets may skip (transaction markers), never go back.
                assert!(record.offset >= self.next, "kafka delivered offset {} below the reader's position {}", record.offset, self.next);
                self.next = record.offset + 1;
                Ok(record)
            }
            Fetched::OffsetOutOfRange => Err(LogError::OffsetOutOfRange { tp: self.tp.to_string(), requested: self.next, start: 0 }),
            Fetched::Damaged => unreachable!("taken by next_batch"),
            Fetched::Failed(e) => Err(LogError::Unavailable(format!("kafka: {e}"))),
        }
    }
}

impl Drop for KafkaReader {
    /// Stops fetching the partition when its apply loop goes away.
    fn drop(&mut self) {
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition(&self.topic, self.tp.partition as i32);
        if let Err(e) = self.consumer.incremental_unassign(&assignment) {
            tracing::warn!(tp = %self.tp, error = %e, "kafka unassign failed");
        }
    }
}

/// A reader on a consumer of its own, holding one of the log's bounded
/// history slots while it lives.
pub(super) struct HistoryReader {
    pub reader: KafkaReader,
    pub _permit: tokio::sync::OwnedSemaphorePermit,
}

#[async_trait]
impl LogReader for HistoryReader {
    /// A history reader stopped at a damaged batch fails (its watch resumes
    /// or starts again): it has no apply loop to open it again.
    async fn next_batch(&mut self, records_max: usize, wait: Duration) -> Result<Vec<LogRecord>, LogError> {
        if let Some(why) = self.reader.damaged() {
            return Err(LogError::Unavailable(why.to_string()));
        }
        let records = self.reader.next_batch(records_max, wait).await?;
        match self.reader.damaged() {
            Some(why) if records.is_empty() => Err(LogError::Unavailable(why.to_string())),
            _ => Ok(records),
        }
    }

    fn position(&self) -> Option<u64> {
        self.reader.position()
    }
}

/// The apply loop's reader on a consumer of its own, bootstrapped from
/// brokers other than the one the stuck reader fetched from
/// (`Log::reader_elsewhere`); holds one of the log's bounded slots for
/// such consumers, and the task that serves its main queue (statistics:
/// where it fetches from).
pub(super) struct ElsewhereReader {
    /// Some until dropped (off the runtime's workers: closing blocks).
    pub reader: Option<KafkaReader>,
    /// Dropped with the reader: stops the task serving the consumer's main
    /// queue, which drops its handle on the consumer off the workers too.
    pub main_queue_stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Its consumer's statistics stand for the partition's fetch source
    /// (`Log::fetch_source`) while it lives.
    pub _sources: ElsewhereSource,
    pub _permit: tokio::sync::OwnedSemaphorePermit,
}

impl ElsewhereReader {
    fn reader(&self) -> &KafkaReader {
        self.reader.as_ref().expect("present until dropped")
    }
}

#[async_trait]
impl LogReader for ElsewhereReader {
    async fn next_batch(&mut self, records_max: usize, wait: Duration) -> Result<Vec<LogRecord>, LogError> {
        self.reader.as_mut().expect("present until dropped").next_batch(records_max, wait).await
    }

    fn position(&self) -> Option<u64> {
        self.reader().position()
    }

    fn suspects(&self) -> Vec<i32> {
        self.reader().suspects()
    }

    fn blocked(&self) -> Option<&str> {
        self.reader().blocked()
    }
}

impl Drop for ElsewhereReader {
    fn drop(&mut self) {
        self.main_queue_stop.take();
        if let Some(reader) = self.reader.take() {
            tokio::task::spawn_blocking(move || drop(reader));
        }
    }
}

/// The statistics of the consumers of `ElsewhereReader`s, by partition:
/// at most one per partition, bounded by the log's slots for them.
#[derive(Default, Clone)]
pub(super) struct ElsewhereSources {
    contexts: std::sync::Arc<parking_lot::Mutex<std::collections::HashMap<TopicPartition, FetchContext>>>,
}

impl ElsewhereSources {
    /// `context` stands for `tp`'s fetch source until the guard drops.
    pub(super) fn register(&self, tp: &TopicPartition, context: &FetchContext) -> ElsewhereSource {
        self.contexts.lock().insert(tp.clone(), context.clone());
        ElsewhereSource { sources: self.clone(), tp: tp.clone() }
    }

    pub(super) fn of(&self, tp: &TopicPartition) -> Option<FetchContext> {
        self.contexts.lock().get(tp).cloned()
    }
}

/// One partition's entry in `ElsewhereSources`, removed on drop.
pub(super) struct ElsewhereSource {
    sources: ElsewhereSources,
    tp: TopicPartition,
}

impl Drop for ElsewhereSource {
    fn drop(&mut self) {
        self.sources.contexts.lock().remove(&self.tp);
    }
}
