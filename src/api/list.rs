//! Listing one pk's records: `GET /v1/ns/{ns}/kv/{pk}?prefix=&start=&end=&limit=&cursor=&reverse=`.

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use bytes::Bytes;
use serde_json::json;

use super::params::Params;
use super::records::{partition_param, reads_here};
use super::render;
use super::render::json_response;
use crate::edge::{to_holder, ApiError, AppState, Incoming};
use crate::limits;
use crate::node::read::{await_consistency, check_position};
use crate::partition::Namespace;
use crate::store::{Record, SkRange};

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

pub(super) async fn list(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &Namespace,
    pk: String,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["prefix", "start", "end", "limit", "cursor", "reverse", "after", "consistency", "timeout_ms", "partition"])?;
    let limit = params.list_limit()?;
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
        return to_holder(state, incoming, &namespace.name, partition, Bytes::new()).await;
    }
    let consistency = params.consistency()?;
    check_position(namespace, &consistency, &[partition], incoming.forwarded_by.is_some())?;
    await_consistency(&state.node, namespace, &[partition], &consistency, params.timeout()?).await?;
    let view = namespace.handle(partition).read_view()?;
    // A page ends early rather than pass the answer bound (its cursor goes on from there).
    let (records, more) = view.reader.list(&pk, &range, limit, limits::ANSWER_BYTES_MAX)?;
    let position = crate::position::Position::single_string(&namespace.name, partition, view.applied_next);
    let next_cursor = if more { records.last().map(|r| encode_page_token(&r.sk)) } else { None };
    let records: Vec<Option<Record>> = records.into_iter().map(Some).collect();
    let body = render::items(&records, &[("next_cursor", json!(next_cursor)), ("position", json!(position))]);
    Ok(json_response(StatusCode::OK, body))
}
