//! `GET /v1/ns/{ns}/history?pk=P&sk=S`: a record's last versions, newest
//! first, each with the position that made it, the writer's clock and the
//! writer (`store::history`). The namespace's `history_max` says how many
//! each replica keeps (0, the default: none).
//!
//! The keys travel in the query, not the path, so every key can be asked
//! for (a path segment `.` or `..` is resolved away by URL parsers).

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};

use super::keys::{namespace, NsName};
use super::params::Params;
use super::records::{partition_param, reads_here};
use crate::auth::Verb;
use crate::edge::{require, to_holder, ApiError, AppState, Caller, Incoming};
use crate::limits;
use crate::limits::HISTORY_MAX_MAX;
use crate::node::read::{await_consistency, check_position};
use crate::position::Position;

/// `GET /v1/ns/{ns}/history`: `pk` (required), `sk` (default ""),
/// `limit` (1 to 64, default: all kept), `partition`, `after`,
/// `consistency`, `timeout_ms`.
pub(super) async fn history(
    State(state): State<AppState>,
    Caller(identity): Caller,
    NsName(ns): NsName,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = Params::parse(query.as_deref(), &["pk", "sk", "limit", "partition", "after", "consistency", "timeout_ms"])?;
    let pk = params.str("pk").ok_or_else(|| ApiError::bad_request("invalid_parameter", "pk is required: ?pk=P[&sk=S]"))?.to_string();
    let sk = params.str("sk").unwrap_or_default().to_string();
    limits::check_pk(&pk)?;
    limits::check_sk(&sk)?;
    let limit = match params.u64("limit")? {
        None => HISTORY_MAX_MAX,
        Some(n) if (1..=u64::from(HISTORY_MAX_MAX)).contains(&n) => n as u32,
        Some(n) => return Err(ApiError::bad_request("invalid_parameter", format!("limit is 1 to {HISTORY_MAX_MAX} versions, got {n}"))),
    };
    require(&identity, &ns, &pk, Verb::Read)?;
    let namespace = namespace(&state, &ns)?;
    let incoming = Incoming::new(axum::http::Method::GET, &uri, &headers).by(&identity);
    let partition = partition_param(&namespace, params.str("partition"))?.unwrap_or_else(|| namespace.partition_of(&pk));
    if !reads_here(&state, &incoming, &namespace, partition) {
        return to_holder(&state, &incoming, &namespace.name, partition, Bytes::new()).await;
    }
    let consistency = params.consistency()?;
    check_position(&namespace, &consistency, &[partition], incoming.forwarded_by.is_some())?;
    await_consistency(&state.node, &namespace, &[partition], &consistency, params.timeout()?).await?;
    let handle = namespace.handle(partition);
    // The read view first: it refuses a partition that may not serve reads
    // (rebuilding, failing), and says what this answer reflects at least.
    let applied_next = handle.read_view()?.applied_next;
    let history_max = state.node.namespace_options(&namespace).await.history_max;
    let versions = handle.store().history(&pk, &sk, history_max.min(limit))?;
    let mut answer_bytes = 0_usize;
    let mut rendered = Vec::with_capacity(versions.len());
    for version in &versions {
        answer_bytes += version.value.as_ref().map_or(0, Vec::len) + version.writer.len();
        if answer_bytes > limits::ANSWER_BYTES_MAX && !rendered.is_empty() {
            break;
        }
        rendered.push(render(&namespace.name, partition, version)?);
    }
    let body = json!({
        "pk": pk,
        "sk": sk,
        "history_max": history_max,
        "versions": rendered,
        "position": Position::single_string(&namespace.name, partition, applied_next),
    });
    Ok(Json(body).into_response())
}

/// One version: `{"version", "position", "op", "value", "time_ms", "writer"}`.
fn render(ns: &str, partition: u32, version: &crate::store::HistoryEntry) -> Result<Value, ApiError> {
    let value = match &version.value {
        Some(bytes) => serde_json::from_slice::<Value>(bytes)
            .map_err(|e| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("a stored version is not JSON: {e}")))?,
        None => Value::Null,
    };
    Ok(json!({
        "version": version.offset,
        "position": Position::single_string(ns, partition, version.offset + 1),
        "op": if version.value.is_some() { "put" } else { "delete" },
        "value": value,
        "time_ms": version.time_ms,
        "writer": version.writer,
    }))
}
