//! The reference model: the documented semantics of applying a log, written
//! plainly and apart from the store (ARCHITECTURE.md, "Apply"): a mutation
//! whose write id an entry less than the window earlier carried does
//! nothing; else every condition is checked against the state before it,
//! and if all hold the ops apply in order, each record's version being the
//! entry's offset. Malformed entries do nothing.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use crate::apply::batch::WRITE_ID_WINDOW_OFFSETS;
use crate::codec::{Condition, OpKind};

/// pk -> (version, value), after applying every entry of `history`.
pub(super) fn apply_all(history: &[Option<Bytes>]) -> BTreeMap<String, (u64, Vec<u8>)> {
    let mut records: BTreeMap<String, (u64, Vec<u8>)> = BTreeMap::new();
    let mut write_ids: HashMap<Bytes, u64> = HashMap::new();
    for (offset, entry) in history.iter().enumerate() {
        let offset = offset as u64;
        let Some(payload) = entry else { continue };
        let Ok(mutation) = crate::codec::decode(payload.clone(), 0, 1) else { continue };
        if !mutation.write_id.is_empty() {
            if let Some(at) = write_ids.get(&mutation.write_id) {
                if offset - at < WRITE_ID_WINDOW_OFFSETS {
                    continue;
                }
            }
            write_ids.insert(mutation.write_id.clone(), offset);
        }
        let holds = mutation.ops.iter().all(|op| match op.condition {
            None => true,
            Some(Condition::IfAbsent) => !records.contains_key(&op.pk),
            Some(Condition::IfVersion(v)) => records.get(&op.pk).is_some_and(|(version, _)| *version == v),
            Some(Condition::IfTreeHash(_)) => unreachable!("the simulation writes records, not trees"),
        });
        if !holds {
            continue;
        }
        for op in &mutation.ops {
            match &op.kind {
                OpKind::Put(value) => {
                    records.insert(op.pk.clone(), (offset, value.to_vec()));
                }
                OpKind::Delete => {
                    records.remove(&op.pk);
                }
                OpKind::Tree(_) | OpKind::Procedure(_) => unreachable!("the simulation writes records, not trees or procedures"),
            }
        }
    }
    records
}
