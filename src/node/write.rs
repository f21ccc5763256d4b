//! The write path: encode a mutation, append it to the partition's log, and —
//! when the caller needs the outcome (a condition, or `wait=applied`) — wait
//! for this node to apply it and report what the apply loop decided.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::Namespace;
use crate::partition::outcome::Outcome;
use crate::partition::PartitionStatus;
use crate::codec::{self, Mutation};
use crate::log::{Log, LogError};
use crate::metrics;
use crate::position::Position;

/// A durable write. Its position is `ns:partition:version+1`
/// (`api::render::write_ack` renders it without building a `Position`).
#[derive(Debug)]
pub struct WriteAck {
    /// The log offset of the mutation: the version of every record it wrote.
    pub version: u64,
    /// True when this was a retry of a write already applied (same write
    /// id): `version` is then the original's offset.
    pub duplicate: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the log did not accept the write: {0}")]
    Log(LogError),
    #[error("partition {partition} is not served by this node: {reason}")]
    Refused { partition: u32, reason: String },
    /// This node let the partition go before the write was appended: nothing
    /// was written; the caller may send it to a holder.
    #[error("partition {partition} is no longer held by this node")]
    NotHeld { partition: u32 },
    #[error("condition failed on op {op_index}")]
    ConditionFailed { op_index: usize, current_version: Option<u64>, position: Position },
    #[error("the write is durable at version {version} but was not applied here within {timeout_ms} ms")]
    NotApplied { version: u64, timeout_ms: u64, position: Position },
    #[error("the write at version {version} was rejected when applied: {reason}")]
    Rejected { version: u64, reason: String },
    #[error("the write at version {version} was applied but its outcome is no longer remembered")]
    OutcomeUnknown { version: u64 },
}


/// Whether the caller must learn what applying `mutation` decided: a
/// condition, `wait=applied`, or a write id (a retry learns the original's
/// version). Only a node that applies the partition can tell.
pub fn needs_outcome(mutation: &Mutation, wait_applied: bool) -> bool {
    wait_applied || !mutation.write_id.is_empty() || mutation.ops.iter().any(|op| op.condition.is_some())
}

pub async fn write(
    log: &dyn Log,
    namespace: &Namespace,
    partition: u32,
    mutation: &Mutation,
    wait_applied: bool,
    timeout: Duration,
) -> Result<WriteAck, WriteError> {
    let handle = namespace.handle(partition);
    if let PartitionStatus::Refused(reason) = handle.status() {
        return Err(WriteError::Refused { partition, reason });
    }
    debug_assert!(mutation.ops.iter().all(|op| matches!(op.kind, crate::codec::OpKind::Procedure(_)) || namespace.partition_of(&op.pk) == partition));
    let needs_outcome = needs_outcome(mutation, wait_applied);
    // A writer that waits for its outcome here keeps the partition here until it has it.
    let _pin = match needs_outcome {
        true => Some(handle.pin().ok_or(WriteError::NotHeld { partition })?),
        false => None,
    };
    let payload = Bytes::from(codec::encode(mutation));
    let started = Instant::now();
    let version = log.append(&handle.tp, payload).await.map_err(WriteError::Log)?;
    metrics::LOG_APPEND_SECONDS.observe(started.elapsed().as_secs_f64());
    let position = || Position::single(&namespace.name, partition, version + 1);
    // A write with an id may be a retry: only the apply loop knows its version.
    if !needs_outcome {
        return Ok(WriteAck { version, duplicate: false });
    }
    if !handle.wait_applied(version + 1, timeout).await {
        return Err(WriteError::NotApplied { version, timeout_ms: timeout.as_millis() as u64, position: position() });
    }
    match handle.outcome(version) {
        Some(Outcome::Applied) => Ok(WriteAck { version, duplicate: false }),
        Some(Outcome::ConditionFailed { op_index, current_version }) => {
            Err(WriteError::ConditionFailed { op_index, current_version, position: position() })
        }
        Some(Outcome::Duplicate { of, original }) => match *original {
            Outcome::ConditionFailed { op_index, current_version } => {
                Err(WriteError::ConditionFailed { op_index, current_version, position: position() })
            }
            _ => Ok(WriteAck { version: of, duplicate: true }),
        },
        Some(Outcome::Skipped(reason)) => Err(WriteError::Rejected { version, reason: reason.to_string() }),
        None => Err(WriteError::OutcomeUnknown { version }),
    }
}
