//! Many Tern nodes on one real Kafka broker (`TERN_TEST_KAFKA`): node `a`
//! alone in replica group `a`, nodes `b1` and `b2` sharing group `b`, all
//! gossiping. Writes and reads go through every node; partitions a node does
//! not hold are forwarded to a holder; state hashes agree across groups; a
//! `kill -9` of a group-b node moves its partitions to the other member with
//! no acknowledged write lost and none applied twice.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{error_code, Tern};
use serde_json::{json, Value};

const PARTITIONS: u32 = 4;

struct Cluster {
    nodes: BTreeMap<&'static str, Tern>,
    /// The topic prefix of this cluster's namespaces (and consumer groups).
    prefix: String,
    _dirs: Vec<tempfile::TempDir>,
}

/// Starts `a` (group a), `b1` and `b2` (group b) on a fresh topic prefix,
/// seeded through a's gossip port, and waits until every node sees the
/// others and group b's partitions are split between its two members.
async fn start_cluster() -> Cluster {
    let prefix = format!("c{}.", rand::random::<u32>());
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let gossip: BTreeMap<&str, u16> = ["a", "b1", "b2"].into_iter().map(|id| (id, common::free_udp_port())).collect();
    let seed = format!("127.0.0.1:{}", gossip["a"]);
    let mut nodes = BTreeMap::new();
    let mut dirs = Vec::new();
    for (id, group) in [("a", "a"), ("b1", "b"), ("b2", "b")] {
        let dir = tempfile::tempdir().unwrap();
        let gossip_addr = format!("127.0.0.1:{}", gossip[id]);
        let ns = format!("default:{PARTITIONS}");
        let args = [
            "serve",
            "--node-id",
            id,
            "--group",
            group,
            "--region",
            "r1",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--log",
            &log,
            "--kafka-topic-prefix",
            &prefix,
            "--namespace",
            &ns,
            "--gossip",
            &gossip_addr,
            "--seeds",
            &seed,
            // A killed member's partitions move after 3 s of silence.
            "--kafka-session-timeout-ms",
            "3000",
        ];
        let tern = Tern::spawn(&args, dir.path()).await;
        nodes.insert(id, tern);
        dirs.push(dir);
    }
    let cluster = Cluster { nodes, prefix, _dirs: dirs };
    cluster
        .wait_until("all nodes live, group b split", |views| {
            views.values().all(|v| live_ids(v).len() == 3)
                && held_by(&views["b1"], "b1").len() + held_by(&views["b1"], "b2").len() == PARTITIONS as usize
                && !held_by(&views["b1"], "b1").is_empty()
                && !held_by(&views["b1"], "b2").is_empty()
                && held_by(&views["a"], "a").len() == PARTITIONS as usize
        })
        .await;
    cluster
}

fn live_ids(view: &Value) -> Vec<String> {
    view["nodes"].as_array().unwrap().iter().filter(|n| n["state"] == "live").map(|n| n["id"].as_str().unwrap().to_string()).collect()
}

/// The partitions of `default` that `node` serves, as `view` (a /v1/cluster answer) shows them.
fn held_by(view: &Value, node: &str) -> Vec<u64> {
    view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["id"] == node && n["state"] == "live")
        .flat_map(|n| n["partitions"].as_array().unwrap().iter().filter(|p| p["ns"] == "default").map(|p| p["partition"].as_u64().unwrap()))
        .collect()
}

impl Cluster {
    async fn views(&self) -> BTreeMap<&'static str, Value> {
        let mut views = BTreeMap::new();
        for (id, node) in &self.nodes {
            if node.child.is_some() {
                views.insert(*id, node.get_json("/v1/cluster").await.1);
            }
        }
        views
    }

    async fn wait_until(&self, what: &str, done: impl Fn(&BTreeMap<&'static str, Value>) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let views = self.views().await;
            if done(&views) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for: {what}; cluster views: {views:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Per partition: (applied_offset, state_hash, applied_entries) on the node that holds it.
    async fn held_states(&self, node: &str) -> BTreeMap<u64, (i64, String, u64)> {
        let (status, body) = self.nodes[node].get_json("/v1/ns/default").await;
        assert_eq!(status, 200, "{body}");
        body["state"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["held"] == true)
            .map(|p| {
                let state =
                    (p["applied_offset"].as_i64().unwrap(), p["state_hash"].as_str().unwrap().to_string(), p["applied_entries"].as_u64().unwrap());
                (p["partition"].as_u64().unwrap(), state)
            })
            .collect()
    }

    /// Waits until every held partition of every live node has applied its log.
    async fn wait_caught_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for (id, node) in &self.nodes {
            if node.child.is_none() {
                continue;
            }
            loop {
                let (_, body) = node.get_json("/v1/ns/default").await;
                let held: Vec<&Value> = body["state"].as_array().unwrap().iter().filter(|p| p["held"] == true).collect();
                if held.iter().all(|p| p["lag"] == 0 && p["status"] == "serving") {
                    break;
                }
                assert!(Instant::now() < deadline, "{id} not caught up: {body}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Group b's state of every partition, from whichever member holds it.
    async fn group_b_states(&self) -> BTreeMap<u64, (i64, String, u64)> {
        let mut states = BTreeMap::new();
        for id in ["b1", "b2"] {
            if self.nodes[id].child.is_some() {
                states.extend(self.held_states(id).await);
            }
        }
        states
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_two_groups_serve_the_same_data_through_every_node() {
    let cluster = start_cluster().await;
    let ids = ["a", "b1", "b2"];
    // Writes through every node: plain puts, wait=applied puts, a batch, a delete.
    let mut expected: BTreeMap<String, Value> = BTreeMap::new();
    for i in 0..60 {
        let node = &cluster.nodes[ids[i % 3]];
        let pk = format!("key-{i}");
        let url =
            if i % 4 == 0 { format!("{}?wait=applied", node.kv_url("default", &pk, Some("s"))) } else { node.kv_url("default", &pk, Some("s")) };
        let (status, body) = node.send(node.client.put(url).json(&json!({ "i": i }))).await;
        assert_eq!(status, 200, "put through {}: {body}", ids[i % 3]);
        expected.insert(pk, json!({ "i": i }));
    }
    let b2 = &cluster.nodes["b2"];
    let (status, body) = b2
        .send(b2.client.post(format!("{}/v1/ns/default/batch?wait=applied", b2.url)).json(&json!({"ops": [
            {"op": "put", "pk": "batch", "sk": "1", "value": 1},
            {"op": "put", "pk": "batch", "sk": "2", "value": 2},
        ]})))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = cluster.nodes["b1"].send(cluster.nodes["b1"].client.delete(cluster.nodes["b1"].kv_url("default", "key-7", Some("s")))).await;
    assert_eq!(status, 200, "{body}");
    expected.remove("key-7");

    // Conditional writes through a node that does not hold the partition are
    // decided by a holder, and the outcome comes back (409 with the version).
    let (_, current) = cluster.nodes["a"].get("key-1", "s").await;
    let version = current["version"].as_u64().unwrap();
    for id in ids {
        let node = &cluster.nodes[id];
        let url = format!("{}?if_version={}", node.kv_url("default", "key-1", Some("s")), version + 1_000);
        let (status, body) = node.send(node.client.put(url).body("0")).await;
        assert_eq!(status, 409, "through {id}: {body}");
        assert_eq!(error_code(&body), "condition_failed");
        assert_eq!(body["error"]["current_version"], version, "through {id}: {body}");
    }

    // Retried writes with an Idempotency-Key apply once, whichever node
    // takes them (keyed writes of partitions b1 does not hold go to a holder).
    let b1 = &cluster.nodes["b1"];
    let pks: Vec<String> = (0..PARTITIONS)
        .map(|p| (0..).map(|i| format!("idem-{i}")).find(|pk| tern::partitioner::partition_of(pk, PARTITIONS) == p).unwrap())
        .collect();
    for pk in &pks {
        let keyed = |node: &Tern| node.client.put(node.kv_url("default", pk, Some(""))).header("Idempotency-Key", format!("key-{pk}")).body("1");
        let (status, first) = b1.send(keyed(b1)).await;
        assert_eq!(status, 200, "{first}");
        let (status, retry) = cluster.nodes["b2"].send(keyed(&cluster.nodes["b2"])).await;
        assert_eq!(status, 200, "{retry}");
        assert_eq!((&retry["version"], &retry["duplicate"]), (&first["version"], &json!(true)), "{pk}: {retry}");
    }

    // Reads through every node, read-your-writes (`after=`) and strong
    // included: the same data everywhere, whoever holds the partition.
    for id in ids {
        let node = &cluster.nodes[id];
        for (pk, value) in &expected {
            let (status, got) = node.send(node.client.get(format!("{}?consistency=strong", node.kv_url("default", pk, Some("s"))))).await;
            assert_eq!(status, 200, "{pk} through {id}: {got}");
            assert_eq!(&got["value"], value, "{pk} through {id}");
        }
        let (status, got) = node.get("key-7", "s").await;
        assert_eq!(status, 404, "deleted key through {id}: {got}");
        let keys: Vec<Value> = expected.keys().map(|pk| json!({"pk": pk, "sk": "s"})).chain([json!({"pk": "key-7", "sk": "s"})]).collect();
        let (status, got) = node.send(node.client.post(format!("{}/v1/ns/default/get", node.url)).json(&json!({ "keys": keys }))).await;
        assert_eq!(status, 200, "multi-get through {id}: {got}");
        let items = got["items"].as_array().unwrap();
        for ((pk, value), item) in expected.iter().zip(items) {
            assert_eq!(&item["value"], value, "multi-get {pk} through {id}");
        }
        assert_eq!(items[expected.len()], Value::Null);
        let position = got["position"].as_str().unwrap();
        assert_eq!(position.split(',').count(), PARTITIONS as usize, "one offset per partition: {position}");
        let (status, listed) = node.get_json("/v1/ns/default/kv/batch").await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(listed["items"].as_array().unwrap().len(), 2, "list through {id}");
    }

    // Read-your-writes through the node that does not hold the partition.
    let (status, put) = cluster.nodes["a"].put("ryw", "", &json!("fresh")).await;
    assert_eq!(status, 200);
    for id in ["b1", "b2"] {
        let node = &cluster.nodes[id];
        let url = format!("{}?after={}", node.kv_url("default", "ryw", Some("")), put["position"].as_str().unwrap());
        let (status, got) = node.send(node.client.get(url)).await;
        assert_eq!((status, &got["value"]), (200, &json!("fresh")), "through {id}: {got}");
    }

    // Equal applied offsets, equal state hashes, across the two replica groups.
    cluster.wait_caught_up().await;
    let group_a = cluster.held_states("a").await;
    let group_b = cluster.group_b_states().await;
    assert_eq!(group_a.len(), PARTITIONS as usize);
    assert_eq!(group_a, group_b, "group a and group b hold identical partitions");

    // Each group's members commit their applied offsets to the group's
    // consumer group (monitoring only): Kafka's tooling sees group b's lag.
    let observer: rdkafka::consumer::BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", common::kafka_bootstrap())
        .set("group.id", tern::log::kafka::group_id(&cluster.prefix, "b"))
        .create()
        .unwrap();
    let mut query = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        query.add_partition(&format!("{}default", cluster.prefix), p as i32);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        use rdkafka::consumer::Consumer;
        let committed = observer.committed_offsets(query.clone(), Duration::from_secs(10)).unwrap();
        let offsets: Vec<i64> = committed.elements().iter().map(|e| e.offset().to_raw().unwrap_or(-1)).collect();
        let expected: Vec<i64> = group_b.values().map(|(applied_offset, _, _)| applied_offset + 1).collect();
        if offsets == expected {
            break;
        }
        assert!(Instant::now() < deadline, "group b committed {offsets:?}, applied {expected:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The CLI prints the map.
    let (ok, stdout, stderr) = common::cli(&cluster.nodes["b1"].url, &["cluster"]);
    assert!(ok, "{stderr}");
    for id in ids {
        assert!(stdout.contains(id), "{stdout}");
    }
    assert!(stdout.contains("default/0@"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_a_group_member_moves_its_partitions_and_loses_nothing() {
    let mut cluster = start_cluster().await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Writers through a and b2 (b1 is the one killed); each key written once.
    let mut writers = Vec::new();
    for (w, id) in ["a", "b2", "a", "b2"].into_iter().enumerate() {
        let (url, client, stop) = (cluster.nodes[id].url.clone(), cluster.nodes[id].client.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut acked: Vec<(String, u64)> = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let pk = format!("w{w}-{i}");
                i += 1;
                let response = client.put(format!("{url}/v1/ns/default/kv/{pk}/s")).json(&json!(i)).send().await;
                if let Ok(r) = response {
                    if r.status() == 200 {
                        let body: Value = r.json().await.unwrap();
                        acked.push((pk, body["version"].as_u64().unwrap()));
                    }
                }
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let b1_had = held_by(&cluster.views().await["b2"], "b1");
    assert!(!b1_had.is_empty());
    cluster.nodes.get_mut("b1").unwrap().kill9();
    // b2 takes over every partition of group b and serves them.
    cluster.wait_until("b2 holds every partition", |views| held_by(&views["b2"], "b2").len() == PARTITIONS as usize).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = Vec::new();
    for writer in writers {
        acked.extend(writer.await.unwrap());
    }
    assert!(acked.len() > 100, "the writers made progress: {} acked", acked.len());
    cluster.wait_caught_up().await;
    // Every acknowledged write is on b2, at the version it was acknowledged with.
    let b2 = &cluster.nodes["b2"];
    for chunk in acked.chunks(500) {
        let keys: Vec<Value> = chunk.iter().map(|(pk, _)| json!({"pk": pk, "sk": "s"})).collect();
        let (status, got) = b2.send(b2.client.post(format!("{}/v1/ns/default/get", b2.url)).json(&json!({ "keys": keys }))).await;
        assert_eq!(status, 200, "{got}");
        for ((pk, version), item) in chunk.iter().zip(got["items"].as_array().unwrap()) {
            assert_eq!(item["version"].as_u64(), Some(*version), "acked write {pk} at version {version}: {item}");
        }
    }
    // Nothing applied twice: each partition applied exactly one entry per
    // offset, and group b's state equals group a's.
    let group_b = cluster.group_b_states().await;
    assert_eq!(group_b.len(), PARTITIONS as usize);
    for (p, (applied_offset, _, applied_entries)) in &group_b {
        assert_eq!(*applied_entries as i64, applied_offset + 1, "partition {p}: one apply per offset");
    }
    assert_eq!(cluster.held_states("a").await, group_b, "group a and group b agree after the move");
}
