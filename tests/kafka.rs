//! Tern on a real Kafka broker (started by scripts/test.sh, address in
//! TERN_TEST_KAFKA): the API, restart from stored offsets, foreign producers.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::Tern;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{json, Value};
use tern::codec::{self, Mutation, Op, OpKind};

fn bootstrap() -> String {
    std::env::var("TERN_TEST_KAFKA")
        .expect("TERN_TEST_KAFKA must name a Kafka broker: run scripts/test.sh, or scripts/kafka.sh start and export it")
}

/// A topic prefix of its own, so tests share the broker without sharing topics.
fn unique_prefix() -> String {
    format!("t{}.", rand::random::<u32>())
}

async fn serve(data: &std::path::Path, prefix: &str) -> Tern {
    let log = format!("kafka://{}", bootstrap());
    let args = [
        "serve", "--node-id", "kafka-test", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap(),
        "--log", &log, "--kafka-topic-prefix", prefix, "--namespace", "default:4",
    ];
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
        ClientConfig::new().set("bootstrap.servers", bootstrap()).set("partitioner", "murmur2_random").create().unwrap();
    let mutation = |pk: &str, value: &'static str| {
        let op = Op { pk: pk.into(), sk: "".into(), kind: OpKind::Put(Bytes::from_static(value.as_bytes())), condition: None };
        codec::encode(&Mutation { write_id: Bytes::from_static(b"foreign"), ops: vec![op] })
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
