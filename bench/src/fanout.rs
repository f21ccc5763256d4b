//! The SSE fan-out floor: the least work any server can do to push one event
//! to N subscribers, over one HTTP/1.1 connection each or multiplexed over
//! HTTP/2.
//!
//! It is not Tern and not an HTTP framework. Over HTTP/1.1 it answers any
//! `GET` with an SSE response head and one `progress` event and keeps the
//! socket; it answers any `PUT` by writing `event: put` with the request
//! body as data straight to every kept socket (one non-blocking `write`
//! each, split in two halves across two threads), then `200`. A connection
//! that opens with the HTTP/2 preface (h2c, prior knowledge) is served by
//! the `h2` crate in one task: every request on it becomes an SSE stream,
//! and each event is sent on all of that connection's streams in one
//! wake-up, flushed together — what hyper's server, with a task per stream,
//! does not do. No queue, no task wake-up per subscriber.
//!
//! `tern bench watch --runs sse-floor,sse-h2-floor` measures it with the
//! same subscribers and writer as Tern's SSE rows, so the gap between the
//! rows is what Tern's subscription path costs, and the floor alone is what
//! the kernel, the protocol and the harness cost on this machine.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

/// Longest request head or body read (the writer's values are ~130 bytes).
const REQUEST_BYTES_MAX: usize = 64 * 1024;
/// Most subscribers kept (the benchmark opens at most 10,000).
const SUBSCRIBERS_MAX: usize = 100_000;
/// Events an HTTP/2 connection may fall behind by (the benchmark sends 100).
const H2_EVENTS_BEHIND_MAX: usize = 1024;
/// Most SSE streams on one HTTP/2 connection (the benchmark opens 100).
const H2_STREAMS_MAX: usize = 10_000;
/// The HTTP/2 connection preface's first bytes.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// Kept as std sockets (still non-blocking): a write is then one `write`
/// system call, with no readiness bookkeeping in between.
type Subscribers = Arc<Mutex<Vec<std::net::TcpStream>>>;

pub(crate) async fn serve(listen: &str) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    println!("fan-out floor listening on http://{}", listener.local_addr()?);
    serve_on(listener).await
}

/// Where a `PUT`'s event goes: HTTP/1.1 subscribers' sockets, and the
/// HTTP/2 connections' tasks.
#[derive(Clone)]
struct Fanout {
    subscribers: Subscribers,
    h2_events: broadcast::Sender<Bytes>,
}

async fn serve_on(listener: TcpListener) -> anyhow::Result<()> {
    let fanout = Fanout { subscribers: Arc::default(), h2_events: broadcast::channel(H2_EVENTS_BEHIND_MAX).0 };
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let fanout = fanout.clone();
        tokio::spawn(async move {
            // An h2c client writes the whole preface at once; anything else is HTTP/1.1.
            let mut first = [0u8; H2_PREFACE.len()];
            let result = match stream.peek(&mut first).await {
                Ok(n) if first[..n] == H2_PREFACE[..n] && n == H2_PREFACE.len() => h2_connection(stream, fanout.h2_events.subscribe()).await,
                Ok(_) => connection(stream, fanout).await,
                Err(e) => Err(e.into()),
            };
            if let Err(e) = result {
                eprintln!("fan-out floor: connection ended: {e}");
            }
        });
    }
}

/// One HTTP/2 connection: every request becomes an SSE stream; each event
/// is sent on all of them, then the connection (polled by this same task)
/// writes them out together.
async fn h2_connection(stream: TcpStream, mut events: broadcast::Receiver<Bytes>) -> anyhow::Result<()> {
    let mut connection = h2::server::handshake(stream).await?;
    let mut streams: Vec<h2::SendStream<Bytes>> = Vec::new();
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((_request, mut respond))) => {
                    anyhow::ensure!(streams.len() < H2_STREAMS_MAX, "more than {H2_STREAMS_MAX} streams");
                    let head = http::Response::builder().header("content-type", "text/event-stream").body(())?;
                    let mut send = respond.send_response(head, false)?;
                    send.send_data(Bytes::from_static(b"event: progress\ndata: null\n\n"), false)?;
                    streams.push(send);
                }
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(()),
            },
            event = events.recv() => match event {
                Ok(event) => {
                    for stream in &mut streams {
                        // A stream the client reset is simply skipped.
                        let _ = stream.send_data(event.clone(), false);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => anyhow::bail!("fell {missed} events behind"),
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
        }
    }
}

/// Reads requests on one connection: a `GET` turns it into a subscriber
/// (and ends the task), each `PUT` is fanned out and answered.
async fn connection(mut stream: TcpStream, fanout: Fanout) -> anyhow::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let (head_len, body_len) = read_head(&mut stream, &mut buf).await?;
        if buf.starts_with(b"GET ") {
            // The head is written and the subscriber kept under one lock: a
            // client that read the head and then PUTs gets that event (written
            // first and pushed after, a PUT could fan out in between and miss it).
            use std::io::Write;
            const HEAD: &[u8] =
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\nevent: progress\ndata: null\n\n";
            let mut socket = stream.into_std()?;
            let mut kept = fanout.subscribers.lock().expect("not poisoned");
            anyhow::ensure!(kept.len() < SUBSCRIBERS_MAX, "more than {SUBSCRIBERS_MAX} subscribers");
            // A new socket's send buffer takes the few bytes of the head at once.
            anyhow::ensure!(socket.write(HEAD)? == HEAD.len(), "the response head did not fit a new socket's buffer");
            kept.push(socket);
            return Ok(());
        }
        while buf.len() < head_len + body_len {
            read_more(&mut stream, &mut buf).await?;
        }
        let body = &buf[head_len..head_len + body_len];
        let mut event = Vec::with_capacity(body.len() + 24);
        event.extend_from_slice(b"event: put\ndata: ");
        event.extend_from_slice(body);
        event.extend_from_slice(b"\n\n");
        fan_out(&fanout.subscribers, &event);
        // No HTTP/2 connection yet is not an error.
        let _ = fanout.h2_events.send(Bytes::from(event));
        stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await?;
        buf.drain(..head_len + body_len);
    }
}

/// Writes `event` to every subscriber: half from this thread, half from a
/// second one, so both cores write. A socket whose buffer is full is skipped
/// (the floor never waits; the benchmark would count the missing event).
fn fan_out(subscribers: &Subscribers, event: &[u8]) {
    let all = subscribers.lock().expect("not poisoned");
    let (first, second) = all.split_at(all.len() / 2);
    std::thread::scope(|scope| {
        scope.spawn(|| write_each(second, event));
        write_each(first, event);
    });
}

fn write_each(sockets: &[std::net::TcpStream], event: &[u8]) {
    use std::io::Write;
    for mut socket in sockets {
        let _ = socket.write(event);
    }
}

/// Reads until `buf` holds a whole request head; returns its length and the
/// body's (`content-length`, 0 without one).
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<(usize, usize)> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end])?;
            let body_len = head
                .lines()
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
                .map(|(_, v)| v.trim().parse::<usize>())
                .transpose()?
                .unwrap_or(0);
            anyhow::ensure!(body_len <= REQUEST_BYTES_MAX, "body of {body_len} bytes");
            return Ok((end + 4, body_len));
        }
        read_more(stream, buf).await?;
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<()> {
    anyhow::ensure!(buf.len() <= 2 * REQUEST_BYTES_MAX, "request larger than {} bytes", 2 * REQUEST_BYTES_MAX);
    let mut chunk = [0u8; 4096];
    let read = stream.read(&mut chunk).await?;
    anyhow::ensure!(read > 0, "closed");
    buf.extend_from_slice(&chunk[..read]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounds every read of these tests, so a missing byte fails them instead of hanging.
    const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

    async fn read_until(stream: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
        tokio::time::timeout(READ_WAIT, read_until_unbounded(stream, needle)).await.expect("read in time")
    }

    async fn read_until_unbounded(stream: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        let mut chunk = [0u8; 1024];
        while !got.windows(needle.len()).any(|w| w == needle) {
            let read = stream.read(&mut chunk).await.unwrap();
            assert!(read > 0, "closed before {:?}; got {:?}", String::from_utf8_lossy(needle), String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..read]);
        }
        got
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_reaches_every_subscriber_and_is_answered() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_on(listener));
        let mut subscribers = Vec::new();
        for _ in 0..3 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /watch HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
            let head = read_until(&mut s, b"event: progress\ndata: null\n\n").await;
            assert!(head.starts_with(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream"));
            subscribers.push(s);
        }
        let mut writer = TcpStream::connect(addr).await.unwrap();
        // Two requests on one connection, the second split across writes.
        writer.write_all(b"PUT /k HTTP/1.1\r\ncontent-length: 9\r\n\r\n{\"seq\":1}").await.unwrap();
        read_until(&mut writer, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
        writer.write_all(b"PUT /k HTTP/1.1\r\nContent-Length: 9\r\n\r\n{\"se").await.unwrap();
        writer.write_all(b"q\":2}").await.unwrap();
        read_until(&mut writer, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
        for s in &mut subscribers {
            let events = read_until(s, b"event: put\ndata: {\"seq\":2}\n\n").await;
            assert_eq!(events, b"event: put\ndata: {\"seq\":1}\n\nevent: put\ndata: {\"seq\":2}\n\n");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_reaches_every_http2_stream() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_on(listener));
        let (mut client, connection) = h2::client::handshake(TcpStream::connect(addr).await.unwrap()).await.unwrap();
        tokio::spawn(connection);
        let mut bodies = Vec::new();
        for _ in 0..2 {
            let request = http::Request::get(format!("http://{addr}/watch")).body(()).unwrap();
            let (response, _) = client.send_request(request, true).unwrap();
            let mut body = response.await.unwrap().into_body();
            let first = tokio::time::timeout(READ_WAIT, body.data()).await.unwrap().unwrap().unwrap();
            assert_eq!(&first[..], b"event: progress\ndata: null\n\n");
            bodies.push(body);
        }
        let mut writer = TcpStream::connect(addr).await.unwrap();
        writer.write_all(b"PUT /k HTTP/1.1\r\ncontent-length: 9\r\n\r\n{\"seq\":7}").await.unwrap();
        read_until(&mut writer, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
        for body in &mut bodies {
            let event = tokio::time::timeout(READ_WAIT, body.data()).await.unwrap().unwrap().unwrap();
            assert_eq!(&event[..], b"event: put\ndata: {\"seq\":7}\n\n");
        }
    }

    #[tokio::test]
    async fn an_oversized_body_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mut client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (mut server, _) = server.unwrap();
        let head = format!("PUT /k HTTP/1.1\r\ncontent-length: {}\r\n\r\n", REQUEST_BYTES_MAX + 1);
        client.as_mut().unwrap().write_all(head.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let error = read_head(&mut server, &mut buf).await.unwrap_err();
        assert_eq!(error.to_string(), format!("body of {} bytes", REQUEST_BYTES_MAX + 1));
    }
}
