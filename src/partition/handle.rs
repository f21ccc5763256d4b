//! `PartitionHandle`: everything the rest of the node may know about one
//! partition it holds. Readers use `store()` directly (never the apply task);
//! writers wait on `wait_applied` and read their outcome.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use prometheus::IntGauge;
use tokio::sync::watch;

use super::outcome::{Outcome, OutcomeRing};
use super::read_memo::ReadMemo;
use crate::log::TopicPartition;
use crate::metrics;
use crate::store::{PartitionStore, StoreError, StoreReader};

/// A consistent read view, shared by concurrent readers while the
/// partition's applied offset does not move.
pub struct ReadView {
    /// The position of what `reader` shows (read from the view itself).
    pub applied_next: u64,
    pub reader: StoreReader,
    /// Answers readers made from this view, by key (`read_memo.rs`): a
    /// view never changes, so neither do they.
    pub memo: ReadMemo,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionStatus {
    /// Replaying the log up to the end offset seen at start.
    CatchingUp,
    /// Applying as entries arrive.
    Serving,
    /// Cannot serve: the reason says why and what to do.
    Refused(String),
    /// Not this node's: another member of its replica group holds it (reads
    /// are proxied to a holder). The local store is kept, and resumes from
    /// its applied offset if the partition comes back.
    NotHeld,
}

/// Keeps a partition's apply loop running while a writer waits on it (`PartitionHandle::pin`).
pub struct PinGuard {
    handle: Arc<PartitionHandle>,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let before = self.handle.pins.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        assert!(before > 0, "pins are released once");
    }
}

pub struct PartitionHandle {
    pub namespace: Arc<str>,
    pub partition: u32,
    pub partitions: u32,
    pub tp: TopicPartition,
    /// Replaced only by the apply loop, before it reads the log (a restore).
    store: RwLock<Arc<PartitionStore>>,
    /// Next offset to apply, advanced after each commit.
    applied_next: watch::Sender<u64>,
    outcomes: Mutex<OutcomeRing>,
    status: RwLock<PartitionStatus>,
    /// Writers waiting here for their outcome: the node does not let go meanwhile.
    pins: std::sync::atomic::AtomicUsize,
    /// The read view shared by readers while the applied offset stands still;
    /// dropped on every advance, so it never pins pages of old versions for long.
    view: RwLock<Option<Arc<ReadView>>>,
    pub(crate) applied_next_gauge: IntGauge,
    /// `tern_partition_held`: set with the lag (`node/health.rs`).
    pub(crate) held_gauge: IntGauge,
    pub(crate) log_end_gauge: IntGauge,
    pub(crate) lag_gauge: IntGauge,
    pub(crate) staleness_gauge: prometheus::Gauge,
    /// How current this replica is known to be (`freshness.rs`).
    pub freshness: super::freshness::Freshness,
    refused_gauge: IntGauge,
    /// Why this replica's store is being rebuilt (it was found damaged and
    /// set aside, `store::damaged`): until it is caught up it serves no
    /// read (a rebuilt store is an older state). None: not rebuilding.
    rebuilding: RwLock<Option<String>>,
    rebuilding_gauge: IntGauge,
    /// Where and why this replica's reader cannot read on (`LogReader::blocked`):
    /// the offset it stands at and why. None: not blocked.
    blocked: RwLock<Option<(u64, String)>>,
    blocked_gauge: IntGauge,
    /// Recent events and the watches of this partition.
    pub feed: Arc<crate::fanout::PartitionFeed>,
    /// Set when its namespace was deleted (`close`): no apply loop starts
    /// on it again.
    closed: std::sync::atomic::AtomicBool,
}

/// A partition's gauges (`PartitionHandle::detached`'s are registered nowhere).
struct Gauges {
    applied_next: IntGauge,
    held: IntGauge,
    log_end: IntGauge,
    lag: IntGauge,
    staleness: prometheus::Gauge,
    refused: IntGauge,
    rebuilding: IntGauge,
    blocked: IntGauge,
}

/// A detached handle's feed: no watch reads it, and the rebuild never
/// appends to it; the smallest ring the feed takes.
const DETACHED_RING: crate::fanout::RingLimits = crate::fanout::RingLimits { events_max: 1, bytes_max: 1 };

/// How many recent outcomes each partition remembers for waiting writers.
pub(crate) const OUTCOMES_MAX: usize = 65_536;

impl PartitionHandle {
    pub fn new(
        namespace: Arc<str>,
        partition: u32,
        partitions: u32,
        store: Arc<PartitionStore>,
        applied_next: u64,
        ring: crate::fanout::RingLimits,
    ) -> Self {
        let labels = [namespace.as_ref(), &partition.to_string()];
        metrics::register_namespace(&namespace, &crate::codec::Malformed::LABELS);
        let gauges = Gauges {
            applied_next: metrics::PARTITION_APPLIED_NEXT_OFFSET.with_label_values(&labels),
            held: metrics::PARTITION_HELD.with_label_values(&labels),
            log_end: metrics::PARTITION_LOG_END_OFFSET.with_label_values(&labels),
            lag: metrics::PARTITION_LAG.with_label_values(&labels),
            staleness: metrics::PARTITION_STALENESS_SECONDS.with_label_values(&labels),
            refused: metrics::PARTITION_REFUSED.with_label_values(&labels),
            rebuilding: metrics::PARTITION_REBUILDING.with_label_values(&labels),
            blocked: metrics::PARTITION_BLOCKED.with_label_values(&labels),
        };
        Self::with_gauges(namespace, partition, partitions, store, applied_next, ring, gauges)
    }

    /// A handle of this partition that nothing else sees (its gauges are
    /// registered nowhere, its feed has no watch): a rebuild applies the
    /// log to a new store through it until that store reaches this one's
    /// offset (`apply/rebuild.rs`).
    pub(crate) fn detached(&self, store: Arc<PartitionStore>, applied_next: u64) -> Self {
        let gauge = || IntGauge::new("tern_detached_partition", "a rebuild's own partition handle").expect("a valid gauge");
        let gauges = Gauges {
            applied_next: gauge(),
            held: gauge(),
            log_end: gauge(),
            lag: gauge(),
            staleness: prometheus::Gauge::new("tern_detached_partition_seconds", "a rebuild's own partition handle").expect("a valid gauge"),
            refused: gauge(),
            rebuilding: gauge(),
            blocked: gauge(),
        };
        Self::with_gauges(self.namespace.clone(), self.partition, self.partitions, store, applied_next, DETACHED_RING, gauges)
    }

    fn with_gauges(
        namespace: Arc<str>,
        partition: u32,
        partitions: u32,
        store: Arc<PartitionStore>,
        applied_next: u64,
        ring: crate::fanout::RingLimits,
        gauges: Gauges,
    ) -> Self {
        let handle = PartitionHandle {
            tp: TopicPartition { topic: namespace.clone(), partition },
            namespace: namespace.clone(),
            partition,
            partitions,
            store: RwLock::new(store),
            applied_next: watch::Sender::new(applied_next),
            outcomes: Mutex::new(OutcomeRing::new(OUTCOMES_MAX)),
            status: RwLock::new(PartitionStatus::CatchingUp),
            pins: std::sync::atomic::AtomicUsize::new(0),
            view: RwLock::new(None),
            applied_next_gauge: gauges.applied_next,
            held_gauge: gauges.held,
            log_end_gauge: gauges.log_end,
            lag_gauge: gauges.lag,
            staleness_gauge: gauges.staleness,
            freshness: Default::default(),
            refused_gauge: gauges.refused,
            rebuilding: RwLock::new(None),
            rebuilding_gauge: gauges.rebuilding,
            blocked: RwLock::new(None),
            blocked_gauge: gauges.blocked,
            feed: Arc::new(crate::fanout::PartitionFeed::new(partition, applied_next, ring)),
            closed: Default::default(),
        };
        handle.applied_next_gauge.set(applied_next as i64);
        // Not known until the log answers (node/health.rs): no bound yet.
        handle.staleness_gauge.set(f64::INFINITY);
        handle.refused_gauge.set(0);
        handle.rebuilding_gauge.set(0);
        handle.blocked_gauge.set(0);
        handle
    }

    /// This replica's store was found damaged and replaced by an empty one
    /// (`why`): it serves reads again once its apply loop has caught up.
    pub(crate) fn start_rebuilding(&self, why: String) {
        self.rebuilding_gauge.set(1);
        *self.rebuilding.write() = Some(why);
    }

    /// A reader of the store for anything served from it (reads of every
    /// protocol, rules, keys, options): refused while the store is being
    /// rebuilt, whose state is older than what was served before.
    pub fn read_store(&self) -> Result<crate::store::StoreReader, StoreError> {
        self.refuse_if_rebuilding()?;
        self.store().read()
    }

    fn refuse_if_rebuilding(&self) -> Result<(), StoreError> {
        match self.rebuilding.read().as_ref() {
            None => Ok(()),
            Some(why) => Err(StoreError {
                path: self.store().path().display().to_string(),
                message: format!("partition {} is rebuilding: {why}; it serves again once caught up", self.partition),
                unavailable: true,
                damaged: false,
            }),
        }
    }

    /// This replica's reader cannot read past `offset` (`why`): shown in
    /// `/readyz` and `tern_partition_blocked` until the partition applies
    /// past it (`unblock_if_past`). Said in the node's log once per offset.
    pub(crate) fn block(&self, offset: u64, why: &str) {
        // Under the status lock: a loop's last empty batch never marks a
        // partition let go (or refused) meanwhile (`record_status` clears it).
        let status = self.status.read();
        if matches!(*status, PartitionStatus::NotHeld | PartitionStatus::Refused(_)) {
            return;
        }
        let mut blocked = self.blocked.write();
        if blocked.as_ref().is_some_and(|(at, _)| *at == offset) {
            return;
        }
        tracing::error!(ns = %self.namespace, partition = self.partition, offset, "partition blocked: {why}");
        *blocked = Some((offset, why.to_string()));
        self.blocked_gauge.set(1);
    }

    /// Clears the block once the partition applied past where it stood.
    pub(crate) fn unblock_if_past(&self) {
        self.unblock_if_read_past(self.applied_next());
    }

    /// Clears the block once a reader of the partition read up to
    /// `applied_next` (a rebuild's, through its detached handle).
    pub(crate) fn unblock_if_read_past(&self, applied_next: u64) {
        if self.blocked.read().as_ref().is_none_or(|(at, _)| *at >= applied_next) {
            return;
        }
        if let Some((at, _)) = self.blocked.write().take() {
            tracing::info!(ns = %self.namespace, partition = self.partition, offset = at, applied_next, "partition unblocked: read past the entry");
        }
        self.blocked_gauge.set(0);
    }

    fn clear_block(&self) {
        self.blocked.write().take();
        self.blocked_gauge.set(0);
    }

    /// Why this replica cannot read on, while it cannot (None: it can).
    pub fn blocked(&self) -> Option<String> {
        self.blocked.read().as_ref().map(|(_, why)| why.clone())
    }

    /// Why this replica's store is being rebuilt, while it is (None: it is not).
    pub fn rebuilding(&self) -> Option<String> {
        self.rebuilding.read().clone()
    }

    /// Since when this replica's reads may miss acknowledged writes (None: not known yet).
    pub fn staleness(&self) -> Option<std::time::Duration> {
        self.freshness.staleness(self.applied_next())
    }

    /// The partition's store (the current one: a restore may replace it).
    pub fn store(&self) -> Arc<PartitionStore> {
        self.store.read().clone()
    }

    /// Replaces the store with a restored (or rebuilt) one that is not
    /// behind it (the apply loop, before it reads the log): readers see the
    /// new store from their next read view. One that is ahead makes waiters
    /// see the offset jump, and resets watches that were at the old offset
    /// (the events in between are not known here); one at the same offset
    /// (a rebuild that caught up, `apply/rebuild.rs`) changes nothing they see.
    pub(crate) fn replace_store(&self, store: Arc<PartitionStore>) -> Result<(), StoreError> {
        let applied_next = store.read()?.applied_next()?;
        assert!(applied_next >= self.applied_next(), "a restored store is never behind the one it replaces");
        *self.store.write() = store;
        *self.view.write() = None;
        if applied_next > self.applied_next() {
            self.feed.jump(applied_next);
            self.advance(Vec::new(), applied_next);
        }
        Ok(())
    }

    /// A consistent read view: shared with other readers while nothing new
    /// has been applied (one redb read transaction serves many requests),
    /// fresh otherwise.
    pub fn read_view(&self) -> Result<Arc<ReadView>, StoreError> {
        self.refuse_if_rebuilding()?;
        let advanced = self.applied_next();
        if let Some(view) = self.view.read().as_ref() {
            if view.applied_next == advanced {
                return Ok(view.clone());
            }
        }
        let reader = self.store().read()?;
        let view = Arc::new(ReadView { applied_next: reader.applied_next()?, reader, memo: ReadMemo::default() });
        if view.applied_next == advanced {
            *self.view.write() = Some(view.clone());
        }
        Ok(view)
    }

    pub fn applied_next(&self) -> u64 {
        *self.applied_next.borrow()
    }

    pub fn status(&self) -> PartitionStatus {
        self.status.read().clone()
    }

    /// The apply loop's transitions. A partition the node let go of
    /// (`NotHeld`) stays so: a loop that is still stopping cannot revive it.
    pub(crate) fn set_status(&self, status: PartitionStatus) {
        let mut current = self.status.write();
        if *current == PartitionStatus::NotHeld {
            return;
        }
        self.record_status(&status);
        if matches!(status, PartitionStatus::Refused(_)) {
            // No reader stands anywhere now: the refusal says why.
            self.clear_block();
        }
        if status == PartitionStatus::Serving && self.rebuilding.write().take().is_some() {
            self.rebuilding_gauge.set(0);
            tracing::info!(ns = %self.namespace, partition = self.partition, applied_next = self.applied_next(), "partition rebuilt: caught up, serving");
        }
        *current = status;
    }

    /// Its namespace was deleted: not held, and never held again (the
    /// status lock first, as `let_go_if_unpinned` takes it: then the
    /// node's loops).
    pub(crate) fn close(&self) {
        let mut status = self.status.write();
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        self.record_status(&PartitionStatus::NotHeld);
        *status = PartitionStatus::NotHeld;
    }

    /// Whether its namespace was deleted (`close`).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The node opened a partition it does not hold.
    pub(crate) fn set_not_held(&self) {
        self.record_status(&PartitionStatus::NotHeld);
        *self.status.write() = PartitionStatus::NotHeld;
    }

    pub fn is_held(&self) -> bool {
        *self.status.read() != PartitionStatus::NotHeld
    }

    /// Keeps this node applying the partition while the guard lives (a
    /// writer waiting for its outcome here); `None` if the node no longer
    /// holds it. Serialized with `let_go_if_unpinned` by the status lock.
    pub fn pin(self: &Arc<Self>) -> Option<PinGuard> {
        let status = self.status.read();
        if *status == PartitionStatus::NotHeld {
            return None;
        }
        self.pins.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(PinGuard { handle: self.clone() })
    }

    /// Marks the partition not held unless a writer is waiting on it here,
    /// and runs `stop` (telling its apply loop to stop) under the same lock,
    /// so `hold_unless_stopped` sees either both or neither; returns whether
    /// it was let go (if not, the caller retries later).
    pub(crate) fn let_go_if_unpinned(&self, stop: impl FnOnce()) -> bool {
        let mut status = self.status.write();
        if self.pins.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return false;
        }
        self.record_status(&PartitionStatus::NotHeld);
        *status = PartitionStatus::NotHeld;
        stop();
        true
    }

    /// A new apply loop, about to run (its predecessor has ended), starts
    /// holding the partition (catching up) unless it was told to stop
    /// meanwhile: a revoke → assign → revoke while the old loop was stopping
    /// must leave the partition not held, never serving without a loop.
    pub(crate) fn hold_unless_stopped(&self, stopped: impl FnOnce() -> bool) -> bool {
        let mut status = self.status.write();
        if self.is_closed() || stopped() {
            return false;
        }
        self.record_status(&PartitionStatus::CatchingUp);
        *status = PartitionStatus::CatchingUp;
        true
    }

    fn record_status(&self, status: &PartitionStatus) {
        if let PartitionStatus::Refused(reason) = status {
            tracing::error!(ns = %self.namespace, partition = self.partition, %reason, "partition refused");
            self.refused_gauge.set(1);
        } else {
            self.refused_gauge.set(0);
        }
        // The gauges say what this node does with the partition: one it
        // does not hold is neither rebuilt nor blocked here (a rebuild cut
        // short stays marked, and goes on once it holds it again).
        match status {
            PartitionStatus::NotHeld => {
                self.rebuilding_gauge.set(0);
                self.clear_block();
            }
            PartitionStatus::CatchingUp if self.rebuilding.read().is_some() => self.rebuilding_gauge.set(1),
            _ => {}
        }
    }

    /// Called by the apply loop after a commit: outcomes first, then the offset,
    /// so a waiter woken by the offset always finds its outcome.
    pub(crate) fn advance(&self, outcomes: Vec<(u64, Outcome)>, applied_next: u64) {
        {
            let mut ring = self.outcomes.lock();
            for (offset, outcome) in outcomes {
                ring.push(offset, outcome);
            }
        }
        self.applied_next_gauge.set(applied_next as i64);
        *self.view.write() = None;
        self.applied_next.send_modify(|n| {
            assert!(applied_next >= *n, "applied offset never moves backwards");
            *n = applied_next;
        });
    }

    /// Waits until this replica has applied everything below `target`.
    /// Returns false if `timeout` passed first.
    pub async fn wait_applied(&self, target: u64, timeout: Duration) -> bool {
        let mut rx = self.applied_next.subscribe();
        let reached = matches!(tokio::time::timeout(timeout, rx.wait_for(|n| *n >= target)).await, Ok(Ok(_)));
        reached
    }

    pub fn outcome(&self, offset: u64) -> Option<Outcome> {
        self.outcomes.lock().get(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_partition_is_not_let_go_until_its_waiters_are_done() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap());
        let handle = Arc::new(PartitionHandle::new(Arc::from("pin-test"), 0, 1, store, 0, crate::fanout::RingLimits::TEST));
        let pin = handle.pin().expect("a held partition can be pinned");
        assert!(!handle.let_go_if_unpinned(|| unreachable!("not stopped while pinned")), "a writer is waiting here");
        assert!(handle.is_held());
        drop(pin);
        let mut stopped = false;
        assert!(handle.let_go_if_unpinned(|| stopped = true));
        assert!(stopped);
        assert!(!handle.is_held());
        assert!(handle.pin().is_none(), "a partition let go cannot be pinned");
    }

    /// Issue 37 review: a rebuilding store's state is older than what was
    /// served before; every read goes through `read_view` or `read_store`,
    /// so every protocol gets 503, until the loop serves again.
    #[test]
    fn a_rebuilding_partition_serves_no_read_until_it_serves_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap());
        let handle = PartitionHandle::new(Arc::from("rebuild-test"), 0, 1, store, 0, crate::fanout::RingLimits::TEST);
        assert!(handle.read_view().is_ok() && handle.read_store().is_ok());
        handle.start_rebuilding("its store was damaged (a test)".into());
        for error in [handle.read_view().err().unwrap(), handle.read_store().err().unwrap()] {
            assert!(error.unavailable && error.message.contains("rebuilding: its store was damaged"), "{error}");
        }
        assert_eq!(handle.rebuilding_gauge.get(), 1);
        handle.set_status(PartitionStatus::CatchingUp);
        assert!(handle.read_view().is_err(), "catching up is not caught up");
        handle.set_status(PartitionStatus::Serving);
        assert!(handle.read_view().is_ok() && handle.rebuilding().is_none());
        assert_eq!(handle.rebuilding_gauge.get(), 0);
    }

    /// Issue 37: a Kafka node that opened a partition with a rebuild cut
    /// short but is not assigned it showed `tern_partition_rebuilding` 1
    /// for as long as it ran. The gauge follows what the node does with the
    /// partition; the rebuild goes on, marked, once it holds it again.
    #[test]
    fn a_partition_not_held_is_not_shown_rebuilding_until_it_is_held_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap());
        let handle = PartitionHandle::new(Arc::from("rebuild-held-test"), 0, 1, store, 0, crate::fanout::RingLimits::TEST);
        handle.start_rebuilding("a rebuild cut short (a test)".into());
        handle.set_not_held();
        assert_eq!(handle.rebuilding_gauge.get(), 0);
        assert!(handle.rebuilding().is_some(), "still marked: it goes on once held");
        assert!(handle.hold_unless_stopped(|| false));
        assert_eq!(handle.rebuilding_gauge.get(), 1);
        assert!(handle.let_go_if_unpinned(|| {}));
        assert_eq!(handle.rebuilding_gauge.get(), 0);
    }

    /// Issue 37: a reader stopped at a damaged Kafka batch is shown until
    /// the partition applies past that offset, not before (a reader opened
    /// again that has not yet read past it proves nothing).
    #[test]
    fn a_blocked_partition_is_shown_until_it_applies_past_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap());
        let handle = PartitionHandle::new(Arc::from("blocked-test"), 0, 1, store, 5, crate::fanout::RingLimits::TEST);
        assert_eq!((handle.blocked(), handle.blocked_gauge.get()), (None, 0));
        handle.block(5, "a batch at offset 5 failed its CRC32C check");
        handle.unblock_if_past();
        assert_eq!(handle.blocked().as_deref(), Some("a batch at offset 5 failed its CRC32C check"));
        assert_eq!(handle.blocked_gauge.get(), 1);
        handle.advance(Vec::new(), 5);
        handle.unblock_if_past();
        assert!(handle.blocked().is_some(), "still at the offset");
        handle.advance(Vec::new(), 6);
        handle.unblock_if_past();
        assert_eq!((handle.blocked(), handle.blocked_gauge.get()), (None, 0));
        // A refused or let-go partition has no reader standing anywhere,
        // and a loop's last empty batch after that marks nothing.
        handle.block(6, "again");
        handle.set_status(PartitionStatus::Refused("the log starts past it".into()));
        assert_eq!((handle.blocked(), handle.blocked_gauge.get()), (None, 0));
        handle.block(6, "after the refusal");
        assert_eq!((handle.blocked(), handle.blocked_gauge.get()), (None, 0));
        let handle = PartitionHandle::new(Arc::from("blocked-test"), 0, 1, handle.store(), 6, crate::fanout::RingLimits::TEST);
        handle.block(6, "again");
        assert!(handle.let_go_if_unpinned(|| {}));
        assert_eq!((handle.blocked(), handle.blocked_gauge.get()), (None, 0));
        handle.block(6, "after the let-go");
        assert_eq!((handle.blocked(), handle.blocked_gauge.get()), (None, 0));
        // A rebuild's reader past the offset clears it too.
        assert!(handle.hold_unless_stopped(|| false));
        handle.block(6, "again");
        handle.unblock_if_read_past(6);
        assert!(handle.blocked().is_some());
        handle.unblock_if_read_past(7);
        assert_eq!((handle.blocked(), handle.blocked_gauge.get()), (None, 0));
    }

    #[test]
    fn shared_read_view_is_replaced_when_the_applied_offset_moves() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap());
        let handle = PartitionHandle::new(Arc::from("view-test"), 0, 1, store.clone(), 0, crate::fanout::RingLimits::TEST);
        let first = handle.read_view().unwrap();
        assert!(Arc::ptr_eq(&first, &handle.read_view().unwrap()), "unchanged state shares one read view");
        store
            .apply(false, |tx| {
                tx.put("k", "", 0, b"1")?;
                tx.mark_applied(0, false);
                Ok(())
            })
            .unwrap();
        handle.advance(vec![(0, Outcome::Applied)], 1);
        let second = handle.read_view().unwrap();
        assert!(!Arc::ptr_eq(&first, &second), "an advance replaces the read view");
        assert_eq!(second.applied_next, 1);
        assert_eq!(second.reader.applied_next().unwrap(), 1);
        assert!(second.reader.get("k", "").unwrap().is_some());
        assert!(first.reader.get("k", "").unwrap().is_none(), "an old read view keeps showing its own state");
    }
}
