//! An HTTP/2 connection's watch streams (`GET /v1/ns/{ns}/watch`), run by
//! the connection's own task the way a WebSocket connection runs its
//! watches:
//!
//! - every session leaves its messages in one outlet the connection's
//!   sessions share, tagged with its stream's key;
//! - a wake-up of the task polls just the woken sessions, takes all they
//!   left at once, and hands each stream what it got in that round as one
//!   chunk (`send_data`); the connection then writes every stream's chunk
//!   together, a system call per 16 KiB;
//! - a session lives in its stream's entry and is woken by a waker that
//!   names the stream (`Woken`): no task, no `FuturesUnordered` node and no
//!   abort handle of its own. At 10,000 watches a put is 10,000
//!   wake-ups, each bound by the memory it touches; the entry is the only
//!   per-stream memory a delivery reaches besides the session itself.
//!   Ending a session (its stream reset) is dropping it;
//! - h2 is asked nothing else per delivery. Each stream has a second waker,
//!   which h2 holds: it tells the task that the client reset the stream or
//!   that the stream's window opened again, and only then is that stream
//!   looked at.
//!
//! Flow control: `send_data` never refuses; h2 buffers what the client's
//! window does not let through yet. So after every `WINDOW_CHECK_BYTES` a
//! stream sends, it checks that its windows take everything it buffered. If
//! not, its session's sender is shut (`OutletReader::shut`): that session
//! waits, and its queue conflates or cancels as its mode says, while the
//! connection's other streams go on. The stream's waker opens it again when
//! h2 assigns the stream capacity. A stream thus holds at most
//! `WINDOW_CHECK_BYTES` plus one round of its messages beyond what the
//! client lets through.
//!
//! A stream's key (its `Slab` index) is reused only after its session ended
//! and the outlet was emptied: no message left for one stream can reach
//! another.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::{Bytes, BytesMut};
use futures::task::AtomicWaker;
use h2::server::SendResponse;
use h2::SendStream;
use parking_lot::Mutex;
use slab::Slab;

use crate::edge::{Encoder, SessionFuture, SSE_HEADERS};
use crate::watch::{Outlet, OutletReader, Tag, Tagged};

/// Messages the connection's sessions may leave before the task takes them
/// (a session that finds the outlet full waits for the next round).
const OUTLET_MESSAGES_MAX: usize = 256;
/// Bytes a stream sends between two looks at its window.
const WINDOW_CHECK_BYTES: usize = 16 * 1024;
/// How many polls ahead a session's memory is asked for, and at most how
/// much of it. All of it, as long as it is within the bound: a delivery
/// touches a few lines of the state machine, and which ones depends on how
/// the compiler lays the `async fn` out (the state's tag sat 585 bytes in,
/// past the first four lines the prefetch used to cover). The session's
/// future is ~1.1 KiB (18 lines); asking for all of it cut the server's CPU
/// per event at 10,000 watches from 1.7-1.8 to 1.5-1.6 µs.
const PREFETCH_AHEAD: usize = 4;
const SESSION_PREFETCH_LINES_MAX: usize = 20;

/// The watch streams of one connection.
pub(super) struct Watches {
    streams: Slab<WatchStream>,
    /// Where every session leaves its messages.
    outlet: OutletReader,
    /// Streams whose session or whose h2 state woke since the last round.
    woken: Arc<Woken>,
    /// Reused by every round: sessions to poll, streams to look at,
    /// messages taken, streams that got some, streams to close.
    ready: Vec<usize>,
    attend: Vec<usize>,
    taken: Vec<Tagged>,
    touched: Vec<usize>,
    ended: Vec<usize>,
}

impl Watches {
    pub(super) fn new() -> Watches {
        let woken = Woken { sessions: Mutex::new(Vec::new()), h2: Mutex::new(Vec::new()), task: AtomicWaker::new() };
        Watches {
            streams: Slab::new(),
            outlet: OutletReader::new(OUTLET_MESSAGES_MAX),
            woken: Arc::new(woken),
            ready: Vec::new(),
            attend: Vec::new(),
            taken: Vec::new(),
            touched: Vec::new(),
            ended: Vec::new(),
        }
    }

    /// Open watch streams.
    pub(super) fn len(&self) -> usize {
        self.streams.len()
    }

    /// The outlet end for the next watch's session (tagged with the key its
    /// stream gets in `start`).
    pub(super) fn next_outlet(&self) -> Outlet {
        Outlet::tagged(&self.outlet, Tag::Stream(self.streams.vacant_key()))
    }

    /// Answers a watch request with the SSE head and starts running its
    /// session, set up with `next_outlet` (no other stream started since).
    /// `encoder` turns its messages into bytes (Tern's SSE events, or
    /// Firebase's), after its preamble. Nothing runs if the client already
    /// reset the stream.
    /// `allow_origin`: the CORS header the head carries, if any.
    pub(super) fn start(
        &mut self,
        mut respond: SendResponse<Bytes>,
        session: SessionFuture,
        encoder: Box<dyn Encoder>,
        allow_origin: Option<http::HeaderValue>,
    ) {
        let mut head = http::Response::builder();
        for (name, value) in SSE_HEADERS {
            head = head.header(name, value);
        }
        if let (Some(origin), Some(headers)) = (allow_origin, head.headers_mut()) {
            crate::http::front::insert_cors(headers, origin);
        }
        let head = head.body(()).expect("static headers are valid");
        let Ok(send) = respond.send_response(head, false) else { return };
        let key = self.streams.vacant_key();
        let session_wake = Arc::new(SessionWaker { key, queued: AtomicBool::new(false), woken: self.woken.clone() });
        let stream = WatchStream {
            session: Some(session),
            session_waker: Waker::from(session_wake.clone()),
            session_wake,
            send,
            h2_waker: Waker::from(Arc::new(H2Waker { key, woken: self.woken.clone() })),
            // The preamble (Tern's SSE has one; Firebase's SDKs take every
            // frame for an event) goes out with what the session sends first.
            pending: match encoder.preamble() {
                Some(preamble) => Pending::One(preamble),
                None => Pending::None,
            },
            encoder,
            unchecked_bytes: 0,
            shut: false,
            reset: false,
        };
        assert_eq!(self.streams.insert(stream), key, "the session's outlet is tagged with this key");
        self.touched.push(key);
        // Registers the h2 waker, for a reset; the session runs this round.
        self.streams[key].attend(key, &self.outlet, &mut self.ended);
        self.streams[key].session_wake.wake_by_ref();
    }

    /// One round: the streams h2 woke, then the sessions woken, then what
    /// they left goes to their streams, then the streams whose sessions
    /// ended are closed. The connection writes it all when the task polls it.
    pub(super) fn poll_round(&mut self, cx: &mut Context<'_>) {
        self.woken.task.register(cx.waker());
        self.attend_woken();
        self.run_ready();
        self.send_taken();
        self.close_ended();
    }

    fn attend_woken(&mut self) {
        std::mem::swap(&mut self.attend, &mut *self.woken.h2.lock());
        for key in self.attend.drain(..) {
            // A key whose stream is gone (or reused) costs a look, nothing more.
            if let Some(stream) = self.streams.get_mut(key) {
                stream.attend(key, &self.outlet, &mut self.ended);
            }
        }
    }

    /// Polls each session woken since the last round, once. One woken
    /// again meanwhile is polled in the next round (its waker wakes the
    /// task), so a round is bounded by the number of streams.
    fn run_ready(&mut self) {
        std::mem::swap(&mut self.ready, &mut *self.woken.sessions.lock());
        for i in 0..self.ready.len() {
            // The sessions' memory, asked for a few polls ahead: each lies in
            // an allocation of its own, and its first touch waits for DRAM.
            if let Some(stream) = self.ready.get(i + PREFETCH_AHEAD).and_then(|&ahead| self.streams.get(ahead)) {
                stream.prefetch_session();
            }
            let key = self.ready[i];
            if let Some(stream) = self.streams.get_mut(key) {
                stream.run_session(key, &mut self.ended);
            }
        }
        self.ready.clear();
    }

    /// Takes everything the sessions left (a take of the outlet's size
    /// empties it) and hands each stream its part as one chunk.
    fn send_taken(&mut self) {
        self.outlet.take(&mut self.taken, OUTLET_MESSAGES_MAX);
        for tagged in self.taken.drain(..) {
            let Tag::Stream(key) = tagged.tag else { unreachable!("h2c sessions are tagged with their stream") };
            let stream = self.streams.get_mut(key).expect("a stream outlives its session's messages");
            if let Some(bytes) = stream.encoder.encode(&tagged.message) {
                if stream.pending.is_empty() {
                    self.touched.push(key);
                }
                stream.pending.push(bytes);
            }
            // An encoder that ended its stream: the session goes, the
            // stream closes at the end of the round, after its last bytes.
            if stream.encoder.ended() && stream.session.take().is_some() {
                self.ended.push(key);
            }
        }
        for key in self.touched.drain(..) {
            if let Some(stream) = self.streams.get_mut(key) {
                stream.flush(key, &self.outlet, &mut self.ended);
            }
        }
    }

    /// Ends the streams whose sessions ended or were dropped: all they sent
    /// is out of the outlet by now (`send_taken` ran after they ended).
    fn close_ended(&mut self) {
        for key in self.ended.drain(..) {
            let mut stream = self.streams.remove(key);
            debug_assert!(stream.session.is_none() && stream.pending.is_empty(), "ended and flushed before it is closed");
            self.outlet.open(&Tag::Stream(key));
            if !stream.reset {
                let _ = stream.send.send_data(Bytes::new(), true);
            }
        }
    }
}

/// One watch's HTTP/2 stream, with its session.
struct WatchStream {
    /// Runs until it ends by itself (a cancel) or the stream is reset.
    session: Option<SessionFuture>,
    /// The session's waker (names this stream), and its queued flag.
    session_waker: Waker,
    session_wake: Arc<SessionWaker>,
    send: SendStream<Bytes>,
    /// Registered with h2 for resets and capacity (see `H2Waker`).
    h2_waker: Waker,
    /// What the stream got in this round, sent as one chunk.
    pending: Pending,
    /// Sent since the window was last seen to take everything buffered.
    unchecked_bytes: usize,
    /// The session's sender is shut until the window opens.
    shut: bool,
    /// The client reset the stream: its session is dropped, nothing more is sent.
    reset: bool,
    /// Turns the session's messages into bytes.
    encoder: Box<dyn Encoder>,
}

impl WatchStream {
    fn prefetch_session(&self) {
        if let Some(session) = &self.session {
            let future = session.as_ref().get_ref();
            let lines = std::mem::size_of_val(future).div_ceil(crate::prefetch::CACHE_LINE_BYTES);
            crate::prefetch::prefetch(future as *const _, lines.min(SESSION_PREFETCH_LINES_MAX));
        }
    }

    /// Polls the session once; a session that ended is noted in `ended`.
    fn run_session(&mut self, key: usize, ended: &mut Vec<usize>) {
        // Cleared before the poll: a wake-up during it queues the session again.
        self.session_wake.queued.store(false, Ordering::Release);
        let Some(session) = self.session.as_mut() else { return };
        if session.as_mut().poll(&mut Context::from_waker(&self.session_waker)).is_ready() {
            self.session = None;
            ended.push(key);
        }
    }

    /// Sends the round's chunk, then looks at the window if enough went
    /// out since the last look.
    fn flush(&mut self, key: usize, outlet: &OutletReader, ended: &mut Vec<usize>) {
        let chunk = self.pending.take();
        if self.reset || chunk.is_empty() {
            return;
        }
        let len = chunk.len();
        if self.send.send_data(chunk, false).is_err() {
            self.end_by_client(key, outlet, ended);
            return;
        }
        self.unchecked_bytes += len;
        if self.unchecked_bytes >= WINDOW_CHECK_BYTES {
            self.check_window(key, outlet, ended);
        }
    }

    /// Asks for one byte beyond what is buffered: h2 grants it only if the
    /// stream's and the connection's windows take all of it (and the
    /// buffer is under `max_send_buffer_size`). Without it, the session's
    /// sender is shut until h2 assigns capacity (which wakes this stream).
    fn check_window(&mut self, key: usize, outlet: &OutletReader, ended: &mut Vec<usize>) {
        self.send.reserve_capacity(1);
        if self.send.capacity() > 0 {
            self.unchecked_bytes = 0;
            return;
        }
        self.shut = true;
        outlet.shut(Tag::Stream(key));
        self.poll_window(key, outlet, ended);
    }

    /// Looks at what h2 woke this stream for: a reset, or a window that opened.
    fn attend(&mut self, key: usize, outlet: &OutletReader, ended: &mut Vec<usize>) {
        if self.reset {
            return;
        }
        if self.send.poll_reset(&mut Context::from_waker(&self.h2_waker)).is_ready() {
            self.end_by_client(key, outlet, ended);
            return;
        }
        if self.shut {
            self.poll_window(key, outlet, ended);
        }
    }

    /// Opens the session's sender if the window takes what is buffered;
    /// otherwise h2 wakes this stream when it assigns capacity.
    fn poll_window(&mut self, key: usize, outlet: &OutletReader, ended: &mut Vec<usize>) {
        loop {
            if self.send.capacity() > 0 {
                self.shut = false;
                self.unchecked_bytes = 0;
                outlet.open(&Tag::Stream(key));
                return;
            }
            match self.send.poll_capacity(&mut Context::from_waker(&self.h2_waker)) {
                Poll::Pending => return,
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(None | Some(Err(_))) => {
                    self.end_by_client(key, outlet, ended);
                    return;
                }
            }
        }
    }

    /// The client reset the stream (closed its `EventSource`): the session
    /// is dropped (it unregisters from its feeds); the stream is closed at
    /// the end of the round, once the outlet holds nothing of its.
    fn end_by_client(&mut self, key: usize, outlet: &OutletReader, ended: &mut Vec<usize>) {
        self.reset = true;
        self.pending = Pending::None;
        outlet.open(&Tag::Stream(key));
        if self.session.take().is_some() {
            ended.push(key);
        }
    }
}

/// A stream's bytes of one round: one message needs no copy.
enum Pending {
    None,
    One(Bytes),
    Many(BytesMut),
}

impl Pending {
    fn is_empty(&self) -> bool {
        matches!(self, Pending::None)
    }

    fn push(&mut self, bytes: Bytes) {
        *self = match std::mem::replace(self, Pending::None) {
            Pending::None => Pending::One(bytes),
            Pending::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + bytes.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&bytes);
                Pending::Many(joined)
            }
            Pending::Many(mut joined) => {
                joined.extend_from_slice(&bytes);
                Pending::Many(joined)
            }
        };
    }

    fn take(&mut self) -> Bytes {
        match std::mem::replace(self, Pending::None) {
            Pending::None => Bytes::new(),
            Pending::One(bytes) => bytes,
            Pending::Many(joined) => joined.freeze(),
        }
    }
}

/// The streams woken since the last round, and the connection's task to
/// wake for them. Each waker puts its key here at most once between two
/// rounds: a session's waker queues it once until it is polled
/// (`SessionWaker::queued`), and h2 holds one waker per stream and gives it
/// up when it wakes it (a stream registers again only when attended). So
/// the lists hold at most two keys per stream opened (a stream's, and a
/// stale one of an earlier stream with the same key, which costs a
/// spurious look).
struct Woken {
    sessions: Mutex<Vec<usize>>,
    h2: Mutex<Vec<usize>>,
    task: AtomicWaker,
}

/// A session's waker: queues its stream to be polled.
struct SessionWaker {
    key: usize,
    /// Queued and not yet polled.
    queued: AtomicBool,
    woken: Arc<Woken>,
}

impl Wake for SessionWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.woken.sessions.lock().push(self.key);
            self.woken.task.wake();
        }
    }
}

/// A stream's waker with h2: h2 wakes it when the client resets the stream
/// or when it assigns the stream send capacity.
struct H2Waker {
    key: usize,
    woken: Arc<Woken>,
}

impl Wake for H2Waker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.h2.lock().push(self.key);
        self.woken.task.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_of_one_message_is_sent_without_a_copy_and_more_are_joined_in_order() {
        let mut pending = Pending::None;
        assert!(pending.is_empty());
        let one = Bytes::from_static(b"event: put\n\n");
        pending.push(one.clone());
        let taken = pending.take();
        assert_eq!(taken.as_ptr(), one.as_ptr(), "one message goes out as it is");
        assert!(pending.is_empty());
        for part in [&b"a"[..], b"bc", b"def"] {
            pending.push(Bytes::copy_from_slice(part));
        }
        assert_eq!(&pending.take()[..], b"abcdef");
        assert!(pending.take().is_empty());
    }
}
