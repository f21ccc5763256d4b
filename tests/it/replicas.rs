//! Two replicas of one log, in one process: two `Node`s with their own stores
//! consume the same embedded log. Foreign entries appended straight into the
//! log (as another program producing into the topic would) are skipped alike
//! and counted by both; both converge to the same state hash (invariants 4 and 9 of ARCHITECTURE.md:
//! convergence is checkable, bad entries are skipped alike).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tern::codec::{self, proto, Mutation, Op, OpKind};
use tern::log::embedded::{EmbeddedLog, EmbeddedLogConfig};
use tern::log::{Log, TopicPartition};
use tern::node::{Node, NodeConfig};
use tern::settings::Settings;

/// The node settings' defaults, but for a small cache and frequent store fsyncs.
fn node_config(dir: &std::path::Path, id: &str) -> NodeConfig {
    let settings = Settings { data_dir: dir.join(id), store_cache_bytes: 1 << 20, store_fsync_interval_ms: 50, ..Settings::default() };
    settings.node_config(None)
}

fn put(pk: &str, value: &'static str) -> Bytes {
    let op = Op { pk: pk.into(), sk: "s".into(), kind: OpKind::Put(Bytes::from_static(value.as_bytes())), condition: None };
    Bytes::from(codec::encode(&Mutation { ops: vec![op], ..Default::default() }))
}

async fn wait_applied(node: &Node, ns: &str, partition: u32, target: u64) {
    let namespace = node.namespace(ns).unwrap();
    assert!(namespace.handle(partition).wait_applied(target, Duration::from_secs(30)).await, "replica applied up to {target}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_skip_foreign_garbage_alike_and_converge() {
    let dir = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(EmbeddedLogConfig::new(dir.path().join("log"))).unwrap();
    let log: Arc<dyn Log> = Arc::new(log);
    let a = Node::start(node_config(dir.path(), "a"), log.clone()).await.unwrap();
    assert!(a.create_namespace("ns", 1).await.unwrap());
    let b = Node::start(node_config(dir.path(), "b"), log.clone()).await.unwrap();
    let tp = TopicPartition { topic: Arc::from("ns"), partition: 0 };

    let wrong_kind = proto::Mutation {
        format: 1,
        ops: vec![proto::Op { kind: 0, pk: "k".into(), sk: String::new(), value: Bytes::new(), condition: None, time_ms: 0 }],
        time_ms: 0,
        tick: false,
        outbox_published_below: 0,
        ..Default::default()
    };
    let entries = [
        put("k1", "1"),
        Bytes::from_static(b"\xff\xfe not protobuf"),
        put("k2", "{\"a\": [1, 2]}"),
        Bytes::from(
            proto::Mutation { format: 7, ops: vec![], time_ms: 0, tick: false, outbox_published_below: 0, ..Default::default() }.encode_to_vec(),
        ),
        Bytes::from(wrong_kind.encode_to_vec()),
        put("k1", "3"),
    ];
    for entry in entries {
        log.append(&tp, entry).await.unwrap();
    }
    wait_applied(&a, "ns", 0, 6).await;
    wait_applied(&b, "ns", 0, 6).await;

    let state = |node: &Node| {
        let ns = node.namespace("ns").unwrap();
        let view = ns.handle(0).read_view().unwrap();
        (view.reader.state().unwrap(), view.reader.get("k1", "s").unwrap().map(|r| (r.version, r.value)))
    };
    let (state_a, k1_a) = state(&a);
    let (state_b, k1_b) = state(&b);
    assert_eq!(state_a.skipped_entries, 3, "three malformed entries skipped");
    assert_eq!(state_a.applied_entries, 6);
    assert_eq!(state_a.record_count, 2);
    assert_eq!(k1_a, Some((5, b"3".to_vec())), "the later write wins, its version is its offset");
    assert_eq!(state_a, state_b, "both replicas hold the same state, hash included");
    assert_eq!(k1_a, k1_b);

    // A replica that starts later, from an empty store, converges too.
    let c = Node::start(node_config(dir.path(), "c"), log.clone()).await.unwrap();
    wait_applied(&c, "ns", 0, 6).await;
    assert_eq!(state(&c).0, state_a);

    for node in [a, b, c] {
        node.stop_apply().await;
    }
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_node_without_shutdown_ends_its_apply_loops() {
    let dir = tempfile::tempdir().unwrap();
    let log: Arc<dyn Log> = Arc::new(EmbeddedLog::open(EmbeddedLogConfig::new(dir.path().join("log"))).unwrap());
    let node = Node::start(node_config(dir.path(), "dropped"), log.clone()).await.unwrap();
    node.create_namespace("ns", 2).await.unwrap();
    let handles = node.namespace("ns").unwrap().handles.clone();
    drop(node);
    // Each apply loop held its handle; once every loop has ended only ours remain.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while handles.iter().any(|h| Arc::strong_count(h) > 1) {
        assert!(std::time::Instant::now() < deadline, "apply loops kept running after their node was dropped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    log.close().await;
}
