//! Subscriptions over WebSocket: `GET /v1/ws`, many on one connection.
//!
//! Client messages (JSON text frames):
//! - `{"type":"sub","id":"c1","ns":"default","pk"?,"prefix"?,"sk"?,"from"?,"mode"?}`
//!   (the fields mean what the SSE query parameters mean; `id` is the
//!   client's name for the subscription, 1-128 characters, unique on the
//!   connection);
//! - `{"type":"unsub","id":"c1"}`.
//!
//! Server messages, each naming the subscription in `id`:
//! `subscribed`; `put` / `delete` (`pk, sk, value, version`, `position` =
//! the cursor after it, absent inside a snapshot or conflated run);
//! `snapshot` / `reset` (`position`, `reason`) then puts, then `synced`
//! (`position`); `progress` (`position`); `keep-alive`; `cancel` (`reason`,
//! `position`, `message`); `unsubscribed`; `error` (`error: {code, message}`:
//! a bad request, the connection stays open).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::ws::{Message as WsMessage, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::error::ApiError;
use super::watch::WatchRequest;
use super::AppState;
use crate::subscriptions::{self, Message, Tagged};

/// Most subscriptions on one connection.
pub const SUBSCRIPTIONS_PER_CONNECTION_MAX: usize = 1000;
/// Largest client message: subscriptions are small.
const CLIENT_MESSAGE_BYTES_MAX: usize = 64 * 1024;
/// Messages waiting for the socket, all subscriptions together.
const OUTBOUND_MESSAGES_MAX: usize = 256;
const SUBSCRIPTION_ID_CHARS_MAX: usize = 128;
/// Socket buffers per connection. tungstenite's defaults (128 KiB each) cost
/// ~140 KiB of memory per idle subscriber; messages here are small, and the
/// writer batches what is queued into one flush.
const READ_BUFFER_BYTES: usize = 4 * 1024;
const WRITE_BUFFER_BYTES: usize = 16 * 1024;
/// Frames fed to the socket before one flush (one write for a burst).
const FRAMES_PER_FLUSH_MAX: usize = 256;

pub async fn upgrade(State(app): State<AppState>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(CLIENT_MESSAGE_BYTES_MAX)
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(WRITE_BUFFER_BYTES)
        .on_upgrade(move |socket| serve(app, socket))
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

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum ClientMessage {
    Sub(Sub),
    Unsub { id: String },
}

/// A running subscription: its session task, ended when this is dropped.
struct Running {
    session: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.session.abort();
    }
}

async fn serve(app: AppState, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    // Sessions and this loop's own replies share one channel to the writer,
    // which encodes each message (tagged with its subscription's id).
    let (outbound, mut pending) = mpsc::channel::<Tagged>(OUTBOUND_MESSAGES_MAX);
    let writer = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(FRAMES_PER_FLUSH_MAX);
        // Everything queued goes out in one flush: a put that reaches many
        // subscriptions of this connection costs one write, not one each.
        while pending.recv_many(&mut batch, FRAMES_PER_FLUSH_MAX).await > 0 {
            for tagged in batch.drain(..) {
                let text = ws_text(tagged.tag.as_deref().unwrap_or("null"), &tagged.message);
                if sink.feed(WsMessage::Text(text)).await.is_err() {
                    return;
                }
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
    });
    let reply = |text: String| Tagged { tag: None, message: Message::Reply(text) };
    let mut running: HashMap<String, Running> = HashMap::new();
    while let Some(Ok(frame)) = stream.next().await {
        let text = match frame {
            WsMessage::Text(text) => text,
            WsMessage::Close(_) => break,
            WsMessage::Binary(_) => {
                let _ = outbound.send(reply(error_text(None, &ApiError::bad_request("invalid_message", "send JSON text frames")))).await;
                continue;
            }
            _ => continue,
        };
        running.retain(|_, r| !r.session.is_finished());
        match serde_json::from_str::<ClientMessage>(&text) {
            Err(e) => {
                let error = ApiError::bad_request("invalid_message", format!("not a sub or unsub message: {e}"));
                let _ = outbound.send(reply(error_text(None, &error))).await;
            }
            Ok(ClientMessage::Unsub { id }) => {
                let known = running.remove(&id).is_some();
                let text = if known {
                    json!({"type": "unsubscribed", "id": id}).to_string()
                } else {
                    error_text(Some(&id), &ApiError::bad_request("unknown_subscription", format!("no subscription {id:?} on this connection")))
                };
                let _ = outbound.send(reply(text)).await;
            }
            Ok(ClientMessage::Sub(sub)) => {
                let id = sub.id.clone();
                match open(&app, sub, &running, outbound.clone()) {
                    Ok((session, start)) => {
                        // The reply goes ahead of the session's first message.
                        let _ = outbound.send(reply(json!({"type": "subscribed", "id": id}).to_string())).await;
                        running.insert(id, Running { session: tokio::spawn(session.run(start)) });
                    }
                    Err(error) => {
                        let _ = outbound.send(reply(error_text(Some(&id), &error))).await;
                    }
                }
            }
        }
    }
    drop(running);
    drop(outbound);
    let _ = writer.await;
}

/// Validates a `sub` and sets up its session (not yet running).
fn open(
    app: &AppState,
    sub: Sub,
    running: &HashMap<String, Running>,
    outbound: mpsc::Sender<Tagged>,
) -> Result<(subscriptions::Session, subscriptions::Start), ApiError> {
    if sub.id.is_empty() || sub.id.chars().count() > SUBSCRIPTION_ID_CHARS_MAX {
        return Err(ApiError::bad_request("invalid_message", format!("id must be 1-{SUBSCRIPTION_ID_CHARS_MAX} characters")));
    }
    if running.contains_key(&sub.id) {
        return Err(ApiError::bad_request("duplicate_subscription", format!("subscription {:?} exists on this connection; unsub it first", sub.id)));
    }
    if running.len() >= SUBSCRIPTIONS_PER_CONNECTION_MAX {
        return Err(ApiError::bad_request(
            "too_many_subscriptions",
            format!("at most {SUBSCRIPTIONS_PER_CONNECTION_MAX} subscriptions per connection"),
        ));
    }
    let request = WatchRequest::parse(sub.pk.as_deref(), sub.prefix.as_deref(), sub.sk.as_deref(), sub.from.as_deref(), sub.mode.as_deref())?;
    let id_json: Arc<str> = serde_json::to_string(&sub.id).expect("a string serializes").into();
    let outbox = subscriptions::Outbox { tx: outbound, tag: Some(id_json) };
    Ok(subscriptions::open(&app.node, &sub.ns, request.filter, request.from, request.mode, outbox)?)
}

fn error_text(id: Option<&str>, error: &ApiError) -> String {
    json!({"type": "error", "id": id, "error": {"code": error.code, "message": error.message}}).to_string()
}

/// One message as a WebSocket text frame; `id_json` is the subscription id, JSON-encoded.
pub fn ws_text(id_json: &str, message: &Message) -> Utf8Bytes {
    let text = match message {
        Message::Change { event, id } => {
            let mut out = String::with_capacity(64 + event.data.len());
            out.push_str("{\"type\":\"");
            out.push_str(event.kind.name());
            out.push_str("\",\"id\":");
            out.push_str(id_json);
            if let Some(position) = id {
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
