//! Partition snapshots on a real object store (`file://` in a temp dir):
//! restore reproduces the state exactly, an incremental snapshot after a 1%
//! change uploads a small fraction of a full one (measured in bytes), and a
//! corrupt newest snapshot (bit-flipped chunk, truncated manifest, missing
//! chunk) is rejected for the previous one.

use std::path::Path;

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
    let full = snapshots.create("ns", 3, PARTITIONS, store.read().unwrap()).await.unwrap();
    assert_eq!((full.applied_next, full.record_count), (1, 100_000));
    assert_eq!(full.chunks, full.chunks_uploaded, "the first snapshot uploads every chunk");
    assert!(full.chunks > 20, "{full:?}");

    // Restore into a new store: identical applied offset, records and state hash.
    let restored_path = dir.path().join("restored.redb");
    let (restored, manifest) = snapshots.restore("ns", 3, PARTITIONS, &restored_path, 8 << 20).await.unwrap();
    assert_eq!(manifest.applied_next, 1);
    assert_eq!(state_of(&restored), state_of(&store));
    let record = restored.read().unwrap().get("tenant/012345", "config").unwrap().unwrap();
    assert_eq!(record.version, 0);

    // Change 1% of the records (one tenant range) and snapshot again.
    write(&store, 40_000..41_000, 1, "v2");
    let incremental = snapshots.create("ns", 3, PARTITIONS, store.read().unwrap()).await.unwrap();
    assert_eq!(incremental.applied_next, 2);
    // Bytes uploaded, manifests included, against the full snapshot's upload.
    let fraction = incremental.bytes_uploaded as f64 / full.bytes_uploaded as f64;
    assert!(fraction < 0.05, "a 1% change uploaded {:.1}% of a full snapshot: {incremental:?} vs {full:?}", fraction * 100.0);
    assert!(incremental.chunks_uploaded < incremental.chunks / 10, "{incremental:?}");
    drop(restored);
    std::fs::remove_file(&restored_path).unwrap();
    let (restored, manifest) = snapshots.restore("ns", 3, PARTITIONS, &restored_path, 8 << 20).await.unwrap();
    assert_eq!(manifest.applied_next, 2, "the newest snapshot is restored");
    assert_eq!(state_of(&restored), state_of(&store));
}

/// Takes two snapshots (applied_next 1 and 2); returns the objects directory.
async fn two_snapshots(dir: &Path) -> (Snapshots, std::path::PathBuf) {
    let store = PartitionStore::open(&dir.join("p.redb"), PARTITIONS, 8 << 20).unwrap();
    write(&store, 0..5_000, 0, "old");
    let snapshots = snapshots(dir);
    snapshots.create("ns", 0, PARTITIONS, store.read().unwrap()).await.unwrap();
    write(&store, 0..5_000, 1, "new");
    snapshots.create("ns", 0, PARTITIONS, store.read().unwrap()).await.unwrap();
    (snapshots, dir.join("objects/tern/ns/0"))
}

/// The chunk files the newest manifest names that the older one does not.
fn newest_only_chunks(partition_dir: &Path) -> Vec<std::path::PathBuf> {
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(partition_dir.join("manifests").join(name)).unwrap()).unwrap()
    };
    let hashes = |m: &serde_json::Value| -> Vec<String> {
        m["chunks"].as_array().unwrap().iter().map(|c| c["hash"].as_str().unwrap().to_string()).collect()
    };
    let (old, new) = (hashes(&read(&format!("{:020}.json", 1))), hashes(&read(&format!("{:020}.json", 2))));
    new.iter().filter(|h| !old.contains(h)).map(|h| partition_dir.join("chunks").join(h)).collect()
}

async fn restored_offset(snapshots: &Snapshots, dir: &Path) -> Result<u64, SnapshotError> {
    let path = dir.join(format!("restore-{}.redb", rand::random::<u32>()));
    let restored = snapshots.restore("ns", 0, PARTITIONS, &path, 1 << 20).await.map(|(_, manifest)| manifest.applied_next);
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
