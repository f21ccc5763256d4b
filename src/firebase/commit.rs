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
//! the outcome is the one a serial database would reach.
//!
//! What counts as read: every location whose current data the rules looked
//! at (`data`, `root`, the current data under `newData`), and a server
//! value's location (an increment resolves against the current value) only
//! where the rules looked at new data there. A location no key can name (a
//! path too long, a key with a forbidden character) holds nothing ever, so
//! it is not recorded.
//!
//! Bounds: at most `ATTEMPTS_MAX` attempts per write, all within the
//! write's own wait; from the second attempt on, retries of one database
//! take turns (`Databases::retry_turn`), so a hot location makes progress
//! instead of livelocking; the reads of one write cost at most
//! `limits::MUTATION_READ_BYTES_MAX` bytes (else 400: every replica pays
//! them again).
//!
//! A write whose rules read nothing (an admin's, `auth != null` without
//! server values) carries no reads and is never retried. Each attempt has
//! its own write id (`node::attempt_ids`), so a client's retry of the whole
//! request is answered by the attempt that applied, before any rule is
//! judged again.
//!
//! What a caller learns: a client's own condition (`if-match`, a
//! transaction's hash) that fails is told as such (412, `datastale`) only
//! to a caller the rules let read the location or write there; any other
//! caller is denied as the rules deny it.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use super::caller::Caller;
use super::db::tree_view;
use super::error::FbError;
use super::state::Firebase;
use crate::codec::{now_ms, Condition, Mutation, Op, OpKind, TreeOp, TreeRead};
use crate::firebase::rules::eval::Data;
use crate::node::attempt_ids::{attempt_write_id, ATTEMPT_IDS_MAX};
use crate::node::reserved::Writer;
use crate::node::write::{Entry, Receipt, WriteError, WriteRequest};
use crate::partition::outcome::{Outcome, READS_CHANGED};
use crate::partition::{Namespace, ReadView};
use crate::store::tree::{value_at, TreeError, READ_BYTES_MAX};
use crate::tree::path;
use crate::tree::value::resolve_server_values;
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
    /// How long the write may take in all: every attempt, every turn.
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
    let deadline = Instant::now() + write.wait;
    let partition = namespace.partition_of(TREE_PK);
    let digest = mutation_of(&write, 0, 0).payload_digest();
    let first = match earlier_attempts(&*tree_view(namespace)?, &write, &digest)? {
        Earlier::Answered(answer) => return answer,
        Earlier::NextAttempt(first) => first,
    };
    let last = first.saturating_add(ATTEMPTS_MAX).min(ATTEMPT_IDS_MAX);
    for attempt in first..last {
        let _turn = match attempt == first {
            true => None,
            false => Some(
                tokio::time::timeout_at(deadline, state.db.retry_turn(&namespace.name))
                    .await
                    .map_err(|_| too_contended("its turn to write again did not come within the time the write may take"))?,
            ),
        };
        let time_ms = now_ms();
        let view = tree_view(namespace)?;
        let reads = match judge(state, namespace, caller, &view, &write, time_ms, Record::Reads)? {
            Verdict::Allowed(reads) => reads,
            // Denied on a value the client's own condition no longer
            // matches: the condition's answer (a transaction runs again on
            // the newer value) — to a caller allowed to see it.
            Verdict::Denied if !own_condition_holds(&view, &write)? && may_read(state, namespace, caller, &view, &write.sk)? => {
                return Ok(Committed::ConditionFailed);
            }
            Verdict::Denied => return Err(FbError::denied()),
        };
        let mut mutation = mutation_of(&write, attempt, time_ms);
        mutation.reads = reads;
        let wait = deadline.saturating_duration_since(Instant::now());
        let request = WriteRequest::new(Writer::FirebaseTree, partition, Entry::Mutation(mutation)).applied_within(wait);
        match state.app.node.write(namespace, request).await {
            Ok(Receipt::Sequenced { version, .. }) => return Ok(Committed::Applied { version }),
            Ok(Receipt::Journaled { .. }) => unreachable!("a write that waits to be applied is sequenced"),
            Ok(Receipt::Forward { .. }) => return Ok(Committed::Forward),
            Err(WriteError::ConditionFailed { op_index: READS_CHANGED, .. }) => continue,
            Err(WriteError::ConditionFailed { .. }) => return Ok(Committed::ConditionFailed),
            Err(e) => return Err(FbError::from(e)),
        }
    }
    Err(too_contended(&format!("the data its rules read changed {} times while it was written", last - first)))
}

/// The mutation of attempt `attempt` (its write id) at the writer's
/// clock `time_ms`, without reads. Its payload digest is the same for
/// every attempt (`Mutation::payload_digest` covers neither).
fn mutation_of(write: &TreeWrite<'_>, attempt: u32, time_ms: u64) -> Mutation {
    let op = Op {
        pk: TREE_PK.into(),
        sk: write.sk.clone(),
        kind: OpKind::Tree(TreeOp { merge: write.merge, value: write.value.clone(), time_ms }),
        condition: write.condition,
    };
    Mutation { write_id: attempt_write_id(&write.write_id, attempt), ops: vec![op], ..Default::default() }
}

/// What a request's earlier attempts (a retry of the whole request) say.
enum Earlier {
    /// One of them applied, failed its own condition, or the key was
    /// reused for another write: that is the answer.
    Answered(Result<Committed, FbError>),
    /// None decided it: attempts go on from this one (the first whose id
    /// was never applied).
    NextAttempt(u32),
}

/// Looks up every attempt id of the request as the apply loop remembers
/// it (`apply::batch::remembered_outcome`): all of them, not only up to the
/// first unknown, since ids are forgotten oldest first.
fn earlier_attempts(view: &ReadView, write: &TreeWrite<'_>, digest: &[u8; crate::codec::PAYLOAD_DIGEST_BYTES]) -> Result<Earlier, FbError> {
    if write.write_id.is_empty() {
        return Ok(Earlier::NextAttempt(0));
    }
    let mut next = 0;
    for attempt in 0..ATTEMPT_IDS_MAX {
        let seen = view.reader.write_id_seen(&attempt_write_id(&write.write_id, attempt))?;
        match crate::apply::batch::remembered_outcome(seen, digest, view.applied_next) {
            None => {}
            Some(Outcome::Duplicate { original, .. }) if matches!(*original, Outcome::ConditionFailed { op_index: READS_CHANGED, .. }) => {
                next = attempt + 1;
            }
            Some(Outcome::Duplicate { original, .. }) if matches!(*original, Outcome::ConditionFailed { .. }) => {
                return Ok(Earlier::Answered(Ok(Committed::ConditionFailed)));
            }
            Some(Outcome::Duplicate { of, .. }) => return Ok(Earlier::Answered(Ok(Committed::Applied { version: of }))),
            Some(Outcome::KeyReused { of }) => return Ok(Earlier::Answered(Err(FbError::from(WriteError::KeyReused { of })))),
            Some(other) => unreachable!("a remembered write id meets a duplicate or a reused key, not {other:?}"),
        }
    }
    if next >= ATTEMPT_IDS_MAX {
        return Ok(Earlier::Answered(Err(too_contended(&format!(
            "this Idempotency-Key's {ATTEMPT_IDS_MAX} attempts all met changed data; send it with a new key"
        )))));
    }
    Ok(Earlier::NextAttempt(next))
}

/// Whether the client's own condition holds in `view`, as the apply loop
/// decides it (`store::tree::hash_matches`).
fn own_condition_holds(view: &ReadView, write: &TreeWrite<'_>) -> Result<bool, FbError> {
    let Some(Condition::IfTreeHash(expected)) = write.condition else { return Ok(true) };
    Ok(crate::store::tree::hash_matches(&view.reader, TREE_PK, &write.sk, &expected)?)
}

/// Whether `caller` may learn that a client's own condition on `write`
/// failed (412 and the value, `datastale`): the rules let it read the
/// location, or write there.
pub(super) fn may_learn_condition(state: &Firebase, namespace: &Namespace, caller: &Caller, write: &TreeWrite<'_>) -> Result<bool, FbError> {
    let view = tree_view(namespace)?;
    if may_read(state, namespace, caller, &view, &write.sk)? {
        return Ok(true);
    }
    Ok(matches!(judge(state, namespace, caller, &view, write, now_ms(), Record::Nothing)?, Verdict::Allowed(_)))
}

/// Whether the rules let `caller` read `sk` (always, without rules).
pub(super) fn may_read(state: &Firebase, namespace: &Namespace, caller: &Caller, view: &Arc<ReadView>, sk: &str) -> Result<bool, FbError> {
    let Some(auth) = caller.rules_auth() else { return Ok(true) };
    let data = super::db::TreeData { view: view.clone() };
    Ok(state.db.rules_of(namespace)?.can_read(sk, auth, now_ms(), &data))
}

fn too_contended(why: &str) -> FbError {
    FbError::new(StatusCode::SERVICE_UNAVAILABLE, format!("The write was not made: {why}; retry"))
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
    let write = TreeWrite { sk: sk.to_string(), value: Bytes::new(), written, merge, condition: None, write_id: Bytes::new(), wait: Duration::ZERO };
    match judge(state, namespace, caller, &tree_view(namespace)?, &write, time_ms, Record::Nothing)? {
        Verdict::Allowed(_) => Ok(()),
        Verdict::Denied => Err(FbError::denied()),
    }
}

/// What the rules said of a write.
enum Verdict {
    /// Allowed, having read these (each once, hashed in the judged view).
    Allowed(Vec<TreeRead>),
    Denied,
}

/// Whether `judge` hashes what the rules read (for a write that carries it).
#[derive(PartialEq)]
enum Record {
    Reads,
    Nothing,
}

/// Judges `write` by the rules in `view` (allowed with no reads when no
/// rules apply to `caller`).
fn judge(
    state: &Firebase,
    namespace: &Namespace,
    caller: &Caller,
    view: &Arc<ReadView>,
    write: &TreeWrite<'_>,
    time_ms: u64,
    record: Record,
) -> Result<Verdict, FbError> {
    let Some(auth) = caller.rules_auth() else { return Ok(Verdict::Allowed(Vec::new())) };
    let rules = state.db.rules_of(namespace)?;
    let data = Recorded { view: view.clone(), read: RefCell::default(), failed: RefCell::default() };
    let (writes, resolved_at) = writes_for_rules(&write.sk, write.written, write.merge, time_ms, view);
    let (allowed, new_read) = rules.can_write_reading(&writes, auth, time_ms, &data);
    if let Some(e) = data.failed.into_inner() {
        // A verdict on a location that could not be read is no verdict.
        return Err(FbError::from(e));
    }
    if !allowed {
        return Ok(Verdict::Denied);
    }
    if record == Record::Nothing {
        return Ok(Verdict::Allowed(Vec::new()));
    }
    let mut read = data.read.into_inner();
    // A server value resolved against the current value counts where the
    // rules looked at the new data that holds it.
    for at in resolved_at {
        if new_read.iter().any(|seen| *seen == at || path::is_under(seen, &at) || path::is_under(&at, seen)) {
            read.insert(at);
        }
    }
    hashed(view, read).map(Verdict::Allowed)
}

/// `read` hashed in `view` (`store::tree::hash_for_rules`): the locations a
/// key can name, within the bounds the apply loop checks.
fn hashed(view: &ReadView, read: BTreeSet<String>) -> Result<Vec<TreeRead>, FbError> {
    let read: Vec<String> = read.into_iter().filter(|sk| nameable(sk)).collect();
    if read.len() > crate::limits::MUTATION_READS_MAX {
        return Err(FbError::bad(format!(
            "The rules read {} locations for this write; at most {} may be read (send smaller updates)",
            read.len(),
            crate::limits::MUTATION_READS_MAX
        )));
    }
    let mut cost_bytes = 0usize;
    let mut reads = Vec::with_capacity(read.len());
    for sk in read {
        let (hash, cost) = crate::store::tree::hash_for_rules(&view.reader, TREE_PK, &sk)?;
        cost_bytes = cost_bytes.saturating_add(cost);
        if cost_bytes > crate::limits::MUTATION_READ_BYTES_MAX {
            return Err(FbError::bad(format!(
                "The rules read more than {} bytes of data for this write; every replica reads them again, so at most that much may be read",
                crate::limits::MUTATION_READ_BYTES_MAX
            )));
        }
        reads.push(TreeRead { pk: TREE_PK.into(), sk, hash });
    }
    Ok(reads)
}

/// Whether a key can name `sk` (else nothing is ever stored there, and
/// the entry's decoder would refuse it: `codec::decode_reads`).
fn nameable(sk: &str) -> bool {
    sk.len() <= crate::limits::SK_BYTES_MAX && path::keys_of(sk).iter().all(|key| path::check_key(key).is_ok())
}

/// The tree as rules read it, noting every location they read, and the
/// first location that could not be read.
struct Recorded {
    view: Arc<ReadView>,
    read: RefCell<BTreeSet<String>>,
    failed: RefCell<Option<crate::store::StoreError>>,
}

impl Recorded {
    fn fail(&self, e: crate::store::StoreError) -> Value {
        self.failed.borrow_mut().get_or_insert(e);
        Value::Null
    }
}

impl Data for Recorded {
    fn current(&self, sk: &str) -> Value {
        self.read.borrow_mut().insert(sk.to_string());
        match value_at(&self.view.reader, TREE_PK, sk, false, READ_BYTES_MAX) {
            Ok(value) => value,
            Err(TreeError::TooLarge { .. }) => Value::Null,
            Err(TreeError::Store(e)) => self.fail(e),
        }
    }
    fn priority(&self, sk: &str) -> Value {
        // A read at `sk` hashes its priority too (`hash_for_rules`).
        self.read.borrow_mut().insert(sk.to_string());
        match self.view.reader.get(TREE_PK, &path::join(sk, path::PRIORITY_KEY)) {
            Ok(leaf) => leaf.and_then(|record| serde_json::from_slice(&record.value).ok()).unwrap_or(Value::Null),
            Err(e) => self.fail(e),
        }
    }
}

/// The write as rules see it: sets at sort keys, server values resolved
/// against `view` (the apply loop resolves them again, alike on every
/// replica; rules judge the write the client asked for); and the locations
/// whose current value a server value was resolved against.
fn writes_for_rules(sk: &str, written: &Value, merge: bool, time_ms: u64, view: &ReadView) -> (Vec<(String, Value)>, Vec<String>) {
    let mut resolved_at = Vec::new();
    let mut current = |at: &str| {
        resolved_at.push(at.to_string());
        value_at(&view.reader, TREE_PK, at, false, READ_BYTES_MAX).ok()
    };
    let mut resolve = |at: &str, value: &Value| {
        let mut v = value.clone();
        resolve_server_values(at, &mut v, time_ms, &mut current);
        v
    };
    let writes = if merge {
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
    };
    (writes, resolved_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_locations_a_key_can_name_are_recorded() {
        assert!(nameable(""));
        assert!(nameable("rooms/r1/members"));
        assert!(!nameable("a/.b"), "a key with a dot");
        assert!(!nameable("a//b"), "an empty key");
        assert!(nameable(&format!("{}k", "k/".repeat(511))), "1,023 bytes");
        assert!(!nameable(&format!("{}kk", "k/".repeat(512))), "longer than a sort key may be");
    }
}
