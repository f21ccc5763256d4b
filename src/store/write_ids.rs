//! Write ids (`Idempotency-Key`) remembered in the store, in the same
//! transaction as the data: by id (to find a retry) and by offset (to forget
//! the oldest first, a bounded number per applied entry). Which ids still
//! count is the apply loop's rule (`apply::batch`, a window of offsets).

use redb::ReadableTable;

use super::layout::{META_WRITE_ID, META_WRITE_ID_BY_OFFSET};
use super::{ApplyTxn, StoreError, StoreReader};

/// A remembered write id's entry: its offset, then its stored outcome.
fn remembered(value: &[u8]) -> (u64, Vec<u8>) {
    (u64::from_le_bytes(value[..8].try_into().expect("write id entries start with an offset")), value[8..].to_vec())
}

impl StoreReader {
    /// As `ApplyTxn::write_id_seen`, from a read view (`GET /v1/writes/{id}`).
    pub fn write_id_seen(&self, write_id: &[u8]) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let key = [META_WRITE_ID, write_id].concat();
        let guard = self.table.get(key.as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map(|g| remembered(g.value())))
    }
}

impl ApplyTxn<'_, '_> {
    /// The offset and stored outcome of `write_id`, if it was remembered
    /// (callers decide whether it is still inside their window).
    pub fn write_id_seen(&self, write_id: &[u8]) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let key = [META_WRITE_ID, write_id].concat();
        let guard = self.records.get(key.as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map(|g| remembered(g.value())))
    }

    /// Remembers that `write_id` was applied at `offset` with `outcome`.
    pub fn remember_write_id(&mut self, write_id: &[u8], offset: u64, outcome: &[u8]) -> Result<(), StoreError> {
        assert!(!write_id.is_empty(), "only non-empty write ids are remembered");
        let key = [META_WRITE_ID, write_id].concat();
        let value = [&offset.to_le_bytes()[..], outcome].concat();
        self.put_meta(&key, &value)?;
        let by_offset = [META_WRITE_ID_BY_OFFSET, &offset.to_be_bytes()[..], write_id].concat();
        self.put_meta(&by_offset, &[])?;
        Ok(())
    }

    /// Forgets up to `count_max` write ids remembered at offsets below
    /// `offset`, oldest first; returns how many. Bounded, so eviction spreads
    /// over batches instead of stalling one.
    pub fn forget_write_ids_below(&mut self, offset: u64, count_max: usize) -> Result<usize, StoreError> {
        let expired = self.keys_below(META_WRITE_ID_BY_OFFSET, offset, count_max)?;
        for by_offset in &expired {
            let at = &by_offset[META_WRITE_ID_BY_OFFSET.len()..META_WRITE_ID_BY_OFFSET.len() + 8];
            let write_id = &by_offset[META_WRITE_ID_BY_OFFSET.len() + 8..];
            self.remove_meta(by_offset)?;
            // The id may have been remembered again at a later offset: keep that.
            let key = [META_WRITE_ID, write_id].concat();
            let current_at = self.records.get(key.as_slice()).map_err(|e| self.error(e))?.map(|g| g.value()[..8].to_vec());
            if current_at.is_some_and(|current| u64::from_le_bytes(current.try_into().unwrap()) == u64::from_be_bytes(at.try_into().unwrap())) {
                self.remove_meta(&key)?;
            }
        }
        Ok(expired.len())
    }
}
