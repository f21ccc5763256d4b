//! The partition store: one redb database per partition.
//!
//! It holds the partition's records, the offset it has applied up to, the
//! state hash and counters, all changed in one write transaction per applied
//! batch, so the data and the offset it reflects can never disagree
//! (guarantee 3). Only the partition's apply loop writes (`apply`); readers
//! take MVCC read transactions that never block it and always see one applied
//! offset with exactly the records it reflects.
//!
//! Commits are not fsynced (the log is the source of truth) except every
//! `flush_durable`; after a crash the store reopens at its last durable
//! commit and the apply loop replays the log from there.

pub mod hash;
pub mod key;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, Table, TableDefinition};


use self::hash::StateHash;
pub use self::key::SkRange;

/// One table for records and metadata, so a read opens a single table.
/// Records: (pk, sk) key encoding → `[version: u64 LE][value JSON text]`.
/// Metadata: keys starting with `[0, 0]` (a pk of length 0, which no record
/// has) → u64 LE, or 32 bytes for the state hash.
const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("records");

/// The applied state, one 64-byte value written by every apply transaction
/// (one B-tree insert rather than five): `applied_next`, `applied_entries`,
/// `skipped_entries`, `record_count` (u64 LE each), then the 32-byte state hash.
const META_STATE: &[u8] = b"\0\0state";
const META_STATE_BYTES: usize = 64;
/// The partition count of the namespace this store belongs to.
const META_PARTITIONS: &[u8] = b"\0\0partitions";
/// The layout of this store's keys and values; a store of another layout is refused.
const META_FORMAT: &[u8] = b"\0\0format";
const FORMAT_VERSION: u64 = 1;
/// Every metadata key starts with this; no record key does (pk is never empty).
const META_PREFIX: [u8; 2] = [0, 0];
/// `\0\0w<write id>` -> `[offset u64 LE][outcome]`: write ids applied recently.
const META_WRITE_ID: &[u8] = b"\0\0w";
/// `\0\0x<offset u64 BE><write id>` -> empty: the same, by offset, for eviction.
const META_WRITE_ID_BY_OFFSET: &[u8] = b"\0\0x";
/// `\0\0n<offset u64 BE>` -> empty: a mutation at this offset decoded but did
/// not apply (a failed condition, a duplicate write id). Subscribers replaying
/// the log read this to skip it exactly as the apply loop did.
const META_NOT_APPLIED: &[u8] = b"\0\0n";
/// The lowest offset the not-applied journal covers: where this store began
/// applying (0, a restored snapshot's offset, or the offset at upgrade).
const META_JOURNAL_FROM: &[u8] = b"\0\0journal_from";

fn meta_u64(table: &impl ReadableTable<&'static [u8], &'static [u8]>, key: &[u8]) -> Result<u64, redb::StorageError> {
    Ok(table.get(key)?.map_or(0, |g| u64::from_le_bytes(g.value().try_into().expect("meta values are 8 bytes"))))
}

#[derive(Debug, thiserror::Error)]
#[error("store {path}: {message}")]
pub struct StoreError {
    pub path: String,
    pub message: String,
}

/// One record as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub pk: String,
    pub sk: String,
    pub version: u64,
    /// JSON text.
    pub value: Vec<u8>,
}

/// Applied-state summary, from one read transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreState {
    pub applied_next: u64,
    pub applied_entries: u64,
    pub skipped_entries: u64,
    pub record_count: u64,
    pub state_hash: StateHash,
}

pub struct PartitionStore {
    db: Database,
    path: Arc<PathBuf>,
}

fn encode_value(version: u64, value: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(8 + value.len());
    stored.extend_from_slice(&version.to_le_bytes());
    stored.extend_from_slice(value);
    stored
}

fn decode_value(stored: &[u8]) -> (u64, &[u8]) {
    assert!(stored.len() >= 8, "a stored value starts with its 8-byte version");
    (u64::from_le_bytes(stored[..8].try_into().unwrap()), &stored[8..])
}

impl PartitionStore {
    /// Opens or creates the store of a partition of a namespace of `partitions` partitions.
    pub fn open(path: &Path, partitions: u32, cache_bytes: usize) -> Result<PartitionStore, StoreError> {
        let err = |message: String| StoreError { path: path.display().to_string(), message };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
        }
        let db = Database::builder().set_cache_size(cache_bytes).create(path).map_err(|e| err(e.to_string()))?;
        let store = PartitionStore { db, path: Arc::new(path.to_path_buf()) };
        let txn = store.db.begin_write().map_err(|e| err(e.to_string()))?;
        {
            let mut meta = txn.open_table(RECORDS).map_err(|e| err(e.to_string()))?;
            let format = meta_u64(&meta, META_FORMAT).map_err(|e| err(e.to_string()))?;
            let is_empty = meta.first().map_err(|e| err(e.to_string()))?.is_none();
            match (format, is_empty) {
                (0, true) => {
                    meta.insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice()).map_err(|e| err(e.to_string()))?;
                }
                (FORMAT_VERSION, _) => {}
                (other, _) => {
                    return Err(err(format!(
                        "has store format {other}, this build reads format {FORMAT_VERSION}; move it away to rebuild it from the log"
                    )))
                }
            }
            let stored = meta_u64(&meta, META_PARTITIONS).map_err(|e| err(e.to_string()))?;
            let stored = (stored != 0).then_some(stored);
            match stored {
                None => {
                    meta.insert(META_PARTITIONS, u64::from(partitions).to_le_bytes().as_slice())
                        .map_err(|e| err(e.to_string()))?;
                }
                Some(p) if p == u64::from(partitions) => {}
                Some(p) => {
                    return Err(err(format!(
                        "belongs to a namespace of {p} partitions, not {partitions}; move it away to rebuild from the log"
                    )))
                }
            }
            if meta.get(META_JOURNAL_FROM).map_err(|e| err(e.to_string()))?.is_none() {
                let applied_next = read_state(&meta).map_err(|e| err(e.to_string()))?.applied_next;
                meta.insert(META_JOURNAL_FROM, applied_next.to_le_bytes().as_slice()).map_err(|e| err(e.to_string()))?;
            }
        }
        txn.commit().map_err(|e| err(e.to_string()))?;
        Ok(store)
    }

    fn error(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError { path: self.path.display().to_string(), message: e.to_string() }
    }

    /// A consistent read view.
    pub fn read(&self) -> Result<StoreReader, StoreError> {
        let txn: ReadTransaction = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(RECORDS).map_err(|e| self.error(e))?;
        Ok(StoreReader { table, path: self.path.clone() })
    }

    /// Applies one batch in one transaction. `f` sees the state as of the
    /// previous batch plus its own changes; the transaction commits only if
    /// `f` returns Ok. `durable` makes this commit (and all before it) survive
    /// a crash.
    pub fn apply<T>(&self, durable: bool, f: impl FnOnce(&mut ApplyTxn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut txn = self.db.begin_write().map_err(|e| self.error(e))?;
        let durability = if durable { Durability::Immediate } else { Durability::None };
        txn.set_durability(durability).map_err(|e| self.error(e))?;
        let result = {
            let mut records = txn.open_table(RECORDS).map_err(|e| self.error(e))?;
            let state = read_state(&records).map_err(|e| self.error(e))?;
            let mut apply = ApplyTxn { records: &mut records, state, path: self.path.as_path() };
            let result = f(&mut apply)?;
            let state = apply.state.clone();
            write_state(&mut records, &state).map_err(|e| self.error(e))?;
            result
        };
        txn.commit().map_err(|e| self.error(e))?;
        Ok(result)
    }

    /// Makes every commit so far durable (one fsync).
    pub fn flush_durable(&self) -> Result<(), StoreError> {
        self.apply(true, |_| Ok(()))
    }
}

fn read_state(table: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<StoreState, redb::StorageError> {
    let Some(guard) = table.get(META_STATE)? else {
        return Ok(StoreState {
            applied_next: 0,
            applied_entries: 0,
            skipped_entries: 0,
            record_count: 0,
            state_hash: StateHash::default(),
        });
    };
    let bytes = guard.value();
    assert_eq!(bytes.len(), META_STATE_BYTES, "the stored state is {META_STATE_BYTES} bytes");
    let get = |i: usize| -> Result<u64, redb::StorageError> { Ok(u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap())) };
    let state_hash = StateHash::from_bytes(&bytes[32..64]);
    Ok(StoreState {
        applied_next: get(0)?,
        applied_entries: get(1)?,
        skipped_entries: get(2)?,
        record_count: get(3)?,
        state_hash,
    })
}

fn write_state(table: &mut Table<&'static [u8], &'static [u8]>, state: &StoreState) -> Result<(), redb::StorageError> {
    let mut bytes = [0u8; META_STATE_BYTES];
    for (i, n) in [state.applied_next, state.applied_entries, state.skipped_entries, state.record_count].iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&n.to_le_bytes());
    }
    bytes[32..64].copy_from_slice(&state.state_hash.to_bytes());
    table.insert(META_STATE, bytes.as_slice())?;
    Ok(())
}

/// The state a restored store starts from (a snapshot's manifest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredState {
    pub applied_next: u64,
    pub applied_entries: u64,
    pub skipped_entries: u64,
}

impl PartitionStore {
    /// Builds a new store at `path` from raw records (`scan_raw`'s form, in key
    /// order) and the applied state they reflect, durably, then opens it.
    /// Writes to `path.restoring` and renames it into place only when complete,
    /// so a crash mid-restore leaves no half store at `path`. Returns the store
    /// and the state hash recomputed from the records (the caller compares it
    /// with the snapshot's).
    pub fn restore(
        path: &Path,
        partitions: u32,
        cache_bytes: usize,
        state: &RestoredState,
        records: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> Result<(PartitionStore, StateHash), StoreError> {
        let err = |message: String| StoreError { path: path.display().to_string(), message };
        assert!(!path.exists(), "restore never overwrites an existing store");
        let staging = path.with_extension("restoring");
        if staging.exists() {
            std::fs::remove_file(&staging).map_err(|e| err(format!("removing a stale {}: {e}", staging.display())))?;
        }
        let hash = {
            let store = PartitionStore::open(&staging, partitions, cache_bytes)?;
            let restored = store.apply(true, |tx| {
                let error = storage_error(tx.path);
                let mut previous: Option<Vec<u8>> = None;
                for (key, stored) in records {
                    assert!(key.len() >= 2 && key[..2] != META_PREFIX, "restored keys are record keys");
                    assert!(previous.as_ref().is_none_or(|p| *p < key), "restored records come in strictly increasing key order");
                    let (version, value) = decode_value(&stored);
                    tx.state.state_hash.add(&StateHash::of_record(&key, version, value));
                    tx.state.record_count += 1;
                    tx.records.insert(key.as_slice(), stored.as_slice()).map_err(&error)?;
                    previous = Some(key);
                }
                tx.state.applied_next = state.applied_next;
                // Outcomes below the snapshot are not known here.
                tx.records.insert(META_JOURNAL_FROM, state.applied_next.to_le_bytes().as_slice()).map_err(&error)?;
                tx.state.applied_entries = state.applied_entries;
                tx.state.skipped_entries = state.skipped_entries;
                Ok(tx.state.state_hash)
            })?;
            restored
        };
        std::fs::rename(&staging, path).map_err(|e| err(format!("moving the restored store into place: {e}")))?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| err(format!("syncing {}: {e}", dir.display())))?;
        }
        Ok((PartitionStore::open(path, partitions, cache_bytes)?, hash))
    }
}

/// Maps redb errors to store errors naming the database file.
fn storage_error(path: &Path) -> impl Fn(redb::StorageError) -> StoreError + '_ {
    move |e| StoreError { path: path.display().to_string(), message: e.to_string() }
}

/// The write side of one apply transaction.
pub struct ApplyTxn<'a, 't> {
    records: &'a mut Table<'t, &'static [u8], &'static [u8]>,
    state: StoreState,
    path: &'a Path,
}

impl ApplyTxn<'_, '_> {
    fn error(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError { path: self.path.display().to_string(), message: e.to_string() }
    }

    pub fn state(&self) -> &StoreState {
        &self.state
    }

    /// The version of `(pk, sk)` as of this transaction, if it exists.
    pub fn version_of(&self, pk: &str, sk: &str) -> Result<Option<u64>, StoreError> {
        let key = key::encode(pk, sk);
        let guard = self.records.get(key.as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map(|g| decode_value(g.value()).0))
    }

    pub fn put(&mut self, pk: &str, sk: &str, version: u64, value: &[u8]) -> Result<(), StoreError> {
        let key = key::encode(pk, sk);
        let stored = encode_value(version, value);
        let error = storage_error(self.path);
        let old = self.records.insert(key.as_slice(), stored.as_slice()).map_err(&error)?;
        let old_hash = old.map(|old| {
            let (old_version, old_value) = decode_value(old.value());
            StateHash::of_record(&key, old_version, old_value)
        });
        match old_hash {
            Some(old_hash) => self.state.state_hash.remove(&old_hash),
            None => self.state.record_count += 1,
        }
        self.state.state_hash.add(&StateHash::of_record(&key, version, value));
        Ok(())
    }

    pub fn delete(&mut self, pk: &str, sk: &str) -> Result<(), StoreError> {
        let key = key::encode(pk, sk);
        let error = storage_error(self.path);
        let old = self.records.remove(key.as_slice()).map_err(&error)?;
        let old_hash = old.map(|old| {
            let (old_version, old_value) = decode_value(old.value());
            StateHash::of_record(&key, old_version, old_value)
        });
        if let Some(old_hash) = old_hash {
            self.state.state_hash.remove(&old_hash);
            self.state.record_count -= 1;
        }
        Ok(())
    }

    /// The offset and stored outcome of `write_id`, if it was remembered
    /// (callers decide whether it is still inside their window).
    pub fn write_id_seen(&self, write_id: &[u8]) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let key = [META_WRITE_ID, write_id].concat();
        let guard = self.records.get(key.as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map(|g| {
            let value = g.value();
            (u64::from_le_bytes(value[..8].try_into().expect("write id entries start with an offset")), value[8..].to_vec())
        }))
    }

    /// Remembers that `write_id` was applied at `offset` with `outcome`.
    pub fn remember_write_id(&mut self, write_id: &[u8], offset: u64, outcome: &[u8]) -> Result<(), StoreError> {
        assert!(!write_id.is_empty(), "only non-empty write ids are remembered");
        let error = storage_error(self.path);
        let key = [META_WRITE_ID, write_id].concat();
        let value = [&offset.to_le_bytes()[..], outcome].concat();
        self.records.insert(key.as_slice(), value.as_slice()).map_err(&error)?;
        let by_offset = [META_WRITE_ID_BY_OFFSET, &offset.to_be_bytes()[..], write_id].concat();
        self.records.insert(by_offset.as_slice(), &[][..]).map_err(&error)?;
        Ok(())
    }

    /// Forgets up to `count_max` write ids remembered at offsets below
    /// `offset`, oldest first; returns how many. Bounded, so eviction spreads
    /// over batches instead of stalling one.
    pub fn forget_write_ids_below(&mut self, offset: u64, count_max: usize) -> Result<usize, StoreError> {
        let error = storage_error(self.path);
        let expired = self.keys_below(META_WRITE_ID_BY_OFFSET, offset, count_max)?;
        for by_offset in &expired {
            let at = &by_offset[META_WRITE_ID_BY_OFFSET.len()..META_WRITE_ID_BY_OFFSET.len() + 8];
            let write_id = &by_offset[META_WRITE_ID_BY_OFFSET.len() + 8..];
            self.records.remove(by_offset.as_slice()).map_err(&error)?;
            // The id may have been remembered again at a later offset: keep that.
            let key = [META_WRITE_ID, write_id].concat();
            let current_at = self.records.get(key.as_slice()).map_err(|e| self.error(e))?.map(|g| g.value()[..8].to_vec());
            if current_at.is_some_and(|current| u64::from_le_bytes(current.try_into().unwrap()) == u64::from_be_bytes(at.try_into().unwrap())) {
                self.records.remove(key.as_slice()).map_err(&error)?;
            }
        }
        Ok(expired.len())
    }

    /// Up to `count_max` keys `<prefix><offset u64 BE>...` with offsets
    /// below `offset`, oldest first (for bounded eviction).
    fn keys_below(&self, prefix: &[u8], offset: u64, count_max: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        let end = [prefix, &offset.to_be_bytes()[..]].concat();
        let mut keys = Vec::new();
        for entry in self.records.range::<&[u8]>(prefix..end.as_slice()).map_err(|e| self.error(e))?.take(count_max) {
            keys.push(entry.map_err(|e| self.error(e))?.0.value().to_vec());
        }
        Ok(keys)
    }

    /// Journals that the mutation at `offset` decoded but did not apply.
    pub fn record_not_applied(&mut self, offset: u64) -> Result<(), StoreError> {
        let key = [META_NOT_APPLIED, &offset.to_be_bytes()[..]].concat();
        self.records.insert(key.as_slice(), &[][..]).map_err(storage_error(self.path))?;
        Ok(())
    }

    /// Forgets up to `count_max` not-applied marks below `offset`, oldest first.
    pub fn forget_not_applied_below(&mut self, offset: u64, count_max: usize) -> Result<usize, StoreError> {
        let expired = self.keys_below(META_NOT_APPLIED, offset, count_max)?;
        for key in &expired {
            self.records.remove(key.as_slice()).map_err(storage_error(self.path))?;
        }
        Ok(expired.len())
    }

    /// Marks log entry `offset` applied (or skipped). Offsets only move forward.
    pub fn mark_applied(&mut self, offset: u64, skipped: bool) {
        assert!(
            offset >= self.state.applied_next,
            "offset {offset} is below applied_next {}: it would be applied twice",
            self.state.applied_next
        );
        self.state.applied_next = offset + 1;
        self.state.applied_entries += 1;
        if skipped {
            self.state.skipped_entries += 1;
        }
    }
}

/// A consistent read view of one partition.
pub struct StoreReader {
    table: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    path: Arc<PathBuf>,
}

impl StoreReader {
    fn error(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError { path: self.path.display().to_string(), message: e.to_string() }
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
        let guard = self.table.get(key.as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map(|g| {
            let (version, value) = decode_value(g.value());
            visit(version, value);
        })
        .is_some())
    }

    /// The lowest offset whose outcome the not-applied journal knows.
    pub fn journal_from(&self) -> Result<u64, StoreError> {
        meta_u64(&self.table, META_JOURNAL_FROM).map_err(|e| self.error(e))
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
            out.insert(u64::from_be_bytes(key[META_NOT_APPLIED.len()..].try_into().expect("journal keys end with an offset")));
        }
        Ok(out)
    }

    /// Up to `limit` records with keys after `after` (all records when
    /// `None`), in key order, plus whether more follow: a namespace-wide
    /// subscription's snapshot, page by page.
    pub fn scan_page(&self, after: Option<&[u8]>, limit: usize) -> Result<(Vec<(Vec<u8>, Record)>, bool), StoreError> {
        let first_record = key::prefix_successor(&META_PREFIX).expect("meta prefix has a successor");
        let lower = match after {
            Some(key) => std::ops::Bound::Excluded(key),
            None => std::ops::Bound::Included(first_record.as_slice()),
        };
        let mut out = Vec::with_capacity(limit.min(1024));
        for entry in self.table.range::<&[u8]>((lower, std::ops::Bound::Unbounded)).map_err(|e| self.error(e))? {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            if out.len() == limit {
                return Ok((out, true));
            }
            let (pk, sk) = key::decode(k.value());
            let (version, value) = decode_value(v.value());
            out.push((k.value().to_vec(), Record { pk, sk, version, value: value.to_vec() }));
        }
        Ok((out, false))
    }

    /// Up to `limit` records of `pk` within `range`, plus whether more follow.
    pub fn list(&self, pk: &str, range: &SkRange, limit: usize) -> Result<(Vec<Record>, bool), StoreError> {
        let (lower, upper) = key::bounds(pk, range);
        if key::is_empty(&lower, &upper) {
            return Ok((Vec::new(), false));
        }
        let bounds = (as_slice_bound(&lower), as_slice_bound(&upper));
        let iter = self.table.range::<&[u8]>(bounds).map_err(|e| self.error(e))?;
        let mut out = Vec::with_capacity(limit.min(1024));
        let mut more = false;
        let mut push = |entry: Result<(redb::AccessGuard<&[u8]>, redb::AccessGuard<&[u8]>), redb::StorageError>| {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            if out.len() == limit {
                more = true;
                return Ok::<bool, StoreError>(false);
            }
            let (pk, sk) = key::decode(k.value());
            let (version, value) = decode_value(v.value());
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

    /// Every record in key order as stored: `(key encoding, [version][value])`.
    /// Snapshots copy these bytes as they are.
    /// The visitor's own error type passes through (store errors convert into it).
    pub fn scan_raw<E: From<StoreError>>(&self, mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), E>) -> Result<(), E> {
        let first_record = key::prefix_successor(&META_PREFIX).expect("meta prefix has a successor");
        for entry in self.table.range::<&[u8]>(first_record.as_slice()..).map_err(|e| self.error(e))? {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            visit(k.value(), v.value())?;
        }
        Ok(())
    }

    /// Every record in key order (for verification and, later, snapshots).
    pub fn scan_all(&self, mut visit: impl FnMut(Record)) -> Result<(), StoreError> {
        let first_record = key::prefix_successor(&META_PREFIX).expect("meta prefix has a successor");
        for entry in self.table.range::<&[u8]>(first_record.as_slice()..).map_err(|e| self.error(e))? {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            let (pk, sk) = key::decode(k.value());
            let (version, value) = decode_value(v.value());
            visit(Record { pk, sk, version, value: value.to_vec() });
        }
        Ok(())
    }
}

fn as_slice_bound(b: &std::ops::Bound<Vec<u8>>) -> std::ops::Bound<&[u8]> {
    match b {
        std::ops::Bound::Included(v) => std::ops::Bound::Included(v.as_slice()),
        std::ops::Bound::Excluded(v) => std::ops::Bound::Excluded(v.as_slice()),
        std::ops::Bound::Unbounded => std::ops::Bound::Unbounded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, PartitionStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p0.redb"), 4, 1 << 20).unwrap();
        (dir, store)
    }

    #[test]
    fn apply_then_read_with_offset_and_hash() {
        let (_dir, store) = store();
        store
            .apply(false, |tx| {
                tx.put("u", "a", 0, b"1")?;
                tx.mark_applied(0, false);
                tx.put("u", "b", 1, b"2")?;
                tx.mark_applied(1, false);
                Ok(())
            })
            .unwrap();
        let reader = store.read().unwrap();
        let state = reader.state().unwrap();
        assert_eq!((state.applied_next, state.applied_entries, state.record_count), (2, 2, 2));
        assert_eq!(reader.get("u", "b").unwrap().unwrap().version, 1);
        assert!(reader.get("u", "c").unwrap().is_none());
        drop(reader);
        store
            .apply(true, |tx| {
                tx.delete("u", "b")?;
                tx.mark_applied(2, false);
                Ok(())
            })
            .unwrap();
        let state = store.read().unwrap().state().unwrap();
        let mut expected = StateHash::default();
        expected.add(&StateHash::of_record(&key::encode("u", "a"), 0, b"1"));
        assert_eq!(state.state_hash, expected);
        assert_eq!(state.record_count, 1);
    }

    #[test]
    fn failed_apply_changes_nothing() {
        let (_dir, store) = store();
        let result: Result<(), StoreError> = store.apply(false, |tx| {
            tx.put("u", "a", 0, b"1")?;
            Err(StoreError { path: String::new(), message: "boom".into() })
        });
        assert!(result.is_err());
        assert!(store.read().unwrap().get("u", "a").unwrap().is_none());
    }

    #[test]
    fn list_pages_both_ways() {
        let (_dir, store) = store();
        store
            .apply(false, |tx| {
                for (i, sk) in ["a", "b1", "b2", "b3", "c"].iter().enumerate() {
                    tx.put("p", sk, i as u64, b"0")?;
                }
                tx.put("q", "b1", 9, b"0")?;
                Ok(())
            })
            .unwrap();
        let reader = store.read().unwrap();
        let sks = |range: SkRange, limit| {
            let (items, more) = reader.list("p", &range, limit).unwrap();
            (items.into_iter().map(|r| r.sk).collect::<Vec<_>>(), more)
        };
        assert_eq!(sks(SkRange::default(), 10).0, ["a", "b1", "b2", "b3", "c"]);
        assert_eq!(sks(SkRange { prefix: Some("b".into()), ..Default::default() }, 2), (vec!["b1".into(), "b2".into()], true));
        assert_eq!(
            sks(SkRange { prefix: Some("b".into()), cursor: Some("b2".into()), ..Default::default() }, 2),
            (vec!["b3".into()], false)
        );
        assert_eq!(sks(SkRange { reverse: true, ..Default::default() }, 2), (vec!["c".into(), "b3".into()], true));
        assert_eq!(
            sks(SkRange { start: Some("b2".into()), end: Some("c".into()), ..Default::default() }, 10).0,
            ["b2", "b3"]
        );
    }

    #[test]
    fn a_restored_store_knows_outcomes_only_from_its_snapshot_on() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = PartitionStore::open(&dir.path().join("fresh"), 1, 1 << 20).unwrap();
        assert_eq!(fresh.read().unwrap().journal_from().unwrap(), 0);
        let state = RestoredState { applied_next: 42, applied_entries: 42, skipped_entries: 0 };
        let (restored, _) = PartitionStore::restore(&dir.path().join("restored"), 1, 1 << 20, &state, Vec::new()).unwrap();
        let reader = restored.read().unwrap();
        assert_eq!((reader.applied_next().unwrap(), reader.journal_from().unwrap()), (42, 42));
    }

    #[test]
    fn unknown_store_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.redb");
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(RECORDS).unwrap().insert(META_FORMAT, 99u64.to_le_bytes().as_slice()).unwrap();
            txn.commit().unwrap();
        }
        let err = PartitionStore::open(&path, 4, 1 << 20).err().expect("refused");
        assert!(err.message.contains("format 99"), "{err}");
    }

    #[test]
    fn partition_count_mismatch_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.redb");
        drop(PartitionStore::open(&path, 4, 1 << 20).unwrap());
        assert!(PartitionStore::open(&path, 8, 1 << 20).is_err());
        assert!(PartitionStore::open(&path, 4, 1 << 20).is_ok());
    }
}
