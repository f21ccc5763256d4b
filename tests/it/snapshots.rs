//! Partition snapshots on a real object store (`file://` in a temp dir):
//! restore reproduces the state exactly, an incremental snapshot after a 1%
//! change uploads a small fraction of a full one (measured in bytes), and a
//! corrupt newest snapshot (bit-flipped chunk, truncated manifest, missing
//! chunk) is rejected for the previous one.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tern::snapshot::{SnapshotError, Snapshots};
use tern::store::PartitionStore;

const PARTITIONS: u32 = 16;

/// Applies `count` puts (keys `k{i}` for i in `keys`) as one batch at `offset`.
fn write(store: &PartitionStore, keys: std::ops::Range<u32>, offset: u64, tag: &str) {
    store
        .apply(false, |tx| {
            for i in keys {
                // Realistic entropy: a digest per record (configuration values are not runs of one byte).
                let digest = blake3::hash(format!("{tag}{i}").as_bytes()).to_hex();
                let value = format!("{{\"tag\":\"{tag}\",\"i\":{i},\"digest\":\"{digest}\"}}");
                tx.put(&format!("tenant/{:06}", i), "config", offset, value.as_bytes())?;
            }
            tx.mark_applied(offset, false);
            Ok(())
        })
        .unwrap();
}

fn state_of(store: &PartitionStore) -> (u64, u64, String) {
    let state = store.read().unwrap().state().unwrap();
    (state.applied_next, state.record_count, state.state_hash.to_hex())
}

fn snapshots(dir: &Path) -> Snapshots {
    Snapshots::open(&format!("file://{}", dir.join("objects").display())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_is_exact_and_incremental_snapshots_upload_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(&dir.path().join("p.redb"), PARTITIONS, 8 << 20).unwrap();
    write(&store, 0..100_000, 0, "v1");
    let snapshots = snapshots(dir.path());
    let full = snapshots.create("ns", 3, PARTITIONS, store.read().unwrap(), "test-log").await.unwrap();
    assert_eq!((full.applied_next, full.record_count), (1, 100_000));
    assert_eq!(full.chunks, full.chunks_uploaded, "the first snapshot uploads every chunk");
    assert!(full.chunks > 20, "{full:?}");

    // Restore into a new store: identical applied offset, records and state hash.
    let restored_path = dir.path().join("restored.redb");
    let (restored, manifest) = snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 3, PARTITIONS, &restored_path, 8 << 20)).await.unwrap();
    assert_eq!(manifest.applied_next, 1);
    assert_eq!(state_of(&restored), state_of(&store));
    let record = restored.read().unwrap().get("tenant/012345", "config").unwrap().unwrap();
    assert_eq!(record.version, 0);

    // Change 1% of the records (one tenant range) and snapshot again.
    write(&store, 40_000..41_000, 1, "v2");
    let incremental = snapshots.create("ns", 3, PARTITIONS, store.read().unwrap(), "test-log").await.unwrap();
    assert_eq!(incremental.applied_next, 2);
    // Bytes uploaded, manifests included, against the full snapshot's upload.
    let fraction = incremental.bytes_uploaded as f64 / full.bytes_uploaded as f64;
    assert!(fraction < 0.05, "a 1% change uploaded {:.1}% of a full snapshot: {incremental:?} vs {full:?}", fraction * 100.0);
    assert!(incremental.chunks_uploaded < incremental.chunks / 10, "{incremental:?}");
    drop(restored);
    std::fs::remove_file(&restored_path).unwrap();
    let (restored, manifest) = snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 3, PARTITIONS, &restored_path, 8 << 20)).await.unwrap();
    assert_eq!(manifest.applied_next, 2, "the newest snapshot is restored");
    assert_eq!(state_of(&restored), state_of(&store));
}

/// A restore streams: chunks go into the store as they arrive, in
/// transactions of at most 100,000 records. A partition of 250,000 records
/// (three transactions) restores exactly; one whose last chunk is missing
/// fails only once most of it was written, and leaves no store and no
/// staging file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_streams_into_bounded_transactions_and_a_late_failure_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(&dir.path().join("p.redb"), PARTITIONS, 8 << 20).unwrap();
    write(&store, 0..250_000, 0, "big");
    let snapshots = snapshots(dir.path());
    let full = snapshots.create("ns", 5, PARTITIONS, store.read().unwrap(), "test-log").await.unwrap();
    let path = dir.path().join("restored.redb");
    let (restored, _) = snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 5, PARTITIONS, &path, 1 << 20)).await.unwrap();
    assert_eq!(state_of(&restored), state_of(&store));
    assert_eq!(state_of(&restored).1, 250_000);
    drop(restored);
    std::fs::remove_file(&path).unwrap();

    let partition_dir = dir.path().join("objects/tern/ns/5");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(partition_dir.join("manifests").join(format!("{:020}.json", 1))).unwrap()).unwrap();
    let chunks = manifest["chunks"].as_array().unwrap();
    assert_eq!(chunks.len(), full.chunks);
    let last = chunks.last().unwrap()["hash"].as_str().unwrap();
    std::fs::remove_file(partition_dir.join("chunks").join(last)).unwrap();
    let Err(error) = snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 5, PARTITIONS, &path, 1 << 20)).await else {
        panic!("a snapshot missing its last chunk restored")
    };
    let error = error.to_string();
    assert!(error.contains("no valid snapshot of ns/5") && error.contains("is missing"), "{error}");
    assert!(!path.exists() && !path.with_extension("restoring").exists(), "no half-restored store is left behind");
}

/// Restores wait their turn: each holds a blocking thread while its chunks
/// stream in, and `file://` reads chunks on blocking threads too. Eight
/// restores at once on a runtime of six blocking threads finish (four run,
/// four wait); without the bound all six threads waited for chunks that
/// no thread was left to read, for ever.
#[test]
fn many_restores_at_once_share_the_blocking_threads() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).max_blocking_threads(6).enable_all().build().unwrap();
        let restored = runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let snapshots = snapshots(dir.path());
            for partition in 0..8 {
                let store = PartitionStore::open(&dir.path().join(format!("p{partition}.redb")), 8, 1 << 20).unwrap();
                write(&store, 0..5_000, 0, &format!("p{partition}"));
                snapshots.create("ns", partition, 8, store.read().unwrap(), "test-log").await.unwrap();
            }
            let restores = (0..8).map(|partition| {
                let (snapshots, path) = (snapshots.clone(), dir.path().join(format!("restored{partition}.redb")));
                tokio::spawn(async move {
                    let target = tern::snapshot::RestoreTarget::new("ns", partition, 8, &path, 1 << 20);
                    snapshots.restore(&target).await.map(|(store, _)| state_of(&store).1)
                })
            });
            let mut counts = Vec::new();
            for restore in restores.collect::<Vec<_>>() {
                counts.push(restore.await.unwrap().unwrap());
            }
            counts
        });
        let _ = done.send(restored);
    });
    let counts = finished.recv_timeout(std::time::Duration::from_secs(120)).expect("eight restores finish (no deadlock on blocking threads)");
    assert_eq!(counts, vec![5_000; 8]);
}

/// Takes two snapshots (applied_next 1 and 2); returns the objects directory.
async fn two_snapshots(dir: &Path) -> (Snapshots, std::path::PathBuf) {
    let store = PartitionStore::open(&dir.join("p.redb"), PARTITIONS, 8 << 20).unwrap();
    write(&store, 0..5_000, 0, "old");
    let snapshots = snapshots(dir);
    snapshots.create("ns", 0, PARTITIONS, store.read().unwrap(), "test-log").await.unwrap();
    write(&store, 0..5_000, 1, "new");
    snapshots.create("ns", 0, PARTITIONS, store.read().unwrap(), "test-log").await.unwrap();
    (snapshots, dir.join("objects/tern/ns/0"))
}

/// The chunk files the newest manifest names that the older one does not.
fn newest_only_chunks(partition_dir: &Path) -> Vec<std::path::PathBuf> {
    let read =
        |name: &str| -> serde_json::Value { serde_json::from_slice(&std::fs::read(partition_dir.join("manifests").join(name)).unwrap()).unwrap() };
    let hashes =
        |m: &serde_json::Value| -> Vec<String> { m["chunks"].as_array().unwrap().iter().map(|c| c["hash"].as_str().unwrap().to_string()).collect() };
    let (old, new) = (hashes(&read(&format!("{:020}.json", 1))), hashes(&read(&format!("{:020}.json", 2))));
    new.iter().filter(|h| !old.contains(h)).map(|h| partition_dir.join("chunks").join(h)).collect()
}

async fn restored_offset(snapshots: &Snapshots, dir: &Path) -> Result<u64, SnapshotError> {
    let path = dir.join(format!("restore-{}.redb", rand::random::<u32>()));
    let restored =
        snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 0, PARTITIONS, &path, 1 << 20)).await.map(|(_, manifest)| manifest.applied_next);
    if restored.is_err() {
        assert!(!path.exists() && !path.with_extension("restoring").exists(), "no half-restored store is left behind");
    }
    restored
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_newest_snapshot_is_rejected_for_the_previous_one() {
    // A bit flipped in a chunk.
    let dir = tempfile::tempdir().unwrap();
    let (snapshots, partition_dir) = two_snapshots(dir.path()).await;
    assert_eq!(restored_offset(&snapshots, dir.path()).await.unwrap(), 2);
    let chunk = newest_only_chunks(&partition_dir).remove(0);
    let mut bytes = std::fs::read(&chunk).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&chunk, bytes).unwrap();
    assert_eq!(restored_offset(&snapshots, dir.path()).await.unwrap(), 1, "bit flip detected, older snapshot used");

    // A truncated manifest.
    let dir = tempfile::tempdir().unwrap();
    let (snapshots, partition_dir) = two_snapshots(dir.path()).await;
    let manifest = partition_dir.join("manifests").join(format!("{:020}.json", 2));
    let bytes = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &bytes[..bytes.len() - 20]).unwrap();
    assert_eq!(restored_offset(&snapshots, dir.path()).await.unwrap(), 1, "truncated manifest detected");

    // A missing chunk.
    let dir = tempfile::tempdir().unwrap();
    let (snapshots, partition_dir) = two_snapshots(dir.path()).await;
    std::fs::remove_file(newest_only_chunks(&partition_dir).remove(0)).unwrap();
    assert_eq!(restored_offset(&snapshots, dir.path()).await.unwrap(), 1, "missing chunk detected");

    // Nothing valid left: a precise error, not a half store.
    for entry in std::fs::read_dir(partition_dir.join("chunks")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let error = restored_offset(&snapshots, dir.path()).await.unwrap_err().to_string();
    assert!(error.contains("no valid snapshot of ns/0") && error.contains("is missing"), "{error}");
}

/// The S3 endpoint of the test server (`scripts/s3.sh`, started by scripts/test.sh).
pub(crate) fn s3_endpoint() -> String {
    std::env::var("TERN_TEST_S3").expect("TERN_TEST_S3 must name an S3 endpoint: run scripts/test.sh, or scripts/s3.sh start and export it")
}

/// The options of a snapshot store at the S3 test server `endpoint`
/// (endpoint and credentials from configuration, not the environment).
pub(crate) fn s3_options(endpoint: String) -> Vec<(String, String)> {
    [
        ("aws_endpoint", endpoint),
        ("aws_region", "us-east-1".to_string()),
        ("aws_access_key_id", "test".to_string()),
        ("aws_secret_access_key", "test".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A TCP proxy in front of the S3 server that can "stop" it: refuse new
/// connections and cut the open ones, while the server keeps what it has.
pub(crate) struct Proxy {
    pub address: String,
    down: Arc<AtomicBool>,
    forwarded_bytes: Arc<AtomicU64>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    pub(crate) async fn start(upstream: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (down, forwarded_bytes) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (d, f, c) = (down.clone(), forwarded_bytes.clone(), connections.clone());
        tokio::spawn(async move {
            loop {
                let (mut client, _) = listener.accept().await.unwrap();
                if d.load(Ordering::SeqCst) {
                    continue; // dropped: the "server" is down
                }
                let (upstream, forwarded) = (upstream.clone(), f.clone());
                let task = tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { return };
                    let (mut client_read, mut client_write) = client.split();
                    let (mut server_read, mut server_write) = tokio::io::split(server);
                    // Requests are counted as they pass, so the test can stop S3 mid-upload.
                    let up = async {
                        let mut buffer = vec![0u8; 64 * 1024];
                        while let Ok(n @ 1..) = client_read.read(&mut buffer).await {
                            forwarded.fetch_add(n as u64, Ordering::SeqCst);
                            if server_write.write_all(&buffer[..n]).await.is_err() {
                                break;
                            }
                        }
                    };
                    let down = tokio::io::copy(&mut server_read, &mut client_write);
                    tokio::select! { _ = up => {}, _ = down => {} }
                });
                c.lock().unwrap().push(task.abort_handle());
            }
        });
        Proxy { address, down, forwarded_bytes, connections }
    }

    pub(crate) fn stop(&self) {
        self.down.store(true, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    pub(crate) fn resume(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_on_an_s3_server_restore_exactly_and_survive_the_server_stopping() {
    let endpoint = s3_endpoint();
    let bucket = format!("tern-{}", rand::random::<u32>());
    let created = reqwest::Client::new().put(format!("{endpoint}/{bucket}")).send().await.unwrap();
    assert!(created.status().is_success(), "create bucket: {}", created.status());
    let proxy = Proxy::start(endpoint.trim_start_matches("http://").to_string()).await;
    // Endpoint and credentials from configuration (the environment is not used).
    let mut options = s3_options(format!("http://{}", proxy.address));
    options.push(("AWS_ALLOW_HTTP".into(), "true".into()));
    let unknown = Snapshots::open_with("s3://b/p", &[("aws_no_such_key".to_string(), "1".to_string())]);
    assert!(unknown.unwrap_err().to_string().contains("aws_no_such_key"), "an unknown option is an error");
    let snapshots = Snapshots::open_with(&format!("s3://{bucket}/cluster-1"), &options).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(&dir.path().join("p.redb"), PARTITIONS, 8 << 20).unwrap();
    write(&store, 0..20_000, 0, "v1");
    let full = snapshots.create("ns", 1, PARTITIONS, store.read().unwrap(), "test-log").await.unwrap();
    write(&store, 5_000..5_200, 1, "v2");
    let incremental = snapshots.create("ns", 1, PARTITIONS, store.read().unwrap(), "test-log").await.unwrap();
    assert!(incremental.chunks_uploaded < full.chunks_uploaded / 4, "{incremental:?} vs {full:?}");
    let (restored, manifest) =
        snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 1, PARTITIONS, &dir.path().join("r1.redb"), 8 << 20)).await.unwrap();
    assert_eq!(manifest.applied_next, 2);
    assert_eq!(state_of(&restored), state_of(&store));

    // Rewrite everything (every chunk changes), and stop S3 in the middle of the upload.
    write(&store, 0..20_000, 2, "v3");
    let before = proxy.forwarded_bytes.load(Ordering::SeqCst);
    let upload = {
        let (snapshots, reader) = (snapshots.clone(), store.read().unwrap());
        tokio::spawn(async move { snapshots.create("ns", 1, PARTITIONS, reader, "test-log").await })
    };
    while proxy.forwarded_bytes.load(Ordering::SeqCst) < before + full.bytes_total / 3 {
        assert!(!upload.is_finished(), "the upload finished before S3 could be stopped mid-way");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    proxy.stop();
    let failed = upload.await.unwrap();
    assert!(failed.is_err(), "the snapshot fails while S3 is down: {failed:?}");
    // A restore meanwhile says the store is unreachable (bounded retries), not that no snapshot is valid.
    let down = snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 1, PARTITIONS, &dir.path().join("r-down.redb"), 8 << 20)).await;
    assert!(matches!(down, Err(SnapshotError::Store(_))), "{:?}", down.map(|(_, m)| m.applied_next));
    proxy.resume();
    // Its chunks are partly in S3, its manifest is not: it does not exist.
    let (_, manifest) =
        snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 1, PARTITIONS, &dir.path().join("r2.redb"), 8 << 20)).await.unwrap();
    assert_eq!(manifest.applied_next, 2, "the half snapshot is never used");
    // The next attempt succeeds and is the one restored.
    let retried = snapshots.create("ns", 1, PARTITIONS, store.read().unwrap(), "test-log").await.unwrap();
    assert_eq!(retried.applied_next, 3);
    let (restored, manifest) =
        snapshots.restore(&tern::snapshot::RestoreTarget::new("ns", 1, PARTITIONS, &dir.path().join("r3.redb"), 8 << 20)).await.unwrap();
    assert_eq!(manifest.applied_next, 3);
    assert_eq!(state_of(&restored), state_of(&store));
}

/// A snapshot that fails verification (its manifest is well formed and
/// sealed, but the state hash it promises is not what its chunks hold)
/// never takes the place of an existing store: the store is replaced only
/// by one that verified. Before the fix the rebuilt store was renamed over
/// the stale one first and checked after, so a bad snapshot destroyed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_fails_verification_never_replaces_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let snapshots = snapshots(dir.path());
    let source = PartitionStore::open(&dir.path().join("source.redb"), PARTITIONS, 1 << 20).unwrap();
    write(&source, 0..100, 7, "new");
    let report = snapshots.create("ns", 2, PARTITIONS, source.read().unwrap(), "test-log").await.unwrap();
    // The manifest now promises another state hash; resealed, so only the content check can tell.
    // A file:// store names objects by their absolute path, without the leading slash.
    let manifest_path = std::path::Path::new("/").join(report.manifest.as_str());
    let mut manifest: tern::snapshot::format::Manifest = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest.state_hash = "00".repeat(32);
    std::fs::write(&manifest_path, manifest.seal()).unwrap();

    let stale_path = dir.path().join("stale.redb");
    let stale = PartitionStore::open(&stale_path, PARTITIONS, 1 << 20).unwrap();
    write(&stale, 0..3, 0, "old");
    let before = state_of(&stale);
    drop(stale);
    let target = tern::snapshot::RestoreTarget {
        replace: true,
        applied_next_min: 1,
        ..tern::snapshot::RestoreTarget::new("ns", 2, PARTITIONS, &stale_path, 1 << 20)
    };
    let err = snapshots.restore(&target).await.err().expect("the snapshot does not verify");
    assert!(err.to_string().contains("state hash"), "{err}");
    let reopened = PartitionStore::open(&stale_path, PARTITIONS, 1 << 20).unwrap();
    assert_eq!(state_of(&reopened), before, "the stale store is still there, untouched");
    assert!(!stale_path.with_extension("restoring").exists(), "nothing half-built is left");
}

/// `tern snapshot create` takes one snapshot per partition the node
/// serves, a request each, and sums them up; `--ns` and `--partition`
/// narrow it; an unknown namespace is refused with its exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_takes_a_snapshot_of_every_served_partition_and_sums_them_up() {
    let dir = tempfile::tempdir().unwrap();
    let t = crate::common::Tern::dev(dir.path()).await;
    assert_eq!(t.put("k", "s", &serde_json::json!(1)).await.0, 200);
    let (ok, stdout, stderr) = crate::common::cli(&t.url, &["snapshot", "create"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("16 snapshots taken: "), "default's 16 partitions: {stdout}");
    let (ok, stdout, stderr) = crate::common::cli(&t.url, &["snapshot", "create", "--ns", "default", "--partition", "3"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("1 snapshots taken: "), "{stdout}");
    let (ok, _, stderr) = crate::common::cli(&t.url, &["snapshot", "create", "--ns", "nope"]);
    assert!(!ok && stderr.contains("namespace_not_found"), "{stderr}");
    let (ok, stdout, _) = crate::common::cli(&t.url, &["snapshot", "create", "--json"]);
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(ok && answer["snapshots"].as_array().unwrap().len() == 16, "{answer}");
}
