//! `tern-bench read-path`: what Tern's read path costs against the bare
//! HTTP server on the same stack, with and without authentication.
//!
//! Starts, as separate processes on loopback, the hello server (`tern-bench
//! hello`: axum answering `hello`, the ceiling for a GET on this machine),
//! a `tern serve` without authentication and one with it (an API key with
//! read and write on the namespace, as an application holds). Preloads the
//! same keys into both nodes, then runs `--rounds` rounds; each round
//! measures hello GET, Tern GET, Tern GET with the key, and hello sent the
//! key's `Authorization` header too (the same request bytes), closed loop,
//! starting at another one each round so none is always first. A round's
//! ratios are Tern's req/s over hello's in the same round; the report gives
//! every round's ratios and their medians (the target: ≥ 0.9 both).

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::load::{self, Operation};
use super::report::{markdown, round3, BenchResult};
use super::suite::{median, spawn_listening};
use super::LoadArgs;

#[derive(Args)]
pub(crate) struct ReadPathBenchArgs {
    /// Directory for read-path.json and read-path.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Rounds; each measures hello, Tern and Tern with a key.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[command(flatten)]
    load: LoadArgs,
}

/// What one round measures, in this order from the round's start. The
/// last is hello sent the same `Authorization` header as the GET with a
/// key: the bare server's cost of the very same request bytes (the header
/// costs the client and HTTP parsing something on either server), so
/// `auth_vs_hello_same_request` is what Tern's authentication and read
/// path cost over the bare server, request for request.
const RUNS: [&str; 4] = ["hello GET", "tern GET (plain)", "tern GET (auth)", "hello GET (auth header)"];

pub(crate) async fn run(args: ReadPathBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-read-path-").tempdir()?;
    let (mut hello, hello_addr) = spawn_listening(crate::paths::harness(), &["hello", "--listen", "127.0.0.1:0"]).await?;
    let hello_url: hyper::Uri = format!("http://{hello_addr}").parse()?;
    let mut nodes =
        vec![super::security::start("plain", scratch.path(), false, None).await?, super::security::start("auth", scratch.path(), true, None).await?];
    let ns = "default".to_string();
    for node in &nodes {
        eprintln!("preloading {} keys into {} ({})", args.load.keys, node.name, node.url);
        load::preload_tern_as(&node.url, &ns, args.load.keys, args.load.value_bytes, 64, node.authorization.clone(), None).await?;
        super::security::settle(node).await?;
    }
    tokio::time::sleep(super::security::SETTLE_AFTER_CAUGHT_UP).await;
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let mut rounds: Vec<Vec<BenchResult>> = Vec::new();
    for round in 1..=args.rounds.max(1) {
        let order: Vec<usize> = (0..RUNS.len()).map(|i| (i + round - 1) % RUNS.len()).collect();
        eprintln!("round {round}/{}: starting at {}", args.rounds, RUNS[order[0]]);
        let mut results: Vec<Option<BenchResult>> = vec![None; RUNS.len()];
        for &i in &order {
            let result = match i {
                0 => load::run(&hello_url, &closed.spec(RUNS[0], Operation::Hello)).await?,
                3 => {
                    let mut spec = closed.spec(RUNS[3], Operation::Hello);
                    spec.authorization = nodes[1].authorization.clone();
                    load::run(&hello_url, &spec).await?
                }
                _ => {
                    let node = &nodes[i - 1];
                    let mut spec = closed.spec(RUNS[i], Operation::TernGet { ns: ns.clone() });
                    spec.authorization = node.authorization.clone();
                    load::run(&node.url, &spec).await?
                }
            };
            anyhow::ensure!(result.errors == 0, "{}: {} errors", RUNS[i], result.errors);
            results[i] = Some(result);
        }
        rounds.push(results.into_iter().map(|r| r.expect("every run measured")).collect());
    }
    let _ = hello.start_kill();
    let _ = hello.wait().await;
    for node in &mut nodes {
        let _ = node.child.start_kill();
        let _ = node.child.wait().await;
    }
    // (run, over run): Tern's GET over hello's, plain and with a key; the
    // GET with a key over hello sent the same header.
    let ratio_in = |round: &[BenchResult], (i, over): (usize, usize)| round[i].throughput_per_s / round[over].throughput_per_s;
    const PLAIN: (usize, usize) = (1, 0);
    const AUTH: (usize, usize) = (2, 0);
    const AUTH_SAME_REQUEST: (usize, usize) = (2, 3);
    let per_round: Vec<serde_json::Value> = rounds
        .iter()
        .map(|r| {
            json!({
                "plain_vs_hello": round3(ratio_in(r, PLAIN)),
                "auth_vs_hello": round3(ratio_in(r, AUTH)),
                "auth_vs_hello_same_request": round3(ratio_in(r, AUTH_SAME_REQUEST)),
            })
        })
        .collect();
    let median_of = |pair: (usize, usize)| {
        let mut ratios: Vec<f64> = rounds.iter().map(|r| ratio_in(r, pair)).collect();
        ratios.sort_by(f64::total_cmp);
        round3(ratios[ratios.len() / 2])
    };
    let ratios = json!({
        "plain_vs_hello_median": median_of(PLAIN),
        "auth_vs_hello_median": median_of(AUTH),
        "auth_vs_hello_same_request_median": median_of(AUTH_SAME_REQUEST),
        "rounds": per_round,
        "targets": {"plain_vs_hello_min": 0.9, "auth_vs_hello_min": 0.9},
    });
    let results: Vec<BenchResult> = (0..RUNS.len()).map(|i| median(rounds.iter().map(|r| r[i].clone()).collect())).collect();
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "keys": args.load.keys,
        "value_bytes": args.load.value_bytes,
        "connections": args.load.connections,
        "results": results,
        "ratios": ratios,
        "rounds": rounds,
    });
    std::fs::write(args.out.join("read-path.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = markdown(&results);
    md.push_str(&format!("\n{}\n", serde_json::to_string_pretty(&ratios)?));
    std::fs::write(args.out.join("read-path.md"), &md)?;
    print!("{md}");
    Ok(())
}
