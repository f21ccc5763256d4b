//! Why a snapshot could not be taken, listed or restored.

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("object store: {0}")]
    Store(String),
    #[error("partition store: {0}")]
    Partition(String),
    #[error("snapshot {path} is invalid: {reason}")]
    Invalid {
        path: String,
        reason: String,
        /// Valid, but a snapshot of another log.
        other_log: bool,
    },
    /// Nothing to restore: no snapshot of the partition exists (a new
    /// namespace, or one never snapshotted), or none as new as asked for
    /// (`RestoreTarget::applied_next_min`). Not an error for a new store.
    #[error("no snapshot of {namespace}/{partition} exists")]
    NoneExist { namespace: String, partition: u32 },
    /// A snapshot of a topic of this name that was deleted (the log's topic
    /// of the name is another now): never restored, as if absent.
    #[error("snapshot {0} is of a deleted namespace of this name")]
    OfDeleted(String),
    /// Snapshots exist and every one failed to verify.
    #[error("no valid snapshot of {namespace}/{partition} (tried: {tried})")]
    NoneValid {
        namespace: String,
        partition: u32,
        tried: String,
        /// Some were rejected only for being of another log (`RestoreTarget::log`).
        other_log: bool,
    },
}

pub(super) fn store_error(e: impl std::fmt::Display) -> SnapshotError {
    SnapshotError::Store(e.to_string())
}
