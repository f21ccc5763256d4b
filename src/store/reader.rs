//! A consistent read view of one partition (an MVCC read transaction that
//! never blocks the apply loop): single records without copying, one pk's
//! records in sk order, and the whole store page by page or raw.

use std::path::PathBuf;
use std::sync::Arc;

use super::damaged::DamageFound;
use super::key::{self, SkRange};
use super::layout::{
    self, decode_value, is_outcome_meta, read_failure, read_state, slice_bound, snapshot_form, ReadFailure, META_PREFIX, META_STATE,
};
use super::{Record, StoreError, StoreState};

/// A page of a namespace-wide scan: (key, record) in key order, and whether
/// more follow.
pub(crate) type Page = (Vec<(Vec<u8>, Record)>, bool);

/// One entry of a range over the records table, as redb yields it.
type RangeEntry<'a> = Result<(redb::AccessGuard<'a, &'static [u8]>, redb::AccessGuard<'a, &'static [u8]>), redb::StorageError>;

/// A consistent read view of one partition.
pub struct StoreReader {
    pub(super) table: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(super) path: Arc<PathBuf>,
    /// The store's damage signal: a record failing its checksum here is reported.
    pub(super) damage: Arc<DamageFound>,
}

impl StoreReader {
    pub(super) fn error(&self, e: impl Into<ReadFailure>) -> StoreError {
        read_failure(&self.path, &self.damage, e.into())
    }

    /// A stored record's version and value, its checksum verified: a
    /// damaged record is an error (reported), never a value.
    pub(super) fn decoded<'v>(&self, key: &[u8], stored: &'v [u8]) -> Result<(u64, &'v [u8]), StoreError> {
        decode_value(key, stored).map_err(|e| self.error(e))
    }

    pub fn state(&self) -> Result<StoreState, StoreError> {
        read_state(&self.table).map_err(|e| self.error(e))
    }

    pub fn applied_next(&self) -> Result<u64, StoreError> {
        let guard = self.table.get(META_STATE).map_err(|e| self.error(e))?;
        Ok(guard.map_or(0, |g| u64::from_le_bytes(g.value()[..8].try_into().expect("state is 64 bytes"))))
    }

    pub fn get(&self, pk: &str, sk: &str) -> Result<Option<Record>, StoreError> {
        let mut record = None;
        self.get_with(pk, sk, |version, value| {
            record = Some(Record { pk: pk.to_string(), sk: sk.to_string(), version, value: value.to_vec() });
        })?;
        Ok(record)
    }

    /// Calls `visit(version, value)` on the stored record without copying it
    /// (the read hot path renders straight from the page). Returns false if absent.
    pub fn get_with(&self, pk: &str, sk: &str, visit: impl FnOnce(u64, &[u8])) -> Result<bool, StoreError> {
        let key = key::encode(pk, sk);
        let Some(guard) = self.table.get(key.as_slice()).map_err(|e| self.error(e))? else { return Ok(false) };
        let (version, value) = self.decoded(&key, guard.value())?;
        visit(version, value);
        Ok(true)
    }

    /// Up to `limit` records with keys after `after` (all records when
    /// `None`), in key order, plus whether more follow: a namespace-wide
    /// watch's snapshot, page by page.
    pub fn scan_page(&self, after: Option<&[u8]>, limit: usize, bytes_max: usize) -> Result<Page, StoreError> {
        let first_record = key::prefix_successor(&META_PREFIX).expect("meta prefix has a successor");
        let lower = match after {
            Some(key) => std::ops::Bound::Excluded(key),
            None => std::ops::Bound::Included(first_record.as_slice()),
        };
        let mut out = Vec::with_capacity(limit.min(1024));
        let mut bytes = 0usize;
        for entry in self.table.range::<&[u8]>((lower, std::ops::Bound::Unbounded)).map_err(|e| self.error(e))? {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            bytes += k.value().len() + v.value().len();
            if out.len() == limit || (!out.is_empty() && bytes > bytes_max) {
                return Ok((out, true));
            }
            let (version, value) = self.decoded(k.value(), v.value())?;
            let (pk, sk) = key::decode(k.value());
            out.push((k.value().to_vec(), Record { pk, sk, version, value: value.to_vec() }));
        }
        Ok((out, false))
    }

    /// Up to `limit` records of `pk` within `range`, plus whether more
    /// follow; fewer when their keys and values would pass `bytes_max` (at
    /// least one, whatever its size, so a page always moves on).
    pub fn list(&self, pk: &str, range: &SkRange, limit: usize, bytes_max: usize) -> Result<(Vec<Record>, bool), StoreError> {
        let (lower, upper) = key::bounds(pk, range);
        if key::is_empty(&lower, &upper) {
            return Ok((Vec::new(), false));
        }
        let bounds = (slice_bound(&lower), slice_bound(&upper));
        let iter = self.table.range::<&[u8]>(bounds).map_err(|e| self.error(e))?;
        let mut out = Vec::with_capacity(limit.min(1024));
        let mut more = false;
        let mut bytes = 0usize;
        let mut push = |entry: RangeEntry<'_>| {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            bytes += k.value().len() + v.value().len();
            if out.len() == limit || (!out.is_empty() && bytes > bytes_max) {
                more = true;
                return Ok::<bool, StoreError>(false);
            }
            let (version, value) = self.decoded(k.value(), v.value())?;
            let (pk, sk) = key::decode(k.value());
            out.push(Record { pk, sk, version, value: value.to_vec() });
            Ok(true)
        };
        if range.reverse {
            for entry in iter.rev() {
                if !push(entry)? {
                    break;
                }
            }
        } else {
            for entry in iter {
                if !push(entry)? {
                    break;
                }
            }
        }
        Ok((out, more))
    }

    /// The highest version among `pk`'s records whose sk starts with
    /// `prefix` (a tree location's last change that left leaves there:
    /// the realtime protocol waits for its event before answering a stale
    /// transaction).
    pub fn max_version(&self, pk: &str, prefix: &str) -> Result<Option<u64>, StoreError> {
        layout::max_version(&self.table, pk, prefix).map_err(|e| self.error(e))
    }

    /// Visits `(sk, value)` of `pk`'s records whose sk starts with `prefix`,
    /// from `from` (inclusive, at least the prefix) on, in sk order, while
    /// `visit` returns true: the JSON tree's subtree reads (`store/tree.rs`).
    pub fn scan_prefix(&self, pk: &str, prefix: &str, from: Option<&str>, visit: &mut dyn FnMut(&str, &[u8]) -> bool) -> Result<(), StoreError> {
        layout::scan_prefix(&self.table, pk, prefix, from, visit).map_err(|e| self.error(e))
    }

    /// What a snapshot holds, in key order as stored: the outcome metadata
    /// (write ids, the not-applied record: `is_outcome_meta`) as stored, and
    /// then every record `(key encoding, [version][value])`, its checksum
    /// verified first (a damaged store is never copied into a snapshot) and
    /// left out (`snapshot_form`: restores add it again). Returns `(outcome metadata entries, records)` visited.
    /// The visitor's own error type passes through (store errors convert into it).
    pub fn scan_snapshot<E: From<StoreError>>(&self, mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), E>) -> Result<(u64, u64), E> {
        let (mut meta, mut records) = (0u64, 0u64);
        let mut record = Vec::new();
        for entry in self.table.range::<&[u8]>(&META_PREFIX[..]..).map_err(|e| self.error(e))? {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            let key = k.value();
            if key.starts_with(&META_PREFIX) {
                if !is_outcome_meta(key) {
                    continue;
                }
                meta += 1;
                visit(key, v.value())?;
            } else {
                records += 1;
                let (version, value) = self.decoded(key, v.value())?;
                snapshot_form(version, value, &mut record);
                visit(key, &record)?;
            }
        }
        Ok((meta, records))
    }

    /// Every record in key order (for verification and, later, snapshots).
    pub fn scan_all(&self, mut visit: impl FnMut(Record)) -> Result<(), StoreError> {
        let first_record = key::prefix_successor(&META_PREFIX).expect("meta prefix has a successor");
        for entry in self.table.range::<&[u8]>(first_record.as_slice()..).map_err(|e| self.error(e))? {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            let (version, value) = self.decoded(k.value(), v.value())?;
            let (pk, sk) = key::decode(k.value());
            visit(Record { pk, sk, version, value: value.to_vec() });
        }
        Ok(())
    }
}
