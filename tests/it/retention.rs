//! Embedded log retention through a real node: old segments are deleted once
//! the stores are durable past them, and the node still serves everything,
//! across a restart, with versions continuing (offsets never reused).

use crate::common;

use std::time::{Duration, Instant};

use common::Tern;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_below_durable_state_are_deleted_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--namespace",
        "default:4",
        "--log-segment-bytes",
        "1048576",
        "--log-retention-bytes",
        "1",
        "--store-fsync-interval-ms",
        "100",
    ];
    let mut t = Tern::spawn(&args, &data).await;
    let big = "x".repeat(100 * 1024);
    let mut versions = Vec::new();
    for i in 0..40 {
        let url = format!("{}?wait=applied", t.kv_url("default", &format!("key-{i}"), Some("v")));
        let (status, body) = t.send(t.client.put(url).json(&json!({ "i": i, "pad": big }))).await;
        assert_eq!(status, 200, "{body}");
        versions.push(body["version"].as_u64().unwrap());
    }
    let first_segment = data.join("log").join("wal").join(format!("{:020}.seg", 0));
    let deadline = Instant::now() + Duration::from_secs(60);
    while first_segment.exists() {
        assert!(Instant::now() < deadline, "retention did not delete the first segment");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let meta: Value = serde_json::from_slice(&std::fs::read(data.join("log").join("log-meta.json")).unwrap()).unwrap();
    assert!(meta["start_offsets"].as_object().is_some_and(|m| !m.is_empty()), "start offsets recorded: {meta}");

    check_all(&t, &versions).await;
    assert!(t.terminate().success());
    let t = Tern::spawn(&args, &data).await;
    check_all(&t, &versions).await;
    let (status, ready) = t.get_json("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    // Offsets continue after the deleted segments.
    let (_, put) = t.put("key-0", "v", &json!("again")).await;
    let partition_versions: Vec<u64> = (0..40)
        .filter(|i| tern::partitioner::partition_of(&format!("key-{i}"), 4) == tern::partitioner::partition_of("key-0", 4))
        .map(|i| versions[i])
        .collect();
    assert!(put["version"].as_u64().unwrap() > *partition_versions.iter().max().unwrap());
}

async fn check_all(t: &Tern, versions: &[u64]) {
    for (i, version) in versions.iter().enumerate() {
        let (status, got) = t.get(&format!("key-{i}"), "v").await;
        assert_eq!(status, 200, "key-{i} after retention");
        assert_eq!(got["value"]["i"], i);
        assert_eq!(got["version"].as_u64(), Some(*version));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_let_the_log_drop_what_they_cover_and_a_replay_from_them_reconstructs_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let snapshots = format!("file://{}", dir.path().join("snapshots").display());
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--namespace",
        "default:4",
        "--log-segment-bytes",
        "1048576",
        "--store-fsync-interval-ms",
        "100",
        "--log-retention-check-ms",
        "200",
        "--snapshots",
        &snapshots,
        "--snapshot-interval-ms",
        "86400000",
        "--snapshot-entries",
        "1000000000",
    ];
    let mut t = Tern::spawn(&args, &data).await;
    let big = "x".repeat(100 * 1024);
    for i in 0..30 {
        let url = format!("{}?wait=applied", t.kv_url("default", &format!("key-{i}"), Some("v")));
        let (status, body) = t.send(t.client.put(url).json(&json!({ "i": i, "pad": big }))).await;
        assert_eq!(status, 200, "{body}");
    }
    // No size or age limit is set: without snapshots nothing is deleted.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let first_segment = data.join("log").join("wal").join(format!("{:020}.seg", 0));
    assert!(first_segment.exists(), "nothing covers the log yet");
    let (status, taken) = t.send(t.client.post(format!("{}/v1/admin/snapshots", t.url))).await;
    assert_eq!(status, 200, "{taken}");
    // Writes after the snapshots stay in the log (and must be replayed).
    for i in 30..40 {
        let url = format!("{}?wait=applied", t.kv_url("default", &format!("key-{i}"), Some("v")));
        let (status, _) = t.send(t.client.put(url).json(&json!({ "i": i, "pad": big }))).await;
        assert_eq!(status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while first_segment.exists() {
        assert!(Instant::now() < deadline, "retention did not delete the segment the snapshots cover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    t.wait_caught_up("default").await;
    let before = t.partition_states("default").await;
    assert!(t.terminate().success());

    // The stores are lost; the log no longer starts at 0: only snapshot + log rebuild them.
    std::fs::remove_dir_all(data.join("stores")).unwrap();
    let t = Tern::spawn(&args, &data).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, before, "snapshot + the log's remainder reconstruct the same state");
    for i in 0..40 {
        let (status, got) = t.get(&format!("key-{i}"), "v").await;
        assert_eq!((status, &got["value"]["i"]), (200, &json!(i)), "key-{i}");
    }
}
