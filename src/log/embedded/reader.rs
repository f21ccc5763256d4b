//! Reading one partition of the embedded log: from the in-memory tail cache
//! when the reader is near the end, otherwise from the segment files.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::frame;
use super::index::PartitionState;
use super::segments::Segments;
use crate::log::{LogError, LogReader, LogRecord, TopicPartition};

/// Most bytes one batch read from disk returns (at least one entry is returned).
const DISK_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

pub(super) struct EmbeddedReader {
    tp: TopicPartition,
    partition: Arc<PartitionState>,
    segments: Arc<Segments>,
    end: watch::Receiver<u64>,
    next: u64,
}

impl EmbeddedReader {
    pub(super) fn new(tp: TopicPartition, partition: Arc<PartitionState>, segments: Arc<Segments>, from: u64) -> Self {
        let end = partition.durable_end.subscribe();
        EmbeddedReader { tp, partition, segments, end, next: from }
    }

    async fn read_until(&mut self, end: u64, records_max: usize) -> Result<Vec<LogRecord>, LogError> {
        let located = {
            let partition = self.partition.clone();
            let index = partition.index.lock();
            let readable_from = index.readable_from();
            if self.next < readable_from {
                return Err(LogError::OffsetOutOfRange { tp: self.tp.to_string(), requested: self.next, start: readable_from });
            }
            // Accepted by the operator: on past them (several may lie in a
            // row), as over offsets without entries (`position` tells where
            // the reader is). Bounded by `index::LOST_RANGES_MAX`.
            while let Some(lost) = index.accepted_lost_at(self.next) {
                self.next = lost.to;
            }
            if self.next >= end {
                return Ok(Vec::new());
            }
            if let Some(entries) = index.read_tail(self.next, records_max) {
                let records: Vec<LogRecord> =
                    entries.into_iter().take_while(|(offset, _)| *offset < end).map(|(offset, payload)| LogRecord::entry(offset, payload)).collect();
                drop(index);
                return Ok(self.advance(records));
            }
            index.locate(self.next, end, records_max)
        };
        let segments = self.segments.clone();
        let tp = self.tp.clone();
        let records = tokio::task::spawn_blocking(move || read_frames(&segments, &tp, located))
            .await
            .map_err(|e| LogError::Unavailable(format!("log read task failed: {e}")))??;
        Ok(self.advance(records))
    }

    fn advance(&mut self, records: Vec<LogRecord>) -> Vec<LogRecord> {
        for record in &records {
            assert_eq!(record.offset, self.next, "a reader yields dense offsets");
            self.next += 1;
        }
        records
    }
}

fn read_frames(segments: &Segments, tp: &TopicPartition, located: Vec<(u64, u64, u32)>) -> Result<Vec<LogRecord>, LogError> {
    let mut records = Vec::with_capacity(located.len());
    let mut bytes = 0;
    for (segment_id, offset, position) in located {
        let file = segments.get(segment_id).ok_or_else(|| LogError::OffsetOutOfRange { tp: tp.to_string(), requested: offset, start: offset + 1 })?;
        let (header, payload) = frame::read_at(&file, u64::from(position)).map_err(|e| damaged_on_read(tp, offset, segment_id, position, &e))?;
        if header.offset != offset || header.partition != tp.partition {
            let found = format!("expected offset {offset} of partition {}, found {} of {}", tp.partition, header.offset, header.partition);
            return Err(damaged_on_read(tp, offset, segment_id, position, &found));
        }
        bytes += payload.len();
        records.push(LogRecord::entry(offset, payload));
        if bytes >= DISK_BATCH_BYTES_MAX {
            break;
        }
    }
    Ok(records)
}

/// A frame that fails its checks when read while the node runs: the
/// partition is refused, naming the offset; the next open reads around the
/// damaged bytes and names exactly what is lost and the flag that goes on
/// without it (`frame::scan`, docs/damage.md).
fn damaged_on_read(tp: &TopicPartition, offset: u64, segment_id: u64, position: u32, what: &dyn std::fmt::Display) -> LogError {
    LogError::Corrupt(format!(
        "log offset {offset} of {tp} is damaged on disk (segment {segment_id}, byte {position}: {what}). Restart the \
         node: it reads around damaged bytes and names exactly the offsets lost, and the --accept-loss flag that goes \
         on without them (docs/damage.md)"
    ))
}

#[async_trait]
impl LogReader for EmbeddedReader {
    /// Past an accepted lost range once the reader reached it.
    fn position(&self) -> Option<u64> {
        Some(self.next)
    }

    async fn next_batch(&mut self, records_max: usize, wait: Duration) -> Result<Vec<LogRecord>, LogError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let end = *self.end.borrow_and_update();
            if self.next < end {
                return self.read_until(end, records_max.max(1)).await;
            }
            match tokio::time::timeout_at(deadline, self.end.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return Err(LogError::Closed),
                Err(_) => return Ok(Vec::new()),
            }
        }
    }
}
