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
//! - the outbox's calls are `outbox.rs`'s.
//!
//! Reads come from partition 0's store (every partition holds the same
//! definitions; 0 is where versions are numbered): this node's, or a
//! holder's, forwarded. Deploying and removing take the admin verb on the
//! namespace; reading takes read; trimming the outbox takes write.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body;
use super::keys::namespace as namespace_of;
use crate::auth::Verb;
use crate::codec::{Mutation, Op, OpKind};
use crate::edge::{require_all_of, to_holder, ApiError, AppState, Caller, Incoming};
use crate::node::reserved::Writer;
use crate::node::write::{Entry, WriteRequest};
use crate::partition::Namespace;
use crate::procedure::definition::{self, Definition};
use crate::procedure::wasm;

/// A definition is one value: the module, base64, and the rest.
const DEFINITION_BODY_BYTES_MAX: usize = crate::limits::VALUE_BYTES_MAX;

/// A rollback: deploy version `from_version` (still kept) again.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rollback {
    from_version: u64,
}

fn checked_name(name: &str) -> Result<(), ApiError> {
    definition::check_name(name).map_err(|e| ApiError::bad_request("invalid_procedure", e))
}

/// `PUT /v1/ns/{ns}/procedures/{name}`.
pub(super) async fn deploy(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_all_of(&identity, &ns, "", Verb::Admin)?;
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
    checked_topics(&state, &ns, &name, &definition)?;
    // Refused here with the reason, before anything is appended: every replica would refuse it too.
    wasm::Vm::load(&definition, 0).map_err(|e| ApiError::bad_request("invalid_procedure", format!("the module does not load: {e}")))?;
    let (version, positions) = append_everywhere(&state, &namespace, &name, definition).await?;
    Ok((StatusCode::OK, Json(json!({ "name": name, "version": version, "positions": positions }))).into_response())
}

/// `DELETE /v1/ns/{ns}/procedures/{name}`: from its version on, no code runs.
pub(super) async fn remove(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require_all_of(&identity, &ns, "", Verb::Admin)?;
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

/// Refuses a definition whose output or dead-letter topics are not the
/// namespace's own, or are Tern's (its topics are written with Tern's credentials).
fn checked_topics(state: &AppState, ns: &str, name: &str, definition: &Definition) -> Result<(), ApiError> {
    definition.check_confined(ns).map_err(|e| ApiError::bad_request("invalid_procedure", e))?;
    let dead = definition.dead_letter_topic(ns, name);
    let topics: Vec<&str> = definition.outputs.values().map(String::as_str).chain([dead.as_str()]).collect();
    state.node.log.check_outputs(ns, &topics).map_err(|e| ApiError::bad_request("invalid_procedure", e))
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
        let mutation = Mutation { ops: vec![op], ..Default::default() };
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
pub(super) async fn list(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path(ns): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require_all_of(&identity, &ns, "", Verb::Read)?;
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
pub(super) async fn show(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require_all_of(&identity, &ns, "", Verb::Read)?;
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
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no procedure {name:?} was deployed on namespace {:?}", namespace.name),
        ));
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

/// A GET of `path` forwarded to a holder of `partition`, with the caller's
/// headers (its token: the holder checks it again).
pub(super) async fn forward_get(
    state: &AppState,
    headers: &HeaderMap,
    namespace: &Namespace,
    partition: u32,
    path: &str,
) -> Result<Response, ApiError> {
    let uri: Uri = path.parse().map_err(|e| ApiError::bad_request("invalid_request", format!("{e}")))?;
    let incoming = Incoming::new(Method::GET, &uri, headers);
    to_holder(state, &incoming, &namespace.name, partition, Bytes::new()).await
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
