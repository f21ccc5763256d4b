//! Subscriptions: clients watch a record, a pk (optionally an sk prefix of
//! it) or a whole namespace, and receive every change in log order, pushed,
//! each with the position after it (spec guarantee 7).
//!
//! The path of a change:
//! 1. The apply loop decodes a mutation once and, after the commit, turns
//!    each applied op into an `Event` whose JSON is encoded once
//!    (`event.rs`), appended to its partition's ring (`feed.rs`).
//! 2. The partition's dispatcher finds the subscribers an event concerns
//!    through an index of watched pks (`filter.rs`) and leaves them shared
//!    batches in bounded queues (`queue.rs`). It never waits on a
//!    subscriber; a queue that overflows conflates (`mode=state`) or cancels
//!    (`mode=log`).
//! 3. Each subscription's session (`session.rs`, woken as `wakes.rs` says)
//!    sends what its queue holds, with the cursor after each event
//!    (`cursor.rs`), to its outbox (`outbox.rs`). Sessions have no task of
//!    their own: the transport (SSE or WebSocket, in `api/`) polls them in
//!    its own task and writes what they left in the outbox.
//!
//! Resuming: a subscriber that stands below what was dispatched catches up
//! first, from the ring or, older, from the log (`history.rs`). When that
//! history is gone it is reset: it receives the full state of what it
//! watches, with a new position, never a gap.

pub mod cursor;
pub mod event;
pub mod feed;
pub mod filter;
pub mod history;
pub mod outbox;
pub mod queue;
pub mod session;
pub mod wakes;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;


pub use self::cursor::Cursor;
pub use self::filter::Filter;
pub use self::queue::{Mode, QueueLimits};
pub use self::outbox::{Outbox, OutboxReader, Tag, Tagged};
pub use self::session::{ChangeId, Message, Session};
use crate::apply::PartitionStatus;
use crate::node::Node;

#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Bound on each subscriber's queue.
    pub queue: QueueLimits,
    /// How often an idle subscriber is sent its advanced position.
    pub progress_interval: Duration,
    /// How often a `keep-alive` event is sent on a quiet subscription.
    pub keep_alive_interval: Duration,
    /// Most subscriptions one node serves at once.
    pub subscribers_max: usize,
    /// Recent events each partition keeps in memory for resuming subscribers.
    pub ring: feed::RingLimits,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            queue: QueueLimits { events_max: 4096, bytes_max: 8 * 1024 * 1024 },
            progress_interval: Duration::from_millis(2000),
            keep_alive_interval: Duration::from_millis(15_000),
            subscribers_max: 100_000,
            ring: feed::RingLimits::default(),
        }
    }
}

/// Where a subscription starts.
#[derive(Debug, Clone)]
pub enum From {
    /// Changes after the current head.
    Now,
    /// Changes strictly after this cursor.
    Cursor(Cursor),
    /// The current state, then changes strictly after it.
    Snapshot,
}

/// How a session begins (its cursor is already set up for `Cursor`).
pub enum Start {
    Now,
    Cursor,
    Snapshot,
}

/// The node's subscription book-keeping: ids, the bound on their number,
/// and the signal that ends them all when the node stops.
pub struct Subscriptions {
    next_id: AtomicU64,
    active: Arc<AtomicUsize>,
    closing: tokio::sync::watch::Sender<bool>,
}

impl Default for Subscriptions {
    fn default() -> Self {
        Subscriptions { next_id: AtomicU64::new(0), active: Arc::new(AtomicUsize::new(0)), closing: tokio::sync::watch::Sender::new(false) }
    }
}

/// One counted subscription; the count drops with it.
pub struct Slot {
    active: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
        crate::metrics::WATCH_SUBSCRIBERS.dec();
    }
}

impl Subscriptions {
    /// Ends every subscription (each is sent `cancel` with `shutting_down`)
    /// and refuses new ones.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    fn take_slot(&self, max: usize) -> Option<Slot> {
        let taken = self.active.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1));
        taken.ok().map(|_| {
            crate::metrics::WATCH_SUBSCRIBERS.inc();
            Slot { active: self.active.clone() }
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("namespace {0:?} does not exist")]
    NamespaceNotFound(String),
    #[error("{0}")]
    InvalidPosition(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("partition {partition} is not held by this node; watch through a node that holds it (GET /v1/cluster)")]
    NotHeld { partition: u32 },
    #[error("this node serves {max} subscriptions already; try another node or later")]
    TooMany { max: usize },
}

/// Validates a watch request and sets up its session, which sends to
/// `outbox`; the caller runs `session.run(start)`. `connection` names the
/// connection the session is delivered on (0: unknown), so the sessions of
/// one connection are woken together (`queue::Subscriber::group`).
/// Errors are found here, before anything is streamed, so the transport
/// can answer them with a status code.
pub fn open(
    node: &Node,
    namespace: &str,
    filter: Filter,
    from: From,
    mode: Mode,
    outbox: Outbox,
    connection: u64,
) -> Result<(Session, Start), WatchError> {
    let ns = node.namespace(namespace).ok_or_else(|| WatchError::NamespaceNotFound(namespace.to_string()))?;
    let partitions = filter.partitions(ns.partitions);
    for &p in &partitions {
        match ns.handle(p).status() {
            PartitionStatus::NotHeld => return Err(WatchError::NotHeld { partition: p }),
            PartitionStatus::Refused(reason) => {
                return Err(WatchError::Unavailable(format!("partition {p} is refused: {reason}")))
            }
            PartitionStatus::Serving | PartitionStatus::CatchingUp => {}
        }
    }
    let mut cursor = Cursor { namespace: namespace.to_string(), marks: Default::default() };
    let start = match from {
        From::Now => Start::Now,
        From::Snapshot => Start::Snapshot,
        From::Cursor(given) => {
            if given.namespace != namespace {
                return Err(WatchError::InvalidPosition(format!(
                    "the position is for namespace {:?}, not {namespace:?}",
                    given.namespace
                )));
            }
            for &p in &partitions {
                let mark = given.marks.get(p).ok_or_else(|| {
                    WatchError::InvalidPosition(format!(
                        "the position does not name partition {p}, which this subscription watches; \
                         pass a position a subscription of the same filter returned, or from=now / from=snapshot"
                    ))
                })?;
                cursor.marks.insert(p, mark);
            }
            Start::Cursor
        }
    };
    for &p in &partitions {
        cursor.marks.insert_if_absent(p, event::Mark::at(0));
    }
    if *node.subscriptions.closing.borrow() {
        return Err(WatchError::Unavailable("the node is shutting down".into()));
    }
    let config = node.config.watch.clone();
    let slot = node.subscriptions.take_slot(config.subscribers_max).ok_or(WatchError::TooMany { max: config.subscribers_max })?;
    let id = node.subscriptions.next_id.fetch_add(1, Ordering::SeqCst);
    let subscriber = Arc::new(queue::Subscriber::new(id, connection, filter, mode, config.queue));
    let closing = node.subscriptions.closing.subscribe();
    Ok((Session::new(ns, node.log.clone(), subscriber, cursor, outbox, config, slot, closing), start))
}
