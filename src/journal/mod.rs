//! The node's journal (issue 19): writes made durable here before the log
//! has them, so a write can be acknowledged while the log is slow or down
//! and sequenced into it later, in journal order.
//!
//! The journal is an embedded log of its own (`<data_dir>/journal`): one
//! topic per namespace, the namespace's partitions, an entry per write (the
//! mutation as the log would carry it, its write id inside). So it gets the
//! embedded log's properties for free: an append is answered once its frame
//! is fsynced, appends of the same moment share one fsync (group commit),
//! a torn tail is truncated at open, and entries of a partition keep their
//! order. What the journal adds:
//!
//! - **Bounds.** `JournalLimits`: entries and bytes not yet released; an
//!   append past them is refused (`JournalError::Full`), never dropped later.
//! - **Release.** An entry is released only once its write was seen applied
//!   (the caller says so: `release_below`, in memory, at once); the marks
//!   go to disk together at the caller's pace (`persist_released`, one
//!   fsynced file write for every partition), and released segments are
//!   deleted after. A restart replays what was released after the last
//!   written mark (applied once: its place in its lane), never below it.
//! - **Replay.** `pending` lists what is journaled and not released, per
//!   namespace and partition, from where a restarted node must sequence
//!   again. An entry sequenced but not yet released when the node stopped is
//!   sequenced twice; the apply loop applies it once (its write id).
//!
//! Owns: the journal's files and bounds. Never: appends to the log (the
//! sequencer does), decides whether a write was applied (the partition's
//! handle knows).

/// Verifying a journal's directory offline (`tern check`).
pub mod check;
mod local;
pub mod objects;

/// The journal lane of `journal_id`'s topic of namespace `ns` (made with
/// `partitions`): what a journaled write's `JournalPlace` names, the same
/// for the owner's sequencer and for a node replaying the journal from
/// object storage. A journal's topic is never made again with other
/// partitions while it holds entries, and a new data directory is a new
/// journal id, so a lane's offsets never start over.
pub fn lane_of(journal_id: &str, ns: &str, partitions: u32) -> bytes::Bytes {
    let mut hasher = blake3::Hasher::new_derive_key("tern journal lane v1");
    for part in [journal_id.as_bytes(), ns.as_bytes()] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.update(&partitions.to_le_bytes());
    bytes::Bytes::copy_from_slice(&hasher.finalize().as_bytes()[..16])
}

/// The file that holds a journal's id in its directory (made at first open).
#[cfg(test)]
pub(crate) use self::local::ID_FILE;
pub use self::local::{Backlog, Journal, JournalError, JournalLimits, ObjectsConfig, Pending};

#[cfg(test)]
mod tests;
