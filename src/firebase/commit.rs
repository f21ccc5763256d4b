//! A Firebase write judged by the rules and committed as one step.
//!
//! Firebase evaluates a write's rules and commits it under one lock, so a
//! rule that reads data (`!data.exists()`, `newData.val() == data.val() +
//! 1`, `data.parent().numChildren() < 3`) sees exactly the state the write
//! lands on. Tern's holder judges a write against its applied view and then
//! appends it: in between, other writes (this node's, another holder's
//! during a hand-off, an admin's) may land and change what the rules read.
//! Without more, eight writers racing to claim a name all won (issue 36,
//! defect 8).
//!
//! So the judgment records every location the rules read, with the hash of
//! its value in the same view (`codec::TreeRead`); the entry carries them;
//! the apply loop refuses the entry, on every replica alike, if any of them
//! reads differently now (`partition::outcome::READS_CHANGED`). The holder
//! then judges the write again against the newer state and writes again —
//! the outcome is the one a serial database would reach. Bounds: at most
//! `ATTEMPTS_MAX` attempts per write; from the second attempt on, retries of
//! one database take turns (`Databases::retry_turn`), so a hot location
//! makes progress instead of livelocking, and a retry waits for its turn at
//! most the write's own wait.
//!
//! A write whose rules read nothing (an admin's, `auth != null`) carries no
//! reads and is never retried. Each attempt has its own write id (derived
//! from the request's), so a client's retry of the whole request walks the
//! same ids and is answered by the attempt that applied, before any rule
//! is judged again.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use bytes::Bytes;
use serde_json::Value;

use super::caller::Caller;
use super::db::{tree_view, TreeData};
use super::error::FbError;
use super::state::Firebase;
use crate::codec::{now_ms, Condition, Mutation, Op, OpKind, TreeOp, TreeRead};
use crate::firebase::rules::eval::Data;
use crate::node::reserved::Writer;
use crate::node::write::{Entry, Receipt, WriteError, WriteRequest};
use crate::partition::outcome::{Outcome, READS_CHANGED};
use crate::partition::{Namespace, ReadView};
use crate::store::tree::{value_at, TreeError, READ_BYTES_MAX};
use crate::tree::path;
use crate::tree::value::{etag, resolve_server_values};
use crate::tree::TREE_PK;

/// Most attempts one write makes when what its rules read keeps changing
/// (the Firebase SDKs retry a transaction 25 times).
pub(crate) const ATTEMPTS_MAX: u32 = 25;

/// A tree write as a protocol received it.
pub(super) struct TreeWrite<'a> {
    /// Where: a set's path, or the base of an update's relative paths.
    pub sk: String,
    /// The body as received (validated by `tree::value::validate_write`).
    pub value: Bytes,
    /// The same, parsed.
    pub written: &'a Value,
    /// An update (`PATCH`, `m`) rather than a set.
    pub merge: bool,
    /// The client's own condition (`if-match`, a transaction's hash).
    pub condition: Option<Condition>,
    /// The request's write id (empty: none).
    pub write_id: Bytes,
    /// How long each attempt waits to be applied here, and a retry for its turn.
    pub wait: Duration,
}

/// How a write ended, short of an error.
pub(super) enum Committed {
    /// Applied at offset `version`.
    Applied { version: u64 },
    /// The client's own condition did not hold: nothing written.
    ConditionFailed,
    /// This node let the partition go: nothing written; a holder takes it.
    Forward,
}

/// Judges `write` by the rules and commits it so that the rules' verdict
/// holds for the state it lands on (see the module doc).
pub(super) async fn commit(state: &Firebase, namespace: &Namespace, caller: &Caller, write: TreeWrite<'_>) -> Result<Committed, FbError> {
    let partition = namespace.partition_of(TREE_PK);
    for attempt in 0..ATTEMPTS_MAX {
        let _turn = match attempt {
            0 => None,
            _ => Some(
                tokio::time::timeout(write.wait, state.db.retry_turn(&namespace.name))
                    .await
                    .map_err(|_| too_contended("waiting for its turn to write again took longer than the write may wait"))?,
            ),
        };
        let time_ms = now_ms();
        // The client's condition, then the rules, on one view: the order the
        // apply loop checks them in (a condition that no longer holds is the
        // answer, whatever the rules would say of the newer value).
        let view = tree_view(namespace)?;
        if !own_condition_holds(&view, &write)? {
            return Ok(Committed::ConditionFailed);
        }
        let op = Op {
            pk: TREE_PK.into(),
            sk: write.sk.clone(),
            kind: OpKind::Tree(TreeOp { merge: write.merge, value: write.value.clone(), time_ms }),
            condition: write.condition,
        };
        let mut mutation = Mutation { write_id: attempt_write_id(&write.write_id, attempt), ops: vec![op], journal: None, reads: Vec::new() };
        // A retried request: the attempt it made before is its answer (judged
        // again, a claim would be denied by the claim it made itself).
        match made_before(&view, &mutation)? {
            Some(Outcome::Duplicate { of, original }) => match *original {
                Outcome::ConditionFailed { op_index: READS_CHANGED, .. } => continue,
                Outcome::ConditionFailed { .. } => return Ok(Committed::ConditionFailed),
                _ => return Ok(Committed::Applied { version: of }),
            },
            Some(Outcome::KeyReused { of }) => return Err(FbError::from(WriteError::KeyReused { of })),
            _ => {}
        }
        mutation.reads = judge(state, namespace, caller, view, &write.sk, write.written, write.merge, time_ms)?;
        let request = WriteRequest::new(Writer::FirebaseTree, partition, Entry::Mutation(mutation)).applied_within(write.wait);
        match state.app.node.write(namespace, request).await {
            Ok(Receipt::Sequenced { version, .. }) => return Ok(Committed::Applied { version }),
            Ok(Receipt::Journaled { .. }) => unreachable!("a write that waits to be applied is sequenced"),
            Ok(Receipt::Forward) => return Ok(Committed::Forward),
            Err(WriteError::ConditionFailed { op_index: READS_CHANGED, .. }) => continue,
            Err(WriteError::ConditionFailed { .. }) => return Ok(Committed::ConditionFailed),
            Err(e) => return Err(FbError::from(e)),
        }
    }
    Err(too_contended(&format!("the data its rules read changed {ATTEMPTS_MAX} times while it was written")))
}

/// What `mutation`'s write id met when it was last applied, as the apply
/// loop would tell it (`apply::batch::remembered_outcome`); None without
/// a write id or when the id is new.
fn made_before(view: &ReadView, mutation: &Mutation) -> Result<Option<Outcome>, FbError> {
    if mutation.write_id.is_empty() {
        return Ok(None);
    }
    let seen = view.reader.write_id_seen(&mutation.write_id)?;
    Ok(crate::apply::batch::remembered_outcome(seen, &mutation.payload_digest(), view.applied_next))
}

/// Whether the client's own condition holds in `view`, as the apply loop
/// decides it (`apply::tree::hash_matches`: a subtree too large to read
/// fails it).
fn own_condition_holds(view: &ReadView, write: &TreeWrite<'_>) -> Result<bool, FbError> {
    let Some(Condition::IfTreeHash(expected)) = write.condition else { return Ok(true) };
    match value_at(&view.reader, TREE_PK, &write.sk, false, READ_BYTES_MAX) {
        Ok(value) => Ok(etag(&value) == expected),
        Err(TreeError::TooLarge { .. }) => Ok(false),
        Err(TreeError::Store(e)) => Err(FbError::from(e)),
    }
}

fn too_contended(why: &str) -> FbError {
    FbError::new(StatusCode::SERVICE_UNAVAILABLE, format!("The write was not made: {why}; retry"))
}

/// The write id of attempt `attempt`: the request's for the first, one
/// derived from it for each later one (a retry of the same request derives
/// the same), none without one.
fn attempt_write_id(write_id: &Bytes, attempt: u32) -> Bytes {
    if write_id.is_empty() || attempt == 0 {
        return write_id.clone();
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"tern.firebase.rules-attempt");
    hasher.update(&(write_id.len() as u64).to_le_bytes());
    hasher.update(write_id);
    hasher.update(&attempt.to_le_bytes());
    Bytes::copy_from_slice(&hasher.finalize().as_bytes()[..crate::limits::WRITE_ID_BYTES_MAX.min(32)])
}

/// Whether the rules let `caller` write `written` at `sk` (a set, or an
/// update when `merge`), judged against this node's applied tree, for a
/// write that will not carry what the rules read (an onDisconnect write
/// registered now and made later, as Firebase does).
pub(super) fn check_write(
    state: &Firebase,
    namespace: &Namespace,
    caller: &Caller,
    sk: &str,
    written: &Value,
    merge: bool,
    time_ms: u64,
) -> Result<(), FbError> {
    judge(state, namespace, caller, tree_view(namespace)?, sk, written, merge, time_ms).map(|_| ())
}

/// As `check_write`, judged in `view`, returning what the rules read
/// (empty when no rules apply to `caller`): each location read once, none
/// under another, hashed in the same view.
#[allow(clippy::too_many_arguments)]
fn judge(
    state: &Firebase,
    namespace: &Namespace,
    caller: &Caller,
    view: Arc<ReadView>,
    sk: &str,
    written: &Value,
    merge: bool,
    time_ms: u64,
) -> Result<Vec<TreeRead>, FbError> {
    let Some(auth) = caller.rules_auth() else { return Ok(Vec::new()) };
    let rules = state.db.rules_of(namespace)?;
    let data = Recorded { tree: TreeData { view }, read: Default::default() };
    let writes = writes_for_rules(sk, written, merge, time_ms, &data);
    if !rules.can_write(&writes, auth, time_ms, &data) {
        return Err(FbError::denied());
    }
    let read = outermost(data.read.into_inner());
    if read.len() > crate::limits::MUTATION_READS_MAX {
        return Err(FbError::bad(format!(
            "The rules read {} locations for this write; at most {} may be read (send smaller updates)",
            read.len(),
            crate::limits::MUTATION_READS_MAX
        )));
    }
    let reader = &data.tree.view.reader;
    read.into_iter()
        .map(|sk| {
            let value = crate::store::tree::read_for_rules(reader, TREE_PK, &sk)?;
            Ok(TreeRead { pk: TREE_PK.into(), hash: etag(&value), sk })
        })
        .collect::<Result<_, crate::store::StoreError>>()
        .map_err(FbError::from)
}

/// The tree as rules read it, noting every location they read.
struct Recorded {
    tree: TreeData,
    read: std::cell::RefCell<std::collections::BTreeSet<String>>,
}

impl Data for Recorded {
    fn current(&self, sk: &str) -> Value {
        self.read.borrow_mut().insert(sk.to_string());
        self.tree.current(sk)
    }
    fn priority(&self, sk: &str) -> Value {
        // A read at `sk` hashes its priority too (`read_for_rules`).
        self.read.borrow_mut().insert(sk.to_string());
        self.tree.priority(sk)
    }
}

/// The locations of `read` not under another of them (a change below a
/// location changes its hash): sorted, an ancestor comes before its
/// descendants.
fn outermost(read: std::collections::BTreeSet<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for sk in read {
        if kept.iter().any(|ancestor| ancestor.is_empty() || sk == *ancestor || path::is_under(&sk, ancestor)) {
            continue;
        }
        kept.push(sk);
    }
    kept
}

/// The write as rules see it: sets at sort keys, server values resolved
/// against this node's state (the apply loop resolves them again, alike on
/// every replica; rules judge the write the client asked for).
fn writes_for_rules(sk: &str, written: &Value, merge: bool, time_ms: u64, data: &dyn Data) -> Vec<(String, Value)> {
    let mut current = |at: &str| Some(data.current(at));
    let mut resolve = |at: &str, value: &Value| {
        let mut v = value.clone();
        resolve_server_values(at, &mut v, time_ms, &mut current);
        v
    };
    if merge {
        written
            .as_object()
            .expect("validated")
            .iter()
            .map(|(key, value)| {
                let at = path::join(sk, &path::sk_of(&path::parse_relative(key).expect("validated")));
                let v = resolve(&at, value);
                (at, v)
            })
            .collect()
    } else {
        vec![(sk.to_string(), resolve(sk, written))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_outermost_locations_are_kept() {
        let read = |sks: &[&str]| outermost(sks.iter().map(|s| s.to_string()).collect());
        assert_eq!(read(&["a/b", "a", "a/b/c", "ab", "b/c"]), ["a", "ab", "b/c"]);
        assert_eq!(read(&["x", "", "y/z"]), [""]);
        assert_eq!(read(&[]), Vec::<String>::new());
    }

    #[test]
    fn each_attempt_has_its_own_write_id_and_a_retry_derives_the_same() {
        let id = Bytes::from_static(b"client-key");
        assert_eq!(attempt_write_id(&id, 0), id);
        assert_ne!(attempt_write_id(&id, 1), attempt_write_id(&id, 2));
        assert_eq!(attempt_write_id(&id, 3), attempt_write_id(&Bytes::from_static(b"client-key"), 3));
        assert!(attempt_write_id(&id, 1).len() <= crate::limits::WRITE_ID_BYTES_MAX);
        assert!(attempt_write_id(&Bytes::new(), 5).is_empty(), "no id stays no id");
    }
}
