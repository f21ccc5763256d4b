//! Streaming (`GET /{path}.json` with `Accept: text/event-stream`): a Tern
//! watch of the tree location, its messages turned into Firebase's events.
//!
//! The watch (`fanout::Filter::Tree`) starts from the current state, or
//! from `Last-Event-ID` (a Tern position) to resume. Firebase's stream:
//! - `event: put` with `data: {"path": "/", "data": <whole value>}` first
//!   (and after a reset), then `put` and `patch` with `path` relative to
//!   the listened location, each with `id:` = its Tern position, so a
//!   client that reconnects with `Last-Event-ID` gets exactly what it
//!   missed (or a fresh whole `put` when history is gone);
//! - `event: keep-alive` with `data: null`;
//! - `event: cancel` with `data: "Permission denied"` when the rules stop
//!   allowing the read (checked at each keep-alive and progress tick), and
//!   the stream ends;
//! - `event: auth_revoked` with `data: "credential is no longer valid"`
//!   when the caller's credential expired (its token's `exp`, checked at
//!   the same ticks), and the stream ends.
//!
//! A stream with a query holds the location's value (bounded by the tree
//! read bound) and sends the query's whole result as a `put` at `/` each
//! time an event changes it.
//!
//! The realtime protocol's listens (`realtime/`) run the same `Translator`
//! in its other `Format`: data pushes (`d`, `m`) at absolute paths with
//! priorities kept, a query's result tagged, the listen's answer after its
//! first data, `c` for a cancel by the rules and `ac` for an expired
//! credential; a watch that ends by itself closes the connection instead.
//!
//! Two transports run the same `Translator` (an `edge::Encoder`): over
//! HTTP/1.1 the response body runs the session (`open`, `edge::body`); on
//! the API's own HTTP/2 connections the connection's task runs it beside
//! its other watches (`open_session`, `http/h2c/watches.rs`). A live change is
//! translated once per location and shared by every listener there
//! (`Event::keyed_frame`): at 10,000 listeners of one location a put is
//! one translation, not 10,000.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{json, Value};

use super::caller::Caller;
use super::db::{tree_view, TreeData};
use super::error::FbError;
use super::query::Query;
use super::state::Firebase;
use crate::auth::Identity;
use crate::codec::now_ms;
use crate::edge::{self, Encoder, SessionFuture, SSE_HEADERS};
use crate::fanout::event::Kind;
use crate::fanout::{Cursor, Event, Filter, Mode};
use crate::partition::Namespace;
use crate::store::tree::value_at;
use crate::tree::path::{self, Relation};
use crate::tree::query::{self as tree_query};
use crate::tree::value::{at_path, has_server_values, into_arrays, set_at_path, strip_priorities, with_priorities, Builder};
use crate::tree::TREE_PK;
use crate::watch::{self, ChangeId, ConnectionId, Message, Outlet};

/// Messages waiting between the session and the body.
const MESSAGES_PENDING_MAX: usize = 64;
/// Bytes of state one stream gathers for a whole-value `put`.
const STATE_BYTES_MAX: usize = crate::store::tree::READ_BYTES_MAX;
/// Bytes of first values every stream and listen of this node gathers at
/// once: a client opening many listens of a large location at once cannot
/// hold more (past it, a listen is cancelled: retry).
const GATHERING_BYTES_NODE_MAX: usize = 4 * STATE_BYTES_MAX;
/// What every translator gathers now, counted against `GATHERING_BYTES_NODE_MAX`.
static GATHERING_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A streaming request over HTTP/1.1: the response body runs the session.
#[allow(clippy::too_many_arguments)]
pub(super) async fn open(
    state: &Firebase,
    namespace: Arc<Namespace>,
    caller: Caller,
    identity: Option<&Identity>,
    sk: String,
    query: &Query,
    headers: &HeaderMap,
    connection: ConnectionId,
) -> Result<Response, FbError> {
    let (outlet, messages) = Outlet::new(MESSAGES_PENDING_MAX);
    let (session, translator) = open_session(state, namespace, caller, sk, query, headers, connection, outlet).await?;
    // Ends when the credential does (a revoked key, an expired JWT).
    let session = match identity {
        Some(identity) => state.app.access.guard(identity, session),
        None => session,
    };
    let body = axum::body::Body::from_stream(edge::body(session, messages, translator));
    Ok((SSE_HEADERS, body).into_response())
}

/// Checks a streaming request (its query, the rules, `Last-Event-ID`) and
/// sets up its session, which leaves its messages in `outlet`, and the
/// translator of those messages; errors come before anything is streamed.
#[allow(clippy::too_many_arguments)]
pub(super) async fn open_session(
    state: &Firebase,
    namespace: Arc<Namespace>,
    caller: Caller,
    sk: String,
    query: &Query,
    headers: &HeaderMap,
    connection: ConnectionId,
    outlet: Outlet,
) -> Result<(SessionFuture, Translator), FbError> {
    let parsed = super::rest::parse_query(state, &namespace, &sk, query)?;
    if !allowed(state, &namespace, &caller, &sk)? {
        return Err(FbError::denied());
    }
    let from = match headers.get("last-event-id").and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()) {
        Some(id) => watch::Since::Cursor(Cursor::parse(id).map_err(|e| FbError::bad(format!("Last-Event-ID is not a Tern position: {e}")))?),
        None => watch::Since::CurrentState,
    };
    open_listen(state, namespace, caller, sk, parsed, from, Format::Sse, connection, outlet).await
}

/// Sets up the watch of one listened location (a stream, or a realtime
/// listen) and the translator of its messages into `format`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn open_listen(
    state: &Firebase,
    namespace: Arc<Namespace>,
    caller: Caller,
    sk: String,
    query: Option<tree_query::Query>,
    from: watch::Since,
    format: Format,
    connection: ConnectionId,
    outlet: Outlet,
) -> Result<(SessionFuture, Translator), FbError> {
    let filter = Filter::Tree { pk: TREE_PK.into(), path: sk.clone() };
    let (session, start) = state
        .app
        .node
        .open_watch(&namespace.name, filter, from, Mode::State, outlet, connection)
        .await
        .map_err(|e| FbError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let session: SessionFuture = Box::pin(session.run(start));
    let translator = Translator {
        state: state.clone(),
        namespace,
        caller,
        sk,
        query,
        format,
        gathering: None,
        value: None,
        last_result: None,
        ended: false,
        reconnect: false,
        gathered_bytes: 0,
        node_busy: false,
    };
    Ok((session, translator))
}

pub(super) fn allowed(state: &Firebase, namespace: &Namespace, caller: &Caller, sk: &str) -> Result<bool, FbError> {
    let Some(auth) = caller.rules_auth() else { return Ok(true) };
    let rules = state.db.rules_of(namespace)?;
    Ok(rules.can_read(sk, auth, now_ms(), &TreeData { view: tree_view(namespace)? }))
}

/// Turns a watch's messages into Firebase events.
pub(super) struct Translator {
    state: Firebase,
    namespace: Arc<Namespace>,
    caller: Caller,
    sk: String,
    query: Option<tree_query::Query>,
    format: Format,
    /// Leaves of a whole-state run (after `Begin`, until `Synced`).
    gathering: Option<Builder>,
    /// The location's value (query streams only).
    value: Option<Value>,
    last_result: Option<Value>,
    ended: bool,
    /// The watch ended by itself (realtime: the connection must close).
    reconnect: bool,
    /// Bytes of `gathering` counted in `GATHERING_BYTES` (given back when
    /// the first value is sent, or this is dropped).
    gathered_bytes: usize,
    /// The node's gathering bound refused this listen's first value.
    node_busy: bool,
}

impl Translator {
    /// Counts `bytes` more of a first value against the node's bound;
    /// false (nothing counted) when they do not fit.
    fn gather(&mut self, bytes: usize) -> bool {
        use std::sync::atomic::Ordering;
        if GATHERING_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes > GATHERING_BYTES_NODE_MAX {
            GATHERING_BYTES.fetch_sub(bytes, Ordering::Relaxed);
            self.node_busy = true;
            return false;
        }
        self.gathered_bytes += bytes;
        true
    }

    fn release_gathered(&mut self) {
        GATHERING_BYTES.fetch_sub(std::mem::take(&mut self.gathered_bytes), std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Translator {
    fn drop(&mut self) {
        self.release_gathered();
    }
}

impl Encoder for Translator {
    fn encode(&mut self, message: &Message) -> Option<Bytes> {
        if let Message::Change { event, id: ChangeId::Event } = message {
            if self.query.is_none() && self.gathering.is_none() && !self.ended {
                // Every listener of this location sends the same frames.
                let (sk, namespace, format) = (&self.sk, &self.namespace, &self.format);
                let frame = event.keyed_frame(&format.share_key(sk), || {
                    let mut out = Vec::new();
                    live_frames(format, namespace, sk, event, super::db::event_value(event), ChangeId::Event.text(event), &mut out);
                    Bytes::from(out)
                });
                return (!frame.is_empty()).then_some(frame);
            }
        }
        let mut out = Vec::new();
        self.translate(message, &mut out);
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    fn ended(&self) -> bool {
        self.ended
    }
}

impl Translator {
    /// The watch ended by itself, not by the rules: a realtime connection
    /// closes so that its SDK listens again (see `Message::Cancel`).
    pub(super) fn must_reconnect(&self) -> bool {
        self.reconnect
    }

    fn translate(&mut self, message: &Message, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        match message {
            Message::Begin { .. } => {
                self.release_gathered();
                self.node_busy = false;
                self.gathering = Some(Builder::default());
            }
            Message::Synced { position } => {
                let builder = self.gathering.take().unwrap_or_default();
                self.release_gathered();
                if builder.bytes > STATE_BYTES_MAX || self.node_busy {
                    // Refused, never sent cut short as if it were the whole value.
                    let message = match self.node_busy {
                        true => format!(
                            "this node is gathering {GATHERING_BYTES_NODE_MAX} bytes of first values for other listens: listen again in a moment"
                        ),
                        false => format!(
                            "the location holds more than {STATE_BYTES_MAX} bytes, the most a listen's first value may: listen to a location below it"
                        ),
                    };
                    self.format.cancel(out, &self.sk, &message);
                    self.ended = true;
                    return;
                }
                let mut value = builder
                    .finish(self.format.sends_priorities() || self.query.as_ref().is_some_and(|q| q.order_by == tree_query::OrderBy::Priority));
                into_arrays(&mut value);
                self.whole(value, Some(position), out);
            }
            Message::Change { event, id } => {
                let event_value = super::db::event_value(event);
                if self.gathering.is_some() {
                    let over = self.node_busy || self.gathering.as_ref().is_some_and(|b| b.bytes > STATE_BYTES_MAX);
                    if !over {
                        let relative = path::relative(&self.sk, &event.sk).to_string();
                        let json = event_value.to_string();
                        // As `Builder::add` counts it.
                        let bytes = relative.len() + json.len() + 16;
                        if self.gather(bytes) {
                            self.gathering.as_mut().expect("checked").add(&relative, json.as_bytes());
                        }
                    }
                    return;
                }
                let id = id.text(event).map(str::to_string);
                self.change(event, event_value, id.as_deref(), out);
            }
            Message::KeepAlive | Message::Progress { .. } => {
                if self.caller.expired(now_ms()) {
                    self.format.auth_revoked(out);
                    self.ended = true;
                } else if !allowed(&self.state, &self.namespace, &self.caller, &self.sk).unwrap_or(false) {
                    self.format.cancel(out, &self.sk, "Permission denied");
                    self.ended = true;
                } else if matches!(message, Message::KeepAlive) {
                    self.format.keep_alive(out);
                }
            }
            Message::Cancel { message, .. } => {
                match self.format {
                    // Not the rules: the watch itself ended (its partition
                    // went elsewhere, the node stops). A realtime client
                    // must not take that as a revoked listen: its
                    // connection closes, and the SDK listens again anew.
                    Format::Realtime { .. } => self.reconnect = true,
                    Format::Sse => self.format.cancel(out, &self.sk, message),
                }
                self.ended = true;
            }
            Message::Reply(_) => {}
        }
    }

    /// The whole value at the location.
    fn whole(&mut self, value: Value, id: Option<&str>, out: &mut Vec<u8>) {
        match &self.query {
            None => self.format.put(out, &self.sk, "", id, &value),
            Some(_) => {
                self.value = Some(value);
                self.send_query_result(id, out, true);
            }
        }
        self.format.listen_answered(out);
    }

    /// One applied change, as the events it makes at this location.
    fn change(&mut self, event: &Event, value: Value, id: Option<&str>, out: &mut Vec<u8>) {
        if self.query.is_none() {
            live_frames(&self.format, &self.namespace, &self.sk, event, value, id, out);
            return;
        }
        if has_server_values(&value) {
            if let Some(now) = current_value(&self.namespace, &self.sk, true) {
                self.whole(now, id, out);
            }
            return;
        }
        let Some(current) = self.value.as_mut() else { return };
        let Some(changes) = Changes::of(&self.sk, event, value, self.format.sends_priorities()) else { return };
        for (relative, value) in changes.puts {
            set_at_path(current, &relative, value);
        }
        if let Some((relative, children)) = changes.patch {
            for (key, value) in children {
                set_at_path(current, &path::join(&relative, &key), value);
            }
        }
        self.send_query_result(id, out, false);
    }

    fn send_query_result(&mut self, id: Option<&str>, out: &mut Vec<u8>, always: bool) {
        let (Some(query), Some(value)) = (&self.query, &self.value) else { return };
        let mut rows = tree_query::run(query, value.clone());
        if self.format.sends_priorities() {
            with_priorities(&mut rows, value);
        }
        let result = tree_query::as_object(rows);
        if always || self.last_result.as_ref() != Some(&result) {
            self.format.put(out, &self.sk, "", id, &result);
            self.last_result = Some(result);
        }
    }
}

/// What one change does at a location: `puts` at paths relative to it,
/// and at most one `patch` of children of one place.
struct Changes {
    puts: Vec<(String, Value)>,
    patch: Option<(String, serde_json::Map<String, Value>)>,
}

impl Changes {
    /// The change `event` (with `value`, its data) as seen from `sk`; none
    /// when it does not reach `sk`'s subtree.
    fn of(sk: &str, event: &Event, value: Value, keep_priorities: bool) -> Option<Changes> {
        let strip_priorities = |value: &mut Value| {
            if !keep_priorities {
                strip_priorities(value);
            }
        };
        let mut changes = Changes { puts: Vec::new(), patch: None };
        match event.kind {
            Kind::TreeSet | Kind::Put | Kind::Delete => {
                let mut value = if event.kind == Kind::Delete { Value::Null } else { value };
                strip_priorities(&mut value);
                match path::relation(sk, &event.sk) {
                    Relation::Same | Relation::Descendant => changes.puts.push((path::relative(sk, &event.sk).to_string(), value)),
                    Relation::Ancestor => changes.puts.push((String::new(), at_path(&value, path::relative(&event.sk, sk)))),
                    Relation::Unrelated => {}
                }
            }
            Kind::TreeMerge => {
                let Value::Object(update) = value else { return None };
                let at_or_below = matches!(path::relation(sk, &event.sk), Relation::Same | Relation::Descendant);
                let mut children = serde_json::Map::new();
                for (relative, mut child) in update {
                    strip_priorities(&mut child);
                    let keys = path::parse_relative(&relative).unwrap_or_default();
                    let target = path::join(&event.sk, &path::sk_of(&keys));
                    if at_or_below && keys.len() == 1 {
                        children.insert(keys[0].clone(), child);
                        continue;
                    }
                    match path::relation(sk, &target) {
                        Relation::Same | Relation::Descendant => changes.puts.push((path::relative(sk, &target).to_string(), child)),
                        Relation::Ancestor => changes.puts.push((String::new(), at_path(&child, path::relative(&target, sk)))),
                        Relation::Unrelated => {}
                    }
                }
                if !children.is_empty() {
                    changes.patch = Some((path::relative(sk, &event.sk).to_string(), children));
                }
            }
        }
        Some(changes)
    }
}

/// A change as the frames of a listener at `sk` without a query: its
/// `patch` and `put`s, the last one carrying `id`. Live events carry server
/// values resolved by the apply loop; one replayed from the log still has
/// them: the location is sent as it reads now instead (later, never wrong
/// for long).
fn live_frames(format: &Format, namespace: &Namespace, sk: &str, event: &Event, value: Value, id: Option<&str>, out: &mut Vec<u8>) {
    if has_server_values(&value) {
        if let Some(now) = current_value(namespace, sk, format.sends_priorities()) {
            format.put(out, sk, "", id, &now);
        }
        return;
    }
    let Some(changes) = Changes::of(sk, event, value, format.sends_priorities()) else { return };
    let count = changes.puts.len() + usize::from(changes.patch.is_some());
    let mut sent = 0;
    let id_for = |sent: usize| if sent + 1 == count { id } else { None };
    if let Some((relative, children)) = changes.patch {
        format.patch(out, sk, &relative, id_for(sent), children);
        sent += 1;
    }
    for (relative, value) in changes.puts {
        format.put(out, sk, &relative, id_for(sent), &value);
        sent += 1;
    }
}

/// The location's value as this node reads it now.
fn current_value(namespace: &Namespace, sk: &str, export: bool) -> Option<Value> {
    let view = tree_view(namespace).ok()?;
    value_at(&view.reader, TREE_PK, sk, export, STATE_BYTES_MAX).ok()
}

/// The wire form a translator writes.
pub(super) enum Format {
    /// Server-sent events: `put` and `patch` with `path` relative to the
    /// listened location, `id:` the Tern position.
    Sse,
    /// The realtime protocol (`realtime/`): data pushes (`d`, `m`) at
    /// absolute paths, each message one line of `out` (the connection
    /// makes each a WebSocket message), carrying the listen's `tag` when it
    /// is a query's; `response` (the listen's answer) goes out right after
    /// its first data, as the SDK expects.
    Realtime { tag: Option<u64>, query: Value, response: Option<String> },
}

impl Format {
    /// The key under which listeners of `sk` in this format share an
    /// event's encoding (`Event::keyed_frame`). A key never holds a
    /// control character, so realtime keys never meet SSE keys. A realtime
    /// listen's tag is in its frames, so it is in the key too: a tagged
    /// listen shares only with listens of its tag (issue 36: its tag went
    /// to untagged listeners of the location, whose SDK dropped the push).
    fn share_key(&self, sk: &str) -> String {
        match self {
            Format::Sse => sk.to_string(),
            Format::Realtime { tag: None, .. } => format!("\u{1}{sk}"),
            Format::Realtime { tag: Some(tag), .. } => format!("\u{2}{tag}\u{1}{sk}"),
        }
    }

    fn put(&self, out: &mut Vec<u8>, sk: &str, relative: &str, id: Option<&str>, data: &Value) {
        match self {
            Format::Sse => frame(out, "put", id, &json!({ "path": format!("/{relative}"), "data": data })),
            Format::Realtime { tag, .. } => push(out, "d", &path::join(sk, relative), data, *tag),
        }
    }

    fn patch(&self, out: &mut Vec<u8>, sk: &str, relative: &str, id: Option<&str>, children: serde_json::Map<String, Value>) {
        match self {
            Format::Sse => frame(out, "patch", id, &json!({ "path": format!("/{relative}"), "data": children })),
            Format::Realtime { tag, .. } => push(out, "m", &path::join(sk, relative), &Value::Object(children), *tag),
        }
    }

    /// The listen ends: rules no longer allow it, or the watch was cut off.
    fn cancel(&self, out: &mut Vec<u8>, sk: &str, message: &str) {
        match self {
            Format::Sse => frame(out, "cancel", None, &json!(message)),
            Format::Realtime { query, .. } => line(out, &json!({"t": "d", "d": {"a": "c", "b": {"p": path::display(sk), "q": query}}})),
        }
    }

    /// The caller's credential expired.
    fn auth_revoked(&self, out: &mut Vec<u8>) {
        match self {
            Format::Sse => frame(out, "auth_revoked", None, &json!("credential is no longer valid")),
            Format::Realtime { .. } => line(out, &json!({"t": "d", "d": {"a": "ac", "b": {"s": "expired_token", "d": "Auth token is expired."}}})),
        }
    }

    /// The realtime connection keeps itself alive (`realtime/connection.rs`).
    fn keep_alive(&self, out: &mut Vec<u8>) {
        if let Format::Sse = self {
            out.extend_from_slice(b"event: keep-alive\ndata: null\n\n");
        }
    }

    /// After a listen's first data: its answer (realtime).
    fn listen_answered(&mut self, out: &mut Vec<u8>) {
        if let Format::Realtime { response: response @ Some(_), .. } = self {
            out.extend_from_slice(response.take().expect("matched Some").as_bytes());
            out.push(b'\n');
        }
    }

    /// Whether values carry their priorities (`.priority`): the realtime
    /// protocol's do, as Firebase's server sends them (the SDKs order
    /// by them and hash them for transactions); a REST stream's do not.
    fn sends_priorities(&self) -> bool {
        matches!(self, Format::Realtime { .. })
    }
}

/// A realtime data push: `{"t":"d","d":{"a":action,"b":{"p","d","t"?}}}`.
fn push(out: &mut Vec<u8>, action: &str, sk: &str, data: &Value, tag: Option<u64>) {
    let mut body = json!({"p": path::display(sk), "d": data});
    if let Some(tag) = tag {
        body["t"] = json!(tag);
    }
    line(out, &json!({"t": "d", "d": {"a": action, "b": body}}));
}

fn line(out: &mut Vec<u8>, message: &Value) {
    out.extend_from_slice(message.to_string().as_bytes());
    out.push(b'\n');
}

fn frame(out: &mut Vec<u8>, name: &str, id: Option<&str>, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    if let Some(id) = id {
        out.extend_from_slice(b"\nid: ");
        out.extend_from_slice(id.as_bytes());
    }
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}
