//! Every acknowledged write applied exactly once and in the order its
//! client saw (issue 36): in-process nodes over a log the test steers
//! (`common::steered_log`), so a fault lands exactly where the defect was.

use std::sync::Arc;
use std::time::Duration;

use tern::node::Node;

use crate::common::steered_log::{AppendFault, SteeredLog};

/// A node over `log` with ripcord on, serving HTTP; its base URL.
async fn node_over(log: Arc<SteeredLog>, dir: &std::path::Path, partitions: u32) -> (Arc<Node>, String) {
    let settings = tern::settings::Settings { data_dir: dir.join("node"), store_cache_bytes: 1 << 20, ripcord: true, ..Default::default() };
    let node = Node::start(settings.node_config(None), log).await.unwrap();
    node.create_namespace("ns", partitions).await.unwrap();
    let address = crate::common::steered_log::serve_alone(node.clone(), Default::default()).await;
    (node, format!("http://{address}"))
}

async fn put(client: &reqwest::Client, url: &str, body: &str) -> (u16, serde_json::Value) {
    let response = client.put(url).body(body.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(serde_json::Value::Null))
}

/// Defect 2: a write whose append landed but whose acknowledgement was
/// lost was journaled by ripcord (202) under a fresh write id; the
/// sequencer appended that copy after a later acknowledged write, which it
/// then overwrote. Such a write may be in the log: it is answered 503
/// `outcome_unknown` and never journaled. Failed before: A answered 202,
/// and k ended "a" over B's acknowledged "b".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_may_have_landed_is_never_journaled_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SteeredLog::new(&dir.path().join("log")));
    // A's first append lands and loses its acknowledgement; a copy's first
    // append is refused (so B gets in before the copy's retry).
    log.fault_appends_of(b"\"first\"", &[AppendFault::LandThenAmbiguous, AppendFault::RefuseBefore]);
    let (node, url) = node_over(log.clone(), dir.path(), 1).await;
    let client = reqwest::Client::new();
    let k = format!("{url}/v1/ns/ns/kv/k/");
    let (status, body) = put(&client, &k, "\"first\"").await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("outcome_unknown")), "A may be in the log: {body}");
    let (status, body) = put(&client, &format!("{k}?durability=sequenced"), "\"second\"").await;
    assert_eq!(status, 200, "B is acknowledged in the log: {body}");
    // Long enough for a journaled copy's retry (50 ms) to have landed.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (_, body) = {
        let response = client.get(format!("{k}?consistency=strong")).send().await.unwrap();
        (response.status().as_u16(), response.json::<serde_json::Value>().await.unwrap())
    };
    assert_eq!(body["value"], "second", "B, acknowledged after A's answer, is the value: {body}");
    let records = node.namespace("ns").unwrap().handle(0).applied_next();
    assert_eq!(records, 2, "A once (it landed), B once; no copy");
    node.stop_apply().await;
}

/// Defect 4: the sequencer hands a lane's entries to the log together; when
/// the first was refused and the ones after it landed, those applied
/// first, and the refused one, appended again, applied last: out of
/// journal order. Three journaled writes of one key, the first refused
/// once: the last journaled ("three") must be the value. Failed before:
/// "one".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_journal_entry_keeps_its_place_before_the_ones_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SteeredLog::new(&dir.path().join("log")));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    // "zero" holds the sequencer until the three are journaled, so one
    // round hands them to the log together; "one" is refused once there.
    log.fault_appends_of(b"\"zero\"", &[AppendFault::Hold(gate.clone())]);
    log.fault_appends_of(b"\"one\"", &[AppendFault::RefuseBefore]);
    let (node, url) = node_over(log.clone(), dir.path(), 1).await;
    let client = reqwest::Client::new();
    let journaled = |pk: &str| format!("{url}/v1/ns/ns/kv/{pk}/?durability=journaled");
    assert_eq!(put(&client, &journaled("z"), "\"zero\"").await.0, 202);
    for value in ["one", "two", "three"] {
        let (status, body) = put(&client, &journaled("k"), &format!("\"{value}\"")).await;
        assert_eq!(status, 202, "{body}");
    }
    gate.add_permits(1);
    let handle = node.namespace("ns").unwrap().handle(0).clone();
    let mut value = serde_json::Value::Null;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let backlog = node.journal.backlog().entries;
        let response = client.get(format!("{url}/v1/ns/ns/kv/k/")).send().await.unwrap();
        if backlog == 0 && response.status() == 200 {
            value = response.json::<serde_json::Value>().await.unwrap()["value"].clone();
            break;
        }
    }
    assert_eq!(value, "three", "the last journaled write is the value (applied_next {})", handle.applied_next());
    node.stop_apply().await;
}

/// Defect 3: ripcord was one flag per node, and the sequencer's rounds
/// waited for every partition's appends. With partition A's appends held
/// (its leader cut off), a plain write W1 to healthy partition B was
/// journaled (the node-wide flag), a conditional write to B succeeded and
/// lowered the flag, and the client's next plain write W2 to B was
/// sequenced at once, ahead of W1, which waited for A's round: W1 ended
/// the value. Ripcord is now per partition, and each journal lane goes at
/// its own pace. Failed before: the value was "one".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_partitions_outage_never_reorders_another_partitions_writes() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SteeredLog::new(&dir.path().join("log")));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    // A's first append is refused (ripcord journals it); its copy is held.
    log.fault_appends_of(b"\"on-a\"", &[AppendFault::RefuseBefore, AppendFault::Hold(gate.clone())]);
    let (node, url) = node_over(log.clone(), dir.path(), 2).await;
    let in_partition = |p: u32| (0..).map(|i| format!("k{i}")).find(|pk| tern::partitioner::partition_of(pk, 2) == p).unwrap();
    let (a, b) = (in_partition(0), in_partition(1));
    let client = reqwest::Client::new();
    let kv = |pk: &str| format!("{url}/v1/ns/ns/kv/{pk}/");
    let (status, body) = put(&client, &kv(&a), "\"on-a\"").await;
    assert_eq!(status, 202, "A's log refused it: journaled by ripcord: {body}");
    put(&client, &kv(&b), "\"one\"").await;
    // A key of B's other than b (the test once took "{b}c", which may be in A).
    let c = (0..).map(|i| format!("c{i}")).find(|pk| tern::partitioner::partition_of(pk, 2) == 1).unwrap();
    let (status, body) = put(&client, &format!("{}?if_absent=true", kv(&c)), "1").await;
    assert_eq!(status, 200, "{body}");
    put(&client, &kv(&b), "\"two\"").await;
    gate.add_permits(1);
    let mut value = serde_json::Value::Null;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let response = client.get(kv(&b)).send().await.unwrap();
        if node.journal.backlog().entries == 0 && response.status() == 200 {
            value = response.json::<serde_json::Value>().await.unwrap()["value"].clone();
            break;
        }
    }
    assert_eq!(value, "two", "the client's last write to B is B's value");
    node.stop_apply().await;
}

/// Review F11 (issue 36): a partition whose log refused a client's write is
/// flagged, and ripcord journals its plain writes; when the journal
/// refused them before journaling (here full with another partition's
/// held write) they were answered 503/507 for as long as that lasted, the
/// log healthy and nothing of the partition in the journal. Now such a
/// write goes to the log, which takes it and clears the flag. Failed
/// before: the second write to A answered 507 `journal_full`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flagged_partition_with_nothing_journaled_tries_the_log_when_the_journal_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SteeredLog::new(&dir.path().join("log")));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    // B's write is refused by the log, journaled, and its copy held: the journal (of 1) is full.
    log.fault_appends_of(b"\"held\"", &[AppendFault::RefuseBefore, AppendFault::Hold(gate.clone())]);
    // A's first write is refused by the log: A is flagged.
    log.fault_appends_of(b"\"a1\"", &[AppendFault::RefuseBefore]);
    let settings = tern::settings::Settings {
        data_dir: dir.path().join("node"),
        store_cache_bytes: 1 << 20,
        ripcord: true,
        journal_entries_max: 1,
        ..Default::default()
    };
    let node = Node::start(settings.node_config(None), log.clone()).await.unwrap();
    node.create_namespace("ns", 2).await.unwrap();
    let url = format!("http://{}", crate::common::steered_log::serve_alone(node.clone(), Default::default()).await);
    let in_partition = |p: u32| (0..).map(|i| format!("k{i}")).find(|pk| tern::partitioner::partition_of(pk, 2) == p).unwrap();
    let (a, b) = (in_partition(0), in_partition(1));
    let client = reqwest::Client::new();
    let kv = |pk: &str| format!("{url}/v1/ns/ns/kv/{pk}/");
    let (status, body) = put(&client, &kv(&b), "\"held\"").await;
    assert_eq!(status, 202, "B journaled by ripcord: {body}");
    let (status, body) = put(&client, &kv(&a), "\"a1\"").await;
    assert_eq!((status, crate::common::error_code(&body)), (507, "journal_full"), "A refused by the log, then by the full journal: {body}");
    let (status, body) = put(&client, &kv(&a), "\"a2\"").await;
    assert_eq!(status, 200, "A's next write goes to the log, which takes it: {body}");
    let (status, body) = put(&client, &kv(&a), "\"a3\"").await;
    assert_eq!(status, 200, "the flag is cleared: {body}");
    gate.add_permits(1);
    node.stop_apply().await;
}

/// Found by the simulation (seed 3): a client's write that goes to the log
/// (a condition, `durability=sequenced`) while the node's journal holds an
/// earlier journaled write of its partition was decided before it. Here a
/// journaled "j" to k, held on its way to the log; then `if_absent` on k
/// must see "j" (409 `condition_failed`), and a sequenced write to k must end the value. Such
/// a write now waits until the journaled ones are applied, at most its
/// timeout (then 503 `behind_journal`, nothing written). Failed before: the
/// conditional write answered 200 and k ended "j" over the sequenced write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_the_log_waits_for_the_journaled_writes_answered_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SteeredLog::new(&dir.path().join("log")));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    log.fault_appends_of(b"\"j\"", &[AppendFault::Hold(gate.clone())]);
    let (node, url) = node_over(log.clone(), dir.path(), 1).await;
    let client = reqwest::Client::new();
    let k = format!("{url}/v1/ns/ns/kv/k/");
    let (status, body) = put(&client, &format!("{k}?durability=journaled"), "\"j\"").await;
    assert_eq!(status, 202, "{body}");

    // While "j" is held, a conditional write waits for it, then gives up: nothing written.
    let (status, body) = put(&client, &format!("{k}?if_absent=true&timeout_ms=300"), "\"c\"").await;
    assert_eq!((status, crate::common::error_code(&body)), (503, "behind_journal"), "{body}");
    assert_eq!(body["error"]["partition"], 0, "{body}");

    // Released while it waits: the condition sees "j".
    let opener = {
        let gate = gate.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            gate.add_permits(1);
        })
    };
    let (status, body) = put(&client, &format!("{k}?if_absent=true"), "\"c\"").await;
    assert_eq!((status, crate::common::error_code(&body)), (409, "condition_failed"), "k holds \"j\", answered before: {body}");
    opener.await.unwrap();

    // A journaled write, then a sequenced one: the sequenced one is the value.
    assert_eq!(put(&client, &format!("{k}?durability=journaled"), "\"j2\"").await.0, 202);
    let (status, body) = put(&client, &format!("{k}?durability=sequenced"), "\"s\"").await;
    assert_eq!(status, 200, "{body}");
    let response = client.get(format!("{k}?consistency=strong")).send().await.unwrap();
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["value"], "s", "the last write answered is the value: {body}");
    node.stop_apply().await;
}
