//! Adding up a store's entries: every record's checksum verified, and the
//! state hash and record count they make, to compare with the ones kept
//! beside them (`layout::read_state`). Shared by `tern check` (offline,
//! `check.rs`) and the scrub (while running, `scrub.rs`): both must judge
//! a store by the same rule.

use redb::ReadableTable;

use super::hash::StateHash;
use super::is_outcome_meta;
use super::layout::{decode_snapshot_form, decode_value, meta_u64, DamagedRecord, META_FORMAT, META_PREFIX, META_UPGRADED_TO};
use super::StoreState;

/// The entries added so far.
#[derive(Debug, Clone)]
pub(super) struct Tally {
    hash: StateHash,
    records: u64,
    /// The store's format: records carry their checksum from format 3 on.
    format: u64,
    /// While an upgrade to format 3 is cut short: the last key upgraded.
    upgraded_to: Option<Vec<u8>>,
}

impl Tally {
    /// An empty tally for the store `table` belongs to.
    pub(super) fn of(table: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<Tally, redb::StorageError> {
        let format = meta_u64(table, META_FORMAT)?;
        let upgraded_to = table.get(META_UPGRADED_TO)?.map(|g| g.value().to_vec());
        Ok(Tally { hash: StateHash::default(), records: 0, format, upgraded_to })
    }

    /// Adds one stored entry; Err says what is damaged (a record failing its
    /// checksum, or too short to hold its version) and which record.
    pub(super) fn add(&mut self, key: &[u8], value: &[u8]) -> Result<(), DamagedRecord> {
        if is_outcome_meta(key) {
            self.hash.add(&StateHash::of_meta(key, value));
            return Ok(());
        }
        if key.len() >= 2 && key[..2] == META_PREFIX {
            return Ok(());
        }
        // Records carry their checksum from format 3 on (up to the mark,
        // while an upgrade is cut short: `META_UPGRADED_TO`).
        let checksummed = self.format >= 3 && self.upgraded_to.as_ref().is_none_or(|to| key <= to.as_slice());
        let (version, value) = if checksummed {
            decode_value(key, value)?
        } else {
            decode_snapshot_form(value).ok_or_else(|| DamagedRecord {
                key: super::key::describe(key),
                what: format!("a record's value is {} bytes, shorter than its version", value.len()),
            })?
        };
        self.hash.add(&StateHash::of_record(key, version, value));
        self.records += 1;
        Ok(())
    }

    /// Records added.
    pub(super) fn records(&self) -> u64 {
        self.records
    }

    /// Whether everything added makes the state kept beside it; Err says
    /// what does not agree.
    pub(super) fn agrees_with(&self, stored: &StoreState) -> Result<(), String> {
        if self.records != stored.record_count {
            return Err(format!("it holds {} records where its state counts {}", self.records, stored.record_count));
        }
        if self.hash != stored.state_hash {
            return Err(format!(
                "its records hash to {} where its state says {} (a record or its metadata changed outside the store)",
                self.hash.to_hex(),
                stored.state_hash.to_hex()
            ));
        }
        Ok(())
    }
}
