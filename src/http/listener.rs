//! Accepting connections and serving the API on each, with a graceful stop.
//!
//! A connection speaks HTTP/1.1 (keep-alive, WebSocket upgrades), served by
//! hyper, or h2c (HTTP/2 with prior knowledge: the client opens with the
//! preface `PRI * HTTP/2.0`), served by `h2c/`, which runs the
//! connection's watches in its own task.
//!
//! Idle connections are bounded: one that sends nothing for the idle wait
//! (`http_idle_ms`) before its first byte, between HTTP/1.1 requests or
//! within a request's head is closed, and so is an HTTP/2 connection without
//! a stream through a whole idle wait (`h2c/`). (A response in flight, an
//! SSE stream or a WebSocket is not idle.)
//!
//! Stopping: the listener closes, every connection is told to finish
//! (HTTP/1.1 after its request in flight, HTTP/2 with GOAWAY), and the stop
//! waits for them, at most `SHUTDOWN_WAIT_MAX`. Subscriptions never end by
//! themselves: the caller's shutdown signal ends them first
//! (`Watches::close`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::front::Protocols;
use super::h2c;
use super::lenient_target::LenientTarget;
use super::tls::{self, Tls};
use crate::edge::{ConnectionSlot, Peer, Transport};
use crate::watch::ConnectionId;

/// How long a stop waits for connections to finish their requests.
const SHUTDOWN_WAIT_MAX: Duration = Duration::from_secs(30);
/// Pause after an accept error that is not the client's (out of file
/// descriptors, say): retrying at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);
/// The HTTP/2 connection preface's first line.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";
/// How long a client that sent part of the preface has to send the rest
/// (it comes in one segment in practice), and how often it is looked at.
const PREFACE_WAIT_MAX: Duration = Duration::from_secs(5);
const PREFACE_RECHECK: Duration = Duration::from_millis(5);

/// What the listener allows its connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// See the module doc (`http_idle_ms`).
    pub idle: Duration,
    /// Connections open at once (`http_connections_max`): one accepted past
    /// it is closed at once, so what clients make the node hold is at most
    /// this many times a connection's own bound (docs/bounds.md).
    pub connections_max: u32,
}

/// Serves `service` (with `protocols`, whose watches HTTP/2 connections run
/// themselves) on every connection `listener` accepts until `shutdown`
/// resolves, then stops gracefully.
pub async fn serve<S>(
    listener: TcpListener,
    protocols: Protocols,
    service: S,
    limits: ConnectionLimits,
    tls: Option<Arc<Tls>>,
    shutdown: impl Future<Output = ()>,
) where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    // Every connection holds a receiver; the stop sends `true` and waits
    // until all are dropped.
    let (stopping, _) = watch::channel(false);
    let open = Arc::new(tokio::sync::Semaphore::new(limits.connections_max as usize));
    let idle = limits.idle;
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok((stream, address)) => (stream, Peer(address.ip())),
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::error!(error = %e, "accept failed; pausing");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        // Past the bound: closed before anything is read from it.
        let Ok(slot) = open.clone().try_acquire_owned().map(ConnectionSlot::new) else {
            crate::metrics::CONNECTIONS_REFUSED.inc();
            tracing::debug!(peer = %peer.0, max = limits.connections_max, "too many connections; closing a new one");
            drop(stream);
            continue;
        };
        // Events and answers are small and wanted now: no Nagle delay.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        // The slot is held as long as the connection is served, and by an upgraded socket as long as it lives.
        let connection = serve_connection(stream, peer, slot, protocols.clone(), service.clone(), idle, stopping.subscribe());
        match &tls {
            None => tokio::spawn(connection.plaintext()),
            Some(tls) => tokio::spawn(connection.tls(tls.clone())),
        };
    }
    drop(listener);
    stopping.send_replace(true);
    if tokio::time::timeout(SHUTDOWN_WAIT_MAX, stopping.closed()).await.is_err() {
        tracing::warn!(wait_s = SHUTDOWN_WAIT_MAX.as_secs(), "connections still open after the shutdown wait; stopping anyway");
    }
}

/// Errors of one connection that came and went before it was accepted.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

/// One accepted connection, before its protocol is known.
struct Connection<S> {
    stream: TcpStream,
    peer: Peer,
    slot: ConnectionSlot,
    protocols: Protocols,
    service: S,
    idle: Duration,
    stopping: watch::Receiver<bool>,
}

fn serve_connection<S>(
    stream: TcpStream,
    peer: Peer,
    slot: ConnectionSlot,
    protocols: Protocols,
    service: S,
    idle: Duration,
    stopping: watch::Receiver<bool>,
) -> Connection<S> {
    Connection { stream, peer, slot, protocols, service, idle, stopping }
}

impl<S> Connection<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    /// Plaintext: HTTP/1.1, or h2c when the client opens with the preface;
    /// served to its end, `stopping` telling it to finish.
    async fn plaintext(mut self) {
        let connection = ConnectionId::next();
        let is_h2 = tokio::select! {
            is_h2 = starts_with_h2_preface(&self.stream) => is_h2,
            _ = self.stopping.wait_for(|stopping| *stopping) => return,
            () = tokio::time::sleep(self.idle) => {
                tracing::debug!("connection sent nothing within the idle wait; closing it");
                return;
            }
        };
        let Connection { stream, peer, slot, protocols, service, idle, stopping } = self;
        let result = match is_h2 {
            Ok(true) => h2c::serve(stream, protocols, service, connection, peer, idle, stopping).await.map_err(|e| e.to_string()),
            Ok(false) => serve_http1(stream, service, connection, peer, slot.clone(), idle, stopping).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    }

    /// TLS: the handshake (bounded), then HTTP/2 or HTTP/1.1 as ALPN chose.
    async fn tls(mut self, tls: Arc<Tls>) {
        let connection = ConnectionId::next();
        let handshake = tokio::time::timeout(tls::HANDSHAKE_WAIT_MAX, tls.acceptor.accept(self.stream));
        let stream = tokio::select! {
            accepted = handshake => match accepted {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    crate::metrics::TLS_HANDSHAKE_FAILURES.inc();
                    tracing::debug!(error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    crate::metrics::TLS_HANDSHAKE_FAILURES.inc();
                    tracing::debug!("TLS handshake timed out");
                    return;
                }
            },
            _ = self.stopping.wait_for(|stopping| *stopping) => return,
        };
        let is_h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        let Connection { peer, slot, protocols, service, idle, stopping, .. } = self;
        let result = match is_h2 {
            true => h2c::serve(stream, protocols, service, connection, peer, idle, stopping).await.map_err(|e| e.to_string()),
            false => serve_http1(stream, service, connection, peer, slot.clone(), idle, stopping).await.map_err(|e| e.to_string()),
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "TLS connection ended with an error");
        }
    }
}

/// Whether the client opened with the HTTP/2 preface. Looks without taking
/// the bytes (`peek`), so the protocol's server reads them again.
async fn starts_with_h2_preface(stream: &TcpStream) -> std::io::Result<bool> {
    let mut first = [0u8; H2_PREFACE.len()];
    let started = tokio::time::Instant::now();
    loop {
        let n = stream.peek(&mut first).await?;
        if n == 0 || first[..n] != H2_PREFACE[..n] {
            return Ok(false);
        }
        if n == H2_PREFACE.len() {
            return Ok(true);
        }
        // Part of the preface so far: `peek` would return the same bytes at
        // once, so wait a little for the rest.
        if started.elapsed() > PREFACE_WAIT_MAX {
            return Ok(false);
        }
        tokio::time::sleep(PREFACE_RECHECK).await;
    }
}

/// HTTP/1.1 by hyper, upgrades (WebSocket) included, with request targets
/// as curl sends them made acceptable (`lenient_target.rs`).
async fn serve_http1<S, IO>(
    stream: IO,
    service: S,
    connection: ConnectionId,
    peer: Peer,
    slot: ConnectionSlot,
    idle: Duration,
    mut stopping: watch::Receiver<bool>,
) -> hyper::Result<()>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let tower = TowerToHyperService::new(service);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(Transport { connection, peer, slot: Some(slot.clone()) });
        hyper::service::Service::call(&tower, request)
    });
    // hyper's header read timeout runs while it waits for a request's head,
    // between requests too: the idle wait.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(idle);
    let mut served = pin!(builder.serve_connection(TokioIo::new(LenientTarget::new(stream)), service).with_upgrades());
    let mut stop_sent = false;
    loop {
        tokio::select! {
            result = served.as_mut() => return result,
            _ = stopping.wait_for(|stopping| *stopping), if !stop_sent => {
                stop_sent = true;
                served.as_mut().graceful_shutdown();
            }
        }
    }
}
