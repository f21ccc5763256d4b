//! The log: Tern's only write path.
//!
//! A log holds topics (one per namespace), each split into partitions; each
//! partition is an append-only sequence of entries numbered by dense,
//! monotonic offsets starting at 0. Everything above this interface is the
//! same code whether the log is embedded (one machine) or Kafka/Redpanda.
//!
//! The contract every implementation keeps:
//! - `append` returns an offset only once the entry is durable (embedded:
//!   fsynced; Kafka: acknowledged by all in-sync replicas).
//! - `end_offset` is the next offset to be written; every entry below it is
//!   durable and readable. Readers never see an entry that is not durable,
//!   so a store can never apply something the log could later lose.
//! - A reader yields entries of one partition in offset order, from the offset
//!   it was opened at, without gaps; if that offset is below the partition's
//!   `start_offset` (deleted by retention) it fails with `OffsetOutOfRange`
//!   rather than skipping.

pub mod embedded;
pub mod kafka;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: u32,
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// One entry read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub offset: u64,
    pub payload: Bytes,
    /// Set when the record is not a Tern entry: a record of a namespace's
    /// source topic (`source_topic`) that another producer wrote. Its
    /// payload is the producer's value, never decoded as a mutation.
    pub foreign: Option<Box<ForeignRecord>>,
}

impl LogRecord {
    /// A Tern entry (its payload is an encoded mutation).
    pub fn entry(offset: u64, payload: Bytes) -> LogRecord {
        LogRecord { offset, payload, foreign: None }
    }
}

/// What a source topic's record carries besides its value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForeignRecord {
    pub key: Option<Bytes>,
    /// In the record's order; names are UTF-8 (others are left out).
    pub headers: Vec<(String, Bytes)>,
    /// The record's Kafka timestamp (create or log-append time; 0 if none).
    pub timestamp_ms: u64,
}

/// The Kafka header that marks a Tern entry in a source topic (a namespace
/// with `source_topic` writes its own entries there: deployments, ticks,
/// records). Records without it are the topic's own, inputs to procedures.
pub const TERN_ENTRY_HEADER: &str = "tern.entry";

/// Most headers of a source record kept (the rest are left out); bounds
/// the memory of one record beside its value.
pub const FOREIGN_HEADERS_MAX: usize = 64;

/// Which partitions this node should hold: apply, and serve reads of.
///
/// The log decides, because in Kafka mode the replica group *is* a Kafka
/// consumer group: the group coordinator assigns each partition to one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Every partition of every topic: the embedded log, or a Kafka node in
    /// `assign` mode (alone, holding everything without a consumer group).
    All,
    /// Not known yet: joining a Kafka consumer group. Holds nothing.
    Pending,
    /// Exactly these: a member of a Kafka consumer group.
    Only(BTreeSet<TopicPartition>),
}

impl Assignment {
    pub fn holds(&self, tp: &TopicPartition) -> bool {
        match self {
            Assignment::All => true,
            Assignment::Pending => false,
            Assignment::Only(held) => held.contains(tp),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub partitions: u32,
    /// The existing topic this namespace reads as its log (`source_topic`),
    /// if it was created on one.
    pub source_topic: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    AlreadyExists,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("unknown topic or partition {0}")]
    UnknownPartition(String),
    #[error("topic {topic} already exists with {existing} partitions, not {requested}")]
    PartitionCountMismatch { topic: String, existing: u32, requested: u32 },
    #[error(
        "offset {requested} of {tp} is no longer in the log (it starts at {start}): \
         the entries were deleted by retention"
    )]
    OffsetOutOfRange { tp: String, requested: u64, start: u64 },
    #[error("entry of {size_bytes} bytes is larger than the log accepts ({max_bytes} bytes)")]
    EntryTooLarge { size_bytes: usize, max_bytes: usize },
    /// A broker refused an entry as too large for its topic (a source
    /// topic's own `max.message.bytes`, below Tern's bound).
    #[error("the log refused an entry of {size_bytes} bytes as too large for its topic: {reason}")]
    TooLargeForTopic { size_bytes: usize, reason: String },
    #[error("the log is unavailable: {0}")]
    Unavailable(String),
    #[error("the log is closed")]
    Closed,
    #[error("the log is corrupt: {0}")]
    Corrupt(String),
    /// Asked for something this log cannot do (a request error: 400).
    #[error("{0}")]
    Unsupported(String),
    /// A source topic asked for that does not exist or is taken (409 / 404).
    #[error("{0}")]
    SourceConflict(String),
    #[error("log i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Where a partition of a replicated log is read from: broker ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchSource {
    pub leader: i32,
    /// The leader, or a follower in this node's rack (KIP-392).
    pub fetching_from: i32,
}

#[async_trait]
pub trait Log: Send + Sync + 'static {
    /// Creates a topic with `partitions` partitions, or says it exists (with
    /// the same count; a different count is `PartitionCountMismatch`).
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<CreateOutcome, LogError>;

    async fn list_topics(&self) -> Result<Vec<TopicInfo>, LogError>;

    /// Makes namespace `name` read the existing topic `source` as its log
    /// (its partitions are the namespace's): records without the
    /// `TERN_ENTRY_HEADER` are inputs to procedures, and Tern's own entries
    /// for the namespace are written there with it. Returns the partition
    /// count; `partitions`, when given, must be the topic's (else
    /// `PartitionCountMismatch`, and nothing is created). The binding is
    /// fixed at creation, like a partition count.
    /// Default: not possible (the embedded log has no foreign topics).
    async fn create_sourced(&self, name: &str, source: &str, partitions: Option<u32>) -> Result<(CreateOutcome, u32), LogError> {
        let _ = (name, partitions);
        Err(LogError::Unsupported(format!(
            "source_topic {source:?}: only the Kafka log has foreign topics to read; run Tern with --kafka"
        )))
    }

    /// Appends one entry; returns its offset once it is durable. Above the
    /// log, only the write path calls it (`node::write::append`).
    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError>;

    /// The largest entry `append` takes, in bytes: the write path refuses a
    /// larger one before anything is made durable (`node::write`), so a
    /// journaled write is never one the log can never take.
    fn entry_bytes_max(&self) -> usize;

    /// The next offset to be written (Kafka's high watermark).
    async fn end_offset(&self, tp: &TopicPartition) -> Result<u64, LogError>;

    /// Which broker `tp` is read from, and its leader (a replicated log
    /// only; None where it does not apply or is not known yet).
    fn fetch_source(&self, _tp: &TopicPartition) -> Option<FetchSource> {
        None
    }

    /// The lowest offset still held (entries below were deleted by retention).
    async fn start_offset(&self, tp: &TopicPartition) -> Result<u64, LogError>;

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

    /// Opens a reader of `tp` at `from` for a one-off look at history (a
    /// subscriber resuming), independent of the apply loop's reader.
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

/// One procedure output as the publisher sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    /// Deterministic: `<namespace>/<partition>/<input offset>.<index>`.
    pub id: String,
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
}
