//! What applying one log entry did, and the bounded memory of recent outcomes
//! that lets a writer learn the fate of its own conditional write.

use std::collections::VecDeque;

use crate::codec::{Malformed, PAYLOAD_DIGEST_BYTES};

/// `Outcome::ConditionFailed::op_index` when what the writer's rules read
/// (`codec::TreeRead`) changed, rather than an op's own condition.
pub(crate) const READS_CHANGED: usize = u32::MAX as usize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every op applied.
    Applied,
    /// Op `op_index`'s condition did not hold (`READS_CHANGED`: a read of
    /// the writer's rules changed); nothing applied.
    ConditionFailed { op_index: usize, current_version: Option<u64> },
    /// The entry was malformed and skipped.
    Skipped(Malformed),
    /// Its write id was applied before, at offset `of`, with `original` as
    /// outcome (never `Duplicate` or `Skipped`): nothing applied this time.
    Duplicate { of: u64, original: Box<Outcome> },
    /// Its write id was applied before, at offset `of`, for another payload:
    /// the key was reused, not retried. Nothing applied; the writer is told.
    KeyReused { of: u64 },
    /// A journaled write whose lane offset was applied before (a copy
    /// appended again): nothing applied. `lane_next`: the lane's next offset.
    JournalRepeated { lane_next: u64 },
    /// A journaled write ahead of its lane (an earlier entry of the lane is
    /// not applied yet: its append failed, this one's landed): nothing
    /// applied now; its sequencer appends it again after the earlier one.
    JournalAhead { lane_next: u64 },
}

impl Outcome {
    /// The stored form of an outcome a write id remembers: `[0]` applied,
    /// `[1][op_index u32 LE][current_version u64 LE, u64::MAX = none]`.
    pub fn encode_remembered(&self) -> Vec<u8> {
        match self {
            Outcome::Applied => vec![0],
            Outcome::ConditionFailed { op_index, current_version } => {
                let mut out = vec![1];
                out.extend_from_slice(&(*op_index as u32).to_le_bytes());
                out.extend_from_slice(&current_version.unwrap_or(u64::MAX).to_le_bytes());
                out
            }
            other => unreachable!("only applied and condition-failed outcomes are remembered, not {other:?}"),
        }
    }

    /// As `encode_remembered`, followed by the write's payload digest
    /// (`Mutation::payload_digest`), which tells a retry from a reused key.
    pub fn encode_remembered_for(&self, digest: &[u8; PAYLOAD_DIGEST_BYTES]) -> Vec<u8> {
        let mut out = self.encode_remembered();
        out.extend_from_slice(digest);
        out
    }

    /// The payload digest remembered with an outcome; None for outcomes
    /// remembered before digests were (any payload then counts as a retry).
    pub fn remembered_digest(bytes: &[u8]) -> Option<[u8; PAYLOAD_DIGEST_BYTES]> {
        let outcome_bytes = match bytes.first() {
            Some(0) => 1,
            Some(1) => 13,
            _ => return None,
        };
        (bytes.len() == outcome_bytes + PAYLOAD_DIGEST_BYTES).then(|| bytes[outcome_bytes..].try_into().expect("length checked"))
    }

    /// The inverse of `encode_remembered` (with or without a digest after
    /// it); `None` for bytes it never wrote.
    pub fn decode_remembered(bytes: &[u8]) -> Option<Outcome> {
        let bytes = match Outcome::remembered_digest(bytes) {
            Some(_) => &bytes[..bytes.len() - PAYLOAD_DIGEST_BYTES],
            None => bytes,
        };
        match bytes {
            [0] => Some(Outcome::Applied),
            [1, rest @ ..] if rest.len() == 12 => {
                let op_index = u32::from_le_bytes(rest[..4].try_into().ok()?) as usize;
                let version = u64::from_le_bytes(rest[4..].try_into().ok()?);
                Some(Outcome::ConditionFailed { op_index, current_version: (version != u64::MAX).then_some(version) })
            }
            _ => None,
        }
    }
}

/// Outcomes of the newest applied offsets, oldest evicted first.
pub(crate) struct OutcomeRing {
    entries: VecDeque<(u64, Outcome)>,
    capacity: usize,
}

impl OutcomeRing {
    pub(crate) fn new(capacity: usize) -> OutcomeRing {
        assert!(capacity > 0);
        OutcomeRing { entries: VecDeque::with_capacity(capacity.min(4096)), capacity }
    }

    pub(crate) fn push(&mut self, offset: u64, outcome: Outcome) {
        if let Some((last, _)) = self.entries.back() {
            assert!(offset > *last, "outcomes are recorded in offset order");
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back((offset, outcome));
    }

    pub(crate) fn get(&self, offset: u64) -> Option<Outcome> {
        let i = self.entries.binary_search_by_key(&offset, |(o, _)| *o).ok()?;
        Some(self.entries[i].1.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_outcomes_round_trip() {
        for outcome in [
            Outcome::Applied,
            Outcome::ConditionFailed { op_index: 3, current_version: Some(17) },
            Outcome::ConditionFailed { op_index: 0, current_version: None },
        ] {
            assert_eq!(Outcome::decode_remembered(&outcome.encode_remembered()), Some(outcome));
        }
        assert_eq!(Outcome::decode_remembered(&[7]), None);
        assert_eq!(Outcome::decode_remembered(&[1, 0]), None);
    }

    #[test]
    fn bounded_and_searchable() {
        let mut ring = OutcomeRing::new(3);
        for offset in [1, 4, 5, 9] {
            ring.push(offset, Outcome::Applied);
        }
        assert_eq!(ring.get(1), None);
        assert_eq!(ring.get(4), Some(Outcome::Applied));
        assert_eq!(ring.get(9), Some(Outcome::Applied));
        assert_eq!(ring.get(6), None);
    }
}
