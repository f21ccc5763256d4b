//! `tern-bench kafka-put`: Tern's single-record PUT through Kafka against
//! the floor under it, librdkafka alone, in alternating rounds.
//!
//! Starts a KRaft broker (`scripts/kafka.sh`) and one `tern serve` node on
//! it (alone in its replica group: it holds, consumes and applies all 16
//! partitions, as every node that takes writes does). Each round measures,
//! starting with the other one each round so neither is always first:
//! - *tern PUT*: closed-loop single-record PUTs over `--connections`
//!   connections;
//! - *librdkafka alone*: as many tasks appending one record at a time each
//!   through Tern's own `Log` (the same producer settings) to the partitions
//!   Tern would pick for the same keys: no HTTP, no apply, no consumer.
//!
//! A round's ratios are Tern's throughput over the floor's and Tern's p99
//! over the floor's; the report gives each round's and their medians (the
//! targets: ≥ 0.8 and ≤ 2), and each process's CPU µs per record in each
//! run (where the difference goes).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::cpu::CpuMeter;
use super::kafka::{kafka, librdkafka_floor, start_broker, wait_ready};
use super::load::{self, Operation};
use super::report::{markdown, round3, BenchResult};
use super::suite::median;
use super::LoadArgs;

#[derive(Args)]
pub(crate) struct KafkaPutBenchArgs {
    /// Directory for kafka-put.json and kafka-put.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Rounds; each measures Tern's PUT and the librdkafka floor.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Extra arguments for `tern serve` (repeatable), e.g. `--tern-arg=--kafka-linger-ms --tern-arg=0`.
    #[arg(long = "tern-arg", allow_hyphen_values = true)]
    tern_args: Vec<String>,
    #[command(flatten)]
    load: LoadArgs,
}

/// The unmeasured PUT run before the first round.
const WARMUP_RUN: Duration = Duration::from_secs(5);

const RUNS: [&str; 2] = ["tern PUT via Kafka (single records)", "librdkafka alone: single-record appends (floor)"];

/// One run's result and each process's CPU µs per record over it.
struct Measured {
    result: BenchResult,
    cpu_us_per_record: serde_json::Map<String, serde_json::Value>,
}

pub(crate) async fn run(args: KafkaPutBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-kafka-put-").tempdir()?;
    let kafka_dir = scratch.path().join("kafka");
    let bootstrap = start_broker(&kafka_dir)?;
    eprintln!("kafka {bootstrap}");
    let result = measure(&args, scratch.path(), &kafka_dir, &bootstrap).await;
    let _ = kafka(&["stop"], &kafka_dir);
    result
}

async fn measure(args: &KafkaPutBenchArgs, scratch: &std::path::Path, kafka_dir: &std::path::Path, bootstrap: &str) -> anyhow::Result<()> {
    let log = format!("kafka://{bootstrap}");
    let data = scratch.join("node").display().to_string();
    let mut serve =
        vec!["serve", "--node-id", "bench-put", "--listen", "127.0.0.1:0", "--data-dir", &data, "--log", &log, "--namespace", "default:16"];
    serve.extend(args.tern_args.iter().map(String::as_str));
    let (mut node, addr) = super::suite::spawn_listening(crate::paths::tern(), &serve).await?;
    wait_ready(&[&addr]).await?;
    let node_pid = node.id().unwrap_or_default();
    let broker_pid: u32 = std::fs::read_to_string(kafka_dir.join("node-1.pid"))?.trim().parse()?;
    let url: hyper::Uri = format!("http://{addr}").parse()?;
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let warmup = Duration::from_secs(args.load.warmup_seconds);
    let seconds = Duration::from_secs(args.load.seconds);
    // Unmeasured: the node's first writes meet new topics' leaders and
    // empty caches (a first round ran at under half the later ones' rate).
    eprintln!("warming up: {} s of PUTs", WARMUP_RUN.as_secs());
    let warm = LoadArgs { seconds: WARMUP_RUN.as_secs(), ..closed.clone() };
    load::run(&url, &warm.spec("warm-up", Operation::TernPut { ns: "default".into() })).await?;
    let mut rounds: Vec<Vec<Measured>> = Vec::new();
    for round in 1..=args.rounds.max(1) {
        let order: Vec<usize> = (0..RUNS.len()).map(|i| (i + round - 1) % RUNS.len()).collect();
        eprintln!("round {round}/{}: starting at {}", args.rounds, RUNS[order[0]]);
        let mut measured: Vec<Option<Measured>> = (0..RUNS.len()).map(|_| None).collect();
        for &i in &order {
            let (result, meter) = match i {
                0 => {
                    let meter = CpuMeter::start(&[("tern", node_pid), ("broker", broker_pid), ("load generator", std::process::id())])?;
                    (load::run(&url, &closed.spec(RUNS[0], Operation::TernPut { ns: "default".into() })).await?, meter)
                }
                _ => {
                    let meter = CpuMeter::start(&[("tern", node_pid), ("broker", broker_pid), ("librdkafka writers", std::process::id())])?;
                    (librdkafka_floor(bootstrap, closed.connections, warmup, seconds, args.load.value_bytes).await?, meter)
                }
            };
            anyhow::ensure!(result.errors == 0, "{}: {} errors", RUNS[i], result.errors);
            // Warm-up is in the CPU time but not in the count: divide by every record made.
            let records = result.throughput_per_s * (result.seconds + warmup.as_secs_f64());
            let cpu_us_per_record = meter.per_op_us(records)?;
            measured[i] = Some(Measured { result, cpu_us_per_record });
        }
        rounds.push(measured.into_iter().map(|m| m.expect("every run measured")).collect());
    }
    let _ = node.start_kill();
    let _ = node.wait().await;

    let throughput_ratio = |r: &[Measured]| r[0].result.throughput_per_s / r[1].result.throughput_per_s;
    let p99_ratio = |r: &[Measured]| r[0].result.p99_us as f64 / r[1].result.p99_us.max(1) as f64;
    let median_of = |f: &dyn Fn(&[Measured]) -> f64| {
        let mut xs: Vec<f64> = rounds.iter().map(|r| f(r)).collect();
        xs.sort_by(f64::total_cmp);
        round3(xs[xs.len() / 2])
    };
    let per_round: Vec<serde_json::Value> = rounds
        .iter()
        .map(|r| {
            json!({
                "put_vs_floor": round3(throughput_ratio(r)),
                "p99_put_vs_floor": round3(p99_ratio(r)),
                "cpu_us_per_record": {"put": r[0].cpu_us_per_record, "floor": r[1].cpu_us_per_record},
            })
        })
        .collect();
    let ratios = json!({
        "put_vs_floor_median": median_of(&throughput_ratio),
        "p99_put_vs_floor_median": median_of(&p99_ratio),
        "targets": {"put_vs_floor_min": 0.8, "p99_put_vs_floor_max": 2.0},
        "rounds": per_round,
    });
    let results: Vec<BenchResult> = (0..RUNS.len()).map(|i| median(rounds.iter().map(|r| r[i].result.clone()).collect())).collect();
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "value_bytes": args.load.value_bytes,
        "connections": args.load.connections,
        "results": results,
        "ratios": ratios,
        "rounds": rounds.iter().map(|r| r.iter().map(|m| json!({"result": m.result, "cpu_us_per_record": m.cpu_us_per_record})).collect::<Vec<_>>()).collect::<Vec<_>>(),
    });
    std::fs::write(args.out.join("kafka-put.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = markdown(&results);
    md.push_str(&format!("\n{}\n", serde_json::to_string_pretty(&ratios)?));
    std::fs::write(args.out.join("kafka-put.md"), &md)?;
    print!("{md}");
    Ok(())
}
