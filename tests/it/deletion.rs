//! Deleting a namespace (`DELETE /v1/ns/{ns}?confirm={ns}`, `tern ns
//! delete`): its records, log, stores, snapshots and watches go, on every
//! node; a namespace created again under its name starts empty, also on a
//! node that was away while it was deleted and created again.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::watch::Sse;
use crate::common::{self, error_code, Tern};
use crate::recovery::copy_dir;

/// How long a node may take to learn a deletion made through another.
const LEARN_WAIT: Duration = Duration::from_secs(30);

async fn create(t: &Tern, ns: &str, partitions: u32) -> (u16, Value) {
    t.send(t.client.put(format!("{}/v1/ns/{ns}", t.url)).json(&json!({ "partitions": partitions }))).await
}

async fn put_in(t: &Tern, ns: &str, pk: &str, value: Value) {
    let (status, body) = t.send(t.client.put(format!("{}?wait=applied", t.kv_url(ns, pk, Some("s")))).json(&value)).await;
    assert_eq!(status, 200, "{body}");
}

async fn get_in(t: &Tern, ns: &str, pk: &str) -> (u16, Value) {
    t.send(t.client.get(t.kv_url(ns, pk, Some("s")))).await
}

async fn delete(t: &Tern, ns: &str, query: &str) -> (u16, Value) {
    t.send(t.client.delete(format!("{}/v1/ns/{ns}{query}", t.url))).await
}

/// Waits for the watch's `cancel` and returns its data.
async fn cancelled(watch: &mut Sse) -> Value {
    let deadline = Instant::now() + LEARN_WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = watch.next_change(left).await.expect("the watch says why it ends");
        if event.event == "cancel" {
            return event.json();
        }
    }
}

/// Waits until `t` no longer knows `ns`.
async fn wait_gone(t: &Tern, ns: &str) {
    let deadline = Instant::now() + LEARN_WAIT;
    loop {
        let (status, body) = t.get_json(&format!("/v1/ns/{ns}")).await;
        if status == 404 {
            assert_eq!(error_code(&body), "namespace_not_found", "{body}");
            return;
        }
        assert!(Instant::now() < deadline, "{ns} still known to {}: {body}", t.url);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One node on the embedded log: the confirmation is required, a watch
/// ends saying why, the stores, metrics and snapshots go, the name is free
/// for a namespace of another partition count that starts empty, and a
/// restart (the log reopened with the deleted topic's frames still in its
/// segments) brings back only the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_namespace_is_gone_and_its_name_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let snapshots = format!("file://{}", dir.path().join("snapshots").display());
    let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap(), "--snapshots", &snapshots];
    let mut t = Tern::spawn(&args, &data).await;
    let (status, body) = t.send(t.client.put(format!("{}/v1/ns/scratch", t.url)).json(&json!({"partitions": 4, "history_max": 2}))).await;
    assert_eq!(status, 201, "{body}");
    for i in 0..20 {
        put_in(&t, "scratch", &format!("k{i}"), json!(i)).await;
    }
    let (status, body) = t.send(t.client.post(format!("{}/v1/admin/snapshots", t.url))).await;
    assert_eq!(status, 200, "{body}");
    let snapshot_dir = dir.path().join("snapshots").join("tern").join("scratch");
    assert!(snapshot_dir.exists(), "a snapshot was taken");
    let mut watch = Sse::connect(&t.client, &format!("{}/v1/ns/scratch/watch", t.url), None).await;
    // A copy of its snapshots, put back after it is deleted: as a snapshot
    // store whose sweep failed, or a snapshot another node took meanwhile.
    let leftover = dir.path().join("leftover");
    copy_dir(&snapshot_dir, &leftover);

    // Nothing is deleted without the name repeated, nor with another.
    for query in ["", "?confirm=", "?confirm=Scratch", "?confirm=scratch2"] {
        let (status, body) = delete(&t, "scratch", query).await;
        assert_eq!((status, error_code(&body)), (400, "confirmation_required"), "{query}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("DELETE /v1/ns/scratch?confirm=scratch"), "{body}");
    }
    let (status, body) = delete(&t, "scratch", "?confirm=scratch&force=1").await;
    assert_eq!(status, 400, "an unknown parameter deletes nothing: {body}");
    assert_eq!(get_in(&t, "scratch", "k1").await.0, 200, "still there");
    let (status, body) = delete(&t, "nope", "?confirm=nope").await;
    assert_eq!((status, error_code(&body)), (404, "namespace_not_found"), "{body}");
    // The CLI asks for the confirmation too, before sending anything.
    let (ok, _, stderr) = common::cli(&t.url, &["ns", "delete", "scratch"]);
    assert!(!ok && stderr.contains("tern ns delete scratch --confirm scratch"), "{stderr}");
    assert_eq!(get_in(&t, "scratch", "k1").await.0, 200, "still there");

    let (status, body) = delete(&t, "scratch", "?confirm=scratch").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["deleted"].clone(), body["partitions"].clone()), (json!(true), json!(4)), "{body}");
    assert!(body["snapshot_objects_deleted"].as_u64().unwrap() >= 4, "every partition's snapshot: {body}");
    let cancel = cancelled(&mut watch).await;
    assert_eq!(cancel["reason"], "namespace_deleted", "{cancel}");
    let (status, body) = get_in(&t, "scratch", "k1").await;
    assert_eq!((status, error_code(&body)), (404, "namespace_not_found"), "{body}");
    let (_, listed) = t.get_json("/v1/ns").await;
    assert!(!listed.to_string().contains("scratch"), "{listed}");
    assert!(!data.join("stores").join("scratch").exists(), "its stores are removed");
    assert!(
        !snapshot_dir.join("0").join("manifests").exists() || std::fs::read_dir(snapshot_dir.join("0").join("manifests")).unwrap().next().is_none()
    );
    let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    assert!(!metrics.contains("ns=\"scratch\",partition"), "its partitions' series are gone");
    assert!(metrics.contains("tern_namespaces_deleted_total 1"), "counted");
    let (status, _) = delete(&t, "scratch", "?confirm=scratch").await;
    assert_eq!(status, 404, "deleted once");

    // The name is free, for another partition count; it starts empty, even
    // with the deleted one's snapshots left in the store. Failed before:
    // its partitions were refused ("snapshots exist but none could be restored").
    copy_dir(&leftover, &snapshot_dir);
    assert_eq!(create(&t, "scratch", 2).await.0, 201);
    let deadline = Instant::now() + LEARN_WAIT;
    loop {
        let (_, described) = t.get_json("/v1/ns/scratch").await;
        if described["state"].as_array().unwrap().iter().all(|p| p["status"] == "serving") {
            break;
        }
        assert!(Instant::now() < deadline, "the new namespace never serves: {described}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(get_in(&t, "scratch", "k1").await.0, 404, "nothing of the old one");
    let (status, body) = t.get_json("/v1/ns/scratch/history?pk=k1&sk=s").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["versions"], json!([]), "no history of the old one: {body}");
    assert_eq!(body["history_max"], 0, "nor its settings: {body}");
    put_in(&t, "scratch", "new", json!("fresh")).await;

    // A restart reopens the log with the deleted topic's frames in its
    // segments, and brings back only the new namespace.
    assert!(t.terminate().success());
    let t = Tern::spawn(&args, &data).await;
    let (status, body) = t.get_json("/v1/ns/scratch").await;
    assert_eq!((status, body["partitions"].clone()), (200, json!(2)), "{body}");
    assert_eq!(get_in(&t, "scratch", "new").await.1["value"], json!("fresh"));
    assert_eq!(get_in(&t, "scratch", "k1").await.0, 404);
    let (ok, stdout, stderr) = common::cli(&t.url, &["ns", "delete", "scratch", "--confirm", "scratch"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("deleted  scratch  partitions 2"), "{stdout}");
    wait_gone(&t, "scratch").await;
}

/// Kafka, two nodes in replica groups of their own: a deletion through
/// one closes the namespace on the other (its watch ends, its stores go);
/// a node away while the namespace was deleted and created again under its
/// name does not take its old stores for the new log's (their offsets
/// would apply the new log from the middle, keeping the old records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_learns_a_deletion_even_one_that_was_away() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("t{}.", rand::random::<u32>());
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let args = |node: &str| -> Vec<String> {
        let data = dir.path().join(node);
        [
            "serve",
            "--node-id",
            node,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
            "--log",
            &log,
            "--kafka-topic-prefix",
            &prefix,
            "--group",
            node,
        ]
        .map(str::to_string)
        .to_vec()
    };
    let spawn = |node: &'static str| {
        let args = args(node);
        let data = dir.path().join(node);
        async move { Tern::spawn(&args.iter().map(String::as_str).collect::<Vec<_>>(), &data).await }
    };
    let a = spawn("a").await;
    let mut b = spawn("b").await;
    assert_eq!(create(&a, "gone", 2).await.0, 201);
    for i in 0..6 {
        put_in(&a, "gone", &format!("old{i}"), json!(i)).await;
    }
    wait_known(&b, "gone").await;
    b.wait_caught_up("gone").await;
    assert_eq!(get_in(&b, "gone", "old1").await.0, 200);

    // Deleted through a: b closes it, its watch ends saying why.
    let mut watch = Sse::connect(&b.client, &format!("{}/v1/ns/gone/watch", b.url), None).await;
    let (status, body) = delete(&a, "gone", "?confirm=gone").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(cancelled(&mut watch).await["reason"], "namespace_deleted");
    wait_gone(&b, "gone").await;
    assert!(!dir.path().join("b").join("stores").join("gone").exists(), "b removed its stores");

    // Created again: b opens the new one, empty of the old records.
    assert_eq!(create(&a, "gone", 2).await.0, 201);
    put_in(&a, "gone", "second", json!(2)).await;
    wait_known(&b, "gone").await;
    b.wait_caught_up("gone").await;
    assert_eq!(get_in(&b, "gone", "second").await.0, 200);
    assert_eq!(get_in(&b, "gone", "old1").await.0, 404);

    // Deleted and created again at once, faster than the three listings
    // that close a vanished namespace: b tells the new topic of the name
    // from the one it opened (its identity), and converges on the new one.
    let (status, body) = delete(&a, "gone", "?confirm=gone").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(create(&a, "gone", 2).await.0, 201);
    for i in 0..10 {
        put_in(&a, "gone", &format!("fourth{i}"), json!(i)).await;
    }
    let deadline = Instant::now() + LEARN_WAIT;
    while !(get_in(&b, "gone", "second").await.0 == 404 && get_in(&b, "gone", "fourth9").await.0 == 200) {
        assert!(Instant::now() < deadline, "b never took the new namespace for the old one's");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.wait_caught_up("gone").await;

    // b away while it is deleted and created again, with more entries in
    // each partition than b's stores applied.
    assert!(b.terminate().success());
    let (status, body) = delete(&a, "gone", "?confirm=gone").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(create(&a, "gone", 2).await.0, 201);
    for i in 0..12 {
        put_in(&a, "gone", &format!("third{i}"), json!(i)).await;
    }
    let b = spawn("b").await;
    b.wait_caught_up("gone").await;
    assert_eq!(get_in(&b, "gone", "second").await.0, 404, "nothing of the incarnation before");
    assert_eq!(get_in(&b, "gone", "third3").await.0, 200);
    let hashes = |states: Vec<(i64, String, u64)>| states.into_iter().map(|(offset, hash, _)| (offset, hash)).collect::<Vec<_>>();
    assert_eq!(hashes(b.partition_states("gone").await), hashes(a.partition_states("gone").await), "b and a hold the same state");
}

/// Waits until `t` knows `ns` (discovery of a namespace made elsewhere).
async fn wait_known(t: &Tern, ns: &str) {
    let deadline = Instant::now() + LEARN_WAIT;
    while t.get_json(&format!("/v1/ns/{ns}")).await.0 != 200 {
        assert!(Instant::now() < deadline, "{ns} not known to {}", t.url);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
