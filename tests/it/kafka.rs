//! Tern on a real Kafka broker (started by scripts/test.sh, address in
//! TERN_TEST_KAFKA): the API, restart from stored offsets, foreign producers.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::Tern;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{json, Value};
use tern::codec::{self, Mutation, Op, OpKind};

/// A topic prefix of its own, so tests share the broker without sharing topics.
fn unique_prefix() -> String {
    format!("t{}.", rand::random::<u32>())
}

async fn serve(data: &std::path::Path, prefix: &str) -> Tern {
    serve_as(data, prefix, "kafka-test").await
}

async fn serve_as(data: &std::path::Path, prefix: &str, node_id: &str) -> Tern {
    serve_with(data, prefix, node_id, &[]).await
}

/// `serve_as` with more flags.
async fn serve_with(data: &std::path::Path, prefix: &str, node_id: &str, extra: &[&str]) -> Tern {
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let mut args = vec![
        "serve",
        "--node-id",
        node_id,
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--log",
        &log,
        "--kafka-topic-prefix",
        prefix,
        "--namespace",
        "default:4",
        // Each node alone in a replica group of its own: it holds every partition.
        "--group",
        node_id,
    ];
    args.extend_from_slice(extra);
    Tern::spawn(&args, data).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_on_kafka_and_restart_resumes_from_stored_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let mut t = serve(dir.path(), &prefix).await;
    let mut last = Value::Null;
    for i in 0..50 {
        let (status, body) = t.put(&format!("k{}", i % 10), "s", &json!(i)).await;
        assert_eq!(status, 200, "{body}");
        last = body;
    }
    let url = format!("{}?after={}", t.kv_url("default", "k9", Some("s")), last["position"].as_str().unwrap());
    let (status, got) = t.send(t.client.get(url)).await;
    assert_eq!((status, got["value"].clone()), (200, json!(49)));
    let (status, cas) = t.send(t.client.put(format!("{}?if_version=0", t.kv_url("default", "k9", Some("s")))).body("1")).await;
    assert_eq!(status, 409, "{cas}");
    t.wait_caught_up("default").await;
    let before = t.partition_states("default").await;
    assert_eq!(before.iter().map(|p| p.2).sum::<u64>(), 51, "every entry applied once");
    assert!(t.terminate().success());

    let t = serve(dir.path(), &prefix).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, before, "a restart resumes from the stored offsets: nothing re-applied");
    for i in 0..10 {
        let (status, got) = t.get(&format!("k{i}"), "s").await;
        assert_eq!(status, 200);
        assert_eq!(got["value"], json!(40 + i));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_producers_are_applied_and_garbage_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let t = serve(dir.path(), &prefix).await;
    let topic = format!("{prefix}default");
    // librdkafka's default partitioner is CRC32-based; murmur2_random is the
    // Java client's default, the one Tern's partition function reproduces.
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).set("partitioner", "murmur2_random").create().unwrap();
    let mutation = |pk: &str, value: &'static str| {
        let op = Op { pk: pk.into(), sk: "".into(), kind: OpKind::Put(Bytes::from_static(value.as_bytes())), condition: None };
        // Each mutation's own write id (a repeated id would be dropped as a retry).
        codec::encode(&Mutation { write_id: Bytes::copy_from_slice(pk.as_bytes()), ops: vec![op], ..Default::default() })
    };
    // Keyed by pk, no partition: Kafka's own default partitioner must pick Tern's partition.
    for pk in ["alpha", "beta", "gamma", "delta", "epsilon"] {
        let payload = mutation(pk, "\"from kafka\"");
        let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&topic).key(pk).payload(&payload);
        producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();
    }
    // Garbage into partition 2.
    let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&topic).partition(2).payload(b"\xffnot a mutation");
    producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();

    t.wait_caught_up("default").await;
    for pk in ["alpha", "beta", "gamma", "delta", "epsilon"] {
        let url = format!("{}?consistency=strong", t.kv_url("default", pk, Some("")));
        let (status, got) = t.send(t.client.get(url)).await;
        assert_eq!(status, 200, "{pk}: {got}");
        assert_eq!(got["value"], "from kafka");
    }
    let (_, ns) = t.get_json("/v1/ns/default").await;
    let skipped: Vec<u64> = ns["state"].as_array().unwrap().iter().map(|p| p["skipped_entries"].as_u64().unwrap()).collect();
    assert_eq!(skipped, [0, 0, 1, 0], "the garbage entry was skipped (and counted) in partition 2 only");
    let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tern_apply_skipped_entries_total{ns=\"default\",reason=\"undecodable\"} 1"), "counted in metrics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_the_retained_log_refuses_the_partition_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let mut t = serve(dir.path(), &prefix).await;
    let pk = "retained";
    let partition = tern::partitioner::partition_of(pk, 4);
    let (status, _) = t.put(pk, "s", &json!("before the stop")).await;
    assert_eq!(status, 200);
    t.wait_caught_up("default").await;
    assert!(t.terminate().success());

    // While the node is stopped, more writes arrive and retention deletes
    // everything below them (DeleteRecords is what retention does).
    five_more_writes_then_retention_to_4(&prefix, pk, partition).await;

    // On restart the node needs offset 1 but the log starts at 4: refused, loudly.
    let data = dir.path().to_path_buf();
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let args = [
        "serve",
        "--node-id",
        "kafka-test",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--log",
        &log,
        "--kafka-topic-prefix",
        &prefix,
        "--namespace",
        "default:4",
    ];
    let t = spawn_not_ready(&args).await;
    let (status, ready) = t.get_json("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    let message = ready["error"]["message"].as_str().unwrap();
    assert!(message.contains("refused") && message.contains("starts at 4"), "{message}");
    let (_, ns) = t.get_json("/v1/ns/default").await;
    let p = &ns["state"][partition as usize];
    assert_eq!(p["status"], "refused", "{p}");
    assert!(p["reason"].as_str().unwrap().contains("retention"), "{p}");
    let (status, body) = t.get(pk, "s").await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("partition_unavailable")), "reads are refused, not stale");
    let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    let gauge = format!("tern_partition_refused{{ns=\"default\",partition=\"{partition}\"}} 1");
    assert!(metrics.contains(&gauge), "refusal visible in metrics");
    let (_, cluster) = t.get_json("/v1/cluster").await;
    let refused = &cluster["nodes"][0]["refused"];
    assert_eq!(refused[0]["partition"], partition, "refusal visible in /v1/cluster: {cluster}");
    assert!(refused[0]["reason"].as_str().unwrap().contains("retention"), "{cluster}");
}

/// Retention overtaking a running reader (the node paused while more
/// writes came and DeleteRecords moved the start past its position):
/// librdkafka reports `AUTO_OFFSET_RESET` (auto.offset.reset=error), which
/// must refuse the partition loudly, not be retried as "log unavailable"
/// forever while the node answers ready with stale reads. Before the fix
/// `/readyz` stayed 200 and the partition never left `serving`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_overtaking_a_running_reader_refuses_the_partition_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let t = serve(dir.path(), &prefix).await;
    let pk = "overtaken";
    let partition = tern::partitioner::partition_of(pk, 4);
    let (status, _) = t.put(pk, "s", &json!("before the pause")).await;
    assert_eq!(status, 200);
    t.wait_caught_up("default").await;
    let pid = t.child.as_ref().unwrap().id().to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    five_more_writes_then_retention_to_4(&prefix, pk, partition).await;
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, ns) = t.get_json("/v1/ns/default").await;
        let p = &ns["state"][partition as usize];
        if p["status"] == "refused" {
            assert!(p["reason"].as_str().unwrap().contains("starts at 4"), "{p}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the overtaken partition was never refused: {p}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, ready) = t.get_json("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    let (status, body) = t.get(pk, "s").await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("partition_unavailable")), "reads are refused, not stale");
}

/// A transactional foreign producer leaves a control record (the commit
/// marker) after its data: Kafka's end offset counts it, no consumer ever
/// sees it. The partition must still reach the end (lag 0, ready, strong
/// reads answer). Before the fix `applied_offset` stayed one below the end
/// forever: never ready, strong reads timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_markers_do_not_keep_a_partition_behind() {
    use rdkafka::producer::Producer;
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let t = serve(dir.path(), &prefix).await;
    let pk = "transactional";
    let partition = tern::partitioner::partition_of(pk, 4);
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", common::kafka_bootstrap())
        .set("partitioner", "murmur2_random")
        .set("transactional.id", format!("{prefix}tx"))
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    let topic = format!("{prefix}default");
    let op = Op { pk: pk.into(), sk: "s".into(), kind: OpKind::Put(Bytes::from_static(b"\"committed\"")), condition: None };
    let payload = codec::encode(&Mutation { ops: vec![op], ..Default::default() });
    let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&topic).key(pk).payload(&payload);
    producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();
    producer.commit_transaction(Duration::from_secs(30)).unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, ns) = t.get_json("/v1/ns/default").await;
        let p = &ns["state"][partition as usize];
        if p["lag"] == 0 && p["log_end_offset"] == 2 {
            assert_eq!(p["applied_offset"], 1, "the marker's offset counts as applied: {p}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the partition never reached the end: {p}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    t.wait_ready().await;
    let url = format!("{}?consistency=strong&timeout_ms=5000", t.kv_url("default", pk, Some("s")));
    let (status, got) = t.send(t.client.get(url)).await;
    assert_eq!((status, got["value"].as_str()), (200, Some("committed")), "{got}");
}

/// Five more writes of `pk` by a foreign producer, then what retention does
/// (DeleteRecords): partition `partition` of the namespace's topic starts at 4.
async fn five_more_writes_then_retention_to_4(prefix: &str, pk: &str, partition: u32) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::{Offset, TopicPartitionList};
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).set("partitioner", "murmur2_random").create().unwrap();
    let topic = format!("{prefix}default");
    for i in 0..5 {
        let op = Op { pk: pk.into(), sk: "s".into(), kind: OpKind::Put(Bytes::from(format!("{i}"))), condition: None };
        let payload = codec::encode(&Mutation { ops: vec![op], ..Default::default() });
        let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&topic).key(pk).payload(&payload);
        producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();
    }
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).create().unwrap();
    let mut below = TopicPartitionList::new();
    below.add_partition_offset(&topic, partition as i32, Offset::Offset(4)).unwrap();
    admin.delete_records(&below, &AdminOptions::new()).await.unwrap();
}

/// Starts a node that is expected never to become ready; waits for it to listen.
async fn spawn_not_ready(args: &[&str]) -> Tern {
    use std::io::{BufRead, BufReader};
    let mut child =
        std::process::Command::new(common::bin()).args(args).env("TERN_LOG_LEVEL", "warn").stdout(std::process::Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().map_while(Result::ok).find(|l| l.contains("listening on ")).unwrap();
    let url = line.split_once("listening on ").unwrap().1.trim().to_string();
    let t = Tern { child: Some(child), url, data_dir: std::path::PathBuf::new(), client: reqwest::Client::new(), printed: Default::default() };
    // Give the apply loops a moment to check the log and refuse.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, ns) = t.get_json("/v1/ns/default").await;
        if ns["state"].as_array().is_some_and(|ps| ps.iter().any(|p| p["status"] == "refused")) {
            return t;
        }
        assert!(std::time::Instant::now() < deadline, "no partition was refused: {ns}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_offsets_are_committed_to_the_consumer_group_for_monitoring() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Offset, TopicPartitionList};

    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let t = serve(dir.path(), &prefix).await;
    let pk = "monitored";
    let partition = tern::partitioner::partition_of(pk, 4) as i32;
    for i in 0..10 {
        let (status, _) = t.put(pk, "", &json!(i)).await;
        assert_eq!(status, 200);
    }
    t.wait_caught_up("default").await;
    // Ask Kafka what the node committed.
    let observer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", common::kafka_bootstrap())
        // Without gossip a node holds every partition (no consumer group) and commits as itself.
        .set("group.id", format!("{prefix}node.kafka-test"))
        .create()
        .unwrap();
    let mut query = TopicPartitionList::new();
    query.add_partition(&format!("{prefix}default"), partition);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let committed = observer.committed_offsets(query.clone(), Duration::from_secs(10)).unwrap();
        let offset = committed.elements()[0].offset();
        if offset == Offset::Offset(10) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "committed offset is {offset:?}, expected 10 (after the store flush)");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_topic_serve_each_others_writes_and_converge() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let prefix = unique_prefix();
    let a = serve_as(dir_a.path(), &prefix, "replica-a").await;
    let b = serve_as(dir_b.path(), &prefix, "replica-b").await;
    for i in 0..40 {
        let (writer, reader) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let pk = format!("key-{}", i % 13);
        let (status, put) = writer.put(&pk, "s", &json!({ "i": i })).await;
        assert_eq!(status, 200, "{put}");
        // Read-your-writes through the other replica.
        let url = format!("{}?after={}", reader.kv_url("default", &pk, Some("s")), put["position"].as_str().unwrap());
        let (status, got) = reader.send(reader.client.get(url)).await;
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["value"]["i"], i);
        assert_eq!(got["version"], put["version"]);
    }
    // A conditional write decided by one replica is seen identically by the other.
    let (_, current) = a.get("key-0", "s").await;
    let stale = current["version"].as_u64().unwrap() - 1;
    let (status, _) = b.send(b.client.put(format!("{}?if_version={stale}", b.kv_url("default", "key-0", Some("s")))).body("0")).await;
    assert_eq!(status, 409);
    a.wait_caught_up("default").await;
    b.wait_caught_up("default").await;
    let (state_a, state_b) = (a.partition_states("default").await, b.partition_states("default").await);
    assert_eq!(state_a, state_b, "equal applied offsets, equal state hashes on both replicas");
}

/// The largest value and the largest batch the API takes (1 MiB; 4 MiB of
/// keys and values) go through Kafka as through the embedded log: Kafka's
/// defaults (about 1 MB a record) would refuse them as "unavailable", and
/// ripcord would journal a write the log can never take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_value_and_batch_go_through_kafka() {
    const MIB: usize = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let t = serve(dir.path(), &prefix).await;
    let largest = "x".repeat(MIB - 2);
    let (status, body) = t.send(t.client.put(t.kv_url("default", "big", Some("v"))).json(&json!(largest))).await;
    assert_eq!(status, 200, "{body}");
    let ops: Vec<Value> = (0..4).map(|i| json!({"op": "put", "pk": "batch", "sk": i.to_string(), "value": "y".repeat(MIB - 100)})).collect();
    let (status, batch) = t.send(t.client.post(format!("{}/v1/ns/default/batch", t.url)).json(&json!({"ops": ops}))).await;
    assert_eq!(status, 200, "{batch}");
    let (status, got) = t.send(t.client.get(format!("{}?after={}", t.kv_url("default", "big", Some("v")), body["position"].as_str().unwrap()))).await;
    assert_eq!((status, got["value"].as_str().map(str::len)), (200, Some(MIB - 2)));
    let (status, got) =
        t.send(t.client.get(format!("{}?after={}", t.kv_url("default", "batch", Some("3")), batch["position"].as_str().unwrap()))).await;
    assert_eq!((status, got["value"].as_str().map(str::len)), (200, Some(MIB - 100)));
}

/// Issue 36: an idempotent producer can fail for good (librdkafka's fatal
/// errors: the broker lost the producer's state or sequence, as after a
/// broker restart that lost its last writes). Every later write failed at
/// once, and nothing made a new producer: a CI run's sequencer appended
/// nothing for minutes after its broker came back. Now the next write
/// makes a new producer and goes through. The fatal error is librdkafka's
/// own test trigger (`rd_kafka_test_fatal_error`). Failed before: the
/// write after it was refused ("Fatal error").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_that_failed_for_good_is_made_again() {
    use tern::log::kafka::{KafkaLog, KafkaLogConfig};
    use tern::log::{Log, TopicPartition};
    let mut config = KafkaLogConfig::new(&common::kafka_bootstrap());
    config.topic_prefix = unique_prefix();
    let log = KafkaLog::connect(config).expect("connect");
    log.create_topic("default", 1).await.expect("create topic");
    let tp = TopicPartition { topic: "default".into(), partition: 0 };
    let first = log.append(&tp, Bytes::from_static(b"before")).await.expect("the first write");
    log.fail_producer_for_test();
    let after = log.append(&tp, Bytes::from_static(b"after")).await;
    assert_eq!(after.map_err(|e| e.to_string()), Ok(first + 1), "the write after the fatal error goes to a new producer");
    let again = log.append(&tp, Bytes::from_static(b"again")).await.expect("and the one after");
    assert_eq!(again, first + 2);
    log.close().await;
}

/// Issue 36 (review of the read barrier): entries that do not move a
/// partition's log time — a producer whose clock is behind, or a strong
/// read's barrier from such a node — kept the partition from being idle,
/// so its holder never ticked and its timers never fired while they came.
/// A node without a publisher (what fires stays in the outbox, where a
/// test reads it) with the ticker deployed and armed: its timer waits 300
/// ms of log time in the partition of "arm", returned with the node.
async fn ticker_armed(dir: &std::path::Path, prefix: &str, node_id: &str) -> (Tern, u32) {
    let t = serve_with(dir, prefix, node_id, &["--procedure-publish", "false"]).await;
    let ticker = common::checkout().join("examples/procedures/build/ticker.wasm");
    let (ok, _, err) = common::cli(&t.url, &["procedure", "deploy", "ticker", ticker.to_str().unwrap()]);
    assert!(ok, "{err}");
    let response = t.client.put(t.kv_url("default", "arm", None)).query(&[("wait", "applied")]).json(&json!(1)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    (t, tern::partitioner::partition_of("arm", 4))
}

/// A partition whose log time is a tick interval behind the node's clock
/// is ticked too. Here a producer writes entries stamped at time 1 every
/// 300 ms while a timer waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_while_a_writer_whose_clock_is_behind_keeps_writing() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let (t, p) = ticker_armed(dir.path(), &prefix, "lagging").await;
    let lagging = (0..).map(|i| format!("lag{i}")).find(|pk| tern::partitioner::partition_of(pk, 4) == p).unwrap();
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).create().unwrap();
    let topic = format!("{prefix}default");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut n = 0u64;
    loop {
        n += 1;
        let op = Op { pk: lagging.clone(), sk: "".into(), kind: OpKind::Put(Bytes::from(n.to_string())), condition: None };
        let payload = codec::encode_at(&Mutation { ops: vec![op], ..Default::default() }, 1);
        let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&topic).partition(p as i32).payload(&payload);
        producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();
        let (status, body) = t.get_json(&format!("/v1/ns/default/outbox?partition={p}&limit=1000")).await;
        assert_eq!(status, 200, "{body}");
        if body["messages"].as_array().unwrap().iter().any(|m| m["topic"] == "default.fired") {
            break;
        }
        if std::time::Instant::now() > deadline {
            let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
            let ticks: Vec<&str> = metrics.lines().filter(|l| l.starts_with("tern_procedure_ticks")).collect();
            let (_, state) = t.get_json("/v1/ns/default").await;
            panic!("the timer never fired while the lagging writer wrote ({n} entries); {ticks:?}; {}", state["state"][p as usize]);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Defect 10 of issue 36: the partition's log time trusted every writer's
/// clock and never went back, so one producer whose clock was a day ahead
/// fired every pending timer at once, at "tomorrow". The topics Tern
/// creates are stamped by the broker (`LogAppendTime`), and an entry moves
/// the log time at most a second past that stamp: the timer armed below
/// fires by the node's ticks, at today's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_clock_is_a_day_ahead_fires_no_timer_early() {
    const DAY_MS: u64 = 86_400_000;
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let (t, p) = ticker_armed(dir.path(), &prefix, "ahead").await;
    let ahead = (0..).map(|i| format!("ahead{i}")).find(|pk| tern::partitioner::partition_of(pk, 4) == p).unwrap();
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).create().unwrap();
    let op = Op { pk: ahead, sk: "".into(), kind: OpKind::Put(Bytes::from_static(b"1")), condition: None };
    let tomorrow_ms = codec::now_ms() + DAY_MS;
    let payload = codec::encode_at(&Mutation { ops: vec![op], ..Default::default() }, tomorrow_ms);
    let topic = format!("{prefix}default");
    let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&topic).partition(p as i32).payload(&payload);
    producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();
    t.wait_caught_up("default").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let fired = loop {
        let (status, body) = t.get_json(&format!("/v1/ns/default/outbox?partition={p}&limit=1000")).await;
        assert_eq!(status, 200, "{body}");
        let fired = body["messages"].as_array().unwrap().iter().find(|m| m["topic"] == "default.fired").cloned();
        if let Some(fired) = fired {
            break fired;
        }
        assert!(std::time::Instant::now() < deadline, "the timer never fired: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let value: serde_json::Value = serde_json::from_str(fired["value"].as_str().unwrap()).unwrap();
    let today_ms = codec::now_ms() + 60_000;
    assert!(value["now"].as_u64().unwrap() < today_ms, "the timer fired at tomorrow's log time: {value}");
    let (_, ns) = t.get_json("/v1/ns/default").await;
    let log_time_ms = ns["state"][p as usize]["procedures"]["log_time_ms"].as_u64().expect("the partition's log time");
    assert!(log_time_ms < today_ms, "the log time went to tomorrow: {log_time_ms}");
}

/// Issue 36, defect 5 (a topic's own limit): Tern creates its topics for 8
/// MiB entries, but a topic may take less (one an older Tern made with
/// Kafka's default, or a source topic). A write larger than its topic
/// takes was acknowledged by the journal (202) and then refused by the
/// broker at every try of the sequencer, holding up the acknowledged
/// writes of its partition behind it. Now the node learns each topic's
/// `max.message.bytes` (before the namespace opens, every minute, and
/// within seconds after its broker refused a write for its size) and
/// refuses such a write with 413 before it is journaled. On such a topic
/// appends go one at a time per partition: `max.message.bytes` bounds a
/// batch, and two writes that each fit were refused together. A refusal
/// for size no longer marks the partition failing (its other writes went
/// on failing at once, as if its leader were lost). Failed before: the
/// journaled write of 300,000 bytes was answered 202; with batches, a
/// journaled write that fit was never applied; with the old breaker rule,
/// a write after the broker's refusal got 503 log_unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_larger_than_its_topic_takes_is_refused_before_it_is_journaled() {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let prefix = unique_prefix();
    let topic = format!("{prefix}default");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).create().unwrap();
    // The namespace's topic as an older Tern made it: a smaller limit.
    let small = NewTopic::new(&topic, 4, TopicReplication::Fixed(1)).set("max.message.bytes", "200000");
    admin.create_topics([&small], &AdminOptions::new()).await.unwrap().remove(0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path(), &prefix).await;
    let put = |pk: &str, sk: &str, query: &str, bytes: usize| {
        let request = t.client.put(t.kv_url("default", pk, (!sk.is_empty()).then_some(sk)) + query).json(&json!("x".repeat(bytes)));
        t.send(request)
    };
    let checked = "larger than the log accepts";
    for query in ["?durability=journaled", "?durability=sequenced", ""] {
        let (status, body) = put("large", "", query, 300_000).await;
        assert_eq!((status, body["error"]["code"].as_str()), (413, Some("entry_too_large")), "{query}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(checked), "refused before the log saw it: {body}");
    }
    // Writes that each fit, at once into one partition (one pk): sequenced,
    // each is taken; journaled, each is applied (its lane not held up).
    let sequenced = (0..4).map(|i| put("batch", &i.to_string(), "?durability=sequenced", 150_000));
    for (status, body) in futures::future::join_all(sequenced).await {
        assert_eq!(status, 200, "each fits: {body}");
    }
    let journaled = (0..4).map(|i| put("journaled", &i.to_string(), "?durability=journaled", 150_000));
    for (status, body) in futures::future::join_all(journaled).await {
        assert_eq!(status, 202, "{body}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for i in 0..4 {
        while t.get("journaled", &i.to_string()).await.0 != 200 {
            assert!(std::time::Instant::now() < deadline, "journaled write {i}, which fits, is applied");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // An operator lowers the limit: the broker refuses a write that fit
    // (the node learned the limit a moment ago, so it asks again only a
    // minute later or after such a refusal).
    let lower = AlterConfig::new(ResourceSpecifier::Topic(&topic)).set("max.message.bytes", "100000");
    admin.alter_configs([&lower], &AdminOptions::new()).await.unwrap().remove(0).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    let refused = loop {
        n += 1;
        let pk = format!("mid{n}");
        let (status, body) = put(&pk, "", "?durability=sequenced", 150_000).await;
        if status == 413 {
            assert_eq!(body["error"]["code"], "entry_too_large", "{body}");
            assert!(body["error"]["message"].as_str().unwrap().contains("too large for its topic"), "the broker refused it: {body}");
            break pk;
        }
        assert_eq!(status, 200, "it fit until the broker has the new limit: {body}");
        assert!(std::time::Instant::now() < deadline, "the broker applies the lower limit");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The refusal was an answer: its partition still takes writes, each of many at once.
    let writes = (0..8).map(|i| put(&refused, "", "?durability=sequenced", 10 + i));
    for (status, body) in futures::future::join_all(writes).await {
        assert_eq!(status, 200, "a refusal for size does not mark the partition failing: {body}");
    }
    // The node learns the new limit within seconds of the refusal; then
    // such a write is refused before it is journaled.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = put(&refused, "", "?durability=sequenced", 150_000).await;
        assert_eq!(status, 413, "{body}");
        if body["error"]["message"].as_str().unwrap().contains(checked) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the node learns the lower limit: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (status, body) = put(&refused, "", "?durability=journaled", 150_000).await;
    assert_eq!((status, body["error"]["code"].as_str()), (413, Some("entry_too_large")), "refused before it is journaled: {body}");
}

/// Review of 9a0622e: on a topic whose appends go one at a time (it takes
/// smaller batches than the producer makes), writes queued for their
/// partition's turn when its leader was lost each became the breaker's
/// probe in turn, and each waited out the producer's delivery bound (10 s)
/// before the next was tried: the k-th waited k × 10 s. Now a write whose
/// partition started failing while it waited its turn fails at once, as it
/// would have at its ticket. Failed before: none of the writes queued
/// behind the first said "took no write".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queued_on_a_small_topic_fail_at_once_when_its_leader_is_lost() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let broker = common::brokers::Brokers::start(1);
    let prefix = unique_prefix();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", &broker.bootstrap).create().unwrap();
    let topic = format!("{prefix}default");
    let small = NewTopic::new(&topic, 1, TopicReplication::Fixed(1)).set("max.message.bytes", "200000");
    admin.create_topics([&small], &AdminOptions::new()).await.unwrap().remove(0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = format!("kafka://{}", broker.bootstrap);
    let data = dir.path().to_str().unwrap();
    let args = [
        "serve",
        "--node-id",
        "small",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data,
        "--log",
        &log,
        "--kafka-topic-prefix",
        &prefix,
        "--namespace",
        "default:1",
    ];
    let t = Tern::spawn(&args, dir.path()).await;
    let put = |pk: &str| t.send(t.client.put(t.kv_url("default", pk, None) + "?durability=sequenced").json(&json!(1)));
    assert_eq!(put("before").await.0, 200);
    broker.kafka(&["stop-node", "1"]);
    let writes = (0..6).map(|i| put(&format!("w{i}")));
    let answers = futures::future::join_all(writes).await;
    let at_once = answers.iter().filter(|(_, body)| body["error"]["message"].as_str().is_some_and(|m| m.contains("took no write"))).count();
    for (status, body) in &answers {
        assert_eq!(*status, 503, "{body}");
    }
    assert!(at_once >= 5, "every write but the first fails at once: {answers:?}");
}

/// Makes namespace `ns` (one partition) and deploys the counter procedure
/// in it with `fuel` per record.
async fn namespace_running_the_counter(t: &Tern, ns: &str, fuel: u64) {
    let (status, body) = t.send(t.client.put(format!("{}/v1/ns/{ns}", t.url)).json(&json!({"partitions": 1}))).await;
    assert_eq!(status, 201, "{body}");
    let module = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        std::fs::read(common::checkout().join("examples/procedures/build/counter.wasm")).unwrap(),
    );
    let definition = json!({"runtime": "wasm", "module": module, "fuel_per_record": fuel});
    let (status, body) = t.send(t.client.put(format!("{}/v1/ns/{ns}/procedures/counter", t.url)).json(&definition)).await;
    assert!(status == 200 || status == 201, "{status} {body}");
}

/// A procedure's output can be as large as a value (1 MiB, and its key):
/// the publisher's producer and the output topics it creates take it.
/// Failed before: librdkafka's default `message.max.bytes` (1,000,000)
/// refused the output at once, every transaction of its partition failed
/// the same way, and the small output behind it was never published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_as_large_as_a_value_is_published_and_nothing_waits_behind_it() {
    // The counter copies a 1 MiB value a few times as a string: far past
    // the default fuel (10 ms of work); given the most there is.
    const FUEL: u64 = 1_000_000_000;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let t = serve_with(dir.path(), &prefix, "kafka-test", &["--procedure-publish", "true", "--procedure-tick-ms", "200"]).await;
    let ns = format!("big{}", rand::random::<u32>());
    namespace_running_the_counter(&t, &ns, FUEL).await;
    // The counter emits {"key":…,"v":<value>,…}: a value this large makes an output over 1,000,000 bytes.
    let large = "x".repeat(1024 * 1024 - 200);
    let (status, body) = t.send(t.client.put(t.kv_url(&ns, "in/large", Some(""))).json(&json!(large))).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = t.send(t.client.put(t.kv_url(&ns, "in/small", Some(""))).json(&json!(1))).await;
    assert_eq!(status, 200, "{body}");

    let topic = format!("{ns}.seen");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", common::kafka_bootstrap())
        .set("group.id", format!("{prefix}reader"))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    let mut sizes = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sizes.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "published {sizes:?} of 2 outputs in 60 s");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => sizes.push(message.payload().map_or(0, <[u8]>::len)),
            Some(Err(e)) => eprintln!("reading {topic}: {e}"),
            None => {}
        }
    }
    assert!(sizes[0] > 1_000_000 && sizes[0] <= 1024 * 1024 + 1024, "the large output first, whole: {sizes:?}");
    assert!(sizes[1] < 1_000, "then the small one: {sizes:?}");
    // The topic Tern made takes the largest output (the one above fit
    // Kafka's default batch bound too: this checks the setting itself).
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).create().unwrap();
    let described = admin.describe_configs([&rdkafka::admin::ResourceSpecifier::Topic(&topic)], &rdkafka::admin::AdminOptions::new()).await.unwrap();
    let config = described[0].as_ref().unwrap();
    assert_eq!(config.get("max.message.bytes").and_then(|e| e.value.clone()).as_deref(), Some("8454144"));

    // An output topic made outside Tern with a smaller limit: the output
    // waits in its outbox (the publisher fails, counted, and says in its log
    // which topic and what to raise) until an operator raises the limit.
    let small = format!("small{}", rand::random::<u32>());
    let small_topic = format!("{small}.seen");
    let topic = rdkafka::admin::NewTopic::new(&small_topic, 1, rdkafka::admin::TopicReplication::Fixed(1)).set("max.message.bytes", "100000");
    let created = admin.create_topics([&topic], &rdkafka::admin::AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    namespace_running_the_counter(&t, &small, FUEL).await;
    let (status, body) = t.send(t.client.put(t.kv_url(&small, "in/large", Some(""))).json(&json!("y".repeat(200_000)))).await;
    assert_eq!(status, 200, "{body}");
    let errors = format!("tern_outbox_publish_errors_total{{ns=\"{small}\"}}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while t.exported_metric(&errors).await.unwrap_or(0.0) < 2.0 {
        assert!(std::time::Instant::now() < deadline, "the publisher of {small} never failed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let raised = rdkafka::admin::AlterConfig::new(rdkafka::admin::ResourceSpecifier::Topic(&small_topic)).set("max.message.bytes", "8454144");
    let altered = admin.alter_configs([&raised], &rdkafka::admin::AdminOptions::new()).await.unwrap();
    assert!(altered[0].is_ok(), "{altered:?}");
    consumer.unsubscribe();
    consumer.subscribe(&[&small_topic]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(std::time::Instant::now() < deadline, "the output waiting for {small_topic} was not published once the limit was raised");
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            assert!(message.payload().map_or(0, <[u8]>::len) > 200_000, "the waiting output, whole");
            break;
        }
    }
}
