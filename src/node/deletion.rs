//! Deleting a namespace, and every node learning that it is gone.
//!
//! The node that is asked (`DELETE /v1/ns/{ns}?confirm={ns}`) deletes the
//! namespace's log (`Log::delete_topic`: its topic and every entry) and
//! closes it here; every other node learns it from namespace discovery:
//!
//! - a namespace the log no longer lists in `VANISHED_LISTINGS_MIN`
//!   listings in a row is closed (one listing may come from a broker whose
//!   metadata lags a creation);
//! - a namespace whose log is now another topic of the name (deleted and
//!   created again between two listings) is closed too: discovery asks the
//!   log for one held namespace's identity each round (`Log::identity`,
//!   compared with `Namespace::log_identity`), so every one is checked
//!   within as many seconds as the node holds namespaces.
//!
//! Closing:
//!
//! - the namespace is marked deleted: watches end with `namespace_deleted`,
//!   and what is cached of it by name is not taken for a namespace created
//!   again under the name (`Namespace::opening`, `Log::forget_topic`);
//! - its apply loops stop, writers waiting here or not; a loop of the
//!   name that starts later (the namespace created again) waits for them
//!   (`ownership.rs`). Its stores are removed once they stopped (moved
//!   aside first, so a crash half way leaves no half store at the path a
//!   new namespace of the name opens);
//! - its journaled writes not yet in the log are dropped (their log is
//!   gone); so are, on any node, the journaled writes of a namespace the
//!   log has not listed for `JOURNAL_VANISHED_LISTINGS_MIN` listings (a
//!   node stopped while its namespace was deleted);
//! - the node that was asked also deletes its snapshots, after closing and
//!   outside the namespaces' lock, so `--restore` never brings it back.
//!
//! A node that was down meanwhile finds no topic at its next start and
//! never opens the namespace; if one was created again under the name, its
//! old stores are of another topic of the log and are removed when opened
//! (`of_this_log`: each store records the log it follows).
//!
//! A namespace on a Kafka source topic is not deleted: its entries stay in
//! that topic, and one created again on it would read them again.
//!
//! Owns: closing a namespace on this node. Never: creates one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Node;
use crate::log::{LogError, TopicInfo};
use crate::partition::Namespace;

/// Listings in a row (one per `LAG_REFRESH`, a second) that must leave out
/// a namespace this node holds before it is closed here.
const VANISHED_LISTINGS_MIN: u32 = 3;
/// Listings in a row that must leave out a namespace this node does not
/// hold before the journaled writes of it in this node's journal are
/// dropped: far more than for closing, as what is dropped is acknowledged
/// writes (of a namespace deleted while this node was stopped).
const JOURNAL_VANISHED_LISTINGS_MIN: u32 = 30;
/// How long closing waits for the namespace's apply loops to stop before
/// it removes their stores anyway (a loop still running writes a removed
/// file, and a new loop of the name waits for it).
const LOOPS_STOP_WAIT: Duration = Duration::from_secs(10);
/// How long discovery leaves out a name deleted through this node whose
/// log's identity could not be told then: a lagging listing shows the old
/// topic for less (Kafka's delete waits until its metadata drops it).
const DELETED_UNKNOWN_WAIT: Duration = Duration::from_secs(10);
/// Deleted namespaces remembered at once, so a log that still lists the
/// deleted topic (Kafka's metadata lags a deletion on some brokers) does not
/// make discovery open it again; one is forgotten once
/// `VANISHED_LISTINGS_MIN` listings in a row left it out, or, past the
/// bound, the one deleted longest ago.
const DELETED_REMEMBERED_MAX: usize = 1024;

/// What a deletion removed.
#[derive(Debug, Clone)]
pub struct DeletedNamespace {
    pub partitions: u32,
    /// Snapshot objects deleted (0 without a snapshot store).
    pub snapshot_objects: usize,
    /// Why its snapshots could not all be deleted, if they could not.
    pub snapshot_error: Option<String>,
}

/// Why a namespace cannot be deleted.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// It reads a Kafka source topic.
    #[error("namespace {name:?} reads the Kafka topic {topic:?}: a namespace on a source topic cannot be deleted (its entries stay in that topic, and a namespace created again on it would read them again)")]
    OnSourceTopic { name: String, topic: String },
    #[error("{0}")]
    Log(LogError),
}

/// What discovery remembers between listings about namespaces going away.
#[derive(Default)]
pub(super) struct Vanishing {
    /// Namespaces this node holds that the last listings left out, and how many in a row.
    missing: HashMap<String, u32>,
    /// Namespaces with journaled writes here that this node does not hold
    /// and the last listings left out, and how many in a row.
    journal_missing: HashMap<String, u32>,
    /// Namespaces deleted through this node (see `Deleted`).
    deleted: HashMap<String, Deleted>,
    /// Which held namespace's identity the next round checks.
    check_next: usize,
}

/// A namespace deleted through this node, while a listing may still show it.
struct Deleted {
    /// The identity of the log deleted (`Log::identity`; None if it could
    /// not be told): a listing that shows the name opens it only once it is
    /// another topic.
    identity: Option<String>,
    /// Listings in a row that left it out.
    unlisted: u32,
    at: std::time::Instant,
}

impl Node {
    /// Deletes namespace `name` everywhere (see the module doc). Ok(None):
    /// no such namespace here. Cancel-safe only between its steps: the
    /// caller runs it on a task of its own (`api/namespaces.rs`).
    pub async fn delete_namespace(&self, name: &str) -> Result<Option<DeletedNamespace>, DeleteError> {
        // A system namespace (`_…`) is never deleted: each node makes its own.
        if crate::limits::check_namespace_name(name).is_err() {
            return Ok(None);
        }
        let namespace = {
            let _creating = self.namespaces.creating.lock().await;
            let Some(namespace) = self.namespace(name) else { return Ok(None) };
            if let Some(source) = &namespace.source_topic {
                return Err(DeleteError::OnSourceTopic { name: name.to_string(), topic: source.to_string() });
            }
            let identity = self.log.identity(name).await.ok();
            // Ok(false): gone already (deleted through another node meanwhile): closed here all the same.
            self.log.delete_topic(name).await.map_err(DeleteError::Log)?;
            self.remember_deleted(name, identity);
            self.close_namespace(&namespace, "deleted through this node").await;
            namespace
        };
        let (snapshot_objects, snapshot_error) = match &self.config.apply.recovery.snapshots {
            Some(snapshots) => match snapshots.delete_namespace(name).await {
                Ok(count) => (count, None),
                Err(e) => {
                    tracing::error!(ns = name, error = %e, "the namespace was deleted but not all of its snapshots: delete tern/{name}/ in the snapshot store, or --restore brings it back");
                    (0, Some(e.to_string()))
                }
            },
            None => (0, None),
        };
        Ok(Some(DeletedNamespace { partitions: namespace.partitions, snapshot_objects, snapshot_error }))
    }

    /// A namespace of `name` was created through this node: the deletion
    /// remembered of the name (if any) is over.
    pub(super) fn forget_deleted(&self, name: &str) {
        self.namespaces.vanishing.lock().deleted.remove(name);
    }

    fn remember_deleted(&self, name: &str, identity: Option<String>) {
        let mut vanishing = self.namespaces.vanishing.lock();
        if vanishing.deleted.len() >= DELETED_REMEMBERED_MAX {
            let oldest = vanishing.deleted.iter().min_by_key(|(_, d)| d.at).map(|(name, _)| name.clone());
            vanishing.deleted.remove(&oldest.expect("the map is full"));
        }
        vanishing.deleted.insert(name.to_string(), Deleted { identity, unlisted: 0, at: std::time::Instant::now() });
    }

    /// After a listing of the log (`listed`): closes the namespaces this
    /// node holds that it left out `VANISHED_LISTINGS_MIN` times in a row,
    /// and one whose log is another topic now; drops journaled writes of
    /// namespaces long gone; forgets deletions no longer listed.
    pub(super) async fn close_vanished(&self, listed: &[TopicInfo]) {
        let is_listed = |name: &str| listed.iter().any(|t| t.name == name);
        // Only users' namespaces of their own log: a log may not list the
        // system ones (Kafka's listing leaves out names that start with
        // `_`; each node creates them itself), and a namespace on a source
        // topic is not deleted (its marker's listing needs the source topic).
        let held: Vec<Arc<Namespace>> =
            self.namespaces().into_iter().filter(|n| crate::limits::check_namespace_name(&n.name).is_ok() && n.source_topic.is_none()).collect();
        let mut gone: Vec<(Arc<Namespace>, &str)> = {
            let mut vanishing = self.namespaces.vanishing.lock();
            vanishing.deleted.retain(|name, deleted| {
                deleted.unlisted = if is_listed(name) { 0 } else { deleted.unlisted + 1 };
                deleted.unlisted < VANISHED_LISTINGS_MIN
            });
            vanishing.missing.retain(|name, _| held.iter().any(|n| &*n.name == name));
            let mut gone = Vec::new();
            for namespace in &held {
                if is_listed(&namespace.name) {
                    vanishing.missing.remove(&*namespace.name);
                    continue;
                }
                let times = vanishing.missing.entry(namespace.name.to_string()).or_insert(0);
                *times += 1;
                if *times >= VANISHED_LISTINGS_MIN {
                    gone.push((namespace.clone(), "its log was deleted (through another node)"));
                }
            }
            gone
        };
        if let Some(replaced) = self.replaced_one(&held, &is_listed).await {
            gone.push((replaced, "its log was deleted and created again (through another node)"));
        }
        self.drop_journaled_of_vanished(&is_listed).await;
        if gone.is_empty() {
            return;
        }
        let _creating = self.namespaces.creating.lock().await;
        for (namespace, why) in gone {
            // Deleted, or deleted and created again, while this waited.
            if self.namespace(&namespace.name).is_some_and(|now| Arc::ptr_eq(&now, &namespace)) {
                self.namespaces.vanishing.lock().missing.remove(&*namespace.name);
                self.close_namespace(&namespace, why).await;
            }
        }
    }

    /// One held namespace a round (in turn) whose log is now another topic
    /// of the same name: deleted and created again between two listings.
    async fn replaced_one(&self, held: &[Arc<Namespace>], is_listed: &(dyn Fn(&str) -> bool + Sync)) -> Option<Arc<Namespace>> {
        if held.is_empty() {
            return None;
        }
        let namespace = {
            let mut vanishing = self.namespaces.vanishing.lock();
            vanishing.check_next = vanishing.check_next.wrapping_add(1);
            held[vanishing.check_next % held.len()].clone()
        };
        let opened_on = namespace.log_identity.as_deref()?;
        if !is_listed(&namespace.name) {
            return None;
        }
        let now = self.log.identity(&namespace.name).await.ok()?;
        crate::identity::recreated(opened_on, &now).then_some(namespace)
    }

    /// Drops the journaled writes of namespaces this node does not hold that
    /// the log left out `JOURNAL_VANISHED_LISTINGS_MIN` listings in a row
    /// (deleted while this node was stopped): else the sequencer would try
    /// them for ever, and the journal's age bound refuse every journaled write.
    async fn drop_journaled_of_vanished(&self, is_listed: &(dyn Fn(&str) -> bool + Sync)) {
        let Ok(pending) = self.journal.pending().await else { return };
        let mut orphans: Vec<(String, u32)> = Vec::new();
        for p in &pending {
            // Users' namespaces only (a log may not list the system ones).
            let user = crate::limits::check_namespace_name(&p.ns).is_ok();
            if user && self.namespace(&p.ns).is_none() && !orphans.iter().any(|(ns, _)| *ns == p.ns) {
                orphans.push((p.ns.clone(), 0));
            }
        }
        let due: Vec<String> = {
            let mut vanishing = self.namespaces.vanishing.lock();
            vanishing.journal_missing.retain(|ns, _| orphans.iter().any(|(o, _)| o == ns));
            let mut due = Vec::new();
            for (ns, _) in &orphans {
                if is_listed(ns) {
                    vanishing.journal_missing.remove(ns);
                    continue;
                }
                let times = vanishing.journal_missing.entry(ns.clone()).or_insert(0);
                *times += 1;
                if *times >= JOURNAL_VANISHED_LISTINGS_MIN {
                    due.push(ns.clone());
                }
            }
            due
        };
        for ns in due {
            self.drop_journaled_of(&ns).await;
            self.namespaces.vanishing.lock().journal_missing.remove(&ns);
        }
    }

    /// Whether discovery may open `topic`: not while it is the very topic
    /// this node deleted (a lagging listing still shows it).
    pub(super) async fn may_open(&self, topic: &TopicInfo) -> bool {
        let Some((deleted, at)) = self.namespaces.vanishing.lock().deleted.get(&topic.name).map(|d| (d.identity.clone(), d.at)) else {
            return true;
        };
        let open = match (deleted, self.log.identity(&topic.name).await) {
            (Some(deleted), Ok(now)) => now != deleted,
            // What was deleted is not known: a listing that still shows the
            // name past `DELETED_UNKNOWN_WAIT` shows a topic made since.
            (None, _) => at.elapsed() >= DELETED_UNKNOWN_WAIT,
            (Some(_), Err(_)) => false,
        };
        if open {
            self.namespaces.vanishing.lock().deleted.remove(&topic.name);
        }
        open
    }

    /// Closes a namespace on this node (see the module doc). The caller
    /// holds the namespaces' creation lock, so no namespace of the name
    /// opens until its stores are gone.
    async fn close_namespace(&self, namespace: &Arc<Namespace>, why: &str) {
        namespace.deleted.store(true, std::sync::atomic::Ordering::Release);
        let names: Vec<String> = {
            let mut by_name = self.namespaces.by_name.write();
            if by_name.get(&*namespace.name).is_some_and(|held| Arc::ptr_eq(held, namespace)) {
                by_name.remove(&*namespace.name);
            }
            by_name.keys().cloned().collect()
        };
        self.log.follow_topics(&names);
        self.stop_loops_of(namespace);
        self.log.forget_topic(&namespace.name);
        self.forget_options(&namespace.name);
        self.drop_journaled_of(&namespace.name).await;
        if !self.loops_stopped(namespace, LOOPS_STOP_WAIT).await {
            tracing::warn!(ns = %namespace.name, "apply loops of a deleted namespace did not stop within {LOOPS_STOP_WAIT:?}; removing its stores anyway");
        }
        let stores = self.config.data_dir.join("stores").join(&*namespace.name);
        let trash = self.config.data_dir.join(TRASH_DIR);
        match tokio::task::spawn_blocking(move || remove_aside(&stores, &trash)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(ns = %namespace.name, error = %e, "removing the stores of a deleted namespace failed"),
            Err(e) => tracing::error!(ns = %namespace.name, error = %e, "removing the stores of a deleted namespace failed"),
        }
        for partition in 0..namespace.partitions {
            crate::metrics::forget_partition(&namespace.name, partition);
        }
        crate::metrics::NAMESPACES_DELETED.inc();
        tracing::warn!(ns = %namespace.name, partitions = namespace.partitions, why, "namespace deleted: closed here and its stores removed");
    }

    /// Drops every journaled write of `name` this node's journal holds, of
    /// every partition its journal topic has: the namespace they were
    /// written to was deleted (here, through another node, or while this
    /// node was stopped and one of its name made since: then before the
    /// sequencer appends them to the new namespace's log).
    pub(super) async fn drop_journaled_of(&self, name: &str) {
        match self.journal.pending().await {
            Ok(pending) => {
                for p in pending.iter().filter(|p| p.ns == name) {
                    tracing::warn!(ns = name, partition = p.partition, writes = p.end - p.start, "journaled writes of a deleted namespace dropped");
                    self.journal.release_below(&p.ns, p.partition, p.end);
                }
            }
            Err(e) => tracing::warn!(ns = name, error = %e, "reading the journal of a deleted namespace failed"),
        }
    }

    /// Removes what a stop left in the trash (`close_namespace` moved a
    /// deleted namespace's stores there and stopped before removing them).
    pub(super) async fn empty_trash(&self) {
        let trash = self.config.data_dir.join(TRASH_DIR);
        let emptied = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&trash) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        });
        if let Ok(Err(e)) = emptied.await {
            tracing::warn!(error = %e, "emptying the stores of deleted namespaces failed");
        }
    }
}

/// Where a deleted namespace's stores go before they are removed.
pub(super) const TRASH_DIR: &str = "deleted";

/// A store just opened (`opened`, at `path`), checked against the log
/// its namespace has now (`log`: `Log::identity`; None: not known, not
/// checked at this open):
/// - the same log: kept;
/// - the same log and topic name but another topic (`#<id>` differs): the
///   namespace was deleted and created again under its name while this
///   node was away. The store is moved to `trash` and removed (with its
///   rebuilding mark), and opened again empty (`reopen`): never applied
///   from the middle of the new log;
/// - another log or cluster altogether (the node pointed elsewhere): left
///   as it is and not stamped, for the checks of `apply/open.rs` (a store
///   ahead of its log is refused and kept, for `--restore`), unless
///   `adopt` (`--restore` carries stores over into a new log): stamped;
/// - none recorded (a store from before stores recorded it): stamped.
///
/// The last of the answer says whether the store was of another topic of
/// the name (removed): the journaled writes of the name this node still
/// holds were then the deleted namespace's (`drop_journaled_of`).
pub(super) fn of_this_log<T>(
    opened: (crate::store::PartitionStore, T),
    path: &std::path::Path,
    log: Option<&str>,
    adopt: bool,
    trash: &std::path::Path,
    reopen: impl FnOnce() -> anyhow::Result<(crate::store::PartitionStore, T)>,
) -> anyhow::Result<(crate::store::PartitionStore, T, bool)> {
    let Some(log) = log else { return Ok((opened.0, opened.1, false)) };
    let (store, extra) = opened;
    let recorded = store.log_identity()?;
    let Some(recorded) = recorded else {
        store.set_log_identity(log)?;
        return Ok((store, extra, false));
    };
    if recorded == log {
        return Ok((store, extra, false));
    }
    if !crate::identity::recreated(&recorded, log) {
        // The same topic newly named by an id (a cluster that started
        // giving topic ids), or a store carried into a new log on purpose.
        if adopt || crate::identity::same_topic(&recorded, log) {
            store.set_log_identity(log)?;
        } else {
            tracing::warn!(store = %path.display(), %recorded, now = log, "a store of another log or cluster: kept as it is (see the partition's status)");
        }
        return Ok((store, extra, false));
    }
    tracing::warn!(store = %path.display(), %recorded, now = log,
        "a store of a namespace deleted and created again under its name while this node was away: removed, rebuilt from snapshots and the log");
    drop(store);
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    std::fs::create_dir_all(trash)?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let aside = trash.join(format!("{file}.{nanos}"));
    std::fs::rename(path, &aside)?;
    std::fs::remove_file(&aside)?;
    match std::fs::remove_file(crate::store::damaged::rebuilding_mark_path(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let (store, extra) = reopen()?;
    store.set_log_identity(log)?;
    Ok((store, extra, true))
}

/// Moves `dir` into `trash` (one rename: the path is free at once), then removes it.
fn remove_aside(dir: &std::path::Path, trash: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(trash)?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let aside = trash.join(format!("{name}.{nanos}"));
    match std::fs::rename(dir, &aside) {
        Ok(()) => std::fs::remove_dir_all(&aside),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
