//! Which partitions run an apply loop on this node: the ones its log
//! assigns (`Log::assignment`: every partition, or this member's share of
//! its replica group), one loop per partition, never two on one store.
//!
//! A revoked partition is handed off: this node keeps applying and
//! serving it until another live member of its replica group serves it
//! (caught up), so a rebalance never leaves a partition without a server.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Node;
use crate::apply;
use crate::log::{Assignment, TopicPartition};
use crate::partition::PartitionHandle;

/// How often revoked partitions are checked for a completed hand-off.
const HANDOFF_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// A partition's apply loop. `stop` is `None` once the loop was told to stop
/// (it may still be flushing); a new loop for the partition first waits for
/// this one to end, so a store never has two writers.
struct ApplyLoop {
    stop: Option<watch::Sender<bool>>,
    task: JoinHandle<()>,
}

/// The apply loops and the partitions being handed off. Bounded by the
/// partitions of the namespaces this node knows.
#[derive(Default)]
pub(super) struct Ownership {
    /// One apply loop per partition ever started, running or stopping.
    loops: Mutex<HashMap<TopicPartition, ApplyLoop>>,
    /// Revoked partitions this node keeps serving until another member serves them.
    handing_off: Mutex<HashSet<TopicPartition>>,
}

impl Node {
    /// Whether `tp` was revoked and is only served until another member serves it.
    pub fn is_handing_off(&self, tp: &TopicPartition) -> bool {
        self.ownership.handing_off.lock().contains(tp)
    }

    /// Starts apply loops for partitions newly held and stops those let go.
    ///
    /// A revoked partition is handed off: this node keeps applying and
    /// serving it until another live member of its replica group serves it
    /// (caught up), so a rebalance never leaves a partition without a server,
    /// and a group coordinator that is briefly unreachable (a Kafka broker
    /// failing over) does not take reads down. Without a cluster view the
    /// partition is let go at once.
    fn follow_assignment(&self, assignment: &Assignment) {
        let served_elsewhere = self.elsewhere.served.read().clone();
        for namespace in self.namespaces() {
            for handle in &namespace.handles {
                let held = assignment.holds(&handle.tp);
                let running = self.ownership.loops.lock().get(&handle.tp).is_some_and(|l| l.stop.is_some());
                match (held, running) {
                    (true, false) => self.start_loop(handle),
                    (true, true) => {
                        self.ownership.handing_off.lock().remove(&handle.tp);
                    }
                    (false, true) => match &served_elsewhere {
                        Some(check) if !check(&handle.tp) => {
                            if self.ownership.handing_off.lock().insert(handle.tp.clone()) {
                                tracing::info!(tp = %handle.tp, "partition revoked; serving it until another member of the group does");
                            }
                        }
                        _ => self.stop_loop(handle),
                    },
                    (false, false) => {}
                }
            }
        }
    }

    pub(super) fn start_loop(&self, handle: &Arc<PartitionHandle>) {
        let mut loops = self.ownership.loops.lock();
        // `stop_apply` drains the loops under this lock after setting shutdown:
        // a loop started past that point would never be stopped. Nor does
        // one start on a deleted namespace's partition (closed before
        // `stop_loops_of` takes this lock; its task's `hold_unless_stopped`
        // refuses a closed one too).
        if *self.tasks.shutdown.borrow() || handle.is_closed() {
            return;
        }
        let previous = loops.remove(&handle.tp);
        assert!(previous.as_ref().is_none_or(|l| l.stop.is_none()), "a partition has at most one running apply loop");
        let (stop, stopped) = watch::channel(false);
        let run = apply::run(handle.clone(), self.log.clone(), self.config.apply.clone(), stopped.clone());
        let task_handle = handle.clone();
        let stop_seen = stopped.clone();
        let task = tokio::spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.task.await;
            }
            // Told to stop while the previous loop was stopping: never starts.
            if task_handle.hold_unless_stopped(|| *stop_seen.borrow()) {
                // A panic anywhere in the loop (a broken invariant) refuses the
                // partition, loudly, instead of leaving it "serving" with no loop.
                if let Err(panic) = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run)).await {
                    let what = panic
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| panic.downcast_ref::<&str>().copied())
                        .unwrap_or("(no message)");
                    task_handle.set_status(crate::partition::PartitionStatus::Refused(format!(
                        "the apply loop stopped on a broken invariant: {what}; nothing after it was applied"
                    )));
                }
            }
        });
        loops.insert(handle.tp.clone(), ApplyLoop { stop: Some(stop), task });
    }

    /// Lets a partition go: marks it not held and stops its loop, unless a
    /// writer is waiting here for an outcome (then the next check retries).
    fn stop_loop(&self, handle: &Arc<PartitionHandle>) {
        let stop = || {
            if let Some(running) = self.ownership.loops.lock().get_mut(&handle.tp) {
                if let Some(stop) = running.stop.take() {
                    stop.send_replace(true);
                }
            }
        };
        if !handle.let_go_if_unpinned(stop) {
            return;
        }
        self.ownership.handing_off.lock().remove(&handle.tp);
        tracing::info!(tp = %handle.tp, "partition let go");
    }

    /// Follows the log's assignment (and completes hand-offs) until the
    /// node stops: a task of the node's own.
    pub(super) fn follow_assignment_forever(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let mut assignment = self.log.assignment();
        let mut shutdown = self.tasks.shutdown.subscribe();
        self.tasks.running.lock().push(tokio::spawn(async move {
            let mut assignment_open = true;
            loop {
                tokio::select! {
                    changed = assignment.changed(), if assignment_open => assignment_open = changed.is_ok(),
                    _ = tokio::time::sleep(HANDOFF_CHECK_INTERVAL) => {}
                    _ = shutdown.changed() => return,
                }
                let Some(node) = weak.upgrade() else { return };
                let current = assignment.borrow_and_update().clone();
                node.follow_assignment(&current);
            }
        }));
    }

    /// Lets every partition of a deleted namespace go at once and for
    /// good, writers waiting here or not (their outcomes will never come:
    /// they time out). Each loop stays listed while it stops, so a loop of
    /// a namespace created again under the name waits for it (`start_loop`),
    /// and `loops_stopped` can tell when its stores are no longer written.
    pub(super) fn stop_loops_of(&self, namespace: &crate::partition::Namespace) {
        for handle in &namespace.handles {
            // Closed first (its status lock, then the loops' lock, the order
            // `stop_loop` takes them in): `start_loop` refuses it from here on.
            handle.close();
            self.ownership.handing_off.lock().remove(&handle.tp);
            let mut loops = self.ownership.loops.lock();
            if let Some(stop) = loops.get_mut(&handle.tp).and_then(|running| running.stop.take()) {
                stop.send_replace(true);
            }
        }
    }

    /// Waits, at most `wait`, until the apply loops of `namespace`'s
    /// partitions ended (`stop_loops_of`): whether they did.
    pub(super) async fn loops_stopped(&self, namespace: &crate::partition::Namespace, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let running = {
                let loops = self.ownership.loops.lock();
                namespace.handles.iter().any(|h| loops.get(&h.tp).is_some_and(|l| l.stop.is_none() && !l.task.is_finished()))
            };
            if !running {
                // Their entries go (a loop of the name started since is listed with its stop).
                let mut loops = self.ownership.loops.lock();
                for handle in &namespace.handles {
                    if loops.get(&handle.tp).is_some_and(|l| l.stop.is_none() && l.task.is_finished()) {
                        loops.remove(&handle.tp);
                    }
                }
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Tells every apply loop to stop (each flushes its store) and returns
    /// their tasks, to be awaited.
    pub(super) fn stop_all_loops(&self) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        for (_, running) in self.ownership.loops.lock().drain() {
            if let Some(stop) = running.stop {
                stop.send_replace(true);
            }
            tasks.push(running.task);
        }
        tasks
    }
}
