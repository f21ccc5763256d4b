//! The partition store: one redb database per partition.
//!
//! It holds the partition's records, the offset it has applied up to, the
//! state hash and counters, all changed in one write transaction per applied
//! batch, so the data and the offset it reflects can never disagree
//! (invariant "offset with data", ARCHITECTURE.md). Only the partition's
//! apply loop writes (`apply`); readers
//! take MVCC read transactions that never block it and always see one applied
//! offset with exactly the records it reflects.
//!
//! Commits are not fsynced (the log is the source of truth) except every
//! `flush_durable`; after a crash the store reopens at its last durable
//! commit and the apply loop replays the log from there.
//!
//! Files: `layout.rs` (keys and values in the one table), `txn.rs` (the
//! apply transaction), `write_ids.rs` and `not_applied.rs` (what it remembers
//! besides records), `reader.rs` (read views), `key.rs` (key encoding),
//! `hash.rs` (the incremental state hash).

/// Verifying a store offline (`tern check`).
pub mod check;
/// A store that fails its checks: set aside, replaced, rebuilt.
pub mod damaged;
pub mod hash;
/// A record's last versions, with when and by whom.
mod history;
mod journal_lanes;
pub mod key;
mod layout;
/// Listing a partition's records across pks, in `(pk, sk)` order.
mod listing;
mod not_applied;
/// What procedures keep beside the records: definitions, log time, timers, outbox.
mod procedures;
mod reader;
/// Reading every entry of a running store at a bounded pace.
mod scrub;
/// Adding up a store's entries (checksums, state hash, count).
mod tally;
/// Reading JSON trees (`crate::tree`) from their leaf records.
pub mod tree;
mod txn;
mod write_ids;

pub use self::history::HistoryEntry;
pub use self::key::SkRange;
pub(crate) use self::layout::{is_outcome_meta, LOG_IDENTITY_BYTES_MAX};
pub use self::listing::ListingPage;
pub use self::procedures::{DueTimer, OutboxEntry};
pub use self::reader::StoreReader;
pub use self::scrub::{ScrubOutcome, ScrubPass};
pub use self::txn::ApplyTxn;
mod partition_store;

pub use self::partition_store::{OpenFailure, PartitionStore, Record, RestoredState, StoreError, StoreState};
