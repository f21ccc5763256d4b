//! `tern-bench procedures`: what a procedure costs inside Tern (issue 23).
//!
//! One `tern dev` (embedded log), two namespaces of 16 partitions: `plain`
//! (no procedure) and `agg` (the aggdemo procedure, `examples/aggdemo/`).
//! The same stream of aggdemo records goes into each as batched writes
//! (100 records a call, one partition a call), in alternating rounds; a
//! round ends when every record was applied. Per round: records/s and the
//! `tern` process's CPU µs per record. The difference between the two rows
//! is the procedure's share: the call, its state reads and writes, its
//! outbox messages and timers, in the apply transaction. HTTP and JSON
//! parsing are in both rows: this measures the procedure, not the input
//! path (foreign Kafka topics, the input, come next).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use clap::Args;
use serde_json::{json, Value};

use super::cpu::CpuMeter;
use super::suite::spawn_listening;

#[derive(Args)]
pub(crate) struct ProceduresBenchArgs {
    /// Where results go (procedures.json, procedures.md).
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Alternating rounds of each configuration.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Records per round.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Concurrent writers.
    #[arg(long, default_value_t = 16)]
    connections: usize,
}

/// Records per batch call (the batched writes).
const BATCH_RECORDS: u64 = 100;
const PARTITIONS: u64 = 16;
/// Sessions open at once in the generated stream.
const SESSIONS_OPEN: u64 = 800;
/// The longest a round may take to apply everything it wrote.
const APPLY_WAIT_MAX: Duration = Duration::from_secs(300);

/// Sessions open at once in each stream.
const SESSIONS_PER_STREAM: u64 = SESSIONS_OPEN / PARTITIONS;

/// Record `i` of stream `stream` (one per pk `in<stream>`, so a session's
/// records all reach one partition) in round `round`: sessions of 256
/// records, `SESSIONS_PER_STREAM` open at once, never repeated across rounds
/// or streams, started at `start` (an hour before the run: in date, as the
/// log's time is the writer's clock).
fn line(round: u64, stream: u64, i: u64, start: u64) -> String {
    let generation = i / (SESSIONS_PER_STREAM * 256);
    let session = round * 10_000_000 + stream + PARTITIONS * (i % SESSIONS_PER_STREAM + SESSIONS_PER_STREAM * generation);
    let seqno = (i / SESSIONS_PER_STREAM) % 256;
    let kind = match seqno {
        0 => "S",
        255 => "E",
        _ => "I",
    };
    format!(
        "{session},{start},{seqno},4155550{:04},4155551{:04},{kind},{},{}",
        session % 10_000,
        (session + 7) % 10_000,
        start + seqno * 1000,
        1_000 + (i * 7919) % 20_000
    )
}

pub(crate) async fn run(args: ProceduresBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("tern");
    let (mut tern, addr) =
        spawn_listening(crate::paths::tern(), &["dev", "--listen", "127.0.0.1:0", "--data-dir", data_dir.to_str().unwrap()]).await?;
    let pid = tern.id().ok_or_else(|| anyhow::anyhow!("tern has no pid"))?;
    let base = format!("http://{addr}");
    let client = reqwest::Client::builder().pool_max_idle_per_host(args.connections).build()?;
    for ns in ["plain", "agg"] {
        let r = client.put(format!("{base}/v1/ns/{ns}")).json(&json!({"partitions": PARTITIONS})).send().await?;
        anyhow::ensure!(r.status().is_success(), "creating {ns}: {}", r.text().await?);
    }
    let module = std::fs::read(crate::paths::repo_file("examples/aggdemo/build/aggdemo.wasm"))?;
    let definition = json!({
        "runtime": "wasm",
        "module": base64::engine::general_purpose::STANDARD.encode(module),
        "params": {"qtycount": 100, "usage": 1_000_000, "staleness_ms": 3_600_000},
    });
    let r = client.put(format!("{base}/v1/ns/agg/procedures/aggdemo")).json(&definition).send().await?;
    anyhow::ensure!(r.status().is_success(), "deploying aggdemo: {}", r.text().await?);

    let mut rows: Vec<Value> = Vec::new();
    for round in 0..args.rounds {
        for ns in ["plain", "agg"] {
            let row = measure_round(&client, &base, ns, round as u64, &args, pid).await?;
            eprintln!("round {round} {ns}: {row}");
            rows.push(row);
        }
    }
    let dead = outbox_count(&client, &base, "agg", "aggdemo.dead").await?;
    let metrics = client.get(format!("{base}/metrics")).send().await?.text().await?;
    let sample = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l.contains("procedure=\"aggdemo\""))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let calls = sample("tern_procedure_call_seconds_count");
    let inside = json!({
        "calls": calls,
        "call_us_mean": (sample("tern_procedure_call_seconds_sum") / calls.max(1.0) * 1e7).round() / 10.0,
        "fuel_per_call": (sample("tern_procedure_fuel_used_total") / calls.max(1.0)).round(),
        "outputs_per_call": sample("tern_procedure_outputs_total") / calls.max(1.0),
    });
    eprintln!("inside the procedure: {inside}");
    let _ = tern.kill().await;
    let report = json!({ "rows": rows, "inside_the_procedure": inside, "agg_dead_letters_seen": dead, "records_per_round": args.records, "connections": args.connections });
    std::fs::write(args.out.join("procedures.json"), serde_json::to_vec_pretty(&report)?)?;
    let md = format!("{}\ninside the procedure (aggdemo): {inside}\n", markdown(&rows));
    std::fs::write(args.out.join("procedures.md"), &md)?;
    println!("{md}");
    Ok(())
}

async fn measure_round(client: &reqwest::Client, base: &str, ns: &str, round: u64, args: &ProceduresBenchArgs, pid: u32) -> anyhow::Result<Value> {
    let meter = CpuMeter::start(&[("tern", pid)])?;
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let session_start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64 - 3_600_000;
    let started = Instant::now();
    let batches = args.records / BATCH_RECORDS;
    let mut workers = Vec::new();
    for _ in 0..args.connections {
        let (client, next, errors) = (client.clone(), next.clone(), errors.clone());
        let url = format!("{base}/v1/ns/{ns}/batch");
        workers.push(tokio::spawn(async move {
            loop {
                let b = next.fetch_add(1, Ordering::Relaxed);
                if b >= batches {
                    return;
                }
                let (stream, j) = (b % PARTITIONS, b / PARTITIONS);
                let pk = format!("in{stream}");
                let ops: Vec<Value> = (0..BATCH_RECORDS)
                    .map(|k| json!({"op": "put", "pk": pk, "sk": format!("{round}.{b}.{k}"), "value": line(round, stream, j * BATCH_RECORDS + k, session_start)}))
                    .collect();
                match client.post(&url).json(&json!({ "ops": ops })).send().await {
                    Ok(r) if r.status().is_success() => {}
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for w in workers {
        w.await?;
    }
    wait_applied(client, base, ns).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let records = (batches * BATCH_RECORDS) as f64;
    let cpu = meter.per_op_us_each(records)?[0];
    Ok(json!({
        "namespace": ns,
        "procedure": if ns == "agg" { "aggdemo" } else { "none" },
        "round": round,
        "records": records,
        "records_per_s": (records / elapsed).round(),
        "tern_cpu_us_per_record": cpu,
        "failed_calls": errors.load(Ordering::Relaxed),
    }))
}

/// Waits (bounded) until every partition of `ns` applied its whole log.
async fn wait_applied(client: &reqwest::Client, base: &str, ns: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + APPLY_WAIT_MAX;
    loop {
        let body: Value = client.get(format!("{base}/v1/ns/{ns}")).send().await?.json().await?;
        if body["state"].as_array().is_some_and(|s| s.iter().all(|p| p["lag"] == 0)) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{ns} did not apply its log within {APPLY_WAIT_MAX:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Messages for `topic_suffix` in `ns`'s outboxes (counted up to 1,000 a partition).
async fn outbox_count(client: &reqwest::Client, base: &str, ns: &str, topic_suffix: &str) -> anyhow::Result<u64> {
    let mut count = 0;
    for p in 0..PARTITIONS {
        let body: Value = client.get(format!("{base}/v1/ns/{ns}/outbox?partition={p}&limit=1000")).send().await?.json().await?;
        count += body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["topic"].as_str().is_some_and(|t| t.ends_with(topic_suffix))).count() as u64);
    }
    Ok(count)
}

fn markdown(rows: &[Value]) -> String {
    let mut md = String::from("| round | namespace | procedure | records/s | tern CPU µs per record |\n|---|---|---|---|---|\n");
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r["round"],
            r["namespace"].as_str().unwrap_or(""),
            r["procedure"].as_str().unwrap_or(""),
            r["records_per_s"],
            r["tern_cpu_us_per_record"]
        ));
    }
    md
}
