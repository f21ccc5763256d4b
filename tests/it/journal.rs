//! Journaled writes (`?durability=journaled`, issue 19): answered 202 once
//! the node's journal has them, sequenced into the log by the node itself,
//! applied once; a node killed with writes still in its journal sequences
//! them after its restart — also when the log was down the whole time.

use std::time::Duration;

use crate::common::brokers::Brokers;
use crate::common::Tern;
use object_store::ObjectStoreExt;
use serde_json::{json, Value};

/// Polls `GET pk` until it holds `value` (10 s at most).
async fn until_visible(t: &Tern, pk: &str, value: &Value) {
    for _ in 0..200 {
        let (status, body) = t.get(pk, "").await;
        if status == 200 && &body["value"] == value {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{pk} never became {value}");
}

async fn put_journaled(t: &Tern, pk: &str, value: &Value) -> (u16, Value) {
    t.send(t.client.put(t.kv_url("default", pk, None) + "?durability=journaled").json(value)).await
}

#[tokio::test]
async fn journaled_writes_are_answered_at_once_then_sequenced_and_applied() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let (status, body) = put_journaled(&t, "j1", &json!(1)).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["sequenced"], false);
    assert!(body["write_id"].as_str().is_some_and(|id| id.starts_with('j') && id.len() == 33), "{body}");
    assert!(body.get("position").is_none(), "no position before it is sequenced: {body}");
    until_visible(&t, "j1", &json!(1)).await;
    // The client's Idempotency-Key is the write id; a retry applies once.
    let keyed = t.client.put(t.kv_url("default", "j2", None) + "?durability=journaled").header("Idempotency-Key", "retry-me");
    let (status, body) = t.send(keyed.try_clone().unwrap().json(&json!(2))).await;
    assert_eq!((status, body["write_id"].as_str()), (202, Some("retry-me")));
    let (status, _) = t.send(keyed.json(&json!(2))).await;
    assert_eq!(status, 202);
    until_visible(&t, "j2", &json!(2)).await;
    let (_, record) = t.get("j2", "").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, again) = t.get("j2", "").await;
    assert_eq!(record["version"], again["version"], "the retry was not applied again");
    // A batch, a delete.
    let batch = json!({"ops": [{"op": "put", "pk": "j3", "sk": "a", "value": 3}, {"op": "put", "pk": "j3", "sk": "b", "value": 4}]});
    let (status, body) = t.send(t.client.post(format!("{}/v1/ns/default/batch?durability=journaled", t.url)).json(&batch)).await;
    assert_eq!(status, 202, "{body}");
    let (status, _) = t.send(t.client.delete(t.kv_url("default", "j1", None) + "?durability=journaled")).await;
    assert_eq!(status, 202);
    for _ in 0..200 {
        if t.get("j1", "").await.0 == 404 && t.get("j3", "b").await.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(t.get("j1", "").await.0, 404);
    assert_eq!(t.get("j3", "b").await.1["value"], 4);
    // Outcomes: applied, a failed condition, unknown.
    let (_, status_of) = t.get_json("/v1/writes/retry-me").await;
    assert_eq!((status_of["state"].as_str(), status_of["outcome"]["result"].as_str()), (Some("applied"), Some("applied")), "{status_of}");
    assert_eq!(status_of["version"], record["version"], "{status_of}");
    let conditional = t.client.put(t.kv_url("default", "j2", None) + "?durability=journaled&if_absent=true").header("Idempotency-Key", "too-late");
    assert_eq!(t.send(conditional.json(&json!(9))).await.0, 202);
    let mut outcome = Value::Null;
    for _ in 0..200 {
        let (_, body) = t.get_json("/v1/writes/too-late").await;
        if body["state"] == "applied" {
            outcome = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(outcome["outcome"]["result"], "condition_failed", "{outcome}");
    assert_eq!(outcome["outcome"]["current_version"], record["version"], "{outcome}");
    assert_eq!(t.get("j2", "").await.1["value"], 2, "the failed condition changed nothing");
    assert_eq!(t.get_json("/v1/writes/never-written").await.1["state"], "unknown");
    // The same from the CLI.
    let (ok, out, err) = crate::common::cli(&t.url, &["write-status", "too-late"]);
    assert!(ok && out.starts_with("applied  condition_failed"), "{out} {err}");
    let (ok, out, err) = crate::common::cli(&t.url, &["put", "--journaled", "from-cli", "1"]);
    assert!(ok && out.starts_with("journaled  write id j"), "{out} {err}");
    let (ok, out, _) = crate::common::cli(&t.url, &["write-status", "nobody"]);
    assert!(ok && out.starts_with("unknown"), "{out}");
    let (status, body) = t.get_json(&format!("/v1/writes/{}", "x".repeat(65))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_write_id")), "{body}");
    // Bad input: an unknown durability; wait=applied, which a journaled write cannot give.
    let (status, body) = t.send(t.client.put(t.kv_url("default", "x", None) + "?durability=eventually").json(&json!(1))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_parameter")), "{body}");
    let (status, body) = t.send(t.client.put(t.kv_url("default", "x", None) + "?durability=journaled&wait=applied").json(&json!(1))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("wait=applied cannot go with durability=journaled"), "{body}");
}

#[tokio::test]
async fn a_node_killed_with_a_full_journal_sequences_it_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["dev", "--listen", "127.0.0.1:0", "--data-dir", dir.path().to_str().unwrap()];
    let mut t = Tern::spawn(&args, dir.path()).await;
    let writes = 300;
    let mut acked = Vec::new();
    for i in 0..writes {
        let (status, body) = put_journaled(&t, &format!("k{i}"), &json!(i)).await;
        assert_eq!(status, 202, "{body}");
        acked.push(i);
    }
    t.kill9();
    let t = Tern::spawn(&args, dir.path()).await;
    for i in acked {
        until_visible(&t, &format!("k{i}"), &json!(i)).await;
    }
}

/// The broker is down: journaled writes are still answered (the journal has
/// them) and not visible (the log does not); the node is killed; the broker
/// returns, the node restarts and sequences its journal: every acknowledged
/// write applied, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaled_writes_survive_a_log_outage_and_a_crash_and_apply_once() {
    let broker = Brokers::start(1);
    let dir = tempfile::tempdir().unwrap();
    let log = format!("kafka://{}", broker.bootstrap);
    let data_dir = dir.path().to_str().unwrap();
    let args = [
        "serve",
        "--node-id",
        "journal",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data_dir,
        "--log",
        &log,
        "--namespace",
        "default:2",
        "--ripcord",
        "true",
    ];
    let mut t = Tern::spawn(&args, dir.path()).await;
    let (status, _) = t.put("before", "", &json!(0)).await;
    assert_eq!(status, 200);
    broker.kafka(&["stop-node", "1"]);
    let writes = 50;
    for i in 0..writes {
        let (status, body) = put_journaled(&t, &format!("k{i}"), &json!(i)).await;
        assert_eq!(status, 202, "journaled while the log is down: {body}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(t.get("k0", "").await.0, 404, "not visible before the log has it");
    // The backlog metrics are current while the sequencer waits on the log.
    let mut backlog = 0.0;
    for _ in 0..60 {
        let metrics = reqwest::get(format!("{}/metrics", t.url)).await.unwrap().text().await.unwrap();
        backlog = metrics.lines().find_map(|l| l.strip_prefix("tern_journal_backlog_entries ")).map_or(0.0, |v| v.trim().parse().unwrap());
        if backlog >= writes as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(backlog >= writes as f64, "tern_journal_backlog_entries {backlog} while {writes} writes wait for the log");
    let keyed = t.client.put(t.kv_url("default", "keyed", None) + "?durability=journaled").header("Idempotency-Key", "during-outage");
    assert_eq!(t.send(keyed.json(&json!("x"))).await.0, 202);
    let (_, status_of) = t.get_json("/v1/writes/during-outage").await;
    assert_eq!(status_of["state"], "journaled", "{status_of}");
    // Ripcord: a plain write is journaled instead of failing (the first one
    // learns that the log refuses writes; the next go to the journal at once).
    for pk in ["plain-1", "plain-2"] {
        let response = t.client.put(t.kv_url("default", pk, None)).json(&json!(pk)).send().await.unwrap();
        assert_eq!(response.status(), 202, "{pk}");
        assert_eq!(response.headers()["x-tern-ripcord"], "journaled", "{pk}");
    }
    // Reads meanwhile: local reads answer; a strong read, which needs the
    // log's end offset, answers 503 and says why, within its timeout.
    assert_eq!(t.get("before", "").await.0, 200, "local reads keep working");
    let started = std::time::Instant::now();
    let (status, body) = t.get_json("/v1/ns/default/kv/before/?consistency=strong&timeout_ms=1000").await;
    assert_eq!(status, 503, "{body}");
    assert!(matches!(body["error"]["code"].as_str(), Some("log_unavailable" | "not_caught_up")), "{body}");
    assert!(started.elapsed() < Duration::from_secs(15), "bounded: {:?}", started.elapsed());
    let (status, ready) = t.get_json("/readyz").await;
    assert_eq!((status, ready["ready"].as_bool()), (200, Some(true)), "still ready for local reads and journaled writes: {ready}");
    assert!(ready["journaling"].as_str().is_some_and(|n| n.starts_with("log unavailable, journaling")), "{ready}");
    // A condition needs the log's answer now: it fails as without ripcord
    // (log_unavailable), or, when its partition holds the journaled writes
    // above, after waiting behind them (behind_journal): never passing them.
    let (status, body) = t.send(t.client.put(t.kv_url("default", "cond", None) + "?if_absent=true").json(&json!(1))).await;
    assert_eq!(status, 503, "{body}");
    assert!(matches!(body["error"]["code"].as_str(), Some("log_unavailable" | "behind_journal")), "{body}");
    t.kill9();
    broker.kafka(&["start-node", "1"]);
    let t = Tern::spawn(&args, dir.path()).await;
    until_visible(&t, "keyed", &json!("x")).await;
    for i in 0..writes {
        for _ in 0..1200 {
            let (status, body) = t.get(&format!("k{i}"), "").await;
            if status == 200 {
                assert_eq!(body["value"], json!(i));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(t.get(&format!("k{i}"), "").await.0, 200, "k{i} was acknowledged and must be applied");
    }
    until_visible(&t, "plain-2", &json!("plain-2")).await;
    t.wait_caught_up("default").await;
    let (_, ns) = t.get_json("/v1/ns/default").await;
    let records: u64 = ns["state"].as_array().unwrap().iter().map(|p| p["records"].as_u64().unwrap()).sum();
    assert_eq!(records, writes + 4, "each journaled write applied once (and the one before): {ns}");
    assert_eq!(t.get("cond", "").await.0, 404, "the refused conditional write was not applied");
    // The log takes writes: a plain write is sequenced again (200).
    assert_eq!(t.put("after", "", &json!(1)).await.0, 200);
    let (_, status_of) = t.get_json("/v1/writes/during-outage").await;
    assert_eq!(status_of["state"], "applied", "{status_of}");
}

/// A namespace's `write_mode` (PUT /v1/ns/{ns}, shown by GET): journaled
/// makes a plain write journaled; `?durability=sequenced` and `wait=applied`
/// still sequence; the mode is a record through the log, so it survives a restart.
#[tokio::test]
async fn a_namespace_in_journaled_mode_journals_plain_writes() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["dev", "--listen", "127.0.0.1:0", "--data-dir", dir.path().to_str().unwrap()];
    let mut t = Tern::spawn(&args, dir.path()).await;
    let ns_url = format!("{}/v1/ns/meter", t.url);
    let (status, body) = t.send(t.client.put(&ns_url).json(&json!({"partitions": 2, "write_mode": "journaled"}))).await;
    assert_eq!((status, body["write_mode"].as_str(), body["created"].as_bool()), (201, Some("journaled"), Some(true)), "{body}");
    let (_, described) = t.get_json("/v1/ns/meter").await;
    assert_eq!(described["write_mode"], "journaled", "{described}");
    let (status, body) = t.send(t.client.put(t.kv_url("meter", "m1", None)).json(&json!(1))).await;
    assert_eq!((status, body["sequenced"].as_bool()), (202, Some(false)), "a plain write is journaled: {body}");
    let (status, body) = t.send(t.client.put(t.kv_url("meter", "m2", None) + "?durability=sequenced").json(&json!(2))).await;
    assert_eq!(status, 200, "asked for sequenced: {body}");
    assert!(body["position"].is_string(), "{body}");
    let (status, body) = t.send(t.client.put(t.kv_url("meter", "m3", None) + "?wait=applied").json(&json!(3))).await;
    assert_eq!(status, 200, "wait=applied waits, so it is sequenced: {body}");
    let batch = json!({"ops": [{"op": "put", "pk": "m4", "sk": "", "value": 4}]});
    let (status, _) = t.send(t.client.post(format!("{ns_url}/batch")).json(&batch)).await;
    assert_eq!(status, 202, "a batch follows the mode too");
    // Another namespace keeps the default.
    let (_, body) = t.get_json("/v1/ns/default").await;
    assert_eq!(body["write_mode"], "sequenced", "{body}");
    assert_eq!(t.put("d1", "", &json!(1)).await.0, 200);
    // Settings survive a restart.
    t.kill9();
    let t = Tern::spawn(&args, dir.path()).await;
    let (_, described) = t.get_json("/v1/ns/meter").await;
    assert_eq!(described["write_mode"], "journaled", "{described}");
    assert_eq!(t.send(t.client.put(t.kv_url("meter", "m5", None)).json(&json!(5))).await.0, 202);
    let ns_url = format!("{}/v1/ns/meter", t.url);
    // Changing the mode only: partitions may be left out.
    let (status, body) = t.send(t.client.put(&ns_url).json(&json!({"write_mode": "sequenced"}))).await;
    assert_eq!((status, body["write_mode"].as_str(), body["partitions"].as_u64()), (200, Some("sequenced"), Some(2)), "{body}");
    // While m5 (journaled) waits to apply, a plain write to its partition
    // is journaled behind it (ripcord, `tern dev`: in the client's order);
    // once it applied, plain writes are sequenced again.
    for _ in 0..200 {
        if t.send(t.client.get(t.kv_url("meter", "m5", None))).await.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut status = 0;
    for _ in 0..100 {
        status = t.send(t.client.put(t.kv_url("meter", "m6", None)).json(&json!(6))).await.0;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200, "sequenced once nothing journaled waits in its partition");
    for pk in ["m1", "m4", "m5"] {
        for _ in 0..200 {
            if t.send(t.client.get(t.kv_url("meter", pk, None))).await.0 == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(t.send(t.client.get(t.kv_url("meter", pk, None))).await.0, 200, "{pk} applied");
    }
    // Bad input: an unknown mode, a new namespace without partitions, a partition count that differs.
    let (status, body) = t.send(t.client.put(&ns_url).json(&json!({"write_mode": "eventually"}))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("unknown variant `eventually`"), "{body}");
    let (status, body) = t.send(t.client.put(format!("{}/v1/ns/fresh", t.url)).json(&json!({"write_mode": "journaled"}))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("creating it needs \"partitions\""), "{body}");
    let (status, _) = t.send(t.client.put(&ns_url).json(&json!({"partitions": 3, "write_mode": "journaled"}))).await;
    assert_eq!(status, 409);
    let (_, described) = t.get_json("/v1/ns/meter").await;
    assert_eq!(described["write_mode"], "sequenced", "a refused call changed nothing: {described}");
}

/// The test S3 server's bucket, through the same client Tern uses.
fn s3_bucket(endpoint: &str, bucket: &str) -> std::sync::Arc<dyn object_store::ObjectStore> {
    let options: Vec<(String, String)> = [
        ("aws_endpoint", endpoint),
        ("aws_allow_http", "true"),
        ("aws_region", "us-east-1"),
        ("aws_access_key_id", "test"),
        ("aws_secret_access_key", "test"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let snapshots = tern::snapshot::Snapshots::open_with(&format!("s3://{bucket}"), &options).unwrap();
    snapshots.object_store().0
}

/// The keys of the objects under `prefix`.
async fn s3_keys(store: &dyn object_store::ObjectStore, prefix: &str) -> Vec<String> {
    use futures::TryStreamExt;
    let prefix = object_store::path::Path::from(prefix);
    let listed: Vec<_> = store.list(Some(&prefix)).try_collect().await.unwrap();
    listed.into_iter().map(|o| o.location.to_string()).collect()
}

/// Polls (20 s at most) until no object is left under `prefix`; returns what is left.
async fn until_no_objects(store: &dyn object_store::ObjectStore, prefix: &str) -> Vec<String> {
    for _ in 0..400 {
        if s3_keys(store, prefix).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s3_keys(store, prefix).await
}

/// A node with journaled writes in object storage is killed and its data
/// directory lost while the broker is down; once the broker returns, the
/// other node finds the journal (its lease expired), replays it and
/// retires it: every acknowledged write applied. The same objects replayed
/// once more (put back under another journal) change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_nodes_journal_is_replayed_from_object_storage_by_another_node_once() {
    let broker = Brokers::start(1);
    let endpoint = crate::snapshots::s3_endpoint();
    let bucket = format!("tern-journal-{}", rand::random::<u32>());
    assert!(reqwest::Client::new().put(format!("{endpoint}/{bucket}")).send().await.unwrap().status().is_success());
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let log = format!("kafka://{}", broker.bootstrap);
    let snapshots = format!("s3://{bucket}/cluster");
    let s3_endpoint_option = format!("aws_endpoint={endpoint}");
    let args = |id: &'static str, dir: &tempfile::TempDir| -> Vec<String> {
        [
            "serve",
            "--node-id",
            id,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--log",
            &log,
            "--namespace",
            "default:2",
            "--snapshots",
            &snapshots,
            "--snapshot-writer",
            "false",
            "--snapshot-option",
            &s3_endpoint_option,
            "--snapshot-option",
            "aws_allow_http=true",
            "--snapshot-option",
            "aws_region=us-east-1",
            "--snapshot-option",
            "aws_access_key_id=test",
            "--snapshot-option",
            "aws_secret_access_key=test",
            "--journal-claim-after-ms",
            "2000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let (args_a, args_b) = (args("a", &dir_a), args("b", &dir_b));
    let mut a = Tern::spawn(&args_a.iter().map(String::as_str).collect::<Vec<_>>(), dir_a.path()).await;
    let b = Tern::spawn(&args_b.iter().map(String::as_str).collect::<Vec<_>>(), dir_b.path()).await;
    assert_eq!(a.put("before", "", &json!(0)).await.0, 200);
    broker.kafka(&["stop-node", "1"]);
    let writes = 40;
    for i in 0..writes {
        let (status, body) = put_journaled(&a, &format!("k{i}"), &json!(i)).await;
        assert_eq!(status, 202, "journaled (locally and in object storage) while the log is down: {body}");
    }
    let prefix = "cluster/tern/journal/";
    let store = s3_bucket(&endpoint, &bucket);
    let entries: Vec<String> = s3_keys(store.as_ref(), prefix).await.into_iter().filter(|k| k.contains("/entries/")).collect();
    assert!(!entries.is_empty(), "the journal is in object storage");
    let mut saved = Vec::new();
    for key in &entries {
        saved.push(store.get(&key.as_str().into()).await.unwrap().bytes().await.unwrap());
    }
    a.kill9();
    std::fs::remove_dir_all(dir_a.path()).unwrap();
    broker.kafka(&["start-node", "1"]);
    // b claims a's journal once its lease is 2 s old, and replays it.
    for i in 0..writes {
        for _ in 0..1200 {
            if b.get(&format!("k{i}"), "").await.0 == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(b.get(&format!("k{i}"), "").await.1["value"], json!(i), "k{i} was acknowledged and must be applied");
    }
    b.wait_caught_up("default").await;
    let records = |ns: &Value| -> u64 { ns["state"].as_array().unwrap().iter().map(|p| p["records"].as_u64().unwrap()).sum() };
    let (_, ns) = b.get_json("/v1/ns/default").await;
    assert_eq!(records(&ns), writes + 1, "{ns}");
    let mut versions = Vec::new();
    for i in 0..writes {
        versions.push(b.get(&format!("k{i}"), "").await.1["version"].clone());
    }
    // Retired: neither entries nor lease nor claim of the lost journal are left.
    let lost_folder = entries[0].split("/entries/").next().unwrap().to_string();
    assert_eq!(until_no_objects(store.as_ref(), &lost_folder).await, Vec::<String>::new(), "the replayed journal is retired");
    let metrics = reqwest::get(format!("{}/metrics", b.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tern_journal_claims_total 1"), "one claim");
    // The same objects once more, as another lost journal (no lease at
    // all): replayed, and applied once already, so nothing changes.
    for (i, bytes) in saved.into_iter().enumerate() {
        let key = format!("{prefix}replayed-twice/entries/{i:020}");
        store.put(&key.as_str().into(), bytes.into()).await.unwrap();
    }
    let twice = format!("{prefix}replayed-twice/");
    assert_eq!(until_no_objects(store.as_ref(), &twice).await, Vec::<String>::new(), "the second replay finished");
    let metrics = reqwest::get(format!("{}/metrics", b.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tern_journal_claims_total 2"), "claimed a second time");
    b.wait_caught_up("default").await;
    let (_, again) = b.get_json("/v1/ns/default").await;
    assert_eq!(records(&again), writes + 1, "{again}");
    for i in 0..writes {
        assert_eq!(b.get(&format!("k{i}"), "").await.1["version"], versions[i as usize], "k{i} was not applied again");
    }
}

/// The broker is stopped for two minutes while four writers keep writing to
/// a namespace in `write_mode: journaled`: every write is answered (202);
/// local reads answer, `after=` a position the log does not have yet
/// answers 503 with its reason; a watch opened before stays open through
/// the outage. Once the broker returns, every acknowledged write is applied
/// exactly once, in each writer's order (journal order per partition), and
/// the watch delivers each once, in that order, also when the burst cuts it
/// off as a slow consumer and it resumes from the position it reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_under_load_through_a_two_minute_broker_outage_apply_once_in_journal_order() {
    use crate::common::watch::Sse;
    const OUTAGE: Duration = Duration::from_secs(120);
    const WRITERS: usize = 4;
    // A journaled write is answered once it is on disk: never near this.
    const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
    let broker = Brokers::start(1);
    let dir = tempfile::tempdir().unwrap();
    let log = format!("kafka://{}", broker.bootstrap);
    let args = [
        "serve",
        "--node-id",
        "outage",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--log",
        &log,
        "--namespace",
        "meter:4",
        // A small watch queue: the burst when the log is back cuts the watch
        // off (`slow_consumer`), and it resumes from the position it reached,
        // as any client does (CI once cut it off at the default size).
        "--watch-queue-events-max",
        "64",
    ];
    let t = Tern::spawn(&args, dir.path()).await;
    let (status, _) = t.send(t.client.put(format!("{}/v1/ns/meter", t.url)).json(&json!({"write_mode": "journaled"}))).await;
    assert_eq!(status, 200);
    let (status, before) = t.send(t.client.put(t.kv_url("meter", "before", None) + "?durability=sequenced").json(&json!(0))).await;
    assert_eq!(status, 200, "{before}");
    let mut sse = Sse::connect(&t.client, &format!("{}/v1/ns/meter/watch?mode=log", t.url), None).await;
    assert_eq!(sse.next(Duration::from_secs(10)).await.unwrap().event, "progress");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (client, url, stop) = (t.client.clone(), t.url.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut acked = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let response =
                    client.put(format!("{url}/v1/ns/meter/kv/w{w}/{acked:06}")).json(&json!(acked)).timeout(WRITE_TIMEOUT).send().await.unwrap();
                assert_eq!(response.status(), 202, "writer {w}, write {acked}: {:?}", response.text().await);
                acked += 1;
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    broker.kafka(&["stop-node", "1"]);
    let outage_began = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Reads meanwhile: local answers; after= a position not yet applied answers 503 with the reason.
    assert_eq!(t.send(t.client.get(t.kv_url("meter", "before", None))).await.0, 200, "local reads keep working");
    let partition = before["position"].as_str().unwrap().split(':').nth(1).unwrap().to_string();
    let (_, ns) = t.get_json("/v1/ns/meter").await;
    let applied = ns["state"][partition.parse::<usize>().unwrap()]["applied_offset"].as_i64().unwrap();
    let ahead = format!("meter:{partition}:{}", applied + 100);
    let (status, body) = t.get_json(&format!("/v1/ns/meter/kv/before/?after={ahead}&timeout_ms=1000")).await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "the 503 says why: {body}");
    let remaining = OUTAGE.saturating_sub(outage_began.elapsed());
    tokio::time::sleep(remaining).await;
    broker.kafka(&["start-node", "1"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut acked = Vec::new();
    for writer in writers {
        acked.push(writer.await.unwrap());
    }
    let total: u64 = acked.iter().sum();
    assert!(total > 1000, "the writers kept writing through the outage: {acked:?}");
    // The watch: every acknowledged write once, in each writer's order,
    // across the resumes after each cut-off (bounded: each moves on).
    const RESUMES_MAX: usize = 10_000;
    let mut seen = vec![0u64; WRITERS];
    let mut resumes = 0;
    while seen.iter().sum::<u64>() < total {
        let Some(event) = sse.next_change(Duration::from_secs(120)).await else {
            // Which side stalled: the sequencer (journal backlog, log offsets)
            // or the apply loop and the watch (applied offsets).
            let (_, ns) = t.get_json("/v1/ns/meter").await;
            let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
            let journal: Vec<&str> = metrics.lines().filter(|l| l.starts_with("tern_journal")).collect();
            panic!("the watch stalled at {seen:?} of {acked:?}; the namespace: {}; {journal:#?}", ns["state"]);
        };
        if event.event == "cancel" {
            let cancel = event.json();
            assert_eq!(cancel["reason"], "slow_consumer", "{cancel}");
            resumes += 1;
            assert!(resumes <= RESUMES_MAX, "the watch resumed {resumes} times and is at {seen:?} of {acked:?}");
            let from = cancel["position"].as_str().unwrap();
            sse = Sse::connect(&t.client, &format!("{}/v1/ns/meter/watch?mode=log&from={from}", t.url), None).await;
            continue;
        }
        assert_eq!(event.event, "put", "{event:?}");
        let change = event.json();
        if change["pk"] == "before" {
            continue; // acknowledged (in the log) before the watch opened, applied after
        }
        let w: usize = change["pk"].as_str().unwrap()[1..].parse().unwrap();
        let seq: u64 = change["sk"].as_str().unwrap().parse().unwrap();
        assert_eq!(seq, seen[w], "writer {w}'s writes arrive once each, in order");
        seen[w] += 1;
    }
    // The store: one record per acknowledged write, versions in each writer's order.
    t.wait_caught_up("meter").await;
    for (w, &count) in acked.iter().enumerate() {
        let (status, list) = t.send(t.client.get(format!("{}/v1/ns/meter/kv/w{w}?limit=1000", t.url))).await;
        assert_eq!(status, 200, "{list}");
        let mut records: Vec<Value> = list["items"].as_array().unwrap().clone();
        let mut cursor = list["next_cursor"].as_str().map(str::to_string);
        while let Some(c) = cursor {
            let (_, page) = t.send(t.client.get(format!("{}/v1/ns/meter/kv/w{w}?limit=1000&cursor={c}", t.url))).await;
            records.extend(page["items"].as_array().unwrap().iter().cloned());
            cursor = page["next_cursor"].as_str().map(str::to_string);
        }
        assert_eq!(records.len() as u64, count, "writer {w}: one record per acknowledged write");
        let versions: Vec<u64> = records.iter().map(|r| r["version"].as_u64().unwrap()).collect();
        assert!(versions.windows(2).all(|v| v[0] < v[1]), "writer {w}: applied in journal order");
    }
}

/// Object storage unreachable when the node starts: the node starts anyway
/// and serves (sequenced writes, reads); journaled writes are refused with
/// 503 `journal_unavailable` saying why (nothing journaled: they could not
/// be made as durable as configured); once object storage answers, they
/// are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_starts_and_serves_while_its_journal_object_storage_is_unreachable() {
    let endpoint = crate::snapshots::s3_endpoint();
    let bucket = format!("tern-journal-{}", rand::random::<u32>());
    assert!(reqwest::Client::new().put(format!("{endpoint}/{bucket}")).send().await.unwrap().status().is_success());
    let proxy = crate::snapshots::Proxy::start(endpoint.trim_start_matches("http://").to_string()).await;
    proxy.stop();
    let dir = tempfile::tempdir().unwrap();
    let (snapshots, through_proxy) = (format!("s3://{bucket}/x"), format!("aws_endpoint=http://{}", proxy.address));
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--namespace",
        "default:2",
        "--snapshots",
        &snapshots,
        "--snapshot-writer",
        "false",
        "--snapshot-option",
        &through_proxy,
        "--snapshot-option",
        "aws_allow_http=true",
        "--snapshot-option",
        "aws_region=us-east-1",
        "--snapshot-option",
        "aws_access_key_id=test",
        "--snapshot-option",
        "aws_secret_access_key=test",
    ];
    // Stores exist (a new store would wait to restore from snapshots: another matter).
    let mut first = Tern::spawn(&args[..7], dir.path()).await;
    for i in 0..10 {
        // Every partition with something applied (an empty one would look for a snapshot).
        assert_eq!(first.put(&format!("before{i}"), "", &json!(i)).await.0, 200);
    }
    assert!(first.terminate().success());
    let t = Tern::spawn(&args, dir.path()).await;
    assert_eq!(t.put("sequenced", "", &json!(1)).await.0, 200, "sequenced writes do not need object storage");
    assert_eq!(t.get("before0", "").await.0, 200);
    let (status, body) = put_journaled(&t, "j", &json!(1)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("journal_unavailable")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("object storage") && message.contains("not journaled"), "{message}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(t.get("j", "").await.0, 404, "the refused write was not applied");
    // Object storage answers again: journaled writes are taken (the node retries within seconds).
    proxy.resume();
    let mut status = 0;
    for _ in 0..300 {
        status = put_journaled(&t, "j", &json!(2)).await.0;
        if status == 202 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 202, "journaled writes are taken once object storage answers");
    until_visible(&t, "j", &json!(2)).await;
}
