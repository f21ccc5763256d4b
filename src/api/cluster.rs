//! `GET /v1/cluster`: every node this one knows (itself first), with the
//! partitions each serves and at which applied offset, and the partitions
//! each refuses (with the reason, for this node); the round trips (this
//! node's to each peer, and each node's own table, gossiped); and `routes`:
//! for every partition of every namespace this node knows, the node a
//! request for it is served by (this one, or the holder it would forward to).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::auth::Verb;
use crate::edge::{require_everywhere, AppState, Caller};

pub(super) async fn show(State(state): State<AppState>, Caller(identity): Caller) -> Response {
    if let Err(e) = require_everywhere(&identity, Verb::Admin) {
        return e.into_response();
    }
    let cluster = &state.cluster;
    let nodes: Vec<serde_json::Value> = cluster
        .members()
        .into_iter()
        .map(|m| {
            let rtt_ms = cluster.rtt(&m.id).map(|rtt| json!(rtt.ms()));
            let measured: serde_json::Map<String, serde_json::Value> = m.rtt.iter().map(|(peer, rtt)| (peer.clone(), json!(rtt.ms()))).collect();
            let (partitions, handing_off) = (offsets_json(&m.held), offsets_json(&m.handing_off));
            let refused: Vec<serde_json::Value> = m
                .refused
                .iter()
                .flat_map(|(ns, refused)| refused.iter().map(move |(p, reason)| json!({ "ns": ns, "partition": p, "reason": reason })))
                .collect();
            json!({
                "id": m.id,
                "region": m.region,
                "group": m.group,
                "address": m.api,
                "state": m.state,
                "self": m.is_self,
                "rtt_ms": rtt_ms,
                "reachable": !matches!(cluster.rtt(&m.id), Some(crate::cluster::Rtt::Unreachable)),
                "measured_rtt_ms": measured,
                "partitions": partitions,
                "handing_off": handing_off,
                "refused": refused,
            })
        })
        .collect();
    Json(json!({ "self": cluster.me().id, "region": cluster.me().region, "nodes": nodes, "routes": routes(&state) })).into_response()
}

/// For each partition of each namespace this node knows: who serves a
/// request for it from here (`local`: this node; else the first of
/// `Cluster::holders`, or null when no holder is known).
fn routes(state: &AppState) -> Vec<serde_json::Value> {
    let (cluster, me) = (&state.cluster, state.cluster.me());
    let mut routes = Vec::new();
    for namespace in state.node.namespaces() {
        for handle in &namespace.handles {
            let route = match handle.is_held() {
                true => {
                    json!({ "ns": &*namespace.name, "partition": handle.partition, "holder": me.id, "region": me.region, "local": true, "rtt_ms": null })
                }
                false => match cluster.holders(&namespace.name, handle.partition).first() {
                    Some(holder) => json!({
                        "ns": &*namespace.name, "partition": handle.partition, "holder": holder.id, "region": holder.region,
                        "local": false, "rtt_ms": cluster.rtt(&holder.id).and_then(|rtt| rtt.ms()),
                    }),
                    None => {
                        json!({ "ns": &*namespace.name, "partition": handle.partition, "holder": null, "region": null, "local": false, "rtt_ms": null })
                    }
                },
            };
            routes.push(route);
        }
    }
    routes
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
