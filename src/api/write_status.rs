//! `GET /v1/writes/{id}`: what became of a write with this write id (its
//! `Idempotency-Key`, or the id a journaled write was answered with).
//!
//! - `journaled`: durable in this node's journal, not yet applied;
//! - `applied`: applied at `version` (its `position` follows it), with its
//!   `outcome` — `applied`, or `condition_failed` with the op and the
//!   version it met (a conditional journaled write learns its fate here);
//! - `unknown`: neither in this node's journal nor remembered by a
//!   partition this node applies (never written, written elsewhere and not
//!   applied here, or older than the write-id window).
//!
//! Answered from this node alone: its journal and the stores of the
//! partitions it applies.
//!
//! A caller sees only its own writes: an `Idempotency-Key` is looked up
//! scoped to the caller, as it was written (`edge::scoped_write_id`), and a
//! write id the journal made is told only to a caller that may read the
//! namespace it went to. Anything else is `unknown`, as a write never made.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Verb;
use crate::edge::{scoped_write_id, ApiError, AppState, Caller};
use crate::partition::outcome::Outcome;

pub(super) async fn status(State(state): State<AppState>, Caller(identity): Caller, Path(id): Path<String>) -> Result<Response, ApiError> {
    if id.is_empty() || id.len() > crate::limits::WRITE_ID_BYTES_MAX {
        return Err(ApiError::bad_request(
            "invalid_write_id",
            format!("a write id is 1 to {} bytes, got {}", crate::limits::WRITE_ID_BYTES_MAX, id.len()),
        ));
    }
    let principal = identity.principal();
    let scoped = scoped_write_id(principal.as_deref(), Some(id.as_bytes())).map_err(|e| ApiError::bad_request("invalid_write_id", e))?;
    // The ids this caller may ask about: its own key, and a journal-made id as given.
    let candidates: Vec<&[u8]> = match scoped.as_ref() == id.as_bytes() {
        true => vec![id.as_bytes()],
        false => vec![scoped.as_ref(), id.as_bytes()],
    };
    let may_read = |ns: &str| identity.allows_anywhere(ns, Verb::Read).is_ok();
    // Applied first: an entry stays in the journal a moment after it applied.
    for namespace in state.node.namespaces() {
        if !may_read(&namespace.name) {
            continue;
        }
        for (partition, handle) in namespace.handles.iter().enumerate() {
            if !handle.is_held() {
                continue;
            }
            let view = handle.read_view()?;
            let mut seen = None;
            for candidate in &candidates {
                if let Some(found) = view.reader.write_id_seen(candidate)? {
                    seen = Some(last_attempt(&view.reader, candidate, found)?);
                    break;
                }
            }
            if let Some((version, outcome)) = seen {
                let position = crate::position::Position::single_string(&namespace.name, partition as u32, version + 1);
                let mut body = json!({
                    "write_id": id, "state": "applied", "ns": &*namespace.name, "partition": partition,
                    "version": version, "position": position,
                });
                body["outcome"] = outcome_json(Outcome::decode_remembered(&outcome));
                return Ok(Json(body).into_response());
            }
        }
    }
    let journaled = candidates.iter().find_map(|candidate| state.node.journal.find(candidate)).filter(|(ns, _, _)| may_read(ns));
    let body = match journaled {
        Some((ns, partition, _)) => json!({ "write_id": id, "state": "journaled", "ns": ns, "partition": partition }),
        None => json!({ "write_id": id, "state": "unknown" }),
    };
    Ok(Json(body).into_response())
}

/// A request made in several attempts (a Firebase write whose rules'
/// reads changed: `node::attempt_ids`) is told by its last remembered
/// attempt: the one that applied, or the last that met changed data.
fn last_attempt(reader: &crate::store::StoreReader, write_id: &[u8], first: (u64, Vec<u8>)) -> Result<(u64, Vec<u8>), crate::store::StoreError> {
    let reads_changed = |stored: &[u8]| {
        matches!(Outcome::decode_remembered(stored), Some(Outcome::ConditionFailed { op_index: crate::partition::outcome::READS_CHANGED, .. }))
    };
    let mut last = first;
    let id = bytes::Bytes::copy_from_slice(write_id);
    for attempt in 1..crate::node::attempt_ids::ATTEMPT_IDS_MAX {
        if !reads_changed(&last.1) {
            break;
        }
        match reader.write_id_seen(&crate::node::attempt_ids::attempt_write_id(&id, attempt))? {
            Some(found) => last = found,
            None => break,
        }
    }
    Ok(last)
}

fn outcome_json(outcome: Option<Outcome>) -> Value {
    match outcome {
        Some(Outcome::ConditionFailed { op_index: crate::partition::outcome::READS_CHANGED, .. }) => {
            json!({ "result": "condition_failed", "reads_changed": true })
        }
        Some(Outcome::ConditionFailed { op_index, current_version }) => {
            json!({ "result": "condition_failed", "op_index": op_index, "current_version": current_version })
        }
        Some(_) => json!({ "result": "applied" }),
        None => json!({ "result": "unknown" }),
    }
}
