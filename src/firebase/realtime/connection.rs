//! One realtime connection: its task runs the watches of its listens,
//! writes what they send (translated, `stream::Translator` in its realtime
//! `Format`) and the answers to the client's requests, one request at a
//! time, in order. A small task of its own reads the client's frames.
//!
//! Order, as the SDK needs it: a listen's data goes before its answer (the
//! translator sends both), and a write's answer goes only after the events
//! it makes for this connection's own listens (else the SDK, which drops
//! its local copy of the write on the answer, would show the old value for
//! a moment). A write's answer waits for that at most `ACK_WAIT_MAX`.
//!
//! Bounds: `CLIENT_MESSAGES_PENDING_MAX` client frames read ahead (then
//! TCP pushes back on the client), `OUTBOUND_MESSAGES_MAX` messages from
//! the listens waiting for the socket (then their watches wait, and past
//! their own queue conflate, as every Tern watch does),
//! `LISTENS_PER_CONNECTION_MAX` listens, `PENDING_ACKS_MAX` answers
//! waiting for their events, `OUTBOUND_BYTES_MAX` bytes of frames for the
//! socket (past it the client's requests are not read until it reads; one
//! that does not for `SLOW_CLIENT_MAX` is closed). A client silent for `IDLE_TIMEOUT` (its SDK
//! sends a keep-alive every 45 s) is gone; the server pings every
//! `PING_INTERVAL` so that proxies keep the connection open.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, Utf8Bytes, WebSocket};
use bytes::Bytes;
use futures::future::{AbortHandle, Abortable};
use futures::stream::{FuturesUnordered, SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::requests::{listen_key, Effect, Requests};
use super::wire::{self, Assembled, ClientMessage, Reassembler};
use crate::codec::now_ms;
use crate::edge::Encoder;
use crate::firebase::stream::Translator;
use crate::tree::path;
use crate::watch::{Message, Outlet, OutletReader, Tag, Tagged};

/// Client frames read but not yet acted on.
const CLIENT_MESSAGES_PENDING_MAX: usize = 16;
/// Bytes of frames queued for the socket past which no further request is
/// read: a client that does not read its answers stops being read (its
/// requests then wait in TCP), so it holds at most this plus one answer
/// (a read is at most `store::tree::READ_BYTES_MAX`).
const OUTBOUND_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Reading resumes once the queue is down to this.
const OUTBOUND_BYTES_RESUME: usize = OUTBOUND_BYTES_MAX / 2;
/// A client that leaves its queue over the bound this long is closed.
const SLOW_CLIENT_MAX: Duration = Duration::from_secs(30);
/// Messages from the listens waiting for the socket, all together.
const OUTBOUND_MESSAGES_MAX: usize = 256;
/// Listen messages turned into frames before one flush.
const MESSAGES_PER_FLUSH_MAX: usize = 256;
/// Listens one connection may hold (as `/v1/ws`'s watches).
pub(super) const LISTENS_PER_CONNECTION_MAX: usize = 1000;
/// Write answers waiting for their events.
const PENDING_ACKS_MAX: usize = 1024;
/// How long a write's answer waits for its events at most.
const ACK_WAIT_MAX: Duration = Duration::from_secs(2);
/// Silence after which the client is taken as gone.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The server's WebSocket pings.
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// How often a connection with onDisconnect writes checks they were not
/// fired meanwhile (by a sweeper that took this node for dead).
const ARMED_CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// How long closing waits to flush what is left.
const CLOSE_FLUSH_MAX: Duration = Duration::from_secs(1);

/// Serves the connection until the client goes, the socket breaks, or the
/// node stops (`closing`); then makes its onDisconnect writes.
pub(super) async fn serve(mut requests: Requests, socket: WebSocket, host: String, mut closing: tokio::sync::watch::Receiver<bool>) {
    // The registry lives with the databases; held here past `requests`.
    let databases = requests.state.db.clone();
    databases.registry.opened(&requests.session);
    crate::metrics::FIREBASE_REALTIME_CONNECTIONS.inc();
    let (sink, stream) = socket.split();
    let (frames_tx, mut frames) = mpsc::channel::<WsMessage>(CLIENT_MESSAGES_PENDING_MAX);
    let reader = AbortOnDrop(tokio::spawn(read_frames(stream, frames_tx)));
    let outlet = OutletReader::new(OUTBOUND_MESSAGES_MAX);
    let mut out = Output::new(sink);
    out.send(wire::hello(now_ms(), &host, &requests.session));
    let mut joiner = Reassembler::default();
    let mut listen_ids = 0usize;
    let mut lapsed = requests.lapsed();
    let mut revoked = false;
    let mut armed_check = tokio::time::interval_at(tokio::time::Instant::now() + ARMED_CHECK_INTERVAL, ARMED_CHECK_INTERVAL);
    armed_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if out.queued_bytes > OUTBOUND_BYTES_MAX {
            // Read nothing more until the client reads what it was sent.
            match tokio::time::timeout(SLOW_CLIENT_MAX, out.drain_to(OUTBOUND_BYTES_RESUME, &outlet)).await {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {
                    tracing::debug!(session = %requests.session, "a realtime client did not read its answers: closed");
                    crate::metrics::SLOW_CLIENTS_CLOSED.with_label_values(&["realtime"]).inc();
                    break;
                }
            }
        }
        let frame = tokio::select! {
            biased;
            () = out.drive(&outlet) => break,
            _ = closing.changed() => break,
            // The credential was revoked or expired: its listens end with the
            // connection (the SDK reconnects, and its token is refused then).
            () = &mut lapsed => {
                out.send(wire::auth_revoked());
                revoked = true;
                break;
            }
            // Its onDisconnect writes were made while it lives: closed, so
            // the SDK reconnects and the app registers them again.
            _ = armed_check.tick() => {
                if !requests.registrations.still_armed(&requests.namespace, &requests.session) {
                    tracing::info!(session = %requests.session, "this connection's onDisconnect writes were made while it lived: closing it");
                    crate::metrics::FIREBASE_ONDISCONNECT.with_label_values(&["fired_while_open"]).inc();
                    break;
                }
                continue;
            }
            frame = frames.recv() => frame,
        };
        let (r, action, body) = match read(&mut joiner, frame) {
            Read::Request { r, action, body } => (r, action, body),
            Read::Answer(answer) => {
                out.send(answer);
                continue;
            }
            Read::Nothing => continue,
            Read::End(last_word) => {
                if let Some(error) = last_word {
                    out.send(error);
                }
                break;
            }
        };
        let mut listen_outlet = None;
        if action == "q" {
            if out.listens.len() >= LISTENS_PER_CONNECTION_MAX && !out.keys.contains_key(&listen_key(&body)) {
                out.send(wire::response(r, "invalid_args", format!("at most {LISTENS_PER_CONNECTION_MAX} listens per connection").into()));
                continue;
            }
            listen_ids += 1;
            listen_outlet = Some((listen_ids, Outlet::tagged(&outlet, Tag::Stream(listen_ids))));
        }
        let id = listen_outlet.as_ref().map_or(0, |(id, _)| *id);
        let (effect, closing_now) = {
            let handled = requests.handle(r, &action, body, listen_outlet.map(|(_, o)| o));
            tokio::pin!(handled);
            tokio::select! {
                biased;
                // The output ended (the socket broke, or a listen's watch
                // ended by itself): the request is still finished, so that
                // a write is not left half done, and its answer goes out if
                // the socket still takes it.
                () = out.drive(&outlet) => (handled.await, true),
                effect = &mut handled => (effect, false),
            }
        };
        if !out.apply(effect, id) || closing_now {
            break;
        }
        // Any request may have changed the credential (`auth`, `gauth`, `unauth`).
        if matches!(action.as_str(), "auth" | "gauth" | "unauth") {
            lapsed = requests.lapsed();
        }
    }
    drop(reader);
    out.finish().await;
    // A credential that registered writes and was revoked since (the
    // connection may have authenticated as someone else meanwhile) makes none.
    let revoked = revoked || !requests.registrants_valid();
    let Requests { state, namespace, session, mut registrations, .. } = requests;
    match revoked {
        // A revoked or expired credential writes nothing, not even now.
        true => registrations.discard(&state.app.node, &namespace, &session).await,
        false => registrations.fire(&state.app.node, &namespace, &session).await,
    }
    databases.registry.closed(&session);
    crate::metrics::FIREBASE_REALTIME_CONNECTIONS.dec();
}

/// What one client frame makes.
enum Read {
    /// A request to handle.
    Request { r: u64, action: String, body: Value },
    /// Something to answer at once (a pong, a refusal of a request too large).
    Answer(String),
    /// Nothing yet: a piece of a longer message, a keep-alive, a control message.
    Nothing,
    /// The connection ends, after this error if any.
    End(Option<String>),
}

/// Reads one frame from the client (None: it is gone).
fn read(joiner: &mut Reassembler, frame: Option<WsMessage>) -> Read {
    let text = match frame {
        Some(WsMessage::Text(text)) => text,
        Some(WsMessage::Binary(_)) => return Read::End(Some(wire::error("send JSON text frames"))),
        Some(WsMessage::Close(_)) | None => return Read::End(None),
        Some(_) => return Read::Nothing,
    };
    let message = match joiner.push(&text) {
        Some(Assembled::Message(message)) => message,
        Some(Assembled::TooLarge { r: Some(r), bytes }) => {
            let why = format!("a request is at most {} bytes in Tern, this one is {bytes}", wire::MESSAGE_BYTES_MAX);
            return Read::Answer(wire::response(r, "too_big", why.into()));
        }
        Some(Assembled::TooLarge { r: None, bytes }) => {
            return Read::End(Some(wire::error(&format!("a message of {bytes} bytes: at most {} are read", wire::MESSAGE_BYTES_MAX))))
        }
        None => return Read::Nothing,
    };
    match wire::parse(&message) {
        Ok(ClientMessage::Request { r, action, body }) => Read::Request { r, action, body },
        Ok(ClientMessage::Ping) => Read::Answer(wire::pong()),
        Ok(ClientMessage::Control) => Read::Nothing,
        Err(e) => Read::End(Some(wire::error(&e))),
    }
}

/// Passes the client's frames on until it closes, breaks, or is silent too long.
async fn read_frames(mut stream: SplitStream<WebSocket>, frames: mpsc::Sender<WsMessage>) {
    while let Ok(Some(Ok(frame))) = tokio::time::timeout(IDLE_TIMEOUT, stream.next()).await {
        let close = matches!(frame, WsMessage::Close(_));
        if frames.send(frame).await.is_err() || close {
            return;
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type ListenFuture = Abortable<Pin<Box<dyn Future<Output = ()> + Send>>>;

/// A listen of the connection.
struct Listen {
    key: String,
    sk: String,
    translator: Translator,
    /// The tree partition's offset this listen was sent everything below.
    reached: u64,
    /// Ends its watch when the listen goes.
    abort: AbortHandle,
}

impl Drop for Listen {
    fn drop(&mut self) {
        self.abort.abort();
    }
}

impl Listen {
    fn note(&mut self, message: &Message) {
        let reached = match message {
            Message::Change { event, .. } => event.offset + 1,
            Message::Synced { position } | Message::Progress { position } => offset_of(position),
            _ => return,
        };
        self.reached = self.reached.max(reached);
    }
}

/// The bytes a queued frame holds.
fn frame_bytes(frame: &WsMessage) -> usize {
    match frame {
        WsMessage::Text(text) => text.len(),
        WsMessage::Binary(bytes) | WsMessage::Ping(bytes) | WsMessage::Pong(bytes) => bytes.len(),
        WsMessage::Close(_) => 0,
    }
}

/// The offset of a one-partition position `ns:partition:offset[.ops]`.
fn offset_of(position: &str) -> u64 {
    let mark = position.rsplit(':').next().unwrap_or("");
    mark.split('.').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// A write's answer waiting for its events.
struct PendingAck {
    reply: String,
    version: u64,
    waiting: Vec<usize>,
    deadline: Instant,
}

/// The write side: the listens and their sessions, frames on their way out.
struct Output {
    sink: SplitSink<WebSocket, WsMessage>,
    frames: VecDeque<WsMessage>,
    /// Bytes of `frames` (their payloads).
    queued_bytes: usize,
    unflushed: bool,
    listens: HashMap<usize, Listen>,
    keys: HashMap<String, usize>,
    sessions: FuturesUnordered<ListenFuture>,
    batch: Vec<Tagged>,
    acks: VecDeque<PendingAck>,
    ack_timer: Pin<Box<tokio::time::Sleep>>,
    ping: tokio::time::Interval,
    /// A listen's watch ended by itself: close once the frames are out.
    reconnect: bool,
}

impl Output {
    fn new(sink: SplitSink<WebSocket, WsMessage>) -> Output {
        let mut ping = tokio::time::interval_at(Instant::now() + PING_INTERVAL, PING_INTERVAL);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Output {
            sink,
            frames: VecDeque::new(),
            queued_bytes: 0,
            unflushed: false,
            listens: HashMap::new(),
            keys: HashMap::new(),
            sessions: FuturesUnordered::new(),
            batch: Vec::with_capacity(MESSAGES_PER_FLUSH_MAX),
            acks: VecDeque::new(),
            ack_timer: Box::pin(tokio::time::sleep(ACK_WAIT_MAX)),
            ping,
            reconnect: false,
        }
    }

    /// Queues one message (split into frames when long).
    fn send(&mut self, message: String) {
        for frame in wire::frames(message) {
            self.queue(WsMessage::Text(frame.into()));
        }
    }

    fn queue(&mut self, frame: WsMessage) {
        self.queued_bytes += frame_bytes(&frame);
        self.frames.push_back(frame);
    }

    /// Writes until at most `bytes` are queued (true), or the socket or a
    /// listen ended (false).
    fn drain_to<'a>(&'a mut self, bytes: usize, outlet: &'a OutletReader) -> impl Future<Output = bool> + 'a {
        std::future::poll_fn(move |cx| {
            if self.poll_drive(cx, outlet).is_ready() {
                return Poll::Ready(false);
            }
            match self.queued_bytes <= bytes {
                true => Poll::Ready(true),
                false => Poll::Pending,
            }
        })
    }

    /// Queues a translator's output: one message per line. A line that
    /// fits a frame goes as a slice of the bytes, shared with every other
    /// listener of the location (`Event::keyed_frame`), not a copy.
    fn send_lines(&mut self, bytes: Bytes) {
        let mut start = 0;
        while start < bytes.len() {
            let end = bytes[start..].iter().position(|b| *b == b'\n').map_or(bytes.len(), |at| start + at);
            let line = bytes.slice(start..end);
            start = end + 1;
            if line.is_empty() {
                continue;
            }
            if line.len() <= wire::FRAME_CHARS_MAX {
                let text = Utf8Bytes::try_from(line).expect("translators write JSON text");
                self.queue(WsMessage::Text(text));
            } else {
                self.send(String::from_utf8(line.to_vec()).expect("translators write JSON text"));
            }
        }
    }

    /// Acts on a handled request; false: close the connection.
    fn apply(&mut self, effect: Effect, listen_id: usize) -> bool {
        match effect {
            Effect::Reply(reply) => self.send(reply),
            Effect::Written { reply, version, sks } => {
                let waiting: Vec<usize> = self
                    .listens
                    .iter()
                    .filter(|(_, l)| l.reached <= version && sks.iter().any(|sk| path::relation(&l.sk, sk) != path::Relation::Unrelated))
                    .map(|(id, _)| *id)
                    .collect();
                if waiting.is_empty() {
                    self.send(reply);
                } else {
                    self.acks.push_back(PendingAck { reply, version, waiting, deadline: Instant::now() + ACK_WAIT_MAX });
                    if self.acks.len() > PENDING_ACKS_MAX {
                        let oldest = self.acks.pop_front().expect("over the bound");
                        self.send(oldest.reply);
                    }
                }
            }
            Effect::Listen(opened) => {
                if let Some(old) = self.keys.remove(&opened.key) {
                    self.listens.remove(&old);
                }
                let (abort, registration) = AbortHandle::new_pair();
                let session = opened.session;
                self.sessions.push(Abortable::new(Box::pin(session), registration));
                self.keys.insert(opened.key.clone(), listen_id);
                self.listens.insert(listen_id, Listen { key: opened.key, sk: opened.sk, translator: opened.translator, reached: 0, abort });
            }
            Effect::Unlisten { key, reply } => {
                if let Some(id) = self.keys.remove(&key) {
                    self.listens.remove(&id);
                }
                self.send(reply);
            }
            Effect::Close(reason) => {
                self.send(wire::error(&reason));
                return false;
            }
        }
        true
    }

    /// Runs the listens and writes until the socket fails or a listen's
    /// watch ended by itself; cancel-safe (everything lives in `self`).
    fn drive<'a>(&'a mut self, outlet: &'a OutletReader) -> impl Future<Output = ()> + 'a {
        std::future::poll_fn(move |cx| self.poll_drive(cx, outlet))
    }

    fn poll_drive(&mut self, cx: &mut Context<'_>, outlet: &OutletReader) -> Poll<()> {
        loop {
            // Finished sessions (aborted or ended) need nothing more: their
            // listens go when their translators end or are stopped.
            while let Poll::Ready(Some(_)) = self.sessions.poll_next_unpin(cx) {}
            if self.frames.is_empty() {
                if outlet.take(&mut self.batch, MESSAGES_PER_FLUSH_MAX) > 0 {
                    self.encode_batch();
                }
                self.release_acks(Instant::now());
            }
            if let Some(frame) = self.frames.pop_front() {
                match self.sink.poll_ready_unpin(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => {
                        self.frames.push_front(frame);
                        return Poll::Pending;
                    }
                }
                self.queued_bytes -= frame_bytes(&frame);
                if self.sink.start_send_unpin(frame).is_err() {
                    return Poll::Ready(());
                }
                self.unflushed = true;
                continue;
            }
            if self.unflushed {
                match self.sink.poll_flush_unpin(cx) {
                    Poll::Ready(Ok(())) => self.unflushed = false,
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if self.reconnect {
                return Poll::Ready(());
            }
            if self.ping.poll_tick(cx).is_ready() {
                self.queue(WsMessage::Ping(Default::default()));
                continue;
            }
            if let Some(deadline) = self.acks.iter().map(|a| a.deadline).min() {
                if self.ack_timer.deadline() != deadline {
                    self.ack_timer.as_mut().reset(deadline);
                }
                if self.ack_timer.as_mut().poll(cx).is_ready() {
                    self.release_acks(Instant::now());
                    continue;
                }
            }
            return Poll::Pending;
        }
    }

    /// Turns the listens' messages into frames.
    fn encode_batch(&mut self) {
        let mut batch = std::mem::take(&mut self.batch);
        for tagged in batch.drain(..) {
            let Tag::Stream(id) = tagged.tag else { continue };
            // A stopped listen's last messages: nobody listens any more.
            let Some(listen) = self.listens.get_mut(&id) else { continue };
            listen.note(&tagged.message);
            let encoded = listen.translator.encode(&tagged.message);
            let (ended, reconnect) = (listen.translator.ended(), listen.translator.must_reconnect());
            if let Some(bytes) = encoded {
                self.send_lines(bytes);
            }
            if ended {
                let listen = self.listens.remove(&id).expect("looked up above");
                self.keys.remove(&listen.key);
                self.reconnect |= reconnect;
            }
        }
        self.batch = batch;
    }

    /// Sends the write answers whose events went out (or waited long enough).
    fn release_acks(&mut self, now: Instant) {
        if self.acks.is_empty() {
            return;
        }
        let listens = &self.listens;
        let mut ready = Vec::new();
        self.acks.retain_mut(|ack| {
            let version = ack.version;
            ack.waiting.retain(|id| listens.get(id).is_some_and(|l| l.reached <= version));
            let done = ack.waiting.is_empty() || ack.deadline <= now;
            if done {
                ready.push(std::mem::take(&mut ack.reply));
            }
            !done
        });
        for reply in ready {
            self.send(reply);
        }
    }

    /// Writes what is queued (bounded in time), then closes the socket.
    async fn finish(&mut self) {
        let _ = tokio::time::timeout(CLOSE_FLUSH_MAX, async {
            for frame in self.frames.drain(..) {
                if self.sink.feed(frame).await.is_err() {
                    return;
                }
            }
            let _ = self.sink.close().await;
        })
        .await;
    }
}
