//! The simulation's log: one partition in memory, with the faults a real
//! log has. Appends can fail before the entry lands (nothing appended) or
//! after (appended, but the writer hears an error: outcome unknown); reads
//! can fail; retention deletes a prefix under running readers; some offsets
//! hold no entry (transaction markers, skipped by readers, who report their
//! position past them). The whole history is kept for the reference model.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::log::{CreateOutcome, Log, LogError, LogReader, LogRecord, TopicInfo, TopicPartition};

/// Faults in force for the next operations.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Faults {
    pub append_fails_before: bool,
    pub append_fails_after: bool,
    pub read_fails: bool,
}

#[derive(Default)]
struct State {
    /// Every offset ever written: `None` is a marker (no entry).
    history: Vec<Option<Bytes>>,
    /// Entries below this were deleted by retention.
    start: u64,
    /// The newest snapshot of this log: retention never passes it.
    snapshot_floor: u64,
    faults: Faults,
}

pub(super) struct SimLog {
    identity: String,
    state: Arc<Mutex<State>>,
}

impl SimLog {
    pub(super) fn new(identity: &str) -> SimLog {
        SimLog { identity: identity.to_string(), state: Arc::new(Mutex::new(State::default())) }
    }

    pub(super) fn set_faults(&self, faults: Faults) {
        self.state.lock().faults = faults;
    }

    pub(super) fn append_marker(&self, _tp: &TopicPartition) {
        self.state.lock().history.push(None);
    }

    pub(super) fn snapshot_taken(&self, applied_next: u64) {
        let mut state = self.state.lock();
        state.snapshot_floor = state.snapshot_floor.max(applied_next);
    }

    pub(super) fn snapshot_floor(&self) -> u64 {
        self.state.lock().snapshot_floor
    }

    /// Retention: entries below `offset` are gone (never past the snapshot floor).
    pub(super) fn delete_below(&self, offset: u64) {
        let mut state = self.state.lock();
        assert!(offset <= state.snapshot_floor, "retention never passes the newest snapshot");
        state.start = state.start.max(offset.min(state.history.len() as u64));
    }

    /// Every offset ever written, deleted or not: the reference model's input.
    pub(super) fn history(&self) -> Vec<Option<Bytes>> {
        self.state.lock().history.clone()
    }
}

#[async_trait]
impl Log for SimLog {
    fn entry_bytes_max(&self) -> usize {
        crate::log::embedded::frame::PAYLOAD_BYTES_MAX
    }

    async fn create_topic(&self, _name: &str, _partitions: u32) -> Result<CreateOutcome, LogError> {
        Ok(CreateOutcome::AlreadyExists)
    }

    async fn list_topics(&self) -> Result<Vec<TopicInfo>, LogError> {
        Ok(vec![TopicInfo { name: super::NAMESPACE.to_string(), partitions: 1, source_topic: None }])
    }

    async fn append(&self, _tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
        let mut state = self.state.lock();
        if state.faults.append_fails_before {
            return Err(LogError::Unavailable("sim: the append failed before it landed".into()));
        }
        state.history.push(Some(payload));
        if state.faults.append_fails_after {
            return Err(LogError::Ambiguous("sim: the append landed, its acknowledgement was lost".into()));
        }
        Ok(state.history.len() as u64 - 1)
    }

    async fn identity(&self, _topic: &str) -> Result<String, LogError> {
        Ok(self.identity.clone())
    }

    async fn end_offset(&self, _tp: &TopicPartition) -> Result<u64, LogError> {
        Ok(self.state.lock().history.len() as u64)
    }

    /// One history, one end.
    fn end_offset_is_linearizable(&self) -> bool {
        true
    }

    async fn start_offset(&self, _tp: &TopicPartition) -> Result<u64, LogError> {
        Ok(self.state.lock().start)
    }

    async fn reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        let state = self.state.lock();
        if from < state.start {
            return Err(LogError::OffsetOutOfRange { tp: tp.to_string(), requested: from, start: state.start });
        }
        Ok(Box::new(SimReader { tp: tp.to_string(), state: self.state.clone(), next: from }))
    }

    fn release_below(&self, _tp: &TopicPartition, _offset: u64) {}

    async fn close(&self) {}
}

struct SimReader {
    tp: String,
    state: Arc<Mutex<State>>,
    next: u64,
}

#[async_trait]
impl LogReader for SimReader {
    async fn next_batch(&mut self, records_max: usize, _wait: Duration) -> Result<Vec<LogRecord>, LogError> {
        let state = self.state.lock();
        if state.faults.read_fails {
            return Err(LogError::Unavailable("sim: the read failed".into()));
        }
        if self.next < state.start {
            return Err(LogError::OffsetOutOfRange { tp: self.tp.clone(), requested: self.next, start: state.start });
        }
        let mut records = Vec::new();
        while records.len() < records_max && (self.next as usize) < state.history.len() {
            if let Some(payload) = &state.history[self.next as usize] {
                records.push(LogRecord::entry(self.next, payload.clone()));
            }
            self.next += 1;
        }
        Ok(records)
    }

    fn position(&self) -> Option<u64> {
        Some(self.next)
    }
}
