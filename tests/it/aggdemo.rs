//! aggdemo end to end on a real Kafka broker (issue 23): a namespace on an
//! existing input topic (`examples/aggdemo/deploy.sh`), records from a
//! foreign producer with every fault, outputs published to `NS.aggregated`
//! and `NS.bad` by Kafka transactions. The publishing node and a replica of
//! another replica group are each killed with SIGKILL while records flow;
//! then every output is in its topic exactly once (read_committed, by its
//! `tern.id`), the billing checks hold (`examples/aggdemo/model.rs`), both
//! replica groups end with the same state hashes, and the published outbox
//! was trimmed on both.

#[path = "../../examples/aggdemo/model.rs"]
mod model;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

use crate::common::brokers::Brokers;
use crate::common::{self, checkout, Tern};

const PARTITIONS: i32 = 4;
/// Log time here is the records' Kafka timestamps (the producer's clock)
/// and the ticks' (the nodes'): a session that waits this long between its
/// records is closed by AGE. Far longer than the stream takes, even on a
/// loaded machine, with a node restarted in it (at 3 s, in CI, the sessions
/// aged out before any reached QTY).
const STALENESS_MS: u64 = 10_000;
/// The longest a stream is held back waiting for the publisher's first
/// commit: well under `STALENESS_MS`, so no session ages out in the pause.
const HOLD_MS_MAX: u64 = 4_000;
/// How long past the staleness the tests wait for every session to age out
/// (ticks every 200 ms move the log time).
const AGE_SLACK_MS: u64 = 5_000;

async fn serve(bootstrap: &str, data: &std::path::Path, prefix: &str, node_id: &str, publish: bool) -> Tern {
    let log = format!("kafka://{bootstrap}");
    let publish = publish.to_string();
    // The operator allows the test's input topics (`in<n>`) and gives the key that signs Tern's entries in them.
    let key_file = data.join("cluster.key");
    std::fs::write(&key_file, "aggdemo-test-cluster-key-0123456789abcdef").unwrap();
    let args = [
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
        // Each node alone in a replica group of its own: it holds every partition.
        "--group",
        node_id,
        "--procedure-tick-ms",
        "200",
        "--procedure-publish",
        &publish,
        "--kafka-source-topic",
        "in*",
        "--cluster-key-file",
        key_file.to_str().unwrap(),
    ];
    Tern::spawn(&args, data).await
}

fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    config
}

async fn create_topic(bootstrap: &str, name: &str) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    let topic = NewTopic::new(name, PARTITIONS, TopicReplication::Fixed(1));
    let results = admin.create_topics([&topic], &AdminOptions::new()).await.unwrap();
    assert!(results[0].is_ok(), "{results:?}");
}

/// Sends records `from..to` of `generated`: key the session id (8 bytes,
/// big-endian), partition by session, header `gen_ns` the record's index.
async fn produce(producer: &FutureProducer, topic: &str, generated: &model::Generated, range: std::ops::Range<usize>) {
    let sends = range.map(|i| {
        let sent = &generated.sent[i];
        let key = sent.session.to_be_bytes();
        let gen_ns = i.to_string();
        let headers = OwnedHeaders::new().insert(Header { key: "gen_ns", value: Some(gen_ns.as_bytes()) });
        let partition = (sent.session % PARTITIONS as u64) as i32;
        let record = FutureRecord::to(topic).key(&key[..]).payload(sent.line.as_bytes()).partition(partition).headers(headers);
        producer.send_result(record).unwrap()
    });
    for delivered in futures::future::join_all(sends.collect::<Vec<_>>()).await {
        delivered.unwrap().unwrap();
    }
}

/// Sends records `range` in slices of 200, 5 ms apart: a stream that is
/// still flowing when a node is killed. From `held.0` on it sends only once
/// `held.1` is opened, or after `HOLD_MS_MAX`, so the stream does not run dry
/// before the test has seen the publisher commit on a slow machine (in CI,
/// the whole range once went out before the first commit).
async fn produce_paced(
    producer: FutureProducer,
    topic: String,
    generated: Arc<model::Generated>,
    range: std::ops::Range<usize>,
    held: (usize, tokio::sync::watch::Receiver<bool>),
) {
    let (held_from, mut opened) = held;
    let mut at = range.start;
    // One bound for the whole hold, set when it begins (not one per slice).
    let mut hold_until: Option<tokio::time::Instant> = None;
    while at < range.end {
        if at >= held_from {
            let until = *hold_until.get_or_insert_with(|| tokio::time::Instant::now() + Duration::from_millis(HOLD_MS_MAX));
            let _ = tokio::time::timeout_at(until, opened.wait_for(|open| *open)).await;
        }
        let to = (at + 200).min(range.end);
        produce(&producer, &topic, &generated, at..to).await;
        at = to;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What `node`'s publishers committed so far (`tern_outbox_published_total`).
async fn published_total(node: &Tern) -> u64 {
    let Ok(response) = node.client.get(format!("{}/metrics", node.url)).send().await else { return 0 };
    let text = response.text().await.unwrap_or_default();
    text.lines().filter(|l| l.starts_with("tern_outbox_published_total")).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
}

/// Waits until `node`'s publishers committed something while records still
/// flow (`stream`, held back until `open` is sent), then lets the rest of
/// the stream go, so a batch is likely mid-transaction.
async fn wait_publishing(node: &Tern, stream: &tokio::task::JoinHandle<()>, open: &tokio::sync::watch::Sender<bool>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while published_total(node).await == 0 {
        assert!(Instant::now() < deadline, "nothing was published");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!stream.is_finished(), "the stream still flows (hold it longer)");
    open.send_replace(true);
}

/// Kills `node` with SIGKILL while it publishes and records flow.
async fn kill_while_publishing(node: &mut Tern, stream: &tokio::task::JoinHandle<()>, open: &tokio::sync::watch::Sender<bool>) {
    wait_publishing(node, stream, open).await;
    node.kill9();
}

/// Every committed message of `topics`: (topic, tern.id, row).
/// One output as a consumer reads it.
struct Consumed {
    topic: String,
    /// Its `tern.id` header.
    id: String,
    row: Value,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
}

fn consume_all(bootstrap: &str, topics: &[String]) -> Vec<Consumed> {
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", "aggdemo-test-reader")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for topic in topics {
        for p in 0..PARTITIONS {
            assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
            let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap();
            ends.insert((topic.clone(), p), high);
        }
    }
    consumer.assign(&assignment).unwrap();
    let mut found = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let positions = consumer.position().unwrap();
        let done = ends.iter().all(|((topic, p), high)| match positions.find_partition(topic, *p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o >= *high,
            _ => *high == 0,
        });
        if done {
            return found;
        }
        assert!(Instant::now() < deadline, "the output topics were not read to their ends ({ends:?}) in time");
        let Some(message) = consumer.poll(Duration::from_millis(200)) else { continue };
        let message = message.unwrap();
        let id = message
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == "tern.id").and_then(|h| h.value).map(|v| String::from_utf8(v.to_vec()).unwrap()))
            .expect("every output carries its tern.id");
        let row: Value = serde_json::from_slice(message.payload().unwrap()).unwrap();
        found.push(Consumed {
            topic: message.topic().to_string(),
            id,
            row,
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
        });
    }
}

/// Both replica groups' nodes have the same state hash at the same offset
/// of each partition. Idle ticks keep the logs moving, so the two are read
/// until they are at the same offsets (bounded), then compared.
async fn assert_same_state(a: &Tern, b: &Tern, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (states_a, states_b) = (a.partition_states(ns).await, b.partition_states(ns).await);
        let offsets = |states: &[(i64, String, u64)]| states.iter().map(|s| s.0).collect::<Vec<_>>();
        if offsets(&states_a) == offsets(&states_b) {
            let hashes = |states: &[(i64, String, u64)]| states.iter().map(|s| (s.0, s.1.clone())).collect::<Vec<_>>();
            assert_eq!(hashes(&states_a), hashes(&states_b), "both replica groups: the same state at the same offsets");
            return;
        }
        assert!(Instant::now() < deadline, "the two nodes were never at the same offsets: {states_a:?} {states_b:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `node` stores no outbox message in any partition of NS
/// (trimmed: published) and has applied its whole log.
async fn wait_published_and_trimmed(node: &Tern, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, body) = node.get_json(&format!("/v1/ns/{ns}")).await;
        let states = body["state"].as_array().unwrap();
        let trimmed = states.iter().all(|p| p["lag"] == 0 && p["procedures"]["outbox_messages"] == 0);
        if trimmed {
            return;
        }
        assert!(Instant::now() < deadline, "the outbox was not published and trimmed in time: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What goes wrong while the records flow.
enum Disruption<'a> {
    /// SIGKILL of the publishing node (restarted), then of the other group's node.
    KillNodes,
    /// The broker stopped while the publisher publishes, started again.
    RestartBroker(&'a Brokers),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggdemo_on_kafka_publishes_every_output_exactly_once_through_kill_9_of_the_publisher_and_a_replica() {
    aggdemo_end_to_end(&common::kafka_bootstrap(), Disruption::KillNodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggdemo_on_kafka_publishes_every_output_exactly_once_through_a_broker_restart() {
    // A broker of this test's own: stopping it touches no other test.
    let broker = Brokers::start(1);
    aggdemo_end_to_end(&broker.bootstrap.clone(), Disruption::RestartBroker(&broker)).await;
}

async fn aggdemo_end_to_end(bootstrap: &str, disruption: Disruption<'_>) {
    let prefix = format!("t{}.", rand::random::<u32>());
    // The output topics are NS.aggregated and NS.bad, outside the prefix: a namespace of this run's own.
    let ns = format!("calls{}", rand::random::<u32>());
    let ns = ns.as_str();
    let input = format!("in{}", rand::random::<u32>());
    create_topic(bootstrap, &input).await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = serve(bootstrap, dir_a.path(), &prefix, "a", true).await;
    let mut b = serve(bootstrap, dir_b.path(), &prefix, "b", false).await;

    // The pinned script: the namespace on the input topic, the procedure on it.
    let deploy = std::process::Command::new(checkout().join("examples/aggdemo/deploy.sh"))
        .args([&a.url, ns, &input, "--staleness-ms", &STALENESS_MS.to_string()])
        .output()
        .unwrap();
    assert!(deploy.status.success(), "deploy.sh: {}", String::from_utf8_lossy(&deploy.stderr));
    let (_, described) = a.get_json(&format!("/v1/ns/{ns}")).await;
    assert_eq!((described["source_topic"].as_str(), described["partitions"].as_u64()), (Some(input.as_str()), Some(PARTITIONS as u64)));

    // Log time is the records' Kafka timestamps (this clock), so the model's t0 is now.
    let generated = Arc::new(model::generate(11, tern::codec::now_ms()));
    let late_from = generated.late_from();
    let producer: FutureProducer = client_config(bootstrap).set("linger.ms", "5").create().unwrap();
    let cut = |share: usize| late_from * share / 10;
    // A stream held from nine tenths of its range until the test opens it:
    // sessions first close (USAGE) late in the first range.
    let held_stream = |range: std::ops::Range<usize>| {
        let (open, opened) = tokio::sync::watch::channel(false);
        let held_from = range.start + (range.end - range.start) * 9 / 10;
        (tokio::spawn(produce_paced(producer.clone(), input.clone(), generated.clone(), range, (held_from, opened))), open)
    };

    match disruption {
        Disruption::KillNodes => {
            // The publisher (and a replica) dies mid-stream, publishing; records keep coming.
            let (first, open) = held_stream(0..cut(5));
            kill_while_publishing(&mut a, &first, &open).await;
            first.await.unwrap();
            a = serve(bootstrap, dir_a.path(), &prefix, "a", true).await;
            // Now the other replica group's node, while records flow.
            let (second, open) = held_stream(cut(5)..late_from);
            open.send_replace(true);
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!second.is_finished());
            b.kill9();
            second.await.unwrap();
            b = serve(bootstrap, dir_b.path(), &prefix, "b", false).await;
        }
        Disruption::RestartBroker(broker) => {
            // The broker goes away while the publisher publishes (its open
            // transaction fails or is aborted); the producer holds the
            // records sent meanwhile and delivers them once it is back.
            let (first, open) = held_stream(0..late_from);
            wait_publishing(&a, &first, &open).await;
            broker.kafka(&["stop-node", "1"]);
            tokio::time::sleep(Duration::from_secs(2)).await;
            broker.kafka(&["start-node", "1"]);
            first.await.unwrap();
        }
    }
    // Past every session's staleness (idle ticks move the log time), then the late records.
    tokio::time::sleep(Duration::from_millis(STALENESS_MS + AGE_SLACK_MS)).await;
    produce(&producer, &input, &generated, late_from..generated.sent.len()).await;
    tokio::time::sleep(Duration::from_millis(STALENESS_MS + AGE_SLACK_MS)).await;

    wait_published_and_trimmed(&a, ns).await;
    wait_published_and_trimmed(&b, ns).await;
    a.wait_caught_up(ns).await;
    b.wait_caught_up(ns).await;
    assert_same_state(&a, &b, ns).await;

    // The publisher's lag shows on the node that publishes, and only there.
    for (node, publishes) in [(&a, true), (&b, false)] {
        let (_, shown) = node.get_json(&format!("/v1/ns/{ns}")).await;
        for p in shown["state"].as_array().unwrap() {
            let unpublished = &p["procedures"]["unpublished_messages"];
            assert_eq!(unpublished.as_i64(), publishes.then_some(0), "{shown}");
        }
    }
    let (_, listed) = a.get_json(&format!("/v1/ns/{ns}/procedures")).await;
    assert!(listed["procedures"][0]["counters"]["records"].as_u64().unwrap() > 0, "{listed}");
    // The publisher owns the outboxes on Kafka: no trim by hand, even from a node that does not publish.
    let (status, body) = b.send(b.client.delete(format!("{}/v1/ns/{ns}/outbox?partition=0&below=1", b.url))).await;
    assert_eq!((status, common::error_code(&body)), (409, "outbox_published"), "{body}");

    let topics = [format!("{ns}.aggregated"), format!("{ns}.bad")];
    let published = consume_all(bootstrap, &topics);
    let ids: BTreeSet<&str> = published.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids.len(), published.len(), "no output twice");
    assert!(ids.iter().all(|id| id.starts_with(&format!("{ns}/"))), "ids name the namespace");
    let outputs: Vec<(String, Value)> = published.iter().map(|c| (c.topic.clone(), c.row.clone())).collect();
    a_sessions_rows_are_in_one_partition_in_order(&published, &topics[0]);
    // Every output, once: the billing checks fail on a lost row (a record
    // neither billed nor reported) and on a row twice (billed twice).
    let reasons = model::check(&generated, &outputs);
    let carried = outputs.iter().filter(|(_, row)| row.get("trigger_gen_ns").is_some()).count();
    assert!(carried > 0 && carried < outputs.len(), "rows of records carry gen_ns, rows of timers do not: {carried} of {}", outputs.len());
    // Nothing failed in the procedure.
    let (_, metrics) = (200, a.client.get(format!("{}/metrics", a.url)).send().await.unwrap().text().await.unwrap());
    assert!(!metrics.lines().any(|l| l.starts_with("tern_procedure_dead_letters_total") && !l.ends_with(" 0")), "no dead letters");
    eprintln!("aggdemo on Kafka: {} records in, {} outputs: {reasons:?}", generated.sent.len(), outputs.len());
}

/// Every billing row is keyed by its session id, so all of a session's
/// rows are in one partition of the output topic, in the order they were
/// cut (ascending seqnos). Failed before: the rows were unkeyed, and a
/// consumer read a session's `[0-20]` after its `[21-32]`.
fn a_sessions_rows_are_in_one_partition_in_order(published: &[Consumed], aggregated: &str) {
    let mut sessions: BTreeMap<u64, Vec<&Consumed>> = BTreeMap::new();
    for c in published.iter().filter(|c| c.topic == aggregated) {
        let session = c.row["sessionId"].as_u64().expect("a billing row names its session");
        assert_eq!(c.key.as_deref(), Some(session.to_string().as_bytes()), "keyed by its session: {}", c.row);
        sessions.entry(session).or_default().push(c);
    }
    assert!(sessions.values().any(|rows| rows.len() > 1), "some session has several rows");
    for (session, mut rows) in sessions {
        assert!(rows.iter().all(|c| c.partition == rows[0].partition), "session {session}'s rows are in one partition");
        rows.sort_by_key(|c| c.offset);
        let seqnos: Vec<(u64, u64)> = rows.iter().map(|c| (c.row["min_seqno"].as_u64().unwrap(), c.row["max_seqno"].as_u64().unwrap())).collect();
        assert!(seqnos.windows(2).all(|w| w[0].1 < w[1].0), "session {session}'s rows in the order they were cut: {seqnos:?}");
    }
}

/// Another producer of the source topic writes records shaped like Tern's
/// entries (a put of `forged`), with the old header (`tern.entry: 1`) and a
/// MAC of another key: both are foreign records, never applied. Before the
/// fix, the first was decoded as Tern's and `forged` was written.
async fn forged_entries_are_foreign(node: &Tern, bootstrap: &str, ns: &str, input: &str) {
    use tern::codec::{Mutation, Op, OpKind};
    let partition = tern::partitioner::partition_of("forged", PARTITIONS as u32);
    let op = Op { pk: "forged".into(), sk: String::new(), kind: OpKind::Put(bytes::Bytes::from_static(b"666")), condition: None };
    let payload = tern::codec::encode_at(&Mutation { ops: vec![op], ..Default::default() }, tern::codec::now_ms());
    let producer: FutureProducer = client_config(bootstrap).create().unwrap();
    for header in [b"1".to_vec(), vec![7u8; 32]] {
        let headers = OwnedHeaders::new().insert(Header { key: "tern.entry", value: Some(&header[..]) });
        let record = FutureRecord::<[u8], [u8]>::to(input).partition(partition as i32).payload(&payload[..]).headers(headers);
        producer.send(record, Duration::from_secs(10)).await.unwrap();
    }
    // A write of Tern's own after them, in the same partition: once it is applied, so are they.
    let after = (0..).map(|i| format!("after{i}")).find(|k| tern::partitioner::partition_of(k, PARTITIONS as u32) == partition).unwrap();
    let (status, answer) = node.send(node.client.put(format!("{}/v1/ns/{ns}/kv/{after}?wait=applied", node.url)).json(&1)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, got) = node.get_json(&format!("/v1/ns/{ns}/kv/forged")).await;
    assert_eq!((status, got["items"].as_array().map(Vec::len)), (200, Some(0)), "a forged entry was applied: {got}");
    let metrics = node.client.get(format!("{}/metrics", node.url)).send().await.unwrap().text().await.unwrap();
    let unverified = metrics.lines().find_map(|l| l.strip_prefix("tern_source_entries_unverified_total ")).and_then(|v| v.parse::<u64>().ok());
    assert!(unverified >= Some(2), "both counted: {unverified:?}");
}

/// A procedure's topics are its namespace's own, never Tern's or a source topic.
async fn a_procedure_cannot_publish_into_others_topics(node: &Tern, prefix: &str, input: &str) {
    let module = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(checkout().join("examples/procedures/build/counter.wasm")).unwrap())
    };
    let tern_named = prefix.trim_end_matches('.');
    let cases = [
        (tern_named.to_string(), serde_json::json!({"runtime": "wasm", "module": module}), "overlap Tern's own topics"),
        ("victim".to_string(), serde_json::json!({"runtime": "wasm", "module": module, "outputs": {"o": input}}), "is not namespace"),
    ];
    for (ns, definition, why) in cases {
        let (status, _) = node.send(node.client.put(format!("{}/v1/ns/{ns}", node.url)).json(&serde_json::json!({"partitions": 1}))).await;
        assert!(status == 201 || status == 200, "{ns}");
        let (status, answer) = node.send(node.client.put(format!("{}/v1/ns/{ns}/procedures/p", node.url)).json(&definition)).await;
        assert_eq!((status, common::error_code(&answer)), (400, "invalid_procedure"), "{ns}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(why), "{ns}: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_topic_is_checked_and_bound_once() {
    let prefix = format!("t{}.", rand::random::<u32>());
    let input = format!("in{}", rand::random::<u32>());
    let bootstrap = common::kafka_bootstrap();
    create_topic(&bootstrap, &input).await;
    let dir = tempfile::tempdir().unwrap();
    let node = serve(&bootstrap, dir.path(), &prefix, "s", false).await;
    let put = |ns: &str, body: Value| {
        let request = node.client.put(format!("{}/v1/ns/{ns}", node.url)).json(&body);
        async { node.send(request).await }
    };
    let ns = format!("src{}", rand::random::<u32>());
    let other = format!("own{}", rand::random::<u32>());
    let long = "a".repeat(250);
    // A topic that exists but the operator did not allow (`--kafka-source-topic in*`).
    let unlisted = format!("feed{}", rand::random::<u32>());
    create_topic(&bootstrap, &unlisted).await;
    let refused: [(&str, Value, u16, &str); 7] = [
        (&ns, serde_json::json!({"source_topic": unlisted}), 400, "invalid_source_topic"),
        (&ns, serde_json::json!({"source_topic": format!("missing{}", rand::random::<u32>())}), 400, "invalid_source_topic"),
        (&ns, serde_json::json!({"source_topic": "bad name"}), 400, "invalid_source_topic"),
        (&ns, serde_json::json!({"source_topic": ""}), 400, "invalid_source_topic"),
        (&ns, serde_json::json!({"source_topic": format!("{prefix}x")}), 400, "invalid_source_topic"),
        (&ns, serde_json::json!({"source_topic": "__consumer_offsets"}), 400, "invalid_source_topic"),
        (&ns, serde_json::json!({"source_topic": long}), 400, "invalid_source_topic"),
    ];
    for (name, body, status, code) in refused {
        let (got, answer) = put(name, body.clone()).await;
        assert_eq!((got, common::error_code(&answer)), (status, code), "{body}: {answer}");
    }
    let (status, answer) = put(&ns, serde_json::json!({"source_topic": input, "partitions": 3})).await;
    assert_eq!((status, common::error_code(&answer)), (409, "namespace_exists"), "the topic has 4 partitions: {answer}");
    let (status, answer) = put(&ns, serde_json::json!({"source_topic": input})).await;
    assert_eq!((status, answer["source_topic"].as_str(), answer["partitions"].as_u64()), (201, Some(input.as_str()), Some(4)), "{answer}");
    let (status, answer) = put(&ns, serde_json::json!({"source_topic": input, "partitions": 4})).await;
    assert_eq!((status, answer["created"].as_bool()), (200, Some(false)), "the same again: {answer}");
    // Another namespace on the same topic; a namespace with a log of its own on a topic; a source namespace as an own one.
    let (status, answer) = put(&other, serde_json::json!({"source_topic": input})).await;
    assert_eq!((status, common::error_code(&answer)), (409, "source_topic_conflict"), "{answer}");
    let (status, _) = put(&other, serde_json::json!({"partitions": 2})).await;
    assert_eq!(status, 201);
    let (status, answer) = put(&other, serde_json::json!({"source_topic": input})).await;
    assert_eq!((status, common::error_code(&answer)), (409, "source_topic_conflict"), "{answer}");
    // Its writes go into the source topic as Tern entries and read back.
    let (status, answer) = node.send(node.client.put(format!("{}/v1/ns/{ns}/kv/k?wait=applied", node.url)).json(&serde_json::json!({"v": 1}))).await;
    assert_eq!(status, 200, "{answer}");
    let (status, got) = node.get_json(&format!("/v1/ns/{ns}/kv/k")).await;
    assert_eq!((status, got["items"][0]["value"].clone()), (200, serde_json::json!({"v": 1})), "{got}");
    let (_, listed) = node.get_json("/v1/ns").await;
    assert!(listed["namespaces"].as_array().unwrap().iter().any(|n| n["name"] == ns.as_str() && n["source_topic"] == input.as_str()), "{listed}");
    forged_entries_are_foreign(&node, &bootstrap, &ns, &input).await;
    a_procedure_cannot_publish_into_others_topics(&node, &prefix, &input).await;
    // The CLI shows it.
    let (ok, out, err) = common::cli(&node.url, &["ns", "show", &ns]);
    assert!(ok && out.contains(&format!("source_topic {input}")), "{out}{err}");
    // Not deleted: its entries stay in the source topic, and a namespace
    // created again on it would read them again.
    let (status, answer) = node.send(node.client.delete(format!("{}/v1/ns/{ns}?confirm={ns}", node.url))).await;
    assert_eq!((status, common::error_code(&answer)), (409, "namespace_on_source_topic"), "{answer}");
    let (status, _) = node.get_json(&format!("/v1/ns/{ns}/kv/k")).await;
    assert_eq!(status, 200, "still there");
}

/// A source topic can take records far larger than Tern's own writes. One
/// its procedure fails on becomes a dead letter that is published, cut to
/// its bound and saying so, and the dead letter behind it is published too.
/// Before the bound (`procedure::dead_letter`) the dead letter of this
/// 1.5 MiB record was 9.4 MB, over the largest message the publisher
/// sends: it was never sent, and nothing of its partition after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_source_record_that_fails_is_dead_lettered_and_nothing_waits_behind_it() {
    const SOURCE_RECORD_BYTES_MAX: &str = "4000000";
    // 1.5 MiB of control bytes: as JSON text (6 bytes each) 9.4 MB, over the
    // largest message (8.4 MB) before the bound; past the counter's memory
    // (1 MiB here), so each is a dead letter.
    const RECORD_BYTES: usize = 3 << 19;
    let prefix = format!("t{}.", rand::random::<u32>());
    let input = format!("in{}", rand::random::<u32>());
    let bootstrap = common::kafka_bootstrap();
    let admin: AdminClient<DefaultClientContext> = client_config(&bootstrap).create().unwrap();
    let topic = NewTopic::new(&input, 1, TopicReplication::Fixed(1)).set("max.message.bytes", SOURCE_RECORD_BYTES_MAX);
    let created = admin.create_topics([&topic], &AdminOptions::new()).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let dir = tempfile::tempdir().unwrap();
    let node = serve(&bootstrap, dir.path(), &prefix, "h", true).await;
    let ns = format!("huge{}", rand::random::<u32>());
    let (status, answer) = node.send(node.client.put(format!("{}/v1/ns/{ns}", node.url)).json(&serde_json::json!({"source_topic": input}))).await;
    assert_eq!(status, 201, "{answer}");
    let module = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        std::fs::read(checkout().join("examples/procedures/build/counter.wasm")).unwrap(),
    );
    let definition = serde_json::json!({"runtime": "wasm", "module": module, "memory_bytes": 1 << 20});
    let (status, answer) = node.send(node.client.put(format!("{}/v1/ns/{ns}/procedures/counter", node.url)).json(&definition)).await;
    assert!(status == 200 || status == 201, "{status} {answer}");

    let huge = "\u{1}".repeat(RECORD_BYTES);
    let after = "\u{1}".repeat(RECORD_BYTES);
    let producer: FutureProducer = client_config(&bootstrap).set("message.max.bytes", SOURCE_RECORD_BYTES_MAX).create().unwrap();
    for (key, value) in [("in/huge", huge.as_str()), ("in/after", after.as_str())] {
        let record = FutureRecord::to(&input).key(key).payload(value).partition(0);
        producer.send(record, Duration::from_secs(30)).await.map_err(|(e, _)| e).unwrap();
    }

    let dead_topic = format!("{ns}.counter.dead");
    let consumer: BaseConsumer = client_config(&bootstrap)
        .set("group.id", format!("{prefix}dead-reader"))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .unwrap();
    consumer.subscribe(&[&dead_topic]).unwrap();
    let mut dead: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while dead.len() < 2 {
        if Instant::now() > deadline {
            let (_, state) = node.get_json(&format!("/v1/ns/{ns}")).await;
            let keys: Vec<String> = dead.iter().map(|(k, _)| String::from_utf8_lossy(k).into_owned()).collect();
            panic!("{keys:?} of 2 dead letters published to {dead_topic} in 90 s; the namespace: {state}");
        }
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            dead.push((message.key().unwrap_or_default().to_vec(), message.payload().unwrap_or_default().to_vec()));
        }
    }
    let (key, value) = &dead[0];
    assert_eq!(key.as_slice(), b"in/huge");
    assert!(value.len() <= 7 << 20, "a dead letter of {} bytes", value.len());
    let cut: Value = serde_json::from_slice(value).unwrap();
    assert_eq!((cut["value_truncated"].as_bool(), cut["value_bytes"].as_u64()), (Some(true), Some(RECORD_BYTES as u64)), "{}", cut["reason"]);
    assert_eq!(cut["value"].as_str().map(str::len), Some(1 << 20));
    // The one behind it, published too (its cut is the unit tests' business).
    let (key, value) = &dead[1];
    let next: Value = serde_json::from_slice(value).unwrap();
    assert_eq!((key.as_slice(), next["value_bytes"].as_u64()), (&b"in/after"[..], Some(RECORD_BYTES as u64)));
}
