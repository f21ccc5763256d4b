//! A watch stream's bytes, for either protocol. A watch's session (`watch/`)
//! leaves messages in its outlet; an `Encoder` turns each into the bytes of
//! its protocol — Tern's SSE events (`api/sse.rs`) or Firebase's
//! (`firebase/stream.rs`) — and whatever transport runs the session sends
//! them: over HTTP/1.1 the response body runs it (`body`), on the API's own
//! HTTP/2 connections the connection's task runs it beside its other
//! watches (`http/h2c/watches.rs`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use axum::http::header;
use bytes::Bytes;

use crate::watch::{Message, OutletReader, Tagged};

/// Messages joined into one body chunk at most.
const MESSAGES_PER_CHUNK_MAX: usize = 64;

/// The headers of every SSE response.
pub const SSE_HEADERS: [(header::HeaderName, &str); 3] =
    [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache"), (header::HeaderName::from_static("x-accel-buffering"), "no")];

/// How a watch stream's messages become its bytes. A transport that runs
/// watch sessions sends the preamble, then asks for each message's bytes,
/// and ends the stream once the encoder `ended`.
pub trait Encoder: Send + 'static {
    /// What the stream starts with, before any message (none by default).
    fn preamble(&self) -> Option<Bytes> {
        None
    }
    /// The bytes to send for `message`; none when it sends nothing.
    fn encode(&mut self, message: &Message) -> Option<Bytes>;
    /// The stream is over: its last event was encoded (e.g. a `cancel`).
    fn ended(&self) -> bool;
}

/// A watch's session, set up and not yet running: the transport that
/// drives it polls it.
pub type SessionFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The session's messages as body chunks, from a stream that also runs
/// the session: the connection's task (HTTP/1.1) does both, so a delivery
/// wakes one task, not two. Whatever is queued goes out as one chunk (one
/// write for a burst). The body ends when the session has ended and
/// everything it sent went out, or when the encoder ended the stream; a
/// client that goes away drops the body, and the session with it.
pub fn body<E: Encoder>(session: SessionFuture, messages: OutletReader, mut encoder: E) -> impl futures::Stream<Item = Result<Bytes, Infallible>> {
    let mut session = Some(session);
    let mut preamble = encoder.preamble();
    let mut batch = Vec::with_capacity(MESSAGES_PER_CHUNK_MAX);
    futures::stream::poll_fn(move |cx| {
        if let Some(first) = preamble.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        loop {
            if encoder.ended() {
                return Poll::Ready(None);
            }
            if let Some(running) = session.as_mut() {
                if running.as_mut().poll(cx).is_ready() {
                    session = None;
                }
            }
            if messages.take(&mut batch, MESSAGES_PER_CHUNK_MAX) == 0 {
                // The session waits for its queue, a timer or room in the
                // outlet; each wakes this task.
                return if session.is_none() { Poll::Ready(None) } else { Poll::Pending };
            }
            if let Some(chunk) = encode_batch(&mut encoder, &mut batch) {
                return Poll::Ready(Some(Ok(chunk)));
            }
        }
    })
}

/// The bytes of `batch`'s messages as one chunk (emptied); none when none
/// of them sends anything.
fn encode_batch<E: Encoder>(encoder: &mut E, batch: &mut Vec<Tagged>) -> Option<Bytes> {
    if batch.len() == 1 {
        // The common case (one event): no second copy.
        return batch.pop().and_then(|tagged| encoder.encode(&tagged.message));
    }
    let mut chunk = Vec::new();
    for tagged in batch.drain(..) {
        if let Some(bytes) = encoder.encode(&tagged.message) {
            chunk.extend_from_slice(&bytes);
        }
    }
    (!chunk.is_empty()).then(|| Bytes::from(chunk))
}
