//! Record calls: put, get, delete, list, multi-get, batch.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::access::{require, require_anywhere, Caller};
use super::error::ApiError;
use super::params::Params;
use super::keys::NsName;
use super::forward::{self, Incoming};
use super::{body, keys, render, AppState};
use crate::auth::{Identity, Verb};
use crate::codec::{Condition, Mutation, Op, OpKind};
use crate::limits;
use crate::node::read::{await_consistency, Consistency};
use crate::node::reserved::Writer;
use crate::node::write::{Durability, Entry, Receipt, Wait, WriteRequest};
use crate::partition::{Namespace, PartitionStatus};
use crate::store::{Record, SkRange};

/// Slack above 4 MiB of keys and values for the JSON framing of a batch body.
const BATCH_BODY_BYTES_MAX: usize = limits::MUTATION_BYTES_MAX + 1024 * 1024;
/// A multi-get body: 1,000 keys of up to 2 KiB each, plus framing.
const MULTI_GET_BODY_BYTES_MAX: usize = limits::MULTI_GET_KEYS_MAX * 2 * 1024 + 64 * 1024;

fn namespace(state: &AppState, ns: &str) -> Result<Arc<Namespace>, ApiError> {
    state.node.namespace(ns).ok_or_else(|| ApiError::unknown_namespace(ns))
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The one rule for conditions, from query parameters or batch ops:
/// at most one of `if_version` and `if_absent`. `code` names the error.
fn condition_of(if_version: Option<u64>, if_absent: bool, code: &'static str) -> Result<Option<Condition>, ApiError> {
    match (if_version, if_absent) {
        (Some(_), true) => Err(ApiError::bad_request(code, "use if_version or if_absent, not both")),
        (Some(v), false) => Ok(Some(Condition::IfVersion(v))),
        (None, true) => Ok(Some(Condition::IfAbsent)),
        (None, false) => Ok(None),
    }
}

fn condition(params: &Params) -> Result<Option<Condition>, ApiError> {
    condition_of(params.u64("if_version")?, params.bool("if_absent")?, "invalid_parameter")
}

/// `PUT|GET|DELETE /v1/ns/{ns}/kv/{pk}[/{sk}]`
pub async fn kv(
    State(state): State<AppState>,
    Caller(identity): Caller,
    NsName(ns): NsName,
    method: axum::http::Method,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    let key = keys::parse(uri.path())?;
    let verb = if method == axum::http::Method::GET { Verb::Read } else { Verb::Write };
    require(&identity, &ns, &key.pk, verb)?;
    let namespace = namespace(&state, &ns)?;
    let incoming = Incoming::new(method.clone(), &uri, &headers);
    let query = query.as_deref();
    match method {
        axum::http::Method::GET => match key.sk {
            Some(sk) => get(&state, &incoming, &namespace, key.pk, sk, query).await,
            None => list(&state, &incoming, &namespace, key.pk, query).await,
        },
        axum::http::Method::PUT => put(&state, &incoming, &namespace, key.pk, key.sk.unwrap_or_default(), query, body).await,
        axum::http::Method::DELETE => delete(&state, &incoming, &namespace, key.pk, key.sk.unwrap_or_default(), query).await,
        other => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{other} is not supported on records; use GET, PUT or DELETE"),
        )),
    }
}

/// Whether this node answers a read of `partition` itself: it holds it, and
/// either serves it caught up or no other member is advertised serving it.
/// During a hand-off the new owner catches up while the old one still
/// serves: the old one's answers are current, a store still replaying is not.
fn reads_here(state: &AppState, incoming: &Incoming<'_>, namespace: &Namespace, partition: u32) -> bool {
    let handle = namespace.handle(partition);
    match handle.status() {
        PartitionStatus::CatchingUp => {
            incoming.forwarded_by.is_some() || state.cluster.holders(&namespace.name, partition).is_empty()
        }
        _ => handle.is_held(),
    }
}

/// The hot paths: a plain `GET` or `PUT /v1/ns/{ns}/kv/{pk}/{sk}` (no query
/// string), answered before the generic router and extractors run. Gives the
/// request back when the path is not exactly that shape, so the router
/// handles it (and any error).
pub async fn fast_path(state: &AppState, identity: &Identity, request: axum::extract::Request) -> Result<Response, axum::extract::Request> {
    let Some((namespace, pk, sk)) = fast_key(state, request.uri().path()) else { return Err(request) };
    let (parts, body) = request.into_parts();
    let verb = if parts.method == axum::http::Method::GET { Verb::Read } else { Verb::Write };
    if let Err(e) = require(identity, &namespace.name, &pk, verb) {
        return Ok(e.into_response());
    }
    let incoming = Incoming::new(parts.method.clone(), &parts.uri, &parts.headers);
    let response = match parts.method {
        axum::http::Method::GET => get(state, &incoming, &namespace, pk, sk, None).await,
        axum::http::Method::PUT => put(state, &incoming, &namespace, pk, sk, None, body).await,
        _ => return Err(axum::extract::Request::from_parts(parts, body)),
    };
    Ok(response.unwrap_or_else(IntoResponse::into_response))
}

/// `(namespace, pk, sk)` of a well-formed `/v1/ns/{ns}/kv/{pk}/{sk}` path of an existing namespace.
fn fast_key(state: &AppState, path: &str) -> Option<(Arc<Namespace>, String, String)> {
    let rest = path.strip_prefix("/v1/ns/")?;
    let (ns, rest) = rest.split_once('/')?;
    let keys = rest.strip_prefix("kv/")?;
    let (pk, sk) = keys.split_once('/')?;
    if ns.contains('%') || pk.is_empty() || sk.contains('/') {
        return None;
    }
    let key = keys::parse(path).ok()?;
    let namespace = state.node.namespace(ns)?;
    Some((namespace, key.pk, key.sk.unwrap_or_default()))
}

async fn get(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &Namespace,
    pk: String,
    sk: String,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let params = query.map(|q| Params::parse(Some(q), &["after", "consistency", "timeout_ms", "partition"])).transpose()?;
    let partition = partition_param(namespace, params.as_ref().and_then(|p| p.str("partition")))?.unwrap_or_else(|| namespace.partition_of(&pk));
    if !reads_here(state, incoming, namespace, partition) {
        return forward::to_holder(state, incoming, &namespace.name, partition, Bytes::new()).await;
    }
    if let Some(params) = &params {
        let consistency = params.consistency()?;
        await_consistency(&state.node, namespace, &[partition], &consistency, params.timeout()?).await?;
    } else {
        await_consistency(&state.node, namespace, &[partition], &Consistency::Local, Default::default()).await?;
    }
    let view = namespace.handle(partition).read_view()?;
    let applied_next = view.applied_next;
    let mut body = None;
    view.reader.get_with(&pk, &sk, |version, value| {
        body = Some(render::get_response(&pk, &sk, version, value, &namespace.name, partition, applied_next));
    })?;
    let staleness = staleness_header(namespace, partition);
    match body {
        Some(body) => {
            let mut response = json_response(StatusCode::OK, body);
            response.headers_mut().extend(staleness);
            Ok(response)
        }
        None => {
            let position = crate::position::Position::single_string(&namespace.name, partition, applied_next);
            Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no record at pk {pk:?} sk {sk:?}"))
                .with("position", position))
        }
    }
}

/// `?partition=P`: read partition P whatever the pk hashes to. A record a
/// procedure wrote lives in the partition the procedure ran in
/// (docs/procedures.md).
fn partition_param(namespace: &Namespace, text: Option<&str>) -> Result<Option<u32>, ApiError> {
    let Some(text) = text else { return Ok(None) };
    let partition = text.parse::<u32>().ok().filter(|p| *p < namespace.partitions);
    partition.map(Some).ok_or_else(|| ApiError::bad_request("invalid_request", format!("partition is 0 to {}, got {text:?}", namespace.partitions - 1)))
}

/// `x-tern-staleness-ms`: how stale this replica's answer may be at most
/// (`partition::freshness`); absent until the replica was once known current.
fn staleness_header(namespace: &Namespace, partition: u32) -> Option<(axum::http::HeaderName, axum::http::HeaderValue)> {
    let staleness = namespace.handle(partition).staleness()?;
    Some((axum::http::HeaderName::from_static(STALENESS_HEADER), axum::http::HeaderValue::from(staleness.as_millis() as u64)))
}

/// The header of a local read that says how stale it may be, in milliseconds.
pub const STALENESS_HEADER: &str = "x-tern-staleness-ms";

async fn put(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &Namespace,
    pk: String,
    sk: String,
    query: Option<&str>,
    body: Body,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["if_version", "if_absent", "wait", "timeout_ms", "durability"])?;
    let condition = condition(&params)?;
    let bytes = body::read(body, limits::VALUE_BYTES_MAX + 4096, "value_too_large", "the value").await?;
    let value = body::json_value(bytes.clone())?;
    limits::check_value_len(value.len())?;
    let op = Op { pk, sk, kind: OpKind::Put(value), condition };
    write_one(state, incoming, namespace, op, &params, bytes).await
}

async fn delete(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &Namespace,
    pk: String,
    sk: String,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["if_version", "if_absent", "wait", "timeout_ms", "durability"])?;
    let op = Op { pk, sk, kind: OpKind::Delete, condition: condition(&params)? };
    write_one(state, incoming, namespace, op, &params, Bytes::new()).await
}

/// The write id of a request: its `Idempotency-Key` (a retry with the same
/// key within the window is applied once), or none.
fn write_id(incoming: &Incoming<'_>) -> Result<Bytes, ApiError> {
    let Some(key) = incoming.idempotency_key else { return Ok(Bytes::new()) };
    if key.is_empty() || key.len() > limits::WRITE_ID_BYTES_MAX || !key.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(ApiError::bad_request(
            "invalid_idempotency_key",
            format!(
                "Idempotency-Key must be 1 to {} visible ASCII characters (no spaces), got {} bytes",
                limits::WRITE_ID_BYTES_MAX,
                key.len()
            ),
        ));
    }
    Ok(Bytes::copy_from_slice(key))
}

async fn write_one(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &Namespace,
    op: Op,
    params: &Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let partition = namespace.partition_of(&op.pk);
    let mutation = Mutation { write_id: write_id(incoming)?, ops: vec![op] };
    write_records(state, incoming, namespace, partition, mutation, params, body).await
}

/// A client's write (one record, or a batch) through the write path
/// (`node::write`, which decides durability, ripcord and where), answered
/// as its receipt says: 200 with the version, 202 when journaled, or the
/// holder's answer when only a holder can tell the outcome.
async fn write_records(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &Namespace,
    partition: u32,
    mutation: Mutation,
    params: &Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut request = WriteRequest::new(Writer::Client, partition, Entry::Mutation(mutation));
    request.durability = durability(params)?;
    request.timeout = params.timeout()?;
    if params.wait_applied()? {
        request.wait = Wait::Applied;
    }
    match state.node.write(namespace, request).await? {
        Receipt::Sequenced { version, duplicate } => {
            Ok(json_response(StatusCode::OK, render::write_ack(version, &namespace.name, partition, duplicate)))
        }
        Receipt::Journaled { write_id, ripcord } => Ok(journaled(&write_id, ripcord)),
        Receipt::Forward => forward::to_holder(state, incoming, &namespace.name, partition, body).await,
    }
}

/// `?durability=sequenced|journaled`; none: the namespace's `write_mode`.
fn durability(params: &Params) -> Result<Option<Durability>, ApiError> {
    match params.str("durability") {
        None => Ok(None),
        Some("sequenced") => Ok(Some(Durability::Sequenced)),
        Some("journaled") => Ok(Some(Durability::Journaled)),
        Some(other) => Err(ApiError::bad_request("invalid_parameter", format!("durability must be sequenced or journaled, got {other:?}"))),
    }
}

/// 202 `{"write_id", "sequenced": false}`: durable in this node's journal,
/// sequenced soon; with `x-tern-ripcord: journaled` when journaled because
/// the log refused it.
fn journaled(write_id: &[u8], ripcord: bool) -> Response {
    let body = json!({ "write_id": String::from_utf8_lossy(write_id), "sequenced": false });
    let mut response = json_response(StatusCode::ACCEPTED, serde_json::to_vec(&body).expect("JSON serializes"));
    if ripcord {
        response.headers_mut().insert("x-tern-ripcord", axum::http::HeaderValue::from_static("journaled"));
    }
    response
}

/// Page tokens (`cursor` / `next_cursor` on the wire) are opaque: base64url
/// of the last sort key returned.
fn encode_page_token(sk: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sk.as_bytes())
}

fn decode_page_token(token: &str) -> Result<String, ApiError> {
    let invalid = || ApiError::bad_request("invalid_cursor", "cursor is not one this server returned; pass next_cursor exactly");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
    let sk = String::from_utf8(bytes).map_err(|_| invalid())?;
    limits::check_sk(&sk).map_err(|_| invalid())?;
    Ok(sk)
}

async fn list(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &Namespace,
    pk: String,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let params = Params::parse(
        query,
        &["prefix", "start", "end", "limit", "cursor", "reverse", "after", "consistency", "timeout_ms", "partition"],
    )?;
    let limit = params.u64("limit")?.map_or(limits::LIST_LIMIT_DEFAULT, |l| l as usize);
    if limit == 0 || limit > limits::LIST_LIMIT_MAX {
        return Err(ApiError::bad_request(
            "invalid_parameter",
            format!("limit must be between 1 and {}, got {limit}", limits::LIST_LIMIT_MAX),
        ));
    }
    let range = SkRange {
        prefix: params.str("prefix").map(str::to_string),
        start: params.str("start").map(str::to_string),
        end: params.str("end").map(str::to_string),
        page_after: params.str("cursor").map(decode_page_token).transpose()?,
        reverse: params.bool("reverse")?,
    };
    for bound in [&range.prefix, &range.start, &range.end].into_iter().flatten() {
        limits::check_sk(bound)?;
    }
    let partition = partition_param(namespace, params.str("partition"))?.unwrap_or_else(|| namespace.partition_of(&pk));
    if !reads_here(state, incoming, namespace, partition) {
        return forward::to_holder(state, incoming, &namespace.name, partition, Bytes::new()).await;
    }
    await_consistency(&state.node, namespace, &[partition], &params.consistency()?, params.timeout()?).await?;
    let view = namespace.handle(partition).read_view()?;
    let (records, more) = view.reader.list(&pk, &range, limit)?;
    let position = crate::position::Position::single_string(&namespace.name, partition, view.applied_next);
    let next_cursor = if more { records.last().map(|r| encode_page_token(&r.sk)) } else { None };
    let records: Vec<Option<Record>> = records.into_iter().map(Some).collect();
    let body = render::items(&records, &[("next_cursor", json!(next_cursor)), ("position", json!(position))]);
    Ok(json_response(StatusCode::OK, body))
}

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
pub async fn multi_get(
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
    let mut partitions: Vec<u32> = request.keys.iter().map(|k| namespace.partition_of(&k.pk)).collect();
    partitions.sort_unstable();
    partitions.dedup();
    let (local, remote): (Vec<u32>, Vec<u32>) = partitions.iter().partition(|p| namespace.handle(**p).is_held());
    // Each item rendered as JSON text: remote ones as the holder sent them.
    let mut items: Vec<Option<Vec<u8>>> = vec![None; request.keys.len()];
    let mut offsets = std::collections::BTreeMap::new();
    if !remote.is_empty() {
        let incoming = Incoming::new(axum::http::Method::POST, &uri, &headers);
        let keys: Vec<(&str, &str)> = request.keys.iter().map(|k| (k.pk.as_str(), k.sk.as_str())).collect();
        let key_partitions: Vec<u32> = request.keys.iter().map(|k| namespace.partition_of(&k.pk)).collect();
        let fetched =
            forward::multi_get_remote(&state, &incoming, &namespace.name, &remote, &keys, &key_partitions, &mut items, &mut offsets)
                .await;
        if let Err(response) = fetched {
            return Ok(response);
        }
    }
    await_consistency(&state.node, &namespace, &local, &params.consistency()?, params.timeout()?).await?;
    let mut readers = std::collections::HashMap::with_capacity(local.len());
    for &p in &local {
        let view = namespace.handle(p).read_view()?;
        offsets.insert(p, view.applied_next);
        readers.insert(p, view);
    }
    for (key, item) in request.keys.iter().zip(items.iter_mut()) {
        if let Some(view) = readers.get(&namespace.partition_of(&key.pk)) {
            *item = view.reader.get(&key.pk, &key.sk)?.map(|record| {
                let mut out = Vec::with_capacity(record.value.len() + 64);
                render::record(&mut out, &record);
                out
            });
        }
    }
    let position = if offsets.is_empty() {
        serde_json::Value::Null
    } else {
        json!(crate::position::Position { namespace: namespace.name.to_string(), offsets }.to_string())
    };
    Ok(json_response(StatusCode::OK, render::rendered_items(&items, &[("position", position)])))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    ops: Vec<BatchOp>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchOp {
    op: String,
    pk: String,
    #[serde(default)]
    sk: String,
    /// `Some` whenever the key is present, `"value": null` too (a put of
    /// JSON null, as a single PUT accepts); `None` only when absent.
    #[serde(default, deserialize_with = "present")]
    value: Option<Box<serde_json::value::RawValue>>,
    if_version: Option<u64>,
    #[serde(default)]
    if_absent: bool,
}

/// A present field, `null` included (serde's `Option` reads `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<serde_json::value::RawValue>>, D::Error> {
    Box::<serde_json::value::RawValue>::deserialize(d).map(Some)
}

fn batch_op(index: usize, op: BatchOp) -> Result<Op, ApiError> {
    let at = |e: ApiError| ApiError { message: format!("op {index}: {}", e.message), ..e }.with("op_index", index);
    limits::check_pk(&op.pk).map_err(|e| at(e.into()))?;
    limits::check_sk(&op.sk).map_err(|e| at(e.into()))?;
    let condition = condition_of(op.if_version, op.if_absent, "invalid_op").map_err(at)?;
    let kind = match (op.op.as_str(), op.value) {
        ("put", Some(value)) => {
            let text = Bytes::from(value.get().to_string());
            limits::check_value_len(text.len()).map_err(|e| at(e.into()))?;
            OpKind::Put(text)
        }
        ("put", None) => return Err(at(ApiError::bad_request("invalid_op", "a put needs a value"))),
        ("delete", None) => OpKind::Delete,
        // A uniform op shape may carry `"value": null` on a delete: nothing to put.
        ("delete", Some(value)) if value.get() == "null" => OpKind::Delete,
        ("delete", Some(_)) => return Err(at(ApiError::bad_request("invalid_op", "a delete takes no value"))),
        (other, _) => {
            return Err(at(ApiError::bad_request("invalid_op", format!("op must be \"put\" or \"delete\", got {other:?}"))))
        }
    };
    Ok(Op { pk: op.pk, sk: op.sk, kind, condition })
}

/// `POST /v1/ns/{ns}/batch`
pub async fn batch(
    State(state): State<AppState>,
    Caller(identity): Caller,
    NsName(ns): NsName,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    require_anywhere(&identity, &ns, Verb::Write)?;
    let namespace = namespace(&state, &ns)?;
    let params = Params::parse(query.as_deref(), &["wait", "timeout_ms", "durability"])?;
    let bytes = body::read(body, BATCH_BODY_BYTES_MAX, "batch_too_large", "the batch body").await?;
    let request: BatchBody = body::json(&bytes)?;
    limits::check_ops_count(request.ops.len())?;
    let ops = request.ops.into_iter().enumerate().map(|(i, op)| batch_op(i, op)).collect::<Result<Vec<_>, _>>()?;
    for op in &ops {
        require(&identity, &ns, &op.pk, Verb::Write)?;
    }
    let incoming = Incoming::new(axum::http::Method::POST, &uri, &headers);
    let mutation = Mutation { write_id: write_id(&incoming)?, ops };
    limits::check_mutation_bytes(mutation.payload_bytes())?;
    let partition = namespace.partition_of(&mutation.ops[0].pk);
    if let Some((i, op)) = mutation.ops.iter().enumerate().find(|(_, op)| namespace.partition_of(&op.pk) != partition) {
        return Err(ApiError::bad_request(
            "cross_partition",
            format!(
                "op {i} (pk {:?}) is in partition {}, op 0 (pk {:?}) in partition {partition}: a batch is atomic \
                 only within one partition; use pks that share a partition or split the batch",
                op.pk,
                namespace.partition_of(&op.pk),
                mutation.ops[0].pk
            ),
        ));
    }
    write_records(&state, &incoming, &namespace, partition, mutation, &params, bytes).await
}
