//! Watches over Server-Sent Events: `GET /v1/ns/{ns}/watch`.
//!
//! Query: `pk` (one pk; omit for the whole namespace), `prefix` (an sk
//! prefix of that pk) or `sk` (one record), `from` (`now`, a position, or
//! `snapshot`; default `now`), `mode` (`state`, default, or `log`). A
//! `Last-Event-ID` header (what browsers send when they reconnect) takes the
//! place of `from`.
//!
//! The stream (each event ends with a blank line):
//! - `event: put` / `event: delete`, `id: <position after it>`,
//!   `data: {"pk","sk","value","version"}` (`value` is null for a delete);
//! - `event: snapshot` (asked for) or `event: reset` (history gone, or a
//!   slow subscriber), `data: {"position","reason"}`: the full state of what
//!   is watched follows as `put` events without ids, closed by
//!   `event: synced` with `id:` and `data: {"position"}`;
//! - `event: progress`, `id:`, `data: {"position"}`: nothing you watch
//!   changed up to this position;
//! - `event: keep-alive`, `data: null`;
//! - `event: cancel`, `data: {"reason","position","message"}`: the server
//!   ends the subscription (`slow_consumer` in `mode=log`); resume from
//!   `position`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use axum::extract::{Path, RawQuery, State};
use axum::Extension;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::access::{require, Caller};
use crate::auth::{Identity, Verb};
use super::error::ApiError;
use super::params::Params;
use super::AppState;
use crate::limits;
use crate::fanout::{Cursor, Event, Filter, Mode};
use crate::watch::{self, ChangeId, ConnectionId, Message, Outbox, OutboxReader, Tagged, WatchError};

/// What a watch asks for, from query parameters or a WebSocket `sub`.
pub struct WatchRequest {
    pub filter: Filter,
    pub from: watch::From,
    pub mode: Mode,
}

impl WatchRequest {
    pub fn parse(
        pk: Option<&str>,
        prefix: Option<&str>,
        sk: Option<&str>,
        from: Option<&str>,
        mode: Option<&str>,
    ) -> Result<WatchRequest, ApiError> {
        let filter = match (pk, prefix, sk) {
            (None, None, None) => Filter::Namespace,
            (None, _, _) => {
                return Err(ApiError::bad_request("invalid_parameter", "prefix and sk need pk: they select records of one pk"))
            }
            (Some(_), Some(_), Some(_)) => {
                return Err(ApiError::bad_request("invalid_parameter", "give prefix or sk, not both"))
            }
            (Some(pk), prefix, sk) => {
                limits::check_pk(pk)?;
                match (prefix, sk) {
                    (Some(prefix), None) => {
                        limits::check_sk(prefix)?;
                        Filter::Prefix { pk: pk.to_string(), prefix: prefix.to_string() }
                    }
                    (None, Some(sk)) => {
                        limits::check_sk(sk)?;
                        Filter::Record { pk: pk.to_string(), sk: sk.to_string() }
                    }
                    _ => Filter::Pk { pk: pk.to_string() },
                }
            }
        };
        let from = match from {
            None | Some("now") => watch::From::Now,
            Some("snapshot") => watch::From::CurrentState,
            Some(position) => watch::From::Cursor(
                Cursor::parse(position).map_err(|e| ApiError::bad_request("invalid_position", e.to_string()))?,
            ),
        };
        let mode = match mode {
            None | Some("state") => Mode::State,
            Some("log") => Mode::Log,
            Some(other) => {
                return Err(ApiError::bad_request("invalid_parameter", format!("mode must be state or log, got {other:?}")))
            }
        };
        Ok(WatchRequest { filter, from, mode })
    }
}

impl From<WatchError> for ApiError {
    fn from(e: WatchError) -> ApiError {
        let message = e.to_string();
        match e {
            WatchError::NamespaceNotFound(ns) => ApiError::unknown_namespace(&ns),
            WatchError::InvalidPosition(_) => ApiError::bad_request("invalid_position", message),
            WatchError::Unavailable(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "partition_unavailable", message),
            WatchError::NotHeld { partition } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_held", message).with("partition", partition)
            }
            WatchError::TooMany { .. } => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_subscribers", message),
        }
    }
}

/// Messages joined into one body chunk at most.
const MESSAGES_PER_CHUNK_MAX: usize = 64;
/// Messages waiting between a session and its SSE body.
const SSE_MESSAGES_PENDING_MAX: usize = 64;

/// What every SSE response starts with: how long a browser waits before it
/// reconnects.
pub const SSE_PREAMBLE: &[u8] = b"retry: 1000\n\n";

/// The SSE response's headers.
pub const SSE_HEADERS: [(header::HeaderName, &str); 3] = [
    (header::CONTENT_TYPE, "text/event-stream"),
    (header::CACHE_CONTROL, "no-cache"),
    (header::HeaderName::from_static("x-accel-buffering"), "no"),
];

/// How a watch stream's messages become its bytes when they are not
/// Tern's own SSE frames (`sse_bytes`): Firebase's streaming events
/// (`api/firebase/stream.rs`). A transport that runs watch sessions asks
/// it for each message's bytes, and ends the stream once it `ended`.
pub trait Encoder: Send + 'static {
    /// The bytes to send for `message`; none when it sends nothing.
    fn encode(&mut self, message: &Message) -> Option<Bytes>;
    /// The stream is over: its last event was encoded (e.g. a `cancel`).
    fn ended(&self) -> bool;
}

/// A watch's session, set up and not yet running: the transport that
/// drives it polls it.
pub type SessionFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// HTTP/1.1 (and HTTP/2 served by hyper, in tests that serve the router
/// alone): the session runs in the response body (`driven`). The API's
/// own HTTP/2 connections run watches in the connection's task instead
/// (`h2c/watches.rs`), set up by the same `open_sse`.
pub async fn sse(
    State(app): State<AppState>,
    Caller(identity): Caller,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
    connection: Option<Extension<ConnectionId>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let connection = connection.map_or(ConnectionId(0), |Extension(id)| id);
    // A few messages of slack between the session and the socket; beyond
    // that the session waits for the client (its queue keeps the bound).
    let (outbox, messages) = Outbox::new(SSE_MESSAGES_PENDING_MAX);
    let session = open_sse(&app, &identity, &ns, query.as_deref(), &headers, connection, outbox).await?;
    let first = futures::stream::once(async { Ok::<Bytes, Infallible>(Bytes::from_static(SSE_PREAMBLE)) });
    let rest = driven(session, messages);
    let body = axum::body::Body::from_stream(futures::StreamExt::chain(first, rest));
    Ok((SSE_HEADERS, body).into_response())
}

/// Validates a watch request (query and `Last-Event-ID`) and sets up its
/// session, which leaves its messages in `outbox`; errors come before
/// anything is streamed, so they get a status.
pub async fn open_sse(
    app: &AppState,
    identity: &Identity,
    ns: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    connection: ConnectionId,
    outbox: Outbox,
) -> Result<SessionFuture, ApiError> {
    let params = Params::parse(query, &["pk", "prefix", "sk", "from", "mode", "access_token"])?;
    // A namespace-wide watch needs the watch verb on the whole namespace: a
    // token scoped to a pk prefix is refused, not filtered (docs/security.md).
    require(identity, ns, params.str("pk").unwrap_or_default(), Verb::Watch)?;
    let last_event_id = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| ApiError::bad_request("invalid_position", "Last-Event-ID is not a position (not visible ASCII)"))?,
        ),
        None => None,
    };
    let from = last_event_id.filter(|id| !id.is_empty()).or(params.str("from"));
    let request = WatchRequest::parse(params.str("pk"), params.str("prefix"), params.str("sk"), from, params.str("mode"))?;
    let (session, start) = app.node.open_watch(ns, request.filter, request.from, request.mode, outbox, connection).await?;
    Ok(Box::pin(session.run(start)))
}

/// The session's messages as body chunks, from a stream that also runs the
/// session: the connection's task (HTTP/1.1) does both, so a delivery wakes
/// one task, not two. Whatever is queued goes out
/// as one chunk: one write for a burst. The body ends when the session has
/// ended and everything it sent went out; a client that goes away drops the
/// body, and the session with it.
fn driven(
    session: SessionFuture,
    messages: OutboxReader,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> {
    let mut session = Some(session);
    let mut batch = Vec::with_capacity(MESSAGES_PER_CHUNK_MAX);
    futures::stream::poll_fn(move |cx| {
        if let Some(running) = session.as_mut() {
            if running.as_mut().poll(cx).is_ready() {
                session = None;
            }
        }
        if let Some(chunk) = take_chunk(&messages, &mut batch) {
            Poll::Ready(Some(Ok(chunk)))
        } else if session.is_none() {
            Poll::Ready(None)
        } else {
            // The session waits for its queue, a timer or room in the
            // outbox; each wakes this task.
            Poll::Pending
        }
    })
}

/// What the session left, up to `MESSAGES_PER_CHUNK_MAX` messages, as one
/// body chunk (one write for a burst); none if it left nothing.
fn take_chunk(messages: &OutboxReader, batch: &mut Vec<Tagged>) -> Option<Bytes> {
    match messages.take(batch, MESSAGES_PER_CHUNK_MAX) {
        0 => None,
        // The common case (one event): no second copy.
        1 => batch.pop().map(|tagged| sse_bytes(&tagged.message)),
        _ => {
            let mut chunk = Vec::new();
            for tagged in batch.drain(..) {
                chunk.extend_from_slice(&sse_bytes(&tagged.message));
            }
            Some(Bytes::from(chunk))
        }
    }
}

/// One message in SSE form.
pub fn sse_bytes(message: &Message) -> Bytes {
    let mut out = Vec::with_capacity(128);
    match message {
        Message::Change { event, id: id @ ChangeId::Event } => {
            // The same frame for every subscriber of the event's partition:
            // encoded by the first, shared (not copied) by the rest.
            return event.sse_frame(|| change_frame(event, id.text(event)));
        }
        Message::Change { event, id } => return change_frame(event, id.text(event)),
        Message::Begin { position, reason } => {
            let name = if *reason == "snapshot" { "snapshot" } else { "reset" };
            let data = serde_json::json!({ "position": position, "reason": reason });
            out.extend_from_slice(format!("event: {name}\ndata: {data}").as_bytes());
        }
        Message::Synced { position } => {
            let data = serde_json::json!({ "position": position });
            out.extend_from_slice(format!("event: synced\nid: {position}\ndata: {data}").as_bytes());
        }
        Message::Progress { position } => {
            let data = serde_json::json!({ "position": position });
            out.extend_from_slice(format!("event: progress\nid: {position}\ndata: {data}").as_bytes());
        }
        Message::KeepAlive => out.extend_from_slice(b"event: keep-alive\ndata: null"),
        Message::Reply(text) => unreachable!("SSE sessions send no transport replies: {text}"),
        Message::Cancel { reason, position, message } => {
            let data = serde_json::json!({ "reason": reason, "position": position, "message": message });
            out.extend_from_slice(format!("event: cancel\ndata: {data}").as_bytes());
        }
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// A `put` or `delete` event, with its `id` if it has one.
fn change_frame(event: &Event, id: Option<&str>) -> Bytes {
    let mut out = Vec::with_capacity(32 + id.map_or(0, str::len) + event.data.len());
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.kind.name().as_bytes());
    if let Some(id) = id {
        out.extend_from_slice(b"\nid: ");
        out.extend_from_slice(id.as_bytes());
    }
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(&event.data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}
