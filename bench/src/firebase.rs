//! `tern-bench firebase`: Tern's Firebase REST API next to Tern's own
//! `/v1` API and the hello ceiling, in one run on this machine.
//!
//! 1. **A small node.** The same 10,000 keys and 100-byte values are
//!    loaded into `/v1` (pk = key) and into the Firebase tree (`/bench/{key}`),
//!    then `--rounds` rounds of: hello GET, `/v1` GET, Firebase GET
//!    (`/bench/{key}.json`), closed loop, each in turn, and each one's
//!    median-throughput round is reported, with Firebase's throughput as a
//!    share of `/v1`'s.
//! 2. **A 10 MB tree.** `--tree-users` users of about `--tree-user-bytes`
//!    each (five leaves and two tags), written with `PATCH`es of at most
//!    `--tree-write-bytes` (Firebase's and Tern's limit is 4 MiB), then
//!    read whole, shallow, one child (each `--tree-reads` times, the median
//!    reported), and through two queries: the first (which builds the
//!    location's index), the median of the next `--tree-reads`, and one
//!    after a write to one child (the index kept current); then the tree deleted
//!    with one `DELETE`. Peer in the same run: the same users as
//!    `/v1` records under one pk, written in batches of 1,000 and read back
//!    with list pages of 1,000. The server's resident and peak memory are
//!    recorded after each phase (the tree's removal and reads are bounded
//!    by `store::tree` and `apply::tree`, not by the tree's size).
//!
//! Streaming (put → event at 1,000 and 10,000 listeners) is `tern-bench
//! watch --runs fb-sse,fb-sse-h2,…`, beside Tern's own SSE.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};

use super::load::{self, Operation};
use super::report::{markdown, BenchResult};
use super::suite::spawn_listening;
use super::LoadArgs;

#[derive(Args)]
pub(crate) struct FirebaseBenchArgs {
    /// Directory for firebase.json and firebase.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Rounds of the small-node GETs (each peer in turn; the median round is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Users in the large tree.
    #[arg(long, default_value_t = 10_000)]
    tree_users: usize,
    /// Bytes of each user's JSON (about).
    #[arg(long, default_value_t = 1_000)]
    tree_user_bytes: usize,
    /// Largest body of one tree write (Tern's and Firebase's limit: 4 MiB).
    #[arg(long, default_value_t = 3 * 1024 * 1024)]
    tree_write_bytes: usize,
    /// Times each tree read is repeated.
    #[arg(long, default_value_t = 5)]
    tree_reads: usize,
    #[command(flatten)]
    load: LoadArgs,
}

/// The Firebase database (a Tern namespace, `tern dev` creates it on first use).
const DB: &str = "default";
/// Rules of the measured database: open, as the emulator's, with the index
/// the child query needs.
const RULES: &str = r#"{"rules": {".read": true, ".write": true, "big": {"users": {".indexOn": ["score"]}}}}"#;
/// Values loaded per preload `PATCH` of the small-node keys.
const PRELOAD_CHILDREN_PER_WRITE: u64 = 1_000;
/// `/v1` ops per batch of the tree's peer (Tern's limit).
const BATCH_OPS_MAX: usize = 1_000;
/// `/v1` records per list page (Tern's limit).
const LIST_PAGE_MAX: usize = 1_000;

#[derive(Debug, Serialize)]
struct TreeRow {
    what: String,
    requests: usize,
    bytes: u64,
    /// Median over the repetitions (writes: the whole sequence, once).
    ms: f64,
    mb_per_s: f64,
    server_rss_mib: f64,
    server_peak_rss_mib: f64,
}

pub(crate) async fn run(args: FirebaseBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-firebase-").tempdir()?;
    let data_dir = scratch.path().join("tern");
    let (mut tern, tern_addr) =
        spawn_listening(crate::paths::tern(), &["dev", "--listen", "127.0.0.1:0", "--data-dir", data_dir.to_str().unwrap()]).await?;
    let (mut hello, hello_addr) = spawn_listening(crate::paths::harness(), &["hello", "--listen", "127.0.0.1:0"]).await?;
    let pid = tern.id().ok_or_else(|| anyhow::anyhow!("tern exited"))?;
    let base = format!("http://{tern_addr}");
    let client = reqwest::Client::new();
    eprintln!("tern {tern_addr}  hello {hello_addr}");
    client.put(format!("{base}/.settings/rules.json?ns={DB}")).bearer_auth("owner").body(RULES).send().await?.error_for_status()?;

    eprintln!("preloading {} keys of {} bytes into /v1 and the Firebase tree", args.load.keys, args.load.value_bytes);
    let tern_url: hyper::Uri = base.parse()?;
    load::preload_tern(&tern_url, DB, args.load.keys, args.load.value_bytes, 64).await?;
    preload_tree(&client, &base, args.load.keys, args.load.value_bytes).await?;
    let gets = small_node_gets(&args, &tern_url, &format!("http://{hello_addr}").parse()?).await?;

    eprintln!("the large tree: {} users of ~{} bytes", args.tree_users, args.tree_user_bytes);
    let mut tree = Vec::new();
    tree_firebase(&args, &client, &base, pid, &mut tree).await?;
    tree_v1(&args, &client, &base, pid, &mut tree).await?;

    for child in [&mut tern, &mut hello] {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let ratio = |name: &str| gets.iter().find(|r| r.name.starts_with(name)).map(|r| r.throughput_per_s);
    let ratios = json!({
        "firebase_get_vs_v1_get": ratio("firebase GET").zip(ratio("tern /v1 GET")).map(|(f, v)| (f / v * 100.0).round() / 100.0),
        "firebase_get_vs_hello": ratio("firebase GET").zip(ratio("hello GET")).map(|(f, h)| (f / h * 100.0).round() / 100.0),
    });
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "keys": args.load.keys,
        "value_bytes": args.load.value_bytes,
        "gets": gets,
        "ratios": ratios,
        "tree": tree,
    });
    std::fs::write(args.out.join("firebase.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut md = markdown(&gets);
    md.push_str(&format!("\n{}\n\n", serde_json::to_string_pretty(&ratios)?));
    md.push_str(&tree_markdown(&tree));
    std::fs::write(args.out.join("firebase.md"), &md)?;
    print!("{md}");
    Ok(())
}

/// Loads `/bench/{key}` = the same value `/v1` holds for `key`, with
/// `PATCH`es of `PRELOAD_CHILDREN_PER_WRITE` children.
async fn preload_tree(client: &reqwest::Client, base: &str, keys: u64, value_bytes: usize) -> anyhow::Result<()> {
    let value: Value = serde_json::from_slice(&load::value_of(value_bytes))?;
    let mut key = 0;
    while key < keys {
        let end = (key + PRELOAD_CHILDREN_PER_WRITE).min(keys);
        let children: serde_json::Map<String, Value> = (key..end).map(|k| (load::key_name(k), value.clone())).collect();
        client.patch(format!("{base}/bench.json?ns={DB}&print=silent")).json(&children).send().await?.error_for_status()?;
        key = end;
    }
    Ok(())
}

/// hello, `/v1` GET and Firebase GET, `--rounds` rounds, each one's
/// median-throughput round.
async fn small_node_gets(args: &FirebaseBenchArgs, tern: &hyper::Uri, hello: &hyper::Uri) -> anyhow::Result<Vec<BenchResult>> {
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let mut rounds: Vec<Vec<BenchResult>> = Vec::new();
    for round in 1..=args.rounds.max(1) {
        eprintln!("round {round}/{}: hello GET, tern /v1 GET, firebase GET", args.rounds);
        rounds.push(vec![
            load::run(hello, &closed.spec("hello GET (axum ceiling)", Operation::Hello)).await?,
            load::run(tern, &closed.spec("tern /v1 GET", Operation::TernGet { ns: DB.into() })).await?,
            load::run(tern, &closed.spec("firebase GET /bench/{key}.json", Operation::FirebaseGet { ns: DB.into() })).await?,
        ]);
    }
    Ok((0..rounds[0].len()).map(|i| super::suite::median(rounds.iter().map(|r| r[i].clone()).collect())).collect())
}

/// User `i` of the large tree: about `bytes` of JSON in five leaves and two tags.
fn user(i: usize, bytes: usize) -> Value {
    let name = format!("user {i}");
    let bio = "b".repeat(bytes.saturating_sub(160));
    json!({
        "name": name,
        "email": format!("user{i}@example.com"),
        "score": (i * 7919) % 100_000,
        "joined": 1_700_000_000_000u64 + i as u64,
        "bio": bio,
        "tags": {"beta": i % 2 == 0, "admin": i % 100 == 0},
    })
}

fn user_key(i: usize) -> String {
    format!("user-{i:08}")
}

/// The users as bodies of at most `limit` bytes each: `{key: user, ...}`.
fn tree_writes(users: usize, user_bytes: usize, limit: usize) -> Vec<String> {
    let mut writes = Vec::new();
    let mut body = String::from("{");
    for i in 0..users {
        let entry = format!("{}:{}", serde_json::to_string(&user_key(i)).expect("a string"), user(i, user_bytes));
        if body.len() + entry.len() + 2 > limit && body.len() > 1 {
            body.push('}');
            writes.push(std::mem::replace(&mut body, String::from("{")));
        }
        if body.len() > 1 {
            body.push(',');
        }
        body.push_str(&entry);
    }
    body.push('}');
    writes.push(body);
    writes
}

async fn tree_firebase(args: &FirebaseBenchArgs, client: &reqwest::Client, base: &str, pid: u32, rows: &mut Vec<TreeRow>) -> anyhow::Result<()> {
    let writes = tree_writes(args.tree_users, args.tree_user_bytes, args.tree_write_bytes);
    let bytes: u64 = writes.iter().map(|w| w.len() as u64).sum();
    let started = Instant::now();
    for body in &writes {
        let url = format!("{base}/big/users.json?ns={DB}&print=silent");
        client.patch(url).body(body.clone()).send().await?.error_for_status()?;
    }
    rows.push(row(
        format!("firebase: write the tree (PATCH /big/users, ≤ {} B each)", args.tree_write_bytes),
        writes.len(),
        bytes,
        started.elapsed(),
        pid,
    )?);

    let middle = user_key(args.tree_users / 2);
    let reads = [
        ("firebase: read the whole tree (GET /big)", "/big.json".to_string()),
        ("firebase: shallow read of the users (GET /big/users?shallow=true)", "/big/users.json?shallow=true".to_string()),
        ("firebase: one user (GET /big/users/{key})", format!("/big/users/{middle}.json")),
    ];
    for (what, path) in reads {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = format!("{base}{path}{sep}ns={DB}");
        let (elapsed, read_bytes) = median_read(client, &url, args.tree_reads).await?;
        rows.push(row(what.to_string(), 1, read_bytes, elapsed, pid)?);
    }
    // Queries: the first builds the location's index (one read of it all);
    // the next ones walk it; after a write to one child, the next query
    // brings the index up to date by re-reading that child.
    let queries = [
        (
            "10 users by key from the middle (orderBy $key, startAt, limitToFirst)",
            format!("/big/users.json?orderBy=%22$key%22&startAt=%22{middle}%22&limitToFirst=10"),
        ),
        ("top 10 users by score (orderBy score with .indexOn, limitToLast)", "/big/users.json?orderBy=%22score%22&limitToLast=10".to_string()),
    ];
    for (i, (what, path)) in queries.into_iter().enumerate() {
        let url = format!("{base}{path}&ns={DB}");
        let (first, read_bytes) = median_read(client, &url, 1).await?;
        rows.push(row(format!("firebase: {what}, first (builds the index)"), 1, read_bytes, first, pid)?);
        let (elapsed, read_bytes) = median_read(client, &url, args.tree_reads).await?;
        rows.push(row(format!("firebase: {what}, again"), 1, read_bytes, elapsed, pid)?);
        let changed = user_key(i * 7 + 1);
        client.put(format!("{base}/big/users/{changed}/score.json?ns={DB}&print=silent")).body("1000000").send().await?.error_for_status()?;
        let (elapsed, read_bytes) = median_read(client, &url, 1).await?;
        rows.push(row(format!("firebase: {what}, after a write to one user"), 1, read_bytes, elapsed, pid)?);
    }
    let started = Instant::now();
    client.delete(format!("{base}/big.json?ns={DB}&print=silent")).send().await?.error_for_status()?;
    rows.push(row("firebase: delete the tree (DELETE /big)".into(), 1, bytes, started.elapsed(), pid)?);
    let left = client.get(format!("{base}/big.json?ns={DB}&shallow=true")).send().await?.text().await?;
    anyhow::ensure!(left == "null", "the tree was not deleted: {left:.100}");
    Ok(())
}

/// The same users as `/v1` records (pk `big`, sk = user key), batches of
/// 1,000 written, list pages of 1,000 read.
async fn tree_v1(args: &FirebaseBenchArgs, client: &reqwest::Client, base: &str, pid: u32, rows: &mut Vec<TreeRow>) -> anyhow::Result<()> {
    let mut bytes = 0u64;
    let mut batches = 0;
    let started = Instant::now();
    for first in (0..args.tree_users).step_by(BATCH_OPS_MAX) {
        let ops: Vec<Value> = (first..(first + BATCH_OPS_MAX).min(args.tree_users))
            .map(|i| json!({"op": "put", "pk": "big", "sk": user_key(i), "value": user(i, args.tree_user_bytes)}))
            .collect();
        let body = serde_json::to_vec(&json!({ "ops": ops }))?;
        bytes += body.len() as u64;
        batches += 1;
        client.post(format!("{base}/v1/ns/{DB}/batch")).body(body).send().await?.error_for_status()?;
    }
    rows.push(row("/v1 peer: write the same users (POST /batch, 1,000 records each)".into(), batches, bytes, started.elapsed(), pid)?);
    let mut times = Vec::new();
    let mut read_bytes = 0;
    let mut pages = 0;
    for _ in 0..args.tree_reads.max(1) {
        let started = Instant::now();
        let (mut cursor, mut total, mut n) = (None::<String>, 0u64, 0);
        loop {
            let mut url = format!("{base}/v1/ns/{DB}/kv/big?limit={LIST_PAGE_MAX}");
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={}", url::form_urlencoded::byte_serialize(c.as_bytes()).collect::<String>()));
            }
            let body = client.get(url).send().await?.error_for_status()?.bytes().await?;
            total += body.len() as u64;
            n += 1;
            let page: Value = serde_json::from_slice(&body)?;
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        times.push(started.elapsed());
        (read_bytes, pages) = (total, n);
    }
    times.sort();
    rows.push(row("/v1 peer: read them back (list pages of 1,000)".into(), pages, read_bytes, times[times.len() / 2], pid)?);
    Ok(())
}

/// Reads `url` `times` times; the median time and the body's size.
async fn median_read(client: &reqwest::Client, url: &str, times: usize) -> anyhow::Result<(Duration, u64)> {
    let mut elapsed = Vec::new();
    let mut bytes = 0;
    for _ in 0..times.max(1) {
        let started = Instant::now();
        let body = client.get(url).send().await?.error_for_status()?.bytes().await?;
        elapsed.push(started.elapsed());
        bytes = body.len() as u64;
        anyhow::ensure!(body.len() > 4, "{url} read nothing: {:?}", String::from_utf8_lossy(&body));
    }
    elapsed.sort();
    Ok((elapsed[elapsed.len() / 2], bytes))
}

fn row(what: String, requests: usize, bytes: u64, elapsed: Duration, pid: u32) -> anyhow::Result<TreeRow> {
    let (rss, peak) = server_memory_mib(pid)?;
    let ms = elapsed.as_secs_f64() * 1000.0;
    let row = TreeRow {
        what,
        requests,
        bytes,
        ms,
        mb_per_s: bytes as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9),
        server_rss_mib: rss,
        server_peak_rss_mib: peak,
    };
    eprintln!("{row:?}");
    Ok(row)
}

/// The server's resident memory now and at its peak (`VmRSS`, `VmHWM`), MiB.
fn server_memory_mib(pid: u32) -> anyhow::Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> anyhow::Result<f64> {
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .ok_or_else(|| anyhow::anyhow!("no {name} for pid {pid}"))?
            .parse()?;
        Ok((kib / 1024.0 * 10.0).round() / 10.0)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

fn tree_markdown(rows: &[TreeRow]) -> String {
    let mut out = String::from(
        "| tree operation | requests | bytes | ms (median) | MB/s | server RSS MiB after | server peak RSS MiB |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
            r.what, r.requests, r.bytes, r.ms, r.mb_per_s, r.server_rss_mib, r.server_peak_rss_mib
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_writes_stay_under_the_limit_and_hold_every_user() {
        let writes = tree_writes(1_000, 1_000, 64 * 1024);
        assert!(writes.len() > 1);
        let mut users = 0;
        for w in &writes {
            assert!(w.len() <= 64 * 1024, "a write of {} bytes", w.len());
            let parsed: serde_json::Map<String, Value> = serde_json::from_str(w).expect("each write is a JSON object");
            users += parsed.len();
        }
        assert_eq!(users, 1_000);
        let one = serde_json::to_string(&user(1, 1_000)).unwrap();
        assert!((900..1_100).contains(&one.len()), "a user is about 1,000 bytes: {}", one.len());
    }
}
