//! Journal lanes remembered in the store (issue 36), in the same
//! transaction as the data: per lane (one node's journal of a namespace),
//! the next lane offset to apply. A journaled write is applied in its
//! lane's order, each offset once (`apply::batch`), however often and
//! however late a copy of it is appended (the sequencer after a failure, a
//! restart, a node replaying a lost journal) — no window of offsets.
//!
//! Bound: `LANES_MAX` lanes per partition; past it the lane moved least
//! recently (by log offset) is forgotten: a lane is one journal's, and a
//! journal whose node has not sequenced anything into this partition for
//! thousands of newer journals' lifetimes has nothing left to send.

use redb::ReadableTable;

use super::layout::{META_JOURNAL_LANE, META_JOURNAL_LANE_BY_AT};
use super::{ApplyTxn, StoreError, StoreReader};

/// Lanes a partition remembers.
pub(super) const LANES_MAX: usize = 4096;

/// A lane's entry: the next lane offset to apply, the log offset that set it.
fn lane_entry(value: &[u8]) -> (u64, u64) {
    let next = u64::from_le_bytes(value[..8].try_into().expect("lane entries hold two u64"));
    let at = u64::from_le_bytes(value[8..16].try_into().expect("lane entries hold two u64"));
    (next, at)
}

impl StoreReader {
    /// The next offset of `lane` to apply, if the lane is remembered.
    pub fn journal_lane_next(&self, lane: &[u8]) -> Result<Option<u64>, StoreError> {
        let key = [META_JOURNAL_LANE, lane].concat();
        let guard = self.table.get(key.as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map(|g| lane_entry(g.value()).0))
    }
}

impl ApplyTxn<'_, '_> {
    /// The next offset of `lane` to apply, if the lane is remembered.
    pub fn journal_lane_next(&self, lane: &[u8]) -> Result<Option<u64>, StoreError> {
        let key = [META_JOURNAL_LANE, lane].concat();
        let guard = self.records.get(key.as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map(|g| lane_entry(g.value()).0))
    }

    /// Notes that `lane`'s entries below `next` are applied, by the entry at
    /// log offset `at`; forgets the least recent lane past `LANES_MAX`.
    pub fn set_journal_lane_next(&mut self, lane: &[u8], next: u64, at: u64) -> Result<(), StoreError> {
        assert!(!lane.is_empty(), "a lane has a name");
        let key = [META_JOURNAL_LANE, lane].concat();
        let old = self.records.get(key.as_slice()).map_err(|e| self.error(e))?.map(|g| lane_entry(g.value()));
        if let Some((old_next, old_at)) = old {
            assert!(next > old_next && at > old_at, "a lane only moves forward, with the log");
            self.remove_meta(&[META_JOURNAL_LANE_BY_AT, &old_at.to_be_bytes()[..], lane].concat())?;
        }
        self.put_meta(&key, &[next.to_le_bytes(), at.to_le_bytes()].concat())?;
        self.put_meta(&[META_JOURNAL_LANE_BY_AT, &at.to_be_bytes()[..], lane].concat(), &[])?;
        if old.is_none() {
            self.forget_lanes_past_the_bound()?;
        }
        Ok(())
    }

    /// Forgets the least recently moved lanes while more than `LANES_MAX` are kept.
    fn forget_lanes_past_the_bound(&mut self) -> Result<(), StoreError> {
        let kept = self.keys_below(META_JOURNAL_LANE_BY_AT, u64::MAX, LANES_MAX + 1)?;
        if kept.len() <= LANES_MAX {
            return Ok(());
        }
        let oldest = &kept[0];
        let lane = &oldest[META_JOURNAL_LANE_BY_AT.len() + 8..];
        self.remove_meta(oldest)?;
        self.remove_meta(&[META_JOURNAL_LANE, lane].concat())?;
        Ok(())
    }
}
