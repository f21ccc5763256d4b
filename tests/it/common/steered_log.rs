//! `SteeredLog`: the embedded log with the test's hand on it, for
//! in-process tests of the node: which partitions the node is assigned, a
//! gate that holds the log's offsets (where apply loops open, strong reads,
//! lag) until opened, and readers that deliver every batch twice.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tern::log::embedded::{EmbeddedLog, EmbeddedLogConfig};
use tern::log::{Assignment, CreateOutcome, Log, LogError, LogReader, LogRecord, TopicInfo, TopicPartition};

pub(crate) struct SteeredLog {
    pub log: EmbeddedLog,
    /// What the node is assigned (`Log::assignment`).
    pub assignment: tokio::sync::watch::Sender<Assignment>,
    /// While false, `start_offset` and `end_offset` wait.
    pub offsets_open: tokio::sync::watch::Sender<bool>,
    /// Readers deliver every batch twice (a log that redelivers).
    pub redeliver: bool,
    /// Faults of appends whose payload contains a needle, taken in order
    /// (one per such append; none left: the append goes through).
    pub append_faults: std::sync::Mutex<Vec<(Vec<u8>, std::collections::VecDeque<AppendFault>)>>,
}

/// What an append that matched a needle does.
#[derive(Debug, Clone)]
pub(crate) enum AppendFault {
    /// Waits for a permit of the semaphore (the test holds the append),
    /// then goes through.
    Hold(std::sync::Arc<tokio::sync::Semaphore>),
    /// Refused before anything is written (`LogError::Unavailable`).
    RefuseBefore,
    /// Lands in the log, then reports that its outcome is unknown
    /// (`LogError::Ambiguous`: an acknowledgement lost).
    LandThenAmbiguous,
}

impl SteeredLog {
    /// An embedded log in `dir`: everything assigned, offsets answering.
    pub(crate) fn new(dir: &std::path::Path) -> SteeredLog {
        SteeredLog {
            log: EmbeddedLog::open(EmbeddedLogConfig::new(dir)).unwrap(),
            assignment: tokio::sync::watch::Sender::new(Assignment::All),
            offsets_open: tokio::sync::watch::Sender::new(true),
            redeliver: false,
            append_faults: Default::default(),
        }
    }

    /// Makes the next appends whose payload contains `needle` do `faults`, in order.
    pub(crate) fn fault_appends_of(&self, needle: &[u8], faults: &[AppendFault]) {
        self.append_faults.lock().unwrap().push((needle.to_vec(), faults.iter().cloned().collect()));
    }

    fn fault_of(&self, payload: &[u8]) -> Option<AppendFault> {
        let mut faults = self.append_faults.lock().unwrap();
        let (_, queue) =
            faults.iter_mut().find(|(needle, queue)| !queue.is_empty() && payload.windows(needle.len()).any(|w| w == needle.as_slice()))?;
        queue.pop_front()
    }

    async fn offsets_gate(&self) {
        let mut open = self.offsets_open.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }
}

#[async_trait]
impl Log for SteeredLog {
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<CreateOutcome, LogError> {
        self.log.create_topic(name, partitions).await
    }
    async fn list_topics(&self) -> Result<Vec<TopicInfo>, LogError> {
        self.log.list_topics().await
    }
    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
        match self.fault_of(&payload) {
            None => self.log.append(tp, payload).await,
            Some(AppendFault::Hold(gate)) => {
                let _permit = gate.acquire().await.expect("the gate stays open");
                self.log.append(tp, payload).await
            }
            Some(AppendFault::RefuseBefore) => Err(LogError::Unavailable("steered: refused before it was written".into())),
            Some(AppendFault::LandThenAmbiguous) => {
                let offset = self.log.append(tp, payload).await?;
                Err(LogError::Ambiguous(format!("steered: landed at {offset}, its acknowledgement lost")))
            }
        }
    }
    fn entry_bytes_max(&self) -> usize {
        self.log.entry_bytes_max()
    }
    fn entry_bytes_max_of(&self, namespace: &str) -> usize {
        self.log.entry_bytes_max_of(namespace)
    }
    async fn learn_entry_limits(&self, namespaces: &[String]) -> Result<(), LogError> {
        self.log.learn_entry_limits(namespaces).await
    }
    async fn identity(&self, topic: &str) -> Result<String, LogError> {
        self.log.identity(topic).await
    }
    async fn end_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        self.offsets_gate().await;
        self.log.end_offset(tp).await
    }
    fn end_offset_is_linearizable(&self) -> bool {
        self.log.end_offset_is_linearizable()
    }
    async fn start_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        self.offsets_gate().await;
        self.log.start_offset(tp).await
    }
    async fn reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        let inner = self.log.reader(tp, from).await?;
        Ok(if self.redeliver { Box::new(TwiceReader { inner, again: None }) } else { inner })
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

/// Delivers every batch twice: the second time, offsets already applied.
struct TwiceReader {
    inner: Box<dyn LogReader>,
    again: Option<Vec<LogRecord>>,
}

#[async_trait]
impl LogReader for TwiceReader {
    async fn next_batch(&mut self, records_max: usize, wait: Duration) -> Result<Vec<LogRecord>, LogError> {
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

/// Serves `node` over HTTP on a free loopback port, alone in its cluster,
/// with Firebase's `firebase` settings; its address (`host:port`).
pub(crate) async fn serve_alone(node: std::sync::Arc<tern::node::Node>, firebase: tern::firebase::FirebaseConfig) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let me =
        tern::cluster::SelfInfo { id: "alone".into(), region: "r1".into(), group: "g".into(), api: address.clone(), api_for: Default::default() };
    let app = tern::http::app_with(node.clone(), tern::cluster::Cluster::with_peers(me, node, Vec::new()), firebase);
    tokio::spawn(async move {
        axum::serve(listener, axum::ServiceExt::<axum::extract::Request>::into_make_service(app)).await.unwrap();
    });
    address
}
