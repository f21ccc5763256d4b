//! `Snapshots`: a partition's snapshots in an object store (a local
//! directory, S3-compatible, GCS, Azure) — opened with its client's bounds
//! (bounded retries, an https endpoint's private CA), where each snapshot's
//! chunks and manifest live, and listing them newest first.

use super::error::{store_error, SnapshotError};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use std::sync::Arc;
use std::time::Duration;

/// S3 bounds: retries per request, total retry time, one request, one connect.
/// The snapshot option naming a PEM CA bundle to trust for an `https://`
/// S3 endpoint (object storage behind a private CA).
pub const CA_FILE_OPTION: &str = "ca_file";

pub(super) const S3_RETRIES_MAX: usize = 3;

pub(super) const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(20);

pub(super) const S3_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) const S3_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Object store requests in flight per snapshot or restore.
pub(super) const REQUESTS_IN_FLIGHT_MAX: usize = 16;

/// Restores running at once on a node (more wait their turn). Each holds a
/// blocking thread while its chunks stream in, and up to
/// `REQUESTS_IN_FLIGHT_MAX + restore::CHUNKS_QUEUED_MAX` chunks: bounded,
/// a node restoring 1,024 partitions neither runs out of blocking threads
/// (the fetches of `file://` need some too) nor holds 1,024 times that.
pub(super) const RESTORES_IN_FLIGHT_MAX: usize = 4;

impl From<crate::store::StoreError> for SnapshotError {
    fn from(e: crate::store::StoreError) -> SnapshotError {
        SnapshotError::Partition(e.to_string())
    }
}

/// The snapshots of one object store.
#[derive(Clone)]
pub struct Snapshots {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) root: ObjectPath,
    /// `RESTORES_IN_FLIGHT_MAX` permits, shared by every clone.
    pub(super) restores: Arc<tokio::sync::Semaphore>,
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
            let configured_allow_http = options.iter().find(|(k, _)| k.eq_ignore_ascii_case("aws_allow_http")).map(|(_, v)| v.clone());
            let allow_http = configured_allow_http.or_else(|| std::env::var("AWS_ALLOW_HTTP").ok()).is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let mut builder = object_store::aws::AmazonS3Builder::from_env().with_url(url);
            // `ca_file` is Tern's own: a PEM CA bundle to trust for an https:// endpoint.
            let ca_file = options.iter().find(|(k, _)| k.eq_ignore_ascii_case(CA_FILE_OPTION)).map(|(_, v)| v.clone());
            for (key, value) in options.iter().filter(|(k, _)| !k.eq_ignore_ascii_case(CA_FILE_OPTION)) {
                let key: object_store::aws::AmazonS3ConfigKey =
                    key.to_ascii_lowercase().parse().map_err(|e| store_error(format!("snapshot option {key:?}: {e}")))?;
                builder = builder.with_config(key, value);
            }
            let mut client = object_store::ClientOptions::new()
                .with_timeout(S3_REQUEST_TIMEOUT)
                .with_connect_timeout(S3_CONNECT_TIMEOUT)
                .with_allow_http(allow_http);
            if let Some(path) = ca_file {
                let pem = std::fs::read(&path).map_err(|e| store_error(format!("snapshot option ca_file {path}: {e}")))?;
                let certificates =
                    object_store::Certificate::from_pem_bundle(&pem).map_err(|e| store_error(format!("snapshot option ca_file {path}: {e}")))?;
                for certificate in certificates {
                    client = client.with_root_certificate(certificate);
                }
            }
            let store = builder
                .with_retry(object_store::RetryConfig { max_retries: S3_RETRIES_MAX, retry_timeout: S3_RETRY_TIMEOUT, ..Default::default() })
                .with_client_options(client)
                .build()
                .map_err(store_error)?;
            let root = ObjectPath::from(parsed.path().trim_start_matches('/'));
            return Ok(Snapshots { store: Arc::new(store), root, restores: Arc::new(tokio::sync::Semaphore::new(RESTORES_IN_FLIGHT_MAX)) });
        }
        let mut all: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with("AWS_")).collect();
        all.extend(options.iter().cloned());
        let (store, root) = object_store::parse_url_opts(&parsed, all).map_err(store_error)?;
        Ok(Snapshots { store: Arc::from(store), root, restores: Arc::new(tokio::sync::Semaphore::new(RESTORES_IN_FLIGHT_MAX)) })
    }

    /// The object store and root these snapshots live under (the journal
    /// keeps its copy there too: `journal::objects`).
    pub fn object_store(&self) -> (Arc<dyn ObjectStore>, &ObjectPath) {
        (self.store.clone(), &self.root)
    }

    pub(super) fn partition_dir(&self, namespace: &str, partition: u32) -> ObjectPath {
        self.root.clone().join("tern").join(namespace).join(partition.to_string())
    }

    pub(super) fn chunk_path(&self, namespace: &str, partition: u32, hash: &str) -> ObjectPath {
        self.partition_dir(namespace, partition).join("chunks").join(hash)
    }

    pub(super) fn manifest_path(&self, namespace: &str, partition: u32, applied_next: u64) -> ObjectPath {
        self.partition_dir(namespace, partition).join("manifests").join(format!("{applied_next:020}.json"))
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
        manifests.sort_by_key(|manifest| std::cmp::Reverse(manifest.0));
        Ok(manifests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::RestoreTarget;
    use crate::store::PartitionStore;

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
