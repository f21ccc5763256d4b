//! The not-applied record: which offsets decoded but did not apply (a
//! failed condition, a duplicate write id), so a watch replaying the log
//! skips exactly what the apply loop skipped. It covers offsets from
//! `not_applied_from` on: where this store began applying (0, or a restored
//! snapshot's offset).

use super::layout::{meta_u64, META_NOT_APPLIED, META_NOT_APPLIED_FROM};
use super::{ApplyTxn, StoreError, StoreReader};

impl ApplyTxn<'_, '_> {
    /// Records that the mutation at `offset` decoded but did not apply.
    pub fn record_not_applied(&mut self, offset: u64) -> Result<(), StoreError> {
        let key = [META_NOT_APPLIED, &offset.to_be_bytes()[..]].concat();
        self.put_meta(&key, &[])
    }

    /// Forgets up to `count_max` not-applied marks below `offset`, oldest first.
    pub fn forget_not_applied_below(&mut self, offset: u64, count_max: usize) -> Result<usize, StoreError> {
        let expired = self.keys_below(META_NOT_APPLIED, offset, count_max)?;
        for key in &expired {
            self.remove_meta(key)?;
        }
        Ok(expired.len())
    }
}

impl StoreReader {
    /// The lowest offset whose outcome the not-applied record knows.
    pub fn not_applied_from(&self) -> Result<u64, StoreError> {
        meta_u64(&self.table, META_NOT_APPLIED_FROM).map_err(|e| self.error(e))
    }

    /// Offsets in `[from, to)` whose mutations decoded but did not apply.
    pub fn not_applied_in(&self, from: u64, to: u64) -> Result<std::collections::BTreeSet<u64>, StoreError> {
        let start = [META_NOT_APPLIED, &from.to_be_bytes()[..]].concat();
        let end = [META_NOT_APPLIED, &to.to_be_bytes()[..]].concat();
        let mut out = std::collections::BTreeSet::new();
        if from >= to {
            return Ok(out);
        }
        for entry in self.table.range::<&[u8]>(start.as_slice()..end.as_slice()).map_err(|e| self.error(e))? {
            let key = entry.map_err(|e| self.error(e))?.0.value().to_vec();
            out.insert(u64::from_be_bytes(key[META_NOT_APPLIED.len()..].try_into().expect("not-applied keys end with an offset")));
        }
        Ok(out)
    }
}
