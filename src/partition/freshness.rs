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
//!
//! Weaker evidence counts for being behind only: an end offset this node's
//! own acknowledged appends prove (`Log::known_end`) bounds no other
//! writer's writes, so it never makes a replica current, but a replica
//! that has not applied it is behind (`behind_seen`). It is what a node
//! has when the log does not answer its ask at all (a Kafka leader cut off
//! from the other brokers can leave it unanswered), and what tells its
//! apply loop that its reader is stuck (`apply::stuck_reader`).

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
    /// An end offset known at an instant by weaker evidence (`behind_seen`),
    /// not yet applied here: behind, but never current when applied.
    behind: Option<(u64, Instant)>,
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

    /// The partition reaches at least `end`, known at `at` by evidence that
    /// bounds only some writes (this node's own acknowledged appends): this
    /// replica, at `applied_next`, is behind if it has not applied it; it is
    /// never made current by it.
    pub fn behind_seen(&self, end: u64, at: Instant, applied_next: u64) {
        let mut state = self.state.lock();
        state.settle(applied_next);
        state.told_at = state.told_at.max(Some(at));
        if applied_next < end && state.behind.is_none() {
            state.behind = Some((end, at));
        }
    }

    /// Since when this replica has known of an end offset past `applied_next`
    /// that it has not applied (None: it applied every end it was told),
    /// and when it was last told an end at all.
    pub fn behind_since(&self, applied_next: u64) -> Option<(Instant, Instant)> {
        let mut state = self.state.lock();
        state.settle(applied_next);
        let since = match (state.pending, state.behind) {
            (Some((_, asked)), Some((_, at))) => Some(asked.min(at)),
            (pending, behind) => pending.or(behind).map(|(_, at)| at),
        };
        since.map(|since| (since, state.told_at.unwrap_or(since)))
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
        if self.behind.is_some_and(|(end, _)| applied_next >= end) {
            self.behind = None;
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

    #[test]
    fn an_end_known_by_weaker_evidence_tells_behind_never_current() {
        let freshness = Freshness::default();
        let t0 = Instant::now();
        freshness.behind_seen(10, t0, 7);
        assert_eq!(freshness.behind_since(7), Some((t0, t0)), "behind the end its own appends prove");
        assert_eq!(freshness.staleness(7), None);
        assert_eq!(freshness.behind_since(10), None, "applied it");
        assert_eq!(freshness.staleness(10), None, "and still never known current: other writers' writes may be past it");
        // With the log's own answers too: behind since the earlier of the two.
        let t1 = t0 + Duration::from_millis(5);
        freshness.log_end_seen(15, t1, 10);
        freshness.behind_seen(20, t1 + Duration::from_millis(5), 10);
        assert_eq!(freshness.behind_since(10), Some((t1, t1 + Duration::from_millis(5))));
        assert_eq!(
            freshness.behind_since(15).map(|(since, _)| since),
            Some(t1 + Duration::from_millis(5)),
            "the log's end applied; its own end not yet"
        );
        assert!(freshness.staleness(15).is_some(), "the log's answer, applied, makes it current as of its ask");
        assert_eq!(freshness.behind_since(20), None);
    }
}
