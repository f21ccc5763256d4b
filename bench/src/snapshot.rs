//! `tern-bench snapshot`: snapshot and restore of one large partition, to
//! `file://` and to a local S3-compatible server (`scripts/s3.sh`, started
//! and stopped by the benchmark), in one run: time and size of a full
//! snapshot, of a restore (download, verify, rebuild the store, check the
//! state hash), and bytes of an incremental snapshot after a 1% change.
//! Then end to end: a `tern serve` node (embedded log, `file://` snapshots)
//! loaded with the same number of records through batch calls, snapshotted,
//! written 1% more, stopped, its stores deleted, and restarted: the time from
//! start to `/readyz` is restore + catch-up.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use serde_json::json;

use tern::snapshot::Snapshots;
use tern::store::PartitionStore;

#[derive(Args)]
pub(crate) struct SnapshotBenchArgs {
    /// Directory for snapshot.json and snapshot.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Records in the partition.
    #[arg(long, default_value_t = 1_000_000)]
    records: u32,
    /// Bytes per value (JSON text).
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
}

/// Records written per store transaction while building the partition.
const BUILD_BATCH_RECORDS: u32 = 50_000;

/// A value of `bytes` bytes with the entropy of real configuration (a digest, hex).
pub(crate) fn value(i: u32, round: u32, bytes: usize) -> Vec<u8> {
    let mut text = String::with_capacity(bytes);
    text.push('"');
    let mut n = 0u32;
    while text.len() + 1 < bytes {
        text.push_str(blake3::hash(&[i.to_le_bytes(), round.to_le_bytes(), n.to_le_bytes()].concat()).to_hex().as_str());
        n += 1;
    }
    text.truncate(bytes - 1);
    text.push('"');
    text.into_bytes()
}

fn write(store: &PartitionStore, keys: std::ops::Range<u32>, offset: u64, round: u32, value_bytes: usize) -> anyhow::Result<()> {
    let mut start = keys.start;
    let mut offset = offset;
    while start < keys.end {
        let end = (start + BUILD_BATCH_RECORDS).min(keys.end);
        store.apply(false, |tx| {
            for i in start..end {
                tx.put(&format!("tenant-{:04}/flag-{i:08}", i / 1000), "", offset, &value(i, round, value_bytes))?;
            }
            tx.mark_applied(offset, false);
            Ok(())
        })?;
        offset += 1;
        start = end;
    }
    store.flush_durable()?;
    Ok(())
}

/// Records per batch call while loading the node.
pub(crate) const LOAD_BATCH_OPS: u32 = 500;

/// Loads `keys` into the node at `url` through batch calls (one pk per call).
pub(crate) async fn load_node(client: &reqwest::Client, url: &str, keys: std::ops::Range<u32>, round: u32, value_bytes: usize) -> anyhow::Result<()> {
    let calls: Vec<u32> = keys.clone().step_by(LOAD_BATCH_OPS as usize).collect();
    let requests = futures::stream::iter(calls).map(|start| {
        let end = (start + LOAD_BATCH_OPS).min(keys.end);
        let ops: Vec<serde_json::Value> = (start..end)
            .map(|i| {
                let value: serde_json::Value = serde_json::from_slice(&value(i, round, value_bytes)).expect("bench values are JSON");
                json!({"op": "put", "pk": format!("tenant-{start:08}"), "sk": format!("flag-{i:08}"), "value": value})
            })
            .collect();
        let request = client.post(format!("{url}/v1/ns/bench/batch")).json(&json!({ "ops": ops }));
        async move { request.send().await?.error_for_status().map(|_| ()) }
    });
    use futures::StreamExt;
    let results: Vec<Result<(), reqwest::Error>> = requests.buffer_unordered(16).collect().await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(())
}

/// The arguments of a node with its data in `data` and `namespace`
/// (`NAME:PARTITIONS`), whose snapshots go to `snapshots` only when asked
/// (`POST /v1/admin/snapshots`): the schedule never fires during a run.
pub(crate) fn on_demand_snapshot_node_args(data: &Path, snapshots: &str, namespace: &str) -> Vec<String> {
    let data = data.to_str().unwrap_or_default();
    let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", data, "--namespace", namespace, "--snapshots", snapshots];
    let schedule_off = ["--snapshot-interval-ms", "86400000", "--snapshot-entries", "1000000000"];
    args.iter().chain(&schedule_off).map(|arg| arg.to_string()).collect()
}

/// Starts a node, loads it, snapshots, writes 1% more, stops it, deletes its
/// stores, restarts it and times start → ready.
async fn restore_and_catch_up(args: &SnapshotBenchArgs, scratch: &Path) -> anyhow::Result<serde_json::Value> {
    let exe = crate::paths::tern();
    let data = scratch.join("node");
    let snapshots = format!("file://{}", scratch.join("node-snapshots").display());
    let node_args = super::snapshot::on_demand_snapshot_node_args(&data, &snapshots, "bench:4");
    let node_args: Vec<&str> = node_args.iter().map(String::as_str).collect();
    let client = reqwest::Client::new();
    let (mut node, address) = super::suite::spawn_listening(exe, &node_args).await?;
    let url = format!("http://{address}");
    load_node(&client, &url, 0..args.records, 0, args.value_bytes).await?;
    client.post(format!("{url}/v1/admin/snapshots")).send().await?.error_for_status()?;
    let after = args.records / 100;
    load_node(&client, &url, args.records..args.records + after, 0, args.value_bytes).await?;
    let expected = caught_up(&client, &url).await?;
    terminate(&mut node).await?;
    std::fs::remove_dir_all(data.join("stores"))?;
    let started = Instant::now();
    let (mut node, address) = super::suite::spawn_listening(exe, &node_args).await?;
    let url = format!("http://{address}");
    let deadline = Instant::now() + std::time::Duration::from_secs(600);
    while !client.get(format!("{url}/readyz")).send().await?.status().is_success() {
        anyhow::ensure!(Instant::now() < deadline, "the node did not become ready within 600 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let restored: serde_json::Value = client.get(format!("{url}/v1/ns/bench")).send().await?.json().await?;
    let hashes =
        |v: &serde_json::Value| -> Vec<serde_json::Value> { v["state"].as_array().into_iter().flatten().map(|p| p["state_hash"].clone()).collect() };
    anyhow::ensure!(hashes(&restored) == hashes(&expected), "restored state differs: {restored} vs {expected}");
    terminate(&mut node).await?;
    Ok(json!({ "records": args.records, "written_after_snapshot": after, "restore_and_catch_up_s": elapsed }))
}

/// The namespace view once every partition has applied its whole log (bounded wait).
pub(crate) async fn caught_up(client: &reqwest::Client, url: &str) -> anyhow::Result<serde_json::Value> {
    let deadline = Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let view: serde_json::Value = client.get(format!("{url}/v1/ns/bench")).send().await?.json().await?;
        if view["state"].as_array().is_some_and(|ps| ps.iter().all(|p| p["lag"] == 0)) {
            return Ok(view);
        }
        anyhow::ensure!(Instant::now() < deadline, "the node did not catch up within 300 s");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// SIGTERM (a clean stop: stores flushed), bounded.
pub(crate) async fn terminate(node: &mut tokio::process::Child) -> anyhow::Result<()> {
    if let Some(pid) = node.id() {
        std::process::Command::new("kill").arg(pid.to_string()).status()?;
    }
    tokio::time::timeout(std::time::Duration::from_secs(60), node.wait()).await??;
    Ok(())
}

/// One target's numbers.
async fn measure(
    name: &str,
    snapshots: &Snapshots,
    store: &PartitionStore,
    scratch: &Path,
    args: &SnapshotBenchArgs,
) -> anyhow::Result<serde_json::Value> {
    eprintln!("{name}: full snapshot");
    let started = Instant::now();
    let full = snapshots.create("bench", 0, 1, store.read()?, "bench-log").await?;
    let full_s = started.elapsed().as_secs_f64();
    eprintln!("{name}: restore");
    let target = scratch.join(format!("restored-{name}.redb"));
    let started = Instant::now();
    let (restored, _) = snapshots.restore(&tern::snapshot::RestoreTarget::new("bench", 0, 1, &target, 64 << 20)).await?;
    let restore_s = started.elapsed().as_secs_f64();
    let (a, b) = (restored.read()?.state()?, store.read()?.state()?);
    anyhow::ensure!(a == b, "restored state differs: {a:?} vs {b:?}");
    drop(restored);
    std::fs::remove_file(&target)?;
    Ok(json!({
        "target": name,
        "full_snapshot_s": full_s,
        "full_snapshot_bytes": full.bytes_uploaded,
        "chunks": full.chunks,
        "restore_s": restore_s,
        "records": args.records,
    }))
}

pub(crate) async fn run(args: SnapshotBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-snapshot-").tempdir()?;
    eprintln!("building a partition of {} records of {} B", args.records, args.value_bytes);
    let store = PartitionStore::open(&scratch.path().join("partition.redb"), 1, 64 << 20)?;
    let started = Instant::now();
    write(&store, 0..args.records, 0, 0, args.value_bytes)?;
    eprintln!("built in {:.1} s", started.elapsed().as_secs_f64());
    let store_bytes = std::fs::metadata(scratch.path().join("partition.redb"))?.len();

    let mut results = Vec::new();
    let file_dir = scratch.path().join("objects");
    let file = Snapshots::open(&format!("file://{}", file_dir.display()))?;
    results.push(measure("file", &file, &store, scratch.path(), &args).await?);

    let s3_dir = scratch.path().join("s3");
    let script = crate::paths::script("s3.sh");
    let output = std::process::Command::new(&script).args(["start", "--dir"]).arg(&s3_dir).output()?;
    anyhow::ensure!(output.status.success(), "scripts/s3.sh start failed: {}", String::from_utf8_lossy(&output.stderr));
    let endpoint = String::from_utf8(output.stdout)?.lines().last().unwrap_or_default().trim().to_string();
    let s3_result = async {
        reqwest::Client::new().put(format!("{endpoint}/bench")).send().await?.error_for_status()?;
        // The local S3 server's settings, passed to the store (never the process environment).
        let options: Vec<(String, String)> = [
            ("aws_endpoint", endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_region", "us-east-1"),
            ("aws_access_key_id", "bench"),
            ("aws_secret_access_key", "bench"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let s3 = Snapshots::open_with("s3://bench/tern", &options)?;
        measure("s3", &s3, &store, scratch.path(), &args).await
    }
    .await;
    let _ = std::process::Command::new(&script).args(["stop", "--dir"]).arg(&s3_dir).status();
    results.push(s3_result?);

    eprintln!("incremental snapshot after a 1% change (file)");
    let changed = args.records / 100;
    let start = args.records / 2;
    write(&store, start..start + changed, 1_000_000, 1, args.value_bytes)?;
    let incremental = file.create("bench", 0, 1, store.read()?, "bench-log").await?;
    let full_bytes = results[0]["full_snapshot_bytes"].as_u64().unwrap_or(1);
    let fraction = incremental.bytes_uploaded as f64 / full_bytes as f64;

    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "records": args.records,
        "value_bytes": args.value_bytes,
        "store_bytes": store_bytes,
        "targets": results,
        "incremental_1pct": {
            "records_changed": changed,
            "bytes_uploaded": incremental.bytes_uploaded,
            "chunks_uploaded": incremental.chunks_uploaded,
            "chunks": incremental.chunks,
            "fraction_of_full": fraction,
        },
    });
    eprintln!("end to end: restore + catch-up of a node");
    let end_to_end = restore_and_catch_up(&args, scratch.path()).await?;
    let mut report = report;
    report["end_to_end"] = end_to_end.clone();
    std::fs::write(args.out.join("snapshot.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = String::from("| target | full snapshot s | full snapshot MB | chunks | restore s |\n|---|---:|---:|---:|---:|\n");
    for r in report["targets"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "| {} | {:.2} | {:.1} | {} | {:.2} |\n",
            r["target"].as_str().unwrap_or(""),
            r["full_snapshot_s"].as_f64().unwrap_or(0.0),
            r["full_snapshot_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            r["chunks"],
            r["restore_s"].as_f64().unwrap_or(0.0)
        ));
    }
    md.push_str(&format!(
        "\nstore {:.1} MB; incremental after changing {changed} records (1%): {} bytes in {}/{} chunks = {:.2}% of the full snapshot\n",
        store_bytes as f64 / 1e6,
        incremental.bytes_uploaded,
        incremental.chunks_uploaded,
        incremental.chunks,
        fraction * 100.0
    ));
    md.push_str(&format!(
        "\nend to end (tern serve, embedded log): {} records, snapshot, {} more written, stores deleted, restart: \
         ready after {:.2} s (restore + catch-up)\n",
        end_to_end["records"],
        end_to_end["written_after_snapshot"],
        end_to_end["restore_and_catch_up_s"].as_f64().unwrap_or(0.0)
    ));
    std::fs::write(args.out.join("snapshot.md"), &md)?;
    print!("{md}");
    Ok(())
}
