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
//! Behind for `READER_STUCK` with nothing applied meanwhile, the reader is
//! stuck: the loop opens one elsewhere (`Log::reader_elsewhere`), at most
//! once per `READER_STUCK`.

use std::time::{Duration, Instant};

use crate::partition::PartitionHandle;

/// How long a partition may stay behind an end offset it knows of, with
/// nothing applied, before its reader counts as stuck; also the least time
/// between two reopenings. Five refreshes of the end offset (one a second):
/// an idle partition is never behind, and one catching up applies on.
pub(super) const READER_STUCK: Duration = Duration::from_millis(5_000);

/// Watches one apply loop's progress.
pub(super) struct StuckWatch {
    /// `applied_next` when last seen moving, and since when it stands.
    next: u64,
    since: Instant,
    /// `READER_STUCK`, shorter in tests.
    after: Duration,
}

impl StuckWatch {
    pub(super) fn new(handle: &PartitionHandle, after: Duration) -> StuckWatch {
        StuckWatch { next: handle.applied_next(), since: Instant::now(), after }
    }

    /// Whether the reader is stuck now (see the module doc); a yes starts a
    /// new wait, so the next one comes `READER_STUCK` later at the soonest.
    pub(super) fn stuck(&mut self, handle: &PartitionHandle) -> bool {
        let next = handle.applied_next();
        if next != self.next {
            (self.next, self.since) = (next, Instant::now());
            return false;
        }
        let behind = handle.freshness.behind_since(next).is_some_and(|at| at.elapsed() >= self.after);
        if behind && self.since.elapsed() >= self.after {
            self.since = Instant::now();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::partition::Outcome;
    use crate::store::PartitionStore;

    const AFTER: Duration = Duration::from_millis(30);

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
        // Nothing applied for a while, still behind: stuck, once per wait.
        std::thread::sleep(AFTER * 2);
        assert!(watch.stuck(&handle));
        assert!(!watch.stuck(&handle), "the next yes comes a wait later");
        std::thread::sleep(AFTER * 2);
        assert!(watch.stuck(&handle));
    }
}
