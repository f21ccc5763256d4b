//! `tern-bench scale`: what a node costs as its data grows.
//!
//! A baseline node with `--baseline` records (10,000) runs beside a node
//! loaded, in turn, with each of `--records` (1M, 10M, 100M); both are
//! `tern serve` nodes on the embedded log, with the same partitions and
//! configuration. For each size:
//!
//! - load: the time to write N records through batch calls (1,000 records,
//!   one pk, per call), the disk they take (stores, log) per record, the
//!   node's RSS after it (and its peak);
//! - reads and writes against the baseline, in alternating rounds (which
//!   node goes first alternates too), as ratios of the medians: GET of a
//!   random record, GET of a hot set (`--hot` records), a list of one pk
//!   (100 records), a watch from a snapshot of one pk (to its `synced`
//!   event) and PUT of a random existing record;
//! - a full snapshot of every partition (`POST /v1/admin/snapshots`), then
//!   1% more written (at most 100,000 records), a stop, the stores removed
//!   and a start: time to ready (restore from the snapshots + catch-up of
//!   the log past them), the process's peak RSS meanwhile, and the state
//!   hashes checked against the ones before.
//!
//! Writes `scale.json` and `scale.md` (and `scale.png` with matplotlib) to
//! `--out`. The large node's data is removed after each size.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use serde_json::{json, Value};

use super::load::{self, LoadSpec, Operation};
use super::report::BenchResult;

/// Records per pk: one batch call loads one pk.
pub(crate) const RECORDS_PER_PK: u64 = 1000;

/// The pk of record `i`.
pub(crate) fn pk(i: u64) -> String {
    format!("s-{:08}", i / RECORDS_PER_PK)
}

/// The sk of record `i` within its pk.
pub(crate) fn sk(i: u64) -> String {
    format!("{:03}", i % RECORDS_PER_PK)
}

#[derive(Args)]
pub(crate) struct ScaleBenchArgs {
    /// Directory for scale.json, scale.md and scale.png.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Sizes (records), each loaded into a node of its own in turn.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    records: Vec<u64>,
    /// Records of the baseline node every measurement is compared with.
    #[arg(long, default_value_t = 10_000)]
    baseline: u64,
    /// Records of the hot set (the first ones).
    #[arg(long, default_value_t = 10_000)]
    hot: u64,
    /// Bytes per value (JSON text with a digest's entropy).
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Partitions of the namespace.
    #[arg(long, default_value_t = 16)]
    partitions: u32,
    /// Alternating rounds of every measurement.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds per measured load (after 1 s of warm-up).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Connections of each load.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Watches from a snapshot timed per node and round.
    #[arg(long, default_value_t = 50)]
    watches: usize,
    /// Where the nodes' data goes (100M records take tens of GB).
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Only load the first of `--records` into namespace `scale` of the
    /// node at this URL (for profiling one size), then stop.
    #[arg(long)]
    load_into: Option<String>,
}

const NS: &str = "scale";
/// Batch calls in flight while loading.
const LOAD_CALLS_IN_FLIGHT: usize = 8;
/// Records written after the snapshot, at most (the log the restore catches up on).
const CATCH_UP_RECORDS_MAX: u64 = 100_000;
/// Longest a node may take to become ready after a restart.
const READY_TIMEOUT: Duration = Duration::from_secs(3600);
/// Longest a node may take to apply what it was given.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(3600);
/// Longest one watch may take to send a pk's snapshot.
const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

/// A running node and where its data is.
struct Node {
    child: tokio::process::Child,
    url: String,
    data: PathBuf,
    args: Vec<String>,
}

impl Node {
    async fn start(data: PathBuf, partitions: u32) -> anyhow::Result<Node> {
        let snapshots = format!("file://{}", data.join("snapshots").display());
        let args = super::snapshot::on_demand_snapshot_node_args(&data, &snapshots, &format!("{NS}:{partitions}"));
        let (child, url) = Self::spawn(&args).await?;
        Ok(Node { child, url, data, args })
    }

    async fn spawn(args: &[String]) -> anyhow::Result<(tokio::process::Child, String)> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (child, address) = super::suite::spawn_listening(crate::paths::tern(), &args).await?;
        Ok((child, format!("http://{address}")))
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Stops the node (SIGTERM, bounded), removes its stores and starts it again.
    async fn restart_without_stores(&mut self) -> anyhow::Result<()> {
        super::snapshot::terminate(&mut self.child).await?;
        std::fs::remove_dir_all(self.data.join("stores"))?;
        let (child, url) = Self::spawn(&self.args).await?;
        (self.child, self.url) = (child, url);
        Ok(())
    }
}

/// `VmRSS` and `VmHWM` (peak) of a process, in bytes.
fn rss_bytes(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = status.lines().find(|l| l.starts_with(name)).ok_or_else(|| anyhow::anyhow!("{name} missing in /proc/{pid}/status"))?;
        let kib: u64 = line.split_whitespace().nth(1).unwrap_or("0").parse()?;
        Ok(kib * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Bytes of the files under `dir` (0 if it does not exist).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// One batch call's body: records `range` (one pk), values of `round`.
fn batch_body(range: std::ops::Range<u64>, round: u32, value_bytes: usize) -> String {
    let mut body = String::with_capacity((range.end - range.start) as usize * (value_bytes + 48) + 16);
    body.push_str(r#"{"ops":["#);
    for (n, i) in range.enumerate() {
        if n > 0 {
            body.push(',');
        }
        let value = super::snapshot::value(i as u32, round, value_bytes);
        body.push_str(&format!(r#"{{"op":"put","pk":"{}","sk":"{}","value":"#, pk(i), sk(i)));
        body.push_str(std::str::from_utf8(&value).expect("bench values are JSON text"));
        body.push('}');
    }
    body.push_str("]}");
    body
}

/// Writes records `keys` (values of `round`) through batch calls, saying how far every 10 s.
async fn load_records(client: &reqwest::Client, url: &str, keys: std::ops::Range<u64>, round: u32, value_bytes: usize) -> anyhow::Result<()> {
    let started = Instant::now();
    let total = keys.end - keys.start;
    let calls = (keys.start..keys.end).step_by(RECORDS_PER_PK as usize).map(|start| {
        let body = batch_body(start..(start + RECORDS_PER_PK).min(keys.end), round, value_bytes);
        let request = client.post(format!("{url}/v1/ns/{NS}/batch")).header("content-type", "application/json").body(body);
        async move { request.send().await?.error_for_status().map(|_| ()) }
    });
    let mut calls = std::pin::pin!(futures::stream::iter(calls).buffer_unordered(LOAD_CALLS_IN_FLIGHT));
    let (mut done, mut said) = (0u64, Instant::now());
    while let Some(result) = calls.next().await {
        result?;
        done += RECORDS_PER_PK;
        if said.elapsed() >= Duration::from_secs(10) {
            said = Instant::now();
            let rate = done as f64 / started.elapsed().as_secs_f64();
            eprintln!("  loaded {} of {total} records ({rate:.0}/s)", done.min(total));
        }
    }
    Ok(())
}

/// The namespace's view once every partition applied its whole log (bounded wait).
async fn caught_up(client: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let deadline = Instant::now() + CATCH_UP_TIMEOUT;
    loop {
        let view: Value = client.get(format!("{url}/v1/ns/{NS}")).send().await?.json().await?;
        if view["state"].as_array().is_some_and(|ps| !ps.is_empty() && ps.iter().all(|p| p["lag"] == 0 && p["status"] == "serving")) {
            return Ok(view);
        }
        anyhow::ensure!(Instant::now() < deadline, "the node did not catch up within {CATCH_UP_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn state_hashes(view: &Value) -> Vec<Value> {
    view["state"].as_array().into_iter().flatten().map(|p| p["state_hash"].clone()).collect()
}

/// Milliseconds from opening a watch of a random pk from a snapshot to its
/// `synced` event, `samples` times; the median.
async fn watch_from_snapshot_ms(client: &reqwest::Client, url: &str, records: u64, samples: usize) -> anyhow::Result<f64> {
    let pks = records.div_ceil(RECORDS_PER_PK);
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let pk = pk(rand::random_range(0..pks) * RECORDS_PER_PK);
        let started = Instant::now();
        let response = client.get(format!("{url}/v1/ns/{NS}/watch?pk={pk}&from=snapshot")).send().await?.error_for_status()?;
        let mut body = response.bytes_stream();
        let mut tail = Vec::new();
        let synced = tokio::time::timeout(WATCH_TIMEOUT, async {
            while let Some(chunk) = body.next().await {
                tail.extend_from_slice(&chunk?);
                if tail.windows(12).any(|w| w == b"event: synce") {
                    return Ok(());
                }
                // Only the end can hold the event's start: keep a little.
                if tail.len() > 64 {
                    tail.drain(..tail.len() - 64);
                }
            }
            anyhow::bail!("the watch of {pk} ended before its synced event")
        })
        .await;
        synced.map_err(|_| anyhow::anyhow!("the watch of {pk} sent no synced event within {WATCH_TIMEOUT:?}"))??;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// What is measured against the baseline, by name.
#[derive(Clone, Copy)]
enum Measure {
    GetRandom,
    GetHot,
    ListPk,
    WatchFromSnapshot,
    Put,
}

impl Measure {
    const ALL: [Measure; 5] = [Measure::GetRandom, Measure::GetHot, Measure::ListPk, Measure::WatchFromSnapshot, Measure::Put];

    fn name(self) -> &'static str {
        match self {
            Measure::GetRandom => "GET random",
            Measure::GetHot => "GET hot",
            Measure::ListPk => "list pk",
            Measure::WatchFromSnapshot => "watch from snapshot",
            Measure::Put => "PUT",
        }
    }

    /// Requests/s (higher is better), or for the watch, watches/s from its median time.
    async fn run(self, args: &ScaleBenchArgs, client: &reqwest::Client, url: &str, records: u64) -> anyhow::Result<(f64, Option<BenchResult>)> {
        let spec = |operation: Operation, keys: u64| LoadSpec {
            name: format!("{} at {records}", self.name()),
            operation,
            connections: args.connections,
            duration: Duration::from_secs(args.seconds),
            warmup: Duration::from_secs(1),
            rate_per_s: None,
            keys,
            value_bytes: args.value_bytes,
            authorization: None,
            tls: None,
        };
        let uri: hyper::Uri = url.parse()?;
        let spec = match self {
            Measure::GetRandom => spec(Operation::ScaleGet { ns: NS.into() }, records),
            Measure::GetHot => spec(Operation::ScaleGet { ns: NS.into() }, args.hot.min(records)),
            Measure::ListPk => spec(Operation::ScaleList { ns: NS.into() }, records),
            Measure::Put => spec(Operation::ScalePut { ns: NS.into() }, records),
            Measure::WatchFromSnapshot => {
                let ms = watch_from_snapshot_ms(client, url, records, args.watches).await?;
                return Ok((1000.0 / ms, None));
            }
        };
        let result = load::run(&uri, &spec).await?;
        anyhow::ensure!(result.errors == 0, "{}: {} errors", spec.name, result.errors);
        Ok((result.throughput_per_s, Some(result)))
    }
}

fn median(mut of: Vec<f64>) -> f64 {
    of.sort_by(f64::total_cmp);
    of[of.len() / 2]
}

/// The baseline against one large node: per measure, every round's rate
/// of each and the median of the rounds' ratios.
async fn alternate(args: &ScaleBenchArgs, client: &reqwest::Client, baseline: &Node, large: &Node, records: u64) -> anyhow::Result<Value> {
    let mut out = serde_json::Map::new();
    for measure in Measure::ALL {
        let (mut ratios, mut small_rates, mut large_rates, mut large_results) = (vec![], vec![], vec![], vec![]);
        for round in 0..args.rounds {
            let order = if round % 2 == 0 { [false, true] } else { [true, false] };
            let (mut small, mut big) = (0.0, 0.0);
            for is_large in order {
                let (node, n) = if is_large { (large, records) } else { (baseline, args.baseline) };
                let (rate, result) = measure.run(args, client, &node.url, n).await?;
                if matches!(measure, Measure::Put) {
                    // Its aftermath (apply, flush) is not charged to what runs next.
                    caught_up(client, &node.url).await?;
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                if is_large {
                    big = rate;
                    large_results.extend(result);
                } else {
                    small = rate;
                }
            }
            eprintln!("  {} round {round}: {small:.0}/s at {}, {big:.0}/s at {records}: {:.2}", measure.name(), args.baseline, big / small);
            ratios.push(big / small);
            small_rates.push(small);
            large_rates.push(big);
        }
        let p99_us: Vec<u64> = large_results.iter().map(|r| r.p99_us).collect();
        out.insert(
            measure.name().to_string(),
            json!({
                "ratio_median": median(ratios.clone()),
                "ratios": ratios,
                "baseline_per_s": small_rates,
                "large_per_s": large_rates,
                "large_p99_us": p99_us,
            }),
        );
    }
    Ok(Value::Object(out))
}

/// Loads one size, measures it against the baseline, snapshots, restores.
async fn one_size(args: &ScaleBenchArgs, client: &reqwest::Client, scratch: &Path, baseline: &Node, records: u64) -> anyhow::Result<Value> {
    let data = scratch.join(format!("node-{records}"));
    let mut node = Node::start(data.clone(), args.partitions).await?;
    eprintln!("{records} records: loading");
    let started = Instant::now();
    load_records(client, &node.url, 0..records, 0, args.value_bytes).await?;
    caught_up(client, &node.url).await?;
    let load_s = started.elapsed().as_secs_f64();
    let (rss_loaded, rss_peak_load) = rss_bytes(node.pid())?;
    let (stores, total) = (dir_bytes(&data.join("stores")), dir_bytes(&data));
    eprintln!("{records} records: loaded in {load_s:.0} s, stores {:.2} GB, data {:.2} GB", stores as f64 / 1e9, total as f64 / 1e9);

    let versus = alternate(args, client, baseline, &node, records).await?;

    eprintln!("{records} records: full snapshot");
    let started = Instant::now();
    let response = client.post(format!("{url}/v1/admin/snapshots", url = node.url)).json(&json!({"ns": NS})).send().await?;
    anyhow::ensure!(response.status().is_success(), "snapshot failed: {}", response.text().await?);
    let snapshot_s = started.elapsed().as_secs_f64();
    let snapshot_bytes = dir_bytes(&data.join("snapshots"));
    let after = (records / 100).clamp(1, CATCH_UP_RECORDS_MAX);
    load_records(client, &node.url, 0..after, 1, args.value_bytes).await?;
    let expected = caught_up(client, &node.url).await?;

    eprintln!("{records} records: restart without stores (restore + catch-up of {after})");
    let started = Instant::now();
    node.restart_without_stores().await?;
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut rss_peak_restore = 0;
    while !client.get(format!("{}/readyz", node.url)).send().await?.status().is_success() {
        anyhow::ensure!(Instant::now() < deadline, "the node did not become ready within {READY_TIMEOUT:?}");
        rss_peak_restore = rss_peak_restore.max(rss_bytes(node.pid())?.1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let restore_s = started.elapsed().as_secs_f64();
    let restored = caught_up(client, &node.url).await?;
    let (rss_restored, peak) = rss_bytes(node.pid())?;
    rss_peak_restore = rss_peak_restore.max(peak);
    anyhow::ensure!(state_hashes(&restored) == state_hashes(&expected), "the restored state differs: {restored} vs {expected}");
    super::snapshot::terminate(&mut node.child).await?;
    std::fs::remove_dir_all(&data)?;
    Ok(json!({
        "records": records,
        "load_s": load_s,
        "load_records_per_s": records as f64 / load_s,
        "store_bytes": stores,
        "data_bytes": total,
        "store_bytes_per_record": stores as f64 / records as f64,
        "data_bytes_per_record": total as f64 / records as f64,
        "rss_after_load_bytes": rss_loaded,
        "rss_peak_load_bytes": rss_peak_load,
        "versus_baseline": versus,
        "snapshot_s": snapshot_s,
        "snapshot_bytes": snapshot_bytes,
        "written_after_snapshot": after,
        "restore_and_catch_up_s": restore_s,
        "rss_peak_restore_bytes": rss_peak_restore,
        "rss_after_restore_bytes": rss_restored,
    }))
}

fn gb(bytes: &Value) -> f64 {
    bytes.as_f64().unwrap_or(0.0) / 1e9
}

fn mib(bytes: &Value) -> f64 {
    bytes.as_f64().unwrap_or(0.0) / (1024.0 * 1024.0)
}

fn markdown(report: &Value) -> String {
    let sizes: Vec<&Value> = report["sizes"].as_array().into_iter().flatten().collect();
    let mut md = format!(
        "baseline: {} records; {} B values; {} partitions; {} rounds of {} s, {} connections\n\n",
        report["baseline"], report["value_bytes"], report["partitions"], report["rounds"], report["seconds"], report["connections"]
    );
    md.push_str("| records | load s | load rec/s | store B/rec | data B/rec | RSS loaded MiB |");
    for measure in Measure::ALL {
        md.push_str(&format!(" {} ×base |", measure.name()));
    }
    md.push_str(" snapshot s | snapshot MB | restore+catch-up s | peak RSS restore MiB |\n|");
    md.push_str(&"---:|".repeat(6 + Measure::ALL.len() + 4));
    md.push('\n');
    for size in sizes {
        md.push_str(&format!(
            "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} |",
            size["records"],
            size["load_s"].as_f64().unwrap_or(0.0),
            size["load_records_per_s"].as_f64().unwrap_or(0.0),
            size["store_bytes_per_record"].as_f64().unwrap_or(0.0),
            size["data_bytes_per_record"].as_f64().unwrap_or(0.0),
            mib(&size["rss_after_load_bytes"]),
        ));
        for measure in Measure::ALL {
            md.push_str(&format!(" {:.2} |", size["versus_baseline"][measure.name()]["ratio_median"].as_f64().unwrap_or(0.0)));
        }
        md.push_str(&format!(
            " {:.1} | {:.0} | {:.1} | {:.0} |\n",
            size["snapshot_s"].as_f64().unwrap_or(0.0),
            gb(&size["snapshot_bytes"]) * 1000.0,
            size["restore_and_catch_up_s"].as_f64().unwrap_or(0.0),
            mib(&size["rss_peak_restore_bytes"]),
        ));
    }
    md.push_str(&format!("\nbaseline node RSS at the end: {:.0} MiB\n", mib(&report["baseline_rss_bytes"])));
    md
}

pub(crate) async fn run(args: ScaleBenchArgs) -> anyhow::Result<()> {
    if let Some(url) = &args.load_into {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(600)).build()?;
        let records = args.records.first().copied().unwrap_or(args.baseline);
        load_records(&client, url, 0..records, 0, args.value_bytes).await?;
        caught_up(&client, url).await?;
        return Ok(());
    }
    std::fs::create_dir_all(&args.out)?;
    let parent = args.scratch.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-scale-").tempdir_in(&parent)?;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(600)).build()?;
    let mut baseline = Node::start(scratch.path().join("baseline"), args.partitions).await?;
    eprintln!("baseline: loading {} records", args.baseline);
    load_records(&client, &baseline.url, 0..args.baseline, 0, args.value_bytes).await?;
    caught_up(&client, &baseline.url).await?;
    let mut sizes = Vec::new();
    for &records in &args.records {
        sizes.push(one_size(&args, &client, scratch.path(), &baseline, records).await?);
        // Written as it goes: a 100M run is long.
        let report = report(&args, &sizes, rss_bytes(baseline.pid())?.0);
        std::fs::write(args.out.join("scale.json"), serde_json::to_vec_pretty(&report)?)?;
    }
    let report = report(&args, &sizes, rss_bytes(baseline.pid())?.0);
    super::snapshot::terminate(&mut baseline.child).await?;
    let json_path = args.out.join("scale.json");
    std::fs::write(&json_path, serde_json::to_vec_pretty(&report)?)?;
    let md = markdown(&report);
    std::fs::write(args.out.join("scale.md"), &md)?;
    print!("{md}");
    let chart = std::process::Command::new("python3")
        .arg(crate::paths::bench_file("scale_chart.py"))
        .arg(&json_path)
        .arg(args.out.join("scale.png"))
        .status();
    match chart {
        Ok(status) if status.success() => eprintln!("chart: {}", args.out.join("scale.png").display()),
        other => eprintln!("chart not drawn ({other:?}); run scripts/setup.sh to install matplotlib"),
    }
    Ok(())
}

fn report(args: &ScaleBenchArgs, sizes: &[Value], baseline_rss: u64) -> Value {
    json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "baseline": args.baseline,
        "hot": args.hot,
        "value_bytes": args.value_bytes,
        "partitions": args.partitions,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "connections": args.connections,
        "baseline_rss_bytes": baseline_rss,
        "sizes": sizes,
    })
}
