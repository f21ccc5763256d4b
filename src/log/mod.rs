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
mod traits;
mod types;

pub use self::traits::{Log, LogReader, Publisher};
pub use self::types::{
    Assignment, CreateOutcome, FetchSource, ForeignRecord, LogError, LogRecord, Outgoing, TopicInfo, TopicPartition, FOREIGN_HEADERS_MAX,
    TERN_ENTRY_HEADER,
};
