//! A client's write through the write path (`node::write`): its
//! conditions and write id from the request, its receipt rendered.

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;

use super::params::Params;
use super::render;
use super::render::json_response;
use crate::codec::{Condition, Mutation, Op};
use crate::edge::{to_holder, ApiError, AppState, Incoming};
use crate::node::reserved::Writer;
use crate::node::write::{Durability, Entry, Receipt, Wait, WriteRequest};
use crate::partition::Namespace;

/// The one rule for conditions, from query parameters or batch ops:
/// at most one of `if_version` and `if_absent`. `code` names the error.
pub(super) fn condition_of(if_version: Option<u64>, if_absent: bool, code: &'static str) -> Result<Option<Condition>, ApiError> {
    match (if_version, if_absent) {
        (Some(_), true) => Err(ApiError::bad_request(code, "use if_version or if_absent, not both")),
        (Some(v), false) => Ok(Some(Condition::IfVersion(v))),
        (None, true) => Ok(Some(Condition::IfAbsent)),
        (None, false) => Ok(None),
    }
}

pub(super) fn condition(params: &Params) -> Result<Option<Condition>, ApiError> {
    condition_of(params.u64("if_version")?, params.bool("if_absent")?, "invalid_parameter")
}

/// The write id of a request: its `Idempotency-Key` scoped to the caller
/// (a retry with the same key within the window is applied once), or none.
pub(super) fn write_id(incoming: &Incoming<'_>) -> Result<Bytes, ApiError> {
    incoming.write_id().map_err(|e| ApiError::bad_request("invalid_idempotency_key", e))
}

/// Who the request is from, as a record's history names its writer
/// (`codec::Mutation::writer`): `root`, `key:<id>`, `jwt:<sub>` (cut to
/// `WRITER_BYTES_MAX` bytes at a character boundary), or empty without
/// authentication.
pub(super) fn writer_of(incoming: &Incoming<'_>) -> String {
    let mut writer = incoming.principal.clone().unwrap_or_default();
    if writer.len() > crate::limits::WRITER_BYTES_MAX {
        let cut = (0..=crate::limits::WRITER_BYTES_MAX).rev().find(|i| writer.is_char_boundary(*i)).unwrap_or(0);
        writer.truncate(cut);
    }
    writer
}

pub(super) async fn write_one(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &Namespace,
    op: Op,
    params: &Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let partition = namespace.partition_of(&op.pk);
    let mutation = Mutation { write_id: write_id(incoming)?, ops: vec![op], writer: writer_of(incoming), ..Default::default() };
    write_records(state, incoming, namespace, partition, mutation, params, body).await
}

/// A client's write (one record, or a batch) through the write path
/// (`node::write`, which decides durability, ripcord and where), answered
/// as its receipt says: 200 with the version, 202 when journaled, or the
/// holder's answer when only a holder can tell the outcome.
pub(super) async fn write_records(
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
    let request_timeout = request.timeout;
    request.forwarded = incoming.forwarded_by.is_some();
    if params.wait_applied()? {
        request.wait = Wait::Applied;
    }
    match state.node.write(namespace, request).await? {
        Receipt::Sequenced { version, duplicate } => {
            Ok(json_response(StatusCode::OK, render::write_ack(version, &namespace.name, partition, duplicate)))
        }
        Receipt::Journaled { write_id, ripcord } => Ok(journaled(&write_id, ripcord)),
        Receipt::Forward { timeout } if timeout < request_timeout => {
            // This node waited behind its journaled writes first: the holder
            // gets what is left of the caller's timeout, not all of it again.
            let path_and_query = with_timeout_ms(incoming.path_and_query, (timeout.as_millis() as u64).max(1));
            let incoming = Incoming {
                method: incoming.method.clone(),
                path_and_query: &path_and_query,
                forwarded_by: incoming.forwarded_by,
                idempotency_key: incoming.idempotency_key,
                headers: incoming.headers,
                principal: incoming.principal.clone(),
            };
            to_holder(state, &incoming, &namespace.name, partition, body).await
        }
        Receipt::Forward { .. } => to_holder(state, incoming, &namespace.name, partition, body).await,
    }
}

/// `path_and_query` with its `timeout_ms` set to `timeout_ms`.
fn with_timeout_ms(path_and_query: &str, timeout_ms: u64) -> String {
    let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
    let timeout = format!("timeout_ms={timeout_ms}");
    let pairs: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some("timeout_ms"))
        .chain(std::iter::once(timeout.as_str()))
        .collect();
    format!("{path}?{}", pairs.join("&"))
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_forwarded_write_carries_the_timeout_left() {
        use super::with_timeout_ms;
        assert_eq!(with_timeout_ms("/v1/ns/a/kv/k", 7), "/v1/ns/a/kv/k?timeout_ms=7");
        assert_eq!(with_timeout_ms("/v1/ns/a/kv/k?if_absent=true&timeout_ms=5000", 7), "/v1/ns/a/kv/k?if_absent=true&timeout_ms=7");
        assert_eq!(with_timeout_ms("/v1/ns/a/kv/k?timeout_ms=5000&wait=applied&", 12), "/v1/ns/a/kv/k?wait=applied&timeout_ms=12");
        assert_eq!(with_timeout_ms("/v1/ns/timeout_ms/kv/k?x_timeout_ms=1", 3), "/v1/ns/timeout_ms/kv/k?x_timeout_ms=1&timeout_ms=3");
    }
}
