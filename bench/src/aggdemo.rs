//! `tern-bench aggdemo`: issue 23's workload from Kafka to Kafka, next to a
//! floor without Tern, in one run on one broker.
//!
//! - A KRaft broker (`scripts/kafka.sh`), an input topic of `--partitions`,
//!   one `tern serve` on it, and `examples/aggdemo/deploy.sh` (the pinned
//!   script) making namespace `agg` read the input topic.
//! - The generator (this process) sends `--records` phone-usage records at
//!   `--rate` records/s: 5,000 sessions open at a time, 100 records each
//!   (seqno 0..99, so each closes with one QTY row; `--usage` is set out of
//!   reach), the session id as the key (8 bytes, big-endian), the send time
//!   as the `gen_ns` header; one record in 10,007 sent twice (a DUP row) and
//!   one malformed line per 50,021 records (a BADFORMAT row).
//! - The checker (this process) reads `agg.aggregated` and `agg.bad` with
//!   `read_committed`; latency = the row's arrival − its `trigger_gen_ns`,
//!   and the part of it until Tern's publisher queued the row (its Kafka
//!   timestamp). `AGG_TRACE=1` prints both for every row (`TRACE trigger_ms
//!   until_queued_ms total_ms session`), to see a burst drain.
//!   A violation is any row that should not be: a session billed twice, a
//!   row whose count, seqnos or usage differ from what was sent, an
//!   unexpected reason, a row twice (by `tern.id`), and at the end a session
//!   never billed or a DUP/BADFORMAT row missing.
//! - A warm-up pass first (`--warmup-records`, untimed, checked): the same
//!   pipeline on sessions of its own, so the measured pass meets a broker
//!   whose JIT has compiled its hot paths, as a running cluster's has.
//! - Throughput: records / (first send → last expected row consumed).
//! - CPU µs per record of each process (tern, broker, generator + checker).
//! - Ingest alone, after: the generator sends the same records to a topic
//!   nobody reads, so the broker's and generator's CPU for taking the input
//!   in can be told from what Tern's reading and publishing cost.
//! - The floor, after: this process consumes the same input topic and
//!   produces one row per 100 records of a session to a topic of its own (no
//!   Tern in between): its records/s and the CPU per record of the broker
//!   and the floor process.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde_json::{json, Value};

use super::cpu::CpuMeter;

#[derive(Args)]
pub(crate) struct AggdemoBenchArgs {
    /// Directory for aggdemo.json and aggdemo.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Records sent (a multiple of 500,000 closes every session).
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    /// Target send rate in records/s (0: as fast as the producer goes).
    #[arg(long, default_value_t = 100_000)]
    rate: u64,
    /// Records sent through the same pipeline before the measured pass,
    /// untimed (a multiple of 500,000; 0: none): a broker just started
    /// spends the first seconds compiling its hot paths.
    #[arg(long, default_value_t = 500_000)]
    warmup_records: u64,
    /// Partitions of the input topic (the namespace's).
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Extra arguments for `tern serve` (repeat: `--tern-arg=--kafka-fetch-min-bytes --tern-arg=262144`).
    #[arg(long = "tern-arg", allow_hyphen_values = true)]
    tern_args: Vec<String>,
}

const NS: &str = "agg";
const OPEN_SESSIONS: u64 = 5_000;
const RECORDS_PER_SESSION: u64 = 100;
/// Records after which every open session has closed (and new ones open).
const SESSION_CYCLE_RECORDS: u64 = OPEN_SESSIONS * RECORDS_PER_SESSION;
const DUP_EVERY: u64 = 10_007;
const GARBAGE_EVERY: u64 = 50_021;
/// Longest the checker waits for the last rows after the last send.
const DRAIN_WAIT: Duration = Duration::from_secs(300);
/// The line (stderr) before the measured pass's trace lines.
const MEASURED_PASS_MARK: &str = "MEASURED PASS";

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Record `i`: (session, seqno).
fn record_of(i: u64) -> (u64, u64) {
    let (slot, round) = (i % OPEN_SESSIONS, i / OPEN_SESSIONS);
    (slot + OPEN_SESSIONS * (round / RECORDS_PER_SESSION), round % RECORDS_PER_SESSION)
}

fn usage_of(session: u64, seqno: u64) -> u64 {
    1_000 + (session * 31 + seqno * 7_919) % 20_000
}

fn line_of(session: u64, seqno: u64, start_ms: u64) -> String {
    let kind = if seqno == 0 { "S" } else { "I" };
    format!(
        "{session},{start_ms},{seqno},4155550{:04},4155551{:04},{kind},{},{}",
        session % 10_000,
        (session + 7) % 10_000,
        start_ms + seqno * 1000,
        usage_of(session, seqno)
    )
}

/// Counts failed deliveries (the generator's sends must all land).
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    config
}

fn producer(bootstrap: &str) -> anyhow::Result<ThreadedProducer<Deliveries>> {
    Ok(client_config(bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .create_with_context(Deliveries::default())?)
}

/// Sends one record, waiting while the producer's queue is full.
fn send(producer: &ThreadedProducer<Deliveries>, topic: &str, partition: i32, key: &[u8], value: &[u8], headers: OwnedHeaders) -> anyhow::Result<()> {
    let mut record = BaseRecord::to(topic).partition(partition).key(key).payload(value).headers(headers);
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => anyhow::bail!("send: {e}"),
        }
    }
}

/// What the generator sent: totals the checker's end state must match.
#[derive(Default, Clone, Copy)]
struct Sent {
    records: u64,
    dups: u64,
    garbage: u64,
    sessions_closed: u64,
    first_ns: u64,
    last_ns: u64,
}

/// Sends records `first..first + records` at `rate` (a slice every
/// millisecond). `first` is a multiple of `SESSION_CYCLE_RECORDS`, so a
/// pass after another bills sessions of its own.
fn generate(bootstrap: &str, topic: &str, partitions: i32, first: u64, records: u64, rate: u64) -> anyhow::Result<Sent> {
    let producer = producer(bootstrap)?;
    let start_ms = now_ns() / 1_000_000 - 3_600_000;
    let per_ms = if rate == 0 { u64::MAX } else { (rate / 1000).max(1) };
    let mut sent = Sent { first_ns: now_ns(), ..Sent::default() };
    let began = Instant::now();
    let (mut i, records) = (first, first + records);
    while i < records {
        let slice_end = (i + per_ms).min(records);
        for n in i..slice_end {
            let (session, seqno) = record_of(n);
            let key = session.to_be_bytes();
            let partition = (session % partitions as u64) as i32;
            let line = line_of(session, seqno, start_ms);
            let gen_ns = now_ns().to_string();
            let headers = || OwnedHeaders::new().insert(Header { key: "gen_ns", value: Some(gen_ns.as_bytes()) });
            send(&producer, topic, partition, &key, line.as_bytes(), headers())?;
            if n % DUP_EVERY == DUP_EVERY - 1 {
                send(&producer, topic, partition, &key, line.as_bytes(), headers())?;
                sent.dups += 1;
            }
            if n % GARBAGE_EVERY == GARBAGE_EVERY - 1 {
                send(&producer, topic, partition, &key, b"not,a,record", headers())?;
                sent.garbage += 1;
            }
        }
        i = slice_end;
        if rate > 0 {
            // Paced against the start, so a slow slice is caught up, not lost.
            let due = Duration::from_secs_f64((i - first) as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(began.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    producer.flush(Duration::from_secs(60))?;
    anyhow::ensure!(producer.context().failed.load(Ordering::Relaxed) == 0, "some records were not delivered");
    sent.records = records - first;
    sent.sessions_closed = (sent.records / SESSION_CYCLE_RECORDS) * OPEN_SESSIONS;
    sent.last_ns = now_ns();
    Ok(sent)
}

/// What the checker saw.
#[derive(Default)]
struct Checked {
    rows: u64,
    billed: HashSet<u64>,
    dup_rows: u64,
    garbage_rows: u64,
    violations: Vec<String>,
    latency_us: Option<Histogram<u64>>,
    /// The first part of the latency: until Tern's publisher sent the row
    /// (its Kafka timestamp, set by the producer when queued).
    queued_us: Option<Histogram<u64>>,
    last_row_ns: u64,
}

impl Checked {
    fn violation(&mut self, what: String) {
        if self.violations.len() < 20 {
            eprintln!("violation: {what}");
        }
        self.violations.push(what);
    }

    fn row(&mut self, topic: &str, row: &Value, arrived_ns: u64, queued_ms: Option<i64>) {
        self.rows += 1;
        self.last_row_ns = arrived_ns;
        if let Some(trigger) = row["trigger_gen_ns"].as_u64() {
            let us = arrived_ns.saturating_sub(trigger) / 1_000;
            self.latency_us.as_mut().expect("a histogram").saturating_record(us.max(1));
            if let Some(queued_ms) = queued_ms.and_then(|ms| u64::try_from(ms).ok()) {
                let us = (queued_ms * 1_000_000).saturating_sub(trigger) / 1_000;
                self.queued_us.as_mut().expect("a histogram").saturating_record(us.max(1));
                if std::env::var_os("AGG_TRACE").is_some() {
                    eprintln!("TRACE {} {} {} {}", trigger / 1_000_000, us / 1000, (arrived_ns - trigger) / 1_000_000, row["sessionId"]);
                }
            }
        }
        let reason = row["reason"].as_str().unwrap_or("");
        match (topic.rsplit('.').next().unwrap_or(""), reason) {
            ("aggregated", "QTY") => {
                let session = row["sessionId"].as_u64().unwrap_or(u64::MAX);
                let expected_usage: u64 = (0..RECORDS_PER_SESSION).map(|s| usage_of(session, s)).sum();
                let fits = row["count"] == RECORDS_PER_SESSION
                    && row["min_seqno"] == 0
                    && row["max_seqno"] == RECORDS_PER_SESSION - 1
                    && row["recordUsage"] == expected_usage;
                if !fits {
                    self.violation(format!("a row that differs from what was sent: {row}"));
                }
                if !self.billed.insert(session) {
                    self.violation(format!("session {session} billed twice"));
                }
            }
            ("bad", "DUP") => self.dup_rows += 1,
            ("bad", "BADFORMAT") => self.garbage_rows += 1,
            _ => self.violation(format!("a row no rule makes here: {topic} {row}")),
        }
    }
}

/// Reads the output topics (read_committed) until `done` says the
/// generator finished and every expected row arrived, or `DRAIN_WAIT` after it.
fn check(
    bootstrap: &str,
    start: TopicPartitionList,
    generated: Arc<std::sync::Mutex<Option<Sent>>>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Checked> {
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", "tern-bench-aggdemo-checker")
        .set("isolation.level", "read_committed")
        // A consumer that waits for rows: its fetch returns as soon as a
        // commit makes any visible (librdkafka's 500 ms is for throughput).
        .set("fetch.wait.max.ms", "10")
        .set("enable.auto.commit", "false")
        .create()?;
    consumer.assign(&start)?;
    let histogram = || Histogram::new_with_bounds(1, 600_000_000, 3);
    let mut checked = Checked { latency_us: Some(histogram()?), queued_us: Some(histogram()?), ..Checked::default() };
    let mut ids = HashSet::new();
    let mut drained_by: Option<Instant> = None;
    loop {
        if let Some(sent) = *generated.lock().unwrap() {
            let expected = sent.sessions_closed + sent.dups + sent.garbage;
            if checked.rows >= expected || stop.load(Ordering::Relaxed) {
                return Ok(checked);
            }
            let deadline = *drained_by.get_or_insert_with(|| Instant::now() + DRAIN_WAIT);
            if Instant::now() > deadline {
                checked.violation(format!("only {} of {expected} rows arrived within {DRAIN_WAIT:?} of the last send", checked.rows));
                return Ok(checked);
            }
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
        let message = message?;
        let arrived = now_ns();
        let id = message.headers().and_then(|h| h.iter().find(|h| h.key == "tern.id").and_then(|h| h.value).map(<[u8]>::to_vec));
        match id {
            Some(id) if !ids.insert(id.clone()) => checked.violation(format!("the row {} came twice", String::from_utf8_lossy(&id))),
            Some(_) => {}
            None => checked.violation("a row without its tern.id".into()),
        }
        match serde_json::from_slice::<Value>(message.payload().unwrap_or_default()) {
            Ok(row) => checked.row(message.topic(), &row, arrived, message.timestamp().to_millis()),
            Err(e) => checked.violation(format!("a row that is not JSON: {e}")),
        }
    }
}

/// One pass: the generator sends records `first..first + records` while
/// the checker reads the rows they make, from where the output topics end
/// now (after an earlier pass: its rows are all read, so none is counted twice).
async fn pass(
    bootstrap: &str,
    input: &str,
    outputs: &[String],
    partitions: i32,
    first: u64,
    records: u64,
    rate: u64,
) -> anyhow::Result<(Sent, Checked)> {
    let start = topic_ends(bootstrap, outputs, partitions)?;
    let generated = Arc::new(std::sync::Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let (bootstrap, generated, stop) = (bootstrap.to_string(), generated.clone(), stop.clone());
        std::thread::spawn(move || check(&bootstrap, start, generated, stop))
    };
    let sent = {
        let (bootstrap, input) = (bootstrap.to_string(), input.to_string());
        tokio::task::spawn_blocking(move || generate(&bootstrap, &input, partitions, first, records, rate)).await??
    };
    *generated.lock().unwrap() = Some(sent);
    let checked = tokio::task::spawn_blocking(move || checker.join().expect("the checker ran")).await??;
    Ok((sent, checked))
}

/// Each partition's high watermark of `topics`: where a pass's checker (and the floor) starts.
fn topic_ends(bootstrap: &str, topics: &[String], partitions: i32) -> anyhow::Result<TopicPartitionList> {
    let consumer: BaseConsumer = client_config(bootstrap).create()?;
    let mut start = TopicPartitionList::new();
    for topic in topics {
        for p in 0..partitions {
            let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(30))?;
            start.add_partition_offset(topic, p, Offset::Offset(high))?;
        }
    }
    Ok(start)
}

/// What a pass got wrong: every violation the checker saw, sessions never
/// billed, a billed session not of this pass (its ids start at
/// `first / RECORDS_PER_SESSION`), and DUP or BADFORMAT rows missing or extra.
fn violations_of(sent: &Sent, checked: &Checked, first: u64) -> u64 {
    let own_first_session = first / RECORDS_PER_SESSION;
    let foreign = checked.billed.iter().filter(|s| **s < own_first_session).count() as u64;
    let missing_sessions = sent.sessions_closed.saturating_sub(checked.billed.len() as u64 - foreign);
    checked.violations.len() as u64 + foreign + missing_sessions + sent.dups.abs_diff(checked.dup_rows) + sent.garbage.abs_diff(checked.garbage_rows)
}

async fn create_topics(bootstrap: &str, names: &[String], partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create()?;
    let topics: Vec<NewTopic> = names.iter().map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1))).collect();
    let results = admin.create_topics(&topics, &AdminOptions::new()).await?;
    for result in results {
        result.map_err(|(topic, code)| anyhow::anyhow!("creating {topic}: {code}"))?;
    }
    Ok(())
}

/// The floor: consume the input from `start` (the measured pass's first
/// records), produce one row per closed session (the same rows' size), no
/// Tern. Returns (records consumed, seconds).
fn floor(bootstrap: &str, start: TopicPartitionList, output: &str, records: u64) -> anyhow::Result<(u64, f64)> {
    let consumer: BaseConsumer = client_config(bootstrap).set("group.id", "tern-bench-aggdemo-floor").set("enable.auto.commit", "false").create()?;
    consumer.assign(&start)?;
    let producer = producer(bootstrap)?;
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let (mut consumed, started) = (0u64, Instant::now());
    let deadline = started + DRAIN_WAIT;
    while consumed < records && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
        let message = message?;
        consumed += 1;
        let Some(key) = message.key().and_then(|k| <[u8; 8]>::try_from(k).ok()) else { continue };
        let session = u64::from_be_bytes(key);
        let n = counts.entry(session).or_default();
        *n += 1;
        if *n == RECORDS_PER_SESSION {
            counts.remove(&session);
            let row = json!({"reason": "QTY", "sessionId": session, "sessionStartUTC": 0, "min_seqno": 0, "max_seqno": 99, "callingNumber": "41555500000",
                "destination": "41555510000", "startAggTimeUTC": 0, "endAggTimeUTC": 0, "recordUsage": 0, "count": 100, "emit_ms": 0, "trigger_gen_ns": 0});
            let value = row.to_string();
            send(&producer, output, message.partition(), &key, value.as_bytes(), OwnedHeaders::new())?;
        }
    }
    producer.flush(Duration::from_secs(60))?;
    Ok((consumed, started.elapsed().as_secs_f64()))
}

pub(crate) async fn run(args: AggdemoBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::tempdir()?;
    let kafka_dir = scratch.path().join("kafka");
    let bootstrap = super::kafka::start_broker(&kafka_dir)?;
    eprintln!("kafka {bootstrap}");
    let result = measure(&args, scratch.path(), &kafka_dir, &bootstrap).await;
    let _ = super::kafka::kafka(&["stop"], &kafka_dir);
    result
}

async fn measure(args: &AggdemoBenchArgs, scratch: &std::path::Path, kafka_dir: &std::path::Path, bootstrap: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.warmup_records % SESSION_CYCLE_RECORDS == 0,
        "--warmup-records must be a multiple of {SESSION_CYCLE_RECORDS} (every session of the warm-up closes), not {}",
        args.warmup_records
    );
    let input = "aggdemo-in".to_string();
    let outputs = [format!("{NS}.aggregated"), format!("{NS}.bad")];
    create_topics(bootstrap, &[input.clone(), outputs[0].clone(), outputs[1].clone(), "floor.out".into(), "ingest-only".into()], args.partitions)
        .await?;
    let data = scratch.join("tern").display().to_string();
    let log = format!("kafka://{bootstrap}");
    // A source topic is bound only when the operator allows it, and with the cluster key that signs Tern's entries there.
    let key_file = scratch.join("cluster.key");
    std::fs::write(&key_file, "aggdemo-bench-cluster-key-0123456789abcdef")?;
    let key_file = key_file.display().to_string();
    let mut tern_args: Vec<&str> = vec![
        "serve",
        "--node-id",
        "bench",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        &data,
        "--log",
        &log,
        "--kafka-source-topic",
        &input,
        "--cluster-key-file",
        &key_file,
    ];
    tern_args.extend(args.tern_args.iter().map(String::as_str));
    let (mut tern, addr) = super::suite::spawn_listening(crate::paths::tern(), &tern_args).await?;
    let tern_pid = tern.id().ok_or_else(|| anyhow::anyhow!("tern has no pid"))?;
    let deploy = std::process::Command::new(crate::paths::repo_file("examples/aggdemo/deploy.sh"))
        .args([&format!("http://{addr}"), NS, &input, "--usage", "1000000000000", "--qtycount", &RECORDS_PER_SESSION.to_string()])
        .output()?;
    anyhow::ensure!(deploy.status.success(), "deploy.sh: {}", String::from_utf8_lossy(&deploy.stderr));
    let broker_pid: u32 = std::fs::read_to_string(kafka_dir.join("node-1.pid"))?.trim().parse()?;

    // Warm-up: the same pipeline, untimed, so the broker's JIT compiler
    // (C2 took 40% of a core through a cold broker's first 20 s) and
    // Tern's caches are where they stay in a broker that has been running.
    if args.warmup_records > 0 {
        let (sent, checked) = pass(bootstrap, &input, &outputs, args.partitions, 0, args.warmup_records, args.rate).await?;
        let violations = violations_of(&sent, &checked, 0);
        anyhow::ensure!(violations == 0, "the warm-up found {violations} violations: {:?}", checked.violations.first());
        eprintln!("warm-up: {} records, {} rows", sent.records, checked.rows);
    }
    // What the measured pass adds to Tern's counters, and where the floor
    // starts reading: both from here, past the warm-up.
    let metrics_before = reqwest::get(format!("http://{addr}/metrics")).await?.text().await?;
    let floor_start = topic_ends(bootstrap, std::slice::from_ref(&input), args.partitions)?;
    // Trace lines (`AGG_TRACE`) after this one are the measured pass's (bench/aggdemo_bursts.py).
    eprintln!("{MEASURED_PASS_MARK}");
    let meter = CpuMeter::start(&[("tern", tern_pid), ("broker", broker_pid), ("generator + checker", std::process::id())])?;
    let (sent, checked) = pass(bootstrap, &input, &outputs, args.partitions, args.warmup_records, args.records, args.rate).await?;
    let cpu = meter.per_op_us(sent.records as f64)?;
    let violations = violations_of(&sent, &checked, args.warmup_records);
    let seconds = (checked.last_row_ns.max(sent.last_ns) - sent.first_ns) as f64 / 1e9;
    let latency = checked.latency_us.as_ref().expect("a histogram");
    let queued = checked.queued_us.as_ref().expect("a histogram");
    let tern_row = json!({
        "name": "aggdemo through Tern: Kafka → procedure → Kafka (exactly once)",
        "records": sent.records,
        "target_rate": args.rate,
        "send_seconds": (sent.last_ns - sent.first_ns) as f64 / 1e9,
        "records_per_s": (sent.records as f64 / seconds).round(),
        "rows": checked.rows,
        "violations": violations,
        "latency_ms": {"p50": latency.value_at_quantile(0.50) as f64 / 1e3, "p99": latency.value_at_quantile(0.99) as f64 / 1e3, "max": latency.max() as f64 / 1e3, "mean": (latency.mean() / 1e2).round() / 10.0},
        "cpu_us_per_record": cpu,
        // Of the latency: until the publisher queued the row (ms clock), the rest is Kafka's commit and the read.
        "until_queued_ms": {"p50": queued.value_at_quantile(0.50) as f64 / 1e3, "p99": queued.value_at_quantile(0.99) as f64 / 1e3},
    });
    // The publisher's side, from Tern's metrics: transactions, their mean time, messages in each.
    let metrics = reqwest::get(format!("http://{addr}/metrics")).await?.text().await?;
    // Kept whole: where a row's time went (apply batches, store commits,
    // transactions); the counters before the measured pass beside them.
    std::fs::write(args.out.join("tern-metrics.txt"), &metrics)?;
    std::fs::write(args.out.join("tern-metrics-before.txt"), &metrics_before)?;
    let total =
        |text: &str, name: &str| text.lines().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>();
    let sample = |name: &str| total(&metrics, name) - total(&metrics_before, name);
    let transactions = sample("tern_outbox_publish_seconds_count");
    let mut tern_row = tern_row;
    tern_row["publisher"] = json!({
        "transactions": transactions,
        "transaction_ms_mean": (sample("tern_outbox_publish_seconds_sum") / transactions.max(1.0) * 1e4).round() / 10.0,
        "messages_per_transaction": (sample("tern_outbox_published_total") / transactions.max(1.0) * 10.0).round() / 10.0,
        "procedure_call_us_mean": (sample("tern_procedure_call_seconds_sum") / sample("tern_procedure_call_seconds_count").max(1.0) * 1e7).round() / 10.0,
    });
    eprintln!("{tern_row}");
    let _ = tern.kill().await;

    let meter = CpuMeter::start(&[("broker", broker_pid), ("generator", std::process::id())])?;
    let ingest = {
        let (bootstrap, partitions, records, rate) = (bootstrap.to_string(), args.partitions, args.records, args.rate);
        tokio::task::spawn_blocking(move || generate(&bootstrap, "ingest-only", partitions, 0, records, rate)).await??
    };
    let ingest_row = json!({
        "name": "ingest alone: the generator into a topic nobody reads (no Tern)",
        "records": ingest.records,
        "records_per_s": (ingest.records as f64 / ((ingest.last_ns - ingest.first_ns) as f64 / 1e9)).round(),
        "cpu_us_per_record": meter.per_op_us(ingest.records as f64)?,
    });
    eprintln!("{ingest_row}");

    let meter = CpuMeter::start(&[("broker", broker_pid), ("floor: consume + produce", std::process::id())])?;
    let total = sent.records + sent.dups + sent.garbage;
    let (consumed, floor_seconds) = {
        let bootstrap = bootstrap.to_string();
        tokio::task::spawn_blocking(move || floor(&bootstrap, floor_start, "floor.out", total)).await??
    };
    let floor_row = json!({
        "name": "floor without Tern: consume the input, produce the same rows",
        "records": consumed,
        "records_per_s": (consumed as f64 / floor_seconds).round(),
        "cpu_us_per_record": meter.per_op_us(consumed as f64)?,
    });
    eprintln!("{floor_row}");
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let report = json!({"rows": [tern_row, ingest_row, floor_row], "partitions": args.partitions, "cores": cores, "tern_args": args.tern_args});
    std::fs::write(args.out.join("aggdemo.json"), serde_json::to_vec_pretty(&report)?)?;
    let md = render(&report);
    std::fs::write(args.out.join("aggdemo.md"), &md)?;
    println!("{md}");
    Ok(())
}

fn render(report: &Value) -> String {
    let mut md =
        String::from("| run | records | records/s | violations | latency p50 / p99 / max (ms) | CPU µs per record |\n|---|---|---|---|---|---|\n");
    for row in report["rows"].as_array().into_iter().flatten() {
        let cpu: Vec<String> = row["cpu_us_per_record"].as_object().into_iter().flatten().map(|(k, v)| format!("{k} {v}")).collect();
        let latency = match row.get("latency_ms") {
            Some(l) => format!("{} / {} / {}", l["p50"], l["p99"], l["max"]),
            None => "–".into(),
        };
        let violations = row.get("violations").map_or("–".to_string(), Value::to_string);
        md += &format!(
            "| {} | {} | {} | {violations} | {latency} | {} |\n",
            row["name"].as_str().unwrap_or(""),
            row["records"],
            row["records_per_s"],
            cpu.join(", ")
        );
    }
    md
}
