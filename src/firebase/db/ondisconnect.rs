//! `onDisconnect()`: writes a client registers now, for the server to make
//! once its connection goes away, exactly once, also when the node that
//! held the connection dies.
//!
//! The registrations of a connection are a record of the database's
//! namespace, written through the log before the client's `o`/`om`/`oc`
//! is answered: pk `registrations_pk` (chosen so it maps to the tree's own
//! partition), sk the connection's session id, value
//! `{"node", "boot", "session", "ops": [{"sk", "merge", "value"}]}`.
//! Firing them is ONE log entry: the tree writes, in the order registered,
//! and the deletion of the record *on the condition that it still has the
//! version this firer read*. The apply loop decides that condition alike
//! on every replica, so of any number of firers (the connection closing,
//! a sweeper here, another node's sweeper) exactly one entry applies; the
//! others change nothing.
//!
//! Who fires:
//! - the connection, when it closes (the client left, the socket broke, a
//!   keep-alive timed out, the node shuts down);
//! - a sweeper on every node, every `SWEEP_INTERVAL`, for records
//!   (a) of this node's earlier boot (this node was killed and restarted),
//!   (b) of this boot whose connection is no longer open (its close could
//!   not fire them: the log was down), or (c) of a node the cluster's
//!   gossip declared dead (its connections are gone with it).
//!
//! A registration's update is conditional too (on the version it last
//! wrote): if a sweeper fired it meanwhile (gossip wrongly thought this
//! node dead), the update fails and the connection is closed, so the SDK
//! reconnects and registers again instead of the old writes firing twice.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cluster::Cluster;
use crate::codec::{now_ms, Condition, Mutation, Op, OpKind, TreeOp};
use crate::node::reserved::Writer;
use crate::node::write::{Entry, WriteError, WriteRequest};
use crate::node::Node;
use crate::partition::Namespace;
use crate::tree::path;
use crate::tree::TREE_PK;

/// The pk of registrations, or its first variant that maps to the tree's partition.
const REGISTRATIONS_PK: &str = crate::node::reserved::ONDISCONNECT_PK;
/// Writes one connection may register (each becomes an op of the firing entry).
pub const OPS_PER_CONNECTION_MAX: usize = crate::limits::OPS_PER_MUTATION_MAX / 4;
/// Bytes of a connection's registrations (one record's value).
pub const REGISTRATION_BYTES_MAX: usize = crate::limits::VALUE_BYTES_MAX;
/// How often each node looks for registrations nobody will fire.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);
/// Registrations one sweep fires at most per namespace (the next sweep goes on).
const FIRED_PER_SWEEP_MAX: usize = 1000;
/// How long firing waits for the entry to be applied.
const FIRE_WAIT: Duration = Duration::from_secs(10);

/// This node's realtime connections, for the sweeper.
pub struct Registry {
    /// Random per process: registrations of an earlier boot of this node
    /// are orphans.
    pub boot: String,
    /// Session ids of this boot's open connections.
    live: Mutex<HashSet<String>>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry { boot: format!("{:016x}", rand::random::<u64>()), live: Mutex::new(HashSet::new()) }
    }
}

impl Registry {
    pub fn opened(&self, session: &str) {
        self.live.lock().insert(session.to_string());
    }
    pub fn closed(&self, session: &str) {
        self.live.lock().remove(session);
    }
    fn is_open(&self, session: &str) -> bool {
        self.live.lock().contains(session)
    }
    pub fn open_count(&self) -> usize {
        self.live.lock().len()
    }
}

/// One registered write.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Registered {
    pub sk: String,
    pub merge: bool,
    pub value: Value,
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    node: String,
    boot: String,
    session: String,
    ops: Vec<Registered>,
}

/// The pk of `namespace`'s registrations: in the tree's partition, so that
/// firing (tree writes + the record's deletion) is one atomic entry.
pub fn registrations_pk(namespace: &Namespace) -> String {
    let tree = namespace.partition_of(TREE_PK);
    if namespace.partition_of(REGISTRATIONS_PK) == tree {
        return REGISTRATIONS_PK.to_string();
    }
    // murmur2 spreads these evenly: a match within a few times the
    // partition count (at most 1024) is all but certain; the bound is far.
    (0..1_000_000u32)
        .map(|i| format!("{REGISTRATIONS_PK}.{i}"))
        .find(|pk| namespace.partition_of(pk) == tree)
        .expect("some variant maps to every partition")
}

/// A connection's registrations, as it last wrote them.
#[derive(Default)]
pub struct Registrations {
    ops: Vec<Registered>,
    /// The record's version, once written.
    version: Option<u64>,
}

/// A registration could not be saved.
#[derive(Debug)]
pub enum RegisterError {
    /// More writes than one connection may register.
    TooMany(String),
    /// More bytes than one connection's registrations may hold.
    TooLarge(String),
    /// The log did not take the record, or it was not applied in time.
    Write(WriteError),
    /// The record was fired meanwhile: the connection must close.
    Fired,
}

/// Who saves and fires registrations: this node (its write path, and its
/// id as the cluster knows it) in this boot (its registry).
#[derive(Clone, Copy)]
pub struct Firer<'a> {
    pub node: &'a Node,
    pub node_id: &'a str,
    pub registry: &'a Registry,
}

impl Registrations {
    /// Adds a write to make on disconnect (`o`, `om`) and saves the list.
    pub async fn add(&mut self, by: Firer<'_>, namespace: &Namespace, session: &str, op: Registered) -> Result<(), RegisterError> {
        if self.ops.len() >= OPS_PER_CONNECTION_MAX {
            return Err(RegisterError::TooMany(format!("at most {OPS_PER_CONNECTION_MAX} onDisconnect writes per connection")));
        }
        let mut ops = self.ops.clone();
        ops.push(op);
        self.save(by, namespace, session, ops).await
    }

    /// Cancels the writes registered at `sk` and below (`oc`).
    pub async fn cancel(&mut self, by: Firer<'_>, namespace: &Namespace, session: &str, sk: &str) -> Result<(), RegisterError> {
        let ops: Vec<Registered> =
            self.ops.iter().filter(|op| !matches!(path::relation(sk, &op.sk), path::Relation::Same | path::Relation::Descendant)).cloned().collect();
        if ops.len() == self.ops.len() {
            return Ok(());
        }
        self.save(by, namespace, session, ops).await
    }

    async fn save(&mut self, by: Firer<'_>, namespace: &Namespace, session: &str, ops: Vec<Registered>) -> Result<(), RegisterError> {
        let pk = registrations_pk(namespace);
        let condition = Some(match self.version {
            Some(version) => Condition::IfVersion(version),
            None => Condition::IfAbsent,
        });
        let kind = if ops.is_empty() {
            OpKind::Delete
        } else {
            let record = Record { node: by.node_id.to_string(), boot: by.registry.boot.clone(), session: session.to_string(), ops: ops.clone() };
            let text = serde_json::to_vec(&record).expect("a record serializes");
            if text.len() > REGISTRATION_BYTES_MAX {
                return Err(RegisterError::TooLarge(format!(
                    "a connection's onDisconnect writes are at most {REGISTRATION_BYTES_MAX} bytes together, these would be {}",
                    text.len()
                )));
            }
            OpKind::Put(Bytes::from(text))
        };
        let mutation = Mutation { ops: vec![Op { pk, sk: session.to_string(), kind, condition }], ..Default::default() };
        let timeout = Duration::from_millis(crate::limits::WAIT_MS_DEFAULT);
        let request = WriteRequest::new(Writer::FirebaseTree, namespace.partition_of(TREE_PK), Entry::Mutation(mutation)).applied_within(timeout);
        match by.node.write_sequenced(namespace, request).await {
            Ok(version) => {
                self.version = (!ops.is_empty()).then_some(version);
                self.ops = ops;
                Ok(())
            }
            Err(WriteError::ConditionFailed { .. }) => Err(RegisterError::Fired),
            Err(e) => Err(RegisterError::Write(e)),
        }
    }

    /// Makes the registered writes (the connection went away). Errors are
    /// left to the sweeper: the record stays until someone fires it.
    pub async fn fire(&mut self, node: &Node, namespace: &Namespace, session: &str) {
        let (Some(version), false) = (self.version, self.ops.is_empty()) else { return };
        let ops = std::mem::take(&mut self.ops);
        match fire(node, namespace, &registrations_pk(namespace), session, version, ops).await {
            Ok(fired) => count(if fired { "close" } else { "already" }),
            Err(e) => tracing::warn!(namespace = %namespace.name, session, error = %e, "onDisconnect writes not made at close; the sweeper retries"),
        }
        self.version = None;
    }
}

impl Registrations {
    /// Whether the writes this connection registered are still to be made:
    /// false once someone fired them while the connection lives (a
    /// sweeper that took this node for dead: gossip can be wrong). Then the
    /// connection must close, so the SDK reconnects and the app registers
    /// again (issue 36, defect 11); left open, it would believe its
    /// onDisconnect armed while it was spent. Read here: the connection's
    /// node holds the database's partition (else it was reset to a holder);
    /// a read that fails says nothing, and the next check asks again.
    pub fn still_armed(&self, namespace: &Namespace, session: &str) -> bool {
        let (Some(version), false) = (self.version, self.ops.is_empty()) else { return true };
        let handle = namespace.handle(namespace.partition_of(TREE_PK));
        let Ok(reader) = handle.read_store() else { return true };
        match reader.get(&registrations_pk(namespace), session) {
            Ok(record) => record.is_some_and(|r| r.version == version),
            Err(_) => true,
        }
    }

    /// Drops the registered writes without making them: the connection's
    /// credential was revoked or expired, and a revoked credential writes
    /// nothing, not even at its connection's end. Errors are logged; the
    /// sweeper would then fire the record (as for any connection it finds gone).
    pub async fn discard(&mut self, node: &Node, namespace: &Namespace, session: &str) {
        let (Some(version), false) = (self.version, self.ops.is_empty()) else { return };
        self.ops.clear();
        match fire(node, namespace, &registrations_pk(namespace), session, version, Vec::new()).await {
            Ok(_) => count("discarded"),
            Err(e) => tracing::warn!(namespace = %namespace.name, session, error = %e, "onDisconnect writes of a revoked credential not discarded"),
        }
        self.version = None;
    }
}

fn count(by: &str) {
    crate::metrics::FIREBASE_ONDISCONNECT.with_label_values(&[by]).inc();
}

/// One entry: the record's deletion if it still has `version`, and the
/// writes. True if this entry applied them; false if someone had already.
async fn fire(node: &Node, namespace: &Namespace, pk: &str, session: &str, version: u64, ops: Vec<Registered>) -> Result<bool, WriteError> {
    let time_ms = now_ms();
    let mut mutation_ops = Vec::with_capacity(ops.len() + 1);
    mutation_ops.push(Op { pk: pk.to_string(), sk: session.to_string(), kind: OpKind::Delete, condition: Some(Condition::IfVersion(version)) });
    for op in ops {
        let value = Bytes::from(serde_json::to_vec(&op.value).expect("a Value serializes"));
        mutation_ops.push(Op { pk: TREE_PK.to_string(), sk: op.sk, kind: OpKind::Tree(TreeOp { merge: op.merge, value, time_ms }), condition: None });
    }
    let mutation = Mutation { ops: mutation_ops, ..Default::default() };
    let request = WriteRequest::new(Writer::FirebaseTree, namespace.partition_of(TREE_PK), Entry::Mutation(mutation)).applied_within(FIRE_WAIT);
    match node.write_sequenced(namespace, request).await {
        Ok(_) => Ok(true),
        Err(WriteError::ConditionFailed { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Fires orphaned registrations every `SWEEP_INTERVAL` (see the module
/// doc), until the task is stopped.
pub async fn sweep_forever(node: Arc<Node>, cluster: Arc<Cluster>, databases: Arc<super::Databases>) {
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let dead: HashSet<String> = cluster.members().into_iter().filter(|m| m.state == "dead").map(|m| m.id).collect();
        let by = Firer { node: &node, node_id: &cluster.me().id, registry: &databases.registry };
        for namespace in node.namespaces() {
            if let Err(e) = sweep(by, &namespace, &dead).await {
                tracing::warn!(namespace = %namespace.name, error = %e, "onDisconnect sweep failed; next sweep retries");
            }
        }
    }
}

async fn sweep(by: Firer<'_>, namespace: &Namespace, dead: &HashSet<String>) -> anyhow::Result<()> {
    let registry = by.registry;
    let handle = namespace.handle(namespace.partition_of(TREE_PK));
    if !handle.is_held() {
        return Ok(());
    }
    let pk = registrations_pk(namespace);
    let me = by.node_id;
    let mut orphans: Vec<(String, u64, Vec<Registered>)> = Vec::new();
    {
        let reader = handle.read_store()?;
        // Each record is parsed once, from the scan; only an orphan's
        // version is read (the firing entry's condition).
        let mut found: Vec<(String, Vec<Registered>)> = Vec::new();
        reader.scan_prefix(&pk, "", None, &mut |session, value| {
            // A record a foreign writer broke is nobody's: fired with no writes, so it goes.
            let parsed: Option<Record> = serde_json::from_slice(value).ok();
            let orphaned = match &parsed {
                None => true,
                Some(r) if r.node == *me => r.boot != registry.boot || !registry.is_open(&r.session),
                Some(r) => dead.contains(&r.node),
            };
            if orphaned {
                found.push((session.to_string(), parsed.map(|r| r.ops).unwrap_or_default()));
            }
            found.len() < FIRED_PER_SWEEP_MAX
        })?;
        for (session, ops) in found {
            if let Some(record) = reader.get(&pk, &session)? {
                orphans.push((session, record.version, ops));
            }
        }
    }
    for (session, version, ops) in orphans {
        match fire(by.node, namespace, &pk, &session, version, ops).await {
            Ok(true) => count("sweep"),
            Ok(false) => count("already"),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
