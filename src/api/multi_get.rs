//! Multi-get: `POST /v1/ns/{ns}/get` `{"keys": [{"pk","sk"}...]}`, items in
//! request order; keys of partitions held elsewhere are asked of their
//! holders, one multi-get per holder, and merged (positions too).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::body;
use super::keys::namespace;
use super::keys::NsName;
use super::params::Params;
use super::render;
use super::render::json_response;
use crate::auth::Verb;
use crate::cluster::Member;
use crate::edge::{no_holder, not_held, require, require_anywhere, send, ApiError, AppState, Caller, Incoming};
use crate::limits;
use crate::node::read::{await_consistency, check_position};

/// A multi-get body: 1,000 keys of up to 2 KiB each, plus framing.
const MULTI_GET_BODY_BYTES_MAX: usize = limits::MULTI_GET_KEYS_MAX * 2 * 1024 + 64 * 1024;
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MultiGetBody {
    keys: Vec<KeyBody>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyBody {
    pk: String,
    #[serde(default)]
    sk: String,
}

/// `POST /v1/ns/{ns}/get`
pub(super) async fn multi_get(
    State(state): State<AppState>,
    Caller(identity): Caller,
    NsName(ns): NsName,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    require_anywhere(&identity, &ns, Verb::Read)?;
    let namespace = namespace(&state, &ns)?;
    let params = Params::parse(query.as_deref(), &["after", "consistency", "timeout_ms"])?;
    let bytes = body::read(body, MULTI_GET_BODY_BYTES_MAX, "too_many_keys", "the multi-get body").await?;
    let request: MultiGetBody = body::json(&bytes)?;
    if request.keys.len() > limits::MULTI_GET_KEYS_MAX {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_keys",
            format!("{} keys requested; a multi-get takes at most {}", request.keys.len(), limits::MULTI_GET_KEYS_MAX),
        ));
    }
    for key in &request.keys {
        limits::check_pk(&key.pk)?;
        limits::check_sk(&key.sk)?;
        require(&identity, &ns, &key.pk, Verb::Read)?;
    }
    // Each distinct key is read, rendered and asked of a holder once; the
    // answer repeats it where the request does (`order`).
    let (request, order) = distinct_keys(request.keys);
    let copies = copies_of(&order, request.keys.len());
    let mut partitions: Vec<u32> = request.keys.iter().map(|k| namespace.partition_of(&k.pk)).collect();
    partitions.sort_unstable();
    partitions.dedup();
    let consistency = params.consistency()?;
    let forwarded = headers.contains_key(crate::cluster::peer_client::FORWARDED_BY);
    check_position(&namespace, &consistency, &partitions, forwarded)?;
    let (local, remote): (Vec<u32>, Vec<u32>) = partitions.iter().partition(|p| namespace.handle(**p).is_held());
    // Each item rendered as JSON text: remote ones as the holder sent them.
    let mut items: Vec<Option<Vec<u8>>> = vec![None; request.keys.len()];
    let mut offsets = std::collections::BTreeMap::new();
    if !remote.is_empty() {
        let incoming = Incoming::new(axum::http::Method::POST, &uri, &headers);
        let keys: Vec<(&str, &str)> = request.keys.iter().map(|k| (k.pk.as_str(), k.sk.as_str())).collect();
        let key_partitions: Vec<u32> = request.keys.iter().map(|k| namespace.partition_of(&k.pk)).collect();
        let fetched = multi_get_remote(&state, &incoming, &namespace.name, &remote, &keys, &key_partitions, &mut items, &mut offsets).await;
        if let Err(response) = fetched {
            return Ok(response);
        }
        check_answer_bytes(&items, &copies)?;
    }
    await_consistency(&state.node, &namespace, &local, &consistency, params.timeout()?).await?;
    let mut readers = std::collections::HashMap::with_capacity(local.len());
    for &p in &local {
        let view = namespace.handle(p).read_view()?;
        offsets.insert(p, view.applied_next);
        readers.insert(p, view);
    }
    let mut answer_bytes = answer_bytes_of(&items, &copies);
    for ((key, item), n) in request.keys.iter().zip(items.iter_mut()).zip(&copies) {
        if let Some(view) = readers.get(&namespace.partition_of(&key.pk)) {
            *item = view.reader.get(&key.pk, &key.sk)?.map(|record| {
                let mut out = Vec::with_capacity(record.value.len() + 64);
                render::record(&mut out, &record);
                out
            });
            answer_bytes += item.as_ref().map_or(0, Vec::len) * n;
            if answer_bytes > limits::ANSWER_BYTES_MAX {
                return Err(answer_too_large(answer_bytes));
            }
        }
    }
    let position = if offsets.is_empty() {
        serde_json::Value::Null
    } else {
        json!(crate::position::Position { namespace: namespace.name.to_string(), offsets }.to_string())
    };
    let ordered: Vec<Option<&[u8]>> = order.iter().map(|&d| items[d].as_deref()).collect();
    Ok(json_response(StatusCode::OK, render::rendered_items(&ordered, &[("position", position)])))
}

/// The distinct keys of a request, in first-seen order, and for each key
/// asked for the index of its distinct key.
fn distinct_keys(keys: Vec<KeyBody>) -> (MultiGetBody, Vec<usize>) {
    let mut first: std::collections::HashMap<(String, String), usize> = std::collections::HashMap::with_capacity(keys.len());
    let mut distinct = Vec::with_capacity(keys.len());
    let mut order = Vec::with_capacity(keys.len());
    for key in keys {
        let next = distinct.len();
        let index = *first.entry((key.pk.clone(), key.sk.clone())).or_insert(next);
        if index == next {
            distinct.push(key);
        }
        order.push(index);
    }
    (MultiGetBody { keys: distinct }, order)
}

/// How many times the answer holds each distinct key.
fn copies_of(order: &[usize], distinct: usize) -> Vec<usize> {
    let mut copies = vec![0; distinct];
    for &d in order {
        copies[d] += 1;
    }
    copies
}

/// Bytes of the rendered items, each as often as the answer holds it.
fn answer_bytes_of(items: &[Option<Vec<u8>>], copies: &[usize]) -> usize {
    items.iter().zip(copies).map(|(item, n)| item.as_ref().map_or(0, Vec::len) * n).sum()
}

/// 413 once the items (each as often as asked) pass the answer bound.
fn check_answer_bytes(items: &[Option<Vec<u8>>], copies: &[usize]) -> Result<(), ApiError> {
    let bytes = answer_bytes_of(items, copies);
    match bytes > limits::ANSWER_BYTES_MAX {
        true => Err(answer_too_large(bytes)),
        false => Ok(()),
    }
}

fn answer_too_large(bytes: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "answer_too_large",
        format!(
            "the records asked for hold more than {} bytes (at least {bytes}), the most one answer holds; ask for fewer keys per request",
            limits::ANSWER_BYTES_MAX
        ),
    )
}

/// The answer of a holder to a forwarded multi-get.
#[derive(serde::Deserialize)]
struct RemoteItems {
    items: Vec<Box<serde_json::value::RawValue>>,
    position: Option<String>,
}

/// A multi-get's keys of partitions this node does not hold, sent as one
/// multi-get per holder (concurrently). Fills `items[i]` (rendered JSON,
/// `None` for null) for those keys and adds the holders' offsets of their
/// partitions to `offsets`. Any holder's error is the whole request's answer
/// (`Err`, relayed as the holder sent it).
#[allow(clippy::too_many_arguments)]
async fn multi_get_remote(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &str,
    remote: &[u32],
    keys: &[(&str, &str)],
    key_partitions: &[u32],
    items: &mut [Option<Vec<u8>>],
    offsets: &mut std::collections::BTreeMap<u32, u64>,
) -> Result<(), Response> {
    if let Some(from) = incoming.forwarded_by {
        return Err(not_held(state, namespace, remote[0], from).into_response());
    }
    // Holder id -> (holder, indexes of the keys it answers).
    let mut by_holder: std::collections::BTreeMap<String, (Arc<Member>, Vec<usize>)> = std::collections::BTreeMap::new();
    for &p in remote {
        let Some(holder) = state.cluster.holders(namespace, p).into_iter().next() else {
            return Err(no_holder(state, namespace, p).into_response());
        };
        let indexes: Vec<usize> = (0..keys.len()).filter(|&i| key_partitions[i] == p).collect();
        by_holder.entry(holder.id.clone()).or_insert_with(|| (holder, Vec::new())).1.extend(indexes);
    }
    let requests = by_holder.into_values().map(|(holder, indexes)| async move {
        let body = serde_json::json!({ "keys": indexes.iter().map(|&i| serde_json::json!({"pk": keys[i].0, "sk": keys[i].1})).collect::<Vec<_>>() });
        let sub = Incoming {
            method: Method::POST,
            path_and_query: incoming.path_and_query,
            forwarded_by: None,
            idempotency_key: None,
            headers: incoming.headers,
            principal: None,
        };
        let response = send(state, &holder, &sub, Bytes::from(serde_json::to_vec(&body).expect("JSON serializes"))).await;
        (holder, indexes, response)
    });
    for (holder, indexes, response) in futures::future::join_all(requests).await {
        let holder_error = |message: String| ApiError::new(StatusCode::BAD_GATEWAY, "holder_error", message).into_response();
        let response = response.map_err(|e| {
            crate::metrics::FORWARD_FAILURES.inc();
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "holder_unreachable",
                format!("multi-get: forwarding keys of namespace {namespace:?} to {} ({}) failed: {e}; retry", holder.id, holder.api),
            )
            .into_response()
        })?;
        if response.status() != StatusCode::OK {
            return Err(response);
        }
        let body =
            axum::body::to_bytes(response.into_body(), usize::MAX).await.map_err(|e| holder_error(format!("reading {}'s answer: {e}", holder.id)))?;
        let answer: RemoteItems =
            serde_json::from_slice(&body).map_err(|e| holder_error(format!("{} answered a multi-get with unexpected JSON: {e}", holder.id)))?;
        if answer.items.len() != indexes.len() {
            return Err(holder_error(format!("{} answered {} items for {} keys", holder.id, answer.items.len(), indexes.len())));
        }
        for (&i, item) in indexes.iter().zip(answer.items) {
            items[i] = (item.get() != "null").then(|| item.get().as_bytes().to_vec());
        }
        if let Some(position) = answer.position.as_deref().and_then(|p| crate::position::Position::parse(p).ok()) {
            offsets.extend(position.offsets);
        }
    }
    Ok(())
}
