//! `tern-bench kafka`: Tern on Apache Kafka, next to Kafka's own tools, in one run.
//!
//! Starts a KRaft broker (`scripts/kafka.sh`) and two `tern serve` nodes on it
//! (each alone in its replica group, so each holds every partition), then:
//! - put → visible on the other node: a client PUTs to node A and, as soon as
//!   it is acknowledged, GETs it from node B with `after=<position>` (B
//!   answers once it has applied the write); latency = PUT sent → B's answer.
//!   Peer: Kafka's `EndToEndLatency` (produce → consume of one record, acks=all)
//!   with the same record size.
//! - writes through Kafka: closed-loop PUTs at 64 connections to node A, and
//!   batch calls of 100 records. Peer: Kafka's `ProducerPerformance` with the
//!   same record size and acks=all.
//! - forwarded vs local GET: two nodes X and Y sharing one replica group
//!   (gossiping); GETs of keys in Y's partitions sent to Y (local) and to X
//!   (X forwards each to Y over a pooled connection).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};

use super::cpu::CpuMeter;
use super::load::{self, key_name, value_of, Operation};
use super::report::{markdown, BenchResult};
use super::LoadArgs;

#[derive(Args)]
pub(crate) struct KafkaArgs {
    /// Directory for kafka.json and kafka.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Concurrent put → visible clients.
    #[arg(long, default_value_t = 16)]
    visibility_clients: usize,
    #[command(flatten)]
    load: LoadArgs,
}

fn kafka_script() -> PathBuf {
    crate::paths::script("kafka.sh")
}

pub(super) fn kafka(args: &[&str], dir: &Path) -> anyhow::Result<String> {
    let output = std::process::Command::new(kafka_script()).args(args).arg("--dir").arg(dir).stderr(Stdio::inherit()).output()?;
    anyhow::ensure!(output.status.success(), "scripts/kafka.sh {args:?} failed");
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Starts a broker with its files under `dir` (`scripts/kafka.sh start`);
/// returns its bootstrap address (the script's last line).
pub(super) fn start_broker(dir: &Path) -> anyhow::Result<String> {
    Ok(kafka(&["start"], dir)?.lines().last().unwrap_or_default().trim().to_string())
}

fn kafka_tool(dir: &Path, class: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = std::process::Command::new(kafka_script()).arg("run").arg("--dir").arg(dir).arg(class).args(args).output()?;
    anyhow::ensure!(output.status.success(), "{class} failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Numbers following `label` in `text` (e.g. "99th = 3.1" → 3.1).
fn number_after(text: &str, label: &str) -> Option<f64> {
    let rest = &text[text.find(label)? + label.len()..];
    let digits: String = rest.chars().skip_while(|c| !c.is_ascii_digit()).take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    digits.parse().ok()
}

pub(super) async fn visibility(name: &str, a: &str, b: &str, clients: usize, duration: Duration, value_bytes: usize) -> anyhow::Result<BenchResult> {
    let value = value_of(value_bytes);
    let mut tasks = Vec::new();
    let start = Instant::now() + Duration::from_millis(200);
    for c in 0..clients {
        let (a, b, value) = (a.to_string(), b.to_string(), value.clone());
        tasks.push(tokio::spawn(async move {
            let connect = |addr: String| async move {
                let stream = tokio::net::TcpStream::connect(&addr).await?;
                stream.set_nodelay(true)?;
                let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
                tokio::spawn(conn);
                Ok::<_, anyhow::Error>(sender)
            };
            let (mut to_a, mut to_b) = (connect(a.clone()).await?, connect(b.clone()).await?);
            let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            tokio::time::sleep_until(start.into()).await;
            let end = start + duration;
            let mut n = 0u64;
            while Instant::now() < end {
                let key = key_name(c as u64 * 1_000_000 + n);
                n += 1;
                let sent = Instant::now();
                let put = Request::builder()
                    .method(Method::PUT)
                    .uri(format!("/v1/ns/default/kv/{key}/"))
                    .header(hyper::header::HOST, &a)
                    .body(Full::new(value.clone()))?;
                let response = to_a.send_request(put).await?;
                anyhow::ensure!(response.status().is_success(), "put failed: {}", response.status());
                let body: serde_json::Value = serde_json::from_slice(&response.into_body().collect().await?.to_bytes())?;
                let position = body["position"].as_str().unwrap_or_default().to_string();
                let get = Request::builder()
                    .method(Method::GET)
                    .uri(format!("/v1/ns/default/kv/{key}/?after={position}&timeout_ms=10000"))
                    .header(hyper::header::HOST, &b)
                    .body(Full::new(bytes::Bytes::new()))?;
                let response = to_b.send_request(get).await?;
                anyhow::ensure!(response.status().is_success(), "read on the other node failed: {}", response.status());
                response.into_body().collect().await?;
                histogram.saturating_record(sent.elapsed().as_micros() as u64);
            }
            Ok::<_, anyhow::Error>(histogram)
        }));
    }
    let mut merged = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for task in tasks {
        merged.add(&task.await??)?;
    }
    Ok(BenchResult::from_histogram(name, clients, "closed".into(), duration.as_secs_f64(), 0, &merged))
}

/// Starts `tern serve` as node `id` on the Kafka log `log` (namespace
/// `default` with 16 partitions, data under `scratch/id`) with `extra`
/// arguments; returns the process and its HTTP address.
async fn spawn_node(exe: &Path, scratch: &Path, log: &str, id: &str, extra: &[&str]) -> anyhow::Result<(tokio::process::Child, String)> {
    let data = scratch.join(id).display().to_string();
    let mut args = vec!["serve", "--node-id", id, "--listen", "127.0.0.1:0", "--data-dir", &data, "--log", log, "--namespace", "default:16"];
    args.extend_from_slice(extra);
    super::suite::spawn_listening(exe, &args).await
}

/// Kills the nodes and waits until they are gone.
async fn stop_nodes(nodes: [&mut tokio::process::Child; 2]) {
    for node in nodes {
        let _ = node.start_kill();
        let _ = node.wait().await;
    }
}

/// Waits (at most `READY_WAIT`) until every node answers `/readyz` with
/// success: each holds its partitions and has caught up. A partition whose
/// reader opened late (its topic was new) would otherwise stall the first
/// measured reads.
pub(super) async fn wait_ready(addrs: &[&str]) -> anyhow::Result<()> {
    const READY_WAIT: Duration = Duration::from_secs(60);
    let client = reqwest::Client::new();
    let deadline = Instant::now() + READY_WAIT;
    for addr in addrs {
        while !client.get(format!("http://{addr}/readyz")).send().await?.status().is_success() {
            anyhow::ensure!(Instant::now() < deadline, "{addr} was not ready within {READY_WAIT:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Put → visible between two fresh nodes C and D running with the batching
/// settings of Kafka's `EndToEndLatency` (it sets the producer's `linger.ms`
/// and its consumer's `fetch.max.wait.ms` to 0): `--kafka-linger-ms 0` and
/// `--kafka-fetch-min-bytes 1` (the broker answers a fetch at the first byte,
/// so the fetch wait only bounds an idle fetch). Their own topic prefix keeps
/// them from replaying A's writes.
async fn visibility_as_kafka_tool(exe: &Path, scratch: &Path, log: &str, duration: Duration, value_bytes: usize) -> anyhow::Result<BenchResult> {
    let like_the_tool = ["--kafka-topic-prefix", "e2e-settings.", "--kafka-linger-ms", "0", "--kafka-fetch-min-bytes", "1"];
    let (mut c, addr_c) = spawn_node(exe, scratch, log, "bench-c", &like_the_tool).await?;
    let (mut d, addr_d) = spawn_node(exe, scratch, log, "bench-d", &like_the_tool).await?;
    let name = "tern put → visible on another node (EndToEndLatency's settings)";
    let result = async {
        wait_ready(&[&addr_c, &addr_d]).await?;
        let _warmup = visibility(name, &addr_c, &addr_d, 1, Duration::from_secs(2), value_bytes).await?;
        visibility(name, &addr_c, &addr_d, 1, duration, value_bytes).await
    }
    .await;
    stop_nodes([&mut c, &mut d]).await;
    result
}

/// The floor under Tern's single-record writes: the same `Log` (librdkafka,
/// the same producer settings) appending from `writers` tasks, one record at
/// a time each, to the partitions Tern would pick for the same keys — no
/// HTTP, no apply loop, no consumer. Tern's PUT throughput cannot exceed it.
pub(super) async fn librdkafka_floor(
    bootstrap: &str,
    writers: usize,
    warmup: Duration,
    duration: Duration,
    value_bytes: usize,
) -> anyhow::Result<BenchResult> {
    use tern::log::{
        kafka::{KafkaLog, KafkaLogConfig},
        Log, TopicPartition,
    };
    const PARTITIONS: u32 = 16;
    let mut config = KafkaLogConfig::new(bootstrap);
    config.topic_prefix = "floor.".into();
    config.client_id = "tern-bench-floor".into();
    let log = KafkaLog::connect(config)?;
    log.create_topic("default", PARTITIONS).await?;
    // About the size of Tern's encoded put of the same value (key, version, framing).
    let payload = bytes::Bytes::from(vec![b'x'; value_bytes + 40]);
    let topic: std::sync::Arc<str> = "default".into();
    let start = Instant::now() + warmup;
    let end = start + duration;
    let mut tasks = Vec::with_capacity(writers);
    for w in 0..writers {
        let (log, payload, topic) = (log.clone(), payload.clone(), topic.clone());
        tasks.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut n = 0u64;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let partition = tern::partitioner::partition_of(&key_name(w as u64 * 1_000_000 + n), PARTITIONS);
                n += 1;
                log.append(&TopicPartition { topic: topic.clone(), partition }, payload.clone()).await?;
                if sent >= start {
                    histogram.saturating_record(sent.elapsed().as_micros() as u64);
                }
            }
            Ok::<_, anyhow::Error>(histogram)
        }));
    }
    let mut merged = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for task in tasks {
        merged.add(&task.await??)?;
    }
    log.close().await;
    Ok(BenchResult::from_histogram(
        "librdkafka alone: single-record appends (floor of Tern's PUT)",
        writers,
        "closed".into(),
        duration.as_secs_f64(),
        0,
        &merged,
    ))
}

fn render_cpu(row: &str, cpu: &serde_json::Map<String, serde_json::Value>) -> String {
    let parts: Vec<String> = cpu.iter().map(|(k, v)| format!("{k} {v} µs")).collect();
    let total: f64 = cpu.values().filter_map(|v| v.as_f64()).sum();
    format!("CPU per record, {row}: {} (total {total:.0} µs)\n", parts.join(", "))
}

/// Records per batch call, and connections making them.
const BATCH_OPS: usize = 100;
const BATCH_CONNECTIONS: usize = 64;

/// A member of replica group `g` gossiping on `gossip`, joining through `seeds`.
fn group_member<'a>(gossip: &'a str, seeds: &'a str) -> [&'a str; 8] {
    ["--group", "g", "--gossip", gossip, "--seeds", seeds, "--kafka-session-timeout-ms", "3000"]
}

/// X and Y share replica group `g`; GETs of keys Y serves, sent to Y and to X.
async fn forwarded_vs_local(args: &KafkaArgs, scratch: &Path, exe: &Path, log: &str) -> anyhow::Result<Vec<BenchResult>> {
    let gossip_port = |_: ()| std::net::UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map(|a| a.port());
    let (port_x, port_y) = (gossip_port(())?, gossip_port(())?);
    let (gossip_x, gossip_y) = (format!("127.0.0.1:{port_x}"), format!("127.0.0.1:{port_y}"));
    let (mut x, addr_x) = spawn_node(exe, scratch, log, "bench-x", &group_member(&gossip_x, &gossip_x)).await?;
    let (mut y, addr_y) = spawn_node(exe, scratch, log, "bench-y", &group_member(&gossip_y, &gossip_x)).await?;
    let client = reqwest::Client::new();
    // Wait (bounded) until X sees Y serving some partitions and both are ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    let y_partitions: Vec<u32> = loop {
        let view: serde_json::Value = client.get(format!("http://{addr_x}/v1/cluster")).send().await?.json().await?;
        let held: Vec<u32> = view["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["id"] == "bench-y")
            .flat_map(|n| n["partitions"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["partition"].as_u64().map(|p| p as u32))
            .collect();
        let ready = client.get(format!("http://{addr_x}/readyz")).send().await?.status().is_success();
        if !held.is_empty() && held.len() < 16 && ready {
            break held;
        }
        anyhow::ensure!(Instant::now() < deadline, "the replica group did not split within 60 s: {view}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let keys: Vec<String> = (0..args.load.keys).map(key_name).filter(|k| y_partitions.contains(&tern::partitioner::partition_of(k, 16))).collect();
    let url_y: hyper::Uri = format!("http://{addr_y}").parse()?;
    load::preload_tern(&url_y, "default", args.load.keys, args.load.value_bytes, 16).await?;
    // Every key applied on Y before measuring (a strong read of the last one per partition).
    for key in keys.iter().rev().take(64) {
        client.get(format!("http://{addr_y}/v1/ns/default/kv/{key}/?consistency=strong")).send().await?;
    }
    let keys = std::sync::Arc::new(keys);
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let local =
        load::run(&url_y, &closed.spec("tern GET local (on the holder)", Operation::TernGetOf { ns: "default".into(), keys: keys.clone() })).await?;
    let url_x: hyper::Uri = format!("http://{addr_x}").parse()?;
    let forwarded =
        load::run(&url_x, &closed.spec("tern GET forwarded (non-holder → holder)", Operation::TernGetOf { ns: "default".into(), keys })).await?;
    stop_nodes([&mut x, &mut y]).await;
    Ok(vec![local, forwarded])
}

pub(crate) async fn run(args: KafkaArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-kafka-").tempdir()?;
    let kafka_dir = scratch.path().join("kafka");
    let bootstrap = start_broker(&kafka_dir)?;
    eprintln!("kafka {bootstrap}");
    let result = measure(&args, scratch.path(), &kafka_dir, &bootstrap).await;
    let _ = kafka(&["stop"], &kafka_dir);
    result
}

async fn measure(args: &KafkaArgs, scratch: &Path, kafka_dir: &Path, bootstrap: &str) -> anyhow::Result<()> {
    let exe = crate::paths::tern();
    let log = format!("kafka://{bootstrap}");
    let (mut a, addr_a) = spawn_node(exe, scratch, &log, "bench-a", &[]).await?;
    let (mut b, addr_b) = spawn_node(exe, scratch, &log, "bench-b", &[]).await?;
    eprintln!("tern A {addr_a}  tern B {addr_b}");
    wait_ready(&[&addr_a, &addr_b]).await?;
    let seconds = Duration::from_secs(args.load.seconds);
    let mut results = Vec::new();

    // One client, one write at a time: the conditions of Kafka's EndToEndLatency.
    // Then many clients at once, for the latency under load.
    const VISIBLE: &str = "tern put → visible on another node";
    let _warmup = visibility(VISIBLE, &addr_a, &addr_b, args.visibility_clients, Duration::from_secs(2), args.load.value_bytes).await?;
    for clients in [1, args.visibility_clients] {
        eprintln!("put → visible on another node ({clients} clients)");
        results.push(visibility(VISIBLE, &addr_a, &addr_b, clients, seconds, args.load.value_bytes).await?);
    }
    // The same, with the batching settings Kafka's EndToEndLatency uses
    // (producer linger.ms=0; its consumer's fetch answered at the first byte):
    // like for like with the peer, at the cost of write throughput.
    eprintln!("put → visible on another node, EndToEndLatency's settings (1 client)");
    results.push(visibility_as_kafka_tool(exe, scratch, &log, seconds, args.load.value_bytes).await?);

    eprintln!("kafka EndToEndLatency (acks=all, {} B)", args.load.value_bytes);
    kafka_tool(
        kafka_dir,
        "org.apache.kafka.tools.TopicCommand",
        &["--bootstrap-server", bootstrap, "--create", "--topic", "e2e", "--partitions", "1"],
    )?;
    let size = args.load.value_bytes.to_string();
    let e2e = kafka_tool(kafka_dir, "org.apache.kafka.tools.EndToEndLatency", &[bootstrap, "e2e", "10000", "all", &size])?;
    let e2e_avg_ms = number_after(&e2e, "Avg latency:");
    let e2e_p50_ms = number_after(&e2e, "50th =");
    let e2e_p99_ms = number_after(&e2e, "99th =");

    eprintln!("tern PUT via Kafka (64 connections)");
    let url: hyper::Uri = format!("http://{addr_a}").parse()?;
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let broker_pid: u32 = std::fs::read_to_string(kafka_dir.join("node-1.pid"))?.trim().parse()?;
    let processes = [
        ("tern A", a.id().unwrap_or_default()),
        ("tern B", b.id().unwrap_or_default()),
        ("broker", broker_pid),
        ("load generator", std::process::id()),
    ];
    // Warm-up included in the CPU time but not in the count: divide by all requests made.
    let meter = CpuMeter::start(&processes)?;
    let put = load::run(&url, &closed.spec("tern PUT via Kafka", Operation::TernPut { ns: "default".into() })).await?;
    let put_ops = put.throughput_per_s * (put.seconds + args.load.warmup_seconds as f64);
    let put_cpu = meter.per_op_us(put_ops)?;
    results.push(put);

    eprintln!("librdkafka alone: single-record appends from {} writers", closed.connections);
    let warmup = Duration::from_secs(args.load.warmup_seconds);
    let meter = CpuMeter::start(&[("broker", broker_pid), ("librdkafka writers", std::process::id())])?;
    let floor = librdkafka_floor(bootstrap, closed.connections, warmup, seconds, args.load.value_bytes).await?;
    let floor_cpu = meter.per_op_us(floor.throughput_per_s * (floor.seconds + warmup.as_secs_f64()))?;
    results.push(floor);

    eprintln!("tern batch PUT via Kafka ({BATCH_OPS} records per call)");
    let batch_spec = LoadArgs { connections: BATCH_CONNECTIONS, ..closed.clone() }
        .spec(&format!("tern batch of {BATCH_OPS} via Kafka (calls)"), Operation::TernBatch { ns: "default".into(), ops: BATCH_OPS });
    let batch = load::run(&url, &batch_spec).await?;
    let batch_records_per_s = batch.throughput_per_s * BATCH_OPS as f64;
    results.push(batch);
    stop_nodes([&mut a, &mut b]).await;

    eprintln!("forwarded vs local GET (two nodes sharing one replica group)");
    results.extend(forwarded_vs_local(args, scratch, exe, &log).await?);

    eprintln!("kafka ProducerPerformance (acks=all, {} B)", args.load.value_bytes);
    kafka_tool(
        kafka_dir,
        "org.apache.kafka.tools.TopicCommand",
        &["--bootstrap-server", bootstrap, "--create", "--topic", "perf", "--partitions", "16"],
    )?;
    let props = format!("bootstrap.servers={bootstrap}");
    let perf = kafka_tool(
        kafka_dir,
        "org.apache.kafka.tools.ProducerPerformance",
        &["--topic", "perf", "--num-records", "1000000", "--record-size", &size, "--throughput", "-1", "--producer-props", &props, "acks=all"],
    )?;
    let perf_line = perf.lines().last().unwrap_or_default().to_string();
    let perf_records_per_s = perf_line.split(" records sent, ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<f64>().ok());

    let peers = serde_json::json!({
        "kafka_end_to_end_latency": { "avg_ms": e2e_avg_ms, "p50_ms": e2e_p50_ms, "p99_ms": e2e_p99_ms, "output": e2e },
        "kafka_producer_performance": { "records_per_s": perf_records_per_s, "output": perf_line },
        "tern_batch_records_per_s": batch_records_per_s,
        "cpu_us_per_record": { "tern_put": put_cpu, "librdkafka_alone": floor_cpu },
    });
    let report = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "value_bytes": args.load.value_bytes,
        "results": results,
        "peers": peers,
    });
    std::fs::write(args.out.join("kafka.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = markdown(&results);
    md.push_str(&format!(
        "\nKafka EndToEndLatency (acks=all, {size} B, 10,000 records): avg {e2e_avg_ms:?} ms, p50 {e2e_p50_ms:?} ms, p99 {e2e_p99_ms:?} ms\n\
         Kafka ProducerPerformance (acks=all, {size} B, 1,000,000 records): {perf_records_per_s:?} records/s\n\
         Tern batch calls of {BATCH_OPS}: {batch_records_per_s:.0} records/s\n"
    ));
    md.push_str(&render_cpu("tern PUT via Kafka", &put_cpu));
    md.push_str(&render_cpu("librdkafka alone", &floor_cpu));
    std::fs::write(args.out.join("kafka.md"), &md)?;
    print!("{md}");
    Ok(())
}
