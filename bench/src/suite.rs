//! `tern-bench suite`: every peer measured in one run on this machine.
//!
//! Starts, as separate processes on loopback: a `tern dev` node, the hello
//! server (`tern-bench hello`) and etcd (Debian's `etcd-server`), preloads
//! the same keys and value size into Tern and etcd, then runs `--rounds`
//! rounds of: hello GET, Tern GET, etcd serializable get, Tern PUT (closed
//! loop, each peer in turn, so a noisy moment hits all of them alike; after
//! each Tern PUT run the node settles — caught up, stores flushed — so its
//! write aftermath is not charged to the next measurement), and
//! reports each one's median-throughput round; finally Tern GET and hello GET
//! open loop at 25%, 40% and 50% of Tern's median closed-loop rate.
//! Writes `results.json`, `results.md` and `results.png` to `--out`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use clap::Args;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::load::{self, Operation};
use super::report::{markdown, BenchResult};
use super::{etcd, LoadArgs};

#[derive(Args)]
pub(crate) struct SuiteArgs {
    /// Directory for results.json, results.md and results.png.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// The etcd binary (Debian's etcd-server installs /usr/bin/etcd).
    #[arg(long, default_value = "etcd")]
    etcd: String,
    /// Rounds; each round measures every closed-loop peer in turn, and the
    /// median-throughput round of each is reported (this machine is noisy).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[command(flatten)]
    load: LoadArgs,
}

/// Longest a peer may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Spawns `program args` and waits for a stdout line containing "listening on http://ADDR" (or https).
/// Its stderr (the log) is dropped, or appended to the file `TERN_BENCH_STDERR` names.
pub(super) async fn spawn_listening(program: &std::path::Path, args: &[&str]) -> anyhow::Result<(Child, String)> {
    let stderr = match std::env::var_os("TERN_BENCH_STDERR") {
        Some(path) => Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(path)?),
        None => Stdio::null(),
    };
    let mut child = Command::new(program).args(args).stdout(Stdio::piped()).stderr(stderr).kill_on_drop(true).spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let address = tokio::time::timeout(START_TIMEOUT, async {
        while let Some(line) = lines.next_line().await? {
            if let Some((_, url)) = line.split_once("listening on ") {
                let addr = url.trim().trim_start_matches("http://").trim_start_matches("https://");
                return Ok(addr.to_string());
            }
        }
        anyhow::bail!("{} exited before listening", program.display())
    })
    .await
    .map_err(|_| anyhow::anyhow!("{} did not start within {START_TIMEOUT:?}", program.display()))??;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, address))
}

/// After a write burst the node applies the backlog and flushes its stores
/// (fsync); that work would steal CPU from whatever is measured next. Wait
/// until every partition has caught up, then for the stores' flush interval
/// (1 s) and its fsyncs to pass.
const SETTLE_AFTER_CAUGHT_UP: Duration = Duration::from_secs(3);

async fn settle(tern_addr: &str) -> anyhow::Result<()> {
    let url = format!("http://{tern_addr}/v1/ns/default");
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        let body: serde_json::Value = reqwest::get(&url).await?.json().await?;
        let caught_up = body["state"].as_array().is_some_and(|ps| ps.iter().all(|p| p["lag"] == 0));
        if caught_up {
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "tern did not catch up within {START_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(SETTLE_AFTER_CAUGHT_UP).await;
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(super) async fn spawn_etcd(binary: &str, dir: &std::path::Path) -> anyhow::Result<(Child, String)> {
    let (client_port, peer_port) = (free_port()?, free_port()?);
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let child = Command::new(binary)
        .args(["--name", "bench", "--data-dir"])
        .arg(dir)
        .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("bench={peer_url}"), "--log-level", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start etcd ({binary}): {e}; install Debian's etcd-server"))?;
    let endpoint = format!("127.0.0.1:{client_port}");
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(mut client) = etcd_client::Client::connect([endpoint.as_str()], None).await {
            if client.status().await.is_ok() {
                return Ok((child, endpoint));
            }
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "etcd did not become ready within {START_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|m| m.trim_start_matches([' ', '\t', ':']).to_string());
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap_or(0)));
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "memory_gib": mem_kib.map(|k| (k as f64 / 1024.0 / 1024.0).round()),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
    })
}

pub(crate) async fn run(args: SuiteArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-").tempdir()?;
    let data_dir = scratch.path().join("tern");
    let (mut tern, tern_addr) =
        spawn_listening(crate::paths::tern(), &["dev", "--listen", "127.0.0.1:0", "--data-dir", data_dir.to_str().unwrap()]).await?;
    let (mut hello, hello_addr) = spawn_listening(crate::paths::harness(), &["hello", "--listen", "127.0.0.1:0"]).await?;
    let (mut etcd_child, etcd_endpoint) = spawn_etcd(&args.etcd, &scratch.path().join("etcd")).await?;
    eprintln!("tern {tern_addr}  hello {hello_addr}  etcd {etcd_endpoint}");

    let tern_url: hyper::Uri = format!("http://{tern_addr}").parse()?;
    let hello_url: hyper::Uri = format!("http://{hello_addr}").parse()?;
    let ns = "default".to_string();
    eprintln!("preloading {} keys of {} bytes into tern and etcd", args.load.keys, args.load.value_bytes);
    load::preload_tern(&tern_url, &ns, args.load.keys, args.load.value_bytes, 64).await?;
    etcd::preload(&etcd_endpoint, args.load.keys, args.load.value_bytes).await?;
    settle(&tern_addr).await?;

    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let mut rounds: Vec<Vec<BenchResult>> = Vec::new();
    for round in 1..=args.rounds.max(1) {
        eprintln!("round {round}/{}: hello GET, tern GET, etcd get, tern PUT", args.rounds);
        rounds.push(vec![
            load::run(&hello_url, &closed.spec("hello GET (axum ceiling)", Operation::Hello)).await?,
            load::run(&tern_url, &closed.spec("tern GET", Operation::TernGet { ns: ns.clone() })).await?,
            etcd::run_gets(&etcd_endpoint, &closed.spec("etcd 3 serializable get", Operation::Hello)).await?,
            load::run(&tern_url, &closed.spec("tern PUT (embedded log)", Operation::TernPut { ns: ns.clone() })).await?,
        ]);
        settle(&tern_addr).await?;
    }
    let mut results: Vec<BenchResult> = (0..rounds[0].len()).map(|i| median(rounds.iter().map(|r| r[i].clone()).collect())).collect();
    // Open loop: Tern at fractions of its median peak, and the hello server at
    // the same rates, so the tail the machine itself adds is visible beside Tern's.
    let peak = results[1].throughput_per_s;
    let mut open_results = Vec::new();
    for fraction in [0.25, 0.4, 0.5] {
        let rate = (peak * fraction) as u64;
        let percent = fraction * 100.0;
        eprintln!("open loop at {percent:.0}% of Tern's median closed-loop GET rate: {rate}/s (tern, then hello)");
        let open = LoadArgs { rate: Some(rate), ..args.load.clone() };
        let tern_name = format!("tern GET at {percent:.0}% load");
        open_results.push(load::run(&tern_url, &open.spec(&tern_name, Operation::TernGet { ns: ns.clone() })).await?);
        let hello_name = format!("hello GET at the same rate ({percent:.0}%)");
        open_results.push(load::run(&hello_url, &open.spec(&hello_name, Operation::Hello)).await?);
    }
    results.splice(2..2, open_results);

    for child in [&mut tern, &mut hello, &mut etcd_child] {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let ratios = ratios(&results);
    let report = serde_json::json!({
        "machine": machine(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "keys": args.load.keys,
        "value_bytes": args.load.value_bytes,
        "results": results,
        "ratios": ratios,
        "rounds": rounds,
    });
    let json_path = args.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_vec_pretty(&report)?)?;
    let mut md = markdown(&results);
    md.push_str(&format!("\n{}\n", serde_json::to_string_pretty(&ratios)?));
    std::fs::write(args.out.join("results.md"), &md)?;
    print!("{md}");
    let chart =
        std::process::Command::new("python3").arg(crate::paths::bench_file("chart.py")).arg(&json_path).arg(args.out.join("results.png")).status();
    match chart {
        Ok(status) if status.success() => eprintln!("chart: {}", args.out.join("results.png").display()),
        other => eprintln!("chart not drawn ({other:?}); run scripts/setup.sh to install matplotlib"),
    }
    Ok(())
}

/// The result with the median throughput of several rounds of one benchmark.
pub(super) fn median(mut of: Vec<BenchResult>) -> BenchResult {
    assert!(!of.is_empty());
    of.sort_by(|a, b| a.throughput_per_s.total_cmp(&b.throughput_per_s));
    of.swap_remove(of.len() / 2)
}

fn ratios(results: &[BenchResult]) -> serde_json::Value {
    let rps = |name: &str| results.iter().find(|r| r.name.starts_with(name)).map(|r| r.throughput_per_s);
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| (a / b * 100.0).round() / 100.0);
    serde_json::json!({
        "tern_get_vs_hello": ratio(rps("tern GET"), rps("hello GET")),
        "tern_get_vs_etcd": ratio(rps("tern GET"), rps("etcd")),
    })
}
