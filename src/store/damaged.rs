//! A partition store that fails its checks is set aside: never served, and
//! never fatal to the node.
//!
//! Disks and filesystems damage files: a few flipped bits, a file cut short.
//! redb keeps a checksum of every page (in its parent, up to the roots in
//! the header); every store opens with its integrity check
//! (`PartitionStore::open_checked`), so a damaged file is found before a
//! single read is served from it. A file that fails the check is moved into
//! `<data_dir>/damaged/<ns>/` (kept for inspection, at most
//! `DAMAGED_KEPT_MAX` files and `DAMAGED_KEPT_BYTES_MAX` bytes per node,
//! the oldest removed first) and an empty store takes its place. The
//! partition's apply loop rebuilds that store as any new replica's: from the
//! newest verified snapshot and the log, or from the log's start
//! (`apply/open.rs`); where neither reaches back far enough, it refuses the
//! partition, naming the offsets that exist nowhere else. Meanwhile every
//! other partition serves, and the rebuilt one serves reads only once caught
//! up (`PartitionHandle::rebuilding`).
//!
//! What is not damage stays an error, as before: an I/O error (a full disk,
//! a permission: moving the file would not help) and a store of another
//! format or partition count (an operator's mistake, said as such).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::partition_store::OpenFailure;
use super::{PartitionStore, StoreError};

/// At most this many damaged stores are kept per node (the oldest go first).
pub const DAMAGED_KEPT_MAX: usize = 16;
/// At most this many bytes of damaged stores are kept per node; a damaged
/// store larger than this alone is removed rather than kept.
pub const DAMAGED_KEPT_BYTES_MAX: u64 = 4 << 30;

/// A store found damaged and replaced by an empty one.
#[derive(Debug, Clone)]
pub struct SetAside {
    /// What the check found.
    pub reason: String,
    /// Where the damaged file is kept (None: removed, over the bounds).
    pub kept: Option<PathBuf>,
}

impl std::fmt::Display for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kept {
            Some(kept) => write!(f, "its store was damaged ({}; kept at {})", self.reason, kept.display()),
            None => write!(f, "its store was damaged ({}; removed: over the bound of damaged stores kept)", self.reason),
        }
    }
}

/// Damage found in a store while it runs: a record that failed its
/// checksum, a page redb found corrupted, a panic inside redb. Shared by the
/// store, its read views and its apply transactions; whoever finds it first
/// reports it, and the partition's apply loop, which looks at it before
/// every batch, takes the partition out of service and rebuilds it
/// (`apply/rebuild.rs`). Only the first report is kept.
#[derive(Debug, Default)]
pub struct DamageFound {
    found: std::sync::atomic::AtomicBool,
    why: parking_lot::Mutex<Option<String>>,
    /// The damaged file was moved into `damaged/` (`set_aside_running`):
    /// the file at the store's path, if any, is a rebuild's, not this one.
    moved: std::sync::atomic::AtomicBool,
    /// It showed as a panic (`report_panic`).
    panicked: std::sync::atomic::AtomicBool,
}

impl DamageFound {
    /// Records damage (the first report wins; later ones are the same damage seen again).
    pub fn report(&self, path: &Path, why: &str) {
        let mut first = self.why.lock();
        if first.is_none() {
            tracing::error!(store = %path.display(), %why, "damage found in a running store; its partition is rebuilt");
            *first = Some(why.to_string());
            self.found.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// What was found first, if anything (one atomic load when nothing was).
    pub fn why(&self) -> Option<String> {
        if !self.found.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.why.lock().clone()
    }

    /// Records damage that showed as a panic inside the store (redb meeting
    /// a damaged page, or a fault of the code applying an entry: a rebuild
    /// tells them apart, `apply_loop.rs`).
    pub fn report_panic(&self, path: &Path, why: &str) {
        self.panicked.store(true, std::sync::atomic::Ordering::Release);
        self.report(path, why);
    }

    /// Whether the damage showed as a panic.
    pub fn panicked(&self) -> bool {
        self.panicked.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the damaged file was already moved aside.
    pub fn moved(&self) -> bool {
        self.moved.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Moves a running store's damaged file into `damaged_dir` (once: a second
/// call, after a rebuild that was interrupted, keeps what is at the path
/// now, which is the rebuild's). The store stays open on the moved file
/// until its last reader lets go.
pub fn set_aside_running(store: &PartitionStore, damaged_dir: &Path) -> Result<Option<SetAside>, StoreError> {
    let damage = store.damage();
    let Some(reason) = damage.why() else { return Ok(None) };
    if damage.moved() {
        return Ok(None);
    }
    let path = store.path();
    mark_rebuilding(path, &format!("its store was damaged ({reason})")).map_err(|e| StoreError {
        path: path.display().to_string(),
        message: format!("marking a damaged store's partition rebuilding: {e}"),
        unavailable: false,
        damaged: true,
    })?;
    let kept = match set_aside(path, damaged_dir) {
        Ok(kept) => kept,
        // Gone already (an operator moved it): nothing to keep.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(StoreError {
                path: path.display().to_string(),
                message: format!("setting a damaged store aside: {e}"),
                unavailable: false,
                damaged: true,
            })
        }
    };
    damage.moved.store(true, std::sync::atomic::Ordering::Release);
    Ok(Some(SetAside { reason, kept }))
}

/// The file beside a store that says its partition is being rebuilt
/// (`<partition>.rebuilding`, holding why): written before a damaged store
/// is moved aside, removed once the rebuilt store has caught up. A node
/// that stops midway (a crash, a restart) reads it at its next start, so
/// the partial store serves no read until caught up there too: its state is
/// older than what was served before.
pub fn rebuilding_mark_path(store: &Path) -> PathBuf {
    store.with_extension("rebuilding")
}

/// Writes the rebuilding mark of `store` atomically (a temporary file,
/// fsync, rename, directory fsync).
pub fn mark_rebuilding(store: &Path, why: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mark = rebuilding_mark_path(store);
    let staging = mark.with_extension("rebuilding.tmp");
    {
        let mut file = std::fs::File::create(&staging)?;
        file.write_all(why.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&staging, &mark)?;
    match mark.parent() {
        Some(dir) => fsync_dir(dir),
        None => Ok(()),
    }
}

/// Why `store`'s partition is being rebuilt, if its mark says so (a mark
/// that cannot be read still says so).
pub fn rebuilding_mark(store: &Path) -> Option<String> {
    match std::fs::read(rebuilding_mark_path(store)) {
        Ok(why) => Some(String::from_utf8_lossy(&why).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(format!("its store is being rebuilt (the mark is unreadable: {e})")),
    }
}

/// Removes the rebuilding mark of `store` (caught up), durably.
pub fn clear_rebuilding(store: &Path) -> std::io::Result<()> {
    let mark = rebuilding_mark_path(store);
    match std::fs::remove_file(&mark) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        removed => removed?,
    }
    match mark.parent() {
        Some(dir) => fsync_dir(dir),
        None => Ok(()),
    }
}

/// Opens the store at `path`; a damaged one is set aside into `damaged_dir`
/// and an empty store opened in its place. A panic inside redb while opening
/// a damaged file counts as damage.
pub fn open_or_set_aside(
    path: &Path,
    partitions: u32,
    cache_bytes: usize,
    damaged_dir: &Path,
) -> Result<(PartitionStore, Option<SetAside>), StoreError> {
    let reason = match open_catching_panics(path, partitions, cache_bytes) {
        Ok(store) => return Ok((store, None)),
        Err(OpenFailure::Other(e)) => return Err(e),
        Err(OpenFailure::Damaged(reason)) => reason,
    };
    let error = |e: std::io::Error| StoreError {
        path: path.display().to_string(),
        message: format!("setting a damaged store aside: {e}"),
        unavailable: false,
        damaged: false,
    };
    // The mark first: a stop between the two still rebuilds without serving.
    mark_rebuilding(path, &format!("its store was damaged ({reason})")).map_err(error)?;
    let kept = set_aside(path, damaged_dir).map_err(error)?;
    let set_aside = SetAside { reason, kept };
    match open_catching_panics(path, partitions, cache_bytes) {
        Ok(store) => Ok((store, Some(set_aside))),
        Err(OpenFailure::Damaged(message) | OpenFailure::Other(StoreError { message, .. })) => Err(StoreError {
            path: path.display().to_string(),
            message: format!("a new store in place of a damaged one: {message}"),
            unavailable: false,
            damaged: false,
        }),
    }
}

fn open_catching_panics(path: &Path, partitions: u32, cache_bytes: usize) -> Result<PartitionStore, OpenFailure> {
    match std::panic::catch_unwind(|| PartitionStore::open_checked(path, partitions, cache_bytes)) {
        Ok(opened) => opened,
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
            Err(OpenFailure::Damaged(format!("opening it panicked: {}", what.unwrap_or_else(|| "(no message)".into()))))
        }
    }
}

/// Moves `path` into `damaged_dir/<ns>/<partition>.<unix ms>.redb` (the same
/// filesystem: a rename), then trims what is kept to the bounds. Returns
/// where it is kept, or None if it was removed (larger than the byte bound).
fn set_aside(path: &Path, damaged_dir: &Path) -> std::io::Result<Option<PathBuf>> {
    let namespace = path.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = damaged_dir.join(&namespace);
    std::fs::create_dir_all(&dir)?;
    let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let bytes = std::fs::metadata(path)?.len();
    let kept = if bytes > DAMAGED_KEPT_BYTES_MAX {
        std::fs::remove_file(path)?;
        None
    } else {
        let target = unused_name(&dir, &stem, unix_ms);
        move_file(path, &target)?;
        fsync_dir(&dir)?;
        Some(target)
    };
    if let Some(parent) = path.parent() {
        fsync_dir(parent)?;
    }
    // What is kept is for inspection: trimming it never fails the start.
    if let Err(e) = trim(damaged_dir, kept.as_deref()) {
        tracing::warn!(dir = %damaged_dir.display(), error = %e, "cannot trim the damaged stores kept");
    }
    Ok(kept)
}

/// `<stem>.<unix ms>.redb`, one ms later while that name is taken (two
/// stores of a namespace set aside in the same ms).
fn unused_name(dir: &Path, stem: &str, unix_ms: u128) -> PathBuf {
    (unix_ms..).map(|ms| dir.join(format!("{stem}.{ms:013}.redb"))).find(|candidate| !candidate.exists()).expect("a free name")
}

/// A rename, or a copy and a remove where `damaged/` is on another
/// filesystem than `stores/` (EXDEV).
fn move_file(from: &Path, to: &Path) -> std::io::Result<()> {
    const EXDEV: i32 = 18;
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(EXDEV) => {
            std::fs::copy(from, to)?;
            std::fs::File::open(to)?.sync_all()?;
            std::fs::remove_file(from)
        }
        moved => moved,
    }
}

/// Removes the oldest kept stores (by the time in their names) until at
/// most `DAMAGED_KEPT_MAX` files and `DAMAGED_KEPT_BYTES_MAX` bytes remain;
/// `newest` is kept whatever the others are.
fn trim(damaged_dir: &Path, newest: Option<&Path>) -> std::io::Result<()> {
    let mut kept = kept_stores(damaged_dir)?;
    kept.sort_by_key(|(unix_ms, _, _)| std::cmp::Reverse(*unix_ms));
    let (mut files, mut bytes) = (0usize, 0u64);
    for (_, path, len) in kept {
        let is_newest = newest == Some(path.as_path());
        if is_newest || (files < DAMAGED_KEPT_MAX && bytes.saturating_add(len) <= DAMAGED_KEPT_BYTES_MAX) {
            files += 1;
            bytes = bytes.saturating_add(len);
        } else {
            match std::fs::remove_file(&path) {
                // Trimmed by another open meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                removed => removed?,
            }
        }
    }
    Ok(())
}

/// Every kept store under `damaged_dir`: (unix ms from its name, path, bytes).
pub fn kept_stores(damaged_dir: &Path) -> std::io::Result<Vec<(u128, PathBuf, u64)>> {
    let mut kept = Vec::new();
    let Ok(namespaces) = std::fs::read_dir(damaged_dir) else { return Ok(kept) };
    for namespace in namespaces {
        let namespace = namespace?;
        if !namespace.file_type()?.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(namespace.path())? {
            let file = file?;
            let name = file.file_name().to_string_lossy().into_owned();
            // Only names this file gives: `<5 digits>.<13 digits>.redb`.
            let unix_ms = name.strip_suffix(".redb").and_then(|n| n.split_once('.')).and_then(|(stem, ms)| {
                let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
                (digits(stem, 5) && digits(ms, 13)).then(|| ms.parse::<u128>().ok()).flatten()
            });
            if let Some(unix_ms) = unix_ms {
                kept.push((unix_ms, file.path(), file.metadata()?.len()));
            }
        }
    }
    Ok(kept)
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with_records(path: &Path, records: u64) {
        let store = PartitionStore::open(path, 4, 1 << 20).unwrap();
        store
            .apply(true, |txn| {
                for i in 0..records {
                    txn.put(&format!("pk{i}"), "", i, format!("{{\"value\":{i},\"pad\":\"{}\"}}", "x".repeat(200)).as_bytes())?;
                    txn.mark_applied(i, false);
                }
                Ok(())
            })
            .unwrap();
    }

    fn applied_next(store: &PartitionStore) -> u64 {
        store.read().unwrap().applied_next().unwrap()
    }

    #[test]
    fn an_intact_store_opens_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stores/ns/00001.redb");
        store_with_records(&path, 100);
        let (store, set_aside) = open_or_set_aside(&path, 4, 1 << 20, &dir.path().join("damaged")).unwrap();
        assert!(set_aside.is_none());
        assert_eq!(applied_next(&store), 100);
        assert!(kept_stores(&dir.path().join("damaged")).unwrap().is_empty());
    }

    #[test]
    fn a_store_cut_short_is_set_aside_and_replaced_by_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stores/ns/00001.redb");
        store_with_records(&path, 2_000);
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - len / 10).unwrap();
        let damaged = dir.path().join("damaged");
        let (store, set_aside) = open_or_set_aside(&path, 4, 1 << 20, &damaged).unwrap();
        let set_aside = set_aside.expect("the cut store is damaged");
        assert_eq!(applied_next(&store), 0, "an empty store took its place");
        // Marked until caught up, so a stop midway never serves the partial store.
        assert!(rebuilding_mark(&path).is_some_and(|why| why.contains("its store was damaged")), "{:?}", rebuilding_mark(&path));
        clear_rebuilding(&path).unwrap();
        assert!(rebuilding_mark(&path).is_none());
        let kept = set_aside.kept.expect("kept for inspection");
        assert_eq!(std::fs::metadata(&kept).unwrap().len(), len - len / 10, "the damaged file itself, untouched");
        assert!(kept.starts_with(damaged.join("ns")) && kept.file_name().unwrap().to_string_lossy().starts_with("00001."));
    }

    #[test]
    fn flipped_bits_in_any_page_are_found_before_anything_is_read() {
        // Every region of the file: flip two bits at a time in a fresh copy;
        // each copy either opens with exactly the records written (the flip
        // hit a page no commit reaches, or redb rolled back to the previous
        // commit, which this store has not got: so never) or is set aside.
        let dir = tempfile::tempdir().unwrap();
        let original = dir.path().join("original.redb");
        store_with_records(&original, 2_000);
        let bytes = std::fs::read(&original).unwrap();
        let step = (bytes.len() / 64).max(1);
        let (mut set_aside_count, mut intact) = (0, 0);
        for (i, at) in (0..bytes.len()).step_by(step).enumerate() {
            let mut damaged_bytes = bytes.clone();
            damaged_bytes[at] ^= 0b0001_0001;
            let path = dir.path().join(format!("stores/ns/{i:05}.redb"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &damaged_bytes).unwrap();
            let (store, set_aside) = open_or_set_aside(&path, 4, 1 << 20, &dir.path().join("damaged")).unwrap();
            match set_aside {
                Some(_) => {
                    set_aside_count += 1;
                    assert_eq!(applied_next(&store), 0);
                }
                None => {
                    intact += 1;
                    let reader = store.read().unwrap();
                    if reader.applied_next().unwrap() == 2_000 {
                        for k in 0..2_000u64 {
                            let record = reader.get(&format!("pk{k}"), "").unwrap().expect("every record is there");
                            let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
                            assert_eq!(value["value"], k, "flip at byte {at}: never a wrong value");
                        }
                    } else {
                        assert_eq!(reader.applied_next().unwrap(), 0, "flip at byte {at}: rolled back to the empty store's commit");
                    }
                }
            }
        }
        assert!(set_aside_count > 0 && intact > 0, "some flips hit live pages ({set_aside_count}), some did not ({intact})");
    }

    #[test]
    fn an_empty_file_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stores/ns/00003.redb");
        store_with_records(&path, 10);
        std::fs::write(&path, b"").unwrap();
        let (store, set_aside) = open_or_set_aside(&path, 4, 1 << 20, &dir.path().join("damaged")).unwrap();
        assert!(set_aside.is_some_and(|s| s.reason.contains("empty")));
        assert_eq!(applied_next(&store), 0);
    }

    #[test]
    fn what_is_kept_stays_within_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let damaged = dir.path().join("damaged");
        for i in 0..(DAMAGED_KEPT_MAX + 3) {
            let path = dir.path().join(format!("stores/ns{}/{:05}.redb", i % 2, i));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"not a redb file at all").unwrap();
            let (store, set_aside) = open_or_set_aside(&path, 4, 1 << 20, &damaged).unwrap();
            assert!(set_aside.is_some_and(|s| s.kept.is_some()), "garbage is damage, and kept");
            assert_eq!(applied_next(&store), 0);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let kept = kept_stores(&damaged).unwrap();
        assert_eq!(kept.len(), DAMAGED_KEPT_MAX, "the oldest went first");
        let newest_name = format!("{:05}.", DAMAGED_KEPT_MAX + 2);
        assert!(kept.iter().any(|(_, p, _)| p.file_name().unwrap().to_string_lossy().starts_with(&newest_name)));
        assert!(!kept.iter().any(|(_, p, _)| p.file_name().unwrap().to_string_lossy().starts_with("00000.")));
    }

    #[test]
    fn an_io_error_is_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the store's file should be: the open fails, and
        // moving things would not help.
        let path = dir.path().join("stores/ns/00001.redb");
        std::fs::create_dir_all(&path).unwrap();
        let err = open_or_set_aside(&path, 4, 1 << 20, &dir.path().join("damaged")).err().expect("an error");
        assert!(err.to_string().contains("00001.redb"), "{err}");
        assert!(path.is_dir(), "left where it was");
    }
}
