//! How this node is doing: whether it is ready (`/readyz`), and the lag,
//! staleness and journal metrics it refreshes on its own tasks.

use std::sync::Arc;
use std::time::Duration;

use super::Node;
use crate::log::Assignment;
use crate::partition::{PartitionHandle, PartitionStatus};

/// Longest a watch's opening waits for the log's end offset.
pub(super) const LOG_END_WAIT: Duration = Duration::from_secs(2);
/// How often the journal's backlog metrics are refreshed.
pub(super) const JOURNAL_METRICS_REFRESH: Duration = Duration::from_millis(500);
/// How often lag metrics are refreshed from the log's end offsets.
pub(super) const LAG_REFRESH: Duration = Duration::from_secs(1);
/// Most end-offset questions in flight in one lag refresh (each is a round
/// trip to the partition's leader, maybe in another region).
const LOG_END_ASKS_MAX: usize = 16;

impl Node {
    /// Ready when the node knows which partitions it holds, and every one of
    /// them is caught up, none is refused and no reader is blocked.
    pub fn readiness(&self) -> (bool, Vec<String>) {
        let mut problems = Vec::new();
        if *self.log.assignment().borrow() == Assignment::Pending && !self.namespaces().is_empty() {
            problems.push("joining the replica group: no partitions assigned yet".to_string());
        }
        for namespace in self.namespaces() {
            for handle in &namespace.handles {
                // A reader that cannot read on (issue 37): the partition
                // serves its last state, or waits to be rebuilt.
                let blocked = handle.blocked();
                let and_blocked = blocked.as_ref().map(|why| format!("; blocked: {why}")).unwrap_or_default();
                match handle.status() {
                    PartitionStatus::NotHeld => {}
                    PartitionStatus::Serving => {
                        if let Some(why) = blocked {
                            problems.push(format!("{}/{}: blocked: {why}", namespace.name, handle.partition));
                        }
                    }
                    PartitionStatus::CatchingUp => match handle.rebuilding() {
                        Some(why) => problems.push(format!("{}/{}: rebuilding: {why}{and_blocked}", namespace.name, handle.partition)),
                        None => problems.push(format!("{}/{}: catching up{and_blocked}", namespace.name, handle.partition)),
                    },
                    PartitionStatus::Refused(reason) => problems.push(format!("{}/{}: refused: {reason}", namespace.name, handle.partition)),
                }
            }
        }
        (problems.is_empty(), problems)
    }

    /// Asks the log where each partition ends (at most `LOG_END_ASKS_MAX` at
    /// once, all within `LOG_END_WAIT`): the lag metrics, and the evidence
    /// of how current each replica is (`partition::freshness`), which an
    /// isolated node does not take.
    pub(super) async fn refresh_lag(&self) {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + LOG_END_WAIT;
        let isolated = self.is_isolated();
        let handles: Vec<Arc<PartitionHandle>> = self.namespaces().iter().flat_map(|ns| ns.handles.iter().cloned()).collect();
        let asks = futures::stream::iter(handles)
            .map(|handle| async move {
                let asked = std::time::Instant::now();
                handle.held_gauge.set(i64::from(handle.is_held()));
                // One bound for the whole refresh: a stalled log delays it, never forever.
                let answer = tokio::time::timeout_at(deadline, self.log.end_offset(&handle.tp)).await;
                let known_at = self.log.known_end_at(&handle.tp);
                let known = known_at.map_or(0, |(end, _)| end);
                if let Ok(Ok(end)) = answer {
                    // The log's answer, or past what this node's own appends
                    // proved if further (a deposed Kafka leader's answer is old).
                    let end = end.max(known);
                    handle.log_end_gauge.set(end as i64);
                    handle.lag_gauge.set(end.saturating_sub(handle.applied_next()) as i64);
                    if !isolated {
                        handle.freshness.log_end_seen(end, asked, handle.applied_next());
                    }
                } else if let Some((known, proven_at)) = known_at.filter(|_| !isolated) {
                    // No answer (a deposed Kafka leader can leave the ask
                    // unanswered for its whole timeout, every time): this
                    // node's own acknowledged appends still prove the
                    // partition reaches `known`, as of their last
                    // acknowledgement (a node cut off from the log proves
                    // nothing new, and decides nothing). Evidence of being
                    // behind, never of being current; without it a node that
                    // only reads (its strong reads' barriers land at the new
                    // leader) was never told its reader is stuck (issue 36:
                    // the leader-cut test's node b, stuck for 40 s).
                    let applied = handle.applied_next();
                    if known > applied {
                        handle.freshness.behind_seen(known, proven_at, applied);
                        let lag = (known - applied) as i64;
                        handle.lag_gauge.set(handle.lag_gauge.get().max(lag));
                    }
                }
                handle.staleness_gauge.set(handle.staleness().map_or(f64::INFINITY, |s| s.as_secs_f64()));
            })
            .buffer_unordered(LOG_END_ASKS_MAX);
        asks.collect::<()>().await;
    }

    /// Sets the journal's backlog metrics (entries, bytes, oldest age).
    pub(super) fn refresh_journal_metrics(&self) {
        let backlog = self.journal.backlog();
        crate::metrics::JOURNAL_BACKLOG_ENTRIES.set(backlog.entries as i64);
        crate::metrics::JOURNAL_BACKLOG_BYTES.set(backlog.bytes as i64);
        crate::metrics::JOURNAL_OLDEST_AGE_SECONDS.set(self.journal.oldest_age().map_or(0.0, |a| a.as_secs_f64()));
    }
}
