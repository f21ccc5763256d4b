//! Reading a JSON tree (`crate::tree`) from its leaf records: a subtree is one range of its pk's sort keys (the node's
//! own leaf, then `<path>/...`), never a scan of the database; a shallow
//! read skips from child to child so it touches one leaf per child.

use serde_json::Value;

use super::{ApplyTxn, StoreError, StoreReader};
use crate::tree::path::{self, PRIORITY_KEY};
use crate::tree::value::{into_arrays, Builder};

/// The most bytes of leaves one read assembles: a request for more is
/// refused (Firebase's own bound is 256 MB) instead of filling memory.
pub const READ_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("Data requested exceeds the maximum size that can be accessed with a single request ({bytes_max} bytes in Tern); read a deeper path or use shallow=true or a query with a limit")]
    TooLarge { bytes_max: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where leaves are read from: a read view, or the apply transaction itself.
pub trait Leaves {
    fn leaf(&self, pk: &str, sk: &str) -> Result<Option<Vec<u8>>, StoreError>;
    fn scan(&self, pk: &str, prefix: &str, from: Option<&str>, visit: &mut dyn FnMut(&str, &[u8]) -> bool) -> Result<(), StoreError>;
}

impl Leaves for StoreReader {
    fn leaf(&self, pk: &str, sk: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.get(pk, sk)?.map(|r| r.value))
    }
    fn scan(&self, pk: &str, prefix: &str, from: Option<&str>, visit: &mut dyn FnMut(&str, &[u8]) -> bool) -> Result<(), StoreError> {
        self.scan_prefix(pk, prefix, from, visit)
    }
}

impl Leaves for ApplyTxn<'_, '_> {
    fn leaf(&self, pk: &str, sk: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.value_of(pk, sk)
    }
    fn scan(&self, pk: &str, prefix: &str, from: Option<&str>, visit: &mut dyn FnMut(&str, &[u8]) -> bool) -> Result<(), StoreError> {
        self.scan_prefix(pk, prefix, from, visit)
    }
}

/// The value at `sk` of tree `pk` (null when absent): with priorities when
/// `export`, arrays where Firebase makes them.
pub fn value_at(src: &dyn Leaves, pk: &str, sk: &str, export: bool, bytes_max: usize) -> Result<Value, TreeError> {
    let mut builder = Builder::default();
    if !sk.is_empty() {
        if let Some(leaf) = src.leaf(pk, sk)? {
            builder.add("", &leaf);
        }
    }
    let mut too_large = false;
    src.scan(pk, &path::descendants_prefix(sk), None, &mut |leaf_sk, json| {
        builder.add(path::relative(sk, leaf_sk), json);
        too_large = builder.bytes > bytes_max;
        !too_large
    })?;
    if too_large {
        return Err(TreeError::TooLarge { bytes_max });
    }
    let mut value = builder.finish(export);
    into_arrays(&mut value);
    Ok(value)
}

/// Whether the value at `sk` (without priorities) hashes to `expected`:
/// the ETag condition, decided by the apply loop in its transaction and
/// looked at first by a Firebase holder in its view. A subtree too large
/// to read fails it, alike everywhere.
pub fn hash_matches(src: &dyn Leaves, pk: &str, sk: &str, expected: &[u8; 32]) -> Result<bool, StoreError> {
    match value_at(src, pk, sk, false, READ_BYTES_MAX) {
        Ok(value) => Ok(&crate::tree::value::etag(&value) == expected),
        Err(TreeError::TooLarge { .. }) => Ok(false),
        Err(TreeError::Store(e)) => Err(e),
    }
}

/// What a Firebase rule's read of `sk` is recorded as (`codec::TreeRead`):
/// the hash of the value there, priorities included, and what reading it
/// cost in bytes (a mutation's reads are bounded in total:
/// `limits::MUTATION_READ_BYTES_MAX`). A subtree over `READ_BYTES_MAX`
/// hashes as null (rules see it as null) and costs `READ_BYTES_MAX`. The
/// holder hashes from the view its rules read, the apply loop from its
/// transaction: one function, so both sides agree on what "unchanged"
/// means. What it hashes is part of the replicated state machine: changing
/// it changes how old logs replay.
pub fn hash_for_rules(src: &dyn Leaves, pk: &str, sk: &str) -> Result<([u8; 32], usize), StoreError> {
    match value_at(src, pk, sk, true, READ_BYTES_MAX) {
        Ok(value) => Ok(crate::tree::value::etag_and_bytes(&value)),
        Err(TreeError::TooLarge { .. }) => Ok((crate::tree::value::etag(&Value::Null), READ_BYTES_MAX)),
        Err(TreeError::Store(e)) => Err(e),
    }
}

/// `shallow=true`: a primitive as it is; an object as `{child: true}`, or
/// `{child: primitive}` for primitive children. One short range read per
/// child: the scan jumps past each child's subtree.
pub fn shallow(src: &dyn Leaves, pk: &str, sk: &str, children_max: usize) -> Result<Value, TreeError> {
    if !sk.is_empty() {
        if let Some(leaf) = src.leaf(pk, sk)? {
            return Ok(serde_json::from_slice(&leaf).unwrap_or(Value::Null));
        }
    }
    let prefix = path::descendants_prefix(sk);
    let mut out = serde_json::Map::new();
    let mut from: Option<String> = None;
    loop {
        let mut next: Option<(String, Option<Value>)> = None;
        src.scan(pk, &prefix, from.as_deref(), &mut |leaf_sk, json| {
            let rest = &leaf_sk[prefix.len()..];
            if rest.is_empty() {
                return true; // the root's own leaf (root only)
            }
            let (child, deeper) = match rest.split_once('/') {
                // A child's priority says nothing of its value: look on.
                Some((_, PRIORITY_KEY)) => return true,
                Some((child, _)) => (child, true),
                None => (rest, false),
            };
            if child == PRIORITY_KEY {
                return true;
            }
            let value = if deeper { None } else { serde_json::from_slice(json).ok() };
            next = Some((child.to_string(), value));
            false
        })?;
        let Some((child, value)) = next else { break };
        if out.len() >= children_max {
            return Err(TreeError::TooLarge { bytes_max: children_max });
        }
        // Past every sort key of this child: '0' follows '/'.
        from = Some(format!("{prefix}{child}0"));
        out.insert(child, value.unwrap_or(Value::Bool(true)));
    }
    Ok(if out.is_empty() { Value::Null } else { Value::Object(out) })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::PartitionStore;

    #[test]
    fn shallow_reads_one_leaf_per_child() {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        store
            .apply(false, |tx| {
                let mut leaves = Vec::new();
                crate::tree::value::leaves("", &json!({"a": {"x": 1, "y": {"z": 2}}, "b": 3, "a0": "s", "p": {"q": 1, ".priority": 2}}), &mut leaves);
                for (sk, json) in leaves {
                    tx.put("t", &sk, 0, &json)?;
                }
                Ok(())
            })
            .unwrap();
        let reader = store.read().unwrap();
        assert_eq!(shallow(&reader, "t", "", 100).unwrap(), json!({"a": true, "a0": "s", "b": 3, "p": true}), "a priority is not a child's value");
        assert_eq!(shallow(&reader, "t", "a", 100).unwrap(), json!({"x": 1, "y": true}));
        assert_eq!(shallow(&reader, "t", "b", 100).unwrap(), json!(3));
        assert_eq!(shallow(&reader, "t", "nope", 100).unwrap(), Value::Null);
        assert_eq!(value_at(&reader, "t", "a", false, 1 << 20).unwrap(), json!({"x": 1, "y": {"z": 2}}));
        assert!(matches!(value_at(&reader, "t", "", false, 10), Err(TreeError::TooLarge { .. })));
    }
}
