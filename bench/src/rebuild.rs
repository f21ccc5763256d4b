//! `tern-bench rebuild`: what a damaged store costs (issue 37). One
//! partition of N records (`tern serve`, embedded log, `file://`
//! snapshots), a snapshot, 1% more written; then, alternating for
//! `--rounds`, three restarts timed from start to `/readyz`:
//!
//! - `healthy`: the node stopped and started again (every store opened
//!   with its integrity check: the cost every start pays now);
//! - `fresh`: `stores/` deleted (the partition restored from its snapshot
//!   and the log after it, as before issue 37);
//! - `damaged`: the store cut short by a tenth (found damaged at open, set
//!   aside, then restored the same way);
//! - `running`: not a restart: one record's value flipped on disk under a
//!   running node (a 1 MiB page cache, so the read goes to the file), timed
//!   from the read that finds it (503) to the record reading back as
//!   written: the partition rebuilt in place (snapshot, then the log, up to
//!   where the damaged store was) while the node runs.
//!
//! Each one's state hash is checked equal to the one before.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use serde_json::json;

#[derive(Args)]
pub(crate) struct RebuildBenchArgs {
    /// Directory for rebuild.json and rebuild.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Records in the partition.
    #[arg(long, default_value_t = 1_000_000)]
    records: u32,
    /// Bytes per value (JSON text).
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Rounds of the three restarts, alternating.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
}

const KINDS: [&str; 4] = ["healthy", "fresh", "damaged", "running"];

/// The record `running` damages: one of the first load, not in the last page written.
const DAMAGED_RECORD: u32 = 123_457;

pub(crate) async fn run(args: RebuildBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-rebuild-").tempdir()?;
    let exe = crate::paths::tern();
    let data = scratch.path().join("node");
    let snapshots = format!("file://{}", scratch.path().join("snapshots").display());
    let node_args = super::snapshot::on_demand_snapshot_node_args(&data, &snapshots, "bench:1");
    let node_args: Vec<&str> = node_args.iter().map(String::as_str).collect();
    let client = reqwest::Client::new();
    let (mut node, address) = super::suite::spawn_listening(exe, &node_args).await?;
    let url = format!("http://{address}");
    eprintln!("loading {} records", args.records);
    super::snapshot::load_node(&client, &url, 0..args.records, 0, args.value_bytes).await?;
    client.post(format!("{url}/v1/admin/snapshots")).send().await?.error_for_status()?;
    let after = args.records / 100;
    super::snapshot::load_node(&client, &url, args.records..args.records + after, 0, args.value_bytes).await?;
    let expected = super::snapshot::caught_up(&client, &url).await?;
    super::snapshot::terminate(&mut node).await?;
    let store = data.join("stores/bench/00000.redb");
    let store_bytes = std::fs::metadata(&store)?.len();

    let mut seconds: Vec<(&str, f64)> = Vec::new();
    for round in 0..args.rounds {
        for kind in KINDS {
            prepare(kind, &data, &store)?;
            let started = Instant::now();
            let small_cache: &[&str] = if kind == "running" { &["--store-cache-bytes", "1048576"] } else { &[] };
            let argv: Vec<&str> = node_args.iter().chain(small_cache).copied().collect();
            let (mut node, address) = super::suite::spawn_listening(exe, &argv).await?;
            let url = format!("http://{address}");
            wait_ready(&client, &url).await?;
            let elapsed = match kind {
                "running" => damaged_while_running(&client, &url, &store, args.value_bytes).await?,
                _ => started.elapsed().as_secs_f64(),
            };
            let view = super::snapshot::caught_up(&client, &url).await?;
            anyhow::ensure!(view["state"][0]["state_hash"] == expected["state"][0]["state_hash"], "{kind}: the state differs: {view} vs {expected}");
            if kind == "damaged" || kind == "running" {
                let metrics = client.get(format!("{url}/metrics")).send().await?.text().await?;
                anyhow::ensure!(metrics.contains("tern_store_set_aside_total 1"), "{kind}: the store was not set aside");
            }
            super::snapshot::terminate(&mut node).await?;
            eprintln!("round {round}: {kind} ready after {elapsed:.2} s");
            seconds.push((kind, elapsed));
        }
    }
    let median = |kind: &str| {
        let mut values: Vec<f64> = seconds.iter().filter(|(k, _)| *k == kind).map(|(_, s)| *s).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "records": args.records,
        "written_after_snapshot": after,
        "store_bytes": store_bytes,
        "rounds": seconds.iter().map(|(k, s)| json!({ "kind": k, "ready_s": s })).collect::<Vec<_>>(),
        "median_ready_s": KINDS.iter().map(|k| (k.to_string(), json!(median(k)))).collect::<serde_json::Map<_, _>>(),
    });
    std::fs::write(args.out.join("rebuild.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = format!(
        "one partition of {} records ({:.1} MB store), snapshot, {after} more written; start → /readyz, {} alternating rounds\n\n\
         | restart | median s | every round s |\n|---|---:|---|\n",
        args.records,
        store_bytes as f64 / 1e6,
        args.rounds
    );
    for kind in KINDS {
        let all: Vec<String> = seconds.iter().filter(|(k, _)| *k == kind).map(|(_, s)| format!("{s:.2}")).collect();
        md.push_str(&format!("| {kind} | {:.2} | {} |\n", median(kind), all.join(", ")));
    }
    md.push_str(&format!(
        "\ndamaged / fresh: {:.2}; running (damage found → serving again) / fresh: {:.2}\n",
        median("damaged") / median("fresh"),
        median("running") / median("fresh")
    ));
    std::fs::write(args.out.join("rebuild.md"), &md)?;
    print!("{md}");
    Ok(())
}

/// Leaves the data directory as the kind of restart finds it.
fn prepare(kind: &str, data: &Path, store: &Path) -> anyhow::Result<()> {
    let damaged = data.join("damaged");
    if damaged.exists() {
        std::fs::remove_dir_all(&damaged)?;
    }
    match kind {
        "fresh" => std::fs::remove_dir_all(data.join("stores"))?,
        "damaged" => {
            let len = std::fs::metadata(store)?.len();
            std::fs::OpenOptions::new().write(true).open(store)?.set_len(len - len / 10)?;
        }
        _ => {}
    }
    Ok(())
}

/// Flips one byte of `DAMAGED_RECORD`'s value in the running node's store
/// file and reads it: seconds from the read that finds the damage (503)
/// to the record reading back as written. Any other value read fails the run.
async fn damaged_while_running(client: &reqwest::Client, url: &str, store: &Path, value_bytes: usize) -> anyhow::Result<f64> {
    use std::os::unix::fs::FileExt;
    let value = super::snapshot::value(DAMAGED_RECORD, 0, value_bytes);
    let needle = &value[1..33];
    let bytes = std::fs::read(store)?;
    let at = bytes.windows(needle.len()).position(|w| w == needle).ok_or_else(|| anyhow::anyhow!("the record's value is not in the store file"))?;
    let at = at + needle.len() - 1;
    std::fs::OpenOptions::new().write(true).open(store)?.write_at(&[bytes[at] ^ 0x01], at as u64)?;
    drop(bytes);
    let pk = format!("tenant-{:08}", DAMAGED_RECORD - DAMAGED_RECORD % super::snapshot::LOAD_BATCH_OPS);
    let key_url = format!("{url}/v1/ns/bench/kv/{pk}/flag-{DAMAGED_RECORD:08}");
    let expected: serde_json::Value = serde_json::from_slice(&value)?;
    let deadline = Instant::now() + std::time::Duration::from_secs(600);
    let mut found: Option<Instant> = None;
    loop {
        let asked = Instant::now();
        let response = client.get(&key_url).send().await?;
        match response.status().as_u16() {
            200 => {
                let body: serde_json::Value = response.json().await?;
                anyhow::ensure!(body["value"] == expected, "a damaged value was served: {body}");
                if let Some(found) = found {
                    return Ok(found.elapsed().as_secs_f64());
                }
            }
            503 => {
                found.get_or_insert(asked);
            }
            other => anyhow::bail!("reading the damaged record: {other} {}", response.text().await?),
        }
        anyhow::ensure!(Instant::now() < deadline, "the damaged record was not found, or not rebuilt, within 600 s");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

async fn wait_ready(client: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(600);
    while !client.get(format!("{url}/readyz")).send().await?.status().is_success() {
        anyhow::ensure!(Instant::now() < deadline, "the node did not become ready within 600 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(())
}
