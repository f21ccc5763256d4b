//! `tern-bench regions`: the three-region bed (`scripts/regions.sh`), one
//! Tern node and one broker per region, every link between regions through
//! Toxiproxy with a one-way delay, measured in one run:
//!
//! - GET inside a region, with the delay and with the links' delay set to 0
//!   on the same bed (`regions.sh delay`): the delay must not show.
//! - put → visible in another region: PUT to region A's node, then GET from
//!   region B's node with `after=<position>` (answered once B applied it).
//!   Floor: the same record through Kafka alone, through the same proxies —
//!   a producer bootstrapped in region A (Tern's producer settings, `acks=all`,
//!   idempotent) and a reader bootstrapped in region B with `client.rack` = B
//!   (fetching from B's replica, KIP-392), one record at a time.
//! - write throughput with RF 3 across regions: closed-loop PUTs to region A's
//!   node; floor: single-record appends from as many writers through
//!   librdkafka alone (the same settings), from region A. Batched: batch calls
//!   of 100 records, next to Kafka's own `ProducerPerformance` (acks=all).
//! - RTO of losing a region: one writer per region (one PUT at a time), the
//!   last region cut for `--cut-seconds` and healed; the longest time without
//!   an acknowledged write in each surviving region around the cut.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;

use super::load::{self, Operation};
use super::report::{markdown, BenchResult};
use super::LoadArgs;

#[derive(Args)]
pub(crate) struct RegionsArgs {
    /// Directory for regions.json and regions.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// One-way delay between regions, ms.
    #[arg(long, default_value_t = 30)]
    delay_ms: u64,
    /// Seconds a region stays cut for the RTO.
    #[arg(long, default_value_t = 15)]
    cut_seconds: u64,
    /// Cuts (each followed by a heal and 20 s to settle) for the RTO.
    #[arg(long, default_value_t = 1)]
    cuts: usize,
    /// Measure only the region loss (the RTO), not the latencies and throughputs.
    #[arg(long)]
    rto_only: bool,
    #[command(flatten)]
    load: LoadArgs,
}

/// One node of the bed, from `bed.json`.
struct BedNode {
    region: String,
    url: String,
}

/// The bed: `scripts/regions.sh up` in a scratch directory, `down` on drop.
struct Bed {
    dir: PathBuf,
    json: serde_json::Value,
}

impl Bed {
    fn up(dir: &Path, delay_ms: u64) -> anyhow::Result<Bed> {
        let status = std::process::Command::new(crate::paths::script("regions.sh"))
            .args(["up", "--delay-ms", &delay_ms.to_string(), "--dir"])
            .arg(dir)
            .args(["--", "--namespace", "default:16"])
            .env("TERN_BIN", crate::paths::tern())
            .stdout(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "scripts/regions.sh up failed");
        let json = serde_json::from_slice(&std::fs::read(dir.join("bed.json"))?)?;
        Ok(Bed { dir: dir.to_path_buf(), json })
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<()> {
        let status = std::process::Command::new(crate::paths::script("regions.sh")).args(args).arg("--dir").arg(&self.dir).status()?;
        anyhow::ensure!(status.success(), "scripts/regions.sh {args:?} failed");
        Ok(())
    }

    fn nodes(&self) -> Vec<BedNode> {
        self.json["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| BedNode { region: n["region"].as_str().unwrap_or_default().into(), url: n["url"].as_str().unwrap_or_default().into() })
            .collect()
    }

    fn bootstrap(&self, region: &str) -> String {
        self.json["bootstrap"][region].as_str().unwrap_or_default().to_string()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = self.run(&["down"]);
    }
}

pub(crate) async fn run(args: RegionsArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-regions-").tempdir()?;
    eprintln!("starting the region bed ({} ms one way)", args.delay_ms);
    let bed = Bed::up(&scratch.path().join("bed"), args.delay_ms)?;
    measure(&args, &bed).await
}

async fn measure(args: &RegionsArgs, bed: &Bed) -> anyhow::Result<()> {
    let nodes = bed.nodes();
    anyhow::ensure!(nodes.len() >= 3, "the bed has {} nodes, not one per region", nodes.len());
    let (a, b) = (&nodes[0], &nodes[1]);
    let (addr_a, addr_b) = (a.url.trim_start_matches("http://").to_string(), b.url.trim_start_matches("http://").to_string());
    let seconds = Duration::from_secs(args.load.seconds);
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let url_a: hyper::Uri = a.url.parse()?;
    let mut results = Vec::new();

    let mut batch_records_per_s = None;
    let mut perf_records_per_s = None;
    if !args.rto_only {
        eprintln!("preloading {} keys through {}", args.load.keys, a.region);
        load::preload_tern(&url_a, "default", args.load.keys, args.load.value_bytes, 64).await?;
        let get = |name: String| closed.spec(&name, Operation::TernGet { ns: "default".into() });
        eprintln!("GET in {} ({} ms between regions)", a.region, args.delay_ms);
        results.push(load::run(&url_a, &get(format!("GET in region ({} ms between regions)", args.delay_ms))).await?);
        bed.run(&["delay", "0"])?;
        eprintln!("GET in {} (no delay between regions)", a.region);
        results.push(load::run(&url_a, &get("GET in region (no delay between regions)".into())).await?);
        bed.run(&["delay", &args.delay_ms.to_string()])?;

        eprintln!("put in {} → visible in {}", a.region, b.region);
        let visible = format!("put in {} → visible in {} (1 client)", a.region, b.region);
        let _warmup = super::kafka::visibility(&visible, &addr_a, &addr_b, 1, Duration::from_secs(2), args.load.value_bytes).await?;
        results.push(super::kafka::visibility(&visible, &addr_a, &addr_b, 1, seconds, args.load.value_bytes).await?);
        eprintln!("floor: librdkafka produce in {} → consumed in {}", a.region, b.region);
        results.push(kafka_end_to_end(bed, &a.region, &b.region, seconds, args.load.value_bytes).await?);

        eprintln!("PUT throughput in {} ({} connections, RF 3 across regions)", a.region, closed.connections);
        results.push(
            load::run(&url_a, &closed.spec(&format!("PUT in {} (RF 3 across regions)", a.region), Operation::TernPut { ns: "default".into() }))
                .await?,
        );
        eprintln!("floor: librdkafka single-record appends from {} writers in {}", closed.connections, a.region);
        let warmup = Duration::from_secs(args.load.warmup_seconds);
        let mut floor = super::kafka::librdkafka_floor(&bed.bootstrap(&a.region), closed.connections, warmup, seconds, args.load.value_bytes).await?;
        floor.name = format!("librdkafka alone: appends in {} (floor of PUT)", a.region);
        results.push(floor);
        eprintln!("batch PUT in {} ({BATCH_OPS} records per call, {BATCH_CONNECTIONS} connections)", a.region);
        let batch_spec = LoadArgs { connections: BATCH_CONNECTIONS, ..closed.clone() }
            .spec(&format!("batch of {BATCH_OPS} in {} (calls)", a.region), Operation::TernBatch { ns: "default".into(), ops: BATCH_OPS });
        let batch = load::run(&url_a, &batch_spec).await?;
        let batch_rps = batch.throughput_per_s * BATCH_OPS as f64;
        results.push(batch);
        eprintln!("peer: Kafka's ProducerPerformance in {} (acks=all, {PERF_RECORDS} records)", a.region);
        let perf = producer_performance(&bed.bootstrap(&a.region), args.load.value_bytes)?;
        batch_records_per_s = Some(batch_rps);
        perf_records_per_s = perf;
    }

    let cut = nodes.last().map(|n| n.region.clone()).unwrap_or_default();
    let mut rto = Vec::new();
    for round in 1..=args.cuts {
        if round > 1 {
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
        eprintln!("RTO {round}/{}: cutting {cut} for {} s under writes from every region", args.cuts, args.cut_seconds);
        rto.push(region_loss(bed, &nodes, &cut, Duration::from_secs(args.cut_seconds)).await?);
    }
    let rto = serde_json::Value::Array(rto);

    let report = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "delay_ms": args.delay_ms,
        "value_bytes": args.load.value_bytes,
        "results": results,
        "tern_batch_records_per_s": batch_records_per_s,
        "kafka_producer_performance_records_per_s": perf_records_per_s,
        "rto": rto,
    });
    std::fs::write(args.out.join("regions.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = markdown(&results);
    md.push_str(&format!(
        "\nTern batch calls of {BATCH_OPS}: {batch_records_per_s:?} records/s\n\
         Kafka ProducerPerformance in {} (acks=all, {} B, {PERF_RECORDS} records): {perf_records_per_s:?} records/s\n\
         Region loss ({cut} cut for {} s), per cut and region: longest write gap, writes acknowledged and failed while cut\n",
        a.region, args.load.value_bytes, args.cut_seconds
    ));
    for (round, regions) in rto.as_array().into_iter().flatten().enumerate() {
        for (region, r) in regions.as_object().into_iter().flatten() {
            let failed = r["failed_while_cut"].as_array().map_or_else(|| r["failed_while_cut"].to_string(), |f| f.len().to_string());
            md.push_str(&format!(
                "- cut {}: {region}{}: {} ms, {} acknowledged, {failed} failed\n",
                round + 1,
                if r["cut"] == true { " (cut)" } else { "" },
                r["longest_gap_ms"],
                r["acknowledged_while_cut"]
            ));
        }
    }
    std::fs::write(args.out.join("regions.md"), &md)?;
    print!("{md}");
    Ok(())
}

/// Records per batch call, and connections making them (as in `tern-bench kafka`).
const BATCH_OPS: usize = 100;
const BATCH_CONNECTIONS: usize = 64;
/// Records Kafka's ProducerPerformance sends (small: at RF 3 across regions
/// a produce waits for another region's replica).
const PERF_RECORDS: u64 = 20_000;

/// Kafka's own producer (Java, its default batching) from `bootstrap`,
/// `acks=all`, as fast as it goes: records/s, from its summary line.
fn producer_performance(bootstrap: &str, value_bytes: usize) -> anyhow::Result<Option<f64>> {
    let topic_args = ["--bootstrap-server", bootstrap, "--create", "--topic", "perf", "--partitions", "16"];
    kafka_tool("org.apache.kafka.tools.TopicCommand", &topic_args)?;
    let (records, size, props) = (PERF_RECORDS.to_string(), value_bytes.to_string(), format!("bootstrap.servers={bootstrap}"));
    let perf = kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &["--topic", "perf", "--num-records", &records, "--record-size", &size, "--throughput", "-1", "--producer-props", &props, "acks=all"],
    )?;
    let summary = perf.lines().last().unwrap_or_default();
    Ok(summary.split(" records sent, ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()))
}

/// Runs a Kafka tool class through `scripts/kafka.sh run`; its stdout.
fn kafka_tool(class: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = std::process::Command::new(crate::paths::script("kafka.sh")).arg("run").arg(class).args(args).output()?;
    anyhow::ensure!(output.status.success(), "{class} failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Kafka's own produce → consume latency between two regions, through the
/// bed's proxies: a `KafkaLog` bootstrapped in `from` appends one record at
/// a time (Tern's producer settings: `acks=all`, idempotent) and a reader
/// bootstrapped in `to`, with `client.rack` = `to`, waits for it.
async fn kafka_end_to_end(bed: &Bed, from: &str, to: &str, duration: Duration, value_bytes: usize) -> anyhow::Result<BenchResult> {
    use tern::log::kafka::{KafkaLog, KafkaLogConfig};
    use tern::log::{Log, TopicPartition};
    /// The longest one record may take to show up before the run fails.
    const RECORD_WAIT_MAX: Duration = Duration::from_secs(10);
    let connect = |region: &str, client: &str| {
        let mut config = KafkaLogConfig::new(&bed.bootstrap(region));
        config.topic_prefix = "floor.".into();
        config.client_id = client.into();
        config.rack = region.into();
        KafkaLog::connect(config)
    };
    let (producer, consumer) = (connect(from, "tern-bench-e2e-producer")?, connect(to, "tern-bench-e2e-consumer")?);
    producer.create_topic("e2e", 1).await?;
    let tp = TopicPartition { topic: "e2e".into(), partition: 0 };
    // The new topic reaches the reading region's metadata a little later: ask (bounded) until it does.
    let asked_until = Instant::now() + RECORD_WAIT_MAX;
    let end = loop {
        match consumer.end_offset(&tp).await {
            Ok(end) => break end,
            Err(e) if Instant::now() < asked_until => eprintln!("waiting for the topic in {to}: {e}"),
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut reader = consumer.reader(&tp, end).await?;
    let payload = bytes::Bytes::from(vec![b'x'; value_bytes + 40]);
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let warmup_end = Instant::now() + Duration::from_secs(2);
    let end = warmup_end + duration;
    while Instant::now() < end {
        let sent = Instant::now();
        let offset = producer.append(&tp, payload.clone()).await?;
        let deadline = sent + RECORD_WAIT_MAX;
        'seen: loop {
            anyhow::ensure!(Instant::now() < deadline, "record {offset} not consumed in {to} within {RECORD_WAIT_MAX:?}");
            for record in reader.next_batch(64, Duration::from_millis(100)).await? {
                if record.offset >= offset {
                    break 'seen;
                }
            }
        }
        if sent >= warmup_end {
            histogram.saturating_record(sent.elapsed().as_micros() as u64);
        }
    }
    producer.close().await;
    consumer.close().await;
    Ok(BenchResult::from_histogram(
        &format!("floor: Kafka produce in {from} → consumed in {to} (librdkafka, client.rack)"),
        1,
        "closed".into(),
        duration.as_secs_f64(),
        0,
        &histogram,
    ))
}

/// One writer per node, one PUT at a time; `cut` is cut for `cut_for` and
/// healed. Returns, per region, the longest gap between acknowledged writes
/// from the last one before the cut to the first one after the heal, and
/// how many were acknowledged while the region was cut.
async fn region_loss(bed: &Bed, nodes: &[BedNode], cut: &str, cut_for: Duration) -> anyhow::Result<serde_json::Value> {
    /// Bound on one PUT: longer than the producer's delivery timeout (10 s).
    const PUT_TIMEOUT: Duration = Duration::from_secs(15);
    let client = reqwest::Client::builder().timeout(PUT_TIMEOUT).build()?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        let (client, url, stop) = (client.clone(), node.url.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let (mut acknowledged, mut failed) = (Vec::new(), Vec::new());
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let sent = Instant::now();
                match client.put(format!("{url}/v1/ns/default/kv/rto-{n}-{}/{i}", i % 16)).body("1").send().await {
                    Ok(r) if r.status().is_success() => acknowledged.push(Instant::now()),
                    Ok(r) => failed.push((sent, r.text().await.unwrap_or_default())),
                    Err(e) => failed.push((sent, e.to_string())),
                }
            }
            (acknowledged, failed)
        }));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cut_at = Instant::now();
    bed.run(&["cut", cut])?;
    tokio::time::sleep(cut_for).await;
    bed.run(&["heal", cut])?;
    let healed_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut rto = serde_json::Map::new();
    for (node, writer) in nodes.iter().zip(writers) {
        let (acknowledged, failed) = writer.await?;
        // Failures while the region was cut, with when they were sent (ms after the cut) and why.
        let failed: Vec<String> = failed
            .iter()
            .filter(|(sent, _)| *sent + Duration::from_secs(1) >= cut_at && *sent <= healed_at)
            .map(|(sent, why)| format!("{:+} ms: {}", sent.saturating_duration_since(cut_at).as_millis(), why.chars().take(200).collect::<String>()))
            .collect();
        // From the last write acknowledged before the cut to the first one after the heal.
        let first = acknowledged.iter().rposition(|t| *t <= cut_at).unwrap_or(0);
        let last = acknowledged.iter().position(|t| *t > healed_at).unwrap_or(acknowledged.len().saturating_sub(1));
        let gap_ms = acknowledged.get(first..=last).and_then(|w| w.windows(2).map(|w| (w[1] - w[0]).as_millis() as u64).max());
        let after_cut = acknowledged.iter().filter(|t| **t > cut_at && **t <= healed_at).count();
        rto.insert(
            node.region.clone(),
            serde_json::json!({
                "cut": node.region == cut,
                "longest_gap_ms": gap_ms,
                "acknowledged_while_cut": after_cut,
                "acknowledged": acknowledged.len(),
                "failed_while_cut": if node.region == cut { serde_json::json!(failed.len()) } else { serde_json::json!(failed) },
            }),
        );
    }
    Ok(serde_json::Value::Object(rto))
}
