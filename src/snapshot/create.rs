//! Taking a snapshot: the store's records and outcome metadata scanned from
//! one read view into content-defined chunks, the chunks not yet stored
//! uploaded, then the manifest that names them (a snapshot without a
//! manifest that verifies does not exist).

use super::error::SnapshotError;
use super::format;
use super::format::{ChunkRef, Chunker, Manifest, MANIFEST_FORMAT};
use super::snapshots::Snapshots;
use super::{store_error, REQUESTS_IN_FLIGHT_MAX};
use crate::store::StoreReader;
use bytes::Bytes;
use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use std::time::Duration;

/// Chunks in flight between the store scan and the uploader: bounds memory
/// to a few chunks however large the partition.
pub(super) const CHUNKS_IN_FLIGHT_MAX: usize = 4;

/// What taking one snapshot did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotReport {
    pub manifest: String,
    pub applied_next: u64,
    pub record_count: u64,
    pub chunks: usize,
    pub chunks_uploaded: usize,
    /// Compressed bytes uploaded by this snapshot (chunks not already stored, plus the manifest).
    pub bytes_uploaded: u64,
    /// Compressed bytes of all its chunks (what a full snapshot uploads).
    pub bytes_total: u64,
}

/// Reads every record of `reader`, cuts, compresses and hashes chunks, and
/// hands them to the uploader (blocking while `CHUNKS_IN_FLIGHT_MAX` wait).
/// Returns `(outcome metadata entries, records)` scanned.
pub(super) fn scan_chunks(reader: &StoreReader, sender: &tokio::sync::mpsc::Sender<(ChunkRef, Bytes)>) -> Result<(u64, u64), SnapshotError> {
    let send = |raw: format::RawChunk| -> Result<(), SnapshotError> {
        let compressed = zstd::bulk::compress(&raw.raw, format::ZSTD_LEVEL).map_err(|e| SnapshotError::Partition(format!("zstd: {e}")))?;
        let chunk = ChunkRef {
            hash: blake3::hash(&compressed).to_hex().to_string(),
            compressed_bytes: compressed.len() as u64,
            raw_bytes: raw.raw.len() as u64,
            entries: raw.entries,
        };
        sender.blocking_send((chunk, Bytes::from(compressed))).map_err(|_| SnapshotError::Store("the uploader stopped".into()))
    };
    let mut chunker = Chunker::default();
    let counts = reader.scan_snapshot(|key, value| match chunker.push(key, value) {
        Some(raw) => send(raw),
        None => Ok(()),
    })?;
    if let Some(raw) = chunker.finish() {
        send(raw)?;
    }
    Ok(counts)
}

impl Snapshots {
    /// Takes a snapshot of `reader` (one consistent view of a partition
    /// store whose offsets are positions in the log `log`: `Log::identity`).
    pub async fn create(
        &self,
        namespace: &str,
        partition: u32,
        partitions: u32,
        reader: StoreReader,
        log: &str,
    ) -> Result<SnapshotReport, SnapshotError> {
        let state = reader.state().map_err(|e| SnapshotError::Partition(e.to_string()))?;
        let not_applied_from = reader.not_applied_from().map_err(|e| SnapshotError::Partition(e.to_string()))?;
        let (sender, mut receiver) = tokio::sync::mpsc::channel::<(ChunkRef, Bytes)>(CHUNKS_IN_FLIGHT_MAX);
        let scan = tokio::task::spawn_blocking(move || scan_chunks(&reader, &sender));
        // Chunks are uploaded `REQUESTS_IN_FLIGHT_MAX` at a time (object stores
        // are latency-bound per request), and kept in order for the manifest.
        let stream = futures::stream::poll_fn(|cx| receiver.poll_recv(cx));
        let uploads = stream.map(|(chunk, compressed)| async move {
            let path = self.chunk_path(namespace, partition, &chunk.hash);
            let uploaded_bytes = match self.store.head(&path).await {
                Ok(_) => 0,
                Err(_) => {
                    let bytes = compressed.len() as u64;
                    self.store.put(&path, PutPayload::from(compressed)).await.map_err(store_error)?;
                    bytes
                }
            };
            Ok::<_, SnapshotError>((chunk, uploaded_bytes))
        });
        let mut uploads = std::pin::pin!(uploads.buffered(REQUESTS_IN_FLIGHT_MAX));
        let mut chunks = Vec::new();
        let (mut uploaded, mut bytes_uploaded) = (0usize, 0u64);
        while let Some(result) = uploads.next().await {
            let (chunk, uploaded_bytes) = result?;
            if uploaded_bytes > 0 {
                uploaded += 1;
                bytes_uploaded += uploaded_bytes;
            }
            chunks.push(chunk);
        }
        let (meta_entries, record_count) = scan.await.map_err(|e| SnapshotError::Partition(format!("snapshot scan failed: {e}")))??;
        assert_eq!(record_count, state.record_count, "a snapshot holds every record of its view");
        assert_eq!(chunks.iter().map(|c| c.entries).sum::<u64>(), meta_entries + record_count, "every scanned entry is in a chunk");
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            namespace: namespace.to_string(),
            partition,
            partitions,
            log: log.to_string(),
            applied_next: state.applied_next,
            applied_entries: state.applied_entries,
            skipped_entries: state.skipped_entries,
            record_count,
            meta_entries,
            not_applied_from,
            state_hash: state.state_hash.to_hex(),
            created_unix_ms: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_millis() as u64,
            chunks,
            checksum: String::new(),
        };
        let bytes_total = manifest.total_compressed_bytes();
        let chunk_count = manifest.chunks.len();
        let sealed = manifest.seal();
        bytes_uploaded += sealed.len() as u64;
        let path = self.manifest_path(namespace, partition, state.applied_next);
        self.store.put(&path, PutPayload::from(sealed)).await.map_err(store_error)?;
        crate::metrics::SNAPSHOT_BYTES_UPLOADED.inc_by(bytes_uploaded);
        Ok(SnapshotReport {
            manifest: path.to_string(),
            applied_next: state.applied_next,
            record_count,
            chunks: chunk_count,
            chunks_uploaded: uploaded,
            bytes_uploaded,
            bytes_total,
        })
    }
}
