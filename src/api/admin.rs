//! Snapshot administration: `POST /v1/admin/snapshots` takes snapshots now
//! (of the partitions this node serves, optionally one namespace or
//! partition) and answers with what it wrote; `GET /v1/admin/snapshots`
//! lists the snapshots in the object store for every partition this node knows.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::body;
use crate::auth::Verb;
use crate::edge::{require_everywhere, ApiError, AppState, Caller};
use crate::node::snapshots::take_now;
use crate::snapshot::Snapshots;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    ns: Option<String>,
    partition: Option<u32>,
}

/// A create request body is a few fields.
const CREATE_BODY_BYTES_MAX: usize = 4 * 1024;

fn snapshots(state: &AppState) -> Result<&Snapshots, ApiError> {
    state.node.config.snapshots.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "snapshots_not_configured",
            "this node has no snapshot store; start it with --snapshots URL (tern dev uses file://<data-dir>/snapshots)",
        )
    })
}

/// `POST /v1/admin/snapshots` body `{"ns"?, "partition"?}`
pub(super) async fn create(State(state): State<AppState>, Caller(identity): Caller, body: Body) -> Result<Response, ApiError> {
    require_everywhere(&identity, Verb::Admin)?;
    let snapshots = snapshots(&state)?;
    let bytes = body::read(body, CREATE_BODY_BYTES_MAX, "invalid_request", "the snapshot request").await?;
    let request: CreateBody = if bytes.iter().all(u8::is_ascii_whitespace) { CreateBody::default() } else { body::json(&bytes)? };
    if let Some(ns) = &request.ns {
        let namespace = state.node.namespace(ns).ok_or_else(|| ApiError::unknown_namespace(ns))?;
        if let Some(p) = request.partition.filter(|p| *p >= namespace.partitions) {
            return Err(ApiError::bad_request("invalid_partition", format!("namespace {ns:?} has partitions 0..{}, not {p}", namespace.partitions)));
        }
    } else if request.partition.is_some() {
        return Err(ApiError::bad_request("invalid_request", "partition needs ns"));
    }
    let retain = state.node.config.snapshot_retain;
    let results = take_now(&state.node, snapshots, request.ns.as_deref(), request.partition, retain).await;
    let mut failed = false;
    let reports: Vec<serde_json::Value> = results
        .into_iter()
        .map(|(tp, result)| match result {
            Ok(r) => json!({
                "ns": &*tp.topic, "partition": tp.partition, "manifest": r.manifest, "applied_offset": r.applied_next as i64 - 1,
                "records": r.record_count, "chunks": r.chunks, "chunks_uploaded": r.chunks_uploaded,
                "bytes_uploaded": r.bytes_uploaded, "bytes_total": r.bytes_total,
            }),
            Err(e) => {
                failed = true;
                json!({ "ns": &*tp.topic, "partition": tp.partition, "error": e.to_string() })
            }
        })
        .collect();
    let status = if failed { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    Ok((status, Json(json!({ "snapshots": reports }))).into_response())
}

/// `GET /v1/admin/snapshots`
pub(super) async fn list(State(state): State<AppState>, Caller(identity): Caller) -> Result<Response, ApiError> {
    require_everywhere(&identity, Verb::Admin)?;
    let snapshots = snapshots(&state)?;
    let mut listed = Vec::new();
    for ns in state.node.namespaces() {
        for p in 0..ns.partitions {
            let manifests = snapshots
                .list(&ns.name, p)
                .await
                .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "snapshot_store_unavailable", e.to_string()))?;
            for (applied_next, path) in manifests {
                listed.push(json!({ "ns": &*ns.name, "partition": p, "applied_offset": applied_next as i64 - 1, "manifest": path.to_string() }));
            }
        }
    }
    Ok(Json(json!({ "snapshots": listed })).into_response())
}
