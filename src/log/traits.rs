//! The log's interface: `Log` (every implementation keeps the contract in
//! the room's doc), its readers and the outbox's publisher. The embedded
//! log (`embedded/`) and Kafka (`kafka/`) implement it; everything above
//! it is the same code for both.

use super::types::Assignment;
use super::types::CreateOutcome;
use super::types::FetchSource;
use super::types::LogError;
use super::types::LogRecord;
use super::types::Outgoing;
use super::types::TopicInfo;
use super::types::TopicPartition;
use async_trait::async_trait;
use bytes::Bytes;
use std::time::Duration;

#[async_trait]
pub trait Log: Send + Sync + 'static {
    /// Creates a topic with `partitions` partitions, or says it exists (with
    /// the same count; a different count is `PartitionCountMismatch`).
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<CreateOutcome, LogError>;

    async fn list_topics(&self) -> Result<Vec<TopicInfo>, LogError>;

    /// Deletes namespace `name`'s log: its own topic and every entry in it,
    /// or, for a namespace on a source topic, only the binding (the source
    /// topic is other producers' and stays). Ok(false): no such topic.
    /// A topic created again under the name is another topic
    /// (`identity` differs). Default: not possible.
    async fn delete_topic(&self, name: &str) -> Result<bool, LogError> {
        Err(LogError::Unsupported(format!("this log cannot delete the topic of namespace {name:?}")))
    }

    /// Forgets what the log keeps of namespace `name`'s topic by name (its
    /// ends, breakers, limits): it was deleted, here or through another
    /// node, and one created again under the name starts anew. Default: nothing kept.
    fn forget_topic(&self, name: &str) {
        let _ = name;
    }

    /// Makes namespace `name` read the existing topic `source` as its log
    /// (its partitions are the namespace's): records without a
    /// `TERN_ENTRY_HEADER` that verifies are inputs to procedures, and Tern's
    /// own entries for the namespace are written there with it. Returns the partition
    /// count; `partitions`, when given, must be the topic's (else
    /// `PartitionCountMismatch`, and nothing is created). The binding is
    /// fixed at creation, like a partition count.
    /// Default: not possible (the embedded log has no foreign topics).
    async fn create_sourced(&self, name: &str, source: &str, partitions: Option<u32>) -> Result<(CreateOutcome, u32), LogError> {
        let _ = (name, partitions);
        Err(LogError::Unsupported(format!("source_topic {source:?}: only the Kafka log has foreign topics to read; run Tern with --kafka")))
    }

    /// Appends one entry; returns its offset once it is durable. Above the
    /// log, only the write path calls it (`node::write::append`).
    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError>;

    /// The largest entry `append` takes, in bytes: the write path refuses a
    /// larger one before anything is made durable (`node::write`), so a
    /// journaled write is never one the log can never take.
    fn entry_bytes_max(&self) -> usize;

    /// The largest entry `append` takes for `namespace` (at most
    /// `entry_bytes_max`): a Kafka topic may take less (its
    /// `max.message.bytes`), as last learned (`learn_entry_limits`).
    /// The write path refuses a larger write before it is journaled: the
    /// log would refuse it at every try. Default: `entry_bytes_max`.
    fn entry_bytes_max_of(&self, namespace: &str) -> usize {
        let _ = namespace;
        self.entry_bytes_max()
    }

    /// Learns from the log the largest entry of each of `namespaces` whose
    /// limit is due (Kafka: never learned, learned a minute ago, or its
    /// leader refused an entry for its size since), in one request bounded
    /// by the log's request timeout. Default: nothing to learn.
    async fn learn_entry_limits(&self, namespaces: &[String]) -> Result<(), LogError> {
        let _ = namespaces;
        Ok(())
    }

    /// The next offset to be written (Kafka's high watermark).
    async fn end_offset(&self, tp: &TopicPartition) -> Result<u64, LogError>;

    /// Whether `end_offset` is at or past every entry acknowledged before
    /// it was asked, whoever asks: true where one process decides the end
    /// (the embedded log). Not Kafka: a deposed leader its clients still
    /// reach answers with its old end (no leader lease), so a strong read
    /// there appends a barrier instead (`node/barrier.rs`). Default: false.
    fn end_offset_is_linearizable(&self) -> bool {
        false
    }

    /// Which broker `tp` is read from, and its leader (a replicated log
    /// only; None where it does not apply or is not known yet).
    fn fetch_source(&self, _tp: &TopicPartition) -> Option<FetchSource> {
        None
    }

    /// The lowest offset still held (entries below were deleted by
    /// retention, or lost to damage: `lost`).
    async fn start_offset(&self, tp: &TopicPartition) -> Result<u64, LogError>;

    /// When entries of `tp` below `start_offset` were lost to damaged bytes
    /// rather than deleted: which offsets and what damaged them, then the
    /// command that accepts exactly that loss. Default: never.
    fn lost(&self, _tp: &TopicPartition) -> Option<(String, String)> {
        None
    }

    /// Names this log's copy of `topic`, for snapshots: equal only for the
    /// same topic of the same log. Embedded: the log directory's id and the
    /// topic's; Kafka: the cluster id and the topic id (a topic deleted and
    /// re-created under the same name has a new one).
    async fn identity(&self, topic: &str) -> Result<String, LogError>;

    /// Moves an empty partition (start = end) to start at `offset`, so its
    /// next entry gets that offset: a node restored from snapshots into a new
    /// log (`--restore`) continues with versions above the restored ones.
    /// Default: not possible (a Kafka partition's offsets cannot be moved).
    async fn rebase_empty(&self, tp: &TopicPartition, offset: u64) -> Result<(), LogError> {
        Err(LogError::Unavailable(format!(
            "{tp}: this log cannot move a partition's offsets to {offset}; restore into the log the snapshots were taken of"
        )))
    }

    /// Checks the log's end against what the store of `tp` applied, before
    /// its reader opens. A log that lost its newest entries (the embedded
    /// log's newest segment damaged or cut short) holds appends until then,
    /// so no offset a store applied is taken again:
    /// - a store ahead of the end applied entries the log lost: the log
    ///   continues at `applied_next` when its open saw damage or a cut at
    ///   its end, or the operator accepted exactly `end..applied_next`;
    /// - damaged bytes after the partition's last entry that may have held
    ///   more of them: refused, unless accepted (`--accept-loss`), then the
    ///   log continues past as many offsets as they could have held.
    ///
    /// Ok(true): moved; check again. Ok(false): nothing to do (default:
    /// Kafka's offsets are the brokers'). Err: refused, saying what was
    /// found and the command that accepts it.
    async fn settle_tail(&self, _tp: &TopicPartition, _applied_next: u64) -> Result<bool, LogError> {
        Ok(false)
    }

    /// Why a procedure of `namespace` may not publish to `topics` (and to
    /// `<namespace>.<output>` for outputs it names at run time), if it may
    /// not. Default: the embedded log has no output topics (nothing is
    /// published; outboxes are read through the API).
    fn check_outputs(&self, namespace: &str, topics: &[&str]) -> Result<(), String> {
        let _ = (namespace, topics);
        Ok(())
    }

    /// Whether `publisher` can relay outboxes (has output topics).
    fn has_output_topics(&self) -> bool {
        false
    }

    /// The outbox publisher of `tp` (one per namespace partition: a new one
    /// fences the one before). Default: none (the embedded log has no
    /// output topics; its outboxes are read through the API).
    async fn publisher(&self, tp: &TopicPartition, partitions: u32) -> Result<Box<dyn Publisher>, LogError> {
        let _ = partitions;
        Err(LogError::Unsupported(format!("{tp}: this log has no output topics to publish procedure outputs to (only Kafka has)")))
    }

    /// Opens a reader of `tp` positioned at `from`.
    async fn reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError>;

    /// The least end offset of `tp` this node has proof of without asking
    /// (on Kafka: one past its own acknowledged appends; 0: none), for lag,
    /// staleness and a stuck reader's detection only — never for recovery
    /// decisions (a store ahead of the log is refused by the log's own
    /// answer, `end_offset`). Derived from `known_end_at`.
    fn known_end(&self, tp: &TopicPartition) -> u64 {
        self.known_end_at(tp).map_or(0, |(end, _)| end)
    }

    /// `known_end`, with when it was last proven (on Kafka: the last
    /// acknowledgement of this node's appends to `tp`): how recent the
    /// evidence is, for a stuck reader's detection (a node cut off from the
    /// log proves nothing new). None: no proof. Default: None.
    fn known_end_at(&self, tp: &TopicPartition) -> Option<(u64, std::time::Instant)> {
        let _ = tp;
        None
    }

    /// Opens a reader of `tp` at `from` that does not trust what the last one
    /// was told: the apply loop's reader delivered nothing while entries this
    /// node knows were acknowledged wait (a deposed Kafka leader, cut from
    /// the other brokers, still answers fetches with its old high watermark,
    /// and metadata from it names itself leader). `avoid`: the brokers the
    /// stuck readers of this partition fetched from or were told led it
    /// (`LogReader::suspects`). Default: `reader` (a log whose end offset
    /// is linearizable cannot strand a reader so).
    async fn reader_elsewhere(&self, tp: &TopicPartition, from: u64, avoid: &[i32]) -> Result<Box<dyn LogReader>, LogError> {
        let _ = avoid;
        self.reader(tp, from).await
    }

    /// Opens a reader of `tp` at `from` for a one-off look at history (a
    /// watch resuming), independent of the apply loop's reader.
    /// Default: `reader`, for logs whose readers are independent already.
    async fn history_reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        self.reader(tp, from).await
    }

    /// Tells the log that local consumers no longer need entries of `tp`
    /// below `offset` (their state is durable past it). Retention never
    /// deletes an entry at or above it.
    fn release_below(&self, tp: &TopicPartition, offset: u64);

    /// Which partitions this node should hold, and every change to that.
    /// Default: all of them, forever.
    fn assignment(&self) -> tokio::sync::watch::Receiver<Assignment> {
        tokio::sync::watch::channel(Assignment::All).1
    }

    /// Tells the log which namespaces this node knows, so a consumer group
    /// can assign their partitions. Default: nothing to do.
    fn follow_topics(&self, _namespaces: &[String]) {}

    /// Flushes and stops. Appends after `close` fail with `Closed`.
    async fn close(&self);
}

/// Relays one partition's outbox to its output topics, exactly once.
#[async_trait]
pub trait Publisher: Send {
    /// The outbox id `(input offset, index)` of the next message to
    /// publish: every message before it is published (as committed with the
    /// last batch; (0, 0) before the first).
    async fn position(&mut self) -> Result<(u64, u32), LogError>;

    /// Publishes `messages` (the outbox's, in order, from `position` up to
    /// `next`) and moves `position` to `next`, atomically: all of it becomes
    /// visible, or none. After an error the publisher is dropped; the next
    /// one starts from the committed position.
    async fn publish(&mut self, messages: Vec<Outgoing>, next: (u64, u32)) -> Result<(), LogError>;
}

#[async_trait]
pub trait LogReader: Send {
    /// Returns up to `records_max` entries in offset order, starting where the
    /// previous batch ended. Waits up to `wait` for the first one; returns an
    /// empty batch if none arrived by then.
    async fn next_batch(&mut self, records_max: usize, wait: Duration) -> Result<Vec<LogRecord>, LogError>;

    /// The lowest offset the next entry can have: past the last entry
    /// returned and past offsets the log used without entries (Kafka's
    /// transaction markers, which no consumer sees). The apply loop moves
    /// its applied offset there when idle, or a partition whose log ends
    /// with a marker would never reach the end. Default: nothing skipped.
    fn position(&self) -> Option<u64> {
        None
    }

    /// The brokers this reader fetches from and was told leads its
    /// partition, when the log has brokers and knows (for
    /// `Log::reader_elsewhere`). Default: none.
    fn suspects(&self) -> Vec<i32> {
        Vec::new()
    }

    /// Why this reader delivers nothing more although the log holds more
    /// (a Kafka record batch at `position` failed its checks on the broker
    /// it fetches from), while it is blocked there; None when it is not.
    /// The apply loop shows it (`PartitionHandle::block`) until the
    /// partition applies past it. Default: never blocked.
    fn blocked(&self) -> Option<&str> {
        None
    }
}
