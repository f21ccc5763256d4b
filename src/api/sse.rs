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
//!   slow watch), `data: {"position","reason"}`: the full state of what
//!   is watched follows as `put` events without ids, closed by
//!   `event: synced` with `id:` and `data: {"position"}`;
//! - `event: progress`, `id:`, `data: {"position"}`: nothing you watch
//!   changed up to this position;
//! - `event: keep-alive`, `data: null`;
//! - `event: cancel`, `data: {"reason","position","message"}`: the server
//!   ends the watch (`slow_consumer` in `mode=log`); resume from
//!   `position`.

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use bytes::Bytes;

use super::params::Params;
use crate::auth::{Identity, Verb};
use crate::edge::{self, require, require_all_of, ApiError, AppState, Caller, Encoder, SessionFuture, Transport, SSE_HEADERS};
use crate::fanout::{Cursor, Event, Filter, Mode};
use crate::limits;
use crate::watch::{self, ChangeId, ConnectionId, Message, Outlet};

/// What a watch asks for, from query parameters or a WebSocket `sub`.
pub(super) struct WatchRequest {
    pub filter: Filter,
    pub from: watch::Since,
    pub mode: Mode,
}

impl WatchRequest {
    pub(super) fn parse(
        pk: Option<&str>,
        prefix: Option<&str>,
        sk: Option<&str>,
        from: Option<&str>,
        mode: Option<&str>,
    ) -> Result<WatchRequest, ApiError> {
        let filter = match (pk, prefix, sk) {
            (None, None, None) => Filter::Namespace,
            (None, _, _) => return Err(ApiError::bad_request("invalid_parameter", "prefix and sk need pk: they select records of one pk")),
            (Some(_), Some(_), Some(_)) => return Err(ApiError::bad_request("invalid_parameter", "give prefix or sk, not both")),
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
            None | Some("now") => watch::Since::Now,
            Some("snapshot") => watch::Since::CurrentState,
            Some(position) => watch::Since::Cursor(Cursor::parse(position).map_err(|e| ApiError::bad_request("invalid_position", e.to_string()))?),
        };
        let mode = match mode {
            None | Some("state") => Mode::State,
            Some("log") => Mode::Log,
            Some(other) => return Err(ApiError::bad_request("invalid_parameter", format!("mode must be state or log, got {other:?}"))),
        };
        Ok(WatchRequest { filter, from, mode })
    }
}

/// Messages waiting between a session and its SSE body.
const SSE_MESSAGES_PENDING_MAX: usize = 64;

/// What every one of Tern's SSE streams starts with: how long a browser
/// waits before it reconnects.
pub(super) const SSE_PREAMBLE: &[u8] = b"retry: 1000\n\n";

/// Tern's own SSE events (`sse_bytes`), as an edge `Encoder`: a stream
/// that starts with `SSE_PREAMBLE` and ends when its session does.
pub(crate) struct TernEvents;

impl Encoder for TernEvents {
    fn preamble(&self) -> Option<Bytes> {
        Some(Bytes::from_static(SSE_PREAMBLE))
    }

    fn encode(&mut self, message: &Message) -> Option<Bytes> {
        Some(sse_bytes(message))
    }

    fn ended(&self) -> bool {
        false
    }
}

/// HTTP/1.1 (and HTTP/2 served by hyper, in tests that serve the router
/// alone): the session runs in the response body (`edge::body`). The
/// API's own HTTP/2 connections run watches in the connection's task
/// instead (`http/h2c/watches.rs`), set up by the same `open_sse`.
pub(super) async fn sse(
    State(app): State<AppState>,
    Caller(identity): Caller,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let connection = transport.map_or(ConnectionId(0), |Extension(t)| t.connection);
    // A few messages of slack between the session and the socket; beyond
    // that the session waits for the client (its queue keeps the bound).
    let (outlet, messages) = Outlet::new(SSE_MESSAGES_PENDING_MAX);
    let session = open_sse(&app, &identity, &ns, query.as_deref(), &headers, connection, outlet).await?;
    let body = axum::body::Body::from_stream(edge::body(session, messages, TernEvents));
    Ok((SSE_HEADERS, body).into_response())
}

/// Decides a watch of `pk` (None: the whole namespace) for `identity`. A
/// namespace-wide watch needs the watch verb on *all* of the namespace: a
/// token scoped to a pk prefix, or with a carve-out inside its grant
/// (`{app, secrets/, []}` under `{app, "", [admin]}`), is refused, not
/// filtered (docs/security.md). Before this was decided at pk "" alone, and
/// the carve-out's records streamed to it (issue 35).
pub(super) fn require_watch(identity: &Identity, ns: &str, pk: Option<&str>) -> Result<(), ApiError> {
    match pk {
        Some(pk) => require(identity, ns, pk, Verb::Watch),
        None => require_all_of(identity, ns, "", Verb::Watch),
    }
}

/// Validates a watch request (query and `Last-Event-ID`) and sets up its
/// session, which leaves its messages in `outlet`; errors come before
/// anything is streamed, so they get a status.
pub(crate) async fn open_sse(
    app: &AppState,
    identity: &Identity,
    ns: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    connection: ConnectionId,
    outlet: Outlet,
) -> Result<SessionFuture, ApiError> {
    let params = Params::parse(query, &["pk", "prefix", "sk", "from", "mode", "access_token"])?;
    require_watch(identity, ns, params.str("pk"))?;
    let last_event_id = match headers.get("last-event-id") {
        Some(value) => {
            Some(value.to_str().map_err(|_| ApiError::bad_request("invalid_position", "Last-Event-ID is not a position (not visible ASCII)"))?)
        }
        None => None,
    };
    let from = last_event_id.filter(|id| !id.is_empty()).or(params.str("from"));
    let request = WatchRequest::parse(params.str("pk"), params.str("prefix"), params.str("sk"), from, params.str("mode"))?;
    let (session, start) = app.node.open_watch(ns, request.filter, request.from, request.mode, outlet, connection).await?;
    // Ends when the credential does (a revoked key, an expired JWT).
    Ok(app.access.guard(identity, Box::pin(session.run(start))))
}

/// One message in SSE form.
pub(super) fn sse_bytes(message: &Message) -> Bytes {
    let mut out = Vec::with_capacity(128);
    match message {
        Message::Change { event, id: id @ ChangeId::Event } => {
            // The same frame for every watch of the event's partition:
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
