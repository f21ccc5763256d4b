//! The embedded log: Tern's `Log` on one machine's disk.
//!
//! Layout of `dir`:
//! - `log-meta.json` and `log-meta.copy.json` (`meta.rs`): topics (name,
//!   id, partitions) and, per partition, the offset the retained log starts
//!   at (written before segments are deleted, so offsets are never reused
//!   after a restart), twice, each copy checksummed;
//! - `wal/<id>.seg`: one shared write-ahead log for all partitions of all
//!   topics, frames as in `frame.rs`, rolled at `segment_bytes_max`.
//!
//! Why one shared file rather than one log per partition: a group commit then
//! costs one fsync however many partitions it touches (see ARCHITECTURE.md).
//!
//! Crash safety: an append is answered only after its frame is fsynced. On
//! open, every segment is scanned and indexed; a torn or corrupt frame at the
//! end of the newest segment (or unwritten pages within the last group
//! commit's reach of its end) is the remains of an unacknowledged write and
//! is truncated. Damage anywhere else is read around: the scan finds the
//! next frame that verifies, and the offsets the damaged bytes held are
//! recorded as lost (`index::Lost`). No reader gets past them (the log's
//! start is above them) unless the operator accepted exactly them
//! (`--accept-loss`); the apply loop restores a snapshot that reaches past
//! them, or refuses the partition naming them (docs/damage.md).

/// Verifying a log's directory offline (`tern check`).
pub mod check;
mod embedded_log;
pub mod frame;
pub mod index;
mod meta;
mod reader;
pub mod segments;
#[cfg(test)]
mod tests;
mod writer;

pub use self::embedded_log::{AcceptLost, EmbeddedLog, EmbeddedLogConfig, MetaState};
pub use self::index::TailDoubt;
#[cfg(test)]
use self::meta::read_meta;
