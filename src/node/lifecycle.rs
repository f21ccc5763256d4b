//! The `Node` itself: what one node holds, one field per concern, and how
//! it starts and stops. Each concern's state and code is a file of its own:
//! the namespaces (`namespaces.rs`), which partitions run an apply loop
//! (`ownership.rs`), what the cluster tells it (`elsewhere.rs`), the write
//! path (`write.rs`), procedure ticks (`ticks.rs`) and outbox publishers
//! (`publisher.rs`), namespace options (`namespace_options.rs`), health
//! (`health.rs`), watches (`watches.rs`), deleting namespaces (`deletion.rs`).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::NodeConfig;
use super::elsewhere::Elsewhere;
use super::health::{JOURNAL_METRICS_REFRESH, LAG_REFRESH};
use super::namespace_options::OptionsCache;
use super::namespaces::Namespaces;
use super::ownership::Ownership;
use super::publisher::{self, Publishers};
use super::ticks::TickRounds;
use super::write::WritePathState;
use super::{claims, sequencer};
use crate::log::Log;

/// Bound on how long shutdown waits for apply loops to finish and flush.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);

pub struct Node {
    pub config: NodeConfig,
    pub log: Arc<dyn Log>,
    /// The namespaces this node knows (`namespaces.rs`).
    pub(super) namespaces: Namespaces,
    /// The apply loops and hand-offs (`ownership.rs`).
    pub(super) ownership: Ownership,
    /// What the cluster tells the node (`elsewhere.rs`).
    pub(super) elsewhere: Elsewhere,
    /// The node's own tasks and their stop signal.
    pub(super) tasks: NodeTasks,
    /// The watches this node serves: their settings, ids and bound.
    pub watches: crate::watch::Watches,
    /// Journaled writes, durable here before the log has them
    /// (`<data_dir>/journal`); the sequencer appends them to the log.
    pub journal: Arc<crate::journal::Journal>,
    /// The write path's own state: the sequencer's wake-up, ripcord (`write.rs`).
    pub(super) writes: WritePathState,
    /// Procedure ticks (`ticks.rs`).
    pub(super) ticks: TickRounds,
    /// Outbox publishers (`publisher.rs`).
    pub(super) publishers: Publishers,
    /// Namespace settings as this node last read them (`namespace_options.rs`).
    pub(super) options_cache: OptionsCache,
    /// Where strong reads wait (`barrier.rs`).
    pub(super) barriers: super::barrier::ReadBarriers,
}

/// The node's own tasks (lag refresh, assignment follower, sequencer, ...)
/// and the signal that stops them.
pub(super) struct NodeTasks {
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) running: Mutex<Vec<JoinHandle<()>>>,
}

impl Default for NodeTasks {
    fn default() -> NodeTasks {
        NodeTasks { shutdown: watch::Sender::new(false), running: Mutex::new(Vec::new()) }
    }
}

impl Node {
    /// Opens every namespace the log knows and starts their apply loops.
    pub async fn start(config: NodeConfig, log: Arc<dyn Log>) -> anyhow::Result<Arc<Node>> {
        let journal_dir = config.data_dir.join("journal");
        let accepted = config.journal_accept_lost.clone();
        let journal = crate::journal::Journal::open_accepting(&journal_dir, config.journal, config.journal_objects_config(), accepted).await?;
        let journal = Arc::new(journal);
        crate::metrics::JOURNAL_REPLAYED.inc_by(journal.replayed_at_open());
        let node = Arc::new(Node {
            journal,
            writes: WritePathState::default(),
            watches: crate::watch::Watches::new(config.watch.clone(), log.clone()),
            config,
            log,
            namespaces: Namespaces::default(),
            ownership: Ownership::default(),
            elsewhere: Elsewhere::default(),
            tasks: NodeTasks::default(),
            ticks: TickRounds::default(),
            publishers: Publishers::default(),
            options_cache: OptionsCache::default(),
            barriers: Default::default(),
        });
        node.empty_trash().await;
        node.discover_namespaces().await?;
        let sequencer = sequencer::run(Arc::downgrade(&node), node.writes.sequencer_wake.clone(), node.tasks.shutdown.subscribe());
        node.tasks.running.lock().push(tokio::spawn(sequencer));
        if let (Some(objects), Some(own)) = (node.config.journal_objects_config(), node.journal.objects_id()) {
            let claims = claims::run(
                Arc::downgrade(&node),
                objects.objects,
                own.to_string(),
                node.config.journal_claim_after,
                node.tasks.shutdown.subscribe(),
            );
            node.tasks.running.lock().push(tokio::spawn(claims));
        }
        node.every(LAG_REFRESH, |node| async move {
            if let Err(e) = node.discover_namespaces().await {
                tracing::debug!(error = %e, "namespace discovery failed; retrying");
            }
            node.refresh_lag().await;
        });
        node.every(super::namespaces::ENTRY_LIMITS_CHECK, |node| async move { node.learn_entry_limits().await });
        // The journal's metrics on a task of their own: the sequencer's
        // rounds and the lag refresh wait on the log while it is down, and
        // the backlog is what an operator watches then.
        node.every(JOURNAL_METRICS_REFRESH, |node| async move { node.refresh_journal_metrics() });
        if !node.config.procedure_tick.is_zero() {
            node.every(node.config.procedure_tick, |node| async move { node.append_ticks().await });
        }
        // The embedded log has no output topics: its outboxes stay (read through the API).
        if node.publishes_outboxes() {
            node.every(publisher::ROUND_INTERVAL, |node| async move { node.start_publishers() });
        }
        let scrub = super::scrub::run(Arc::downgrade(&node), node.config.scrub, node.tasks.shutdown.subscribe());
        node.tasks.running.lock().push(tokio::spawn(scrub));
        node.follow_assignment_forever();
        Ok(node)
    }

    /// Runs `tick` every `period` on a task of the node's own, until shutdown.
    pub(super) fn every<F, Fut>(self: &Arc<Self>, period: Duration, tick: F)
    where
        F: Fn(Arc<Node>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let weak = Arc::downgrade(self);
        let mut shutdown = self.tasks.shutdown.subscribe();
        self.tasks.running.lock().push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = shutdown.changed() => return,
                }
                let Some(node) = weak.upgrade() else { return };
                tick(node).await;
            }
        }));
    }

    /// Stops apply loops (each flushes its store durably), then closes the log.
    pub async fn shutdown(&self) {
        self.stop_apply().await;
        self.journal.close().await;
        self.log.close().await;
        tracing::info!("node stopped");
    }

    /// Stops this node's apply loops (each flushes its store durably) and
    /// leaves the log open, for a log shared with other consumers.
    pub async fn stop_apply(&self) {
        self.tasks.shutdown.send_replace(true);
        let mut tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *self.tasks.running.lock());
        tasks.extend(self.stop_all_loops());
        let all = futures::future::join_all(tasks);
        if tokio::time::timeout(SHUTDOWN_WAIT, all).await.is_err() {
            tracing::error!("apply loops did not stop within {SHUTDOWN_WAIT:?}; stores replay from their last durable offset");
        }
    }
}
