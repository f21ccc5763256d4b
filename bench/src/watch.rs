//! `tern-bench watch`: put → event latency at many subscribers of one node,
//! over SSE and over WebSocket, next to etcd's watch with as many watchers,
//! in one run on this machine.
//!
//! Every subscriber watches the same pk (every put reaches all of them: the
//! fan-out worst case). One writer puts `--puts` records at `--rate` per
//! second (open loop); each value carries its sequence number, and each
//! subscriber records when it saw each one. Latency = arrival − the moment
//! the put was sent, per (subscriber, put), on one clock (this process).
//! Memory per subscriber = the server's resident memory grown while the
//! subscribers connected, divided by their number. CPU per event = the CPU
//! time the server, and this harness, spent from the first put until the
//! last event arrived, divided by the events received: on a small machine
//! the two share the cores, so both show in the latency. etcd: the same key,
//! value size and rate, `--subscribers` watchers (`etcd-client`).
//!
//! Each is measured with one subscriber per connection (browsers, devices)
//! and multiplexed, `--multiplex` subscriptions per connection (services):
//! Tern over WebSocket, etcd over gRPC streams on shared HTTP/2 connections.
//!
//! Firebase streaming (`fb-sse`, `fb-sse-h2`): the same subscribers and
//! writer through Tern's Firebase REST API — each listener streams
//! `GET /bench.json` (`Accept: text/event-stream`), the writer `PUT`s
//! `/bench.json` — so the rows beside Tern's own SSE show what the Firebase
//! translation costs.
//!
//! Firebase realtime protocol (`fb-ws`): each listener is a WebSocket to
//! `/.ws?v=5&ns=default` speaking the protocol as the SDKs do (the hello,
//! a listen `q` of `/bench`, its data, its `ok`), one connection per
//! listener as every SDK app has; the writer `PUT`s `/bench.json`. `fb-sdk`:
//! the official `firebase` package itself, `--sdk-listeners` apps in one
//! Node process (`tests/firebase-js/sdk-fanout.mjs`), each `onValue` of
//! `/bench`, the writer's puts made and timed by that process (its clock).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use clap::Args;
use futures::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Barrier;

use super::cpu::CpuMeter;
use super::suite::{spawn_etcd, spawn_listening};

#[derive(Args)]
pub(crate) struct WatchBenchArgs {
    /// Directory for watch.json and watch.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Subscriber counts to measure (each over SSE, WebSocket and etcd).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    subscribers: Vec<usize>,
    /// Puts per run.
    #[arg(long, default_value_t = 100)]
    puts: u64,
    /// Puts per second (at 10,000 subscribers each put is 10,000 deliveries).
    #[arg(long, default_value_t = 10)]
    rate: u64,
    /// Bytes of padding in each value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Subscriptions per connection for the multiplexed runs (WebSocket, etcd).
    #[arg(long, default_value_t = 100)]
    multiplex: usize,
    /// The etcd binary (Debian's etcd-server).
    #[arg(long, default_value = "etcd")]
    etcd: String,
    /// Which configurations to measure (all by default; a subset helps profiling).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "sse,sse-h2,ws,ws-mux,etcd,etcd-mux,sse-floor,sse-h2-floor,fb-sse,fb-sse-h2")]
    runs: Vec<Run>,
    /// Listeners of the `fb-sdk` run (real SDK clients in one Node process:
    /// a few hundred, as the SDK is heavier than a protocol harness).
    #[arg(long, default_value_t = 300)]
    sdk_listeners: usize,
}

/// One measured configuration: a peer and how its subscribers share connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Run {
    /// Tern SSE, one HTTP/1.1 connection per subscriber.
    Sse,
    /// Tern SSE over HTTP/2, `--multiplex` streams per connection.
    SseH2,
    /// Not Tern: the SSE fan-out floor (`fanout.rs`), one HTTP/1.1 connection
    /// per subscriber, the same subscribers and writer as `sse`.
    SseFloor,
    /// Not Tern: the SSE fan-out floor over HTTP/2, `--multiplex` streams per
    /// connection, the same subscribers and writer as `sse-h2`.
    SseH2Floor,
    /// Tern WebSocket, one connection per subscriber.
    Ws,
    /// Tern WebSocket, `--multiplex` subscriptions per connection.
    WsMux,
    /// etcd watch, one gRPC connection per watcher.
    Etcd,
    /// etcd watch, `--multiplex` watchers per gRPC connection.
    EtcdMux,
    /// Tern's Firebase streaming, one HTTP/1.1 connection per listener.
    FbSse,
    /// Tern's Firebase streaming over HTTP/2, `--multiplex` streams per connection.
    FbSseH2,
    /// As `sse-h2`, the writer's puts journaled (`durability=journaled`):
    /// put → visible when the node sequences the write itself.
    SseH2Journaled,
    /// As `sse-h2`, over TLS (HTTP/2 by ALPN; a CA made for the run).
    SseH2Tls,
    /// The Firebase realtime protocol (`/.ws`), spoken by this harness, one
    /// WebSocket per listener.
    FbWs,
    /// The official `firebase` SDK in Node, `--sdk-listeners` apps (the
    /// row's subscriber count is that, not `--subscribers`).
    FbSdk,
}

#[derive(Debug, Serialize)]
pub(crate) struct WatchResult {
    pub peer: String,
    pub subscribers: usize,
    pub subscribers_per_connection: usize,
    pub puts: u64,
    pub rate_per_s: u64,
    /// Events every subscriber should have received, and how many arrived.
    pub events_expected: u64,
    pub events_received: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Server resident memory grown per connected subscriber (Tern only).
    pub server_bytes_per_subscriber: Option<u64>,
    /// CPU the server, and this harness (writer and subscribers), spent
    /// per event received, from the first put until the last event
    /// arrived: on a 2-core machine both share the cores, so the harness's
    /// cost shows in every row's latency too.
    pub server_cpu_us_per_event: f64,
    pub harness_cpu_us_per_event: f64,
}

/// How long after the last put the subscribers may still receive it.
const DRAIN: Duration = Duration::from_secs(10);
/// Subscribers opened at once (the listen backlog is finite).
const CONNECT_CONCURRENCY: usize = 200;

pub(crate) async fn run(args: WatchBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let mut results = Vec::new();
    for &n in &args.subscribers {
        for &run in &args.runs {
            let result = match run {
                Run::Sse => run_subscribers(&args, n, Transport::Sse, 1).await?,
                Run::SseH2 => run_subscribers(&args, n, Transport::Sse, args.multiplex).await?,
                Run::SseFloor => run_subscribers(&args, n, Transport::SseFloor, 1).await?,
                Run::SseH2Floor => run_subscribers(&args, n, Transport::SseFloor, args.multiplex).await?,
                Run::Ws => run_subscribers(&args, n, Transport::WebSocket, 1).await?,
                Run::WsMux => run_subscribers(&args, n, Transport::WebSocket, args.multiplex).await?,
                Run::Etcd => run_etcd(&args, n, 1).await?,
                Run::EtcdMux => run_etcd(&args, n, args.multiplex).await?,
                Run::FbSse => run_subscribers(&args, n, Transport::Firebase, 1).await?,
                Run::FbSseH2 => run_subscribers(&args, n, Transport::Firebase, args.multiplex).await?,
                Run::SseH2Journaled => run_subscribers(&args, n, Transport::SseJournaled, args.multiplex).await?,
                Run::SseH2Tls => run_subscribers(&args, n, Transport::SseTls, args.multiplex).await?,
                Run::FbWs => run_subscribers(&args, n, Transport::FirebaseRealtime, 1).await?,
                Run::FbSdk => run_sdk(&args).await?,
            };
            eprintln!("{result:?}");
            results.push(result);
        }
    }
    std::fs::write(args.out.join("watch.json"), serde_json::to_string_pretty(&results)?)?;
    let table = markdown(&results);
    std::fs::write(args.out.join("watch.md"), &table)?;
    println!("{table}");
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Transport {
    Sse,
    WebSocket,
    /// SSE subscribers of the fan-out floor instead of Tern.
    SseFloor,
    /// Firebase streaming listeners of Tern's Firebase REST API.
    Firebase,
    /// Tern SSE, the writer's puts journaled.
    SseJournaled,
    /// Tern SSE over TLS.
    SseTls,
    /// Firebase realtime protocol listeners (`/.ws`).
    FirebaseRealtime,
}

impl Transport {
    /// The path an SSE subscriber streams.
    fn sse_path(self) -> &'static str {
        match self {
            Transport::Firebase => "/bench.json",
            _ => "/v1/ns/default/watch?pk=bench",
        }
    }

    /// The event that tells a subscriber it is connected: Tern's starting
    /// position, Firebase's first whole-value `put`.
    fn started_mark(self) -> &'static [u8] {
        match self {
            Transport::Firebase => b"event: put",
            _ => b"event: progress",
        }
    }

    /// Where the writer puts, and where it warms the write path up.
    fn put_paths(self) -> (&'static str, &'static str) {
        match self {
            Transport::Firebase | Transport::FirebaseRealtime => ("/bench.json", "/warm.json"),
            Transport::SseJournaled => ("/v1/ns/default/kv/bench/k?durability=journaled", "/v1/ns/default/kv/warm/up?durability=journaled"),
            _ => ("/v1/ns/default/kv/bench/k", "/v1/ns/default/kv/warm/up"),
        }
    }
}

/// When each subscriber saw each sequence number.
type Arrivals = Vec<(u64, Instant)>;

/// One row over HTTP: starts the server (`tern dev`, or the fan-out floor for
/// `Transport::SseFloor`), connects `n` subscribers `per_connection` to a
/// connection, and measures put → event.
async fn run_subscribers(args: &WatchBenchArgs, n: usize, transport: Transport, per_connection: usize) -> anyhow::Result<WatchResult> {
    assert!(per_connection >= 1 && n % per_connection == 0, "--subscribers must be multiples of --multiplex");
    let connections = n / per_connection;
    let scratch = tempfile::Builder::new().prefix("tern-bench-watch-").tempdir()?;
    let data_dir = scratch.path().join("data");
    // TLS (`sse-h2-tls`): a CA and certificate for the run; the node serves only TLS.
    let certificates = match transport {
        Transport::SseTls => Some(super::security::make_certificates(scratch.path())?),
        _ => None,
    };
    let tls_args: Vec<String> = match &certificates {
        Some((_, cert, key)) => vec![
            "serve".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--namespace".into(),
            "default:16".into(),
            "--tls-cert-file".into(),
            cert.display().to_string(),
            "--tls-key-file".into(),
            key.display().to_string(),
        ],
        None => Vec::new(),
    };
    let tls_args: Vec<&str> = tls_args.iter().map(String::as_str).collect();
    let (program, server): (&std::path::Path, &[&str]) = match transport {
        Transport::SseFloor => (crate::paths::harness(), &["fanout-floor", "--listen", "127.0.0.1:0"]),
        Transport::SseTls => (crate::paths::tern(), &tls_args),
        _ => (crate::paths::tern(), &["dev", "--listen", "127.0.0.1:0", "--data-dir", data_dir.to_str().unwrap()]),
    };
    let (child, addr) = spawn_listening(program, server).await?;
    let pid = child.id().expect("running");
    let mut client = reqwest::Client::builder();
    let mut tls = None;
    if let Some((ca, _, _)) = &certificates {
        client = client.add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?);
        tls = Some(super::load::tls_client(ca, b"h2")?);
    }
    let client = client.build()?;
    let scheme = if certificates.is_some() { "https" } else { "http" };
    let url = |path: &str| format!("{scheme}://{addr}{path}");
    if certificates.is_some() {
        // `tern serve` may answer before its namespace's partitions are ready.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !client.get(url("/readyz")).send().await.is_ok_and(|r| r.status().is_success()) {
            anyhow::ensure!(Instant::now() < deadline, "tern did not become ready over TLS");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (put_path, warm_path) = transport.put_paths();
    // Warm the write path once, so the first measured put is not the first ever.
    client.put(url(warm_path)).body("1").send().await?.error_for_status()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_bytes(pid)?;
    let ready = Arc::new(Barrier::new(connections + 1));
    let deadline = Arc::new(std::sync::OnceLock::<Instant>::new());
    let semaphore = Arc::new(tokio::sync::Semaphore::new(CONNECT_CONCURRENCY));
    let mut subscribers = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (addr, ready, deadline, semaphore, tls) = (addr.clone(), ready.clone(), deadline.clone(), semaphore.clone(), tls.clone());
        let puts = args.puts;
        subscribers.push(tokio::spawn(async move {
            let permit = semaphore.acquire_owned().await.expect("open");
            match transport {
                Transport::Sse | Transport::SseFloor | Transport::Firebase | Transport::SseJournaled if per_connection == 1 => {
                    sse_subscriber(&addr, transport, puts, ready, deadline, permit).await
                }
                Transport::Sse | Transport::SseFloor | Transport::Firebase | Transport::SseJournaled | Transport::SseTls => {
                    sse_h2_subscribers(&addr, tls, transport, puts, per_connection, ready, deadline, permit).await
                }
                Transport::WebSocket => ws_subscriber(&addr, puts, per_connection, ready, deadline, permit).await,
                Transport::FirebaseRealtime => firebase_listener(&addr, puts, ready, deadline, permit).await,
            }
        }));
    }
    ready.wait().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = rss_bytes(pid)?;
    let put_url = url(put_path);
    let put = |value| {
        let request = client.put(&put_url).body(value);
        async move {
            request.send().await?.error_for_status()?;
            Ok(())
        }
    };
    let measured = measure(args, put, &deadline, subscribers, child).await?;
    let name = match transport {
        Transport::Sse if per_connection == 1 => "Tern SSE",
        Transport::Sse => "Tern SSE (HTTP/2)",
        Transport::WebSocket => "Tern WebSocket",
        Transport::SseFloor if per_connection == 1 => "SSE fan-out floor (raw sockets, not Tern)",
        Transport::SseFloor => "SSE fan-out floor (HTTP/2, h2 crate, not Tern)",
        Transport::SseJournaled if per_connection == 1 => "Tern SSE, puts journaled",
        Transport::SseJournaled => "Tern SSE (HTTP/2), puts journaled",
        Transport::Firebase if per_connection == 1 => "Tern Firebase streaming",
        Transport::Firebase => "Tern Firebase streaming (HTTP/2)",
        Transport::SseTls => "Tern SSE (HTTP/2 over TLS)",
        Transport::FirebaseRealtime => "Tern Firebase realtime protocol (/.ws)",
    };
    let mut result = summarize(name, n, per_connection, args, &measured)?;
    result.server_bytes_per_subscriber = Some(rss_after.saturating_sub(rss_before) / n as u64);
    Ok(result)
}

/// What a row measured: when each put was sent, every subscriber's
/// arrivals, and the CPU µs per event received of the server and the harness.
struct Measured {
    sent: Vec<Instant>,
    arrivals: Vec<Arrivals>,
    cpu_us_per_event: [f64; 2],
}

/// The measured part of a row: the writer's puts, then every subscriber's
/// arrivals (each waits until `DRAIN` after the last put), then the server
/// stopped.
async fn measure<F, Fut>(
    args: &WatchBenchArgs,
    put: F,
    deadline: &std::sync::OnceLock<Instant>,
    subscribers: Vec<tokio::task::JoinHandle<anyhow::Result<Arrivals>>>,
    server: tokio::process::Child,
) -> anyhow::Result<Measured>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let server_pid = server.id().ok_or_else(|| anyhow::anyhow!("the server exited before the puts"))?;
    let meter = CpuMeter::start(&[("server", server_pid), ("harness", std::process::id())])?;
    let sent = write(args, put).await?;
    let _ = deadline.set(Instant::now() + DRAIN);
    let mut arrivals = Vec::with_capacity(subscribers.len());
    for s in subscribers {
        arrivals.push(s.await??);
    }
    let received: usize = arrivals.iter().map(Vec::len).sum();
    let cpu = meter.per_op_us_each(received as f64)?;
    stop(server).await?;
    Ok(Measured { sent, arrivals, cpu_us_per_event: [cpu[0], cpu[1]] })
}

/// Time for the kernel and this process to tear down the last run's
/// thousands of connections.
const SETTLE_AFTER_STOP: Duration = Duration::from_secs(3);

/// Kills a measured server and waits until it is gone and the kernel has
/// released its sockets, so it takes nothing from the next run.
async fn stop(mut child: tokio::process::Child) -> anyhow::Result<()> {
    child.kill().await?;
    tokio::time::sleep(SETTLE_AFTER_STOP).await;
    Ok(())
}

/// How long a subscriber still waits: until the deadline the writer sets
/// after its last put, or (before that) an hour.
fn remaining(deadline: &std::sync::OnceLock<Instant>) -> Duration {
    deadline.get().map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(Instant::now()))
}

/// The value of put `seq`: its sequence number, then padding.
fn value(seq: u64, pad: &str) -> String {
    format!("{{\"seq\":{seq},\"pad\":\"{pad}\"}}")
}

/// When put `seq` is due: open loop at `args.rate` from `start`.
fn due(start: Instant, seq: u64, args: &WatchBenchArgs) -> tokio::time::Instant {
    (start + Duration::from_secs_f64(seq as f64 / args.rate as f64)).into()
}

/// Puts `args.puts` values at `args.rate` through `put`; returns when each was sent.
async fn write<F, Fut>(args: &WatchBenchArgs, mut put: F) -> anyhow::Result<Vec<Instant>>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let pad = "x".repeat(args.value_bytes);
    let start = Instant::now();
    let mut sent = Vec::with_capacity(args.puts as usize);
    for seq in 0..args.puts {
        tokio::time::sleep_until(due(start, seq, args)).await;
        sent.push(Instant::now());
        put(value(seq, &pad)).await?;
    }
    Ok(sent)
}

/// What precedes each sequence number in an event (the value is JSON).
const SEQ_MARK: &[u8] = b"\"seq\":";

/// Built once: building a finder costs more than a search of one read.
static SEQ_FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> = std::sync::LazyLock::new(|| memchr::memmem::Finder::new(SEQ_MARK));

/// Finds every `"seq":N` in `bytes`, `carry` being what the last read left
/// unfinished (a mark or a number cut by the read's end). Reads are scanned
/// where they are: only an unfinished tail (a few bytes) is copied.
fn scan_seqs(carry: &mut Vec<u8>, bytes: &[u8], at: Instant, out: &mut Arrivals) {
    if carry.is_empty() {
        let rest = scan_complete(bytes, at, out);
        keep_unfinished(carry, &bytes[rest..]);
    } else {
        let mut joined = std::mem::take(carry);
        joined.extend_from_slice(bytes);
        let rest = scan_complete(&joined, at, out);
        keep_unfinished(carry, &joined[rest..]);
    }
}

/// Pushes each `"seq":N` whose number ends within `bytes`; returns where
/// the unscanned rest starts (at a mark whose number may go on, or after
/// the last number).
fn scan_complete(bytes: &[u8], at: Instant, out: &mut Arrivals) -> usize {
    let mut i = 0;
    while let Some(found) = SEQ_FINDER.find(&bytes[i..]) {
        let mark_at = i + found;
        let start = mark_at + SEQ_MARK.len();
        let digits = bytes[start..].iter().take_while(|b| b.is_ascii_digit()).count();
        if start + digits >= bytes.len() {
            return mark_at; // the number may continue in the next read
        }
        let seq: u64 = std::str::from_utf8(&bytes[start..start + digits]).unwrap_or("0").parse().unwrap_or(u64::MAX);
        out.push((seq, at));
        i = start + digits;
    }
    i
}

/// Keeps of `rest` only what the next read may finish: a mark with its
/// number so far, or the end of `rest` if it is the start of a mark.
fn keep_unfinished(carry: &mut Vec<u8>, rest: &[u8]) {
    carry.clear();
    if rest.starts_with(SEQ_MARK) {
        carry.extend_from_slice(rest);
        return;
    }
    let longest = (1..SEQ_MARK.len()).rev().find(|&n| rest.ends_with(&SEQ_MARK[..n])).unwrap_or(0);
    carry.extend_from_slice(&rest[rest.len() - longest..]);
}

async fn sse_subscriber(
    addr: &str,
    transport: Transport,
    puts: u64,
    ready: Arc<Barrier>,
    deadline: Arc<std::sync::OnceLock<Instant>>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> anyhow::Result<Arrivals> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let request = format!("GET {} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n", transport.sse_path());
    stream.write_all(request.as_bytes()).await?;
    let mut buf = vec![0u8; 16 * 1024];
    // Connected once the first event (the starting position) arrived.
    let mut head = Vec::new();
    let mark = transport.started_mark();
    while !head.windows(mark.len()).any(|w| w == mark) {
        let read = stream.read(&mut buf).await?;
        anyhow::ensure!(read > 0, "the subscription closed before it started");
        head.extend_from_slice(&buf[..read]);
    }
    drop(permit);
    ready.wait().await;
    let mut arrivals = Vec::with_capacity(puts as usize);
    let mut carry = Vec::new();
    while (arrivals.len() as u64) < puts {
        let wait = remaining(&deadline);
        let Ok(read) = tokio::time::timeout(wait, stream.read(&mut buf)).await else { break };
        let read = read?;
        if read == 0 {
            break;
        }
        scan_seqs(&mut carry, &buf[..read], Instant::now(), &mut arrivals);
    }
    Ok(arrivals)
}

/// Flow-control windows of the harness's HTTP/2 client (hyper's client
/// defaults; browsers open larger ones).
const H2_CLIENT_STREAM_WINDOW_BYTES: u32 = 2 * 1024 * 1024;
const H2_CLIENT_CONNECTION_WINDOW_BYTES: u32 = 5 * 1024 * 1024;
/// How often a waiting HTTP/2 subscriber looks at the deadline.
const DEADLINE_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// `streams` SSE subscriptions multiplexed on one HTTP/2 connection (h2c,
/// prior knowledge), as a browser does for SSE over HTTP/2. Read with the
/// `h2` crate in this one task, which also drives the connection (as the
/// WebSocket subscribers read with tungstenite in one task each): the
/// harness shares the machine's cores with the server, so what it spends
/// per event shows in every row's latency. (Through `reqwest`, which reads
/// each stream in a future of its own beside hyper's connection task, it
/// cost 1.8-2.0 µs of CPU per event; this way 1.3-1.7.)
#[allow(clippy::too_many_arguments)]
async fn sse_h2_subscribers(
    addr: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    transport: Transport,
    puts: u64,
    streams: usize,
    ready: Arc<Barrier>,
    deadline: Arc<std::sync::OnceLock<Instant>>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> anyhow::Result<Arrivals> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let io: Box<dyn super::load::Stream> = match &tls {
        None => Box::new(tcp),
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
            Box::new(tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp).await?)
        }
    };
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(H2_CLIENT_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(H2_CLIENT_CONNECTION_WINDOW_BYTES)
        .handshake::<_, bytes::Bytes>(io)
        .await?;
    let mut connection = std::pin::pin!(connection);
    let scheme = if tls.is_some() { "https" } else { "http" };
    let uri = format!("{scheme}://{addr}{}", transport.sse_path());
    let mut bodies = Vec::with_capacity(streams);
    for _ in 0..streams {
        let opened = open_h2_watch(client.clone(), &uri, transport.started_mark());
        bodies.push(while_driving(connection.as_mut(), opened).await?);
    }
    drop(permit);
    while_driving(connection.as_mut(), async {
        ready.wait().await;
        Ok(())
    })
    .await?;
    let mut deadline_check = tokio::time::interval(DEADLINE_CHECK_INTERVAL);
    let mut carries = vec![Vec::new(); streams];
    let mut received = vec![0u64; streams];
    let mut arrivals = Vec::with_capacity(puts as usize * streams);
    loop {
        // Every stream is read until it has nothing, then the connection
        // reads the socket: a put reaches all of this connection's streams
        // at once, so one wake-up finds data on most of them.
        let next = std::future::poll_fn(|cx| {
            let mut failed = None;
            for (i, body) in bodies.iter_mut().enumerate() {
                while let Poll::Ready(Some(chunk)) = body.poll_data(cx) {
                    let chunk = match chunk {
                        Ok(chunk) => chunk,
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    };
                    let _ = body.flow_control().release_capacity(chunk.len());
                    let before = arrivals.len();
                    scan_seqs(&mut carries[i], &chunk, Instant::now(), &mut arrivals);
                    received[i] += (arrivals.len() - before) as u64;
                }
            }
            if let Some(e) = failed {
                return Poll::Ready(H2Next::Failed(e));
            }
            if received.iter().all(|&n| n >= puts) {
                return Poll::Ready(H2Next::Complete);
            }
            if let Poll::Ready(ended) = connection.as_mut().poll(cx) {
                return Poll::Ready(H2Next::ConnectionEnded(ended));
            }
            deadline_check.poll_tick(cx).map(|_| H2Next::DeadlineCheck)
        })
        .await;
        match next {
            H2Next::Complete => break,
            H2Next::Failed(e) => return Err(e.into()),
            H2Next::ConnectionEnded(ended) => anyhow::bail!("the HTTP/2 connection ended: {ended:?}"),
            H2Next::DeadlineCheck if remaining(&deadline).is_zero() => break,
            H2Next::DeadlineCheck => {}
        }
    }
    Ok(arrivals)
}

/// What an HTTP/2 subscriber's task does next.
enum H2Next {
    /// Every stream received every put.
    Complete,
    Failed(h2::Error),
    ConnectionEnded(Result<(), h2::Error>),
    DeadlineCheck,
}

/// Opens one SSE watch; returns its body once the first event (the starting
/// position) arrived.
async fn open_h2_watch(client: h2::client::SendRequest<bytes::Bytes>, uri: &str, mark: &[u8]) -> anyhow::Result<h2::RecvStream> {
    let mut client = client.ready().await?;
    let request = http::Request::get(uri).header("accept", "text/event-stream").body(())?;
    let (response, _) = client.send_request(request, true)?;
    let response = response.await?;
    anyhow::ensure!(response.status().is_success(), "watch answered {}", response.status());
    let mut body = response.into_body();
    let mut head = Vec::new();
    while !head.windows(mark.len()).any(|w| w == mark) {
        let chunk = body.data().await.ok_or_else(|| anyhow::anyhow!("the subscription closed before it started"))??;
        let _ = body.flow_control().release_capacity(chunk.len());
        head.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Runs `work` while driving the HTTP/2 connection it needs.
async fn while_driving<T, IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    connection: std::pin::Pin<&mut h2::client::Connection<IO, bytes::Bytes>>,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        biased;
        result = work => result,
        ended = connection => Err(anyhow::anyhow!("the HTTP/2 connection ended: {ended:?}")),
    }
}

async fn ws_subscriber(
    addr: &str,
    puts: u64,
    subscriptions: usize,
    ready: Arc<Barrier>,
    deadline: Arc<std::sync::OnceLock<Instant>>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> anyhow::Result<Arrivals> {
    use tokio_tungstenite::tungstenite::Message;
    // Small buffers, as the server's: tungstenite's 128 KiB defaults would
    // cost the harness ~1.3 GB at 10,000 connections and slow it, not Tern.
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(4096);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(format!("ws://{addr}/v1/ws"), Some(config), false).await?;
    for i in 0..subscriptions {
        ws.send(Message::Text(format!(r#"{{"type":"sub","id":"b{i}","ns":"default","pk":"bench"}}"#).into())).await?;
    }
    let mut started = 0;
    while started < subscriptions {
        match ws.next().await {
            Some(Ok(Message::Text(text))) if text.contains("\"progress\"") => started += 1,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("the WebSocket closed before the subscription started"),
        }
    }
    drop(permit);
    ready.wait().await;
    ws_arrivals(&mut ws, puts * subscriptions as u64, &deadline).await
}

type BenchSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reads a WebSocket's text messages until `expected` sequence numbers
/// arrived or the deadline passed: when each arrived.
async fn ws_arrivals(ws: &mut BenchSocket, expected: u64, deadline: &std::sync::OnceLock<Instant>) -> anyhow::Result<Arrivals> {
    use tokio_tungstenite::tungstenite::Message;
    let mut arrivals = Vec::with_capacity(expected as usize);
    let mut carry = Vec::new();
    while (arrivals.len() as u64) < expected {
        let wait = remaining(deadline);
        let Ok(Some(message)) = tokio::time::timeout(wait, ws.next()).await else { break };
        if let Message::Text(text) = message? {
            scan_seqs(&mut carry, text.as_bytes(), Instant::now(), &mut arrivals);
        }
    }
    Ok(arrivals)
}

/// A listener speaking the Firebase realtime protocol: the server's hello,
/// then a listen of `/bench` (`q`), its data and its answer; then every
/// data push is an event. Messages this small are never split into frames.
async fn firebase_listener(
    addr: &str,
    puts: u64,
    ready: Arc<Barrier>,
    deadline: Arc<std::sync::OnceLock<Instant>>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> anyhow::Result<Arrivals> {
    use tokio_tungstenite::tungstenite::Message;
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(4096);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(format!("ws://{addr}/.ws?v=5&ns=default"), Some(config), false).await?;
    ws.send(Message::Text(r#"{"t":"d","d":{"r":1,"a":"q","b":{"p":"/bench","h":""}}}"#.into())).await?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) if text.contains(r#""r":1"#) => break,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("the WebSocket closed before the listen was answered"),
        }
    }
    drop(permit);
    ready.wait().await;
    ws_arrivals(&mut ws, puts, &deadline).await
}

/// What `tests/firebase-js/sdk-fanout.mjs` reports.
#[derive(serde::Deserialize)]
struct SdkReport {
    events_expected: u64,
    events_received: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// `fb-sdk`: the official SDK's listeners in one Node process, against a
/// `tern dev`. The Node process connects them and says `ready`; this
/// harness then measures the server's memory and tells it to write; it
/// times put → `onValue` on its own clock and reports the percentiles.
async fn run_sdk(args: &WatchBenchArgs) -> anyhow::Result<WatchResult> {
    use tokio::io::AsyncBufReadExt;
    let scratch = tempfile::Builder::new().prefix("tern-bench-fb-sdk-").tempdir()?;
    let data_dir = scratch.path().join("data");
    let (child, addr) = spawn_listening(crate::paths::tern(), &["dev", "--listen", "127.0.0.1:0", "--data-dir", data_dir.to_str().unwrap()]).await?;
    let pid = child.id().expect("running");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_bytes(pid)?;
    let script = crate::paths::repo_file("tests/firebase-js/sdk-fanout.mjs");
    let mut node = tokio::process::Command::new("node")
        .arg(&script)
        .args(["--url", &format!("http://{addr}"), "--listeners", &args.sdk_listeners.to_string()])
        .args(["--puts", &args.puts.to_string(), "--rate", &args.rate.to_string(), "--value-bytes", &args.value_bytes.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run node {}: {e} (npm ci in tests/firebase-js first)", script.display()))?;
    let mut lines = tokio::io::BufReader::new(node.stdout.take().expect("piped")).lines();
    let first = tokio::time::timeout(Duration::from_secs(300), lines.next_line()).await??;
    anyhow::ensure!(first.as_deref() == Some("ready"), "the SDK listeners did not start: {first:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = rss_bytes(pid)?;
    let node_pid = node.id().ok_or_else(|| anyhow::anyhow!("node exited"))?;
    let meter = CpuMeter::start(&[("server", pid), ("harness", node_pid)])?;
    node.stdin.take().expect("piped").write_all(b"go\n").await?;
    let report =
        tokio::time::timeout(Duration::from_secs(600), lines.next_line()).await??.ok_or_else(|| anyhow::anyhow!("no report from the SDK run"))?;
    let report: SdkReport = serde_json::from_str(&report)?;
    let cpu = meter.per_op_us_each(report.events_received.max(1) as f64)?;
    let _ = node.wait().await;
    stop(child).await?;
    Ok(WatchResult {
        peer: "Tern Firebase realtime, official firebase SDK (Node)".into(),
        subscribers: args.sdk_listeners,
        subscribers_per_connection: 1,
        puts: args.puts,
        rate_per_s: args.rate,
        events_expected: report.events_expected,
        events_received: report.events_received,
        p50_ms: report.p50_ms,
        p99_ms: report.p99_ms,
        max_ms: report.max_ms,
        server_bytes_per_subscriber: Some(rss_after.saturating_sub(rss_before) / args.sdk_listeners as u64),
        server_cpu_us_per_event: cpu[0],
        harness_cpu_us_per_event: cpu[1],
    })
}

async fn run_etcd(args: &WatchBenchArgs, n: usize, per_connection: usize) -> anyhow::Result<WatchResult> {
    let scratch = tempfile::Builder::new().prefix("tern-bench-etcd-").tempdir()?;
    let (child, endpoint) = spawn_etcd(&args.etcd, scratch.path()).await?;
    let ready = Arc::new(Barrier::new(n + 1));
    let deadline = Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut clients = Vec::new();
    for _ in 0..n.div_ceil(per_connection) {
        clients.push(etcd_client::Client::connect([endpoint.as_str()], None).await?);
    }
    let mut watchers = Vec::with_capacity(n);
    for i in 0..n {
        let client = clients[i % clients.len()].clone();
        let (ready, deadline, puts) = (ready.clone(), deadline.clone(), args.puts);
        watchers.push(tokio::spawn(async move {
            let mut stream = client.watch_client().watch("bench", None).await?;
            let _ = stream.message().await?; // the creation response
            ready.wait().await;
            let mut arrivals: Arrivals = Vec::with_capacity(puts as usize);
            let mut carry = Vec::new();
            while (arrivals.len() as u64) < puts {
                let wait = remaining(&deadline);
                let Ok(message) = tokio::time::timeout(wait, stream.message()).await else { break };
                let Some(response) = message? else { break };
                let at = Instant::now();
                for event in response.events() {
                    if let Some(kv) = event.kv() {
                        scan_seqs(&mut carry, kv.value(), at, &mut arrivals);
                    }
                }
            }
            Ok::<_, anyhow::Error>(arrivals)
        }));
    }
    ready.wait().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writer = etcd_client::Client::connect([endpoint.as_str()], None).await?;
    let put = |value| {
        let mut writer = writer.clone();
        async move {
            writer.put("bench", value, None).await?;
            Ok(())
        }
    };
    let measured = measure(args, put, &deadline, watchers, child).await?;
    summarize("etcd watch", n, per_connection, args, &measured)
}

fn summarize(peer: &str, n: usize, per_connection: usize, args: &WatchBenchArgs, measured: &Measured) -> anyhow::Result<WatchResult> {
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut received = 0u64;
    for subscriber in &measured.arrivals {
        for &(seq, at) in subscriber {
            if let Some(sent_at) = measured.sent.get(seq as usize) {
                histogram.saturating_record(at.saturating_duration_since(*sent_at).as_micros().max(1) as u64);
                received += 1;
            }
        }
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Ok(WatchResult {
        peer: peer.to_string(),
        subscribers: n,
        subscribers_per_connection: per_connection,
        puts: args.puts,
        rate_per_s: args.rate,
        events_expected: args.puts * n as u64,
        events_received: received,
        p50_ms: ms(histogram.value_at_quantile(0.50)),
        p99_ms: ms(histogram.value_at_quantile(0.99)),
        max_ms: ms(histogram.max()),
        server_bytes_per_subscriber: None,
        server_cpu_us_per_event: measured.cpu_us_per_event[0],
        harness_cpu_us_per_event: measured.cpu_us_per_event[1],
    })
}

fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for pid {pid}"))?
        .parse()?;
    Ok(kb * 1024)
}

fn markdown(results: &[WatchResult]) -> String {
    let mut out = String::from(
        "| peer | subscribers | per connection | puts (rate/s) | events received / expected | p50 ms | p99 ms | max ms | server memory per subscriber | CPU µs per event: server / harness |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let memory = r.server_bytes_per_subscriber.map_or("—".to_string(), |b| format!("{:.1} KiB", b as f64 / 1024.0));
        out.push_str(&format!(
            "| {} | {} | {} | {} ({}) | {} / {} | {:.2} | {:.2} | {:.2} | {} | {:.1} / {:.1} |\n",
            r.peer,
            r.subscribers,
            r.subscribers_per_connection,
            r.puts,
            r.rate_per_s,
            r.events_received,
            r.events_expected,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            memory,
            r.server_cpu_us_per_event,
            r.harness_cpu_us_per_event
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_are_found_across_reads() {
        let at = Instant::now();
        let mut carry = Vec::new();
        let mut out = Vec::new();
        scan_seqs(&mut carry, b"data: {\"pk\":\"bench\",\"value\":{\"seq\":1", at, &mut out);
        assert!(out.is_empty(), "the number may go on");
        scan_seqs(&mut carry, b"2,\"pad\":\"x\"}}\n\ndata: {\"value\":{\"se", at, &mut out);
        scan_seqs(&mut carry, b"q\":13,\"pad\"", at, &mut out);
        assert_eq!(out.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![12, 13]);
        assert_eq!(carry, b"\"", "of a finished read only what may start a mark is kept");
        scan_seqs(&mut carry, b"}\n\n", at, &mut out);
        assert!(carry.is_empty(), "nothing unfinished is kept");
        scan_seqs(&mut carry, b"{\"seq\":14}{\"", at, &mut out);
        assert_eq!(carry, b"\"", "only a possible start of a mark is kept");
        scan_seqs(&mut carry, b"seq\":15}", at, &mut out);
        scan_seqs(&mut carry, b"\"seq\":", at, &mut out);
        scan_seqs(&mut carry, b"16,", at, &mut out);
        assert_eq!(out.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![12, 13, 14, 15, 16]);
    }
}
