//! Deleting a namespace, and every node learning that it is gone.
//!
//! The node that is asked (`DELETE /v1/ns/{ns}?confirm={ns}`) deletes the
//! namespace's log (`Log::delete_topic`: its topic and every entry, or a
//! source topic's binding) and closes it here; every other node learns it
//! from namespace discovery: a namespace the log no longer lists in
//! `VANISHED_LISTINGS_MIN` listings in a row is closed the same way (one
//! listing may come from a broker whose metadata lags a creation). Closing:
//!
//! - the namespace is marked deleted: watches end with `namespace_deleted`,
//!   and what is cached of it by name is not taken for a namespace created
//!   again under the name (`Namespace::opening`);
//! - its apply loops stop, writers waiting here or not, and its stores are
//!   removed once they have (moved aside first, so a crash half way leaves
//!   no half store at the path a new namespace of the name opens);
//! - its journaled writes not yet sequenced are dropped (their log is gone);
//! - the node that was asked also deletes its snapshots, so `--restore`
//!   never brings it back.
//!
//! A node that was down meanwhile finds no topic at its next start and
//! never opens the namespace; if one was created again under the name, its
//! old stores are of another incarnation of the log and are set aside
//! (`apply/open.rs`, the store's log identity).
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
/// How long closing waits for the namespace's apply loops to stop before
/// it removes their stores anyway (a loop still running writes a removed file).
const LOOPS_STOP_WAIT: Duration = Duration::from_secs(10);
/// Deleted namespaces remembered at once, so a log that still lists the
/// deleted topic (Kafka's metadata lags a deletion on some brokers) does not
/// make discovery open it again; one is forgotten once no listing shows it.
const DELETED_REMEMBERED_MAX: usize = 1024;

/// What a deletion removed.
#[derive(Debug, Clone)]
pub struct DeletedNamespace {
    pub partitions: u32,
    pub source_topic: Option<String>,
    /// Snapshot objects deleted (0 without a snapshot store).
    pub snapshot_objects: usize,
}

/// What discovery remembers between listings about namespaces going away.
#[derive(Default)]
pub(super) struct Vanishing {
    /// Namespaces this node holds that the last listings left out, and how many in a row.
    missing: HashMap<String, u32>,
    /// Namespaces deleted through this node, with the identity of the log
    /// deleted (`Log::identity`; None if it could not be told): a listing
    /// that still shows the name opens it only once it is another topic.
    deleted: HashMap<String, Option<String>>,
}

impl Node {
    /// Deletes namespace `name` everywhere (see the module doc). Ok(None):
    /// no such namespace here.
    pub async fn delete_namespace(&self, name: &str) -> Result<Option<DeletedNamespace>, LogError> {
        // A system namespace (`_…`) is never deleted: each node makes its own.
        if crate::limits::check_namespace_name(name).is_err() {
            return Ok(None);
        }
        let _creating = self.namespaces.creating.lock().await;
        let Some(namespace) = self.namespace(name) else { return Ok(None) };
        let identity = self.log.identity(name).await.ok();
        self.log.delete_topic(name).await?;
        {
            let mut vanishing = self.namespaces.vanishing.lock();
            if vanishing.deleted.len() >= DELETED_REMEMBERED_MAX {
                vanishing.deleted.clear();
            }
            vanishing.deleted.insert(name.to_string(), identity);
        }
        self.close_namespace(&namespace, "deleted through this node").await;
        let snapshot_objects = match &self.config.apply.recovery.snapshots {
            Some(snapshots) => match snapshots.delete_namespace(name).await {
                Ok(count) => count,
                Err(e) => {
                    tracing::error!(ns = name, error = %e, "the namespace was deleted but its snapshots could not be: delete tern/{name}/ in the snapshot store, or --restore brings it back");
                    0
                }
            },
            None => 0,
        };
        Ok(Some(DeletedNamespace {
            partitions: namespace.partitions,
            source_topic: namespace.source_topic.as_deref().map(str::to_string),
            snapshot_objects,
        }))
    }

    /// Closes the namespaces this node holds that `listed` (a listing of the
    /// log) left out `VANISHED_LISTINGS_MIN` times in a row: deleted
    /// through another node. Forgets deletions the log no longer lists.
    pub(super) async fn close_vanished(&self, listed: &[TopicInfo]) {
        let gone: Vec<Arc<Namespace>> = {
            let mut vanishing = self.namespaces.vanishing.lock();
            vanishing.deleted.retain(|name, _| listed.iter().any(|t| &t.name == name));
            // Only users' namespaces: a log may not list the system ones
            // (Kafka's listing leaves out names that start with `_`, and
            // each node creates them itself), and none is ever deleted.
            let held: Vec<Arc<Namespace>> = self.namespaces().into_iter().filter(|n| crate::limits::check_namespace_name(&n.name).is_ok()).collect();
            vanishing.missing.retain(|name, _| held.iter().any(|n| &*n.name == name));
            let mut gone = Vec::new();
            for namespace in held {
                if listed.iter().any(|t| *t.name == *namespace.name) {
                    vanishing.missing.remove(&*namespace.name);
                    continue;
                }
                let times = vanishing.missing.entry(namespace.name.to_string()).or_insert(0);
                *times += 1;
                if *times >= VANISHED_LISTINGS_MIN {
                    gone.push(namespace);
                }
            }
            gone
        };
        if gone.is_empty() {
            return;
        }
        let _creating = self.namespaces.creating.lock().await;
        for namespace in gone {
            // Deleted, or deleted and created again, while this waited.
            if self.namespace(&namespace.name).is_some_and(|now| Arc::ptr_eq(&now, &namespace)) {
                self.namespaces.vanishing.lock().missing.remove(&*namespace.name);
                self.close_namespace(&namespace, "its log was deleted (through another node)").await;
            }
        }
    }

    /// Whether discovery may open `topic`: not while it is the very topic
    /// this node deleted (a lagging listing still shows it).
    pub(super) async fn may_open(&self, topic: &TopicInfo) -> bool {
        let Some(deleted) = self.namespaces.vanishing.lock().deleted.get(&topic.name).cloned() else { return true };
        match (deleted, self.log.identity(&topic.name).await) {
            (Some(deleted), Ok(now)) if now != deleted => {
                self.namespaces.vanishing.lock().deleted.remove(&topic.name);
                true
            }
            _ => false,
        }
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
        let loops = self.stop_loops_of(namespace);
        self.forget_options(&namespace.name);
        self.drop_journaled(namespace).await;
        if tokio::time::timeout(LOOPS_STOP_WAIT, futures::future::join_all(loops)).await.is_err() {
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

    /// Drops the journaled writes of a deleted namespace that its log never
    /// got: released, so the sequencer stops trying to append them.
    async fn drop_journaled(&self, namespace: &Namespace) {
        for partition in 0..namespace.partitions {
            match self.journal.pending_of(&namespace.name, partition).await {
                Ok(Some(pending)) => {
                    tracing::warn!(ns = %namespace.name, partition, writes = pending.end - pending.start, "journaled writes of a deleted namespace dropped");
                    self.journal.release_below(&namespace.name, partition, pending.end);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(ns = %namespace.name, partition, error = %e, "reading the journal of a deleted namespace failed"),
            }
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
/// checked). A store that recorded another log is of a namespace deleted
/// and created again under the name (or of another log): it is removed and
/// opened again empty (`reopen`), unless `adopt` (`--restore` carries
/// stores over into a new log on purpose). A store that recorded none
/// records this one.
pub(super) fn of_this_log<T>(
    opened: (crate::store::PartitionStore, T),
    path: &std::path::Path,
    log: Option<&str>,
    adopt: bool,
    trash: &std::path::Path,
    reopen: impl FnOnce() -> anyhow::Result<(crate::store::PartitionStore, T)>,
) -> anyhow::Result<(crate::store::PartitionStore, T)> {
    let Some(log) = log else { return Ok(opened) };
    let (store, extra) = opened;
    match store.log_identity()? {
        Some(recorded) if recorded == log => Ok((store, extra)),
        Some(recorded) if !adopt => {
            tracing::warn!(store = %path.display(), %recorded, now = log,
                "a store of another log (its namespace was deleted and created again while this node was away): removed, rebuilt from snapshots and the log");
            drop(store);
            let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            std::fs::create_dir_all(trash)?;
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            let aside = trash.join(format!("{file}.{nanos}"));
            std::fs::rename(path, &aside)?;
            std::fs::remove_file(&aside)?;
            let (store, extra) = reopen()?;
            store.set_log_identity(log)?;
            Ok((store, extra))
        }
        _ => {
            store.set_log_identity(log)?;
            Ok((store, extra))
        }
    }
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
