//! Namespace calls: create, list, describe (with per-partition state).

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::keys::NsName;
use super::{body, AppState};
use crate::partition::PartitionStatus;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    partitions: u32,
}

/// Bodies of namespace calls are tiny.
const NAMESPACE_BODY_BYTES_MAX: usize = 4096;

/// `PUT /v1/ns/{ns}`: 201 created, 200 same again, 409 different partition count.
pub async fn create(State(state): State<AppState>, NsName(ns): NsName, body: Body) -> Result<Response, ApiError> {
    let bytes = body::read(body, NAMESPACE_BODY_BYTES_MAX, "body_too_large", "the namespace body").await?;
    let request: CreateBody = body::json(&bytes)?;
    let created = state.node.create_namespace(&ns, request.partitions).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(json!({ "name": ns, "partitions": request.partitions, "created": created }))).into_response())
}

/// `GET /v1/ns`
pub async fn list(State(state): State<AppState>) -> Response {
    let namespaces: Vec<_> =
        state.node.namespaces().iter().map(|n| json!({ "name": &*n.name, "partitions": n.partitions })).collect();
    Json(json!({ "namespaces": namespaces })).into_response()
}

/// `GET /v1/ns/{ns}`: the namespace as this node sees it.
pub async fn describe(State(state): State<AppState>, NsName(ns): NsName) -> Result<Response, ApiError> {
    let namespace = state.node.namespace(&ns).ok_or_else(|| ApiError::unknown_namespace(&ns))?;
    let mut partitions = Vec::with_capacity(namespace.handles.len());
    for handle in &namespace.handles {
        let store_state = handle.read_view()?.reader.state()?;
        let log_end = state.node.log.end_offset(&handle.tp).await.ok();
        let (status, reason) = match handle.status() {
            PartitionStatus::Serving => ("serving", None),
            PartitionStatus::CatchingUp => ("catching_up", None),
            PartitionStatus::Refused(reason) => ("refused", Some(reason)),
            PartitionStatus::NotHeld => ("not_held", None),
        };
        partitions.push(json!({
            "partition": handle.partition,
            "held": handle.is_held(),
            "applied_offset": store_state.applied_next as i64 - 1,
            "log_end_offset": log_end,
            "lag": log_end.map(|end| end.saturating_sub(store_state.applied_next)),
            "state_hash": store_state.state_hash.to_hex(),
            "status": status,
            "reason": reason,
            "records": store_state.record_count,
            "applied_entries": store_state.applied_entries,
            "skipped_entries": store_state.skipped_entries,
        }));
    }
    Ok(Json(json!({ "name": &*namespace.name, "partitions": namespace.partitions, "state": partitions })).into_response())
}
