//! The node: the namespaces this process holds, each partition's store and
//! apply task, and the two paths through them — `write` (append to the log,
//! optionally wait for the outcome) and `read` (local store, optionally after
//! a bounded wait for a position).
//!
//! The node never writes a store itself; it only starts and stops apply loops:
//! one per partition the log assigns to it (`Log::assignment`: every
//! partition, or this member's share of its replica group). Stores of every
//! partition stay open; a partition the node lets go of keeps its store and
//! resumes from its applied offset if it comes back.

pub mod read;
pub mod snapshots;
mod claims;
pub mod namespace_settings;
mod publisher;
pub mod reserved;
mod sequencer;
pub mod write;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::apply::{self, ApplyConfig};
use crate::partition::{Namespace, PartitionHandle, PartitionStatus};
use crate::limits;
use crate::log::{Assignment, CreateOutcome, Log, LogError, TopicPartition};
use crate::store::PartitionStore;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub data_dir: PathBuf,
    /// redb page cache per partition store.
    pub store_cache_bytes: usize,
    pub apply: ApplyConfig,
    /// Where partition snapshots live (the apply loop restores from them:
    /// `apply.recovery`); this node's snapshot schedule writes there.
    pub snapshots: Option<crate::snapshot::Snapshots>,
    /// Snapshots kept per partition when this node takes one.
    pub snapshot_retain: usize,
    /// Subscription bounds and intervals.
    pub watch: crate::watch::WatchConfig,
    /// How much this node's journal may hold (`journal_*` settings).
    pub journal: crate::journal::JournalLimits,
    /// Journal plain writes while the log refuses them (the `ripcord` setting).
    pub ripcord: bool,
    /// Keep the journal's copy in the snapshot store (`journal_objects`).
    pub journal_objects: bool,
    /// Replay another node's journal whose lease is this old (`journal_claim_after_ms`).
    pub journal_claim_after: Duration,
    /// This node's name (shown in its journal's lease).
    pub node_id: String,
    /// How long a held partition with procedures may apply nothing before
    /// this node appends a tick to it (zero: never).
    pub procedure_tick: Duration,
    /// Relay held partitions' outboxes to their output topics (`publisher.rs`).
    pub procedure_publish: bool,
}

impl NodeConfig {
    /// Where the journal keeps its copy: the snapshot store, when there is
    /// one and `journal_objects` is on.
    fn journal_objects_config(&self) -> Option<crate::journal::ObjectsConfig> {
        let snapshots = self.snapshots.as_ref().filter(|_| self.journal_objects)?;
        let (store, root) = snapshots.object_store();
        Some(crate::journal::ObjectsConfig {
            objects: crate::journal::objects::JournalObjects::new(store, root),
            node: self.node_id.clone(),
            lease_renew: lease_renew(self.journal_claim_after),
        })
    }
}

/// The lease is renewed four times per claim delay: a few lost renewals do
/// not get a live node's journal claimed.
fn lease_renew(claim_after: Duration) -> Duration {
    (claim_after / 4).max(Duration::from_millis(250))
}

#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    #[error("{}", .0.message)]
    Invalid(limits::LimitError),
    #[error("namespace {name} already exists with {existing} partitions; the partition count is fixed at creation")]
    Mismatch { name: String, existing: u32 },
    #[error("{0}")]
    Log(LogError),
    /// A namespace's source topic asked for differs from what it has, or
    /// the topic is taken by another namespace.
    #[error("{0}")]
    SourceMismatch(String),
    #[error("cannot open partition stores: {0}")]
    Store(String),
}

pub struct Node {
    pub config: NodeConfig,
    pub log: Arc<dyn Log>,
    namespaces: RwLock<BTreeMap<String, Arc<Namespace>>>,
    /// Serializes namespace creation so two requests cannot open the same stores.
    creating: tokio::sync::Mutex<()>,
    /// Stops the node's own tasks (lag refresh, assignment follower).
    shutdown: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// One apply loop per partition ever started, running or stopping.
    loops: Mutex<HashMap<TopicPartition, ApplyLoop>>,
    /// Set by the cluster: whether another live node of this node's replica
    /// group serves a partition. With it, a revoked partition is handed off.
    served_elsewhere: RwLock<Option<ServedElsewhere>>,
    /// Revoked partitions this node keeps serving until another member serves them.
    handing_off: Mutex<std::collections::HashSet<TopicPartition>>,
    /// The watches this node serves: their settings, ids and bound.
    pub watches: crate::watch::Watches,
    /// Journaled writes, durable here before the log has them
    /// (`<data_dir>/journal`); the sequencer appends them to the log.
    pub journal: Arc<crate::journal::Journal>,
    /// Wakes the sequencer after a journaled write.
    sequencer_wake: Arc<tokio::sync::Notify>,
    /// Set by the cluster: the highest applied position another live member
    /// advertises for a partition (the sequencer releases journal entries
    /// applied there when this node does not apply the partition).
    applied_elsewhere: RwLock<Option<AppliedElsewhere>>,
    /// Set by the cluster: whether this node is cut off from every other
    /// region (then the log's answers may come from an isolated leader, and
    /// prove nothing about how current this replica is).
    isolated: RwLock<Option<Isolated>>,
    /// The log refused a write and has taken none since (a sequenced
    /// write's append or the sequencer's): while set, ripcord journals plain
    /// writes at once instead of waiting for the log first. An atomic: every
    /// successful write looks at it.
    log_refused: std::sync::atomic::AtomicBool,
    /// Per held partition: its applied offset at the last tick round (idle
    /// when it has not moved since). Bounded by the partitions this node holds.
    tick_seen: Mutex<HashMap<TopicPartition, u64>>,
    /// One outbox publisher task per held partition with an outbox
    /// (`publisher.rs`); bounded by the partitions this node holds.
    publishers: Mutex<HashMap<TopicPartition, JoinHandle<()>>>,
    /// Namespace settings as this node last read them (`namespace_settings.rs`).
    settings_cache: namespace_settings::SettingsCache,
    /// Set by the cluster: reads a record of a partition this node does not
    /// hold at a node that does.
    read_elsewhere: RwLock<Option<ReadElsewhere>>,
}

/// One record of one partition, to be read at a node that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordAt {
    pub ns: String,
    pub partition: u32,
    pub pk: String,
    pub sk: String,
}

/// Reads a record at a holder of its partition: its value (JSON text), None
/// when there is no such record, or why no holder told.
pub type ReadElsewhere = Arc<dyn Fn(RecordAt) -> futures::future::BoxFuture<'static, Result<Option<bytes::Bytes>, String>> + Send + Sync>;

/// Whether this node hears no node of another region while it knows some.
pub type Isolated = Arc<dyn Fn() -> bool + Send + Sync>;

/// The highest `applied_next` another live member advertises for (namespace, partition).
pub type AppliedElsewhere = Arc<dyn Fn(&str, u32) -> Option<u64> + Send + Sync>;

/// Whether another live member of this node's replica group serves a partition.
pub type ServedElsewhere = Arc<dyn Fn(&TopicPartition) -> bool + Send + Sync>;

/// How often revoked partitions are checked for a completed hand-off.
const HANDOFF_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// A partition's apply loop. `stop` is `None` once the loop was told to stop
/// (it may still be flushing); a new loop for the partition first waits for
/// this one to end, so a store never has two writers.
struct ApplyLoop {
    stop: Option<watch::Sender<bool>>,
    task: JoinHandle<()>,
}

/// Bound on how long shutdown waits for apply loops to finish and flush.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);
/// Longest a watch's opening waits for the log's end offset.
const LOG_END_WAIT: Duration = Duration::from_secs(2);
/// How often the journal's backlog metrics are refreshed.
const JOURNAL_METRICS_REFRESH: Duration = Duration::from_millis(500);
/// How often lag metrics are refreshed from the log's end offsets.
const LAG_REFRESH: Duration = Duration::from_secs(1);
/// Most end-offset questions in flight in one lag refresh (each is a round
/// trip to the partition's leader, maybe in another region).
const LOG_END_ASKS_MAX: usize = 16;

impl Node {
    /// Opens every namespace the log knows and starts their apply loops.
    pub async fn start(config: NodeConfig, log: Arc<dyn Log>) -> anyhow::Result<Arc<Node>> {
        let journal = crate::journal::Journal::open(&config.data_dir.join("journal"), config.journal, config.journal_objects_config()).await?;
        let journal = Arc::new(journal);
        crate::metrics::JOURNAL_REPLAYED.inc_by(journal.replayed_at_open());
        let node = Arc::new(Node {
            journal,
            sequencer_wake: Arc::new(tokio::sync::Notify::new()),
            applied_elsewhere: RwLock::new(None),
            isolated: RwLock::new(None),
            log_refused: std::sync::atomic::AtomicBool::new(false),
            tick_seen: Mutex::new(HashMap::new()),
            publishers: Mutex::new(HashMap::new()),
            settings_cache: Default::default(),
            read_elsewhere: RwLock::new(None),
            watches: crate::watch::Watches::new(config.watch.clone(), log.clone()),
            config,
            log,
            namespaces: RwLock::new(BTreeMap::new()),
            creating: tokio::sync::Mutex::new(()),
            shutdown: watch::Sender::new(false),
            tasks: Mutex::new(Vec::new()),
            loops: Mutex::new(HashMap::new()),
            served_elsewhere: RwLock::new(None),
            handing_off: Mutex::new(std::collections::HashSet::new()),
        });
        node.discover_namespaces().await?;
        let sequencer = sequencer::run(Arc::downgrade(&node), node.sequencer_wake.clone(), node.shutdown.subscribe());
        node.tasks.lock().push(tokio::spawn(sequencer));
        if let (Some(objects), Some(own)) = (node.config.journal_objects_config(), node.journal.objects_id()) {
            let claims = claims::run(Arc::downgrade(&node), objects.objects, own.to_string(), node.config.journal_claim_after, node.shutdown.subscribe());
            node.tasks.lock().push(tokio::spawn(claims));
        }
        node.every(LAG_REFRESH, |node| async move {
            if let Err(e) = node.discover_namespaces().await {
                tracing::debug!(error = %e, "namespace discovery failed; retrying");
            }
            node.refresh_lag().await;
        });
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
        let weak = Arc::downgrade(&node);
        let mut assignment = node.log.assignment();
        let mut shutdown = node.shutdown.subscribe();
        node.tasks.lock().push(tokio::spawn(async move {
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
        Ok(node)
    }

    /// Opens namespaces created elsewhere (another node, or before a restart)
    /// that this node does not know yet.
    async fn discover_namespaces(&self) -> anyhow::Result<()> {
        let topics = self.log.list_topics().await?;
        if topics.iter().all(|t| self.namespace(&t.name).is_some()) {
            return Ok(());
        }
        let _guard = self.creating.lock().await;
        for topic in topics {
            if self.namespace(&topic.name).is_none() {
                self.open_namespace(&topic.name, topic.partitions, topic.source_topic.as_deref()).await?;
            }
        }
        Ok(())
    }

    /// Lets the cluster tell the node whether another member of its replica
    /// group serves a partition; from then on revoked partitions are handed
    /// off instead of dropped.
    pub fn set_served_elsewhere(&self, check: ServedElsewhere) {
        *self.served_elsewhere.write() = Some(check);
    }

    /// Lets the cluster tell the node how far other members applied a
    /// partition (the sequencer's release of journal entries).
    pub fn set_isolated(&self, isolated: Isolated) {
        *self.isolated.write() = Some(isolated);
    }

    /// Whether the cluster says this node is cut off from every other region.
    pub fn is_isolated(&self) -> bool {
        self.isolated.read().as_ref().is_some_and(|isolated| isolated())
    }

    pub fn set_applied_elsewhere(&self, applied: AppliedElsewhere) {
        *self.applied_elsewhere.write() = Some(applied);
    }

    /// Lets the cluster read records of partitions this node does not hold
    /// at nodes that do (the namespace settings).
    pub fn set_read_elsewhere(&self, read: ReadElsewhere) {
        *self.read_elsewhere.write() = Some(read);
    }

    /// Reads `at` at a node that holds its partition (see `ReadElsewhere`).
    pub async fn read_elsewhere(&self, at: RecordAt) -> Result<Option<bytes::Bytes>, String> {
        let read = self.read_elsewhere.read().clone();
        match read {
            Some(read) => read(at).await,
            None => Err(format!("partition {} of namespace {:?} is not held here and this node knows no other", at.partition, at.ns)),
        }
    }

    /// The next offset of `partition` of `ns` to apply: here when this node
    /// applies it, else the highest another live member advertises (0 when
    /// unknown).
    pub fn applied_next(&self, ns: &str, partition: u32) -> u64 {
        let Some(namespace) = self.namespace(ns) else { return 0 };
        if partition >= namespace.partitions {
            return 0;
        }
        let handle = namespace.handle(partition);
        if handle.is_held() {
            return handle.applied_next();
        }
        let elsewhere = self.applied_elsewhere.read().clone();
        elsewhere.and_then(|f| f(ns, partition)).unwrap_or(0)
    }

    /// Runs `tick` every `period` on a task of the node's own, until shutdown.
    fn every<F, Fut>(self: &Arc<Self>, period: Duration, tick: F)
    where
        F: Fn(Arc<Node>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let weak = Arc::downgrade(self);
        let mut shutdown = self.shutdown.subscribe();
        self.tasks.lock().push(tokio::spawn(async move {
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

    /// Appends a tick to every held partition that has procedures and applied
    /// nothing since the last round, so their timers fire in log time even
    /// when nothing is written (docs/procedures.md). At most one tick per
    /// held partition per round. Every replica group's holder ticks: ticks
    /// are ordinary entries, so extra ones change nothing but the log time.
    async fn append_ticks(&self) {
        let mut held = std::collections::HashSet::new();
        for namespace in self.namespaces() {
            for partition in 0..namespace.partitions {
                let handle = namespace.handle(partition);
                if !handle.is_held() {
                    continue;
                }
                held.insert(handle.tp.clone());
                let applied = handle.applied_next();
                let idle = self.tick_seen.lock().insert(handle.tp.clone(), applied) == Some(applied);
                let has_procedures = || handle.read_view().and_then(|v| v.reader.has_procedures()).unwrap_or(false);
                if !idle || !has_procedures() {
                    continue;
                }
                let tick = write::WriteRequest::new(reserved::Writer::Procedures, partition, write::Entry::Tick);
                match self.write_sequenced(&namespace, tick).await {
                    // Idle again once the tick is applied and nothing else came.
                    Ok(offset) => {
                        self.tick_seen.lock().insert(handle.tp.clone(), offset + 1);
                        crate::metrics::PROCEDURE_TICKS.inc();
                    }
                    Err(e) => tracing::debug!(tp = %handle.tp, error = %e, "appending a tick failed; the next round tries again"),
                }
            }
        }
        // Partitions let go are forgotten: the table stays bounded by what is held.
        self.tick_seen.lock().retain(|tp, _| held.contains(tp));
    }

    /// Sets the journal's backlog metrics (entries, bytes, oldest age).
    fn refresh_journal_metrics(&self) {
        let backlog = self.journal.backlog();
        crate::metrics::JOURNAL_BACKLOG_ENTRIES.set(backlog.entries as i64);
        crate::metrics::JOURNAL_BACKLOG_BYTES.set(backlog.bytes as i64);
        crate::metrics::JOURNAL_OLDEST_AGE_SECONDS.set(self.journal.oldest_age().map_or(0.0, |a| a.as_secs_f64()));
    }

    /// The log refused a write: ripcord now journals plain writes at once.
    pub fn log_refused(&self) {
        if !self.log_refused.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!("the log refuses writes; ripcord journals plain writes until it takes them again");
        }
    }

    /// The log took a write (a load, and a store only when it had refused one).
    pub fn log_took(&self) {
        if self.log_refused.load(std::sync::atomic::Ordering::Relaxed) && self.log_refused.swap(false, std::sync::atomic::Ordering::Relaxed) {
            tracing::info!("the log takes writes again");
        }
    }

    /// Whether ripcord is on and the log refused a write and has taken none since.
    pub fn ripcord_engaged(&self) -> bool {
        self.config.ripcord && self.log_refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether `tp` was revoked and is only served until another member serves it.
    pub fn is_handing_off(&self, tp: &TopicPartition) -> bool {
        self.handing_off.lock().contains(tp)
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
        let served_elsewhere = self.served_elsewhere.read().clone();
        for namespace in self.namespaces() {
            for handle in &namespace.handles {
                let held = assignment.holds(&handle.tp);
                let running = self.loops.lock().get(&handle.tp).is_some_and(|l| l.stop.is_some());
                match (held, running) {
                    (true, false) => self.start_loop(handle),
                    (true, true) => {
                        self.handing_off.lock().remove(&handle.tp);
                    }
                    (false, true) => match &served_elsewhere {
                        Some(check) if !check(&handle.tp) => {
                            if self.handing_off.lock().insert(handle.tp.clone()) {
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

    fn start_loop(&self, handle: &Arc<PartitionHandle>) {
        let mut loops = self.loops.lock();
        // `stop_apply` drains the loops under this lock after setting shutdown:
        // a loop started past that point would never be stopped.
        if *self.shutdown.borrow() {
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
            if let Some(running) = self.loops.lock().get_mut(&handle.tp) {
                if let Some(stop) = running.stop.take() {
                    stop.send_replace(true);
                }
            }
        };
        if !handle.let_go_if_unpinned(stop) {
            return;
        }
        self.handing_off.lock().remove(&handle.tp);
        tracing::info!(tp = %handle.tp, "partition let go");
    }

    pub fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.read().get(name).cloned()
    }

    /// Opens a watch on namespace `name` (see `Watches::open`). A position
    /// beyond the log's end (another cluster's, or a lost log's) is refused:
    /// resuming there would silently skip every event up to it.
    pub async fn open_watch(
        &self,
        name: &str,
        filter: crate::fanout::Filter,
        from: crate::watch::From,
        mode: crate::fanout::Mode,
        outbox: crate::watch::Outbox,
        connection: crate::watch::ConnectionId,
    ) -> Result<(crate::watch::Session, crate::watch::Start), crate::watch::WatchError> {
        let ns = self.namespace(name).ok_or_else(|| crate::watch::WatchError::NamespaceNotFound(name.to_string()))?;
        if let crate::watch::From::Cursor(cursor) = &from {
            self.check_position_not_ahead(&ns, cursor).await?;
        }
        self.watches.open(ns, filter, from, mode, outbox, connection)
    }

    /// Refuses a cursor with a mark past the log's end. Only marks past this
    /// replica's applied offset ask the log (once each, bounded).
    async fn check_position_not_ahead(&self, ns: &Namespace, cursor: &crate::fanout::Cursor) -> Result<(), crate::watch::WatchError> {
        use crate::watch::WatchError;
        for (partition, mark) in cursor.marks.iter() {
            let Some(handle) = ns.handles.get(partition as usize) else { continue };
            if mark.offset <= handle.applied_next() {
                continue;
            }
            let end = match tokio::time::timeout(LOG_END_WAIT, self.log.end_offset(&handle.tp)).await {
                Ok(Ok(end)) => end,
                Ok(Err(e)) => return Err(WatchError::Unavailable(format!("cannot check the position against the log: {e}"))),
                Err(_) => return Err(WatchError::Unavailable(format!("the log did not say where it ends within {LOG_END_WAIT:?}"))),
            };
            if mark.offset > end {
                return Err(WatchError::InvalidPosition(format!(
                    "the position is at offset {} of partition {partition}, beyond the log's end ({end}): it is not a \
                     position of this log (another cluster's, or a log since lost); resume with from=now or from=snapshot",
                    mark.offset
                )));
            }
        }
        Ok(())
    }

    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.namespaces.read().values().cloned().collect()
    }

    /// Creates a namespace (its log topic and partition stores). Returns true if created.
    pub async fn create_namespace(&self, name: &str, partitions: u32) -> Result<bool, NamespaceError> {
        limits::check_namespace_name(name).map_err(NamespaceError::Invalid)?;
        self.create_named(name, partitions).await
    }

    /// Creates a system namespace: `_` and a valid name, which no user's can
    /// be (the API keys live in one: `auth::SYSTEM_NAMESPACE`).
    pub async fn create_system_namespace(&self, name: &str, partitions: u32) -> Result<bool, NamespaceError> {
        let rest = name.strip_prefix('_').expect("a system namespace's name starts with _");
        limits::check_namespace_name(rest).map_err(NamespaceError::Invalid)?;
        self.create_named(name, partitions).await
    }

    async fn create_named(&self, name: &str, partitions: u32) -> Result<bool, NamespaceError> {
        limits::check_partitions(partitions).map_err(NamespaceError::Invalid)?;
        let _guard = self.creating.lock().await;
        if let Some(existing) = self.namespace(name) {
            if existing.partitions != partitions {
                return Err(NamespaceError::Mismatch { name: name.to_string(), existing: existing.partitions });
            }
            return Ok(false);
        }
        let created = match self.log.create_topic(name, partitions).await {
            Ok(CreateOutcome::Created) => true,
            Ok(CreateOutcome::AlreadyExists) => false,
            Err(LogError::PartitionCountMismatch { existing, .. }) => {
                return Err(NamespaceError::Mismatch { name: name.to_string(), existing })
            }
            Err(e) => return Err(NamespaceError::Log(e)),
        };
        self.open_namespace(name, partitions, None).await.map_err(|e| NamespaceError::Store(e.to_string()))?;
        Ok(created)
    }

    /// Creates namespace `name` on the existing topic `source` (its log:
    /// `Log::create_sourced`); its partitions are the topic's. `partitions`,
    /// when given, must be the topic's count. Ok(true) when created.
    pub async fn create_sourced_namespace(&self, name: &str, source: &str, partitions: Option<u32>) -> Result<bool, NamespaceError> {
        limits::check_namespace_name(name).map_err(NamespaceError::Invalid)?;
        let _guard = self.creating.lock().await;
        if let Some(existing) = self.namespace(name) {
            if existing.source_topic.as_deref() != Some(source) {
                let reads = match &existing.source_topic {
                    Some(topic) => format!("reads the topic {topic:?}"),
                    None => "has a log of its own".to_string(),
                };
                return Err(NamespaceError::SourceMismatch(format!(
                    "namespace {name:?} exists and {reads}; a namespace's source_topic is fixed at creation"
                )));
            }
            if partitions.is_some_and(|p| p != existing.partitions) {
                return Err(NamespaceError::Mismatch { name: name.to_string(), existing: existing.partitions });
            }
            return Ok(false);
        }
        let (outcome, count) = self.log.create_sourced(name, source, partitions).await.map_err(|e| match e {
            LogError::SourceConflict(message) => NamespaceError::SourceMismatch(message),
            LogError::PartitionCountMismatch { existing, .. } => NamespaceError::Mismatch { name: name.to_string(), existing },
            other => NamespaceError::Log(other),
        })?;
        self.open_namespace(name, count, Some(source)).await.map_err(|e| NamespaceError::Store(e.to_string()))?;
        Ok(outcome == CreateOutcome::Created)
    }

    async fn open_namespace(&self, name: &str, partitions: u32, source_topic: Option<&str>) -> anyhow::Result<()> {
        let name: Arc<str> = Arc::from(name);
        let mut handles = Vec::with_capacity(partitions as usize);
        for partition in 0..partitions {
            let path = self.config.data_dir.join("stores").join(name.as_ref()).join(format!("{partition:05}.redb"));
            let cache_bytes = self.config.store_cache_bytes;
            // A new store starts empty; its apply loop restores it from a snapshot (apply/open.rs).
            let store = tokio::task::spawn_blocking(move || PartitionStore::open(&path, partitions, cache_bytes)).await??;
            let applied_next = store.read()?.applied_next()?;
            let ring = self.config.watch.ring;
            handles.push(Arc::new(PartitionHandle::new(name.clone(), partition, partitions, Arc::new(store), applied_next, ring)));
        }
        let assignment = self.log.assignment().borrow().clone();
        for handle in &handles {
            if assignment.holds(&handle.tp) {
                self.start_loop(handle);
            } else {
                handle.set_not_held();
            }
        }
        let source_topic = source_topic.map(Arc::from);
        let namespace = Arc::new(Namespace { name: name.clone(), partitions, handles, source_topic });
        let names: Vec<String> = {
            let mut namespaces = self.namespaces.write();
            namespaces.insert(name.to_string(), namespace);
            namespaces.keys().cloned().collect()
        };
        self.log.follow_topics(&names);
        tracing::info!(ns = %name, partitions, "namespace open");
        Ok(())
    }

    /// Asks the log where each partition ends (at most `LOG_END_ASKS_MAX` at
    /// once, all within `LOG_END_WAIT`): the lag metrics, and the evidence
    /// of how current each replica is (`partition::freshness`), which an
    /// isolated node does not take.
    async fn refresh_lag(&self) {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + LOG_END_WAIT;
        let isolated = self.is_isolated();
        let handles: Vec<Arc<PartitionHandle>> = self.namespaces().iter().flat_map(|ns| ns.handles.iter().cloned()).collect();
        let asks = futures::stream::iter(handles)
            .map(|handle| async move {
                let asked = std::time::Instant::now();
                // One bound for the whole refresh: a stalled log delays it, never forever.
                if let Ok(Ok(end)) = tokio::time::timeout_at(deadline, self.log.end_offset(&handle.tp)).await {
                    handle.log_end_gauge.set(end as i64);
                    handle.lag_gauge.set(end.saturating_sub(handle.applied_next()) as i64);
                    if !isolated {
                        handle.freshness.log_end_seen(end, asked, handle.applied_next());
                    }
                }
                handle.staleness_gauge.set(handle.staleness().map_or(-1.0, |s| s.as_secs_f64()));
            })
            .buffer_unordered(LOG_END_ASKS_MAX);
        asks.collect::<()>().await;
    }

    /// Ready when the node knows which partitions it holds, and every one of
    /// them is caught up and none is refused.
    pub fn readiness(&self) -> (bool, Vec<String>) {
        let mut problems = Vec::new();
        if *self.log.assignment().borrow() == Assignment::Pending && !self.namespaces.read().is_empty() {
            problems.push("joining the replica group: no partitions assigned yet".to_string());
        }
        for namespace in self.namespaces() {
            for handle in &namespace.handles {
                match handle.status() {
                    PartitionStatus::Serving | PartitionStatus::NotHeld => {}
                    PartitionStatus::CatchingUp => {
                        problems.push(format!("{}/{}: catching up", namespace.name, handle.partition))
                    }
                    PartitionStatus::Refused(reason) => {
                        problems.push(format!("{}/{}: refused: {reason}", namespace.name, handle.partition))
                    }
                }
            }
        }
        (problems.is_empty(), problems)
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
        self.shutdown.send_replace(true);
        let mut tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *self.tasks.lock());
        for (_, running) in self.loops.lock().drain() {
            if let Some(stop) = running.stop {
                stop.send_replace(true);
            }
            tasks.push(running.task);
        }
        let all = futures::future::join_all(tasks);
        if tokio::time::timeout(SHUTDOWN_WAIT, all).await.is_err() {
            tracing::error!("apply loops did not stop within {SHUTDOWN_WAIT:?}; stores replay from their last durable offset");
        }
    }
}
