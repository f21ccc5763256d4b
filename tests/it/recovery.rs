//! Recovery from snapshots on a real `tern dev` / `tern serve` (embedded
//! log, `file://` snapshots): what a restore must carry (the write ids), a
//! stale store replaced by a snapshot that covers the log's gap, and
//! disaster recovery of a node that lost its log (`--restore`), with
//! snapshots of another log refused without it.

use crate::common;

use std::path::Path;

use common::Tern;
use serde_json::{json, Value};

fn file_url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

async fn dev(data: &Path, snapshots: &Path, extra: &[&str]) -> Tern {
    let mut args = vec!["dev", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()];
    let url = file_url(snapshots);
    args.extend(["--snapshots", url.as_str()]);
    args.extend(extra);
    Tern::spawn(&args, data).await
}

async fn snapshot_now(t: &Tern) {
    let (status, taken) = t.send(t.client.post(format!("{}/v1/admin/snapshots", t.url)).json(&json!({}))).await;
    assert_eq!(status, 200, "{taken}");
    assert!(taken["snapshots"].as_array().unwrap().iter().all(|s| s["error"].is_null()), "{taken}");
}

async fn put_once(t: &Tern, key: &str, value: Value) -> Value {
    let url = format!("{}?wait=applied", t.kv_url("default", "flag", Some("x")));
    let (status, body) = t.send(t.client.put(url).header("Idempotency-Key", key).json(&value)).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Bug 1: the write-id table travels in snapshots. Before the fix a retry
/// of K1 after a restore applied again (the record went back to 1), and the
/// restored replica's state hash equalled one that had not seen K1.
#[tokio::test]
async fn a_retry_after_a_restore_is_still_a_duplicate() {
    let (data, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut t = dev(data.path(), objects.path(), &[]).await;
    assert_eq!(put_once(&t, "K1", json!(1)).await["duplicate"], json!(null));
    let (status, _) = t.put("flag", "x", &json!(2)).await;
    assert_eq!(status, 200);
    assert_eq!(put_once(&t, "K1", json!(1)).await["duplicate"], true);
    t.wait_caught_up("default").await;
    snapshot_now(&t).await;
    let before = t.partition_states("default").await;
    assert!(t.terminate().success());
    std::fs::remove_dir_all(data.path().join("stores")).unwrap();
    let t = dev(data.path(), objects.path(), &[]).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, before, "the restored state (write ids included) hashes alike");
    let retried = put_once(&t, "K1", json!(1)).await;
    assert_eq!(retried["duplicate"], true, "{retried}");
    let (_, got) = t.get("flag", "x").await;
    assert_eq!(got["value"], 2, "the retry did not apply again");
}

/// Bugs 2 and 10: a node that lost its whole data directory (log and
/// stores) starts from the snapshots only when told to (`--restore`): the
/// snapshots are of the lost log, so without it every partition is refused
/// with a message that says so and what to do. With it, the data comes back
/// and new writes get versions above the restored ones. Before the fix the
/// node refused forever ("the store has applied up to offset N but the log
/// ends at 0 ... move its store away"), and moving it away changed nothing.
#[tokio::test]
async fn disaster_recovery_from_snapshots_into_a_new_log_needs_restore() {
    let (data, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut t = dev(data.path(), objects.path(), &[]).await;
    let mut versions = Vec::new();
    for i in 0..40 {
        let (status, body) = t.put(&format!("k{i}"), "", &json!(i)).await;
        assert_eq!(status, 200, "{body}");
        versions.push(body["version"].as_u64().unwrap());
    }
    let _ = put_once(&t, "K1", json!("once")).await;
    // A namespace of its own, with settings: it comes back too (before, only
    // the namespaces the new node makes by itself did: `default`).
    let (status, body) = t.send(t.client.put(format!("{}/v1/ns/app", t.url)).json(&json!({"partitions": 3, "history_max": 2}))).await;
    assert_eq!(status, 201, "{body}");
    for i in 0..10 {
        let url = format!("{}?wait=applied", t.kv_url("app", &format!("a{i}"), Some("s")));
        let (status, body) = t.send(t.client.put(url).json(&json!(i))).await;
        assert_eq!(status, 200, "{body}");
    }
    t.wait_caught_up("default").await;
    t.wait_caught_up("app").await;
    snapshot_now(&t).await;
    let before = t.partition_states("default").await;
    let app_before = t.partition_states("app").await;
    assert!(t.terminate().success());

    // The data directory is lost; the snapshots survive.
    let fresh = tempfile::tempdir().unwrap();
    let args = ["dev", "--listen", "127.0.0.1:0", "--data-dir", fresh.path().to_str().unwrap(), "--snapshots"];
    let url = file_url(objects.path());
    let mut refused = Tern::spawn_listening(&[&args[..], &[url.as_str()]].concat(), &[], fresh.path());
    let answer = refused.wait_unready_with("--restore").await;
    assert!(answer.to_string().contains("another log"), "{answer}");
    let (status, _) = refused.get("k1", "").await;
    assert_ne!(status, 200, "nothing is served from an unrestored partition");
    assert!(refused.terminate().success());

    let mut t = dev(fresh.path(), objects.path(), &["--restore"]).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, before, "every partition came back as snapshotted");
    // The restore says how it goes, then sums up: default's 16 and app's 3
    // partitions serve, those with records restored from their snapshots.
    let done = t.wait_printed("restore done: ", std::time::Duration::from_secs(60)).await;
    assert!(done.starts_with("restore done: 19 partitions serving, "), "{done}");
    let restored: u64 = done.split(", ").nth(1).and_then(|part| part.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(restored > 0 && done.contains(" records, in "), "{done}");
    t.wait_caught_up("app").await;
    assert_eq!(t.partition_states("app").await, app_before, "every namespace in the snapshots came back");
    let (_, described) = t.get_json("/v1/ns/app").await;
    assert_eq!((&described["partitions"], &described["history_max"]), (&json!(3), &json!(2)), "{described}");
    let (status, got) = t.get_json("/v1/ns/app/kv/a7/s").await;
    assert_eq!((status, &got["value"]), (200, &json!(7)), "{got}");
    for i in [0, 17, 39] {
        let (status, got) = t.get(&format!("k{i}"), "").await;
        assert_eq!((status, got["value"].as_i64()), (200, Some(i)));
    }
    assert_eq!(put_once(&t, "K1", json!("once")).await["duplicate"], true, "write ids came back too");
    let url = format!("{}?wait=applied", t.kv_url("default", "k0", Some("")));
    let (status, body) = t.send(t.client.put(url).json(&json!("after"))).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["version"].as_u64().unwrap() > versions[0], "a new version above the restored one: {body} after {}", versions[0]);
    let (_, got) = t.get("k0", "").await;
    assert_eq!(got["value"], "after");
    assert!(t.terminate().success());

    // Restarted without --restore: it is this log's node now.
    let t = dev(fresh.path(), objects.path(), &[]).await;
    let (_, got) = t.get("k0", "").await;
    assert_eq!(got["value"], "after");
}

/// Bug 3: a store older than the log's start (retention deleted what it
/// still needs) is replaced by a snapshot that reaches the start. Before the
/// fix it was refused for good: "no snapshot covers the gap" (false).
#[tokio::test]
async fn a_stale_store_is_replaced_by_a_snapshot_that_covers_the_gap() {
    let (data, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = file_url(objects.path());
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--namespace",
        "default:1",
        "--snapshots",
        &url,
        "--log-segment-bytes",
        "1048576",
        "--log-retention-bytes",
        "1048576",
        "--log-retention-check-ms",
        "100",
        "--store-fsync-interval-ms",
        "100",
        "--snapshot-interval-ms",
        "86400000",
        "--snapshot-entries",
        "1000000000",
    ];
    let big = "x".repeat(200_000);
    let mut t = Tern::spawn(&args, data.path()).await;
    for i in 0..3 {
        assert_eq!(t.put(&format!("old{i}"), "", &json!(big)).await.0, 200);
    }
    t.wait_caught_up("default").await;
    assert!(t.terminate().success());
    let stale = tempfile::tempdir().unwrap();
    copy_dir(&data.path().join("stores"), stale.path());

    let mut t = Tern::spawn(&args, data.path()).await;
    for i in 0..20 {
        assert_eq!(t.put(&format!("new{i}"), "", &json!(big)).await.0, 200);
    }
    t.wait_caught_up("default").await;
    snapshot_now(&t).await;
    // Retention deletes the segments the snapshot covers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while t.get_json("/v1/ns/default").await.1["state"][0]["log_start_offset"].as_u64().unwrap_or(0) == 0 {
        assert!(std::time::Instant::now() < deadline, "retention never ran");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let before = t.partition_states("default").await;
    assert!(t.terminate().success());

    std::fs::remove_dir_all(data.path().join("stores")).unwrap();
    copy_dir(stale.path(), &data.path().join("stores"));
    let t = Tern::spawn(&args, data.path()).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, before);
    let (status, got) = t.get("new19", "").await;
    assert_eq!((status, got["value"].as_str().map(str::len)), (200, Some(big.len())));
}

/// Copies a directory tree (also used by `deletion.rs`).
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
