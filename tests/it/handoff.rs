//! Holding and letting go of partitions, with a log whose assignment the
//! test moves and whose offsets it can hold back: the node's bookkeeping of
//! apply loops against revokes and assigns that overlap a stopping loop.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tern::log::embedded::{EmbeddedLog, EmbeddedLogConfig};
use tern::log::{Assignment, CreateOutcome, Log, LogError, LogReader, TopicInfo, TopicPartition};
use tern::node::Node;

/// The embedded log, with the assignment in the test's hands and a gate
/// that holds `start_offset` (where an apply loop starts) until opened.
struct Steered {
    log: EmbeddedLog,
    assignment: tokio::sync::watch::Sender<Assignment>,
    gate: tokio::sync::watch::Sender<bool>,
}

#[async_trait]
impl Log for Steered {
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<CreateOutcome, LogError> {
        self.log.create_topic(name, partitions).await
    }
    async fn list_topics(&self) -> Result<Vec<TopicInfo>, LogError> {
        self.log.list_topics().await
    }
    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
        self.log.append(tp, payload).await
    }
    async fn identity(&self, topic: &str) -> Result<String, LogError> {
        self.log.identity(topic).await
    }
    async fn end_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        self.log.end_offset(tp).await
    }
    async fn start_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        let mut open = self.gate.subscribe();
        let _ = open.wait_for(|open| *open).await;
        self.log.start_offset(tp).await
    }
    async fn reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        self.log.reader(tp, from).await
    }
    fn release_below(&self, tp: &TopicPartition, offset: u64) {
        self.log.release_below(tp, offset)
    }
    fn assignment(&self) -> tokio::sync::watch::Receiver<Assignment> {
        self.assignment.subscribe()
    }
    async fn close(&self) {
        self.log.close().await
    }
}

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
    let log = Arc::new(Steered {
        log: EmbeddedLog::open(EmbeddedLogConfig::new(dir.path().join("log"))).unwrap(),
        assignment: tokio::sync::watch::Sender::new(Assignment::All),
        gate: tokio::sync::watch::Sender::new(false),
    });
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
    log.gate.send_replace(true);
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

/// Delivers every batch twice: the second time, offsets the store already
/// applied (a log that redelivers).
struct Redelivering {
    log: EmbeddedLog,
}

struct TwiceReader {
    inner: Box<dyn LogReader>,
    again: Option<Vec<tern::log::LogRecord>>,
}

#[async_trait]
impl LogReader for TwiceReader {
    async fn next_batch(&mut self, records_max: usize, wait: Duration) -> Result<Vec<tern::log::LogRecord>, LogError> {
        if let Some(again) = self.again.take() {
            return Ok(again);
        }
        let batch = self.inner.next_batch(records_max, wait).await?;
        if !batch.is_empty() {
            self.again = Some(batch.clone());
        }
        Ok(batch)
    }
}

#[async_trait]
impl Log for Redelivering {
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<CreateOutcome, LogError> {
        self.log.create_topic(name, partitions).await
    }
    async fn list_topics(&self) -> Result<Vec<TopicInfo>, LogError> {
        self.log.list_topics().await
    }
    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
        self.log.append(tp, payload).await
    }
    async fn identity(&self, topic: &str) -> Result<String, LogError> {
        self.log.identity(topic).await
    }
    async fn end_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        self.log.end_offset(tp).await
    }
    async fn start_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        self.log.start_offset(tp).await
    }
    async fn reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        Ok(Box::new(TwiceReader { inner: self.log.reader(tp, from).await?, again: None }))
    }
    fn release_below(&self, tp: &TopicPartition, offset: u64) {
        self.log.release_below(tp, offset)
    }
    async fn close(&self) {
        self.log.close().await
    }
}

/// A broken invariant inside the apply loop (here: a log redelivering
/// offsets already applied, which the loop asserts never happens) refuses
/// the partition with the reason, and nothing is applied twice. Before the
/// fix the panic ended the loop's task and the partition stayed `Serving`
/// with no loop: every later write silently never applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_apply_loop_refuses_the_partition() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Redelivering { log: EmbeddedLog::open(EmbeddedLogConfig::new(dir.path().join("log"))).unwrap() });
    let settings = tern::settings::Settings { data_dir: dir.path().join("node"), store_cache_bytes: 1 << 20, ..Default::default() };
    let node = Node::start(settings.node_config(None), log.clone()).await.unwrap();
    node.create_namespace("ns", 1).await.unwrap();
    let tp = TopicPartition { topic: Arc::from("ns"), partition: 0 };
    let op = tern::codec::Op { pk: "k".into(), sk: String::new(), kind: tern::codec::OpKind::Put(Bytes::from_static(b"1")), condition: None };
    let payload = tern::codec::encode(&tern::codec::Mutation { write_id: Bytes::new(), ops: vec![op] });
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
