//! One h2c (or TLS with ALPN h2) connection: its task accepts streams,
//! runs watch streams itself (`watches.rs`) and hands every other request
//! to the service in a task of its own.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use hyper::body::Body as _;

use super::watches::Watches;
use crate::edge::{identify, Peer, Transport};
use crate::http::front::{cors_allow_origin, with_cors, Protocols};
use crate::watch::ConnectionId;
use crate::{api, firebase};

/// Concurrent streams a client may open on one connection (a browser opens
/// one per `EventSource`; hyper's default too).
pub(super) const STREAMS_PER_CONNECTION_MAX: u32 = 200;
/// Flow-control windows for request bodies (hyper's defaults).
const STREAM_WINDOW_BYTES: u32 = 1024 * 1024;
const CONNECTION_WINDOW_BYTES: u32 = 1024 * 1024;
/// Largest request head (hyper's default).
const HEADER_LIST_BYTES_MAX: u32 = 16 * 1024;
/// Response bytes h2 buffers per stream before it reports no send capacity
/// (a watch stream that reaches it is held back: `watches.rs`).
const SEND_BUFFER_BYTES_MAX: usize = 400 * 1024;
/// How long a client has to finish the HTTP/2 handshake.
const HANDSHAKE_WAIT_MAX: Duration = Duration::from_secs(10);

/// Serves one h2c connection until the client closes it, until it had no
/// open stream through a whole `idle` wait (checked every `idle`: closed
/// within twice that), or until `stopping` turns true and its streams have
/// finished. Either end is GOAWAY, then the open streams run to their end
/// (watches end as the node closes their watches).
pub(crate) async fn serve<S, IO>(
    stream: IO,
    protocols: Protocols,
    service: S,
    connection: ConnectionId,
    peer: Peer,
    idle: Duration,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<(), h2::Error>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let handshake = builder().handshake::<_, Bytes>(Flattened(stream));
    let Ok(handshake) = tokio::time::timeout(HANDSHAKE_WAIT_MAX, handshake).await else {
        tracing::debug!("HTTP/2 handshake timed out");
        return Ok(());
    };
    let mut h2 = handshake?;
    let mut watches = Watches::new();
    // Other requests in flight: each one's task holds a clone.
    let requests = Arc::new(());
    let mut stop = pin!(async move {
        let _ = stopping.wait_for(|stopping| *stopping).await;
    });
    let mut idle_check = pin!(tokio::time::sleep(idle));
    let mut opened_since_check = false;
    let mut goaway_sent = false;
    loop {
        let next = std::future::poll_fn(|cx| {
            // Watches first: what they send, the connection then writes.
            watches.poll_round(cx);
            if !goaway_sent && stop.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Next::Stop);
            }
            if !goaway_sent && idle_check.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Next::IdleCheck);
            }
            h2.poll_accept(cx).map(Next::Accepted)
        })
        .await;
        let (mut request, respond) = match next {
            Next::Stop => {
                goaway_sent = true;
                h2.graceful_shutdown();
                continue;
            }
            Next::IdleCheck => {
                let open = watches.len() + Arc::strong_count(&requests) - 1;
                if open == 0 && !opened_since_check {
                    tracing::debug!(idle_ms = idle.as_millis() as u64, "HTTP/2 connection without streams; closing it");
                    goaway_sent = true;
                    h2.graceful_shutdown();
                    continue;
                }
                opened_since_check = false;
                idle_check.as_mut().reset(tokio::time::Instant::now() + idle);
                continue;
            }
            Next::Accepted(Some(accepted)) => accepted?,
            Next::Accepted(None) => return Ok(()),
        };
        opened_since_check = true;
        request.extensions_mut().insert(Transport { connection, peer, slot: None });
        if firebase::is_stream_request(&request) {
            let cors = cors_allow_origin(&protocols.cors_origins, request.headers());
            match firebase::open_h2c_stream(&protocols.firebase, request.uri(), request.headers(), Some(peer.0), connection, watches.next_outlet())
                .await
            {
                Ok((session, encoder)) => watches.start(respond, session, encoder, cors),
                Err(response) => {
                    tokio::spawn(send_response(respond, with_cors(response, cors)));
                }
            }
            continue;
        }
        match watch_namespace(&request) {
            Some(ns) => {
                let cors = cors_allow_origin(&protocols.cors_origins, request.headers());
                let query = request.uri().query();
                // Served here, not by the service: authenticated here (`access`).
                let app = &protocols.api;
                let opened = match identify(app, request.headers(), request.uri(), Some(peer.0)) {
                    Ok(identity) => api::open_sse(app, &identity, &ns, query, request.headers(), connection, watches.next_outlet()).await,
                    Err(error) => Err(error),
                };
                match opened {
                    Ok(session) => watches.start(respond, session, Box::new(api::TernEvents), cors),
                    Err(error) => {
                        tokio::spawn(send_response(respond, with_cors(error.into_response(), cors)));
                    }
                }
            }
            None => {
                let (service, in_flight) = (service.clone(), requests.clone());
                tokio::spawn(async move {
                    call(service, request, respond).await;
                    drop(in_flight);
                });
            }
        }
    }
}

/// What `h2` accepted: a request and where to answer it, an error, or the
/// connection's end (`None`).
type Accepted = Option<Result<(http::Request<RecvStream>, SendResponse<Bytes>), h2::Error>>;

/// What the connection's task does next. It lives for one turn of the loop
/// on the stack: boxing the large variant would allocate per request.
#[allow(clippy::large_enum_variant)]
enum Next {
    Stop,
    /// Time to look whether the connection was idle since the last look.
    IdleCheck,
    Accepted(Accepted),
}

fn builder() -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(STREAMS_PER_CONNECTION_MAX)
        .initial_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .max_header_list_size(HEADER_LIST_BYTES_MAX)
        .max_send_buffer_size(SEND_BUFFER_BYTES_MAX);
    builder
}

/// The namespace of a watch request (`GET /v1/ns/{ns}/watch`), decoded as
/// the router decodes path parameters; none for any other request.
fn watch_namespace<B>(request: &http::Request<B>) -> Option<String> {
    if request.method() != http::Method::GET {
        return None;
    }
    let ns = request.uri().path().strip_prefix("/v1/ns/")?.strip_suffix("/watch")?;
    if ns.is_empty() || ns.contains('/') {
        return None;
    }
    percent_encoding::percent_decode_str(ns).decode_utf8().ok().map(|ns| ns.into_owned())
}

/// Any request but a watch: the router answers it, in a task of its own.
async fn call<S>(mut service: S, request: http::Request<RecvStream>, respond: SendResponse<Bytes>)
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    let request = request.map(|body| Body::new(RequestBody { recv: body, data_done: false }));
    let Ok(()) = std::future::poll_fn(|cx| service.poll_ready(cx)).await;
    let Ok(response) = service.call(request).await;
    send_response(respond, response).await;
}

/// Streams `response` to the client, within its flow-control window.
async fn send_response(mut respond: SendResponse<Bytes>, response: Response) {
    let (mut parts, body) = response.into_parts();
    strip_connection_headers(&mut parts.headers);
    let end = body.is_end_stream();
    let head = http::Response::from_parts(parts, ());
    let Ok(mut send) = respond.send_response(head, end) else { return };
    if end {
        return;
    }
    let mut body = pin!(body);
    loop {
        let frame = match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "response body failed; resetting the stream");
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(mut data) => {
                while !data.is_empty() {
                    send.reserve_capacity(data.len());
                    let Some(capacity) = std::future::poll_fn(|cx| capacity(&mut send, cx)).await else { return };
                    if send.send_data(data.split_to(capacity.min(data.len())), false).is_err() {
                        return;
                    }
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    let _ = send.send_trailers(trailers);
                    return;
                }
            }
        }
    }
}

/// Resolves with the stream's send capacity once it has some; none once
/// the stream is gone.
fn capacity(send: &mut SendStream<Bytes>, cx: &mut Context<'_>) -> Poll<Option<usize>> {
    loop {
        let available = send.capacity();
        if available > 0 {
            return Poll::Ready(Some(available));
        }
        match send.poll_capacity(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Ok(_))) => continue,
            Poll::Ready(None | Some(Err(_))) => return Poll::Ready(None),
        }
    }
}

/// HTTP/2 forbids connection-specific headers (RFC 9113 §8.2.2); a
/// forwarded response may carry them from HTTP/1.1.
fn strip_connection_headers(headers: &mut http::HeaderMap) {
    for name in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
        headers.remove(name);
    }
    if headers.get(http::header::TE).is_some_and(|te| te != "trailers") {
        headers.remove(http::header::TE);
    }
}

/// A request body read from its h2 stream, returning the window to the
/// client as the router consumes it (so the window bounds what is buffered).
struct RequestBody {
    recv: RecvStream,
    data_done: bool,
}

impl hyper::body::Body for RequestBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<hyper::body::Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if !this.data_done {
            match this.recv.poll_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(data))) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(hyper::body::Frame::data(data))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.data_done = true,
            }
        }
        match this.recv.poll_trailers(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(hyper::body::Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

/// The connection's stream (TCP, or TLS over it), saying it has no vectored writes, so that h2 copies
/// every DATA frame of up to 1 KiB into its 16 KiB write buffer. With
/// vectored writes h2 chains any payload over 256 bytes, one frame per
/// `writev`: a put reaching the 100 watches of a connection would cost 100
/// system calls instead of one or two.
struct Flattened<IO>(IO);

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Flattened<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Flattened<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}
