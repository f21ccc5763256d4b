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
}

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
    #[error("the log is unavailable: {0}")]
    Unavailable(String),
    #[error("the log is closed")]
    Closed,
    #[error("the log is corrupt: {0}")]
    Corrupt(String),
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

    /// Appends one entry; returns its offset once it is durable.
    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError>;

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
