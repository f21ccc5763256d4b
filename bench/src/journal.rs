//! `tern-bench journal`: journaled writes (issue 19) next to sequenced ones.
//!
//! 1. **Acknowledgement.** A PUT answered once the log has it (sequenced)
//!    next to one answered once the node's journal has it (journaled), in
//!    alternating rounds so a noisy moment hits both alike (each one's
//!    median-throughput round is reported), on each of:
//!    - `embedded`: `tern dev`, the embedded log;
//!    - `kafka`: `tern serve` on a KRaft broker (`scripts/kafka.sh`), the
//!      journal local only;
//!    - `kafka-s3`: the same, the journal also in object storage (an S3
//!      server, `scripts/s3.sh`): a journaled write is answered once its
//!      group commit's object is put.
//! 2. **A broker outage** (`--outage-seconds N`): `tern serve` on Kafka, a
//!    namespace in `write_mode: journaled`, PUTs of distinct keys at
//!    `--outage-rate` per second (open loop), the broker stopped for N
//!    seconds and started again; reported: errors, the journal's backlog
//!    peak, the time from the broker's return until the journal's oldest
//!    write is younger than `DRAINED_AGE` (everything of the outage applied),
//!    and, after the writers stop, that the namespace holds exactly one
//!    record per acknowledged write.
//!
//! Put → visible for journaled writes is `tern-bench watch --runs sse-h2,sse-h2-journaled`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use super::load::{self, Operation};
use super::report::{markdown, BenchResult};
use super::suite::spawn_listening;
use super::LoadArgs;

#[derive(Args)]
pub(crate) struct JournalBenchArgs {
    /// Directory for journal.json and journal.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Rounds (each: sequenced, then journaled).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Configurations for the acknowledgement rounds: embedded, kafka, kafka-s3 (comma-separated; none: skip).
    #[arg(long, default_value = "embedded,kafka,kafka-s3")]
    configs: String,
    /// Seconds the broker is down in the outage scenario (0: no outage scenario).
    #[arg(long, default_value_t = 0)]
    outage_seconds: u64,
    /// Writes per second during the outage scenario.
    #[arg(long, default_value_t = 1000)]
    outage_rate: u64,
    #[command(flatten)]
    load: LoadArgs,
}

/// The journal counts as drained once its oldest write is younger than this.
const DRAINED_AGE_S: f64 = 2.0;
/// Writes in flight in the outage scenario; past it a write is counted as
/// not sent (the load generator's bound, reported).
const OUTAGE_IN_FLIGHT_MAX: usize = 20_000;
/// The outage scenario writes this long before the broker stops and after it returns.
const OUTAGE_BEFORE: Duration = Duration::from_secs(10);
const OUTAGE_AFTER: Duration = Duration::from_secs(70);
/// Longest wait for the last writes to be applied after the writers stop.
const SETTLE_WAIT: Duration = Duration::from_secs(300);

pub(crate) async fn run(args: JournalBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-journal-").tempdir()?;
    let mut results = Vec::new();
    let mut rounds_all = serde_json::Map::new();
    for config in args.configs.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let dir = scratch.path().join(config);
        let rounds = match config {
            "embedded" => acknowledgement_embedded(&args, &dir).await?,
            "kafka" => with_kafka(&dir, |bootstrap| acknowledgement_kafka(&args, &dir, bootstrap, None)).await?,
            "kafka-s3" => {
                let s3 = S3::start(&dir)?;
                let measured = with_kafka(&dir, |bootstrap| acknowledgement_kafka(&args, &dir, bootstrap, Some(&s3))).await;
                s3.stop();
                measured?
            }
            other => anyhow::bail!("--configs: unknown configuration {other:?} (embedded, kafka, kafka-s3)"),
        };
        results.extend((0..rounds[0].len()).map(|i| super::suite::median(rounds.iter().map(|r| r[i].clone()).collect())));
        rounds_all.insert(config.to_string(), serde_json::to_value(&rounds)?);
    }
    let outage = if args.outage_seconds > 0 {
        let dir = scratch.path().join("outage");
        Some(with_kafka(&dir, |bootstrap| outage(&args, &dir, bootstrap)).await?)
    } else {
        None
    };
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "value_bytes": args.load.value_bytes,
        "results": results,
        "rounds": rounds_all,
        "outage": outage,
    });
    std::fs::write(args.out.join("journal.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = markdown(&results);
    if let Some(outage) = &outage {
        md.push_str(&format!("\nBroker outage: {}\n", serde_json::to_string(&outage["summary"])?));
    }
    std::fs::write(args.out.join("journal.md"), &md)?;
    print!("{md}");
    Ok(())
}

/// Sequenced and journaled PUTs against `url`, `rounds` times, labelled with `config`.
async fn alternate(args: &JournalBenchArgs, url: &hyper::Uri, ns: &str, config: &str) -> anyhow::Result<Vec<Vec<BenchResult>>> {
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let mut rounds = Vec::new();
    for round in 1..=args.rounds.max(1) {
        eprintln!("{config}, round {round}/{}: PUT sequenced, PUT journaled", args.rounds);
        rounds.push(vec![
            load::run(url, &closed.spec(&format!("{config}: PUT sequenced"), Operation::TernPut { ns: ns.into() })).await?,
            load::run(url, &closed.spec(&format!("{config}: PUT journaled"), Operation::TernPutJournaled { ns: ns.into() })).await?,
        ]);
    }
    Ok(rounds)
}

async fn acknowledgement_embedded(args: &JournalBenchArgs, dir: &Path) -> anyhow::Result<Vec<Vec<BenchResult>>> {
    let data_dir = dir.join("tern");
    let (mut tern, addr) =
        spawn_listening(crate::paths::tern(), &["dev", "--listen", "127.0.0.1:0", "--data-dir", data_dir.to_str().unwrap()]).await?;
    let measured = alternate(args, &format!("http://{addr}").parse()?, "default", "embedded log").await;
    let _ = tern.start_kill();
    let _ = tern.wait().await;
    measured
}

async fn acknowledgement_kafka(args: &JournalBenchArgs, dir: &Path, bootstrap: String, s3: Option<&S3>) -> anyhow::Result<Vec<Vec<BenchResult>>> {
    let (mut tern, addr) = spawn_on_kafka(dir, &bootstrap, "default:16", s3).await?;
    let label = if s3.is_some() { "Kafka, journal also in S3" } else { "Kafka" };
    let measured = alternate(args, &format!("http://{addr}").parse()?, "default", label).await;
    let _ = tern.start_kill();
    let _ = tern.wait().await;
    measured
}

/// A `tern serve` on the broker, with the journal's copy in `s3` if given.
async fn spawn_on_kafka(dir: &Path, bootstrap: &str, namespace: &str, s3: Option<&S3>) -> anyhow::Result<(tokio::process::Child, String)> {
    let data = dir.join("tern").display().to_string();
    let log = format!("kafka://{bootstrap}");
    let mut args: Vec<String> =
        ["serve", "--node-id", "bench-journal", "--listen", "127.0.0.1:0", "--data-dir", &data, "--log", &log, "--namespace", namespace]
            .iter()
            .map(|s| s.to_string())
            .collect();
    if let Some(s3) = s3 {
        args.extend(["--snapshots".into(), format!("s3://{}/bench", s3.bucket), "--snapshot-writer".into(), "false".into()]);
        for option in [
            format!("aws_endpoint={}", s3.endpoint),
            "aws_allow_http=true".into(),
            "aws_region=us-east-1".into(),
            "aws_access_key_id=test".into(),
            "aws_secret_access_key=test".into(),
        ] {
            args.extend(["--snapshot-option".into(), option]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (child, addr) = spawn_listening(crate::paths::tern(), &args).await?;
    super::kafka::wait_ready(&[&addr]).await?;
    Ok((child, addr))
}

/// Runs `f` with a broker started for it (`scripts/kafka.sh`), stopped after.
async fn with_kafka<T, F: std::future::Future<Output = anyhow::Result<T>>>(dir: &Path, f: impl FnOnce(String) -> F) -> anyhow::Result<T> {
    let kafka_dir = dir.join("kafka");
    let bootstrap = super::kafka::start_broker(&kafka_dir)?;
    let result = f(bootstrap).await;
    let _ = super::kafka::kafka(&["stop"], &kafka_dir);
    result
}

/// An S3 server (`scripts/s3.sh`) with one bucket.
struct S3 {
    dir: PathBuf,
    endpoint: String,
    bucket: String,
}

impl S3 {
    fn start(dir: &Path) -> anyhow::Result<S3> {
        let dir = dir.join("s3");
        let output = std::process::Command::new(crate::paths::script("s3.sh")).args(["start", "--dir"]).arg(&dir).output()?;
        anyhow::ensure!(output.status.success(), "scripts/s3.sh start failed: {}", String::from_utf8_lossy(&output.stderr));
        let endpoint = String::from_utf8_lossy(&output.stdout).lines().last().unwrap_or_default().trim().to_string();
        let bucket = "tern-bench".to_string();
        let created = std::process::Command::new("curl").args(["-sf", "-X", "PUT", &format!("{endpoint}/{bucket}")]).status()?;
        anyhow::ensure!(created.success(), "creating the bucket failed");
        Ok(S3 { dir, endpoint, bucket })
    }

    fn stop(&self) {
        let _ = std::process::Command::new(crate::paths::script("s3.sh")).args(["stop", "--dir"]).arg(&self.dir).status();
    }
}

/// A metric's value in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

/// The broker outage scenario (module doc, 2).
async fn outage(args: &JournalBenchArgs, dir: &Path, bootstrap: String) -> anyhow::Result<serde_json::Value> {
    let (mut tern, addr) = spawn_on_kafka(dir, &bootstrap, "meter:16", None).await?;
    let client = reqwest::Client::builder().pool_max_idle_per_host(1024).build()?;
    let base = format!("http://{addr}");
    let set = client.put(format!("{base}/v1/ns/meter")).json(&json!({"write_mode": "journaled"})).send().await?;
    anyhow::ensure!(set.status().is_success(), "setting write_mode: {}", set.text().await?);
    let kafka_dir = dir.join("kafka");
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default()); // acknowledged, errors, not sent, sent
    let in_flight = Arc::new(tokio::sync::Semaphore::new(OUTAGE_IN_FLIGHT_MAX));
    let latency = Arc::new(std::sync::Mutex::new(hdrhistogram::Histogram::<u64>::new(3)?));
    let errors_sample = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let value = "x".repeat(args.load.value_bytes);
    let writer = {
        let (client, base, counts, in_flight, latency, errors_sample, stop) =
            (client.clone(), base.clone(), counts.clone(), in_flight.clone(), latency.clone(), errors_sample.clone(), stop.clone());
        let period = Duration::from_secs_f64(1.0 / args.outage_rate as f64);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut i: u64 = 0;
            while !stop.load(Ordering::SeqCst) {
                ticks.tick().await;
                counts[3].fetch_add(1, Ordering::Relaxed);
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    counts[2].fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let request = client.put(format!("{base}/v1/ns/meter/kv/o{i}/")).body(format!("\"{value}\""));
                i += 1;
                let (counts, latency, errors_sample) = (counts.clone(), latency.clone(), errors_sample.clone());
                tokio::spawn(async move {
                    let started = Instant::now();
                    let response = request.send().await;
                    let _permit = permit;
                    match response {
                        Ok(r) if r.status().is_success() => {
                            counts[0].fetch_add(1, Ordering::Relaxed);
                            let _ = latency.lock().unwrap().record(started.elapsed().as_micros() as u64);
                        }
                        other => {
                            counts[1].fetch_add(1, Ordering::Relaxed);
                            let message = match other {
                                Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                                Err(e) => e.to_string(),
                            };
                            let mut sample = errors_sample.lock().unwrap();
                            if sample.len() < 10 {
                                sample.push(message);
                            }
                        }
                    }
                });
            }
        })
    };
    // The journal's backlog and oldest age, every second.
    let samples = Arc::new(std::sync::Mutex::new(Vec::<(f64, f64, f64)>::new()));
    let began = Instant::now();
    let sampler = {
        let (client, base, samples, stop) = (client.clone(), base.clone(), samples.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if let Ok(response) = client.get(format!("{base}/metrics")).send().await {
                    if let Ok(text) = response.text().await {
                        let backlog = metric(&text, "tern_journal_backlog_entries").unwrap_or(-1.0);
                        let age = metric(&text, "tern_journal_oldest_age_seconds").unwrap_or(-1.0);
                        samples.lock().unwrap().push((began.elapsed().as_secs_f64(), backlog, age));
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    eprintln!("outage: writing {} /s; the broker stops in {OUTAGE_BEFORE:?}", args.outage_rate);
    tokio::time::sleep(OUTAGE_BEFORE).await;
    super::kafka::kafka(&["stop-node", "1"], &kafka_dir)?;
    let stopped_at = began.elapsed().as_secs_f64();
    eprintln!("outage: broker stopped for {} s", args.outage_seconds);
    tokio::time::sleep(Duration::from_secs(args.outage_seconds)).await;
    super::kafka::kafka(&["start-node", "1"], &kafka_dir)?;
    let returned_at = began.elapsed().as_secs_f64();
    eprintln!("outage: broker back; writing {OUTAGE_AFTER:?} more");
    tokio::time::sleep(OUTAGE_AFTER).await;
    stop.store(true, Ordering::SeqCst);
    let _ = writer.await;
    let _ = in_flight.acquire_many(OUTAGE_IN_FLIGHT_MAX as u32).await;
    let _ = sampler.await;
    // Every acknowledged write applied, each once: one record per key.
    let acknowledged = counts[0].load(Ordering::SeqCst);
    let deadline = Instant::now() + SETTLE_WAIT;
    let records = loop {
        let ns: serde_json::Value = client.get(format!("{base}/v1/ns/meter")).send().await?.json().await?;
        let records: u64 = ns["state"].as_array().map_or(0, |s| s.iter().filter_map(|p| p["records"].as_u64()).sum());
        let settled = records >= acknowledged || Instant::now() >= deadline;
        if settled {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = tern.start_kill();
    let _ = tern.wait().await;
    let samples = samples.lock().unwrap().clone();
    let backlog_peak = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    let drained_at = samples.iter().find(|s| s.0 > returned_at && s.2 >= 0.0 && s.2 < DRAINED_AGE_S).map(|s| s.0);
    let latency = latency.lock().unwrap().clone();
    let summary = json!({
        "rate_per_s": args.outage_rate,
        "outage_s": args.outage_seconds,
        "writes_sent": counts[3].load(Ordering::SeqCst),
        "acknowledged": acknowledged,
        "errors": counts[1].load(Ordering::SeqCst),
        "not_sent_in_flight_bound": counts[2].load(Ordering::SeqCst),
        "records_after": records,
        "backlog_peak_entries": backlog_peak,
        "drain_s_after_broker_return": drained_at.map(|t| t - returned_at),
        "ack_latency_ms": { "p50": latency.value_at_quantile(0.5) as f64 / 1000.0, "p99": latency.value_at_quantile(0.99) as f64 / 1000.0,
                             "max": latency.max() as f64 / 1000.0 },
    });
    eprintln!("outage: {summary}");
    Ok(json!({
        "summary": summary,
        "broker_stopped_at_s": stopped_at,
        "broker_returned_at_s": returned_at,
        "errors_sample": errors_sample.lock().unwrap().clone(),
        "samples_t_backlog_age": samples,
    }))
}
