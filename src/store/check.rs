//! Verifying a store offline (`tern check`): without writing a byte of it.
//!
//! The check is the one a node makes when it opens a store
//! (`PartitionStore::open_checked`: redb's integrity check, every page
//! against its checksum, and the recovery an unclean shutdown needs), run
//! over the file through a backend that keeps whatever redb writes in
//! memory (`Overlay`), so the file stays as it was. Then Tern's own
//! invariant: the state hash and record count kept beside the records are
//! recomputed from every record and every piece of outcome metadata
//! (`tally.rs`, the rule the scrub of a running store uses too).

use std::collections::HashMap;
use std::path::Path;

use parking_lot::Mutex;
use redb::{Builder, ReadableDatabase, ReadableTable, StorageBackend};

use super::layout::{read_state, RECORDS};
use super::tally::Tally;

/// The page cache of a store being checked.
const CHECK_CACHE_BYTES: usize = 64 << 20;
/// At most this many bytes of what redb writes during a check (a header,
/// the allocator state a repair rebuilds) are kept in memory.
const OVERLAY_BYTES_MAX: usize = 256 << 20;
const OVERLAY_PAGE_BYTES: u64 = 4096;

/// What an offline check found in one store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreVerdict {
    /// Every page verifies, and the records and the state they reflect agree.
    Intact { applied_next: u64, records: u64 },
    /// Open by a running node: stop it first.
    InUse,
    /// What does not agree, or why it cannot be read.
    Damaged(String),
}

/// Checks the store at `path` without changing it.
pub fn verify(path: &Path) -> StoreVerdict {
    match std::panic::catch_unwind(|| verify_unguarded(path)) {
        Ok(verdict) => verdict,
        Err(_) => StoreVerdict::Damaged("reading it panicked inside the storage engine".to_string()),
    }
}

fn verify_unguarded(path: &Path) -> StoreVerdict {
    // Another process's lock first: the overlay takes none.
    if let Err(redb::DatabaseError::DatabaseAlreadyOpen) = Builder::new().open_read_only(path) {
        return StoreVerdict::InUse;
    }
    let overlay = match Overlay::open(path) {
        Ok(overlay) => overlay,
        Err(e) => return StoreVerdict::Damaged(format!("cannot read: {e}")),
    };
    if overlay.len_bytes == 0 {
        return StoreVerdict::Damaged("the file is empty".to_string());
    }
    let mut builder = Builder::new();
    builder.set_cache_size(CHECK_CACHE_BYTES).set_check_integrity_on_open(true);
    let db = match builder.create_with_backend(overlay) {
        Ok(db) => db,
        Err(e) => return StoreVerdict::Damaged(e.to_string()),
    };
    let walked = (|| -> Result<StoreVerdict, redb::Error> {
        let txn = db.begin_read()?;
        let table = txn.open_table(RECORDS)?;
        let stored = read_state(&table)?;
        let mut tally = Tally::of(&table)?;
        for entry in table.iter()? {
            let (key, value) = entry?;
            if let Err(damaged) = tally.add(key.value(), value.value()) {
                return Ok(StoreVerdict::Damaged(format!("{} ({})", damaged.what, damaged.key)));
            }
        }
        Ok(match tally.agrees_with(&stored) {
            Ok(()) => StoreVerdict::Intact { applied_next: stored.applied_next, records: tally.records() },
            Err(why) => StoreVerdict::Damaged(why),
        })
    })();
    walked.unwrap_or_else(|e| StoreVerdict::Damaged(e.to_string()))
}

/// A file read as it is, with redb's writes kept in memory, page by page
/// (at most `OVERLAY_BYTES_MAX`): the check changes nothing on disk.
#[derive(Debug)]
struct Overlay {
    file: std::fs::File,
    len_bytes: u64,
    state: Mutex<OverlayState>,
}

#[derive(Debug)]
struct OverlayState {
    len_bytes: u64,
    pages: HashMap<u64, Vec<u8>>,
}

impl Overlay {
    fn open(path: &Path) -> std::io::Result<Overlay> {
        let file = std::fs::File::open(path)?;
        let len_bytes = file.metadata()?.len();
        Ok(Overlay { file, len_bytes, state: Mutex::new(OverlayState { len_bytes, pages: HashMap::new() }) })
    }

    /// The page `index` as it reads now: written, or from the file (zeros past its end).
    fn page(&self, state: &OverlayState, index: u64) -> std::io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        if let Some(page) = state.pages.get(&index) {
            return Ok(page.clone());
        }
        let mut page = vec![0u8; OVERLAY_PAGE_BYTES as usize];
        let start = index * OVERLAY_PAGE_BYTES;
        let in_file = self.len_bytes.saturating_sub(start).min(OVERLAY_PAGE_BYTES).min(state.len_bytes.saturating_sub(start));
        if in_file > 0 {
            self.file.read_exact_at(&mut page[..in_file as usize], start)?;
        }
        Ok(page)
    }
}

impl StorageBackend for Overlay {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.state.lock().len_bytes)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let state = self.state.lock();
        if offset + out.len() as u64 > state.len_bytes {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let (index, within) = (at / OVERLAY_PAGE_BYTES, (at % OVERLAY_PAGE_BYTES) as usize);
            let take = (OVERLAY_PAGE_BYTES as usize - within).min(out.len() - done);
            if state.pages.is_empty() && at + take as u64 <= self.len_bytes {
                use std::os::unix::fs::FileExt;
                self.file.read_exact_at(&mut out[done..done + take], at)?;
            } else {
                let page = self.page(&state, index)?;
                out[done..done + take].copy_from_slice(&page[within..within + take]);
            }
            done += take;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let mut state = self.state.lock();
        // Pages past a shrink read as zeros if it grows again.
        let first_gone = len.div_ceil(OVERLAY_PAGE_BYTES);
        state.pages.retain(|index, _| *index < first_gone);
        state.len_bytes = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut state = self.state.lock();
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let (index, within) = (at / OVERLAY_PAGE_BYTES, (at % OVERLAY_PAGE_BYTES) as usize);
            let take = (OVERLAY_PAGE_BYTES as usize - within).min(data.len() - done);
            let mut page = self.page(&state, index)?;
            page[within..within + take].copy_from_slice(&data[done..done + take]);
            state.pages.insert(index, page);
            if state.pages.len() * OVERLAY_PAGE_BYTES as usize > OVERLAY_BYTES_MAX {
                return Err(std::io::Error::other(format!("the check would keep more than {OVERLAY_BYTES_MAX} bytes of writes")));
            }
            done += take;
        }
        state.len_bytes = state.len_bytes.max(offset + data.len() as u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PartitionStore;

    fn store_with_records(path: &Path, records: u64) {
        let store = PartitionStore::open(path, 4, 1 << 20).unwrap();
        store
            .apply(true, |txn| {
                for i in 0..records {
                    txn.put(&format!("pk{i}"), "", i, format!("{{\"value\":{i},\"pad\":\"{}\"}}", "y".repeat(100)).as_bytes())?;
                    txn.mark_applied(i, false);
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn an_intact_store_verifies_and_is_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000.redb");
        store_with_records(&path, 500);
        let before = std::fs::read(&path).unwrap();
        assert_eq!(verify(&path), StoreVerdict::Intact { applied_next: 500, records: 500 });
        assert_eq!(std::fs::read(&path).unwrap(), before, "not a byte written");
    }

    #[test]
    fn a_changed_value_a_cut_file_and_garbage_are_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000.redb");
        store_with_records(&path, 500);
        let bytes = std::fs::read(&path).unwrap();
        // One byte of one value ('y' → 'z'): redb's read-only open does not
        // verify page checksums; the state hash does.
        let at = bytes.windows(4).position(|w| w == b"yyyy").unwrap();
        let mut changed = bytes.clone();
        changed[at] = b'z';
        std::fs::write(&path, &changed).unwrap();
        assert!(matches!(verify(&path), StoreVerdict::Damaged(_)), "{:?}", verify(&path));
        std::fs::write(&path, &bytes[..bytes.len() * 9 / 10]).unwrap();
        assert!(matches!(verify(&path), StoreVerdict::Damaged(_)));
        std::fs::write(&path, b"not a store").unwrap();
        assert!(matches!(verify(&path), StoreVerdict::Damaged(_)));
    }

    #[test]
    fn a_store_not_closed_cleanly_is_checked_as_the_node_would_recover_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000.redb");
        store_with_records(&path, 50);
        let store = PartitionStore::open(&path, 4, 1 << 20).unwrap();
        store
            .apply(false, |txn| {
                txn.put("late", "", 50, b"{}")?;
                txn.mark_applied(50, false);
                Ok(())
            })
            .unwrap();
        // Copied while open: what a crash leaves.
        let crashed = dir.path().join("00001.redb");
        std::fs::copy(&path, &crashed).unwrap();
        let before = std::fs::read(&crashed).unwrap();
        assert!(matches!(verify(&crashed), StoreVerdict::Intact { .. }), "{:?}", verify(&crashed));
        assert_eq!(std::fs::read(&crashed).unwrap(), before, "recovered in memory only");
    }

    #[test]
    fn a_record_written_past_the_store_fails_its_state_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000.redb");
        store_with_records(&path, 20);
        // Checksums all valid (redb's and the record's): written through redb, not through Tern's apply.
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(RECORDS).unwrap();
            let value = crate::store::layout::encode_value(b"zz-not-applied", 7, b"{}");
            table.insert(b"zz-not-applied".as_slice(), value.as_slice()).unwrap();
        }
        txn.commit().unwrap();
        drop(db);
        assert!(matches!(verify(&path), StoreVerdict::Damaged(why) if why.contains("21 records where its state counts 20")), "{:?}", verify(&path));
    }

    #[test]
    fn a_store_open_by_a_node_is_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000.redb");
        store_with_records(&path, 5);
        let _open = PartitionStore::open(&path, 4, 1 << 20).unwrap();
        assert_eq!(verify(&path), StoreVerdict::InUse);
    }
}
