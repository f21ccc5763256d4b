//! The segment files of the embedded write-ahead log: `wal/<id>.seg`, ids
//! increasing, all partitions of all topics interleaved, rolled at a size
//! bound. Read handles stay open so readers can `pread` any retained entry.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

pub struct Segments {
    dir: PathBuf,
    /// id → read handle of every retained segment.
    files: RwLock<BTreeMap<u64, Arc<File>>>,
}

impl Segments {
    pub fn open(dir: &Path) -> std::io::Result<(Segments, Vec<u64>)> {
        std::fs::create_dir_all(dir)?;
        let mut ids = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(id) = name.strip_suffix(".seg").and_then(|s| s.parse::<u64>().ok()) {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        let segments = Segments { dir: dir.to_path_buf(), files: RwLock::new(BTreeMap::new()) };
        for id in &ids {
            let file = File::open(segments.path(*id))?;
            segments.files.write().insert(*id, Arc::new(file));
        }
        Ok((segments, ids))
    }

    pub fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:020}.seg"))
    }

    /// Opens segment `id` for appending (creating it) and registers a read handle.
    pub fn open_for_append(&self, id: u64) -> std::io::Result<File> {
        let file = OpenOptions::new().create(true).append(true).open(self.path(id))?;
        if !self.files.read().contains_key(&id) {
            self.files.write().insert(id, Arc::new(File::open(self.path(id))?));
            sync_dir(&self.dir)?;
        }
        Ok(file)
    }

    pub fn create_next(&self) -> std::io::Result<(u64, File)> {
        let id = self.files.read().keys().next_back().map_or(0, |last| last + 1);
        Ok((id, self.open_for_append(id)?))
    }

    pub fn get(&self, id: u64) -> Option<Arc<File>> {
        self.files.read().get(&id).cloned()
    }

    pub fn ids(&self) -> Vec<u64> {
        self.files.read().keys().copied().collect()
    }

    pub fn size_bytes(&self, id: u64) -> u64 {
        std::fs::metadata(self.path(id)).map(|m| m.len()).unwrap_or(0)
    }

    pub fn age_ms(&self, id: u64) -> u64 {
        std::fs::metadata(self.path(id)).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).map_or(0, |d| d.as_millis() as u64)
    }

    pub fn delete(&self, id: u64) -> std::io::Result<()> {
        self.files.write().remove(&id);
        std::fs::remove_file(self.path(id))?;
        sync_dir(&self.dir)
    }
}

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Bytes of every segment file in `wal_dir`, read from the directory alone
/// (no log open): what a log holds, for a decision taken before opening it
/// (`EmbeddedLog::inspect_meta`) or without opening it (`tern check`).
pub fn wal_bytes(wal_dir: &Path) -> u64 {
    std::fs::read_dir(wal_dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".seg"))
        .map(|entry| entry.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync dir.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    sync_dir(path.parent().expect("file has a parent"))
}
