//! A partition's outbox (what procedures emitted, docs/procedures.md):
//!
//! - `GET /v1/ns/{ns}/outbox?partition=P&after=OFFSET.INDEX&limit=N` reads it
//!   (not yet published);
//! - `DELETE /v1/ns/{ns}/outbox?partition=P&below=OFFSET` trims what the
//!   caller took, where no publisher does (the embedded log).
//!
//! Reading takes read on the namespace; trimming takes write.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Value};

use super::keys::namespace as namespace_of;
use super::params::Params;
use super::procedures::forward_get;
use crate::auth::Verb;
use crate::edge::{require_all_of, to_holder, ApiError, AppState, Caller, Incoming};
use crate::node::reserved::Writer;
use crate::node::write::{Entry, WriteError, WriteRequest};
use crate::partition::Namespace;
use crate::procedure::outbox::OutboxMessage;

/// Most outbox messages one read returns.
const OUTBOX_LIMIT_MAX: usize = 1_000;
const OUTBOX_LIMIT_DEFAULT: usize = 100;
/// Most bytes of messages in one page (the first always: a dead letter is up
/// to 7 MiB); a page cut short says where the next starts (`next_after`).
const OUTBOX_PAGE_BYTES_MAX: usize = 16 << 20;
/// Trim ticks one `DELETE .../outbox` appends at most: each removes up to
/// 50,000 messages (`apply/batch.rs`), so 1,000,000 a call.
const TRIM_ROUNDS_MAX: usize = 20;
/// How long a trim waits for its tick to be applied here, each round.
const TRIM_APPLIED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// `GET /v1/ns/{ns}/outbox?partition=P&after=OFFSET.INDEX&limit=N`.
pub(super) async fn read(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require_all_of(&identity, &ns, "", Verb::Read)?;
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
    let entries = reader.outbox_from(from_offset, from_index, limit, OUTBOX_PAGE_BYTES_MAX)?;
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
    let partition =
        params.str("partition").ok_or_else(|| ApiError::bad_request("invalid_request", "outbox calls name their partition: ?partition=P"))?;
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
pub(super) async fn trim(
    State(state): State<AppState>,
    Caller(identity): Caller,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    require_all_of(&identity, &ns, "", Verb::Write)?;
    let namespace = namespace_of(&state, &ns)?;
    let params = Params::parse(query.as_deref(), &["partition", "below"])?;
    let partition = outbox_partition(&params, &namespace)?;
    let below = params.str("below").ok_or_else(|| {
        ApiError::bad_request("invalid_request", "say what was taken: ?below=OFFSET (the input offset of the first message not taken)")
    })?;
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
        let uri: Uri = format!("/v1/ns/{ns}/outbox?{}", query.unwrap_or_default())
            .parse()
            .map_err(|e| ApiError::bad_request("invalid_request", format!("{e}")))?;
        return to_holder(&state, &Incoming::new(Method::DELETE, &uri, &headers), &namespace.name, partition, Bytes::new()).await;
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
                    format!(
                        "the trim is in the log at {ns}:{partition}:{version} but was not applied within {} ms; it will be",
                        TRIM_APPLIED_WAIT.as_millis()
                    ),
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
    Ok(view.reader.outbox_oldest_offset()?.is_some_and(|oldest| oldest < below))
}
