//! Telling a reader that is stuck from a partition that is idle.
//!
//! An apply loop whose reader delivers nothing is usually idle: nothing was
//! written. But a Kafka leader cut from the other brokers and deposed by
//! the controller still answers the fetches of clients that reach it, with
//! its old high watermark, and names itself leader to them: the reader then
//! delivers nothing for as long as the cut lasts, while writes go on at the
//! new leader. The node knows it is behind when an end offset it was told
//! (`partition::freshness`; on Kafka, at least one past this node's own
//! acknowledged appends: `log::kafka::acked_ends`) is past what it applied.
//! Behind for `READER_STUCK` with nothing applied meanwhile, and told an
//! end within the last `TOLD_RECENTLY` (a node cut off from the log, or
//! isolated from the other regions, is told nothing and decides nothing),
//! the reader is stuck: the loop opens one elsewhere
//! (`Log::reader_elsewhere`). Each further verdict without progress comes
//! twice as late, up to `REOPEN_WAIT_MAX` (a foreign transaction left open
//! in a source topic holds a reader back for minutes, rightly).

use std::time::{Duration, Instant};

use crate::partition::PartitionHandle;

/// How long a partition may stay behind an end offset it knows of, with
/// nothing applied, before its reader counts as stuck; also the least time
/// between two reopenings. Five refreshes of the end offset (one a second):
/// an idle partition is never behind, and one catching up applies on.
pub(super) const READER_STUCK: Duration = Duration::from_millis(5_000);

/// How recently the node must have been told an end offset for a verdict.
const TOLD_RECENTLY: Duration = Duration::from_millis(3_000);

/// The longest wait between two verdicts while nothing is applied.
const REOPEN_WAIT_MAX: Duration = Duration::from_millis(300_000);

/// Watches one apply loop's progress.
pub(super) struct StuckWatch {
    /// `applied_next` when last seen moving, and since when it stands.
    next: u64,
    since: Instant,
    /// `READER_STUCK` (shorter in tests), doubled after each verdict until
    /// the partition applies something.
    after: Duration,
    first_after: Duration,
}

impl StuckWatch {
    pub(super) fn new(handle: &PartitionHandle, after: Duration) -> StuckWatch {
        StuckWatch { next: handle.applied_next(), since: Instant::now(), after, first_after: after }
    }

    /// Whether the reader is stuck now (see the module doc); a yes starts a
    /// new wait, so the next one comes `READER_STUCK` later at the soonest.
    pub(super) fn stuck(&mut self, handle: &PartitionHandle) -> bool {
        let next = handle.applied_next();
        if next != self.next {
            (self.next, self.since, self.after) = (next, Instant::now(), self.first_after);
            return false;
        }
        let behind = handle
            .freshness
            .behind_since(next)
            .is_some_and(|(since, told)| since.elapsed() >= self.first_after && told.elapsed() <= TOLD_RECENTLY.max(self.first_after));
        if behind && self.since.elapsed() >= self.after {
            self.since = Instant::now();
            self.after = (self.after * 2).min(REOPEN_WAIT_MAX);
            return true;
        }
        false
    }
}

/// Reopening a reader that says it is blocked (`LogReader::blocked`): it
/// is known stuck, no end offset is needed as evidence (a rebuild's
/// detached handle is told none). The first reopen comes `READER_STUCK`
/// after the block was first seen, each further one twice as late, up to
/// `REOPEN_WAIT_MAX`; a reader that delivers starts it over.
pub(super) struct BlockedWait {
    /// When the wait for the next reopen began; None: not blocked.
    since: Option<Instant>,
    after: Duration,
    first_after: Duration,
}

impl BlockedWait {
    pub(super) fn new(after: Duration) -> BlockedWait {
        BlockedWait { since: None, after, first_after: after }
    }

    /// Called on each empty batch of a blocked reader: whether to open it
    /// again now (a yes starts the next, longer wait).
    pub(super) fn due(&mut self) -> bool {
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.after {
            return false;
        }
        self.since = Some(Instant::now());
        self.after = (self.after * 2).min(REOPEN_WAIT_MAX);
        true
    }

    /// The reader delivered: the next block waits from the start again.
    pub(super) fn reset(&mut self) {
        (self.since, self.after) = (None, self.first_after);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::partition::Outcome;
    use crate::store::PartitionStore;

    const AFTER: Duration = Duration::from_millis(30);

    /// A blocked reader is opened again after the wait, then twice as late
    /// each time, and from the first wait again once it delivered.
    #[test]
    fn a_blocked_reader_is_reopened_after_a_wait_that_doubles() {
        let mut wait = BlockedWait::new(AFTER);
        assert!(!wait.due(), "the first block starts the wait");
        std::thread::sleep(AFTER);
        assert!(wait.due());
        std::thread::sleep(AFTER);
        assert!(!wait.due(), "the second wait is twice as long");
        std::thread::sleep(AFTER);
        assert!(wait.due());
        wait.reset();
        assert!(!wait.due());
        std::thread::sleep(AFTER);
        assert!(wait.due(), "after a delivery the wait starts over at its first length");
    }

    #[test]
    fn stuck_only_when_behind_a_known_end_with_nothing_applied_for_a_while() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap());
        let handle = PartitionHandle::new(Arc::from("stuck"), 0, 1, store.clone(), 0, crate::fanout::RingLimits::TEST);
        let mut watch = StuckWatch::new(&handle, AFTER);
        // Idle: told an end it has applied.
        handle.freshness.log_end_seen(0, Instant::now(), 0);
        std::thread::sleep(AFTER * 2);
        assert!(!watch.stuck(&handle), "an idle partition is not stuck");
        // Behind an end it was told, and applying on: not stuck.
        handle.freshness.log_end_seen(5, Instant::now(), 0);
        std::thread::sleep(AFTER * 2);
        store
            .apply(false, |tx| {
                tx.put("k", "", 0, b"1")?;
                tx.mark_applied(0, false);
                Ok(())
            })
            .unwrap();
        handle.advance(vec![(0, Outcome::Applied)], 1);
        assert!(!watch.stuck(&handle), "it applied since");
        // Nothing applied for a while, still behind and told so lately:
        // stuck, then again only after twice the wait.
        std::thread::sleep(AFTER * 2);
        handle.freshness.log_end_seen(5, Instant::now(), 1);
        assert!(watch.stuck(&handle));
        assert!(!watch.stuck(&handle), "the next yes comes a wait later");
        std::thread::sleep(AFTER + AFTER / 2);
        handle.freshness.log_end_seen(5, Instant::now(), 1);
        assert!(!watch.stuck(&handle), "twice the wait now");
        std::thread::sleep(AFTER);
        handle.freshness.log_end_seen(5, Instant::now(), 1);
        assert!(watch.stuck(&handle));
    }

    #[test]
    fn not_stuck_when_told_nothing_lately() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap());
        let handle = PartitionHandle::new(Arc::from("stuck"), 0, 1, store, 0, crate::fanout::RingLimits::TEST);
        let mut watch = StuckWatch::new(&handle, AFTER);
        handle.freshness.log_end_seen(5, Instant::now(), 0);
        // Behind, and then told nothing (cut off from the log) past TOLD_RECENTLY.
        std::thread::sleep(TOLD_RECENTLY + AFTER);
        assert!(!watch.stuck(&handle), "no recent evidence, no verdict");
    }

    #[test]
    fn not_stuck_when_its_own_appends_were_proven_long_ago() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap());
        let handle = PartitionHandle::new(Arc::from("stuck"), 0, 1, store, 0, crate::fanout::RingLimits::TEST);
        let mut watch = StuckWatch::new(&handle, AFTER);
        // The log does not answer; the node's own appends, acknowledged
        // before it was cut off, prove an end it has not applied.
        let proven_at = Instant::now();
        std::thread::sleep(TOLD_RECENTLY + AFTER);
        handle.freshness.behind_seen(5, proven_at, 0);
        assert!(!watch.stuck(&handle), "old proof is no recent evidence: no verdict");
        // Acknowledged again now (its barriers land at a new leader): stuck.
        handle.freshness.behind_seen(6, Instant::now(), 0);
        std::thread::sleep(AFTER * 2);
        handle.freshness.behind_seen(6, Instant::now(), 0);
        assert!(watch.stuck(&handle));
    }
}
