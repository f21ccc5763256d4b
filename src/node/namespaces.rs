//! The namespaces this node knows: opened at start from the log's topics,
//! created through the API (each a topic and one store per partition),
//! discovered when another node created one. A partition of a namespace
//! runs an apply loop here only if the log assigns it (`ownership.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::Node;
use crate::limits;
use crate::log::{CreateOutcome, LogError};
use crate::partition::{Namespace, PartitionHandle};
use crate::store::damaged::{open_or_set_aside, rebuilding_mark};

/// How often the node asks the log to learn the largest entry of the
/// namespaces whose limit is due (`Log::learn_entry_limits`: never learned,
/// learned a minute ago, or refused an entry for its size since): one
/// request for all of them, none when none is due.
pub(super) const ENTRY_LIMITS_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

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

/// The namespaces by name, and the lock that serializes their creation.
#[derive(Default)]
pub(super) struct Namespaces {
    pub(super) by_name: RwLock<BTreeMap<String, Arc<Namespace>>>,
    /// Serializes namespace creation and closing, so two cannot open (or
    /// one open while another removes) the same stores.
    pub(super) creating: tokio::sync::Mutex<()>,
    /// Namespaces going away (`deletion.rs`).
    pub(super) vanishing: parking_lot::Mutex<super::deletion::Vanishing>,
}

impl Node {
    /// Opens namespaces created elsewhere (another node, or before a restart)
    /// that this node does not know yet, and closes those deleted elsewhere
    /// (`deletion.rs`).
    pub(super) async fn discover_namespaces(&self) -> anyhow::Result<()> {
        let mut topics = self.log.list_topics().await?;
        self.close_vanished(&topics).await;
        let mut new = Vec::new();
        for topic in std::mem::take(&mut topics) {
            if self.namespace(&topic.name).is_none() && self.may_open(&topic).await {
                new.push(topic);
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        // Outside the lock: one request for all, bounded by the log's timeout.
        let names: Vec<String> = new.iter().map(|t| t.name.clone()).collect();
        self.learn_entry_limits_of(&names).await;
        let _guard = self.namespaces.creating.lock().await;
        for topic in new {
            if self.namespace(&topic.name).is_none() {
                self.open_namespace(&topic.name, topic.partitions, topic.source_topic.as_deref()).await?;
            }
        }
        Ok(())
    }

    pub fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.by_name.read().get(name).cloned()
    }

    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.namespaces.by_name.read().values().cloned().collect()
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
        let _guard = self.namespaces.creating.lock().await;
        if let Some(existing) = self.namespace(name) {
            if existing.partitions != partitions {
                return Err(NamespaceError::Mismatch { name: name.to_string(), existing: existing.partitions });
            }
            return Ok(false);
        }
        let created = match self.log.create_topic(name, partitions).await {
            Ok(CreateOutcome::Created) => true,
            Ok(CreateOutcome::AlreadyExists) => false,
            Err(LogError::PartitionCountMismatch { existing, .. }) => return Err(NamespaceError::Mismatch { name: name.to_string(), existing }),
            Err(e) => return Err(NamespaceError::Log(e)),
        };
        self.learn_entry_limits_of(&[name.to_string()]).await;
        self.open_namespace(name, partitions, None).await.map_err(|e| NamespaceError::Store(e.to_string()))?;
        self.forget_deleted(name);
        Ok(created)
    }

    /// Creates namespace `name` on the existing topic `source` (its log:
    /// `Log::create_sourced`); its partitions are the topic's. `partitions`,
    /// when given, must be the topic's count. Ok(true) when created.
    pub async fn create_sourced_namespace(&self, name: &str, source: &str, partitions: Option<u32>) -> Result<bool, NamespaceError> {
        limits::check_namespace_name(name).map_err(NamespaceError::Invalid)?;
        let _guard = self.namespaces.creating.lock().await;
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
        self.learn_entry_limits_of(&[name.to_string()]).await;
        self.open_namespace(name, count, Some(source)).await.map_err(|e| NamespaceError::Store(e.to_string()))?;
        Ok(outcome == CreateOutcome::Created)
    }

    async fn open_namespace(&self, name: &str, partitions: u32, source_topic: Option<&str>) -> anyhow::Result<()> {
        let name: Arc<str> = Arc::from(name);
        // Which log the stores must be of: None when the log cannot say
        // now (then they are not checked at this open).
        let identity = match self.log.identity(&name).await {
            Ok(identity) if identity.len() <= crate::store::LOG_IDENTITY_BYTES_MAX => Some(identity),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(ns = %name, error = %e, "cannot name the namespace's log; its stores are not checked against it at this open");
                None
            }
        };
        // `--restore` carries stores over into a new log on purpose.
        let adopt = self.config.apply.recovery.into_new_log;
        let mut handles = Vec::with_capacity(partitions as usize);
        let mut stores_of_deleted = false;
        for partition in 0..partitions {
            let path = self.config.data_dir.join("stores").join(name.as_ref()).join(format!("{partition:05}.redb"));
            let damaged_dir = self.config.data_dir.join("damaged");
            let trash = self.config.data_dir.join(super::deletion::TRASH_DIR);
            let cache_bytes = self.config.store_cache_bytes;
            // A new store starts empty, and so does one found damaged (set
            // aside) or of another log (a namespace deleted and created
            // again under its name while this node was away): its apply
            // loop restores it from a snapshot and the log (apply/open.rs).
            let mark_path = path.clone();
            let log = identity.clone();
            let (store, set_aside, of_deleted) = tokio::task::spawn_blocking(move || {
                let opened = open_or_set_aside(&path, partitions, cache_bytes, &damaged_dir)?;
                super::deletion::of_this_log(opened, &path, log.as_deref(), adopt, &trash, || {
                    Ok(open_or_set_aside(&path, partitions, cache_bytes, &damaged_dir)?)
                })
            })
            .await??;
            stores_of_deleted |= of_deleted;
            let applied_next = store.read()?.applied_next()?;
            let ring = self.config.watch.ring;
            let handle = Arc::new(PartitionHandle::new(name.clone(), partition, partitions, Arc::new(store), applied_next, ring));
            if let Some(set_aside) = set_aside {
                tracing::error!(tp = %handle.tp, %set_aside, "a damaged partition store was set aside; the partition is rebuilt from snapshots and the log");
                crate::metrics::STORES_SET_ASIDE.inc();
                handle.start_rebuilding(set_aside.to_string());
            } else if let Some(why) = rebuilding_mark(&mark_path) {
                // A rebuild the node stopped in the middle of: its store is
                // older than what was served, so it serves once caught up.
                tracing::warn!(tp = %handle.tp, %why, "a rebuild cut short by a stop goes on; the partition serves once caught up");
                handle.start_rebuilding(why);
            }
            handles.push(handle);
        }
        if stores_of_deleted {
            self.drop_journaled_of(&name).await;
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
        let namespace = Arc::new(Namespace {
            name: name.clone(),
            partitions,
            handles,
            source_topic,
            deleted: Default::default(),
            opening: crate::partition::namespace::next_opening(),
            log_identity: identity,
        });
        let names: Vec<String> = {
            let mut namespaces = self.namespaces.by_name.write();
            namespaces.insert(name.to_string(), namespace);
            namespaces.keys().cloned().collect()
        };
        self.log.follow_topics(&names);
        tracing::info!(ns = %name, partitions, "namespace open");
        Ok(())
    }

    /// Learns the largest entry of every namespace whose limit is due: every `ENTRY_LIMITS_CHECK`.
    pub(super) async fn learn_entry_limits(&self) {
        let names: Vec<String> = self.namespaces().iter().map(|namespace| namespace.name.to_string()).collect();
        self.learn_entry_limits_of(&names).await;
    }

    /// Learns the largest entry the topics of `names` take
    /// (`Log::learn_entry_limits`), before they open: a write its topic
    /// cannot take is refused before it is journaled. On failure the limit
    /// learned last (else the log's own bound) stays until the next check.
    async fn learn_entry_limits_of(&self, names: &[String]) {
        if let Err(e) = self.log.learn_entry_limits(names).await {
            tracing::warn!(error = %e, "cannot learn the largest entry of the namespaces' topics; tried again within {ENTRY_LIMITS_CHECK:?}");
        }
    }
}
