//! The write side of one apply transaction: records put and deleted (the
//! state hash and record count kept with them) and the applied offset
//! moved, all committed together by `PartitionStore::apply`. Write ids
//! (`write_ids.rs`) and the not-applied record (`not_applied.rs`) extend it.

use std::path::Path;

use redb::{ReadableTable, Table};

use super::damaged::DamageFound;
use super::hash::StateHash;
use super::history::{HistoryEntry, HistoryNotes, Noted};
use super::key;
use super::layout::{decode_value, encode_value, read_failure, storage_error, ReadFailure};
use super::{StoreError, StoreState};

/// The write side of one apply transaction.
pub struct ApplyTxn<'a, 't> {
    pub(super) records: &'a mut Table<'t, &'static [u8], &'static [u8]>,
    pub(super) state: StoreState,
    pub(super) path: &'a Path,
    pub(super) damage: &'a DamageFound,
    /// The versions to add to records' history when this commits.
    pub(super) history: HistoryNotes,
}

impl ApplyTxn<'_, '_> {
    pub(super) fn error(&self, e: impl Into<ReadFailure>) -> StoreError {
        read_failure(self.path, self.damage, e.into())
    }

    /// A failure of this transaction that is not redb's (a malformed restore).
    pub(super) fn error_message(&self, message: String) -> StoreError {
        StoreError { path: self.path.display().to_string(), message, unavailable: false, damaged: false }
    }

    /// A stored record's version and value, its checksum verified.
    fn decoded<'v>(&self, key: &[u8], stored: &'v [u8]) -> Result<(u64, &'v [u8]), StoreError> {
        decode_value(key, stored).map_err(|e| self.error(e))
    }

    pub fn state(&self) -> &StoreState {
        &self.state
    }

    /// The version of `(pk, sk)` as of this transaction, if it exists.
    pub fn version_of(&self, pk: &str, sk: &str) -> Result<Option<u64>, StoreError> {
        let key = key::encode(pk, sk);
        let guard = self.records.get(key.as_slice()).map_err(|e| self.error(e))?;
        guard.map(|g| self.decoded(&key, g.value()).map(|(version, _)| version)).transpose()
    }

    pub fn put(&mut self, pk: &str, sk: &str, version: u64, value: &[u8]) -> Result<(), StoreError> {
        let key = key::encode(pk, sk);
        let stored = encode_value(&key, version, value);
        let (path, damage) = (self.path, self.damage);
        let old = self.records.insert(key.as_slice(), stored.as_slice()).map_err(storage_error(path, damage))?;
        let old_hash = old.map(|old| old_record_hash(path, damage, &key, old.value())).transpose()?;
        match old_hash {
            Some(old_hash) => self.state.state_hash.remove(&old_hash),
            None => self.state.record_count += 1,
        }
        self.state.state_hash.add(&StateHash::of_record(&key, version, value));
        Ok(())
    }

    pub fn delete(&mut self, pk: &str, sk: &str) -> Result<(), StoreError> {
        let key = key::encode(pk, sk);
        let (path, damage) = (self.path, self.damage);
        let old = self.records.remove(key.as_slice()).map_err(storage_error(path, damage))?;
        let old_hash = old.map(|old| old_record_hash(path, damage, &key, old.value())).transpose()?;
        if let Some(old_hash) = old_hash {
            self.state.state_hash.remove(&old_hash);
            self.state.record_count -= 1;
        }
        Ok(())
    }

    /// Visits `(sk, value)` of `pk`'s records whose sk starts with `prefix`,
    /// from `from` on, while `visit` returns true (as `StoreReader::scan_prefix`,
    /// but seeing this transaction's own writes).
    pub fn scan_prefix(&self, pk: &str, prefix: &str, from: Option<&str>, visit: &mut dyn FnMut(&str, &[u8]) -> bool) -> Result<(), StoreError> {
        super::layout::scan_prefix(&*self.records, pk, prefix, from, visit).map_err(|e| self.error(e))
    }

    /// The value of `(pk, sk)` as of this transaction.
    pub fn value_of(&self, pk: &str, sk: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key::encode(pk, sk);
        let guard = self.records.get(key.as_slice()).map_err(|e| self.error(e))?;
        guard.map(|g| self.decoded(&key, g.value()).map(|(_, value)| value.to_vec())).transpose()
    }

    /// Writes one entry of outcome metadata, keeping the state hash.
    pub(super) fn put_meta(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        debug_assert!(super::layout::is_outcome_meta(key), "only outcome metadata is hashed");
        let old = self.records.insert(key, value).map_err(storage_error(self.path, self.damage))?;
        let old_hash = old.map(|old| StateHash::of_meta(key, old.value()));
        if let Some(old_hash) = old_hash {
            self.state.state_hash.remove(&old_hash);
        }
        self.state.state_hash.add(&StateHash::of_meta(key, value));
        Ok(())
    }

    /// Removes one entry of outcome metadata, keeping the state hash.
    pub(super) fn remove_meta(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let old = self.records.remove(key).map_err(storage_error(self.path, self.damage))?;
        let old_hash = old.map(|old| StateHash::of_meta(key, old.value()));
        if let Some(old_hash) = old_hash {
            self.state.state_hash.remove(&old_hash);
        }
        Ok(())
    }

    /// Up to `count_max` keys `<prefix><offset u64 BE>...` with offsets
    /// below `offset`, oldest first (for bounded eviction).
    pub(super) fn keys_below(&self, prefix: &[u8], offset: u64, count_max: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        let end = [prefix, &offset.to_be_bytes()[..]].concat();
        let mut keys = Vec::new();
        for entry in self.records.range::<&[u8]>(prefix..end.as_slice()).map_err(|e| self.error(e))?.take(count_max) {
            keys.push(entry.map_err(|e| self.error(e))?.0.value().to_vec());
        }
        Ok(keys)
    }

    /// Notes a version of `(pk, sk)` for its history, which keeps the
    /// newest `keep` (`history.rs`; 0: none, and what it had goes): written
    /// at `offset` by `writer` at `time_ms`, `value` None for a delete.
    /// Free when the store keeps no history and this keeps none.
    #[allow(clippy::too_many_arguments)] // one version's fields, as the log entry has them
    pub fn note_version(&mut self, pk: &str, sk: &str, offset: u64, time_ms: u64, writer: &str, value: Option<&[u8]>, keep: u32) {
        if !self.history.wanted(keep) {
            return;
        }
        // A note that keeps nothing only trims: no copy of the value.
        let entry = match keep {
            0 => HistoryEntry { offset, time_ms, writer: String::new(), value: None },
            _ => HistoryEntry { offset, time_ms, writer: writer.to_string(), value: value.map(<[u8]>::to_vec) },
        };
        // From here on a later note of this transaction keeping none must trim it.
        self.history.table_has_entries |= keep > 0;
        self.history.noted.push(Noted { record_key: key::encode(pk, sk), entry, keep });
    }

    /// Moves the applied offset to `offset` over log offsets that hold no
    /// entry (Kafka transaction markers): no entry is counted.
    pub fn skip_to(&mut self, offset: u64) {
        assert!(offset >= self.state.applied_next, "offsets only move forward");
        self.state.applied_next = offset;
    }

    /// Marks log entry `offset` applied (or skipped). Offsets only move forward.
    pub fn mark_applied(&mut self, offset: u64, skipped: bool) {
        assert!(offset >= self.state.applied_next, "offset {offset} is below applied_next {}: it would be applied twice", self.state.applied_next);
        self.state.applied_next = offset + 1;
        self.state.applied_entries += 1;
        if skipped {
            self.state.skipped_entries += 1;
        }
    }
}

/// The state hash of a record a put or delete replaces, its checksum
/// verified first (a damaged old record fails the transaction, reported).
fn old_record_hash(path: &Path, damage: &DamageFound, key: &[u8], stored: &[u8]) -> Result<StateHash, StoreError> {
    let (version, value) = decode_value(key, stored).map_err(|e| read_failure(path, damage, e.into()))?;
    Ok(StateHash::of_record(key, version, value))
}
