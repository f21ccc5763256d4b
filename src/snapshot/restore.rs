//! Restoring a partition: the newest snapshot of this log (or of any, with
//! `--restore`) ahead of the store, every chunk's hash checked, the state
//! hash and record count recomputed, the store built beside its final path
//! and renamed into place only when complete.

use super::format;
use super::format::{ChunkRef, Manifest};
use super::snapshots::Snapshots;
use super::SnapshotError;
use super::{store_error, REQUESTS_IN_FLIGHT_MAX};
use crate::store::{PartitionStore, RestoredState};
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use std::path::Path;

/// Largest manifest read (a 1,000,000-record partition has ~2,500 chunks).
pub(super) const MANIFEST_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Which snapshot a restore may use, and where it goes.
#[derive(Debug, Clone, Copy)]
pub struct RestoreTarget<'a> {
    pub namespace: &'a str,
    pub partition: u32,
    pub partitions: u32,
    pub path: &'a Path,
    pub cache_bytes: usize,
    /// The identity of the log the restored store will follow (`Log::identity`);
    /// `None` accepts a snapshot of any log (an explicit `--restore` into a new log).
    pub log: Option<&'a str>,
    /// Only a snapshot at or past this offset will do (a stale store needs one
    /// that reaches the log's start).
    pub applied_next_min: u64,
    /// Replace an existing store at `path` (atomically, once the new one verifies).
    pub replace: bool,
}

impl<'a> RestoreTarget<'a> {
    /// A new store at `path` from the newest valid snapshot, of any log.
    pub fn new(namespace: &'a str, partition: u32, partitions: u32, path: &'a Path, cache_bytes: usize) -> RestoreTarget<'a> {
        RestoreTarget { namespace, partition, partitions, path, cache_bytes, log: None, applied_next_min: 0, replace: false }
    }
}

/// Verified chunks waiting for the store builder. With the fetches in flight
/// (`REQUESTS_IN_FLIGHT_MAX`), the most of a snapshot a restore holds: a
/// chunk is at most `format::CHUNK_RAW_BYTES_MAX` raw, less compressed.
pub(super) const CHUNKS_QUEUED_MAX: usize = 8;

/// How often a long restore logs how far it is.
const PROGRESS_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Decompresses verified chunks, as they arrive, into a new store and checks
/// what the manifest promised: every chunk, the state hash, the record count.
pub(super) fn rebuild(
    path: &Path,
    partitions: u32,
    cache_bytes: usize,
    state: &RestoredState,
    mut chunks: tokio::sync::mpsc::Receiver<(ChunkRef, Bytes)>,
    promised: &Promised,
    replace: bool,
) -> Result<PartitionStore, String> {
    // Set by the chunk decoder, read by the check (both borrow it).
    let failure: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
    let received = std::cell::Cell::new(0usize);
    // Blocking receives: this runs on a blocking thread, the fetches on the runtime.
    let arriving = std::iter::from_fn(|| {
        // A chunk that failed ends the restore: nothing more is written.
        if failure.borrow().is_some() {
            return None;
        }
        let chunk = chunks.blocking_recv()?;
        received.set(received.get() + 1);
        Some(chunk)
    });
    let records = arriving.flat_map(|(chunk, compressed)| {
        let decoded = zstd::bulk::decompress(&compressed, chunk.raw_bytes as usize)
            .map_err(|e| format!("chunk {}: zstd: {e}", chunk.hash))
            .and_then(|raw| format::decode_chunk(&raw).map_err(|e| format!("chunk {}: {e}", chunk.hash)));
        match decoded {
            Ok(records) => records,
            Err(e) => {
                failure.borrow_mut().get_or_insert(e);
                Vec::new()
            }
        }
    });
    let expected = (promised.state_hash.clone(), promised.record_count, promised.chunks);
    let verify = |hash: crate::store::hash::StateHash, record_count: u64| {
        if let Some(failure) = failure.borrow_mut().take() {
            return Err(failure);
        }
        // Fewer chunks than promised: the fetches stopped (their error is the caller's).
        if received.get() != expected.2 {
            return Err(format!("{} of the manifest's {} chunks arrived", received.get(), expected.2));
        }
        if hash.to_hex() != expected.0 || record_count != expected.1 {
            return Err(format!(
                "restored state hash {} with {record_count} records, the manifest says {} with {}",
                hash.to_hex(),
                expected.0,
                expected.1
            ));
        }
        Ok(())
    };
    let mut report = Progress::new(path, promised.record_count);
    let (store, _) = PartitionStore::restore(path, partitions, cache_bytes, state, records, replace, &mut |written| report.written(written), verify)
        .map_err(|e| e.to_string())?;
    Ok(store)
}

/// What a manifest promises a restore ends with.
pub(super) struct Promised {
    pub state_hash: String,
    pub record_count: u64,
    pub chunks: usize,
}

/// What a restore says while it runs: the records-restored counter, and a
/// log line at most every `PROGRESS_LOG_INTERVAL`.
struct Progress<'a> {
    path: &'a Path,
    records_expected: u64,
    counted: u64,
    started: std::time::Instant,
    logged: std::time::Instant,
}

impl<'a> Progress<'a> {
    fn new(path: &'a Path, records_expected: u64) -> Progress<'a> {
        let now = std::time::Instant::now();
        Progress { path, records_expected, counted: 0, started: now, logged: now }
    }

    fn written(&mut self, written: u64) {
        assert!(written >= self.counted, "a restore's record count only grows");
        crate::metrics::SNAPSHOT_RECORDS_RESTORED.inc_by(written - self.counted);
        self.counted = written;
        if self.logged.elapsed() >= PROGRESS_LOG_INTERVAL {
            self.logged = std::time::Instant::now();
            tracing::info!(
                store = %self.path.display(), records = written, of = self.records_expected,
                elapsed_s = self.started.elapsed().as_secs(), "restoring a snapshot"
            );
        }
    }
}

impl Snapshots {
    /// Restores the newest valid snapshot of a partition that `target`
    /// accepts into a store at `target.path`. Invalid snapshots (bad checksum,
    /// missing or corrupt chunk, wrong state hash, another log's, too old) are
    /// skipped, loudly, for older ones.
    pub async fn restore(&self, target: &RestoreTarget<'_>) -> Result<(PartitionStore, Manifest), SnapshotError> {
        let (namespace, partition) = (target.namespace, target.partition);
        let mut tried = Vec::new();
        let mut other_log = false;
        for (applied_next, manifest_path) in self.list(namespace, partition).await? {
            // Newest first: the rest are older still. Too old counts as none.
            if applied_next < target.applied_next_min {
                break;
            }
            match self.try_restore(&manifest_path, target).await {
                Ok(restored) => return Ok(restored),
                // The object store itself failed (unreachable, timed out): an older
                // snapshot would fail alike; the caller decides whether to retry.
                Err(e @ SnapshotError::Store(_)) => return Err(e),
                // A deleted namespace's, left behind: as if it did not exist.
                Err(SnapshotError::OfDeleted(path)) => tracing::info!(snapshot = %path, "a snapshot of a deleted namespace of this name: skipped"),
                Err(e) => {
                    other_log |= matches!(&e, SnapshotError::Invalid { other_log: true, .. });
                    tracing::error!(snapshot = %manifest_path, error = %e, "snapshot rejected; trying an older one");
                    crate::metrics::SNAPSHOT_REJECTED.inc();
                    tried.push(format!("{manifest_path}: {e}"));
                }
            }
        }
        if tried.is_empty() {
            return Err(SnapshotError::NoneExist { namespace: namespace.to_string(), partition });
        }
        Err(SnapshotError::NoneValid { namespace: namespace.to_string(), partition, tried: tried.join("; "), other_log })
    }

    pub(super) async fn try_restore(
        &self,
        manifest_path: &ObjectPath,
        target: &RestoreTarget<'_>,
    ) -> Result<(PartitionStore, Manifest), SnapshotError> {
        let RestoreTarget { namespace, partition, partitions, path, cache_bytes, .. } = *target;
        let invalid = |reason: String| SnapshotError::Invalid { path: manifest_path.to_string(), reason, other_log: false };
        let bytes = self.store.get(manifest_path).await.map_err(store_error)?.bytes().await.map_err(store_error)?;
        if bytes.len() > MANIFEST_BYTES_MAX {
            return Err(invalid(format!("manifest of {} bytes exceeds {MANIFEST_BYTES_MAX}", bytes.len())));
        }
        let manifest = Manifest::open(&bytes).map_err(invalid)?;
        if manifest.not_applied_from > manifest.applied_next {
            return Err(invalid(format!(
                "its not-applied record starts at {}, past its applied offset {}",
                manifest.not_applied_from, manifest.applied_next
            )));
        }
        // Of the topic of this name that was deleted (the log made one again
        // since, of any partition count): no snapshot of this namespace.
        if target.log.is_some_and(|log| crate::identity::recreated(&manifest.log, log)) {
            return Err(SnapshotError::OfDeleted(manifest_path.to_string()));
        }
        if (manifest.namespace.as_str(), manifest.partition, manifest.partitions) != (namespace, partition, partitions) {
            return Err(invalid(format!(
                "it is of {}/{} with {} partitions, not {namespace}/{partition} with {partitions}",
                manifest.namespace, manifest.partition, manifest.partitions
            )));
        }
        if let Some(log) = target.log {
            if manifest.log != log {
                return Err(SnapshotError::Invalid {
                    path: manifest_path.to_string(),
                    other_log: true,
                    reason: format!(
                        "it is of the log {:?}, this node's log is {log:?} (another cluster sharing the bucket, or a topic \
                     deleted and re-created): its offsets are not this log's; restore it into this log only with \
                     --restore",
                        manifest.log
                    ),
                });
            }
        }
        let fetches = futures::stream::iter(manifest.chunks.iter().cloned()).map(|chunk| async move {
            let chunk_path = self.chunk_path(namespace, partition, &chunk.hash);
            let bytes = match self.store.get(&chunk_path).await {
                Ok(object) => object.bytes().await.map_err(store_error)?,
                Err(object_store::Error::NotFound { .. }) => return Err(invalid(format!("chunk {} is missing", chunk.hash))),
                Err(e) => return Err(store_error(e)),
            };
            let actual = blake3::hash(&bytes).to_hex().to_string();
            if actual != chunk.hash || bytes.len() as u64 != chunk.compressed_bytes {
                return Err(invalid(format!("chunk {} is corrupt (its bytes hash to {actual})", chunk.hash)));
            }
            Ok((chunk, bytes))
        });
        let state = RestoredState {
            applied_next: manifest.applied_next,
            applied_entries: manifest.applied_entries,
            skipped_entries: manifest.skipped_entries,
            not_applied_from: manifest.not_applied_from,
        };
        // Fetched `REQUESTS_IN_FLIGHT_MAX` at a time, in order, and handed to
        // the builder through a queue of `CHUNKS_QUEUED_MAX`: the snapshot
        // streams into the store and is never whole in memory.
        let (sender, receiver) = tokio::sync::mpsc::channel(CHUNKS_QUEUED_MAX);
        let promised = Promised { state_hash: manifest.state_hash.clone(), record_count: manifest.record_count, chunks: manifest.chunks.len() };
        let (path_owned, replace) = (path.to_path_buf(), target.replace);
        // Taken before the builder holds a blocking thread: at most
        // `RESTORES_IN_FLIGHT_MAX` restores stream at once.
        let _permit = self.restores.acquire().await.expect("the restores' semaphore is never closed");
        let builder = tokio::task::spawn_blocking(move || rebuild(&path_owned, partitions, cache_bytes, &state, receiver, &promised, replace));
        let fetched: Result<(), SnapshotError> = async {
            let mut fetches = std::pin::pin!(fetches.buffered(REQUESTS_IN_FLIGHT_MAX));
            while let Some(chunk) = fetches.next().await {
                if sender.send(chunk?).await.is_err() {
                    // The builder stopped: its error says why.
                    break;
                }
            }
            Ok(())
        }
        .await;
        // The builder sees the end of the chunks (all of them, or fewer: it fails).
        drop(sender);
        let rebuilt = builder.await;
        // The fetches' error first: an object store that failed must reach
        // the caller as such (it stops trying older snapshots).
        if let Err(e) = fetched {
            if !target.replace {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
        let rebuilt = rebuilt.map_err(|e| SnapshotError::Partition(format!("restore task failed: {e}")))?;
        match rebuilt {
            Ok(store) => Ok((store, manifest)),
            Err(reason) => {
                // A replaced store is only ever replaced by a verified one.
                if !target.replace {
                    let _ = std::fs::remove_file(path);
                }
                Err(invalid(reason))
            }
        }
    }
}
