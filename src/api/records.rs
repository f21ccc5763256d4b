//! Single records: `PUT|GET|DELETE /v1/ns/{ns}/kv/{pk}/{sk}`, and the
//! fast path that answers a plain GET or PUT before the router runs.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::body;
use super::keys::namespace;
use super::keys::{self, NsName};
use super::list::list;
use super::params::Params;
use super::render;
use super::render::json_response;
use super::write::{condition, write_one};
use crate::auth::{Identity, Verb};
use crate::codec::{Op, OpKind};
use crate::edge::{require, to_holder, ApiError, AppState, Caller, Incoming, SERVING_HEADER, STALENESS_HEADER};
use crate::limits;
use crate::node::read::{await_consistency, check_position, refuse_unserved};
use crate::partition::{Namespace, PartitionStatus, ReadView};

/// `PUT|GET|DELETE /v1/ns/{ns}/kv/{pk}[/{sk}]`
#[allow(clippy::too_many_arguments)] // axum extractors, one per argument
pub(super) async fn kv(
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
    // HEAD is a GET without the body (hyper drops it): `Allow` names it.
    let reads = matches!(method, axum::http::Method::GET | axum::http::Method::HEAD);
    let verb = if reads { Verb::Read } else { Verb::Write };
    require(&identity, &ns, &key.pk, verb)?;
    let namespace = namespace(&state, &ns)?;
    let incoming = Incoming::new(method.clone(), &uri, &headers).by_if_writing(&identity, !reads);
    let query = query.as_deref();
    match method {
        _ if reads => match key.sk {
            Some(sk) => get(&state, &incoming, &namespace, key.pk, sk, query).await,
            None => list(&state, &incoming, &namespace, key.pk, query).await,
        },
        axum::http::Method::PUT => put(&state, &incoming, &namespace, key.pk, key.sk.unwrap_or_default(), query, body).await,
        axum::http::Method::DELETE => delete(&state, &incoming, &namespace, key.pk, key.sk.unwrap_or_default(), query).await,
        other => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{other} is not supported on records; use GET, HEAD, PUT or DELETE"),
        )),
    }
}

/// Whether this node answers a read of `partition` itself: it holds it, and
/// either serves it caught up or no other member is advertised serving it.
/// During a hand-off the new owner catches up while the old one still
/// serves: the old one's answers are current, a store still replaying is not.
pub(super) fn reads_here(state: &AppState, incoming: &Incoming<'_>, namespace: &Namespace, partition: u32) -> bool {
    let handle = namespace.handle(partition);
    match handle.status() {
        PartitionStatus::CatchingUp => incoming.forwarded_by.is_some() || state.cluster.holders(&namespace.name, partition).is_empty(),
        _ => handle.is_held(),
    }
}

/// The hot paths: a plain `GET` or `PUT /v1/ns/{ns}/kv/{pk}/{sk}` (no query
/// string), answered before the generic router and extractors run. Gives the
/// request back when the path is not exactly that shape, so the router
/// handles it (and any error).
pub(crate) async fn fast_path(state: &AppState, identity: &Identity, request: axum::extract::Request) -> Result<Response, axum::extract::Request> {
    let Some((namespace, pk, sk)) = fast_key(state, request.uri().path()) else { return Err(request) };
    let (parts, body) = request.into_parts();
    let verb = if parts.method == axum::http::Method::GET { Verb::Read } else { Verb::Write };
    if let Err(e) = require(identity, &namespace.name, &pk, verb) {
        return Ok(e.into_response());
    }
    let incoming = Incoming::new(parts.method.clone(), &parts.uri, &parts.headers).by_if_writing(identity, verb == Verb::Write);
    let response = match parts.method {
        axum::http::Method::GET => get(state, &incoming, &namespace, pk, sk, None).await,
        // Boxed: a write's future is far larger than a read's, and the
        // read's would otherwise be as large (`http::front`'s doors).
        axum::http::Method::PUT => Box::pin(put(state, &incoming, &namespace, pk, sk, None, body)).await,
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
        // Boxed: forwarding's future (a client request) would make every local read's as large.
        return Box::pin(to_holder(state, incoming, &namespace.name, partition, Bytes::new())).await;
    }
    match &params {
        Some(params) => {
            let consistency = params.consistency()?;
            check_position(namespace, &consistency, &[partition], incoming.forwarded_by.is_some())?;
            // Boxed: a wait's future would make every plain read's as large.
            Box::pin(await_consistency(&state.node, namespace, &[partition], &consistency, params.timeout()?)).await?;
        }
        None => refuse_unserved(namespace, &[partition])?,
    }
    let view = namespace.handle(partition).read_view()?;
    let applied_next = view.applied_next;
    let body = match view.memo.get(&pk, &sk) {
        Some(body) => Some(body),
        None => rendered_from_store(&view, &namespace.name, partition, &pk, &sk)?,
    };
    let staleness = staleness_header(namespace, partition);
    // To another node (it forwarded the read, or reads the namespace
    // settings as itself): whether this replica serves caught up, so it can
    // tell a current answer from a catching-up one (`cluster::peer_client`).
    let serving = incoming.forwarded_by.map(|_| {
        let serving = namespace.handle(partition).status() == PartitionStatus::Serving;
        (axum::http::HeaderName::from_static(SERVING_HEADER), axum::http::HeaderValue::from_static(if serving { "1" } else { "0" }))
    });
    let mut response = match body {
        Some(body) => json_response(StatusCode::OK, body),
        None => {
            let position = crate::position::Position::single_string(&namespace.name, partition, applied_next);
            ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no record at pk {pk:?} sk {sk:?}")).with("position", position).into_response()
        }
    };
    response.headers_mut().extend(staleness.into_iter().chain(serving));
    Ok(response)
}

/// The answer to a GET of `(pk, sk)` in `view`, rendered from the store
/// and kept in the view's memo (`partition::read_memo`): it is a function
/// of the view and the key alone (the position in it is the view's).
fn rendered_from_store(view: &ReadView, ns: &str, partition: u32, pk: &str, sk: &str) -> Result<Option<Bytes>, ApiError> {
    let mut body = None;
    view.reader.get_with(pk, sk, |version, value| {
        // As a boxed slice: `Bytes` of a `Vec` keeps its spare capacity, which the memo's bound would not count.
        let rendered = render::get_response(pk, sk, version, value, ns, partition, view.applied_next);
        body = Some(Bytes::from(rendered.into_boxed_slice()));
    })?;
    if let Some(body) = &body {
        view.memo.keep(pk, sk, body.clone());
    }
    Ok(body)
}

/// `?partition=P`: read partition P whatever the pk hashes to. A record a
/// procedure wrote lives in the partition the procedure ran in
/// (docs/procedures.md).
pub(super) fn partition_param(namespace: &Namespace, text: Option<&str>) -> Result<Option<u32>, ApiError> {
    let Some(text) = text else { return Ok(None) };
    let partition = text.parse::<u32>().ok().filter(|p| *p < namespace.partitions);
    partition
        .map(Some)
        .ok_or_else(|| ApiError::bad_request("invalid_request", format!("partition is 0 to {}, got {text:?}", namespace.partitions - 1)))
}

/// `x-tern-staleness-ms`: how stale this replica's answer may be at most
/// (`partition::freshness`); absent until the replica was once known current.
fn staleness_header(namespace: &Namespace, partition: u32) -> Option<(axum::http::HeaderName, axum::http::HeaderValue)> {
    let staleness = namespace.handle(partition).staleness()?;
    Some((axum::http::HeaderName::from_static(STALENESS_HEADER), axum::http::HeaderValue::from(staleness.as_millis() as u64)))
}

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
