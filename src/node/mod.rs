//! The node: the namespaces this process holds, each partition's store and
//! apply task, and the two paths through them — `write` (append to the log,
//! optionally wait for the outcome) and `read` (local store, optionally after
//! a bounded wait for a position).
//!
//! The node never writes a store itself; it only starts and stops apply loops:
//! one per partition the log assigns to it (`Log::assignment`: every
//! partition, or this member's share of its replica group). Stores of every
//! partition stay open; a partition the node lets go of keeps its store and
//! resumes from its applied offset if it comes back.

//!
//! `lifecycle.rs` holds the `Node` and how it starts and stops; each of its
//! concerns is a file of its own (listed there).

pub mod attempt_ids;
mod barrier;
/// `tern check DATA_DIR`: a data directory verified offline.
pub mod check;
pub(crate) mod claims;
mod config;
mod deletion;
mod elsewhere;
mod health;
mod lifecycle;
pub mod namespace_options;
mod namespaces;
mod ownership;
mod publisher;
pub mod read;
pub mod reserved;
pub(crate) mod ripcord_host;
pub(crate) mod ripcord_route;
mod scrub;
pub(crate) mod sequencer;
pub mod snapshots;
mod ticks;
mod watches;
pub mod write;

pub use self::config::NodeConfig;
pub use self::deletion::{DeleteError, DeletedNamespace};
pub use self::elsewhere::{AppliedElsewhere, Isolated, ReadElsewhere, RecordAt, ServedElsewhere};
pub use self::lifecycle::Node;
pub use self::namespaces::NamespaceError;
pub use self::scrub::ScrubConfig;
use crate::partition::Namespace;
