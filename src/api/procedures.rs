//! Procedure calls (issue 23, docs/procedures.md):
//!
//! - `PUT /v1/ns/{ns}/procedures/{name}` with a definition (`{"runtime":
//!   "wasm", "module": base64, ...}`) deploys it; with `{"from_version": V}`
//!   it deploys a kept version's definition again (a rollback). One log
//!   entry per partition: partition 0's first, whose offset is the version
//!   the others carry, so every replica of every partition switches at one
//!   offset of its own log. Answers `{"name", "version", "positions"}`.
//! - `DELETE /v1/ns/{ns}/procedures/{name}` deploys its removal.
//! - `GET /v1/ns/{ns}/procedures` lists the active procedures;
//!   `GET /v1/ns/{ns}/procedures/{name}` shows one with its kept versions.
//! - `GET /v1/ns/{ns}/outbox?partition=P&after=OFFSET.INDEX&limit=N` reads a
//!   partition's outbox (what procedures emitted, not yet published).
//! - `DELETE /v1/ns/{ns}/outbox?partition=P&below=OFFSET` trims what the
//!   caller took, where no publisher does (the embedded log).
//!
//! Reads come from partition 0's store (every partition holds the same
//! definitions; 0 is where versions are numbered): this node's, or a
//! holder's, forwarded. Deploying and removing take the admin verb on the
//! namespace; reading takes read; trimming the outbox takes write.

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use super::access::{require, Caller};
use super::error::ApiError;
use super::forward::{self, Incoming};
use super::params::Params;
use super::{body, AppState};
use crate::auth::Verb;
use crate::codec::{Mutation, Op, OpKind};
use crate::node::reserved::Writer;
use crate::node::write::{Entry, WriteError, WriteRequest};
use crate::partition::Namespace;
use crate::procedure::definition::{self, Definition};
use crate::procedure::outbox::OutboxMessage;
use crate::procedure::wasm;

/// A definition is one value: the module, base64, and the rest.
const DEFINITION_BODY_BYTES_MAX: usize = crate::limits::VALUE_BYTES_MAX;
/// Most outbox messages one read returns.
const OUTBOX_LIMIT_MAX: usize = 1_000;
const OUTBOX_LIMIT_DEFAULT: usize = 100;
/// Trim ticks one `DELETE .../outbox` appends at most: each removes up to
/// 50,000 messages (`apply/batch.rs`), so 1,000,000 a call.
const TRIM_ROUNDS_MAX: usize = 20;
/// How long a trim waits for its tick to be applied here, each round.
const TRIM_APPLIED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A rollback: deploy version `from_version` (still kept) again.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rollback {
    from_version: u64,
}

fn namespace_of(state: &AppState, ns: &str) -> Result<std::sync::Arc<Namespace>, ApiError> {
    state.node.namespace(ns).ok_or_else(|| ApiError::unknown_namespace(ns))
}

fn checked_name(name: &str) -> Result<(), ApiError> {
    definition::check_name(name).map_err(|e| ApiError::bad_request("invalid_procedure", e))
}

/// `PUT /v1/ns/{ns}/procedures/{name}`.
pub async fn deploy(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require(&identity, &ns, "", Verb::Admin)?;
    checked_name(&name)?;
    let namespace = namespace_of(&state, &ns)?;
    let bytes = body::read(body, DEFINITION_BODY_BYTES_MAX, "definition_too_large", "the procedure definition").await?;
    let mut definition = match serde_json::from_slice::<Rollback>(&bytes) {
        Ok(rollback) => kept_version(&state, &headers, &namespace, &name, rollback.from_version).await?,
        Err(_) => Definition::parse(&bytes).map_err(|e| ApiError::bad_request("invalid_procedure", e))?,
    };
    if definition.removed {
        return Err(ApiError::bad_request("invalid_procedure", "a definition is not a removal: DELETE the procedure instead"));
    }
    definition.version = None;
    // Refused here with the reason, before anything is appended: every replica would refuse it too.
    wasm::Vm::load(&definition, 0).map_err(|e| ApiError::bad_request("invalid_procedure", format!("the module does not load: {e}")))?;
    let (version, positions) = append_everywhere(&state, &namespace, &name, definition).await?;
    Ok((StatusCode::OK, Json(json!({ "name": name, "version": version, "positions": positions }))).into_response())
}

/// `DELETE /v1/ns/{ns}/procedures/{name}`: from its version on, no code runs.
pub async fn remove(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require(&identity, &ns, "", Verb::Admin)?;
    checked_name(&name)?;
    let namespace = namespace_of(&state, &ns)?;
    let listed = read_procedures(&state, &headers, &namespace).await?;
    let active = listed.as_array().is_some_and(|all| all.iter().any(|p| p["name"] == name.as_str()));
    if !active {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no procedure {name:?} runs on namespace {ns:?}")));
    }
    let removal = Definition {
        runtime: definition::Runtime::Wasm,
        module: String::new(),
        params: json!({}),
        fuel_per_record: definition::FUEL_PER_RECORD_DEFAULT,
        memory_bytes: definition::MEMORY_BYTES_DEFAULT,
        outputs: Default::default(),
        dead_letter_topic: None,
        version: None,
        removed: true,
    };
    let (version, positions) = append_everywhere(&state, &namespace, &name, removal).await?;
    Ok((StatusCode::OK, Json(json!({ "name": name, "version": version, "removed": true, "positions": positions }))).into_response())
}

/// Appends the deploy entry to partition 0, then (carrying its offset as
/// the version) to every other partition. Returns the version and each
/// partition's position.
async fn append_everywhere(state: &AppState, namespace: &Namespace, name: &str, mut definition: Definition) -> Result<(u64, Vec<String>), ApiError> {
    let mut positions = Vec::with_capacity(namespace.partitions as usize);
    let mut version = None;
    for partition in 0..namespace.partitions {
        definition.version = version;
        let op = Op { pk: String::new(), sk: name.to_string(), kind: OpKind::Procedure(Bytes::from(definition.to_json())), condition: None };
        let mutation = Mutation { write_id: Bytes::new(), ops: vec![op] };
        let request = WriteRequest::new(Writer::Procedures, partition, Entry::Mutation(mutation));
        let offset = state.node.write_sequenced(namespace, request).await?;
        version.get_or_insert(offset);
        positions.push(crate::position::Position::single_string(&namespace.name, partition, offset + 1));
    }
    Ok((version.expect("a namespace has at least one partition"), positions))
}

/// A kept version's definition (for a rollback).
async fn kept_version(state: &AppState, headers: &HeaderMap, namespace: &Namespace, name: &str, version: u64) -> Result<Definition, ApiError> {
    let shown = read_procedure(state, headers, namespace, name).await?;
    let kept = shown["versions"].as_array().and_then(|all| all.iter().find(|v| v["version"] == version)).cloned();
    let Some(kept) = kept else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("procedure {name:?} keeps no version {version}")));
    };
    serde_json::from_value::<Definition>(kept["definition"].clone()).map_err(|e| ApiError::bad_request("invalid_procedure", e.to_string()))
}

/// `GET /v1/ns/{ns}/procedures`.
pub async fn list(State(state): State<AppState>, Caller(identity): Caller, Path(ns): Path<String>, headers: HeaderMap) -> Result<Response, ApiError> {
    require(&identity, &ns, "", Verb::Read)?;
    let namespace = namespace_of(&state, &ns)?;
    let mut procedures = read_procedures(&state, &headers, &namespace).await?;
    // This node's counters since it started (its partitions' calls).
    for procedure in procedures.as_array_mut().into_iter().flatten() {
        let name = procedure["name"].as_str().unwrap_or_default().to_string();
        procedure["counters"] = crate::metrics::procedure_counters(&ns, &name);
    }
    Ok(Json(json!({ "procedures": procedures })).into_response())
}

/// `GET /v1/ns/{ns}/procedures/{name}`.
pub async fn show(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require(&identity, &ns, "", Verb::Read)?;
    checked_name(&name)?;
    let namespace = namespace_of(&state, &ns)?;
    Ok(Json(read_procedure(&state, &headers, &namespace, &name).await?).into_response())
}

/// A definition as shown: everything but the module, which is summarized.
fn summary(definition: &Definition) -> Value {
    let module = definition.module_bytes().unwrap_or_default();
    json!({
        "runtime": definition.runtime,
        "module_bytes": module.len(),
        "module_blake3": blake3::hash(&module).to_hex().as_str(),
        "params": definition.params,
        "fuel_per_record": definition.fuel_per_record,
        "memory_bytes": definition.memory_bytes,
        "outputs": definition.outputs,
        "dead_letter_topic": definition.dead_letter_topic,
    })
}

/// The active procedures, from this node's partition 0 (or a holder's).
async fn read_procedures(state: &AppState, headers: &HeaderMap, namespace: &Namespace) -> Result<Value, ApiError> {
    if !namespace.handle(0).is_held() {
        let response = forward_get(state, headers, namespace, 0, &format!("/v1/ns/{}/procedures", namespace.name)).await?;
        return Ok(body_json(response).await?["procedures"].clone());
    }
    let view = namespace.handle(0).read_view()?;
    let reader = &view.reader;
    let mut all = Vec::new();
    for (name, bytes) in reader.procedures()? {
        let Ok(definition) = Definition::parse(&bytes) else { continue };
        if definition.removed {
            continue;
        }
        let mut shown = summary(&definition);
        shown["name"] = json!(name);
        shown["version"] = json!(definition.version);
        all.push(shown);
    }
    Ok(Value::Array(all))
}

/// One procedure with its kept versions (each with its whole definition, for rollbacks).
async fn read_procedure(state: &AppState, headers: &HeaderMap, namespace: &Namespace, name: &str) -> Result<Value, ApiError> {
    if !namespace.handle(0).is_held() {
        let response = forward_get(state, headers, namespace, 0, &format!("/v1/ns/{}/procedures/{name}", namespace.name)).await?;
        return body_json(response).await;
    }
    let view = namespace.handle(0).read_view()?;
    let reader = &view.reader;
    let versions = reader.procedure_versions(name)?;
    let Some((_, latest)) = versions.last() else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no procedure {name:?} was deployed on namespace {:?}", namespace.name)));
    };
    let active = Definition::parse(latest).map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unreadable_procedure", e))?;
    let kept: Vec<Value> = versions
        .iter()
        .filter_map(|(version, bytes)| {
            let definition = Definition::parse(bytes).ok()?;
            let mut shown = summary(&definition);
            shown["removed"] = json!(definition.removed);
            Some(json!({ "version": version, "summary": shown, "definition": serde_json::from_slice::<Value>(bytes).ok()? }))
        })
        .collect();
    let mut shown = summary(&active);
    shown["name"] = json!(name);
    shown["version"] = json!(active.version);
    shown["removed"] = json!(active.removed);
    shown["versions"] = Value::Array(kept);
    Ok(shown)
}

/// `GET /v1/ns/{ns}/outbox?partition=P&after=OFFSET.INDEX&limit=N`.
pub async fn outbox(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require(&identity, &ns, "", Verb::Read)?;
    let namespace = namespace_of(&state, &ns)?;
    let params = Params::parse(query.as_deref(), &["partition", "after", "limit"])?;
    let partition = outbox_partition(&params, &namespace)?;
    let limit = match params.str("limit") {
        None => OUTBOX_LIMIT_DEFAULT,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=OUTBOX_LIMIT_MAX).contains(l))
            .ok_or_else(|| ApiError::bad_request("invalid_request", format!("limit is 1 to {OUTBOX_LIMIT_MAX}, got {text:?}")))?,
    };
    let (from_offset, from_index) = match params.str("after") {
        None => (0, 0),
        Some(text) => {
            let parsed = text.split_once('.').and_then(|(o, i)| Some((o.parse::<u64>().ok()?, i.parse::<u32>().ok()?)));
            let (offset, index) = parsed.ok_or_else(|| ApiError::bad_request("invalid_request", format!("after is OFFSET.INDEX, got {text:?}")))?;
            match index.checked_add(1) {
                Some(next) => (offset, next),
                None => (offset.saturating_add(1), 0),
            }
        }
    };
    if !namespace.handle(partition).is_held() {
        let uri = format!("/v1/ns/{ns}/outbox?{}", query.unwrap_or_default());
        return forward_get(&state, &headers, &namespace, partition, &uri).await;
    }
    let view = namespace.handle(partition).read_view()?;
    let reader = &view.reader;
    let entries = reader.outbox_from(from_offset, from_index, limit)?;
    let messages: Vec<Value> = entries
        .iter()
        .map(|entry| {
            let message = OutboxMessage::decode(&entry.message);
            let id = format!("{ns}:{partition}:{}.{}", entry.offset, entry.index);
            match message {
                Some(m) => json!({
                    "id": id,
                    "offset": entry.offset,
                    "index": entry.index,
                    "procedure": m.procedure,
                    "topic": m.topic,
                    "key": m.key.map(|k| base64::engine::general_purpose::STANDARD.encode(k)),
                    "value": String::from_utf8(m.value.clone()).unwrap_or_else(|_| base64::engine::general_purpose::STANDARD.encode(&m.value)),
                }),
                None => json!({ "id": id, "offset": entry.offset, "index": entry.index, "unreadable": true }),
            }
        })
        .collect();
    let next = entries.last().map(|e| format!("{}.{}", e.offset, e.index));
    Ok(Json(json!({ "partition": partition, "messages": messages, "next_after": next })).into_response())
}

/// `?partition=P` of an outbox call: every outbox is one partition's.
fn outbox_partition(params: &Params, namespace: &Namespace) -> Result<u32, ApiError> {
    let partition = params.str("partition").ok_or_else(|| ApiError::bad_request("invalid_request", "outbox calls name their partition: ?partition=P"))?;
    partition
        .parse()
        .ok()
        .filter(|p| *p < namespace.partitions)
        .ok_or_else(|| ApiError::bad_request("invalid_request", format!("partition is 0 to {}, got {partition:?}", namespace.partitions - 1)))
}

/// `DELETE /v1/ns/{ns}/outbox?partition=P&below=OFFSET`: the caller took
/// the messages of records below OFFSET (where no publisher relays the
/// outbox: the embedded log, which has no output topics); they are
/// trimmed on every replica by the same tick the publisher appends
/// (`outbox_published_below`). Answers once this node applied it:
/// `{"partition", "below", "position", "done"}`; `done` is false when more
/// than `TRIM_ROUNDS_MAX` ticks' worth was below (call again).
pub async fn trim_outbox(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require(&identity, &ns, "", Verb::Write)?;
    let namespace = namespace_of(&state, &ns)?;
    let params = Params::parse(query.as_deref(), &["partition", "below"])?;
    let partition = outbox_partition(&params, &namespace)?;
    let below = params.str("below").ok_or_else(|| ApiError::bad_request("invalid_request", "say what was taken: ?below=OFFSET (the input offset of the first message not taken)"))?;
    let below: u64 = below
        .parse()
        .ok()
        .filter(|b| *b > 0)
        .ok_or_else(|| ApiError::bad_request("invalid_request", format!("below is an offset from 1 up, got {below:?}")))?;
    // On Kafka a publisher (on whichever node of a group has
    // `procedure_publish`) owns the outbox: a trim by hand, from any node,
    // could drop what it has not published yet.
    if state.node.log.has_output_topics() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "outbox_published",
            "on a Kafka log the publisher relays the outboxes to their topics and trims what it published; a trim by hand could drop messages it has not published yet",
        ));
    }
    let handle = namespace.handle(partition).clone();
    if !handle.is_held() {
        let uri: Uri = format!("/v1/ns/{ns}/outbox?{}", query.unwrap_or_default()).parse().map_err(|e| ApiError::bad_request("invalid_request", format!("{e}")))?;
        return forward::to_holder(&state, &Incoming::new(Method::DELETE, &uri, &headers), &namespace.name, partition, Bytes::new()).await;
    }
    let end = state.node.log.end_offset(&handle.tp).await?;
    if below > end {
        return Err(ApiError::bad_request(
            "invalid_position",
            format!("below={below} is past the end of partition {partition}'s log ({end}): no message there was emitted yet"),
        ));
    }
    let mut position = None;
    for _ in 0..TRIM_ROUNDS_MAX {
        if !outbox_has_below(&handle, below)? {
            return Ok(Json(json!({ "partition": partition, "below": below, "position": position, "done": true })).into_response());
        }
        let trim = WriteRequest::new(Writer::Procedures, partition, Entry::OutboxTrim { below }).applied_within(TRIM_APPLIED_WAIT);
        let offset = match state.node.write_sequenced(&namespace, trim).await {
            Ok(offset) => offset,
            Err(WriteError::NotApplied { version, .. }) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not_caught_up",
                    format!("the trim is in the log at {ns}:{partition}:{version} but was not applied within {} ms; it will be", TRIM_APPLIED_WAIT.as_millis()),
                ))
            }
            Err(e) => return Err(e.into()),
        };
        position = Some(format!("{ns}:{partition}:{}", offset + 1));
    }
    let done = !outbox_has_below(&handle, below)?;
    Ok(Json(json!({ "partition": partition, "below": below, "position": position, "done": done })).into_response())
}

/// Whether the outbox still holds a message of a record below `below`.
fn outbox_has_below(handle: &crate::partition::PartitionHandle, below: u64) -> Result<bool, ApiError> {
    let view = handle.read_view()?;
    Ok(view.reader.outbox_from(0, 0, 1)?.first().is_some_and(|oldest| oldest.offset < below))
}

/// A GET of `path` forwarded to a holder of `partition`, with the caller's
/// headers (its token: the holder checks it again).
async fn forward_get(state: &AppState, headers: &HeaderMap, namespace: &Namespace, partition: u32, path: &str) -> Result<Response, ApiError> {
    let uri: Uri = path.parse().map_err(|e| ApiError::bad_request("invalid_request", format!("{e}")))?;
    let incoming = Incoming::new(Method::GET, &uri, headers);
    forward::to_holder(state, &incoming, &namespace.name, partition, Bytes::new()).await
}

async fn body_json(response: Response) -> Result<Value, ApiError> {
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 8 * 1024 * 1024)
        .await
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "forward_failed", e.to_string()))?;
    let value: Value = serde_json::from_slice(&body).map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "forward_failed", e.to_string()))?;
    if !status.is_success() {
        let code = value["error"]["code"].as_str().unwrap_or("");
        let message = value["error"]["message"].as_str().unwrap_or("");
        return Err(ApiError::new(status, "forwarded", format!("the holder answered {code}: {message}")));
    }
    Ok(value)
}
