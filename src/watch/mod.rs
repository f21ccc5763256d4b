//! Watches: a client watches a record, a pk (optionally an sk prefix of
//! it) or a whole namespace, and receives every change in log order,
//! pushed, each with the position after it (invariant "watches never miss
//! and never repeat", ARCHITECTURE.md).
//!
//! The path of a change:
//! 1. The apply loop turns each applied op into an `Event` and appends it
//!    to its partition's feed (`fanout`, the floor below).
//! 2. The feed's dispatcher leaves it in the bounded queue of every watch it
//!    concerns (`fanout::queue`).
//! 3. Each watch's session (`session.rs`, woken as `wakes.rs` says) sends
//!    what its queue holds, with the cursor after each event, to its outlet
//!    (`outlet.rs`). Sessions have no task of their own: the transport (SSE
//!    or WebSocket, in `api/`) polls them in its own task and writes what
//!    they left in the outlet.
//!
//! Resuming: a watch that stands below what was dispatched catches up
//! first, from the feed's ring or, older, from the log (`history.rs`). When
//! that history is gone it is reset: it receives the full state of what it
//! watches, with a new position, never a gap.
//!
//! `Watches` is the node's book of them (ids, the bound on their number,
//! the signal that ends them all); `Watches::open` validates a request and
//! sets up its session. It is handed the namespace and the log: this floor
//! never sees the node.

pub(crate) mod history;
pub(crate) mod outlet;
pub(crate) mod session;
pub(crate) mod wakes;

pub(crate) use self::outlet::{Outlet, OutletReader, Tag, Tagged};
pub(crate) use self::session::{ChangeId, Message, Session};
mod watches;

pub(crate) use self::watches::{ConnectionId, Since, Slot, Start, WatchConfig, WatchError, Watches};
