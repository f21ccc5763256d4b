//! Applying log entries to a store: the deterministic heart of Tern.
//!
//! Given the same store state and the same entries, every replica makes the
//! same decisions: entries are decoded and validated by `codec::decode` (a
//! pure function), conditions are checked against the state before the
//! mutation, and a record's version is the offset of the entry that wrote it.
//!
//! Semantics of one mutation:
//! - every op's condition is evaluated against the state *before* the
//!   mutation; if any fails, nothing is applied (`ConditionFailed` names the
//!   first failing op and its current version);
//! - otherwise ops apply in order (a later op on the same key wins);
//! - a mutation with a non-empty write id that an entry less than
//!   `WRITE_ID_WINDOW_OFFSETS` offsets earlier already carried is a
//!   duplicate (a retried write): nothing is applied and its outcome is the
//!   original's. The window counts offsets, not time, so every replica
//!   decides alike; the ids are stored with the records, so the memory
//!   survives restarts. Only writes that carry an id pay for it (Tern's API
//!   sets one from the `Idempotency-Key` header).

use crate::codec::{self, Condition, Mutation, OpKind};
use crate::log::LogRecord;
use crate::partition::outcome::READS_CHANGED;
use crate::partition::Outcome;
use crate::procedure::log_time::EntryTime;
use crate::procedure::Procedures;
use crate::store::{ApplyTxn, StoreError};

/// Most outbox messages one tick deletes (a bounded transaction); the
/// publisher's next tick trims the rest.
const OUTBOX_TRIMMED_PER_TICK_MAX: usize = 50_000;
/// How far back (in offsets of one partition) a write id is remembered.
pub(crate) const WRITE_ID_WINDOW_OFFSETS: u64 = 1_000_000;
/// Most expired write ids forgotten per applied entry: eviction keeps pace
/// with arrivals without ever making one batch long.
const WRITE_IDS_FORGOTTEN_PER_ENTRY_MAX: usize = 2;

/// Applies `entries` (in increasing offset order, starting at or after the
/// store's `applied_next`) inside `tx`, returning each outcome. Offsets may
/// skip (Kafka transaction markers occupy offsets) but never repeat.
///
/// `on_applied(offset, mutation)` sees every mutation that applied, in order,
/// with the record writes its procedures made appended (and those of
/// procedures run by a source record or a tick alone): watches encode
/// their events from it, decoded once, here. A
/// mutation that decoded but did not apply is recorded in the store
/// (`record_not_applied`), so a watch replaying the log later skips it
/// exactly as this loop did.
#[cfg(test)]
pub(crate) fn apply_entries(
    tx: &mut ApplyTxn,
    entries: &[LogRecord],
    partition: u32,
    partitions: u32,
    on_applied: &mut dyn FnMut(u64, &Mutation),
) -> Result<Vec<(u64, Outcome)>, StoreError> {
    apply_entries_with(tx, entries, partition, partitions, &mut Procedures::new("", partition), on_applied)
}

/// As `apply_entries`, running the partition's `procedures` (kept in step
/// with the store by their caller, the apply loop) after every entry that
/// applied, in the same transaction (`procedure/mod.rs`).
pub(crate) fn apply_entries_with(
    tx: &mut ApplyTxn,
    entries: &[LogRecord],
    partition: u32,
    partitions: u32,
    procedures: &mut Procedures,
    on_applied: &mut dyn FnMut(u64, &Mutation),
) -> Result<Vec<(u64, Outcome)>, StoreError> {
    procedures.sync(tx)?;
    let mut outcomes = Vec::with_capacity(entries.len());
    for entry in entries {
        assert!(
            entry.offset >= tx.state().applied_next,
            "entry {} is below applied_next {}: it would be applied twice",
            entry.offset,
            tx.state().applied_next
        );
        // A source topic's own record is never decoded as a mutation: it is
        // an input to the procedures (none deployed: it changes nothing).
        if let Some(foreign) = &entry.foreign {
            let time = EntryTime::of(foreign.timestamp_ms, entry.appended_ms);
            procedures.on_foreign(tx, entry.offset, &entry.payload, foreign, time)?;
            report_applied(entry.offset, None, procedures, on_applied);
            mark_applied(tx, entry.offset, Outcome::Applied, &mut outcomes)?;
            continue;
        }
        let outcome = match codec::decode_timed(entry.payload.clone(), partition, partitions) {
            Err(malformed) => Outcome::Skipped(malformed),
            Ok((mutation, time_ms)) if is_deployment(&mutation) => {
                deploy(tx, procedures, entry.offset, EntryTime::of(time_ms, entry.appended_ms), &mutation)?
            }
            // A tick (the only mutation without ops): log time moves, timers
            // fire, and the outbox is trimmed below what it says is published.
            Ok((mutation, time_ms)) if mutation.ops.is_empty() => {
                procedures.on_tick(tx, entry.offset, EntryTime::of(time_ms, entry.appended_ms))?;
                report_applied(entry.offset, None, procedures, on_applied);
                let published_below = codec::outbox_published_below(&entry.payload);
                if published_below > 0 {
                    tx.trim_outbox_below(published_below, OUTBOX_TRIMMED_PER_TICK_MAX)?;
                }
                Outcome::Applied
            }
            Ok((mutation, time_ms)) => {
                let (outcome, resolved) = match &mutation.journal {
                    Some(place) => apply_in_lane(tx, &mutation, place, entry.offset)?,
                    None if mutation.write_id.is_empty() => apply_mutation(tx, &mutation, entry.offset)?,
                    None => apply_once(tx, &mutation, entry.offset)?,
                };
                match outcome {
                    Outcome::Applied => {
                        note_versions(tx, &mutation, entry.offset, if time_ms > 0 { time_ms } else { entry.appended_ms.unwrap_or(0) });
                        // Subscribers and procedures see tree ops as applied: server values resolved.
                        let applied = resolved.as_ref().unwrap_or(&mutation);
                        procedures.on_applied(tx, entry.offset, EntryTime::of(time_ms, entry.appended_ms), applied)?;
                        report_applied(entry.offset, Some(applied), procedures, on_applied);
                    }
                    _ => tx.record_not_applied(entry.offset)?,
                }
                outcome
            }
        };
        mark_applied(tx, entry.offset, outcome, &mut outcomes)?;
    }
    Ok(outcomes)
}

/// Notes the record versions an applied mutation made for their history
/// (`store::history`), as many kept as it says (`history_max`; none said:
/// left as it is). Tern's own records (pks starting with `.`: Firebase
/// trees, settings) keep none.
fn note_versions(tx: &mut ApplyTxn, mutation: &Mutation, offset: u64, time_ms: u64) {
    let Some(keep) = mutation.history_max else { return };
    for op in mutation.ops.iter().filter(|op| !op.pk.starts_with('.')) {
        match &op.kind {
            OpKind::Put(value) => tx.note_version(&op.pk, &op.sk, offset, time_ms, &mutation.writer, Some(value), keep),
            OpKind::Delete => tx.note_version(&op.pk, &op.sk, offset, time_ms, &mutation.writer, None, keep),
            OpKind::Tree(_) | OpKind::Procedure(_) => {}
        }
    }
}

/// Tells `on_applied` what the entry at `offset` did to records: its own
/// ops, then the record writes its procedures made (one mutation: watchers
/// see one entry's changes as one sequence at its offset).
fn report_applied(offset: u64, own: Option<&Mutation>, procedures: &mut Procedures, on_applied: &mut dyn FnMut(u64, &Mutation)) {
    let written = procedures.take_written();
    if written.is_empty() {
        if let Some(own) = own {
            on_applied(offset, own);
        }
        return;
    }
    let mut ops = own.map(|m| m.ops.clone()).unwrap_or_default();
    ops.extend(written.into_iter().map(|w| codec::Op {
        pk: w.pk,
        sk: w.sk,
        kind: match w.value {
            Some(value) => OpKind::Put(bytes::Bytes::from(value)),
            None => OpKind::Delete,
        },
        condition: None,
    }));
    on_applied(offset, &Mutation { ops, ..Default::default() });
}

/// Ends an entry: the store moves past it, expired write ids are forgotten,
/// its outcome is kept.
fn mark_applied(tx: &mut ApplyTxn, offset: u64, outcome: Outcome, outcomes: &mut Vec<(u64, Outcome)>) -> Result<(), StoreError> {
    tx.mark_applied(offset, matches!(outcome, Outcome::Skipped(_)));
    forget_expired(tx)?;
    outcomes.push((offset, outcome));
    Ok(())
}

/// Whether `mutation` deploys a procedure (then it is its only op: `codec::decode`).
fn is_deployment(mutation: &Mutation) -> bool {
    matches!(mutation.ops.first().map(|op| &op.kind), Some(OpKind::Procedure(_)))
}

/// Applies a procedure's deployment: Applied, or Skipped with why the
/// definition was refused (alike on every replica).
fn deploy(tx: &mut ApplyTxn, procedures: &mut Procedures, offset: u64, time: EntryTime, mutation: &Mutation) -> Result<Outcome, StoreError> {
    let op = &mutation.ops[0];
    let OpKind::Procedure(definition) = &op.kind else { unreachable!("is_deployment checked the kind") };
    Ok(match procedures.deploy(tx, offset, time, &op.sk, definition)? {
        Ok(()) => Outcome::Applied,
        Err(reason) => Outcome::Skipped(codec::Malformed::Procedure(reason)),
    })
}

/// Forgets a bounded number of write ids and not-applied marks that fell out
/// of the window, after every entry: per entry, not per batch, so what a
/// store remembers at an offset depends only on the entries up to it (never
/// on how they were batched) and the state hash, which covers it, is equal
/// on every replica at equal offsets.
fn forget_expired(tx: &mut ApplyTxn) -> Result<(), StoreError> {
    if let Some(horizon) = tx.state().applied_next.checked_sub(WRITE_ID_WINDOW_OFFSETS) {
        tx.forget_write_ids_below(horizon, WRITE_IDS_FORGOTTEN_PER_ENTRY_MAX)?;
        tx.forget_not_applied_below(horizon, WRITE_IDS_FORGOTTEN_PER_ENTRY_MAX)?;
    }
    Ok(())
}

/// Applies a mutation that carries a write id, unless that id was applied
/// within the window: then a retry (the same payload) reports the original
/// outcome, and a reused key (another payload) is refused, never dropped
/// as if it had applied.
fn apply_once(tx: &mut ApplyTxn, mutation: &Mutation, offset: u64) -> Result<(Outcome, Option<Mutation>), StoreError> {
    let digest = mutation.payload_digest();
    if let Some(met) = remembered_outcome(tx.write_id_seen(&mutation.write_id)?, &digest, offset) {
        return Ok((met, None));
    }
    let (outcome, resolved) = apply_mutation(tx, mutation, offset)?;
    tx.remember_write_id(&mutation.write_id, offset, &outcome.encode_remembered_for(&digest))?;
    Ok((outcome, resolved))
}

/// What a mutation with payload `digest` meets at `offset` when its write
/// id was `seen` (offset and stored outcome, as the store remembers it):
/// `Duplicate` with the original's outcome (a retry), `KeyReused` (another
/// payload), or None (never seen, or seen a window ago: a new write). The
/// apply loop's rule; a Firebase holder asks it too before judging a retried
/// write again (`firebase::commit`).
pub(crate) fn remembered_outcome(seen: Option<(u64, Vec<u8>)>, digest: &[u8; codec::PAYLOAD_DIGEST_BYTES], offset: u64) -> Option<Outcome> {
    let (of, stored) = seen?;
    if offset.saturating_sub(of) >= WRITE_ID_WINDOW_OFFSETS {
        return None;
    }
    if Outcome::remembered_digest(&stored).is_some_and(|remembered| remembered != *digest) {
        return Some(Outcome::KeyReused { of });
    }
    let original = Outcome::decode_remembered(&stored).expect("write id outcomes are written by encode_remembered");
    Some(Outcome::Duplicate { of, original: Box::new(original) })
}

/// Applies a journaled write in its journal lane's order, each lane offset
/// once (issue 36; the rule: `JournalPlace::decide`): an offset below the
/// lane's next is a copy of a write applied before; one above it waits for
/// the entries before it (its sequencer appends it again after them),
/// unless they were lost and the loss accepted (its `gap_from`); the next
/// one applies (by its write id, if it has one) and moves the lane past
/// itself, whatever its own outcome.
fn apply_in_lane(
    tx: &mut ApplyTxn,
    mutation: &Mutation,
    place: &codec::JournalPlace,
    offset: u64,
) -> Result<(Outcome, Option<Mutation>), StoreError> {
    match place.decide(tx.journal_lane_next(&place.lane)?) {
        codec::LaneTurn::Repeated { lane_next } => return Ok((Outcome::JournalRepeated { lane_next }, None)),
        codec::LaneTurn::Ahead { lane_next } => return Ok((Outcome::JournalAhead { lane_next }, None)),
        codec::LaneTurn::Next => {}
    }
    let applied = match mutation.write_id.is_empty() {
        true => apply_mutation(tx, mutation, offset)?,
        false => apply_once(tx, mutation, offset)?,
    };
    tx.set_journal_lane_next(&place.lane, place.offset + 1, offset)?;
    Ok(applied)
}

/// Applies one mutation: all conditions first, then what its writer's
/// rules read (a client's own condition that fails is the answer, whatever
/// the rules would say now), then every op. Returns the outcome and, when
/// it has tree ops, the mutation as applied (server values resolved) for
/// watches.
fn apply_mutation(tx: &mut ApplyTxn, mutation: &Mutation, offset: u64) -> Result<(Outcome, Option<Mutation>), StoreError> {
    for (op_index, op) in mutation.ops.iter().enumerate() {
        let Some(condition) = op.condition else { continue };
        let holds = match condition {
            Condition::IfTreeHash(hash) => crate::store::tree::hash_matches(tx, &op.pk, &op.sk, &hash)?,
            _ => {
                let current_version = tx.version_of(&op.pk, &op.sk)?;
                if !condition_holds(condition, current_version) {
                    return Ok((Outcome::ConditionFailed { op_index, current_version }, None));
                }
                true
            }
        };
        if !holds {
            return Ok((Outcome::ConditionFailed { op_index, current_version: None }, None));
        }
    }
    if !super::tree::reads_unchanged(tx, &mutation.reads)? {
        return Ok((Outcome::ConditionFailed { op_index: READS_CHANGED, current_version: None }, None));
    }
    let mut resolved: Option<Mutation> = None;
    for (i, op) in mutation.ops.iter().enumerate() {
        match &op.kind {
            OpKind::Put(value) => tx.put(&op.pk, &op.sk, offset, value)?,
            OpKind::Delete => tx.delete(&op.pk, &op.sk)?,
            OpKind::Procedure(_) => unreachable!("deployments are applied by deploy"),
            OpKind::Tree(tree_op) => {
                let applied = super::tree::apply_op(tx, &op.pk, &op.sk, tree_op, offset)?;
                let copy = resolved.get_or_insert_with(|| mutation.clone());
                copy.ops[i].kind = OpKind::Tree(crate::codec::TreeOp {
                    merge: tree_op.merge,
                    value: bytes::Bytes::from(applied.to_string()),
                    time_ms: tree_op.time_ms,
                });
            }
        }
    }
    Ok((Outcome::Applied, resolved))
}

/// Whether a record condition holds (tree conditions: `store::tree::hash_matches`).
pub(crate) fn condition_holds(condition: Condition, current_version: Option<u64>) -> bool {
    match condition {
        Condition::IfVersion(expected) => current_version == Some(expected),
        Condition::IfAbsent => current_version.is_none(),
        Condition::IfTreeHash(_) => unreachable!("tree conditions are checked by hash_matches"),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::codec::{encode, Op};
    use crate::store::PartitionStore;

    fn put(pk: &str, sk: &str, value: &'static str, condition: Option<Condition>) -> Op {
        Op { pk: pk.into(), sk: sk.into(), kind: OpKind::Put(Bytes::from_static(value.as_bytes())), condition }
    }

    fn entry(offset: u64, ops: Vec<Op>) -> LogRecord {
        entry_with_id(offset, b"", ops)
    }

    fn entry_with_id(offset: u64, write_id: &'static [u8], ops: Vec<Op>) -> LogRecord {
        LogRecord::entry(offset, Bytes::from(encode(&Mutation { write_id: Bytes::from_static(write_id), ops, ..Default::default() })))
    }

    #[test]
    fn a_write_id_applies_once_within_the_window_and_reports_the_original_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        let window = WRITE_ID_WINDOW_OFFSETS;
        let entries = vec![
            entry_with_id(0, b"retry-me", vec![put("k", "", "1", None)]),
            entry_with_id(1, b"retry-me", vec![put("k", "", "1", None)]),
            entry_with_id(2, b"cas", vec![put("k", "", "3", Some(Condition::IfVersion(7)))]),
            entry_with_id(3, b"cas", vec![put("k", "", "3", Some(Condition::IfVersion(7)))]),
            // The same key for another payload (another value, another condition): refused, not a retry.
            entry_with_id(4, b"retry-me", vec![put("k", "", "2", None)]),
            entry_with_id(5, b"cas", vec![put("k", "", "3", Some(Condition::IfVersion(0)))]),
            // Same id, beyond the window: a new write.
            entry_with_id(window, b"retry-me", vec![put("k", "", "4", None)]),
            entry_with_id(window + 1, b"retry-me", vec![put("k", "", "4", None)]),
        ];
        let outcomes = store.apply(false, |tx| apply_entries(tx, &entries, 0, 1, &mut |_, _| {})).unwrap();
        let failed = Outcome::ConditionFailed { op_index: 0, current_version: Some(0) };
        assert_eq!(outcomes[0].1, Outcome::Applied);
        assert_eq!(outcomes[1].1, Outcome::Duplicate { of: 0, original: Box::new(Outcome::Applied) });
        assert_eq!(outcomes[2].1, failed);
        assert_eq!(outcomes[3].1, Outcome::Duplicate { of: 2, original: Box::new(failed) });
        assert_eq!(outcomes[4].1, Outcome::KeyReused { of: 0 });
        assert_eq!(outcomes[5].1, Outcome::KeyReused { of: 2 });
        assert_eq!(outcomes[6].1, Outcome::Applied);
        assert_eq!(outcomes[7].1, Outcome::Duplicate { of: window, original: Box::new(Outcome::Applied) });
        let record = store.read().unwrap().get("k", "").unwrap().unwrap();
        assert_eq!((record.version, record.value.as_slice()), (window, &b"4"[..]));
        // "cas" (offset 2) is still inside the window of offset window + 1.
        let seen = |id: &'static [u8]| store.apply(false, |tx| Ok(tx.write_id_seen(id)?.map(|(at, _)| at))).unwrap();
        assert_eq!((seen(b"cas"), seen(b"retry-me")), (Some(2), Some(window)));
        // Once the partition moves a window past them, both are forgotten.
        let later = vec![entry(2 * window + 10, vec![put("other", "", "1", None)])];
        store.apply(false, |tx| apply_entries(tx, &later, 0, 1, &mut |_, _| {})).unwrap();
        assert_eq!((seen(b"cas"), seen(b"retry-me")), (None, None));
    }

    #[test]
    fn mutations_that_did_not_apply_are_recorded_for_replay_and_forgotten_past_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        let entries = vec![
            entry(0, vec![put("k", "", "1", None)]),
            entry(1, vec![put("k", "", "2", Some(Condition::IfAbsent))]),
            entry_with_id(2, b"once", vec![put("k", "", "3", None)]),
            entry_with_id(3, b"once", vec![put("k", "", "4", None)]),
            LogRecord::entry(4, Bytes::from_static(b"garbage")),
        ];
        let mut applied = Vec::new();
        store.apply(false, |tx| apply_entries(tx, &entries, 0, 1, &mut |offset, _| applied.push(offset))).unwrap();
        assert_eq!(applied, vec![0, 2], "only what applied reaches watches");
        let reader = store.read().unwrap();
        assert_eq!(reader.not_applied_from().unwrap(), 0);
        // The failed condition and the duplicate; the malformed entry decodes alike on replay.
        assert_eq!(reader.not_applied_in(0, 10).unwrap().into_iter().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(reader.not_applied_in(2, 3).unwrap().len(), 0);
        let later = vec![entry(WRITE_ID_WINDOW_OFFSETS + 10, vec![put("other", "", "1", None)])];
        store.apply(false, |tx| apply_entries(tx, &later, 0, 1, &mut |_, _| {})).unwrap();
        assert!(store.read().unwrap().not_applied_in(0, 10).unwrap().is_empty(), "forgotten past the window");
    }

    /// Issue 36, defect 8: a mutation applies only if every location its
    /// writer's rules read still reads as recorded (priorities included),
    /// checked before any op; a refusal is remembered under its write id.
    #[test]
    fn a_mutation_applies_only_if_what_its_rules_read_is_unchanged() {
        use crate::codec::{TreeOp, TreeRead};
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        let set = |sk: &str, value: &str| Op {
            pk: "t".into(),
            sk: sk.into(),
            kind: OpKind::Tree(TreeOp { merge: false, value: Bytes::from(value.to_string()), time_ms: 0 }),
            condition: None,
        };
        let hash_now = |sk: &str| crate::store::tree::hash_for_rules(&store.read().unwrap(), "t", sk).unwrap().0;
        let with_reads = |offset: u64, write_id: &'static [u8], op: Op, reads: Vec<TreeRead>| {
            LogRecord::entry(
                offset,
                Bytes::from(encode(&Mutation { write_id: Bytes::from_static(write_id), ops: vec![op], reads, ..Default::default() })),
            )
        };
        let apply = |entries: Vec<LogRecord>| store.apply(false, |tx| apply_entries(tx, &entries, 0, 1, &mut |_, _| {})).unwrap();
        apply(vec![LogRecord::entry(0, Bytes::from(encode(&Mutation { ops: vec![set("room", r#"{"a": 1}"#)], ..Default::default() })))]);
        let room_then = TreeRead { pk: "t".into(), sk: "room".into(), hash: hash_now("room") };
        let absent_then = TreeRead { pk: "t".into(), sk: "claim".into(), hash: hash_now("claim") };
        let changed = Outcome::ConditionFailed { op_index: READS_CHANGED, current_version: None };
        let outcomes = apply(vec![
            // Unchanged: applies.
            with_reads(1, b"", set("room/b", "2"), vec![room_then.clone()]),
            // The same read, now stale (offset 1 changed the room): nothing applied.
            with_reads(2, b"first", set("claim", r#""x""#), vec![absent_then.clone(), room_then.clone()]),
            with_reads(3, b"first", set("claim", r#""x""#), vec![absent_then.clone(), room_then.clone()]),
            with_reads(4, b"", set("claim", r#""y""#), vec![absent_then.clone()]),
            // Now the claim exists: the same read of "absent" is stale.
            with_reads(5, b"", set("claim", r#""z""#), vec![absent_then]),
        ]);
        assert_eq!(
            outcomes.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>(),
            [Outcome::Applied, changed.clone(), Outcome::Duplicate { of: 2, original: Box::new(changed.clone()) }, Outcome::Applied, changed.clone(),]
        );
        let read = |sk: &str| crate::store::tree::value_at(&store.read().unwrap(), "t", sk, false, 1 << 20).unwrap();
        assert_eq!((read("room"), read("claim")), (serde_json::json!({"a": 1, "b": 2}), serde_json::json!("y")));
        // A priority is part of what a read hashes.
        let claim_now = TreeRead { pk: "t".into(), sk: "claim".into(), hash: hash_now("claim") };
        apply(vec![with_reads(6, b"", set("claim", r#"{".value": "y", ".priority": 1}"#), vec![claim_now.clone()])]);
        let outcomes = apply(vec![with_reads(7, b"", set("other", "1"), vec![claim_now])]);
        assert_eq!(outcomes[0].1, changed, "the priority changed");
        // A client's own condition that fails is the answer, before the reads.
        let mut own = set("other", "2");
        own.condition = Some(Condition::IfTreeHash([0; 32]));
        let stale = TreeRead { pk: "t".into(), sk: "claim".into(), hash: [0; 32] };
        let outcomes = apply(vec![with_reads(8, b"", own, vec![stale])]);
        assert_eq!(outcomes[0].1, Outcome::ConditionFailed { op_index: 0, current_version: None });
    }

    #[test]
    fn conditions_decide_deterministically() {
        assert!(condition_holds(Condition::IfAbsent, None));
        assert!(!condition_holds(Condition::IfAbsent, Some(0)));
        assert!(condition_holds(Condition::IfVersion(0), Some(0)));
        assert!(!condition_holds(Condition::IfVersion(0), None));
        assert!(!condition_holds(Condition::IfVersion(1), Some(2)));
    }

    #[test]
    fn batch_is_all_or_nothing_and_versions_are_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        let entries = vec![
            entry(0, vec![put("k", "a", "1", Some(Condition::IfAbsent))]),
            // Second op's condition fails: the first op must not apply either.
            entry(1, vec![put("k", "b", "2", None), put("k", "a", "3", Some(Condition::IfAbsent))]),
            entry(2, vec![put("k", "a", "4", Some(Condition::IfVersion(0)))]),
            LogRecord::entry(3, Bytes::from_static(b"\xff\xff garbage")),
            entry(4, vec![Op { pk: "k".into(), sk: "a".into(), kind: OpKind::Delete, condition: Some(Condition::IfVersion(2)) }]),
        ];
        let outcomes = store.apply(false, |tx| apply_entries(tx, &entries, 0, 1, &mut |_, _| {})).unwrap();
        assert_eq!(outcomes[0].1, Outcome::Applied);
        assert_eq!(outcomes[1].1, Outcome::ConditionFailed { op_index: 1, current_version: Some(0) });
        assert_eq!(outcomes[2].1, Outcome::Applied);
        assert!(matches!(outcomes[3].1, Outcome::Skipped(_)));
        assert_eq!(outcomes[4].1, Outcome::Applied);
        let reader = store.read().unwrap();
        assert!(reader.get("k", "b").unwrap().is_none());
        assert!(reader.get("k", "a").unwrap().is_none());
        let state = reader.state().unwrap();
        assert_eq!((state.applied_next, state.applied_entries, state.skipped_entries), (5, 5, 1));
    }

    #[test]
    fn replay_on_another_replica_gives_identical_hash() {
        let entries: Vec<LogRecord> = (0..50).map(|i| entry(i, vec![put(&format!("k{}", i % 7), &format!("s{}", i % 3), "[1]", None)])).collect();
        let hash_after = |chunks: &[usize]| {
            let dir = tempfile::tempdir().unwrap();
            let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
            let mut start = 0;
            for &len in chunks {
                store.apply(false, |tx| apply_entries(tx, &entries[start..start + len], 0, 1, &mut |_, _| {})).unwrap();
                start += len;
            }
            store.read().unwrap().state().unwrap().state_hash
        };
        assert_eq!(hash_after(&[50]), hash_after(&[1, 10, 39]));
    }

    /// The state hash covers what decides later outcomes (write ids, the
    /// not-applied record), and it is the same however the entries were
    /// batched, also while expired write ids are being forgotten.
    #[test]
    fn write_ids_are_state_hashed_alike_however_entries_are_batched() {
        let window = WRITE_ID_WINDOW_OFFSETS;
        let ids: Vec<&'static [u8]> = vec![b"a", b"b", b"c", b"d", b"e", b"f"];
        let mut entries: Vec<LogRecord> = ids.iter().enumerate().map(|(i, id)| entry_with_id(i as u64, id, vec![put("k", "", "1", None)])).collect();
        // Past the window: each entry forgets at most two expired ids.
        entries.extend((0..4).map(|i| entry(window + 10 + i, vec![put("k", "", "2", None)])));
        let state_after = |chunks: &[usize]| {
            let dir = tempfile::tempdir().unwrap();
            let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
            let mut start = 0;
            for &len in chunks {
                store.apply(false, |tx| apply_entries(tx, &entries[start..start + len], 0, 1, &mut |_, _| {})).unwrap();
                start += len;
            }
            let remembered = store.apply(false, |tx| Ok(ids.iter().filter(|id| tx.write_id_seen(id).unwrap().is_some()).count())).unwrap();
            (store.read().unwrap().state().unwrap().state_hash, remembered)
        };
        let (one_batch, remembered) = state_after(&[10]);
        assert_eq!(remembered, 0, "four entries past the window forget up to eight ids");
        assert_eq!(state_after(&[7, 1, 2]), (one_batch, 0));
        assert_eq!(state_after(&[6, 1]).1, 4, "one entry past the window forgets two");
        // Batched with the ids it expires or not, the entry forgets the same two.
        assert_eq!(state_after(&[7]), state_after(&[6, 1]));
        // Two stores with the same records but different remembered ids differ.
        let with_id = |id: &'static [u8]| {
            let dir = tempfile::tempdir().unwrap();
            let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
            store.apply(false, |tx| apply_entries(tx, &[entry_with_id(0, id, vec![put("k", "", "1", None)])], 0, 1, &mut |_, _| {})).unwrap();
            store.read().unwrap().state().unwrap().state_hash
        };
        assert_ne!(with_id(b"x"), with_id(b"y"));
    }

    /// A journaled write as the sequencer appends it: placed in `lane`.
    fn journaled(offset: u64, lane: &'static [u8], at: u64, from: u64, write_id: &'static [u8], value: &'static str) -> LogRecord {
        journaled_after_gap(offset, lane, at, from, None, value, write_id)
    }

    /// As `journaled`, after a lost lane range `gap_from..at` whose loss was accepted.
    fn journaled_after_gap(
        offset: u64,
        lane: &'static [u8],
        at: u64,
        from: u64,
        gap_from: Option<u64>,
        value: &'static str,
        write_id: &'static [u8],
    ) -> LogRecord {
        let place = crate::codec::JournalPlace { lane: Bytes::from_static(lane), offset: at, from, gap_from };
        let mutation =
            Mutation { write_id: Bytes::from_static(write_id), ops: vec![put("k", "", value, None)], journal: Some(place), ..Default::default() };
        LogRecord::entry(offset, Bytes::from(encode(&mutation)))
    }

    fn value_after(entries: &[LogRecord]) -> (Vec<Outcome>, String) {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        let outcomes = store.apply(false, |tx| apply_entries(tx, entries, 0, 1, &mut |_, _| {})).unwrap();
        let value = store.read().unwrap().get("k", "").unwrap().map(|r| String::from_utf8(r.value).unwrap()).unwrap_or_default();
        (outcomes.into_iter().map(|(_, o)| o).collect(), value)
    }

    /// Issue 36, defect 4: the sequencer's first append failed, the two
    /// after it landed, then it was appended again (and the two again).
    /// Applied as they landed, "1" ended last; applied in lane order, "3".
    #[test]
    fn a_lane_applies_in_journal_order_whatever_order_its_copies_land_in() {
        let entries = [
            journaled(0, b"L", 1, 0, b"", "2"),
            journaled(1, b"L", 2, 0, b"", "3"),
            journaled(2, b"L", 0, 0, b"", "1"),
            journaled(3, b"L", 1, 0, b"", "2"),
            journaled(4, b"L", 2, 0, b"", "3"),
            // A copy appended again later (a restart, a claim): once only.
            journaled(5, b"L", 1, 0, b"", "2"),
            // Another lane is its own.
            journaled(6, b"M", 7, 7, b"", "\"m\""),
        ];
        let (outcomes, value) = value_after(&entries[..6]);
        assert_eq!(value, "3");
        let ahead = Outcome::JournalAhead { lane_next: 0 };
        assert_eq!(outcomes[..3], [ahead.clone(), ahead, Outcome::Applied]);
        assert_eq!(outcomes[3..], [Outcome::Applied, Outcome::Applied, Outcome::JournalRepeated { lane_next: 3 }]);
        assert_eq!(value_after(&entries).1, "\"m\"", "a lane seen first starts at its `from`");
    }

    /// Issue 36, defect 6: a copy of a journaled write appended more than
    /// the write-id window after it applied (a claim of a journal whose
    /// object also held a stuck entry) was applied again over newer writes.
    /// Its lane remembers it without a window; the same copy without a
    /// place (as the sequencer appended them before) shows why.
    #[test]
    fn a_journaled_copy_never_applies_twice_however_late() {
        let window = WRITE_ID_WINDOW_OFFSETS;
        let late = window + 100;
        let entries = [
            journaled(0, b"L", 0, 0, b"j1", "\"old\""),
            entry(late - 1, vec![put("k", "", "\"new\"", None)]),
            journaled(late, b"L", 0, 0, b"j1", "\"old\""),
        ];
        let (outcomes, value) = value_after(&entries);
        assert_eq!((outcomes[2].clone(), value.as_str()), (Outcome::JournalRepeated { lane_next: 1 }, "\"new\""));
        let unplaced = [
            entry_with_id(0, b"j1", vec![put("k", "", "\"old\"", None)]),
            entries[1].clone(),
            entry_with_id(late, b"j1", vec![put("k", "", "\"old\"", None)]),
        ];
        assert_eq!(value_after(&unplaced).1, "\"old\"", "past the window a write id alone no longer finds the original");
    }

    /// Issue 37: lane offsets 2..5 were lost from the journal and the loss
    /// accepted. Entry 5 carries that gap: it waits while the lane is below
    /// 2 (entries before the gap come first, whatever order they land in),
    /// applies once the lane reached anywhere in 2..=5 (lost entries applied
    /// before the loss count), and its copies are dropped after. Without the
    /// gap it would wait for 2, which never comes.
    #[test]
    fn an_entry_after_an_accepted_gap_waits_for_the_entries_before_the_gap_only() {
        let gap = |offset, value| journaled_after_gap(offset, b"L", 5, 0, Some(2), value, b"");
        let entries = [
            gap(0, "5"),
            journaled(1, b"L", 0, 0, b"", "0"),
            journaled(2, b"L", 1, 0, b"", "1"),
            gap(3, "5"),
            gap(4, "5"),
            journaled(5, b"L", 6, 0, b"", "6"),
        ];
        let (outcomes, value) = value_after(&entries);
        assert_eq!(value, "6");
        assert_eq!(
            outcomes,
            [
                Outcome::JournalAhead { lane_next: 0 },
                Outcome::Applied,
                Outcome::Applied,
                Outcome::Applied,
                Outcome::JournalRepeated { lane_next: 6 },
                Outcome::Applied
            ]
        );
        // Lost entry 3 was applied before the loss: the gap's entry is still next.
        let applied_before = [
            journaled(0, b"L", 0, 0, b"", "0"),
            journaled(1, b"L", 1, 0, b"", "1"),
            journaled(2, b"L", 2, 0, b"", "2"),
            journaled(3, b"L", 3, 0, b"", "3"),
            gap(4, "5"),
        ];
        assert_eq!(value_after(&applied_before), (vec![Outcome::Applied; 5], "5".to_string()));
        // Without its gap, the entry after the loss waits for ever.
        let (outcomes, value) =
            value_after(&[journaled(0, b"L", 0, 0, b"", "0"), journaled(1, b"L", 1, 0, b"", "1"), journaled(2, b"L", 5, 0, b"", "5")]);
        assert_eq!((outcomes[2].clone(), value.as_str()), (Outcome::JournalAhead { lane_next: 2 }, "1"));
    }
}
