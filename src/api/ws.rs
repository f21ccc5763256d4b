//! Subscriptions over WebSocket: `GET /v1/ws`, many on one connection.
//!
//! Client messages (JSON text frames):
//! - `{"type":"sub","id":"c1","ns":"default","pk"?,"prefix"?,"sk"?,"from"?,"mode"?}`
//!   (the fields mean what the SSE query parameters mean; `id` is the
//!   client's name for the watch, 1-128 characters, unique on the
//!   connection);
//! - `{"type":"unsub","id":"c1"}`.
//!
//! Server messages, each naming the watch in `id`:
//! `subscribed`; `put` / `delete` (`pk, sk, value, version`, `position` =
//! the cursor after it, absent inside a snapshot or conflated run);
//! `snapshot` / `reset` (`position`, `reason`) then puts, then `synced`
//! (`position`); `progress` (`position`); `keep-alive`; `cancel` (`reason`,
//! `position`, `message`); `unsubscribed`; `error` (`error: {code, message}`:
//! a bad request, the connection stays open).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use axum::extract::ws::{Message as WsMessage, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use futures::future::{AbortHandle, Abortable};
use futures::stream::{FuturesUnordered, SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::sse::WatchRequest;
use crate::auth::Identity;
use crate::edge::{ApiError, AppState, Caller, Transport};
use crate::watch::{self, ConnectionId, Message, Outlet, OutletReader, Tag, Tagged};

/// Most watches on one connection.
pub(super) const WATCHES_PER_CONNECTION_MAX: usize = 1000;
/// Largest client message: watches are small.
const CLIENT_MESSAGE_BYTES_MAX: usize = 64 * 1024;
/// Client messages read but not yet acted on (then the reader waits, and
/// TCP pushes back on the client).
const CLIENT_MESSAGES_PENDING_MAX: usize = 16;
/// Messages waiting for the socket, all watches together.
const OUTBOUND_MESSAGES_MAX: usize = 256;
const WATCH_ID_CHARS_MAX: usize = 128;
/// Socket buffers per connection. tungstenite's defaults (128 KiB each) cost
/// ~140 KiB of memory per idle watch; messages here are small, and the
/// writer batches what is queued into one flush.
const READ_BUFFER_BYTES: usize = 4 * 1024;
const WRITE_BUFFER_BYTES: usize = 16 * 1024;
/// Frames fed to the socket before one flush (one write for a burst).
const FRAMES_PER_FLUSH_MAX: usize = 256;

pub(super) async fn upgrade(
    State(app): State<AppState>,
    Caller(identity): Caller,
    transport: Option<Extension<Transport>>,
    ws: WebSocketUpgrade,
) -> Response {
    let connection = transport.as_ref().map_or(ConnectionId(0), |t| t.connection);
    let slot = transport.and_then(|Extension(t)| t.slot);
    ws.max_message_size(CLIENT_MESSAGE_BYTES_MAX).read_buffer_size(READ_BUFFER_BYTES).write_buffer_size(WRITE_BUFFER_BYTES).on_upgrade(
        move |socket| async move {
            // The socket counts among the node's connections while it is served.
            let _slot = slot;
            serve(app, identity, socket, connection).await
        },
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Sub {
    id: String,
    ns: String,
    pk: Option<String>,
    prefix: Option<String>,
    sk: Option<String>,
    from: Option<String>,
    mode: Option<String>,
}

/// Every `type` of a client message: what `tests/it/isolation.rs` walks
/// with every kind of principal (through `http::messages`). The unit test
/// `message_types_are_every_client_message` keeps it equal to the enum's
/// variants, so a message type added later is classified there or that
/// test fails.
pub(crate) const MESSAGE_TYPES: &[&str] = &["sub", "unsub"];

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum ClientMessage {
    Sub(Sub),
    Unsub { id: String },
}

/// A running watch: its session, polled by the connection's task,
/// ended when this is dropped.
struct Running {
    abort: AbortHandle,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.abort.abort();
    }
}

/// One task serves the whole connection's watches: it runs every
/// session, writes what they send, and acts on the client's messages. A put
/// that reaches many watches of the connection wakes this task once
/// and costs one flush, not a task wake-up and a write per watch.
/// The client's frames are read by a small task of their own, so a delivery
/// never polls the read side of the socket.
async fn serve(app: AppState, identity: Identity, socket: WebSocket, connection: ConnectionId) {
    let (mut sink, stream) = socket.split();
    let (frames_tx, mut frames) = mpsc::channel::<WsMessage>(CLIENT_MESSAGES_PENDING_MAX);
    let reader = AbortOnDrop(tokio::spawn(read_frames(stream, frames_tx)));
    // Sessions leave their messages here; this task encodes each (tagged
    // with its watch's id) and writes them out.
    let outlet = OutletReader::new(OUTBOUND_MESSAGES_MAX);
    let mut batch = Vec::with_capacity(FRAMES_PER_FLUSH_MAX);
    let mut running: HashMap<String, Running> = HashMap::new();
    let mut sessions = FuturesUnordered::new();
    // The connection ends when its credential does (a revoked key, an expired JWT).
    let mut lapsed = std::pin::pin!(app.access.lapsed(&identity));
    loop {
        let step = std::future::poll_fn(|cx| {
            if lapsed.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Step::Lapsed);
            }
            // Sessions first (only the woken ones are polled; a finished one
            // frees its id before the next client message is acted on),
            // then what they sent, then the client.
            while let Poll::Ready(Some(finished)) = sessions.poll_next_unpin(cx) {
                if let Ok(id) = finished {
                    running.remove(&id);
                }
            }
            if outlet.take(&mut batch, FRAMES_PER_FLUSH_MAX) > 0 {
                return Poll::Ready(Step::Write);
            }
            frames.poll_recv(cx).map(Step::Frame)
        })
        .await;
        let frame = match step {
            Step::Write => {
                if write_frames(&mut sink, &mut batch).await.is_err() {
                    break;
                }
                continue;
            }
            Step::Frame(frame) => frame,
            Step::Lapsed => {
                let error =
                    app.access.still_valid(&identity).err().unwrap_or_else(|| ApiError::bad_request("unauthenticated", "the credential lapsed"));
                batch.clear();
                batch.push(Tagged { tag: Tag::Only, message: Message::Reply(error_text(None, &error)) });
                let _ = write_frames(&mut sink, &mut batch).await;
                let _ = sink.send(WsMessage::Close(None)).await;
                break;
            }
        };
        let reply = match frame {
            Some(WsMessage::Text(text)) => handle(&app, &identity, connection, &text, &mut running, &mut sessions, &outlet).await,
            Some(WsMessage::Binary(_)) => error_text(None, &ApiError::bad_request("invalid_message", "send JSON text frames")),
            Some(WsMessage::Close(_)) | None => break,
            Some(_) => continue,
        };
        // What sessions sent before this reply goes out before it.
        outlet.take(&mut batch, OUTBOUND_MESSAGES_MAX);
        batch.push(Tagged { tag: Tag::Only, message: Message::Reply(reply) });
        if write_frames(&mut sink, &mut batch).await.is_err() {
            break;
        }
    }
    drop(reader);
}

/// What the connection's task does next.
enum Step {
    /// Write what was taken from the outlet (in `batch`).
    Write,
    /// Act on a client frame (none: the client is gone).
    Frame(Option<WsMessage>),
    /// The connection's credential is no longer valid: say so and close.
    Lapsed,
}

/// Passes the client's frames on until it closes or the connection ends.
async fn read_frames(mut stream: SplitStream<WebSocket>, frames: mpsc::Sender<WsMessage>) {
    while let Some(Ok(frame)) = stream.next().await {
        let close = matches!(frame, WsMessage::Close(_));
        if frames.send(frame).await.is_err() || close {
            return;
        }
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type SessionFuture = Abortable<Pin<Box<dyn Future<Output = String> + Send>>>;

/// Acts on one client message; returns the reply. A new watch's
/// session starts after its `subscribed` reply was written, so it follows
/// the reply.
async fn handle(
    app: &AppState,
    identity: &Identity,
    connection: ConnectionId,
    text: &str,
    running: &mut HashMap<String, Running>,
    sessions: &mut FuturesUnordered<SessionFuture>,
    outlet: &OutletReader,
) -> String {
    match serde_json::from_str::<ClientMessage>(text) {
        Err(e) => error_text(None, &ApiError::bad_request("invalid_message", format!("not a sub or unsub message: {e}"))),
        Ok(ClientMessage::Unsub { id }) => match running.remove(&id) {
            Some(_) => json!({"type": "unsubscribed", "id": id}).to_string(),
            None => error_text(Some(&id), &ApiError::bad_request("unknown_subscription", format!("no watch {id:?} on this connection"))),
        },
        Ok(ClientMessage::Sub(sub)) => {
            let id = sub.id.clone();
            match open(app, identity, connection, sub, running, outlet).await {
                Ok((session, start)) => {
                    let (abort, registration) = AbortHandle::new_pair();
                    let finished_id = id.clone();
                    let run: Pin<Box<dyn Future<Output = String> + Send>> = Box::pin(async move {
                        session.run(start).await;
                        finished_id
                    });
                    sessions.push(Abortable::new(run, registration));
                    running.insert(id.clone(), Running { abort });
                    json!({"type": "subscribed", "id": id}).to_string()
                }
                Err(error) => error_text(Some(&id), &error),
            }
        }
    }
}

/// Writes `batch` (emptied) as text frames with one flush.
async fn write_frames(sink: &mut SplitSink<WebSocket, WsMessage>, batch: &mut Vec<Tagged>) -> Result<(), axum::Error> {
    for tagged in batch.drain(..) {
        let id_json = match &tagged.tag {
            Tag::Id(id_json) => id_json,
            Tag::Only | Tag::Stream(_) => "null",
        };
        sink.feed(WsMessage::Text(ws_text(id_json, &tagged.message))).await?;
    }
    sink.flush().await
}

/// Validates a `sub` and sets up its session (not yet running).
async fn open(
    app: &AppState,
    identity: &Identity,
    connection: ConnectionId,
    sub: Sub,
    running: &HashMap<String, Running>,
    outlet: &OutletReader,
) -> Result<(watch::Session, watch::Start), ApiError> {
    if sub.id.is_empty() || sub.id.chars().count() > WATCH_ID_CHARS_MAX {
        return Err(ApiError::bad_request("invalid_message", format!("id must be 1-{WATCH_ID_CHARS_MAX} characters")));
    }
    if running.contains_key(&sub.id) {
        return Err(ApiError::bad_request("duplicate_subscription", format!("watch {:?} exists on this connection; unsub it first", sub.id)));
    }
    if running.len() >= WATCHES_PER_CONNECTION_MAX {
        return Err(ApiError::bad_request("too_many_subscriptions", format!("at most {WATCHES_PER_CONNECTION_MAX} watches per connection")));
    }
    // Decided per watch, like an SSE watch (`sse::open_sse`), with the
    // credential as it is now, not as it was at the upgrade.
    app.access.still_valid(identity)?;
    super::sse::require_watch(identity, &sub.ns, sub.pk.as_deref())?;
    let request = WatchRequest::parse(sub.pk.as_deref(), sub.prefix.as_deref(), sub.sk.as_deref(), sub.from.as_deref(), sub.mode.as_deref())?;
    let id_json: Arc<str> = serde_json::to_string(&sub.id).expect("a string serializes").into();
    let outlet = Outlet::tagged(outlet, Tag::Id(id_json));
    Ok(app.node.open_watch(&sub.ns, request.filter, request.from, request.mode, outlet, connection).await?)
}

fn error_text(id: Option<&str>, error: &ApiError) -> String {
    json!({"type": "error", "id": id, "error": {"code": error.code, "message": error.message}}).to_string()
}

/// One message as a WebSocket text frame; `id_json` is the watch id, JSON-encoded.
pub(super) fn ws_text(id_json: &str, message: &Message) -> Utf8Bytes {
    let text = match message {
        Message::Change { event, id } => {
            let mut out = String::with_capacity(64 + event.data.len());
            out.push_str("{\"type\":\"");
            out.push_str(event.kind.name());
            out.push_str("\",\"id\":");
            out.push_str(id_json);
            if let Some(position) = id.text(event) {
                out.push_str(",\"position\":\"");
                out.push_str(position);
                out.push('"');
            }
            out.push(',');
            // `data` is a JSON object: splice its members in after ours.
            out.push_str(std::str::from_utf8(&event.data[1..]).expect("event data is JSON text"));
            out
        }
        Message::Begin { position, reason } => {
            let kind = if *reason == "snapshot" { "snapshot" } else { "reset" };
            format!("{{\"type\":\"{kind}\",\"id\":{id_json},\"position\":{},\"reason\":\"{reason}\"}}", json!(position))
        }
        Message::Synced { position } => format!("{{\"type\":\"synced\",\"id\":{id_json},\"position\":{}}}", json!(position)),
        Message::Progress { position } => format!("{{\"type\":\"progress\",\"id\":{id_json},\"position\":{}}}", json!(position)),
        Message::KeepAlive => format!("{{\"type\":\"keep-alive\",\"id\":{id_json}}}"),
        Message::Reply(text) => text.clone(),
        Message::Cancel { reason, position, message } => format!(
            "{{\"type\":\"cancel\",\"id\":{id_json},\"reason\":\"{reason}\",\"position\":{},\"message\":{}}}",
            json!(position),
            json!(message)
        ),
    };
    text.into()
}

#[cfg(test)]
mod tests {
    use super::{ClientMessage, MESSAGE_TYPES};

    /// serde names every variant in the error for an unknown one: the list
    /// there must be `MESSAGE_TYPES`, in order.
    #[test]
    fn message_types_are_every_client_message() {
        let error = match serde_json::from_str::<ClientMessage>(r#"{"type":"no-such-type"}"#) {
            Err(error) => error.to_string(),
            Ok(_) => panic!("an unknown type decodes"),
        };
        let expected = error.split("expected ").nth(1).expect("serde lists the variants").split(" at line").next().unwrap();
        // Two variants: "`a` or `b`"; more: "one of `a`, `b`, `c`".
        let expected = expected.strip_prefix("one of ").unwrap_or(expected);
        let listed: Vec<String> = expected.replace(" or ", ", ").split(", ").map(|v| v.trim_matches('`').to_string()).collect();
        assert_eq!(listed, MESSAGE_TYPES, "{error}");
    }
}
