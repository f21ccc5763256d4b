//! `PartitionStore`: a partition's redb database — opening it (its format
//! checked, an older one upgraded), the apply transaction, read views,
//! durability, and building one beside its final path (restore).

use super::damaged::DamageFound;
use super::hash::StateHash;
use super::history::{HistoryEntry, HistoryNotes, HISTORY};
use super::key;
use super::layout::{
    decode_snapshot_form, encode_value, meta_u64, read_failure, read_state, storage_error, write_state, FORMAT_VERSION, LOG_IDENTITY_BYTES_MAX,
    META_FORMAT, META_LOG, META_NOT_APPLIED_FROM, META_PARTITIONS, META_PREFIX, META_UPGRADED_TO, RECORDS,
};
use super::{is_outcome_meta, ApplyTxn, StoreReader};
use redb::{Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
#[error("store {path}: {message}")]
pub struct StoreError {
    pub path: String,
    pub message: String,
    /// Not a failure of the store: it may not be read yet (a partition
    /// being rebuilt, `PartitionHandle::rebuilding`), so 503, not 500.
    pub unavailable: bool,
    /// The store is damaged (a record failed its checksum, redb found a
    /// page corrupted): nothing more is served from it, and its partition
    /// is rebuilt (`store/damaged.rs`, `apply/rebuild.rs`). Also
    /// `unavailable`: a reader may retry once the rebuild is done.
    pub damaged: bool,
}

/// Why a store could not be opened (`PartitionStore::open_checked`).
#[derive(Debug)]
pub enum OpenFailure {
    /// The file fails its checks (a page's checksum, its length, its
    /// layout): nothing in it can be trusted. Set aside and rebuilt
    /// (`store/damaged.rs`).
    Damaged(String),
    /// Anything else (an I/O error such as a full disk or a permission,
    /// another format or partition count): moving the file would not help.
    Other(StoreError),
}

/// Damage, or another failure: redb says `Corrupted` for a page that fails
/// its checksum, a layout that does not fit the file's length and roots
/// that do not verify; a header naming an older redb format cannot be one
/// Tern wrote; a read past the file's end is a file cut short.
fn classify(path: &Path, e: redb::Error) -> OpenFailure {
    use std::io::ErrorKind;
    match e {
        // The one format after redb's 3 is a newer build's, not damage:
        // setting every store aside on a downgrade would lose them.
        redb::Error::Corrupted(message) if message.starts_with("Expected file format version") && message.ends_with("found 4") => {
            OpenFailure::Other(StoreError {
                path: path.display().to_string(),
                message: format!("written by a newer build's storage engine ({message}): run that build, or move the store away to rebuild it"),
                unavailable: false,
                damaged: false,
            })
        }
        redb::Error::Corrupted(message) => OpenFailure::Damaged(format!("DB corrupted: {message}")),
        redb::Error::UpgradeRequired(version) => OpenFailure::Damaged(format!("its header names redb file format {version}, which Tern never wrote")),
        redb::Error::Io(io) if matches!(io.kind(), ErrorKind::UnexpectedEof | ErrorKind::InvalidData) => {
            OpenFailure::Damaged(format!("unreadable: {io}"))
        }
        other => OpenFailure::Other(StoreError { path: path.display().to_string(), message: other.to_string(), unavailable: false, damaged: false }),
    }
}

/// A failure of a running store; damage (redb's `Corrupted`) is reported
/// to `damage` too, so the partition is rebuilt, and answered as unavailable.
pub(super) fn failure(path: &Path, damage: &DamageFound, e: redb::Error) -> StoreError {
    match e {
        redb::Error::Corrupted(message) => damaged(path, damage, &format!("DB corrupted: {message}")),
        other => StoreError { path: path.display().to_string(), message: other.to_string(), unavailable: false, damaged: false },
    }
}

/// Damage found in a running store: reported, and the error a reader sees.
pub(super) fn damaged(path: &Path, damage: &DamageFound, why: &str) -> StoreError {
    damage.report(path, why);
    StoreError {
        path: path.display().to_string(),
        message: format!("{why}; the partition is taken out of service and rebuilt from snapshots and the log"),
        unavailable: true,
        damaged: true,
    }
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
    pub(super) db: Database,
    pub(super) path: Arc<PathBuf>,
    /// Damage found while it runs, by any reader or writer (`damaged.rs`).
    pub(super) damage: Arc<DamageFound>,
    /// Whether its history table may hold versions (`history.rs`): set at
    /// open and by every apply transaction that writes history.
    pub(super) history_kept: std::sync::atomic::AtomicBool,
}

impl PartitionStore {
    /// Opens or creates the store of a partition of a namespace of `partitions` partitions.
    pub fn open(path: &Path, partitions: u32, cache_bytes: usize) -> Result<PartitionStore, StoreError> {
        Self::open_checked(path, partitions, cache_bytes).map_err(|failure| match failure {
            OpenFailure::Damaged(message) => StoreError { path: path.display().to_string(), message, unavailable: false, damaged: false },
            OpenFailure::Other(e) => e,
        })
    }

    /// Opens or creates a store, every page of it verified against its
    /// checksum first (redb's integrity check: a plain open trusts a file
    /// closed cleanly, and may panic on one damaged since). A newest commit
    /// that fails while the one before verifies is rolled back to it, as
    /// after a crash: the apply loop replays the log from there. Tells a
    /// damaged file (`OpenFailure::Damaged`: set it aside and rebuild,
    /// `damaged.rs`) from any other failure.
    pub fn open_checked(path: &Path, partitions: u32, cache_bytes: usize) -> Result<PartitionStore, OpenFailure> {
        let other =
            |message: String| OpenFailure::Other(StoreError { path: path.display().to_string(), message, unavailable: false, damaged: false });
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| other(e.to_string()))?;
        }
        // A store is never empty once made (redb writes its header at
        // once): an empty file is one a crash or a filesystem emptied.
        if std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
            return Err(OpenFailure::Damaged("the file is empty".to_string()));
        }
        let db =
            Database::builder().set_cache_size(cache_bytes).set_check_integrity_on_open(true).create(path).map_err(|e| classify(path, e.into()))?;
        let store = PartitionStore { db, path: Arc::new(path.to_path_buf()), damage: Arc::default(), history_kept: Default::default() };
        let txn = store.db.begin_write().map_err(|e| classify(path, e.into()))?;
        {
            let mut meta = txn.open_table(RECORDS).map_err(|e| classify(path, e.into()))?;
            let format = meta_u64(&meta, META_FORMAT).map_err(|e| classify(path, e.into()))?;
            let is_empty = meta.first().map_err(|e| classify(path, e.into()))?.is_none();
            match (format, is_empty) {
                (0, true) => {
                    meta.insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice()).map_err(|e| classify(path, e.into()))?;
                }
                (FORMAT_VERSION, _) => {}
                (1, _) => upgrade_from_format_1(&mut meta).map_err(|e| classify(path, e.into()))?,
                // Upgraded to 3 after this transaction, in bounded ones (`upgrade_from_format_2`).
                (2, _) => {}
                (other_format, _) => {
                    return Err(other(format!(
                        "has store format {other_format}, this build reads format {FORMAT_VERSION}; move it away to rebuild it from the log"
                    )))
                }
            }
            let stored = meta_u64(&meta, META_PARTITIONS).map_err(|e| classify(path, e.into()))?;
            let stored = (stored != 0).then_some(stored);
            match stored {
                None => {
                    meta.insert(META_PARTITIONS, u64::from(partitions).to_le_bytes().as_slice()).map_err(|e| classify(path, e.into()))?;
                }
                Some(p) if p == u64::from(partitions) => {}
                Some(p) => {
                    return Err(other(format!("belongs to a namespace of {p} partitions, not {partitions}; move it away to rebuild from the log")))
                }
            }
            if meta.get(META_NOT_APPLIED_FROM).map_err(|e| classify(path, e.into()))?.is_none() {
                let applied_next = read_state(&meta).map_err(|e| classify(path, e.into()))?.applied_next;
                meta.insert(META_NOT_APPLIED_FROM, applied_next.to_le_bytes().as_slice()).map_err(|e| classify(path, e.into()))?;
            }
        }
        txn.commit().map_err(|e| classify(path, e.into()))?;
        store.upgrade_from_format_2().map_err(|e| classify(path, e))?;
        let history_kept = store.history_at_open().map_err(|e| classify(path, e))?;
        store.history_kept.store(history_kept, std::sync::atomic::Ordering::Relaxed);
        Ok(store)
    }

    pub(super) fn error(&self, e: impl Into<redb::Error>) -> StoreError {
        failure(&self.path, &self.damage, e.into())
    }

    /// Damage found in this store while it runs (a record failing its
    /// checksum, a page redb found corrupted), if any: the apply loop
    /// rebuilds its partition.
    pub fn damage(&self) -> &Arc<DamageFound> {
        &self.damage
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A consistent read view.
    pub fn read(&self) -> Result<StoreReader, StoreError> {
        let txn: ReadTransaction = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(RECORDS).map_err(|e| self.error(e))?;
        Ok(StoreReader { table, path: self.path.clone(), damage: self.damage.clone() })
    }

    /// Applies one batch in one transaction. `f` sees the state as of the
    /// previous batch plus its own changes; the transaction commits only if
    /// `f` returns Ok. `durable` makes this commit (and all before it) survive
    /// a crash.
    pub fn apply<T>(&self, durable: bool, f: impl FnOnce(&mut ApplyTxn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut txn = self.db.begin_write().map_err(|e| self.error(e))?;
        let durability = if durable { Durability::Immediate } else { Durability::None };
        txn.set_durability(durability).map_err(|e| self.error(e))?;
        let (result, history_kept) = {
            let mut records = txn.open_table(RECORDS).map_err(|e| self.error(e))?;
            let state = read_state(&records).map_err(|e| self.error(e))?;
            let history = HistoryNotes { table_has_entries: self.history_kept.load(std::sync::atomic::Ordering::Relaxed), ..Default::default() };
            let mut apply = ApplyTxn { records: &mut records, state, path: self.path.as_path(), damage: &self.damage, history };
            let result = f(&mut apply)?;
            let state = apply.state.clone();
            let history = std::mem::take(&mut apply.history);
            write_state(&mut records, &state).map_err(|e| self.error(e))?;
            let mut history_kept = None;
            if !history.noted.is_empty() {
                let mut table = txn.open_table(HISTORY).map_err(|e| self.error(e))?;
                history_kept = Some(super::history::write(&mut table, &history).map_err(|e| self.error(e))?);
            }
            (result, history_kept)
        };
        // Raised at once (harmless if the commit fails: a note is only
        // made when it need not be), lowered only once the emptying is
        // committed: else a replay would skip the trims it must repeat.
        if history_kept == Some(true) {
            self.history_kept.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        txn.commit().map_err(|e| self.error(e))?;
        if history_kept == Some(false) {
            self.history_kept.store(false, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(result)
    }

    /// The newest `max` versions of `(pk, sk)`, newest first (`history.rs`;
    /// none when its namespace keeps no history).
    pub fn history(&self, pk: &str, sk: &str, max: u32) -> Result<Vec<HistoryEntry>, StoreError> {
        let txn: ReadTransaction = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(HISTORY) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.error(e)),
        };
        super::history::read(&table, pk, sk, max).map_err(|e| read_failure(&self.path, &self.damage, e))
    }

    /// Whether the history table exists and holds a version.
    fn history_at_open(&self) -> Result<bool, redb::Error> {
        let txn = self.db.begin_read()?;
        match txn.open_table(HISTORY) {
            Ok(table) => Ok(!table.is_empty()?),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The log this store's offsets are positions in, as recorded
    /// (`set_log_identity`); None before one was.
    pub fn log_identity(&self) -> Result<Option<String>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(RECORDS).map_err(|e| self.error(e))?;
        let value = table.get(META_LOG).map_err(|e| self.error(e))?;
        Ok(value.map(|v| String::from_utf8_lossy(v.value()).into_owned()))
    }

    /// Records the log this store's offsets are positions in (durably).
    pub fn set_log_identity(&self, identity: &str) -> Result<(), StoreError> {
        assert!(identity.len() <= LOG_IDENTITY_BYTES_MAX, "a log identity is at most LOG_IDENTITY_BYTES_MAX bytes");
        let mut txn = self.db.begin_write().map_err(|e| self.error(e))?;
        txn.set_durability(redb::Durability::Immediate).map_err(|e| self.error(e))?;
        {
            let mut table = txn.open_table(RECORDS).map_err(|e| self.error(e))?;
            table.insert(META_LOG, identity.as_bytes()).map_err(|e| self.error(e))?;
        }
        txn.commit().map_err(|e| self.error(e))
    }

    /// Makes every commit so far durable (one fsync).
    pub fn flush_durable(&self) -> Result<(), StoreError> {
        self.apply(true, |_| Ok(()))
    }
}

/// Format 1 → 2: the state hash starts covering the outcome metadata (write
/// ids, the not-applied record), so it is added once here, in the same
/// transaction that records the new format.
pub(super) fn upgrade_from_format_1(table: &mut redb::Table<&'static [u8], &'static [u8]>) -> Result<(), redb::StorageError> {
    let mut state = read_state(table)?;
    let first_record = key::prefix_successor(&META_PREFIX).expect("meta prefix has a successor");
    let mut added = 0u64;
    for entry in table.range::<&[u8]>(&META_PREFIX[..]..first_record.as_slice())? {
        let (k, v) = entry?;
        if is_outcome_meta(k.value()) {
            state.state_hash.add(&StateHash::of_meta(k.value(), v.value()));
            added += 1;
        }
    }
    write_state(table, &state)?;
    table.insert(META_FORMAT, 2u64.to_le_bytes().as_slice())?;
    tracing::info!(outcome_meta_entries = added, "store upgraded from format 1 to 2");
    Ok(())
}

/// Records rewritten with their checksum per transaction of the format 2 →
/// 3 upgrade, and their bytes (at least one record per transaction, whatever
/// its size): bound the transaction's memory whatever the store's size.
const UPGRADE_RECORDS_PER_TXN_MAX: usize = 10_000;
const UPGRADE_BYTES_PER_TXN_MAX: usize = 64 << 20;

impl PartitionStore {
    /// Format 2 → 3: every record is rewritten with its checksum
    /// (`encode_value`), in durable transactions of at most
    /// `UPGRADE_RECORDS_PER_TXN_MAX` records and `UPGRADE_BYTES_PER_TXN_MAX`
    /// bytes, each recording the last key it rewrote (`META_UPGRADED_TO`), so
    /// a crash midway resumes where it stopped and never checksums a record
    /// twice. The first one already sets format 3, so an older build refuses
    /// a store half upgraded rather than read checksums as values; the last
    /// removes the mark. Runs at open, before any read: records past the mark
    /// are still of format 2.
    fn upgrade_from_format_2(&self) -> Result<(), redb::Error> {
        let started = std::time::Instant::now();
        let mut rewritten = 0u64;
        loop {
            let txn = self.db.begin_write()?;
            let done = {
                let mut table = txn.open_table(RECORDS)?;
                let upgraded_to = table.get(META_UPGRADED_TO)?.map(|g| g.value().to_vec());
                match (meta_u64(&table, META_FORMAT)?, &upgraded_to) {
                    (2, _) | (FORMAT_VERSION, Some(_)) => {}
                    _ => return Ok(()),
                }
                let first_record = key::prefix_successor(&META_PREFIX).expect("meta prefix has a successor");
                let lower = match &upgraded_to {
                    Some(key) => std::ops::Bound::Excluded(key.as_slice()),
                    None => std::ops::Bound::Included(first_record.as_slice()),
                };
                let (mut batch, mut bytes, mut full) = (Vec::new(), 0usize, false);
                for entry in table.range::<&[u8]>((lower, std::ops::Bound::Unbounded))? {
                    if batch.len() == UPGRADE_RECORDS_PER_TXN_MAX || bytes >= UPGRADE_BYTES_PER_TXN_MAX {
                        full = true;
                        break;
                    }
                    let (k, v) = entry?;
                    let Some((version, value)) = decode_snapshot_form(v.value()) else {
                        return Err(redb::Error::Corrupted(format!(
                            "a format-2 record {} is {} bytes, shorter than its version",
                            key::describe(k.value()),
                            v.value().len()
                        )));
                    };
                    bytes += k.value().len() + v.value().len();
                    batch.push((k.value().to_vec(), encode_value(k.value(), version, value)));
                }
                for (key, stored) in &batch {
                    table.insert(key.as_slice(), stored.as_slice())?;
                }
                rewritten += batch.len() as u64;
                table.insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())?;
                match batch.last() {
                    Some((last, _)) if full => {
                        table.insert(META_UPGRADED_TO, last.as_slice())?;
                    }
                    _ => {
                        table.remove(META_UPGRADED_TO)?;
                    }
                }
                !full
            };
            txn.commit()?;
            if done {
                tracing::info!(store = %self.path.display(), records = rewritten, elapsed_ms = started.elapsed().as_millis() as u64, "store upgraded from format 2 to 3 (record checksums)");
                return Ok(());
            }
        }
    }
}

/// The state a restored store starts from (a snapshot's manifest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredState {
    pub applied_next: u64,
    pub applied_entries: u64,
    pub skipped_entries: u64,
    /// The lowest offset whose outcome the snapshot's not-applied record knows.
    pub not_applied_from: u64,
}

/// Most records a restore writes in one transaction: restoring commits in
/// batches, so what one transaction tracks stays bounded however large the
/// snapshot (redb keeps at most half its cache of dirty pages in memory).
const RESTORE_RECORDS_PER_TXN_MAX: usize = 100_000;
/// Most bytes of keys and values a restore writes in one transaction.
const RESTORE_BYTES_PER_TXN_MAX: usize = 64 << 20;

impl PartitionStore {
    /// Builds a new store at `path` from raw entries (`scan_snapshot`'s form:
    /// outcome metadata and records, in key order) and the applied state they
    /// reflect, durably, then opens it. Writes to `path.restoring` and renames
    /// it into place only when complete, so a crash mid-restore leaves no half
    /// store at `path`; an existing store at `path` is replaced only by the
    /// rename (`replace`: a stale store the log has moved past). Returns the
    /// store and the state hash recomputed from the entries (the caller
    /// compares it with the snapshot's).
    ///
    /// The entries are consumed as they come, in transactions of at most
    /// `RESTORE_RECORDS_PER_TXN_MAX` records or `RESTORE_BYTES_PER_TXN_MAX`
    /// bytes (not durable: the staging file is thrown away unless the last
    /// one, durable, completes), so memory does not grow with the snapshot.
    /// `progress` hears the records written so far after each.
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        path: &Path,
        partitions: u32,
        cache_bytes: usize,
        state: &RestoredState,
        entries: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
        replace: bool,
        progress: &mut dyn FnMut(u64),
        verify: impl FnOnce(StateHash, u64) -> Result<(), String>,
    ) -> Result<(PartitionStore, StateHash), StoreError> {
        let err = |message: String| StoreError { path: path.display().to_string(), message, unavailable: false, damaged: false };
        assert!(replace || !path.exists(), "restore replaces an existing store only when asked to");
        assert!(state.not_applied_from <= state.applied_next, "the not-applied record starts at or below the applied offset");
        let staging = path.with_extension("restoring");
        if staging.exists() {
            std::fs::remove_file(&staging).map_err(|e| err(format!("removing a stale {}: {e}", staging.display())))?;
        }
        let built = Self::restore_into(&staging, partitions, cache_bytes, state, entries, progress);
        let (hash, record_count) = match built {
            Ok(built) => built,
            Err(e) => {
                let _ = std::fs::remove_file(&staging);
                return Err(e);
            }
        };
        // Checked before it takes the store's place: a store is only ever
        // replaced by one that verified.
        if let Err(reason) = verify(hash, record_count) {
            let _ = std::fs::remove_file(&staging);
            return Err(err(reason));
        }
        std::fs::rename(&staging, path).map_err(|e| err(format!("moving the restored store into place: {e}")))?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| err(format!("syncing {}: {e}", dir.display())))?;
        }
        Ok((PartitionStore::open(path, partitions, cache_bytes)?, hash))
    }

    /// Writes the entries into a new store at `staging` in bounded
    /// transactions, then the applied state, durably. Returns the state hash
    /// and record count it computed.
    fn restore_into(
        staging: &Path,
        partitions: u32,
        cache_bytes: usize,
        state: &RestoredState,
        entries: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(StateHash, u64), StoreError> {
        let store = PartitionStore::open(staging, partitions, cache_bytes)?;
        let mut entries = entries.into_iter();
        let mut previous: Option<Vec<u8>> = None;
        let mut written: u64 = 0;
        loop {
            let more = store.apply(false, |tx| {
                let more = Self::restore_batch(tx, &mut entries, &mut previous)?;
                written = tx.state.record_count;
                Ok(more)
            })?;
            progress(written);
            if !more {
                break;
            }
        }
        let restored = store.apply(true, |tx| {
            let error = storage_error(tx.path, tx.damage);
            tx.state.applied_next = state.applied_next;
            tx.records.insert(META_NOT_APPLIED_FROM, state.not_applied_from.to_le_bytes().as_slice()).map_err(&error)?;
            tx.state.applied_entries = state.applied_entries;
            tx.state.skipped_entries = state.skipped_entries;
            Ok((tx.state.state_hash, tx.state.record_count))
        })?;
        assert_eq!(restored.1, written, "the last transaction of a restore writes no record");
        Ok(restored)
    }

    /// One transaction's worth of entries; false once they are all written.
    fn restore_batch(
        tx: &mut ApplyTxn,
        entries: &mut impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
        previous: &mut Option<Vec<u8>>,
    ) -> Result<bool, StoreError> {
        let error = storage_error(tx.path, tx.damage);
        let (mut records, mut bytes) = (0usize, 0usize);
        while records < RESTORE_RECORDS_PER_TXN_MAX && bytes < RESTORE_BYTES_PER_TXN_MAX {
            let Some((key, stored)) = entries.next() else { return Ok(false) };
            assert!(previous.as_ref().is_none_or(|p| *p < key), "restored entries come in strictly increasing key order");
            bytes += key.len() + stored.len();
            if is_outcome_meta(&key) {
                tx.put_meta(&key, &stored)?;
            } else {
                assert!(key.len() >= 2 && key[..2] != META_PREFIX, "restored keys are outcome metadata or record keys");
                // Snapshots carry `[version][value]`; the store adds the checksum.
                let Some((version, value)) = decode_snapshot_form(&stored) else {
                    return Err(tx.error_message(format!(
                        "a snapshot's record {} is {} bytes, shorter than its version",
                        key::describe(&key),
                        stored.len()
                    )));
                };
                tx.state.state_hash.add(&StateHash::of_record(&key, version, value));
                tx.state.record_count += 1;
                tx.records.insert(key.as_slice(), encode_value(&key, version, value).as_slice()).map_err(&error)?;
                records += 1;
            }
            *previous = Some(key);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SkRange;

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
            Err(StoreError { path: String::new(), message: "boom".into(), unavailable: false, damaged: false })
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
            let (items, more) = reader.list("p", &range, limit, usize::MAX).unwrap();
            (items.into_iter().map(|r| r.sk).collect::<Vec<_>>(), more)
        };
        assert_eq!(sks(SkRange::default(), 10).0, ["a", "b1", "b2", "b3", "c"]);
        assert_eq!(sks(SkRange { prefix: Some("b".into()), ..Default::default() }, 2), (vec!["b1".into(), "b2".into()], true));
        assert_eq!(sks(SkRange { prefix: Some("b".into()), page_after: Some("b2".into()), ..Default::default() }, 2), (vec!["b3".into()], false));
        assert_eq!(sks(SkRange { reverse: true, ..Default::default() }, 2), (vec!["c".into(), "b3".into()], true));
        assert_eq!(sks(SkRange { start: Some("b2".into()), end: Some("c".into()), ..Default::default() }, 10).0, ["b2", "b3"]);
        // A byte bound ends a page early, never before its first record.
        let (one, more) = reader.list("p", &SkRange::default(), 10, 1).unwrap();
        assert_eq!((one.len(), more), (1, true));
        let (two, more) = reader.list("p", &SkRange::default(), 10, 2 * (one[0].value.len() + 16)).unwrap();
        assert!(!two.is_empty() && two.len() < 5 && more, "{}", two.len());
        let (page, more) = reader.scan_page(None, 10, 1).unwrap();
        assert_eq!((page.len(), more), (1, true));
    }

    #[test]
    fn a_restored_store_knows_outcomes_from_its_snapshots_not_applied_from_on() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = PartitionStore::open(&dir.path().join("fresh"), 1, 1 << 20).unwrap();
        assert_eq!(fresh.read().unwrap().not_applied_from().unwrap(), 0);
        let state = RestoredState { applied_next: 42, applied_entries: 42, skipped_entries: 0, not_applied_from: 7 };
        let (restored, _) =
            PartitionStore::restore(&dir.path().join("restored"), 1, 1 << 20, &state, Vec::new(), false, &mut |_| {}, |_, _| Ok(())).unwrap();
        let reader = restored.read().unwrap();
        assert_eq!((reader.applied_next().unwrap(), reader.not_applied_from().unwrap()), (42, 7));
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

    /// Writes `count` records `pk<i>` with values naming `i`, durably, through a small cache.
    fn store_with_records(path: &Path, count: u64) -> PartitionStore {
        let store = PartitionStore::open(path, 4, 64 * 1024).unwrap();
        store
            .apply(true, |tx| {
                for i in 0..count {
                    tx.put(&format!("pk{i}"), "", i, format!("{{\"value\":\"value-{i:06}\",\"pad\":\"{}\"}}", "x".repeat(100)).as_bytes())?;
                    tx.mark_applied(i, false);
                }
                Ok(())
            })
            .unwrap();
        store
    }

    /// Flips one byte of the value `needle` where the file holds it.
    fn flip_on_disk(path: &Path, needle: &[u8]) {
        let mut bytes = std::fs::read(path).unwrap();
        let at = bytes.windows(needle.len()).position(|w| w == needle).expect("the value is in the file");
        bytes[at + needle.len() - 1] ^= 0x01;
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .write_at(&bytes[at + needle.len() - 1..at + needle.len()], (at + needle.len() - 1) as u64)
            .unwrap();
    }

    /// Issue 37: redb checks its pages' checksums only when it opens a file;
    /// a record damaged on disk while the store runs was served as it read
    /// (a wrong value: `"value-000777"` read as `"value-000776"`). Each
    /// record now carries its own checksum, checked on every read: a damaged
    /// one is an error (503, never its bytes), and the store reports the
    /// damage so its partition is rebuilt.
    #[test]
    fn a_record_damaged_on_disk_while_running_is_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.redb");
        let store = store_with_records(&path, 2_000);
        assert!(store.damage().why().is_none());
        flip_on_disk(&path, b"value-000777");
        // Other reads push the damaged page out of redb's small cache.
        for i in (0..2_000).step_by(7) {
            let _ = store.read().unwrap().get(&format!("pk{i}"), "");
        }
        let error = store.read().unwrap().get("pk777", "").expect_err("a damaged record is never served");
        assert!(error.damaged && error.unavailable, "{error}");
        assert!(error.message.contains("fails its checksum") && !error.message.contains("pk777"), "no key in what a reader sees: {error}");
        assert!(store.damage().why().is_some_and(|why| why.contains("fails its checksum")));
        let mut scanned = Vec::new();
        let scan = store.read().unwrap().scan_all(|record| scanned.push(record.pk));
        assert!(scan.expect_err("a scan stops at the damaged record").damaged);
        assert!(!scanned.contains(&"pk777".to_string()));
        let snapshot = store.read().unwrap().scan_snapshot::<StoreError>(|_, _| Ok(()));
        assert!(snapshot.expect_err("a damaged store is never copied into a snapshot").damaged);
        // The apply transaction checks too: a write over the damaged record fails, naming damage.
        let write = store.apply(false, |tx| tx.put("pk777", "", 5_000, b"1"));
        assert!(write.expect_err("the old record's checksum fails").damaged);
    }

    /// A whole scrub pass, `entries_max` entries a step.
    fn scrub(store: &PartitionStore, entries_max: usize) -> Result<crate::store::ScrubOutcome, StoreError> {
        let mut pass = store.scrub_begin()?;
        loop {
            if let Some(outcome) = store.scrub_step(&mut pass, entries_max)? {
                return Ok(outcome);
            }
        }
    }

    /// The log identity a store records describes the store: it is no
    /// outcome metadata, so neither the state hash nor the scrub counts it.
    /// Failed before its key was moved off the journal lanes' prefix: the
    /// scrub reported the store damaged.
    #[test]
    fn the_log_a_store_records_leaves_its_state_and_scrub_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_records(&dir.path().join("p.redb"), 50);
        let before = store.read().unwrap().state().unwrap();
        assert_eq!(store.log_identity().unwrap(), None);
        store.set_log_identity("embedded:abc/ns#123").unwrap();
        assert_eq!(store.log_identity().unwrap().as_deref(), Some("embedded:abc/ns#123"));
        assert!(!crate::store::is_outcome_meta(META_LOG));
        assert_eq!(store.read().unwrap().state().unwrap().state_hash, before.state_hash);
        assert_eq!(scrub(&store, 10).unwrap(), crate::store::ScrubOutcome::Intact { records: 50 });
    }

    /// Issue 37: a record damaged on disk that no one reads stays damaged
    /// until a snapshot meets it (and a damaged key makes a point read miss
    /// it). The scrub reads every record, a chunk at a time, and reports the
    /// damage, so the partition is rebuilt before a reader meets it.
    #[test]
    fn the_scrub_finds_a_damaged_record_that_no_one_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.redb");
        let store = store_with_records(&path, 2_000);
        assert_eq!(scrub(&store, 100).unwrap(), crate::store::ScrubOutcome::Intact { records: 2_000 });
        assert_eq!(scrub(&store, 1).unwrap(), crate::store::ScrubOutcome::Intact { records: 2_000 }, "any chunk size");
        flip_on_disk(&path, b"value-000777");
        // A pass reads every page: one after the first pushes the cached page out.
        let found = (0..3).find_map(|_| scrub(&store, 100).err()).expect("the scrub finds the damaged record");
        assert!(found.damaged && found.message.contains("the scrub found a record fails its checksum"), "{found}");
        assert!(!found.message.contains("pk777"), "no key in what is reported: {found}");
        assert!(store.damage().why().is_some_and(|why| why.contains("fails its checksum")));
    }

    /// The sum is compared only over a pass the store did not change
    /// during; then it finds what no record's checksum covers (here, the
    /// record count kept beside the records, changed outside the store).
    #[test]
    fn a_scrub_compares_the_state_only_over_a_pass_without_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_records(&dir.path().join("p.redb"), 300);
        let mut pass = store.scrub_begin().unwrap();
        assert_eq!(store.scrub_step(&mut pass, 100).unwrap(), None);
        store
            .apply(false, |tx| {
                tx.put("pk-new", "", 300, b"{}")?;
                tx.mark_applied(300, false);
                Ok(())
            })
            .unwrap();
        let outcome = loop {
            if let Some(outcome) = store.scrub_step(&mut pass, 100).unwrap() {
                break outcome;
            }
        };
        assert!(matches!(outcome, crate::store::ScrubOutcome::Changed { .. }), "{outcome:?}");
        assert_eq!(scrub(&store, 100).unwrap(), crate::store::ScrubOutcome::Intact { records: 301 });
        let txn = store.db.begin_write().unwrap();
        {
            let mut table = txn.open_table(RECORDS).unwrap();
            let mut state = read_state(&table).unwrap();
            state.record_count += 1;
            write_state(&mut table, &state).unwrap();
        }
        txn.commit().unwrap();
        let found = scrub(&store, 100).expect_err("the count kept beside the records no longer agrees");
        assert!(found.damaged && found.message.contains("it holds 301 records where its state counts 302"), "{found}");
        assert!(store.damage().why().is_some());
    }

    /// Rewrites a format-3 store's records after `after` (all: None) in
    /// format 2's layout, `[version][value]`, as an older build (None) or an
    /// upgrade cut short after `after` left them.
    fn back_to_format_2(store: &PartitionStore, after: Option<&[u8]>) {
        let txn = store.db.begin_write().unwrap();
        {
            let mut table = txn.open_table(RECORDS).unwrap();
            let first_record = key::prefix_successor(&META_PREFIX).unwrap();
            let rows: Vec<(Vec<u8>, Vec<u8>)> = table
                .range::<&[u8]>(first_record.as_slice()..)
                .unwrap()
                .map(|e| e.unwrap())
                .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                .collect();
            for (key, stored) in rows.into_iter().filter(|(key, _)| after.is_none_or(|after| key.as_slice() > after)) {
                let (version, value) = crate::store::layout::decode_value(&key, &stored).unwrap();
                let mut old = Vec::new();
                crate::store::layout::snapshot_form(version, value, &mut old);
                table.insert(key.as_slice(), old.as_slice()).unwrap();
            }
            match after {
                None => table.insert(META_FORMAT, 2u64.to_le_bytes().as_slice()).unwrap(),
                Some(after) => table.insert(META_UPGRADED_TO, after).unwrap(),
            };
        }
        txn.commit().unwrap();
    }

    /// Opens the store at `path` and checks every record and its state.
    fn upgraded_reads_the_same(path: &Path, count: u64, state: &StoreState) {
        let store = PartitionStore::open(path, 4, 1 << 20).unwrap();
        let reader = store.read().unwrap();
        assert_eq!(&reader.state().unwrap(), state, "the state hash covers values, not their checksums");
        assert_eq!(meta_u64(&reader.table, META_FORMAT).unwrap(), FORMAT_VERSION);
        assert!(reader.table.get(META_UPGRADED_TO).unwrap().is_none(), "the progress mark goes with the upgrade");
        let mut read = 0u64;
        reader.scan_all(|_| read += 1).unwrap();
        assert_eq!(read, count);
        assert!(reader.get("pk12345", "").unwrap().unwrap().value.starts_with(b"{\"value\":\"value-012345\""));
        drop(reader);
        drop(store);
        let verdict = crate::store::check::verify(path);
        let crate::store::check::StoreVerdict::Intact { records, .. } = verdict else { panic!("the upgraded store checks: {verdict:?}") };
        assert_eq!(records, count);
    }

    /// Issue 37: format 2 stores (no record checksums) are rewritten with
    /// them at open, in bounded transactions, every record and the state
    /// hash as before; an upgrade cut short (format 3 already, so an older
    /// build refuses it, and a mark) checks as intact and resumes.
    #[test]
    fn a_format_2_store_is_upgraded_with_record_checksums() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.redb");
        let count = UPGRADE_RECORDS_PER_TXN_MAX as u64 * 2 + 17;
        let store = store_with_records(&path, count);
        let state = store.read().unwrap().state().unwrap();
        back_to_format_2(&store, None);
        drop(store);
        upgraded_reads_the_same(&path, count, &state);

        let store = PartitionStore::open(&path, 4, 1 << 20).unwrap();
        back_to_format_2(&store, Some(&key::encode("pk5000", "")));
        drop(store);
        let verdict = crate::store::check::verify(&path);
        assert!(matches!(verdict, crate::store::check::StoreVerdict::Intact { .. }), "a cut-short upgrade is not damage: {verdict:?}");
        upgraded_reads_the_same(&path, count, &state);
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
