//! The REST verbs on `/{path}.json`.
//!
//! - `GET`: the value (null when absent); `shallow=true`; `format=export`
//!   (priorities); queries (`tree::query`), which need `.indexOn` for
//!   `$value` and child orders; `X-Firebase-ETag: true` adds the `ETag`,
//!   and so does `if-none-match` (equal to it: 304, else 200 with the new one).
//! - `PUT` (set), `PATCH` (update, multi-path keys, null deletes), `POST`
//!   (a child under a new push id: `{"name": id}`), `DELETE`: each one tree
//!   op in one log entry, answered once this node applied it (so the next
//!   read here sees it). `if-match: <ETag>` makes it conditional, decided
//!   at apply: 412 with the current `ETag` and value when it fails.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::caller::Caller;
use super::commit::{commit, may_read, Committed, TreeWrite};
use super::db::tree_view;
use super::error::FbError;
use super::query::Query;
use super::response::json_response;
use super::state::Firebase;
use crate::codec::Condition;
use crate::edge::{to_holder, Incoming};
use crate::partition::{Namespace, ReadView};
use crate::store::tree::{shallow, value_at, READ_BYTES_MAX};
use crate::tree::path;
use crate::tree::query::{self, QueryParams};
use crate::tree::value::{etag, etag_text, has_server_values, parse_etag, validate_write};
use crate::tree::TREE_PK;

/// Children a shallow read lists at most.
const SHALLOW_CHILDREN_MAX: usize = 1_000_000;

#[allow(clippy::too_many_arguments)]
pub(super) async fn handle(
    state: &Firebase,
    namespace: &Namespace,
    caller: &Caller,
    method: &Method,
    sk: String,
    query: &Query,
    headers: &HeaderMap,
    uri: &Uri,
    body: Bytes,
) -> Result<Response, FbError> {
    let mut incoming = Incoming::new(method.clone(), uri, headers);
    incoming.principal = caller.principal();
    let partition = namespace.partition_of(TREE_PK);
    if !namespace.handle(partition).is_held() {
        return to_holder(&state.app, &incoming, &namespace.name, partition, body).await.map_err(FbError::from);
    }
    match *method {
        Method::GET => get(state, namespace, caller, &sk, query, headers).await,
        Method::PUT => Ok(set(state, namespace, caller, sk, query, headers, &incoming, body, false).await?.response()),
        Method::PATCH => Ok(set(state, namespace, caller, sk, query, headers, &incoming, body, true).await?.response()),
        Method::POST => {
            let name = state.db.push_id();
            let child = path::join(&sk, &name);
            let response = match set(state, namespace, caller, child, query, headers, &incoming, body, false).await? {
                Written::Here(response) => response,
                // The holder took the POST and chose the push id: its answer names it.
                Written::ByHolder(response) => return Ok(response),
            };
            if response.status() == StatusCode::NO_CONTENT || !response.status().is_success() {
                return Ok(response);
            }
            json_response(StatusCode::OK, &serde_json::json!({ "name": name }), query, Vec::new())
        }
        Method::DELETE => Ok(set(state, namespace, caller, sk, query, headers, &incoming, Bytes::from_static(b"null"), false).await?.response()),
        ref other => Err(FbError::method_not_allowed(other, "GET, PUT, PATCH, POST, DELETE", "")),
    }
}

fn query_params(query: &Query) -> QueryParams<'_> {
    QueryParams {
        order_by: query.get("orderBy"),
        start_at: query.get("startAt"),
        start_after: query.get("startAfter"),
        end_at: query.get("endAt"),
        end_before: query.get("endBefore"),
        equal_to: query.get("equalTo"),
        limit_to_first: query.get("limitToFirst"),
        limit_to_last: query.get("limitToLast"),
    }
}

/// Parses a query and checks that the rules index what it orders by.
pub(super) fn parse_query(state: &Firebase, namespace: &Namespace, sk: &str, query: &Query) -> Result<Option<query::Query>, FbError> {
    let Some(parsed) = query::parse(&query_params(query)).map_err(FbError::bad)? else { return Ok(None) };
    if let Some(needed) = query::index_needed(&parsed) {
        if !state.db.rules_of(namespace)?.index_on(sk).contains(&needed) {
            return Err(FbError::bad(format!("Index not defined, add \".indexOn\": \"{needed}\", for path \"{}\", to the rules", path::display(sk))));
        }
    }
    Ok(Some(parsed))
}

pub(super) fn check_read(state: &Firebase, namespace: &Namespace, caller: &Caller, sk: &str, view: Arc<ReadView>) -> Result<Arc<ReadView>, FbError> {
    match may_read(state, namespace, caller, &view, sk)? {
        true => Ok(view),
        false => Err(FbError::denied()),
    }
}

async fn get(state: &Firebase, namespace: &Namespace, caller: &Caller, sk: &str, query: &Query, headers: &HeaderMap) -> Result<Response, FbError> {
    let parsed = parse_query(state, namespace, sk, query)?;
    let view = check_read(state, namespace, caller, sk, tree_view(namespace)?)?;
    let reader = &view.reader;
    let value = match (query.get("shallow"), query.get("format")) {
        (Some("true"), _) if parsed.is_some() => return Err(FbError::bad("Mixing 'shallow' and querying parameters is not supported")),
        (Some("true"), _) => shallow(reader, TREE_PK, sk, SHALLOW_CHILDREN_MAX)?,
        (Some(other), _) if other != "false" => return Err(FbError::bad(format!("shallow must be true or false, got {other:?}"))),
        (_, Some("export")) if parsed.is_none() => value_at(reader, TREE_PK, sk, true, READ_BYTES_MAX)?,
        (_, Some(other)) if other != "export" => return Err(FbError::bad(format!("format must be export, got {other:?}"))),
        _ => match &parsed {
            Some(q) => query::as_object(state.db.indexes.run(namespace, &view, sk, q, false).await?),
            None => value_at(reader, TREE_PK, sk, false, READ_BYTES_MAX)?,
        },
    };
    check_timeout(query)?;
    let wants_etag = headers.get("x-firebase-etag").is_some_and(|v| v == "true");
    let if_none_match = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok());
    // The tag hashes the whole value: only when the request uses it.
    let tag = (wants_etag || if_none_match.is_some()).then(|| etag_text(&etag(&value)));
    if let (Some(tag), Some(asked)) = (&tag, if_none_match) {
        if asked.trim_matches('"') == tag {
            let mut response = StatusCode::NOT_MODIFIED.into_response_with_etag(tag);
            response.headers_mut().insert(header::CONTENT_LENGTH, 0.into());
            return Ok(response);
        }
    }
    // Whenever it was computed: asked for, or a conditional request (the
    // Admin SDKs' `get_if_changed` reads the new tag from the 200, as
    // Firebase sends it).
    let extra = match tag {
        Some(tag) => vec![(header::ETAG, tag)],
        None => Vec::new(),
    };
    json_response(StatusCode::OK, &value, query, extra)
}

trait WithEtag {
    fn into_response_with_etag(self, tag: &str) -> Response;
}

impl WithEtag for StatusCode {
    fn into_response_with_etag(self, tag: &str) -> Response {
        let mut response = axum::response::IntoResponse::into_response(self);
        if let Ok(value) = tag.parse() {
            response.headers_mut().insert(header::ETAG, value);
        }
        response
    }
}

/// `timeout=3s|300ms|1min`: how long a request may take, at most 15 minutes (Firebase's bound).
fn check_timeout(query: &Query) -> Result<Option<Duration>, FbError> {
    let Some(text) = query.get("timeout") else { return Ok(None) };
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = digits.parse().map_err(|_| FbError::bad(format!("timeout must be a number with ms, s or min, got {text:?}")))?;
    let ms = match unit {
        "ms" => n,
        "s" => n.saturating_mul(1000),
        "min" => n.saturating_mul(60_000),
        _ => return Err(FbError::bad(format!("timeout must be a number with ms, s or min, got {text:?}"))),
    };
    if ms == 0 || ms > 15 * 60_000 {
        return Err(FbError::bad("timeout must be between 1ms and 15min"));
    }
    Ok(Some(Duration::from_millis(ms)))
}

fn check_write_size_limit(query: &Query) -> Result<(), FbError> {
    match query.get("writeSizeLimit") {
        None | Some("tiny" | "small" | "medium" | "large" | "unlimited") => Ok(()),
        Some(other) => Err(FbError::bad(format!("writeSizeLimit must be tiny, small, medium, large or unlimited, got {other:?}"))),
    }
}

/// Who answered a write: this node, or the holder it was forwarded to
/// (the partition was let go between the check in `handle` and the write).
enum Written {
    Here(Response),
    ByHolder(Response),
}

impl Written {
    fn response(self) -> Response {
        match self {
            Written::Here(response) | Written::ByHolder(response) => response,
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn set(
    state: &Firebase,
    namespace: &Namespace,
    caller: &Caller,
    sk: String,
    query: &Query,
    headers: &HeaderMap,
    incoming: &Incoming<'_>,
    body: Bytes,
    merge: bool,
) -> Result<Written, FbError> {
    check_write_size_limit(query)?;
    let timeout =
        check_timeout(query)?.unwrap_or(Duration::from_millis(crate::limits::WAIT_MS_DEFAULT)).min(Duration::from_millis(crate::limits::WAIT_MS_MAX));
    validate_write(&sk, &body, merge).map_err(FbError::bad)?;
    let written: Value = serde_json::from_slice(&body).expect("validated above");
    // Any if-match makes the write conditional: a tag that is not one (not
    // even text) matches no value, so the write fails (412), never goes
    // through unconditioned.
    let condition = headers.get(header::IF_MATCH).map(|v| Condition::IfTreeHash(v.to_str().ok().and_then(parse_etag).unwrap_or([0; 32])));
    let write_id = incoming.write_id().map_err(FbError::bad)?;
    let write = TreeWrite { sk: sk.clone(), value: body.clone(), written: &written, merge, condition, write_id, wait: timeout };
    match commit(state, namespace, caller, write).await? {
        Committed::Applied { .. } => {}
        Committed::ConditionFailed => {
            // The current value and its ETag go only to a caller the rules
            // let read it; any other caller learns only that the ETag failed.
            let view = tree_view(namespace)?;
            if !may_read(state, namespace, caller, &view, &sk)? {
                return Err(FbError::new(StatusCode::PRECONDITION_FAILED, "The ETag does not match the current value"));
            }
            let current = value_at(&view.reader, TREE_PK, &sk, false, READ_BYTES_MAX)?;
            let tag = etag_text(&etag(&current));
            let body = serde_json::to_string(&current).expect("a Value serializes");
            let mut response = axum::response::IntoResponse::into_response((
                StatusCode::PRECONDITION_FAILED,
                [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
                body,
            ));
            if let Ok(value) = tag.parse() {
                response.headers_mut().insert(header::ETAG, value);
            }
            return Ok(Written::Here(response));
        }
        // Let go since the check in `handle`: nothing was written; a holder takes it.
        Committed::Forward => {
            let partition = namespace.partition_of(TREE_PK);
            let response = to_holder(&state.app, incoming, &namespace.name, partition, body).await.map_err(FbError::from)?;
            return Ok(Written::ByHolder(response));
        }
    }
    // What was written, as it now reads (server values resolved), and its
    // ETag when asked, or when the write was conditional (`if-match`: the
    // Admin SDKs' `set_if_unchanged` reads the new tag from the 200).
    let wants_etag = headers.get("x-firebase-etag").is_some_and(|v| v == "true") || headers.contains_key(header::IF_MATCH);
    let answer = if has_server_values(&written) || wants_etag {
        let view = tree_view(namespace)?;
        let reader = &view.reader;
        if merge {
            let mut out = serde_json::Map::new();
            for key in written.as_object().expect("validated").keys() {
                let at = path::join(&sk, &path::sk_of(&path::parse_relative(key).expect("validated")));
                out.insert(key.clone(), value_at(reader, TREE_PK, &at, false, READ_BYTES_MAX)?);
            }
            Value::Object(out)
        } else {
            value_at(reader, TREE_PK, &sk, false, READ_BYTES_MAX)?
        }
    } else {
        let mut plain = written;
        crate::tree::value::strip_priorities(&mut plain);
        plain
    };
    let extra = if wants_etag && !merge { vec![(header::ETAG, etag_text(&etag(&answer)))] } else { Vec::new() };
    json_response(StatusCode::OK, &answer, query, extra).map(Written::Here)
}
