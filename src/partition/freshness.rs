//! How current a replica is known to be.
//!
//! A replica serves `local` reads from what it applied; how stale that may
//! be is told by `staleness`: the time since the last instant `T` at which
//! the replica is known to have applied every write the log acknowledged
//! before `T`. The evidence is the log's end offset: asked at `T`, the
//! answer `end` bounds every write acknowledged before `T` (the high
//! watermark only grows), so once `applied_next >= end` the replica has
//! them all. The node asks every second (`Node::refresh_lag`); a replica
//! that cannot reach the partition's leader, or whose node is cut off from
//! every other region (an isolated leader of its own region would still
//! answer, with a frozen end), gathers no evidence, and its staleness grows:
//! the `x-tern-staleness-ms` header of its reads and
//! `tern_partition_staleness_seconds` show it.
//!
//! An upper bound, never an estimate: a replica that is in fact current
//! shows up to one check interval (plus a round trip to the leader).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

#[derive(Default)]
pub struct Freshness {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last instant the replica was known current at.
    current_at: Option<Instant>,
    /// An end offset asked at an instant, not yet applied here.
    pending: Option<(u64, Instant)>,
    /// When the last end offset was asked.
    told_at: Option<Instant>,
}

impl Freshness {
    /// The log said it ended at `end` when asked at `asked`; this replica's
    /// next offset to apply is `applied_next` now.
    pub fn log_end_seen(&self, end: u64, asked: Instant, applied_next: u64) {
        let mut state = self.state.lock();
        state.settle(applied_next);
        state.told_at = state.told_at.max(Some(asked));
        if applied_next >= end {
            state.current_at = state.current_at.max(Some(asked));
        } else if state.pending.is_none() {
            // An older pending end is kept: it is reached first under steady writes.
            state.pending = Some((end, asked));
        }
    }

    /// Since when this replica has known of an end offset past `applied_next`
    /// that it has not applied (None: it applied every end it was told),
    /// and when it was last told an end at all.
    pub fn behind_since(&self, applied_next: u64) -> Option<(Instant, Instant)> {
        let mut state = self.state.lock();
        state.settle(applied_next);
        state.pending.map(|(_, asked)| (asked, state.told_at.unwrap_or(asked)))
    }

    /// Since when the replica's reads may miss acknowledged writes (None: never known current).
    pub fn staleness(&self, applied_next: u64) -> Option<Duration> {
        let mut state = self.state.lock();
        state.settle(applied_next);
        state.current_at.map(|at| at.elapsed())
    }
}

impl State {
    /// A pending end now applied makes its instant the latest known current one.
    fn settle(&mut self, applied_next: u64) {
        if let Some((end, asked)) = self.pending {
            if applied_next >= end {
                self.current_at = self.current_at.max(Some(asked));
                self.pending = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_once_the_asked_end_is_applied() {
        let freshness = Freshness::default();
        assert_eq!(freshness.staleness(0), None, "never checked: unknown");
        let t0 = Instant::now();
        freshness.log_end_seen(10, t0, 7);
        assert_eq!(freshness.staleness(7), None, "behind the end it was told");
        let later = t0 + Duration::from_millis(5);
        freshness.log_end_seen(12, later, 9);
        assert_eq!(freshness.staleness(9), None, "still behind the first end");
        let staleness = freshness.staleness(10).expect("the first end is applied: current as of t0");
        assert!(staleness >= t0.elapsed().saturating_sub(Duration::from_millis(1)));
        freshness.log_end_seen(12, later, 12);
        assert!(freshness.staleness(12).unwrap() <= later.elapsed(), "current as of the later ask");
        // An older answer never moves it back.
        freshness.log_end_seen(12, t0, 12);
        assert!(freshness.staleness(12).unwrap() <= later.elapsed());
    }

    #[test]
    fn behind_since_the_first_end_told_and_not_applied() {
        let freshness = Freshness::default();
        assert_eq!(freshness.behind_since(0), None);
        let t0 = Instant::now();
        freshness.log_end_seen(10, t0, 10);
        assert_eq!(freshness.behind_since(10), None, "applied what it was told");
        let t1 = t0 + Duration::from_millis(5);
        freshness.log_end_seen(20, t1, 10);
        freshness.log_end_seen(30, t1 + Duration::from_millis(5), 10);
        assert_eq!(freshness.behind_since(10), Some((t1, t1 + Duration::from_millis(5))), "since the first end it has not applied");
        assert_eq!(freshness.behind_since(20), None, "applied it");
    }
}
