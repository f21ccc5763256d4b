//! Holding and letting go of partitions, with a log whose assignment the
//! test moves and whose offsets it can hold back: the node's bookkeeping of
//! apply loops against revokes and assigns that overlap a stopping loop.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tern::log::{Assignment, Log, TopicPartition};
use tern::node::Node;

use crate::common::steered_log::SteeredLog;

/// Longer than the node's assignment check (250 ms): each change is seen on its own.
const SETTLE: Duration = Duration::from_millis(600);

/// Revoke → assign → revoke while the first loop is still stopping (stuck
/// where it opens the log): the partition must end up not held, with no
/// loop. Before the fix the second loop, told to stop before it started,
/// still marked the partition held and served it: `Serving` with no apply
/// loop and no owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_let_go_while_its_loop_stops_never_comes_back_serving() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SteeredLog::new(&dir.path().join("log")));
    // Apply loops wait where they open the log until the test says.
    log.offsets_open.send_replace(false);
    let settings = tern::settings::Settings { data_dir: dir.path().join("node"), store_cache_bytes: 1 << 20, ..Default::default() };
    let node = Node::start(settings.node_config(None), log.clone()).await.unwrap();
    node.create_namespace("ns", 1).await.unwrap();
    let status = || format!("{:?}", node.namespace("ns").unwrap().handles[0].status());
    tokio::time::sleep(SETTLE).await;
    assert_eq!(status(), "CatchingUp", "the first loop waits at the gate");
    log.assignment.send_replace(Assignment::Only(BTreeSet::new()));
    tokio::time::sleep(SETTLE).await;
    log.assignment.send_replace(Assignment::All);
    tokio::time::sleep(SETTLE).await;
    log.assignment.send_replace(Assignment::Only(BTreeSet::new()));
    tokio::time::sleep(SETTLE).await;
    log.offsets_open.send_replace(true);
    tokio::time::sleep(SETTLE).await;
    assert_eq!(status(), "NotHeld", "let go, and nothing revived it");
    // Assigned again: it is held and served by a loop of its own.
    log.assignment.send_replace(Assignment::All);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status() != "Serving" {
        assert!(std::time::Instant::now() < deadline, "never served again: {}", status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.shutdown().await;
}

/// A broken invariant inside the apply loop (here: a log redelivering
/// offsets already applied, which the loop asserts never happens) refuses
/// the partition with the reason, and nothing is applied twice. Before the
/// fix the panic ended the loop's task and the partition stayed `Serving`
/// with no loop: every later write silently never applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_apply_loop_refuses_the_partition() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SteeredLog { redeliver: true, ..SteeredLog::new(&dir.path().join("log")) });
    let settings = tern::settings::Settings { data_dir: dir.path().join("node"), store_cache_bytes: 1 << 20, ..Default::default() };
    let node = Node::start(settings.node_config(None), log.clone()).await.unwrap();
    node.create_namespace("ns", 1).await.unwrap();
    let tp = TopicPartition { topic: Arc::from("ns"), partition: 0 };
    let op = tern::codec::Op { pk: "k".into(), sk: String::new(), kind: tern::codec::OpKind::Put(Bytes::from_static(b"1")), condition: None };
    let payload = tern::codec::encode(&tern::codec::Mutation { ops: vec![op], ..Default::default() });
    log.append(&tp, Bytes::from(payload)).await.unwrap();
    let status = || format!("{:?}", node.namespace("ns").unwrap().handles[0].status());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !status().starts_with("Refused") {
        assert!(std::time::Instant::now() < deadline, "never refused: {}", status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(status().contains("below applied_next"), "{}", status());
    let (ready, problems) = node.readiness();
    assert!(!ready && problems.iter().any(|p| p.contains("refused")), "{problems:?}");
    node.shutdown().await;
}
