//! The reference model: the documented semantics of applying a log, written
//! plainly and apart from the store (ARCHITECTURE.md, "Apply"): a mutation
//! whose write id an entry less than the window earlier carried does
//! nothing; else every condition is checked against the state before it,
//! and if all hold the ops apply in order, each record's version being the
//! entry's offset. A journaled write is decided only at its lane's next
//! place (its `JournalPlace`), each place once. Malformed entries,
//! deployments and ticks do nothing to
//! the records writers write (procedures' own writes are checked by the
//! replicas' equal state hashes, not here).

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use crate::apply::batch::WRITE_ID_WINDOW_OFFSETS;
use crate::codec::{Condition, OpKind};

/// What applying a whole log decides.
pub(super) struct Model {
    /// pk -> (version, value).
    pub records: BTreeMap<String, (u64, Vec<u8>)>,
    /// (journal lane, lane offset) -> the write id of the journaled write
    /// decided there (applied, or failed its condition), and the log offset
    /// it was decided at: each place once.
    pub decided: BTreeMap<(Bytes, u64), (Bytes, u64)>,
    /// Journaled entries that came ahead of their lane (an earlier one
    /// missing), and copies of ones decided before: what the run exercised.
    pub lane_ahead: u64,
    pub lane_repeated: u64,
}

/// What applying every entry of `history` decides.
pub(super) fn apply_all(history: &[Option<Bytes>]) -> Model {
    let mut records: BTreeMap<String, (u64, Vec<u8>)> = BTreeMap::new();
    let mut write_ids: HashMap<Bytes, u64> = HashMap::new();
    let mut lanes: HashMap<Bytes, u64> = HashMap::new();
    let mut decided = BTreeMap::new();
    let (mut lane_ahead, mut lane_repeated) = (0, 0);
    for (offset, entry) in history.iter().enumerate() {
        let offset = offset as u64;
        let Some(payload) = entry else { continue };
        let Ok(mutation) = crate::codec::decode(payload.clone(), 0, 1) else { continue };
        // A deployment changes no record (what procedures write is left to the state hashes).
        if mutation.ops.iter().any(|op| matches!(op.kind, OpKind::Procedure(_))) {
            continue;
        }
        // A journaled write is decided at its lane's next place only (the
        // lane's next is its `from`, or one past the last decided; after an
        // accepted gap, anywhere from the gap's start to the entry): a copy
        // of one decided before, or one ahead of a missing one, does nothing.
        if let Some(place) = &mutation.journal {
            let next = lanes.get(&place.lane).copied().unwrap_or(0).max(place.from);
            let earliest = place.gap_from.unwrap_or(place.offset);
            if place.offset < next {
                lane_repeated += 1;
                continue;
            }
            if next < earliest {
                lane_ahead += 1;
                continue;
            }
            lanes.insert(place.lane.clone(), place.offset + 1);
            decided.insert((place.lane.clone(), place.offset), (mutation.write_id.clone(), offset));
        }
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
                OpKind::Tree(_) | OpKind::Procedure(_) => unreachable!("the simulation writes records, not trees; deployments were passed"),
            }
        }
    }
    Model { records, decided, lane_ahead, lane_repeated }
}
