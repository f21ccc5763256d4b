//! `GET /v1/cluster`: every node this one knows (itself first), with the
//! partitions each serves and at which applied offset, and the partitions
//! each refuses (with the reason, for this node).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::access::{require_everywhere, Caller};
use super::AppState;
use crate::auth::Verb;

pub async fn show(State(state): State<AppState>, Caller(identity): Caller) -> Response {
    if let Err(e) = require_everywhere(&identity, Verb::Admin) {
        return e.into_response();
    }
    let nodes: Vec<serde_json::Value> = state
        .cluster
        .members()
        .into_iter()
        .map(|m| {
            let (partitions, handing_off) = (offsets_json(&m.held), offsets_json(&m.handing_off));
            let refused: Vec<serde_json::Value> = m
                .refused
                .iter()
                .flat_map(|(ns, refused)| {
                    refused.iter().map(move |(p, reason)| json!({ "ns": ns, "partition": p, "reason": reason }))
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
                "handing_off": handing_off,
                "refused": refused,
            })
        })
        .collect();
    Json(json!({ "self": state.cluster.me().id, "nodes": nodes })).into_response()
}

/// `[{ns, partition, applied_offset}]` of a namespace -> partition -> applied_next map.
fn offsets_json(partitions: &std::collections::BTreeMap<String, std::collections::BTreeMap<u32, u64>>) -> Vec<serde_json::Value> {
    partitions
        .iter()
        .flat_map(|(ns, held)| {
            held.iter().map(move |(p, applied_next)| json!({ "ns": ns, "partition": p, "applied_offset": *applied_next as i64 - 1 }))
        })
        .collect()
}
