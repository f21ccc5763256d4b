//! What security costs: GET and PUT against four nodes started alike but
//! for authentication and TLS — neither, an API key on every request, TLS
//! (HTTP/1.1, keep-alive), both — measured in alternating rounds of one
//! run, the median round of each reported. The CA and the node's
//! certificate are made by `openssl` in a scratch directory.
//!
//! Targets (issue 20): authentication costs at most 5% of GET throughput;
//! TLS keeps at least 60% of plaintext GET throughput at 64 keep-alive
//! connections.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use clap::Args;
use serde_json::json;
use tokio::process::Child;

use super::load::{self, Operation};
use super::report::{markdown, BenchResult};
use super::suite::{median, spawn_listening};
use super::LoadArgs;

#[derive(Args)]
pub(crate) struct SecurityBenchArgs {
    /// Directory for security.json and security.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Rounds; each measures every configuration's GET, then PUT.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[command(flatten)]
    load: LoadArgs,
}

/// One node under test.
pub(super) struct Target {
    pub(super) name: &'static str,
    pub(super) child: Child,
    pub(super) url: hyper::Uri,
    pub(super) authorization: Option<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// For `settle`: a client that trusts the CA, and the root token.
    client: reqwest::Client,
    root: Option<String>,
}

/// After a PUT burst a node applies its backlog and flushes its stores; that
/// work would steal CPU from the next measurement (of any node: they share
/// the cores). Waits until every partition has caught up, then for the
/// stores' flush interval and its fsyncs.
pub(super) async fn settle(target: &Target) -> anyhow::Result<()> {
    let url = format!("{}v1/ns/default", target.url);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut request = target.client.get(&url);
        if let Some(root) = &target.root {
            request = request.bearer_auth(root);
        }
        let body: serde_json::Value = request.send().await?.json().await?;
        if body["state"].as_array().is_some_and(|ps| ps.iter().all(|p| p["lag"] == 0)) {
            return Ok(());
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{} did not catch up", target.name);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("openssl").args(args).current_dir(dir).output()?;
    anyhow::ensure!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    Ok(())
}

/// A CA and a certificate for 127.0.0.1 it signed: (ca.pem, node.pem, node.key).
pub(super) fn make_certificates(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(dir, &[&["req", "-x509"][..], &ec, &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=bench-ca"]].concat())?;
    openssl(dir, &[&["req"][..], &ec, &["-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=node"]].concat())?;
    std::fs::write(dir.join("node.ext"), "subjectAltName=IP:127.0.0.1\n")?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "node.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "node.pem",
            "-days",
            "2",
            "-extfile",
            "node.ext",
        ],
    )?;
    Ok((dir.join("ca.pem"), dir.join("node.pem"), dir.join("node.key")))
}

pub(super) async fn start(name: &'static str, dir: &Path, auth: bool, certificates: Option<&(PathBuf, PathBuf, PathBuf)>) -> anyhow::Result<Target> {
    let data = dir.join(name);
    let token_file = data.join("admin.token");
    let mut args: Vec<String> = ["serve", "--listen", "127.0.0.1:0", "--namespace", "default:16", "--data-dir"].map(String::from).to_vec();
    args.push(data.display().to_string());
    if auth {
        args.extend([
            "--auth".into(),
            "--auth-failures-per-minute".into(),
            "0".into(),
            "--admin-token-file".into(),
            token_file.display().to_string(),
        ]);
    }
    if let Some((_, cert, key)) = certificates {
        args.extend(["--tls-cert-file".into(), cert.display().to_string(), "--tls-key-file".into(), key.display().to_string()]);
    }
    let (child, address) = spawn_listening(crate::paths::tern(), &args.iter().map(String::as_str).collect::<Vec<_>>()).await?;
    let scheme = if certificates.is_some() { "https" } else { "http" };
    let tls = certificates.map(|(ca, _, _)| load::tls_trusting(ca)).transpose()?;
    let mut client = reqwest::Client::builder();
    if let Some((ca, _, _)) = certificates {
        client = client.add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?);
    }
    let client = client.build()?;
    let base = format!("{scheme}://{address}");
    wait_ready(&client, &base).await?;
    // An API key with read and write on the namespace, as an application would hold.
    let root = if auth { Some(std::fs::read_to_string(&token_file)?.trim().to_string()) } else { None };
    let authorization = if let Some(root) = &root {
        let created: serde_json::Value = client
            .post(format!("{base}/v1/tokens"))
            .bearer_auth(root)
            .json(&json!({"ns": "default", "prefix": "", "verbs": ["read", "write"]}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Some(format!("Bearer {}", created["token"].as_str().unwrap_or_default()))
    } else {
        None
    };
    Ok(Target { name, child, url: base.parse()?, authorization, tls, client, root })
}

async fn wait_ready(client: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if client.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{base} did not become ready");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The stores' flush interval (1 s) and its fsyncs, after catching up.
pub(super) const SETTLE_AFTER_CAUGHT_UP: std::time::Duration = std::time::Duration::from_secs(3);

pub(crate) async fn run(args: SecurityBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-security-").tempdir()?;
    let certificates = make_certificates(scratch.path())?;
    let mut targets = vec![
        start("plain", scratch.path(), false, None).await?,
        start("auth", scratch.path(), true, None).await?,
        start("tls", scratch.path(), false, Some(&certificates)).await?,
        start("auth+tls", scratch.path(), true, Some(&certificates)).await?,
    ];
    let ns = "default".to_string();
    for target in &targets {
        eprintln!("preloading {} keys into {} ({})", args.load.keys, target.name, target.url);
        load::preload_tern_as(&target.url, &ns, args.load.keys, args.load.value_bytes, 64, target.authorization.clone(), target.tls.clone()).await?;
    }
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let mut rounds: Vec<Vec<BenchResult>> = Vec::new();
    for target in &targets {
        settle(target).await?;
    }
    tokio::time::sleep(SETTLE_AFTER_CAUGHT_UP).await;
    for round in 1..=args.rounds.max(1) {
        // Each round starts at another configuration, so none is always measured first.
        let order: Vec<usize> = (0..targets.len()).map(|i| (i + round - 1) % targets.len()).collect();
        eprintln!("round {round}/{}: GET, then PUT, starting at {}", args.rounds, targets[order[0]].name);
        let mut results: Vec<Option<BenchResult>> = vec![None; 2 * targets.len()];
        for (v, (verb, operation)) in
            [("GET", Operation::TernGet { ns: ns.clone() }), ("PUT", Operation::TernPut { ns: ns.clone() })].into_iter().enumerate()
        {
            for &i in &order {
                let target = &targets[i];
                let mut spec = closed.spec(&format!("tern {verb} ({})", target.name), operation.clone());
                spec.authorization = target.authorization.clone();
                spec.tls = target.tls.clone();
                results[v * targets.len() + i] = Some(load::run(&target.url, &spec).await?);
                if verb == "PUT" {
                    settle(target).await?;
                    tokio::time::sleep(SETTLE_AFTER_CAUGHT_UP).await;
                }
            }
        }
        rounds.push(results.into_iter().map(|r| r.expect("every configuration measured")).collect());
    }
    let results: Vec<BenchResult> = (0..rounds[0].len()).map(|i| median(rounds.iter().map(|r| r[i].clone()).collect())).collect();
    for target in &mut targets {
        let _ = target.child.start_kill();
        let _ = target.child.wait().await;
    }
    let rps = |name: &str| results.iter().find(|r| r.name == name).map(|r| r.throughput_per_s);
    let ratio = |a: &str, b: &str| rps(a).zip(rps(b)).map(|(a, b)| (a / b * 1000.0).round() / 1000.0);
    let ratios = json!({
        "get_auth_vs_plain": ratio("tern GET (auth)", "tern GET (plain)"),
        "get_tls_vs_plain": ratio("tern GET (tls)", "tern GET (plain)"),
        "get_auth_tls_vs_plain": ratio("tern GET (auth+tls)", "tern GET (plain)"),
        "put_auth_vs_plain": ratio("tern PUT (auth)", "tern PUT (plain)"),
        "put_tls_vs_plain": ratio("tern PUT (tls)", "tern PUT (plain)"),
        "targets": {"get_auth_vs_plain_min": 0.95, "get_tls_vs_plain_min": 0.60},
    });
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "keys": args.load.keys,
        "value_bytes": args.load.value_bytes,
        "results": results,
        "ratios": ratios,
        "rounds": rounds,
    });
    std::fs::write(args.out.join("security.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = markdown(&results);
    md.push_str(&format!("\n{}\n", serde_json::to_string_pretty(&ratios)?));
    std::fs::write(args.out.join("security.md"), &md)?;
    print!("{md}");
    Ok(())
}
