//! The HTTP load generator: one raw hyper HTTP/1.1 keep-alive connection per
//! simulated client, one request in flight per connection, latencies in an
//! HdrHistogram per connection (merged at the end).

use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Uri};
use rand::{Rng, SeedableRng};

use super::report::BenchResult;
use super::scale;

#[derive(Debug, Clone)]
pub enum Operation {
    /// GET a random existing key of the namespace.
    TernGet { ns: String },
    /// PUT a random key of the namespace.
    TernPut { ns: String },
    /// PUT a random key with `durability=journaled` (answered once the node's journal has it).
    TernPutJournaled { ns: String },
    /// GET a random key of this list (e.g. keys of the partitions one node holds).
    TernGetOf { ns: String, keys: std::sync::Arc<Vec<String>> },
    /// POST a batch of `ops` puts (one pk, distinct sks: one partition).
    TernBatch { ns: String, ops: usize },
    /// GET a random existing child of `/bench` through the Firebase REST
    /// API (`/bench/{key}.json?ns={ns}`): the same keys and values as `TernGet`.
    FirebaseGet { ns: String },
    /// GET a random record of the first `keys` of a scale run (`scale::pk`, `scale::sk`).
    ScaleGet { ns: String },
    /// List 100 records of a random pk of a scale run's `keys` records.
    ScaleList { ns: String },
    /// PUT a random existing record of a scale run's `keys` records.
    ScalePut { ns: String },
    /// GET /hello.
    Hello,
}

#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub name: String,
    pub operation: Operation,
    pub connections: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub rate_per_s: Option<u64>,
    pub keys: u64,
    pub value_bytes: usize,
    /// `Authorization` header sent with every request (`Bearer TOKEN`).
    pub authorization: Option<String>,
    /// TLS to the target (its CA trusted), HTTP/1.1 as without.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// What a connection carries requests over: TCP, or TLS over it.
pub(crate) trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

/// A client TLS config that trusts the CA certificates in `ca_pem` (HTTP/1.1 by ALPN).
pub(crate) fn tls_trusting(ca_pem: &std::path::Path) -> anyhow::Result<std::sync::Arc<rustls::ClientConfig>> {
    tls_client(ca_pem, b"http/1.1")
}

/// A client TLS config that trusts the CA certificates in `ca_pem`, asking for `alpn`.
pub(crate) fn tls_client(ca_pem: &std::path::Path, alpn: &[u8]) -> anyhow::Result<std::sync::Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca_pem)? {
        roots.add(cert?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(std::sync::Arc::new(config))
}

/// Latencies above this are clamped (and still counted): 60 s.
const LATENCY_US_MAX: u64 = 60_000_000;

pub(crate) fn key_name(i: u64) -> String {
    format!("bench-{i:08}")
}

pub(crate) fn value_of(bytes: usize) -> Bytes {
    // A JSON string of exactly `bytes` bytes including its quotes.
    let inner = "x".repeat(bytes.saturating_sub(2));
    Bytes::from(format!("\"{inner}\""))
}

fn request(
    spec: &LoadSpec,
    authority: &str,
    authorization: Option<&hyper::header::HeaderValue>,
    value: &Bytes,
    rng: &mut impl Rng,
) -> Request<Full<Bytes>> {
    let key = rng.random_range(0..spec.keys);
    let (method, path, body) = match &spec.operation {
        Operation::TernGet { ns } => (Method::GET, format!("/v1/ns/{ns}/kv/{}/", key_name(key)), Bytes::new()),
        Operation::TernPut { ns } => (Method::PUT, format!("/v1/ns/{ns}/kv/{}/", key_name(key)), value.clone()),
        Operation::TernPutJournaled { ns } => (Method::PUT, format!("/v1/ns/{ns}/kv/{}/?durability=journaled", key_name(key)), value.clone()),
        Operation::TernGetOf { ns, keys } => (Method::GET, format!("/v1/ns/{ns}/kv/{}/", keys[rng.random_range(0..keys.len())]), Bytes::new()),
        Operation::TernBatch { ns, ops } => (Method::POST, format!("/v1/ns/{ns}/batch"), batch_body(key, *ops, value)),
        Operation::FirebaseGet { ns } => (Method::GET, format!("/bench/{}.json?ns={ns}", key_name(key)), Bytes::new()),
        Operation::ScaleGet { ns } => (Method::GET, format!("/v1/ns/{ns}/kv/{}/{}", scale::pk(key), scale::sk(key)), Bytes::new()),
        Operation::ScaleList { ns } => {
            let pk = scale::pk(rng.random_range(0..spec.keys.div_ceil(scale::RECORDS_PER_PK)) * scale::RECORDS_PER_PK);
            (Method::GET, format!("/v1/ns/{ns}/kv/{pk}?limit=100"), Bytes::new())
        }
        Operation::ScalePut { ns } => (Method::PUT, format!("/v1/ns/{ns}/kv/{}/{}", scale::pk(key), scale::sk(key)), value.clone()),
        Operation::Hello => (Method::GET, "/hello".to_string(), Bytes::new()),
    };
    let builder = match authorization {
        // Built once per connection, as a client reusing its token would.
        Some(authorization) => Request::builder().header(hyper::header::AUTHORIZATION, authorization.clone()),
        None => Request::builder(),
    };
    builder
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .expect("valid request")
}

/// `{"ops": [...]}`: `ops` puts of `value` to pk `key_name(key)`, sks 0..ops.
fn batch_body(key: u64, ops: usize, value: &Bytes) -> Bytes {
    let value = std::str::from_utf8(value).expect("bench values are JSON text");
    let pk = key_name(key);
    let items: Vec<String> = (0..ops).map(|i| format!(r#"{{"op":"put","pk":"{pk}","sk":"{i:04}","value":{value}}}"#)).collect();
    Bytes::from(format!(r#"{{"ops":[{}]}}"#, items.join(",")))
}

/// An HTTP/1.1 connection to `url`, over TLS with `tls`.
async fn open(url: &Uri, tls: Option<&std::sync::Arc<rustls::ClientConfig>>) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let authority = url.authority().map(|a| a.to_string()).unwrap_or_default();
    let tcp = tokio::net::TcpStream::connect(&authority).await?;
    tcp.set_nodelay(true)?;
    let stream: Box<dyn Stream> = match tls {
        None => Box::new(tcp),
        Some(config) => {
            let host = url.host().unwrap_or("127.0.0.1").to_string();
            let name = rustls::pki_types::ServerName::try_from(host)?;
            Box::new(tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp).await?)
        }
    };
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

struct ConnectionResult {
    histogram: Histogram<u64>,
    errors: u64,
}

/// Open loop: the scheduled send times of one connection, from the pacer.
type Schedule = tokio::sync::mpsc::Receiver<Instant>;

async fn connection(url: Uri, spec: LoadSpec, index: usize, start: Instant, mut schedule: Option<Schedule>) -> anyhow::Result<ConnectionResult> {
    let authority = url.authority().map(|a| a.to_string()).unwrap_or_default();
    let mut sender = open(&url, spec.tls.as_ref()).await?;
    let authorization = spec.authorization.as_deref().map(hyper::header::HeaderValue::from_str).transpose()?;
    let mut histogram = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3)?;
    let mut errors = 0;
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    let value = value_of(spec.value_bytes);
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        // Open loop: wait for the pacer's next scheduled time and measure from
        // it, so time spent waiting behind a slow response counts (no
        // coordinated omission). Closed loop: send now.
        let sent_at = match schedule.as_mut() {
            Some(schedule) => match schedule.recv().await {
                Some(scheduled) => scheduled,
                None => break,
            },
            None => now,
        };
        let ok = match sender.send_request(request(&spec, &authority, authorization.as_ref(), &value, &mut rng)).await {
            Ok(response) => {
                let status = response.status();
                let drained = response.into_body().collect().await.is_ok();
                drained && (status.is_success() || status == hyper::StatusCode::NOT_FOUND)
            }
            Err(_) => false,
        };
        let done = Instant::now();
        if sent_at >= measure_from && done <= end {
            if ok {
                histogram.saturating_record((done - sent_at).as_micros() as u64);
            } else {
                errors += 1;
            }
        }
        if !ok && sender.ready().await.is_err() {
            anyhow::bail!("connection {index} closed by the server");
        }
    }
    Ok(ConnectionResult { histogram, errors })
}

/// How often the pacer thread wakes to release due sends. tokio's timers tick
/// every 1 ms, which would release every connection's send in one burst per
/// tick; a thread sleeping 100 µs spreads arrivals as an open-loop load should.
const PACER_TICK: Duration = Duration::from_micros(100);

/// Releases sends at `rate` per second, evenly spaced from `start` to `end`,
/// round-robin over the connections; each carries its scheduled time.
fn pace(connections: Vec<tokio::sync::mpsc::Sender<Instant>>, rate: u64, start: Instant, end: Instant) {
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut next = start;
    let mut i = 0usize;
    while next < end {
        let now = Instant::now();
        while next <= now && next < end {
            // A full channel means that connection fell a whole plan behind; its sends are late anyway.
            let _ = connections[i % connections.len()].try_send(next);
            i += 1;
            next += interval;
        }
        std::thread::sleep(PACER_TICK.min(next.saturating_duration_since(Instant::now())));
    }
}

/// Runs `spec` against `url` and returns the merged result.
pub(crate) async fn run(url: &Uri, spec: &LoadSpec) -> anyhow::Result<BenchResult> {
    let start = Instant::now() + Duration::from_millis(200);
    let mut schedules: Vec<Option<Schedule>> = (0..spec.connections).map(|_| None).collect();
    if let Some(rate) = spec.rate_per_s {
        let mut senders = Vec::with_capacity(spec.connections);
        // Bounded by the plan: each connection's share of all scheduled sends.
        let share = (rate as f64 * (spec.warmup + spec.duration).as_secs_f64() / spec.connections as f64) as usize + 2;
        for slot in schedules.iter_mut() {
            let (tx, rx) = tokio::sync::mpsc::channel(share);
            senders.push(tx);
            *slot = Some(rx);
        }
        let end = start + spec.warmup + spec.duration;
        std::thread::Builder::new().name("bench-pacer".into()).spawn(move || pace(senders, rate, start, end))?;
    }
    let tasks: Vec<_> =
        schedules.into_iter().enumerate().map(|(i, schedule)| tokio::spawn(connection(url.clone(), spec.clone(), i, start, schedule))).collect();
    let mut merged = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3)?;
    let mut errors = 0;
    for task in tasks {
        let result = task.await??;
        merged.add(&result.histogram)?;
        errors += result.errors;
    }
    let mode = spec.rate_per_s.map_or("closed".to_string(), |r| format!("open@{r}/s"));
    Ok(BenchResult::from_histogram(&spec.name, spec.connections, mode, spec.duration.as_secs_f64(), errors, &merged))
}

/// Writes every key once (values of `spec.value_bytes`), `connections` at a time.
pub(crate) async fn preload_tern(url: &Uri, ns: &str, keys: u64, value_bytes: usize, connections: usize) -> anyhow::Result<()> {
    preload_tern_as(url, ns, keys, value_bytes, connections, None, None).await
}

/// `preload_tern`, sending `authorization` and over `tls`.
pub(crate) async fn preload_tern_as(
    url: &Uri,
    ns: &str,
    keys: u64,
    value_bytes: usize,
    connections: usize,
    authorization: Option<String>,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> anyhow::Result<()> {
    let authority = url.authority().map(|a| a.to_string()).unwrap_or_default();
    let value = value_of(value_bytes);
    let mut tasks = Vec::new();
    for c in 0..connections as u64 {
        let (authority, value, ns, url, tls, authorization) =
            (authority.clone(), value.clone(), ns.to_string(), url.clone(), tls.clone(), authorization.clone());
        tasks.push(tokio::spawn(async move {
            let mut sender = open(&url, tls.as_ref()).await?;
            let mut key = c;
            while key < keys {
                let mut request = Request::builder();
                if let Some(authorization) = &authorization {
                    request = request.header(hyper::header::AUTHORIZATION, authorization.as_str());
                }
                let request = request
                    .method(Method::PUT)
                    .uri(format!("/v1/ns/{ns}/kv/{}/", key_name(key)))
                    .header(hyper::header::HOST, &authority)
                    .body(Full::new(value.clone()))?;
                let response = sender.send_request(request).await?;
                anyhow::ensure!(response.status().is_success(), "preload put failed: {}", response.status());
                response.into_body().collect().await?;
                key += connections as u64;
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}
