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
//! - otherwise ops apply in order (a later op on the same key wins).

use super::outcome::Outcome;
use crate::codec::{self, Condition, Mutation, OpKind};
use crate::log::LogRecord;
use crate::store::{ApplyTxn, StoreError};

/// Applies `entries` (in increasing offset order, starting at or after the
/// store's `applied_next`) inside `tx`, returning each outcome. Offsets may
/// skip (Kafka transaction markers occupy offsets) but never repeat.
pub fn apply_entries(
    tx: &mut ApplyTxn,
    entries: &[LogRecord],
    partition: u32,
    partitions: u32,
) -> Result<Vec<(u64, Outcome)>, StoreError> {
    let mut outcomes = Vec::with_capacity(entries.len());
    for entry in entries {
        assert!(
            entry.offset >= tx.state().applied_next,
            "entry {} is below applied_next {}: it would be applied twice",
            entry.offset,
            tx.state().applied_next
        );
        let outcome = match codec::decode(entry.payload.clone(), partition, partitions) {
            Err(malformed) => Outcome::Skipped(malformed),
            Ok(mutation) => apply_mutation(tx, &mutation, entry.offset)?,
        };
        tx.mark_applied(entry.offset, matches!(outcome, Outcome::Skipped(_)));
        outcomes.push((entry.offset, outcome));
    }
    Ok(outcomes)
}

fn apply_mutation(tx: &mut ApplyTxn, mutation: &Mutation, offset: u64) -> Result<Outcome, StoreError> {
    for (op_index, op) in mutation.ops.iter().enumerate() {
        let Some(condition) = op.condition else { continue };
        let current_version = tx.version_of(&op.pk, &op.sk)?;
        if !condition_holds(condition, current_version) {
            return Ok(Outcome::ConditionFailed { op_index, current_version });
        }
    }
    for op in &mutation.ops {
        match &op.kind {
            OpKind::Put(value) => tx.put(&op.pk, &op.sk, offset, value)?,
            OpKind::Delete => tx.delete(&op.pk, &op.sk)?,
        }
    }
    Ok(Outcome::Applied)
}

pub fn condition_holds(condition: Condition, current_version: Option<u64>) -> bool {
    match condition {
        Condition::IfVersion(expected) => current_version == Some(expected),
        Condition::IfAbsent => current_version.is_none(),
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
        LogRecord { offset, payload: Bytes::from(encode(&Mutation { write_id: Bytes::from_static(b"w"), ops })) }
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
            LogRecord { offset: 3, payload: Bytes::from_static(b"\xff\xff garbage") },
            entry(4, vec![Op { pk: "k".into(), sk: "a".into(), kind: OpKind::Delete, condition: Some(Condition::IfVersion(2)) }]),
        ];
        let outcomes = store.apply(false, |tx| apply_entries(tx, &entries, 0, 1)).unwrap();
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
        let entries: Vec<LogRecord> =
            (0..50).map(|i| entry(i, vec![put(&format!("k{}", i % 7), &format!("s{}", i % 3), "[1]", None)])).collect();
        let hash_after = |chunks: &[usize]| {
            let dir = tempfile::tempdir().unwrap();
            let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
            let mut start = 0;
            for &len in chunks {
                store.apply(false, |tx| apply_entries(tx, &entries[start..start + len], 0, 1)).unwrap();
                start += len;
            }
            store.read().unwrap().state().unwrap().state_hash
        };
        assert_eq!(hash_after(&[50]), hash_after(&[1, 10, 39]));
    }
}
