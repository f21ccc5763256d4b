//! What the log's interface speaks in: topic partitions, records (Tern's
//! entries and a source topic's foreign ones), assignments, errors.

use bytes::Bytes;
use std::collections::BTreeSet;
use std::sync::Arc;

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
    /// The time the log itself stamped on the record when it appended it
    /// (ms since the Unix epoch): Kafka's `LogAppendTime`, the leader
    /// broker's clock, on the namespace topics Tern creates. None when the log did
    /// not stamp it (a topic with `CreateTime`, the embedded log, whose one
    /// node is writer and log alike). It bounds how far the record may move
    /// the partition's log time (`procedure::log_time`), so no writer's
    /// clock alone decides when timers fire. Part of the log, alike for
    /// every replica.
    pub appended_ms: Option<u64>,
}

impl LogRecord {
    /// A Tern entry (its payload is an encoded mutation), not stamped by the log.
    pub fn entry(offset: u64, payload: Bytes) -> LogRecord {
        LogRecord { offset, payload, foreign: None, appended_ms: None }
    }

    /// This record as stamped by the log at `appended_ms`.
    pub fn stamped(self, appended_ms: Option<u64>) -> LogRecord {
        LogRecord { appended_ms, ..self }
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
/// records), holding the entry's MAC (`kafka/entry_mac.rs`). Records
/// without one that verifies are the topic's own, inputs to procedures.
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
    /// The log did not take the write: it is not in the log, and never
    /// will be (a journaled copy is the only copy).
    #[error("the log is unavailable: {0}")]
    Unavailable(String),
    /// The write may or may not be in the log (it was in flight when the
    /// log failed, or landed at an offset the log did not say): never
    /// journaled, since a copy could apply it twice.
    #[error("the write's outcome is unknown: {0}")]
    Ambiguous(String),
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

/// One procedure output as the publisher sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    /// Deterministic: `<namespace>/<partition>/<input offset>.<index>`.
    pub id: String,
}
