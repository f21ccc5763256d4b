//! Applying tree ops inside a partition's apply transaction: the only
//! place a tree changes. A set removes the old subtree (in bounded chunks,
//! whatever its size), removes leaves above the path that would otherwise
//! sit beside children, and writes the new leaves, all at the entry's
//! offset. Server values are resolved here, against this transaction's
//! state and the entry's own clock, so every replica computes the same.

use serde_json::Value;

use crate::codec::TreeOp;
use crate::store::tree::{value_at, READ_BYTES_MAX};
use crate::store::{ApplyTxn, StoreError};
use crate::tree::path;
use crate::tree::value::{leaves, resolve_server_values};

/// Leaves removed per range pass: removing a subtree holds at most this
/// many keys in memory at once.
const REMOVE_CHUNK_KEYS: usize = 1024;

/// Applies `op` at `sk` of tree `pk`; returns what was written, with server
/// values resolved (what watches are sent).
pub(crate) fn apply_op(tx: &mut ApplyTxn, pk: &str, sk: &str, op: &TreeOp, offset: u64) -> Result<Value, StoreError> {
    let mut value: Value = serde_json::from_slice(&op.value).expect("tree op values are validated when decoded");
    {
        let state: &ApplyTxn = tx;
        let mut current = |at: &str| value_at(state, pk, at, false, READ_BYTES_MAX).ok();
        resolve_server_values(sk, &mut value, op.time_ms, &mut current);
    }
    if op.merge {
        let Value::Object(update) = &value else { unreachable!("a merge is an object: validated when decoded") };
        for (relative, child) in update {
            set(tx, pk, &path::join(sk, &path::sk_of(&path::parse_relative(relative).expect("validated"))), child, offset)?;
        }
    } else {
        set(tx, pk, sk, &value, offset)?;
    }
    Ok(value)
}

/// Whether every location a writer's rules read still reads as it did
/// then (`codec::TreeRead`), within the bytes a mutation's reads may cost
/// (`limits::MUTATION_READ_BYTES_MAX`: the holder refused a write whose
/// reads cost more; an entry from elsewhere that does fails, alike on
/// every replica).
pub(crate) fn reads_unchanged(tx: &ApplyTxn, reads: &[crate::codec::TreeRead]) -> Result<bool, StoreError> {
    let mut cost_bytes = 0usize;
    for read in reads {
        let (hash, cost) = crate::store::tree::hash_for_rules(tx, &read.pk, &read.sk)?;
        cost_bytes = cost_bytes.saturating_add(cost);
        if hash != read.hash || cost_bytes > crate::limits::MUTATION_READ_BYTES_MAX {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Replaces the value at `sk` by `value` (already resolved).
pub(crate) fn set(tx: &mut ApplyTxn, pk: &str, sk: &str, value: &Value, offset: u64) -> Result<(), StoreError> {
    remove_subtree(tx, pk, sk)?;
    let mut new = Vec::new();
    leaves(sk, value, &mut new);
    if new.is_empty() {
        return Ok(());
    }
    // A primitive above the path becomes an object: its leaf goes.
    let keys = path::keys_of(sk);
    for depth in 0..keys.len() {
        let ancestor = path::sk_of(&keys[..depth]);
        if tx.value_of(pk, &ancestor)?.is_some() {
            tx.delete(pk, &ancestor)?;
        }
    }
    for (leaf_sk, json) in new {
        tx.put(pk, &leaf_sk, offset, &json)?;
    }
    Ok(())
}

/// Removes the leaf at `sk` and every leaf below it, a chunk at a time.
fn remove_subtree(tx: &mut ApplyTxn, pk: &str, sk: &str) -> Result<(), StoreError> {
    if !sk.is_empty() && tx.value_of(pk, sk)?.is_some() {
        tx.delete(pk, sk)?;
    }
    let prefix = path::descendants_prefix(sk);
    loop {
        let mut chunk: Vec<String> = Vec::with_capacity(REMOVE_CHUNK_KEYS);
        tx.scan_prefix(pk, &prefix, None, &mut |leaf_sk, _| {
            chunk.push(leaf_sk.to_string());
            chunk.len() < REMOVE_CHUNK_KEYS
        })?;
        for leaf_sk in &chunk {
            tx.delete(pk, leaf_sk)?;
        }
        if chunk.len() < REMOVE_CHUNK_KEYS {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use crate::store::PartitionStore;

    fn op(value: Value, merge: bool, time_ms: u64) -> TreeOp {
        TreeOp { merge, value: Bytes::from(value.to_string()), time_ms }
    }

    #[test]
    fn sets_replace_subtrees_and_primitives_above_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        let read = |sk: &str| value_at(&store.read().unwrap(), "t", sk, false, 1 << 20).unwrap();
        let apply = |sk: &str, o: TreeOp, offset: u64| store.apply(false, |tx| apply_op(tx, "t", sk, &o, offset)).unwrap();
        apply("", op(json!({"a": {"b": 1, "c": 2}, "d": 5}), false, 0), 0);
        apply("a", op(json!({"x": 9}), false, 0), 1);
        assert_eq!(read(""), json!({"a": {"x": 9}, "d": 5}));
        apply("d/e", op(json!("deeper"), false, 0), 2);
        assert_eq!(read("d"), json!({"e": "deeper"}), "the primitive at d became an object");
        apply("", op(json!({"a/y": 1, "d": null, "n": {".sv": {"increment": 3}}}), true, 0), 3);
        assert_eq!(read(""), json!({"a": {"x": 9, "y": 1}, "n": 3}));
        let resolved = apply("n", op(json!({".sv": {"increment": 3}}), false, 0), 4);
        assert_eq!(resolved, json!(6));
        assert_eq!(apply("t", op(json!({".sv": "timestamp"}), false, 77), 5), json!(77));
        apply("", op(Value::Null, false, 0), 6);
        assert_eq!(read(""), Value::Null);
        assert_eq!(store.read().unwrap().state().unwrap().record_count, 0);
    }

    #[test]
    fn a_large_subtree_is_removed_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        let big: serde_json::Map<String, Value> = (0..5000).map(|i| (format!("k{i}"), json!(i))).collect();
        store.apply(false, |tx| apply_op(tx, "t", "big", &op(Value::Object(big), false, 0), 0)).unwrap();
        assert_eq!(store.read().unwrap().state().unwrap().record_count, 5000);
        store.apply(false, |tx| apply_op(tx, "t", "big", &op(json!(1), false, 0), 1)).unwrap();
        assert_eq!(store.read().unwrap().state().unwrap().record_count, 1);
    }
}
