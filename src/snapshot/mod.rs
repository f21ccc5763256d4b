//! Partition snapshots in object storage (`object_store`: `file://`,
//! `memory://`, and the crate's other backends), so a new or wiped replica
//! restores a partition and catches up from the log instead of replaying it
//! all.
//!
//! Layout under the store's root:
//!
//! ```text
//! tern/<namespace>/<partition>/chunks/<blake3 hex>                 zstd chunk (format.rs)
//! tern/<namespace>/<partition>/manifests/<applied_next:020>.json   sealed manifest, written last
//! ```
//!
//! Taking a snapshot reads one MVCC view of the store (one applied offset),
//! cuts it into content-defined chunks, uploads the chunks the store does not
//! have yet (incremental: unchanged chunks are shared), then the manifest.
//! Restoring takes the newest manifest that verifies, checks every chunk's
//! hash, rebuilds the store and checks the recomputed state hash and record
//! count against the manifest; any failure falls back to the next older
//! snapshot.

pub mod format;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use self::format::{ChunkRef, Chunker, Manifest, MANIFEST_FORMAT};
use crate::store::{PartitionStore, RestoredState, StoreReader};

/// Chunks in flight between the store scan and the uploader: bounds memory
/// to a few chunks however large the partition.
const CHUNKS_IN_FLIGHT_MAX: usize = 4;
/// S3 bounds: retries per request, total retry time, one request, one connect.
/// The snapshot option naming a PEM CA bundle to trust for an `https://`
/// S3 endpoint (object storage behind a private CA).
pub const CA_FILE_OPTION: &str = "ca_file";
const S3_RETRIES_MAX: usize = 3;
const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(20);
const S3_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const S3_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Unreferenced chunks younger than this survive pruning (see `prune`).
const CHUNK_GC_GRACE: chrono::TimeDelta = chrono::TimeDelta::hours(1);
/// Object store requests in flight per snapshot or restore.
const REQUESTS_IN_FLIGHT_MAX: usize = 16;
/// Largest manifest read (a 1,000,000-record partition has ~2,500 chunks).
const MANIFEST_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("object store: {0}")]
    Store(String),
    #[error("partition store: {0}")]
    Partition(String),
    #[error("snapshot {path} is invalid: {reason}")]
    Invalid {
        path: String,
        reason: String,
        /// Valid, but a snapshot of another log.
        other_log: bool,
    },
    /// Nothing to restore: no snapshot of the partition exists (a new
    /// namespace, or one never snapshotted), or none as new as asked for
    /// (`RestoreTarget::applied_next_min`). Not an error for a new store.
    #[error("no snapshot of {namespace}/{partition} exists")]
    NoneExist { namespace: String, partition: u32 },
    /// Snapshots exist and every one failed to verify.
    #[error("no valid snapshot of {namespace}/{partition} (tried: {tried})")]
    NoneValid {
        namespace: String,
        partition: u32,
        tried: String,
        /// Some were rejected only for being of another log (`RestoreTarget::log`).
        other_log: bool,
    },
}

impl From<crate::store::StoreError> for SnapshotError {
    fn from(e: crate::store::StoreError) -> SnapshotError {
        SnapshotError::Partition(e.to_string())
    }
}

fn store_error(e: impl std::fmt::Display) -> SnapshotError {
    SnapshotError::Store(e.to_string())
}

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

/// The snapshots of one object store.
#[derive(Clone)]
pub struct Snapshots {
    store: Arc<dyn ObjectStore>,
    root: ObjectPath,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshots({} at {:?})", self.store, self.root.as_ref())
    }
}

impl Snapshots {
    /// Opens the object store a URL names: `file:///abs/dir`, `memory://`,
    /// `s3://bucket/prefix` (endpoint, region and credentials from the
    /// standard `AWS_*` environment variables, e.g. `AWS_ENDPOINT`,
    /// `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_ALLOW_HTTP=true` for a plain-HTTP endpoint), and the crate's others.
    pub fn open(url: &str) -> Result<Snapshots, SnapshotError> {
        Snapshots::open_with(url, &[])
    }

    /// Like `open`, with backend settings from configuration that override
    /// the environment: object_store's config keys, e.g. `aws_endpoint`,
    /// `aws_region`, `aws_access_key_id`, `aws_secret_access_key`,
    /// `aws_allow_http` (case-insensitive). An unknown key is an error.
    pub fn open_with(url: &str, options: &[(String, String)]) -> Result<Snapshots, SnapshotError> {
        let parsed = url::Url::parse(url).map_err(|e| store_error(format!("{url:?} is not a URL: {e}")))?;
        if parsed.scheme() == "file" {
            // object_store's local store needs the directory to exist.
            std::fs::create_dir_all(parsed.path()).map_err(|e| store_error(format!("creating {}: {e}", parsed.path())))?;
        }
        if parsed.scheme() == "s3" {
            // Every request and every retry is bounded: a stopped S3 fails a
            // snapshot within seconds (the next attempt retries), never hangs it.
            // (These client options replace the ones `from_env` read, so
            // AWS_ALLOW_HTTP is carried over by hand.)
            let configured_allow_http =
                options.iter().find(|(k, _)| k.eq_ignore_ascii_case("aws_allow_http")).map(|(_, v)| v.clone());
            let allow_http = configured_allow_http
                .or_else(|| std::env::var("AWS_ALLOW_HTTP").ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let mut builder = object_store::aws::AmazonS3Builder::from_env().with_url(url);
            // `ca_file` is Tern's own: a PEM CA bundle to trust for an https:// endpoint.
            let ca_file = options.iter().find(|(k, _)| k.eq_ignore_ascii_case(CA_FILE_OPTION)).map(|(_, v)| v.clone());
            for (key, value) in options.iter().filter(|(k, _)| !k.eq_ignore_ascii_case(CA_FILE_OPTION)) {
                let key: object_store::aws::AmazonS3ConfigKey = key
                    .to_ascii_lowercase()
                    .parse()
                    .map_err(|e| store_error(format!("snapshot option {key:?}: {e}")))?;
                builder = builder.with_config(key, value);
            }
            let mut client = object_store::ClientOptions::new()
                .with_timeout(S3_REQUEST_TIMEOUT)
                .with_connect_timeout(S3_CONNECT_TIMEOUT)
                .with_allow_http(allow_http);
            if let Some(path) = ca_file {
                let pem = std::fs::read(&path).map_err(|e| store_error(format!("snapshot option ca_file {path}: {e}")))?;
                let certificates = object_store::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| store_error(format!("snapshot option ca_file {path}: {e}")))?;
                for certificate in certificates {
                    client = client.with_root_certificate(certificate);
                }
            }
            let store = builder
                .with_retry(object_store::RetryConfig {
                    max_retries: S3_RETRIES_MAX,
                    retry_timeout: S3_RETRY_TIMEOUT,
                    ..Default::default()
                })
                .with_client_options(client)
                .build()
                .map_err(store_error)?;
            let root = ObjectPath::from(parsed.path().trim_start_matches('/'));
            return Ok(Snapshots { store: Arc::new(store), root });
        }
        let mut all: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with("AWS_")).collect();
        all.extend(options.iter().cloned());
        let (store, root) = object_store::parse_url_opts(&parsed, all).map_err(store_error)?;
        Ok(Snapshots { store: Arc::from(store), root })
    }

    /// The object store and root these snapshots live under (the journal
    /// keeps its copy there too: `journal::objects`).
    pub fn object_store(&self) -> (Arc<dyn ObjectStore>, &ObjectPath) {
        (self.store.clone(), &self.root)
    }

    fn partition_dir(&self, namespace: &str, partition: u32) -> ObjectPath {
        self.root.clone().join("tern").join(namespace).join(partition.to_string())
    }

    fn chunk_path(&self, namespace: &str, partition: u32, hash: &str) -> ObjectPath {
        self.partition_dir(namespace, partition).join("chunks").join(hash)
    }

    fn manifest_path(&self, namespace: &str, partition: u32, applied_next: u64) -> ObjectPath {
        self.partition_dir(namespace, partition).join("manifests").join(format!("{applied_next:020}.json"))
    }

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
        let journal_from = reader.journal_from().map_err(|e| SnapshotError::Partition(e.to_string()))?;
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
        let (meta_entries, record_count) =
            scan.await.map_err(|e| SnapshotError::Partition(format!("snapshot scan failed: {e}")))??;
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
            journal_from,
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

    /// Manifests of a partition, newest (highest applied offset) first.
    pub async fn list(&self, namespace: &str, partition: u32) -> Result<Vec<(u64, ObjectPath)>, SnapshotError> {
        let dir = self.partition_dir(namespace, partition).join("manifests");
        let objects: Vec<object_store::ObjectMeta> = self.store.list(Some(&dir)).try_collect().await.map_err(store_error)?;
        let mut manifests: Vec<(u64, ObjectPath)> = objects
            .into_iter()
            .filter_map(|o| {
                let name = o.location.filename()?.strip_suffix(".json")?.parse::<u64>().ok()?;
                Some((name, o.location))
            })
            .collect();
        manifests.sort_by(|a, b| b.0.cmp(&a.0));
        Ok(manifests)
    }

    /// Keeps the `retain` newest snapshots of a partition and deletes the
    /// older manifests, then the chunks no remaining manifest names. A chunk
    /// younger than `CHUNK_GC_GRACE` is kept even if unreferenced: another
    /// writer may have uploaded it for a manifest it has not written yet.
    pub async fn prune(&self, namespace: &str, partition: u32, retain: usize) -> Result<usize, SnapshotError> {
        assert!(retain >= 1, "at least one snapshot is kept");
        let manifests = self.list(namespace, partition).await?;
        if manifests.len() <= retain {
            return Ok(0);
        }
        let mut referenced = std::collections::HashSet::new();
        for (_, path) in &manifests[..retain] {
            let bytes = self.store.get(path).await.map_err(store_error)?.bytes().await.map_err(store_error)?;
            // An unreadable kept manifest protects nothing; it is never restored either.
            if let Ok(manifest) = Manifest::open(&bytes) {
                referenced.extend(manifest.chunks.into_iter().map(|c| c.hash));
            }
        }
        for (_, path) in &manifests[retain..] {
            self.store.delete(path).await.map_err(store_error)?;
        }
        let chunks_dir = self.partition_dir(namespace, partition).join("chunks");
        let chunks: Vec<object_store::ObjectMeta> = self.store.list(Some(&chunks_dir)).try_collect().await.map_err(store_error)?;
        let grace_start = chrono::Utc::now() - CHUNK_GC_GRACE;
        let mut deleted = 0;
        for chunk in chunks {
            let name = chunk.location.filename().unwrap_or_default().to_string();
            if !referenced.contains(&name) && chunk.last_modified < grace_start {
                self.store.delete(&chunk.location).await.map_err(store_error)?;
                deleted += 1;
            }
        }
        Ok(manifests.len() - retain + deleted)
    }

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

    async fn try_restore(&self, manifest_path: &ObjectPath, target: &RestoreTarget<'_>) -> Result<(PartitionStore, Manifest), SnapshotError> {
        let RestoreTarget { namespace, partition, partitions, path, cache_bytes, .. } = *target;
        let invalid = |reason: String| SnapshotError::Invalid { path: manifest_path.to_string(), reason, other_log: false };
        let bytes = self.store.get(manifest_path).await.map_err(store_error)?.bytes().await.map_err(store_error)?;
        if bytes.len() > MANIFEST_BYTES_MAX {
            return Err(invalid(format!("manifest of {} bytes exceeds {MANIFEST_BYTES_MAX}", bytes.len())));
        }
        let manifest = Manifest::open(&bytes).map_err(invalid)?;
        if (manifest.namespace.as_str(), manifest.partition, manifest.partitions) != (namespace, partition, partitions) {
            return Err(invalid(format!(
                "it is of {}/{} with {} partitions, not {namespace}/{partition} with {partitions}",
                manifest.namespace, manifest.partition, manifest.partitions
            )));
        }
        if let Some(log) = target.log {
            if manifest.log != log {
                return Err(SnapshotError::Invalid { path: manifest_path.to_string(), other_log: true, reason: format!(
                    "it is of the log {:?}, this node's log is {log:?} (another cluster sharing the bucket, or a topic \
                     deleted and re-created): its offsets are not this log's; restore it into this log only with \
                     --restore",
                    manifest.log
                ) });
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
        let compressed: Vec<(ChunkRef, Bytes)> = fetches.buffered(REQUESTS_IN_FLIGHT_MAX).try_collect().await?;
        let state = RestoredState {
            applied_next: manifest.applied_next,
            applied_entries: manifest.applied_entries,
            skipped_entries: manifest.skipped_entries,
            journal_from: manifest.journal_from,
        };
        let (path_owned, expected, replace) = (path.to_path_buf(), manifest.clone(), target.replace);
        let rebuilt =
            tokio::task::spawn_blocking(move || rebuild(&path_owned, partitions, cache_bytes, &state, compressed, &expected, replace))
            .await
            .map_err(|e| SnapshotError::Partition(format!("restore task failed: {e}")))?;
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

/// Reads every record of `reader`, cuts, compresses and hashes chunks, and
/// hands them to the uploader (blocking while `CHUNKS_IN_FLIGHT_MAX` wait).
/// Returns `(outcome metadata entries, records)` scanned.
fn scan_chunks(reader: &StoreReader, sender: &tokio::sync::mpsc::Sender<(ChunkRef, Bytes)>) -> Result<(u64, u64), SnapshotError> {
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

/// Decompresses verified chunks into a new store and checks what the manifest promised.
fn rebuild(
    path: &Path,
    partitions: u32,
    cache_bytes: usize,
    state: &RestoredState,
    chunks: Vec<(ChunkRef, Bytes)>,
    manifest: &Manifest,
    replace: bool,
) -> Result<PartitionStore, String> {
    // Set by the chunk decoder, read by the check (both borrow it).
    let failure: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
    let records = chunks.into_iter().flat_map(|(chunk, compressed)| {
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
    let expected = (manifest.state_hash.clone(), manifest.record_count);
    let verify = |hash: crate::store::hash::StateHash, record_count: u64| {
        if let Some(failure) = failure.borrow_mut().take() {
            return Err(failure);
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
    let (store, _) = PartitionStore::restore(path, partitions, cache_bytes, state, records, replace, verify).map_err(|e| e.to_string())?;
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_backend_the_build_supports_opens_from_its_url() {
        // In memory: a full round trip.
        let snapshots = Snapshots::open("memory://").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
        store
            .apply(false, |tx| {
                tx.put("k", "", 0, b"1")?;
                tx.mark_applied(0, false);
                Ok(())
            })
            .unwrap();
        let report = snapshots.create("ns", 0, 1, store.read().unwrap(), "test-log").await.unwrap();
        assert_eq!((report.applied_next, report.record_count), (1, 1));
        let path = dir.path().join("r");
        let target = RestoreTarget {
            namespace: "ns",
            partition: 0,
            partitions: 1,
            path: &path,
            cache_bytes: 1 << 20,
            log: Some("test-log"),
            applied_next_min: 0,
            replace: false,
        };
        let (restored, _) = snapshots.restore(&target).await.unwrap();
        assert_eq!(restored.read().unwrap().state().unwrap(), store.read().unwrap().state().unwrap());
        // Cloud backends are compiled in: their URLs parse (no request is made until used).
        for url in ["gs://bucket/prefix", "az://container/prefix", "https://example.invalid/prefix"] {
            if let Err(e) = Snapshots::open(url) {
                assert!(!e.to_string().contains("not enabled"), "{url}: {e}");
            }
        }
        assert!(Snapshots::open("not a url").unwrap_err().to_string().contains("is not a URL"));
    }
}
