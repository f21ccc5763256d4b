//! Three Kafka brokers (replication factor 3, min.insync.replicas 2), started
//! by the test itself with `scripts/kafka.sh start --brokers 3`: `kill -9` of
//! one broker under write load loses no acknowledged write, and writes go on
//! (leaders move to the surviving replicas), and a replica-group member keeps
//! serving reads while its group coordinator fails over. Its own test binary, so its
//! brokers never compete with other tests for the machine's two cores.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::brokers::Brokers;
use common::Tern;
use serde_json::{json, Value};

const WRITERS: usize = 8;

/// The node id of the broker coordinating consumer group `group` (Kafka's own tool says).
fn coordinator_of(brokers: &Brokers, group: &str) -> String {
    let output = std::process::Command::new("scripts/kafka.sh")
        .args(["run", "--dir", brokers.dir.path().to_str().unwrap()])
        .args(["org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", &brokers.bootstrap])
        .args(["--describe", "--state", "--group", group])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    // GROUP  COORDINATOR (ID)  ...: "tern.group.g 127.0.0.1:40007  (2) ..."
    let line = text.lines().find(|l| l.starts_with(group)).unwrap_or_else(|| panic!("no coordinator line in {text}"));
    let id = line.split('(').nth(1).and_then(|rest| rest.split(')').next()).unwrap_or_else(|| panic!("{line}"));
    id.trim().to_string()
}

/// A topic's replication factor (replicas of partition 0) and `min.insync.replicas`.
async fn topic_replication(bootstrap: &str, topic: &str) -> (usize, String) {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let replicas = metadata.topics()[0].partitions()[0].replicas().len();
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let configs = admin.describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new()).await.unwrap();
    let config = configs.into_iter().next().unwrap().unwrap();
    (replicas, config.get("min.insync.replicas").and_then(|e| e.value.clone()).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_three_brokers_loses_no_acknowledged_write() {
    let brokers = Brokers::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = format!("kafka://{}", brokers.bootstrap);
    let args = [
        "serve",
        "--node-id",
        "rf3",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        // No replication flags: with 3 brokers the defaults are 3 and 2.
        "--log",
        &log,
        "--namespace",
        "default:4",
    ];
    let t = Tern::spawn(&args, dir.path()).await;
    assert_eq!(topic_replication(&brokers.bootstrap, "tern.default").await, (3, "2".to_string()), "safe defaults on 3 brokers");
    // A second node, a member of its replica group's consumer group (it gossips).
    let member_dir = tempfile::tempdir().unwrap();
    let gossip = format!("127.0.0.1:{}", std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let member_args = [
        "serve",
        "--node-id",
        "member",
        "--group",
        "g",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        member_dir.path().to_str().unwrap(),
        "--log",
        &log,
        "--gossip",
        &gossip,
        "--kafka-session-timeout-ms",
        "3000",
    ];
    let member = Tern::spawn(&member_args, member_dir.path()).await;
    let (status, put) = t.put("config", "", &json!("v1")).await;
    assert_eq!(status, 200, "{put}");
    let url = format!("{}?after={}", member.kv_url("default", "config", Some("")), put["position"].as_str().unwrap());
    let (status, got) = member.send(member.client.get(url)).await;
    assert_eq!(status, 200, "{got}");
    let stop = Arc::new(AtomicBool::new(false));
    // Reads on the member never fail while the brokers (and the group coordinator) fail over.
    let reader = {
        let (client, url, stop) = (member.client.clone(), member.kv_url("default", "config", Some("")), stop.clone());
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0usize, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let response = client.get(&url).send().await.unwrap();
                if response.status() == 200 {
                    ok += 1;
                } else {
                    failed.push(response.text().await.unwrap());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (ok, failed)
        })
    };
    let killed = Arc::new(AtomicBool::new(false));
    let acked_after_kill = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (client, url) = (t.client.clone(), t.url.clone());
            let (stop, killed, acked_after_kill) = (stop.clone(), killed.clone(), acked_after_kill.clone());
            tokio::spawn(async move {
                let mut acked: Vec<(String, u64)> = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let pk = format!("w{w}-{n}");
                    n += 1;
                    let response = client.put(format!("{url}/v1/ns/default/kv/{pk}/")).json(&json!(n)).send().await.unwrap();
                    let status = response.status().as_u16();
                    let body: Value = response.json().await.unwrap();
                    if status == 200 {
                        acked.push((pk, body["version"].as_u64().unwrap()));
                        if killed.load(Ordering::Relaxed) {
                            acked_after_kill.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        // While leadership moves a write may fail; it must say so, never succeed falsely.
                        assert_eq!(status, 503, "{body}");
                        // outcome_unknown: in flight when the broker died (it may be in the log).
                        assert!(matches!(body["error"]["code"].as_str(), Some("log_unavailable" | "outcome_unknown")), "{body}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                acked
            })
        })
        .collect();
    // Kill the broker that coordinates the member's consumer group: the
    // member's session times out and its partitions are revoked meanwhile.
    let coordinator = coordinator_of(&brokers, &tern::log::kafka::group_id("tern.", "g"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    brokers.kafka(&["stop-node", &coordinator, "--kill"]);
    killed.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(12)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    for writer in writers {
        acked.extend(writer.await.unwrap());
    }
    assert!(acked_after_kill.load(Ordering::Relaxed) > 0, "writes go on with two of three brokers");
    let (reads_ok, reads_failed) = reader.await.unwrap();
    let metrics = member.client.get(format!("{}/metrics", member.url)).send().await.unwrap().text().await.unwrap();
    let revoked = metrics.lines().find(|l| l.starts_with("tern_replica_group_revoked_partitions_total")).unwrap().to_string();
    assert_ne!(revoked, "tern_replica_group_revoked_partitions_total 0", "the coordinator's death revoked the member's partitions");
    assert!(reads_ok > 100, "{reads_ok} reads");
    assert!(reads_failed.is_empty(), "reads failed on the group member during the failover: {reads_failed:?}");

    t.wait_caught_up("default").await;
    for (pk, version) in &acked {
        let (status, got) = t.get(pk, "").await;
        assert_eq!(status, 200, "acknowledged write {pk} is missing: {got}");
        assert_eq!(got["version"].as_u64(), Some(*version), "{pk}");
    }
    let (_, ns) = t.get_json("/v1/ns/default").await;
    for p in ns["state"].as_array().unwrap() {
        assert_eq!(p["status"], "serving", "{p}");
        assert_eq!(p["skipped_entries"], 0, "{p}");
    }
}

/// Issue 36, defect 13: a member whose group consumer was fenced (another
/// client joined its consumer group with its `group.instance.id`, as after
/// a coordinator stall) never made its consumer again, and nothing said
/// so. Now it is assigned nothing while fenced (`/readyz` says it is
/// joining), makes its consumer again, and holds its partitions again (its
/// new consumer's join fences the impostor in turn). Failed before: the
/// member never noticed — it stayed ready, keeping the assignment the
/// impostor now had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_group_member_makes_its_consumer_again_and_holds_partitions() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let brokers = Brokers::start(1);
    let dir = tempfile::tempdir().unwrap();
    let log = format!("kafka://{}", brokers.bootstrap);
    let gossip = format!("127.0.0.1:{}", std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let args = [
        "serve",
        "--node-id",
        "fenced",
        "--group",
        "g",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--log",
        &log,
        "--namespace",
        "default:2",
        // A member of a consumer group (it gossips, alone).
        "--gossip",
        &gossip,
        "--kafka-session-timeout-ms",
        "6000",
    ];
    let t = Tern::spawn(&args, dir.path()).await;
    let ready = |t: &Tern| {
        let (client, url) = (t.client.clone(), format!("{}/readyz", t.url));
        async move { client.get(url).send().await.map(|r| r.status().as_u16()).unwrap_or(0) == 200 }
    };
    for _ in 0..200 {
        if ready(&t).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready(&t).await, "the member holds its partitions");
    // An impostor joins with the member's instance id: the member is fenced.
    let impostor: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", &brokers.bootstrap)
        .set("group.id", tern::log::kafka::group_id("tern.", "g"))
        .set("group.instance.id", "fenced")
        // The group's protocol: another would be refused, not fence anyone.
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap();
    impostor.subscribe(&["tern.default"]).unwrap();
    let mut fenced = false;
    for _ in 0..300 {
        let _ = impostor.poll(Duration::from_millis(50));
        if !ready(&t).await {
            fenced = true;
            break;
        }
    }
    assert!(fenced, "the member saw it was fenced (it is assigned nothing meanwhile)");
    drop(impostor);
    // The member's new consumer joins with its static id (fencing the
    // impostor in turn) and holds all again.
    let mut back = false;
    for _ in 0..600 {
        if ready(&t).await {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    let rebuilt = metrics.lines().find(|l| l.starts_with("tern_replica_group_consumer_rebuilt_total")).unwrap_or("").to_string();
    assert!(back, "the member holds its partitions again; {rebuilt}");
    assert_ne!(rebuilt, "tern_replica_group_consumer_rebuilt_total 0", "its consumer was made again");
    let (status, body) = t.put("after", "", &json!(1)).await;
    assert_eq!(status, 200, "{body}");
}
