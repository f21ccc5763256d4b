//! `Watches`: the watches a node serves — their settings (`WatchConfig`),
//! connection ids, where a new one starts (`Since`, `Start`), the bound on
//! how many run at once, and why one cannot open (`WatchError`).

use super::{Outlet, Session};
use crate::fanout::{event, queue, Cursor, Filter, Mode, QueueLimits, RingLimits};
use crate::log::Log;
use crate::partition::{Namespace, PartitionStatus};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Names the connection a watch is delivered on (a request extension): the
/// watches of one connection sit together in the dispatch index, so an
/// event wakes each connection's task once, not once per watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionId(pub u64);

impl ConnectionId {
    /// A new id, unique in this process (0 is never handed out: "unknown").
    pub fn next() -> ConnectionId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ConnectionId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Bound on each watch's queue.
    pub queue: QueueLimits,
    /// How often an idle watch is sent its advanced position.
    pub progress_interval: Duration,
    /// How often a `keep-alive` event is sent on a quiet watch.
    pub keep_alive_interval: Duration,
    /// Most watches one node serves at once.
    pub watches_max: usize,
    /// Recent events each partition keeps in memory for resuming watches.
    pub ring: RingLimits,
}

/// Where a watch starts.
#[derive(Debug, Clone)]
pub enum Since {
    /// Changes after the current head.
    Now,
    /// Changes strictly after this cursor.
    Cursor(Cursor),
    /// The current state, then changes strictly after it (`from=snapshot` on the wire).
    CurrentState,
}

/// How a session begins (its cursor is already set up for `Cursor`).
pub enum Start {
    Now,
    Cursor,
    CurrentState,
}

/// The node's watches: their settings, ids, the bound on their number, and
/// the signal that ends them all when the node stops.
pub struct Watches {
    pub(super) config: WatchConfig,
    pub(super) log: Arc<dyn Log>,
    pub(super) next_id: AtomicU64,
    pub(super) active: Arc<AtomicUsize>,
    pub(super) closing: tokio::sync::watch::Sender<bool>,
}

/// One counted watch; the count drops with it.
pub(crate) struct Slot {
    pub(super) active: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
        crate::metrics::WATCHES_OPEN.dec();
    }
}

impl Watches {
    pub fn new(config: WatchConfig, log: Arc<dyn Log>) -> Watches {
        Watches { config, log, next_id: AtomicU64::new(0), active: Arc::new(AtomicUsize::new(0)), closing: tokio::sync::watch::Sender::new(false) }
    }

    pub fn config(&self) -> &WatchConfig {
        &self.config
    }

    /// Ends every watch (each is sent `cancel` with `shutting_down`) and
    /// refuses new ones.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    pub(super) fn take_slot(&self, max: usize) -> Option<Slot> {
        let taken = self.active.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1));
        taken.ok().map(|_| {
            crate::metrics::WATCHES_OPEN.inc();
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
    #[error("this node serves {max} watches already; try another node or later")]
    TooMany { max: usize },
}

impl Watches {
    /// Validates a watch request on `ns` and sets up its session, which
    /// sends to `outlet`; the caller runs `session.run(start)`.
    /// `connection` names the connection the session is delivered on, so
    /// the sessions of one connection are woken together
    /// (`queue::WatchQueue::group`). Errors are found here, before anything
    /// is streamed, so the transport can answer them with a status code.
    pub fn open(
        &self,
        ns: Arc<Namespace>,
        filter: Filter,
        from: Since,
        mode: Mode,
        outlet: Outlet,
        connection: ConnectionId,
    ) -> Result<(Session, Start), WatchError> {
        let namespace: &str = &ns.name;
        let partitions = filter.partitions(ns.partitions);
        for &p in &partitions {
            match ns.handle(p).status() {
                PartitionStatus::NotHeld => return Err(WatchError::NotHeld { partition: p }),
                PartitionStatus::Refused(reason) => return Err(WatchError::Unavailable(format!("partition {p} is refused: {reason}"))),
                PartitionStatus::Serving | PartitionStatus::CatchingUp => {}
            }
            if let Some(why) = ns.handle(p).rebuilding() {
                return Err(WatchError::Unavailable(format!("partition {p} is rebuilding: {why}; it serves again once caught up")));
            }
        }
        let mut cursor = Cursor { namespace: namespace.to_string(), marks: Default::default() };
        let start = match from {
            Since::Now => Start::Now,
            Since::CurrentState => Start::CurrentState,
            Since::Cursor(given) => {
                if given.namespace != namespace {
                    return Err(WatchError::InvalidPosition(format!("the position is for namespace {:?}, not {namespace:?}", given.namespace)));
                }
                for &p in &partitions {
                    let mark = given.marks.get(p).ok_or_else(|| {
                        WatchError::InvalidPosition(format!(
                            "the position does not name partition {p}, which this watch watches; \
                             pass a position a watch of the same filter returned, or from=now / from=snapshot"
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
        if *self.closing.borrow() {
            return Err(WatchError::Unavailable("the node is shutting down".into()));
        }
        let max = self.config.watches_max;
        let slot = self.take_slot(max).ok_or(WatchError::TooMany { max })?;
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let watch = Arc::new(queue::WatchQueue::new(id, connection.0, filter, mode, self.config.queue));
        let closing = self.closing.subscribe();
        Ok((Session::new(ns, self.log.clone(), watch, cursor, outlet, self.config.clone(), slot, closing), start))
    }
}
