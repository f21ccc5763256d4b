//! What applying one log entry did, and the bounded memory of recent outcomes
//! that lets a writer learn the fate of its own conditional write.

use std::collections::VecDeque;

use crate::codec::Malformed;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every op applied.
    Applied,
    /// Op `op_index`'s condition did not hold; nothing applied.
    ConditionFailed { op_index: usize, current_version: Option<u64> },
    /// The entry was malformed and skipped.
    Skipped(Malformed),
}

/// Outcomes of the newest applied offsets, oldest evicted first.
pub struct OutcomeRing {
    entries: VecDeque<(u64, Outcome)>,
    capacity: usize,
}

impl OutcomeRing {
    pub fn new(capacity: usize) -> OutcomeRing {
        assert!(capacity > 0);
        OutcomeRing { entries: VecDeque::with_capacity(capacity.min(4096)), capacity }
    }

    pub fn push(&mut self, offset: u64, outcome: Outcome) {
        if let Some((last, _)) = self.entries.back() {
            assert!(offset > *last, "outcomes are recorded in offset order");
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back((offset, outcome));
    }

    pub fn get(&self, offset: u64) -> Option<Outcome> {
        let i = self.entries.binary_search_by_key(&offset, |(o, _)| *o).ok()?;
        Some(self.entries[i].1.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
