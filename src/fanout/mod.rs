//! The fan-out: the data plane between the apply loop and the watches.
//!
//! The apply loop turns each applied op into an `Event` (`event.rs`,
//! encoded once) and appends its batch to the partition's `PartitionFeed`
//! (`feed.rs`): a ring of recent events and a dispatcher task. That is the
//! whole interface the apply loop sees. The dispatcher finds the watches an
//! event concerns through an index of watched pks (`filter.rs`) and leaves
//! them shared batches in bounded queues (`queue.rs`); a queue that
//! overflows conflates (`Mode::State`) or is cut off (`Mode::Log`), and
//! never slows another. Where a watch stands is its `Cursor` (`cursor.rs`).
//!
//! The fan-out knows nothing of sessions, transports or the node: the
//! `watch` floor above reads the queues and talks to clients.

pub(crate) mod cursor;
pub(crate) mod event;
pub(crate) mod feed;
pub(crate) mod filter;
pub(crate) mod queue;

pub(crate) use self::cursor::Cursor;
pub(crate) use self::event::Event;
pub(crate) use self::feed::{PartitionFeed, RingLimits};
pub(crate) use self::filter::Filter;
pub(crate) use self::queue::{Mode, QueueLimits};
