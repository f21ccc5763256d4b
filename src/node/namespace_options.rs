//! Namespace options: `write_mode` (issue 19), set by `PUT /v1/ns/{ns}`
//! and shown by `GET /v1/ns/{ns}`; the write path reads it for every
//! client write that does not say how durable it must be (`write.rs`).
//!
//! They are a record of the namespace itself, pk `.settings` sk
//! `namespace` (`reserved.rs`), JSON `{"write_mode": "sequenced" |
//! "journaled"}`, written through the log like any other record (beside
//! the Firebase rules at `.settings`/`rules`). So every replica of the
//! namespace learns them in log order, they survive restarts and
//! snapshots, and a new replica restored from a snapshot has them — no
//! second source of truth to keep in step.
//!
//! A node reads them where it can:
//! - when it holds the options record's partition: from its store, read
//!   again only after that partition applied something (the applied
//!   position is taken before the read, so the cache is never older than
//!   what it is kept under; a write of the options waits until applied
//!   here, so the next write on this node sees the new mode);
//! - else from a holder (`Node::read_elsewhere`, which the cluster sets),
//!   asked at most every `REMOTE_TTL` (a mode changed on another node
//!   reaches this one within that); if no holder answers, the last known
//!   options (at first: the defaults) stay in force.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::reserved::{Writer, NAMESPACE_OPTIONS_SK, OPTIONS_PK};
use super::write::{Durability, Entry, WriteError, WriteRequest};
use super::{Namespace, Node, RecordAt};
use crate::codec::{Mutation, Op, OpKind};

/// How long options read from another node are used before asking again.
const REMOTE_TTL: Duration = Duration::from_secs(5);
/// How long writing the options waits for this node to apply them.
const APPLY_WAIT: Duration = Duration::from_secs(10);

/// How a write to the namespace is acknowledged when the request does not
/// say (`?durability=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Answered with a position once the log has the write.
    #[default]
    Sequenced,
    /// Answered 202 once this node's journal has it; sequenced later.
    Journaled,
}

impl WriteMode {
    /// The durability a client write without `?durability=` gets.
    pub fn durability(self) -> Durability {
        match self {
            WriteMode::Sequenced => Durability::Sequenced,
            WriteMode::Journaled => Durability::Journaled,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceOptions {
    #[serde(default)]
    pub write_mode: WriteMode,
    /// How many versions of each record to keep (0 to `HISTORY_MAX_MAX`;
    /// 0: none). Each client write carries it (`codec::Mutation::history_max`),
    /// so every replica keeps alike whatever its history (`store::history`).
    #[serde(default)]
    pub history_max: u32,
}

/// Per namespace, the options this node last read. Bounded by the
/// namespaces this node knows.
#[derive(Default)]
pub(super) struct OptionsCache {
    entries: Mutex<HashMap<String, Cached>>,
}

#[derive(Clone, Copy)]
struct Cached {
    options: NamespaceOptions,
    /// Read and well-formed (false: the last known or the defaults stand in).
    parsed: bool,
    /// Read from this node's store at this applied position of the options' partition.
    applied_next: Option<u64>,
    /// Read from a holder at this moment.
    fetched_at: Instant,
    /// Which open of the namespace (`Namespace::opening`): one deleted and
    /// created again is another.
    opening: u64,
}

impl Node {
    /// The options of `namespace` as this node knows them (see the module doc).
    pub async fn namespace_options(&self, namespace: &Namespace) -> NamespaceOptions {
        self.namespace_options_known(namespace).await.0
    }

    /// The options of `namespace`, and whether this node knows them for
    /// sure: read from its caught-up store, or from a holder within
    /// `REMOTE_TTL`, and well-formed. Otherwise (no holder answers, the
    /// partition catches up or rebuilds, a record a foreign writer broke)
    /// they are the last known or the defaults, and false: what must not be
    /// decided on a guess (a write's `history_max`, a change of one option
    /// that rewrites the others) is not.
    pub async fn namespace_options_known(&self, namespace: &Namespace) -> (NamespaceOptions, bool) {
        let partition = namespace.partition_of(OPTIONS_PK);
        let handle = namespace.handle(partition);
        if handle.is_held() {
            let applied_next = handle.applied_next();
            let current = handle.status() == crate::partition::PartitionStatus::Serving;
            if let Some(cached) = self.cached_options(namespace) {
                if cached.applied_next == Some(applied_next) {
                    return (cached.options, cached.parsed && current);
                }
            }
            let (options, parsed) = match handle.read_store().and_then(|r| r.get(OPTIONS_PK, NAMESPACE_OPTIONS_SK)) {
                Ok(Some(record)) => parse(&record.value),
                Ok(None) => (NamespaceOptions::default(), true),
                Err(e) => {
                    tracing::warn!(ns = %namespace.name, error = %e, "reading the namespace options failed; using the last known");
                    return (self.cached_options(namespace).map(|c| c.options).unwrap_or_default(), false);
                }
            };
            self.remember_options(
                namespace,
                Cached { options, parsed, applied_next: Some(applied_next), fetched_at: Instant::now(), opening: namespace.opening },
            );
            return (options, parsed && current);
        }
        if let Some(cached) = self.cached_options(namespace) {
            if cached.applied_next.is_none() && cached.fetched_at.elapsed() < REMOTE_TTL {
                return (cached.options, cached.parsed);
            }
        }
        let known = self.cached_options(namespace).map(|c| c.options).unwrap_or_default();
        let at = RecordAt { ns: namespace.name.to_string(), partition, pk: OPTIONS_PK.into(), sk: NAMESPACE_OPTIONS_SK.into() };
        let (options, parsed) = match self.read_elsewhere(at).await {
            Ok(Some(value)) => parse(&value),
            // No record: the defaults.
            Ok(None) => (NamespaceOptions::default(), true),
            Err(e) => {
                tracing::warn!(ns = %namespace.name, error = %e, "no holder told the namespace options; using the last known");
                (known, false)
            }
        };
        self.remember_options(namespace, Cached { options, parsed, applied_next: None, fetched_at: Instant::now(), opening: namespace.opening });
        (options, parsed)
    }

    /// Writes the options of `namespace` through the log. When this node
    /// holds their partition it waits until it applied them, so its next
    /// write sees them; else it remembers them at once (holders learn them
    /// from the log).
    pub async fn write_namespace_options(&self, namespace: &Namespace, options: NamespaceOptions) -> Result<(), WriteError> {
        let partition = namespace.partition_of(OPTIONS_PK);
        let value = Bytes::from(serde_json::to_vec(&options).expect("options serialize"));
        let op = Op { pk: OPTIONS_PK.into(), sk: NAMESPACE_OPTIONS_SK.into(), kind: OpKind::Put(value), condition: None };
        let request = WriteRequest::new(Writer::NamespaceOptions, partition, Entry::Mutation(Mutation { ops: vec![op], ..Default::default() }));
        let held = namespace.handle(partition).is_held();
        let request = if held { request.applied_within(APPLY_WAIT) } else { request };
        self.write_sequenced(namespace, request).await?;
        if !held {
            self.remember_options(
                namespace,
                Cached { options, parsed: true, applied_next: None, fetched_at: Instant::now(), opening: namespace.opening },
            );
        }
        Ok(())
    }

    /// Forgets what it cached of a deleted namespace.
    pub(super) fn forget_options(&self, name: &str) {
        self.options_cache.entries.lock().remove(name);
    }

    fn cached_options(&self, namespace: &Namespace) -> Option<Cached> {
        self.options_cache.entries.lock().get(&*namespace.name).copied().filter(|cached| cached.opening == namespace.opening)
    }

    fn remember_options(&self, namespace: &Namespace, cached: Cached) {
        // On the write path: the key is allocated only the first time.
        let mut entries = self.options_cache.entries.lock();
        match entries.get_mut(&*namespace.name) {
            Some(entry) => *entry = cached,
            None => {
                entries.insert(namespace.name.to_string(), cached);
            }
        }
    }
}

/// A stored options value (or a holder's answer: the record's value), and
/// whether it parsed (a record a foreign writer broke: the defaults, false).
fn parse(value: &[u8]) -> (NamespaceOptions, bool) {
    match serde_json::from_slice::<NamespaceOptions>(value) {
        Ok(options) => (options, true),
        Err(e) => {
            tracing::warn!(error = %e, "the namespace options record does not parse; using the defaults");
            (NamespaceOptions::default(), false)
        }
    }
}
