//! The simulation's log: one partition in memory, with the faults a real
//! log has. Appends can fail before the entry lands (nothing appended) or
//! after (appended, but the writer hears an error: outcome unknown); reads
//! can fail; retention deletes a prefix under running readers; some offsets
//! hold no entry (transaction markers, skipped by readers, who report their
//! position past them). The whole history is kept for the reference model.
//! In some runs the log stamps each entry with its own clock as it appends
//! it (Kafka's `LogAppendTime`), in others it does not (the embedded log,
//! `CreateTime`), as a seed draws.

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
    /// Not the log's own: the next writer's clock is a day ahead.
    pub clock_ahead: bool,
    /// Not the log's own: the next writer's clock is far behind.
    pub clock_behind: bool,
    /// Not the log's own: object storage fails (`sim/objects.rs`).
    pub objects_fail: bool,
}

#[derive(Default)]
struct State {
    /// Every offset ever written: `None` is a marker (no entry).
    history: Vec<Option<Bytes>>,
    /// Each offset's stamp (`LogRecord::appended_ms`), beside `history`.
    stamps: Vec<Option<u64>>,
    /// The log's own clock, when it stamps what it appends.
    stamp_clock_ms: Option<u64>,
    /// Each append's own fault, drawn per append (appends in one step fail
    /// one by one, not all alike): the stream and the rate.
    flaky: Option<(super::streams::Stream, f64)>,
    /// What landed in `SIDE_NAMESPACE`'s log (no replica applies it).
    side: Vec<Bytes>,
    /// Set at the end of a run: no fault strikes any more.
    faults_healed: bool,
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
    /// A log whose appends also fail one by one at `flaky_rate`, drawn from `flaky`.
    pub(super) fn new(identity: &str, flaky: super::streams::Stream, flaky_rate: f64) -> SimLog {
        let state = State { flaky: Some((flaky, flaky_rate)), ..State::default() };
        SimLog { identity: identity.to_string(), state: Arc::new(Mutex::new(state)) }
    }

    pub(super) fn set_faults(&self, faults: Faults) {
        self.state.lock().faults = faults;
    }

    /// Every fault healed for good (the end of a run): flaky appends too.
    pub(super) fn heal(&self) {
        let mut state = self.state.lock();
        state.faults = Faults::default();
        state.faults_healed = true;
    }

    pub(super) fn append_marker(&self, _tp: &TopicPartition) {
        let mut state = self.state.lock();
        state.history.push(None);
        state.stamps.push(None);
    }

    /// The latest stamp the log put on an entry (None: it stamped none).
    pub(super) fn stamp_max(&self) -> Option<u64> {
        self.state.lock().stamps.iter().flatten().max().copied()
    }

    /// The log's clock now, if it stamps its entries (None: it does not).
    pub(super) fn set_stamp_clock(&self, clock_ms: Option<u64>) {
        self.state.lock().stamp_clock_ms = clock_ms;
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

    /// The append itself, at once: the entry lands, or a fault strikes before or after it does.
    fn land(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
        use rand::Rng;
        let mut state = self.state.lock();
        if &*tp.topic == super::world::SIDE_NAMESPACE {
            // Another partition's log: always takes, and no model reads it.
            state.side.push(payload);
            return Ok(state.side.len() as u64 - 1);
        }
        // Drawn on every append (healed or not), so the draws keep their places.
        let flaky = state.flaky.as_mut().map_or(1.0, |(stream, _)| stream.random::<f64>());
        let rate = if state.faults_healed { 0.0 } else { state.flaky.as_ref().map_or(0.0, |(_, rate)| *rate) };
        let (fails_before, fails_after) = (flaky < rate / 2.0, (rate / 2.0..rate).contains(&flaky));
        if state.faults.append_fails_before || fails_before {
            return Err(LogError::Unavailable("sim: the append failed before it landed".into()));
        }
        state.history.push(Some(payload));
        let stamp = state.stamp_clock_ms;
        state.stamps.push(stamp);
        if state.faults.append_fails_after || fails_after {
            return Err(LogError::Ambiguous("sim: the append landed, its acknowledgement was lost".into()));
        }
        Ok(state.history.len() as u64 - 1)
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

    /// Lands (or fails) at its first poll, and answers at a later one: as a
    /// real log's producer takes an append in at once and acknowledges it
    /// later, so appends handed to it together all land before the first
    /// answer (the sequencer's lane relies on the log keeping their order).
    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
        let answer = self.land(tp, payload);
        tokio::task::yield_now().await;
        answer
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
                records.push(LogRecord::entry(self.next, payload.clone()).stamped(state.stamps[self.next as usize]));
            }
            self.next += 1;
        }
        Ok(records)
    }

    fn position(&self) -> Option<u64> {
        Some(self.next)
    }
}
