//! Reading a partition's past changes back from the log, for a watch
//! resuming from a position older than the ring.
//!
//! An entry's events are re-decoded from the log (the same pure `decode` the
//! apply loop used); an entry that decoded but did not apply (a failed
//! condition, a duplicate write id) is skipped because the apply loop
//! recorded it in the store as not applied. History is gone, and the watch must be
//! reset, when the log no longer starts at the requested offset or the
//! store's not-applied record does not reach back to it.

use std::sync::Arc;
use std::time::Duration;

use crate::apply::batch::WRITE_ID_WINDOW_OFFSETS;
use crate::fanout::event::{Event, Mark};
use crate::fanout::feed::Chunk;
use crate::log::{Log, LogError};
use crate::partition::PartitionHandle;

/// How long one read waits for the log before giving up on this chunk.
const LOG_READ_WAIT: Duration = Duration::from_secs(5);
/// Entries read per call (each up to 1,000 ops).
const LOG_ENTRIES_PER_READ: usize = 256;

#[derive(Debug, thiserror::Error)]
pub(crate) enum HistoryError {
    #[error("history gone: {0}")]
    Gone(String),
    #[error("the log is unavailable: {0}")]
    Unavailable(String),
    #[error("store: {0}")]
    Store(String),
}

/// The events of `[from, to)` (at most about `events_max`, cut at an entry
/// boundary), read from the log. `to` must not pass the applied offset.
pub(crate) async fn chunk_from_log(handle: &PartitionHandle, log: &dyn Log, from: Mark, to: u64, events_max: usize) -> Result<Chunk, HistoryError> {
    assert!(to <= handle.applied_next(), "history is read only below the applied offset");
    let store_error = |e: crate::store::StoreError| HistoryError::Store(e.to_string());
    let reader = handle.read_store().map_err(store_error)?;
    // The lowest offset this replica can replay from: what the log still
    // holds, what the not-applied record covers, and its window.
    let log_start = log.start_offset(&handle.tp).await.map_err(|e| HistoryError::Unavailable(e.to_string()))?;
    let window_start = handle.applied_next().saturating_sub(WRITE_ID_WINDOW_OFFSETS);
    let floor = log_start.max(reader.not_applied_from().map_err(store_error)?).max(window_start);
    if from.offset < floor {
        return Err(HistoryError::Gone(format!(
            "partition {} can replay from offset {floor}, the watch stands at {}",
            handle.partition, from.offset
        )));
    }
    // Procedures' record writes are not in the log (they are made at
    // apply): replaying it would miss them, so the watch gets the
    // current state instead (the ring, in memory, has them).
    if reader.has_procedures().map_err(store_error)? {
        return Err(HistoryError::Gone(format!(
            "partition {} runs procedures, whose record writes are not in the log: its history is replayed from memory only",
            handle.partition
        )));
    }
    let not_applied = reader.not_applied_in(from.offset, to).map_err(store_error)?;
    drop(reader);
    let mut reader = log.history_reader(&handle.tp, from.offset).await.map_err(gone_or_unavailable)?;
    let mut events: Vec<Arc<Event>> = Vec::new();
    let mut reached = from.offset;
    while reached < to && events.len() < events_max {
        let entries = reader.next_batch(LOG_ENTRIES_PER_READ, LOG_READ_WAIT).await.map_err(gone_or_unavailable)?;
        if entries.is_empty() {
            return Err(HistoryError::Unavailable(format!("no log entries at offset {reached} within {LOG_READ_WAIT:?}")));
        }
        for entry in entries {
            if entry.offset >= to || events.len() >= events_max {
                return Ok(Chunk { events, reached: reached.max(entry.offset.min(to)) });
            }
            reached = entry.offset + 1;
            if not_applied.contains(&entry.offset) {
                continue;
            }
            // A source topic's own records change no record: nothing to replay.
            if entry.foreign.is_some() {
                continue;
            }
            let Ok(mutation) = crate::codec::decode(entry.payload, handle.partition, handle.partitions) else { continue };
            events.extend(Event::of_mutation(handle.partition, entry.offset, &mutation).into_iter().filter(|e| !from.covers(e)));
        }
    }
    Ok(Chunk { events, reached: reached.min(to) })
}

fn gone_or_unavailable(e: LogError) -> HistoryError {
    match e {
        LogError::OffsetOutOfRange { .. } => HistoryError::Gone(e.to_string()),
        other => HistoryError::Unavailable(other.to_string()),
    }
}
