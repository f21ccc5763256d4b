//! `GET /v1/cluster`: every node this one knows (itself first), with the
//! partitions each serves and at which applied offset.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::AppState;

pub async fn show(State(state): State<AppState>) -> Response {
    let nodes: Vec<serde_json::Value> = state
        .cluster
        .members()
        .into_iter()
        .map(|m| {
            let partitions: Vec<serde_json::Value> = m
                .held
                .iter()
                .flat_map(|(ns, held)| {
                    held.iter().map(move |(p, applied_next)| {
                        json!({ "ns": ns, "partition": p, "applied_offset": *applied_next as i64 - 1 })
                    })
                })
                .collect();
            json!({
                "id": m.id,
                "region": m.region,
                "group": m.group,
                "address": m.api,
                "state": m.state,
                "self": m.is_self,
                "partitions": partitions,
            })
        })
        .collect();
    Json(json!({ "self": state.cluster.me().id, "nodes": nodes })).into_response()
}
