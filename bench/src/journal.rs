//! `tern-bench journal`: a PUT's acknowledgement, sequenced (answered once
//! the log has it) next to journaled (`durability=journaled`: answered once
//! the node's journal has it), on one `tern dev` (the embedded log), in
//! alternating rounds so a noisy moment hits both alike; each one's
//! median-throughput round is reported. Put → visible for journaled writes
//! is `tern-bench watch --runs sse-h2,sse-h2-journaled`.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::load::{self, Operation};
use super::report::{markdown, BenchResult};
use super::suite::spawn_listening;
use super::LoadArgs;

#[derive(Args)]
pub struct JournalBenchArgs {
    /// Directory for journal.json and journal.md.
    #[arg(long, default_value = "bench/results/latest")]
    out: PathBuf,
    /// Rounds (each: sequenced, then journaled).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[command(flatten)]
    load: LoadArgs,
}

pub async fn run(args: JournalBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scratch = tempfile::Builder::new().prefix("tern-bench-journal-").tempdir()?;
    let data_dir = scratch.path().join("tern");
    let (mut tern, addr) = spawn_listening(crate::paths::tern(), &["dev", "--listen", "127.0.0.1:0", "--data-dir", data_dir.to_str().unwrap()]).await?;
    let url: hyper::Uri = format!("http://{addr}").parse()?;
    let closed = LoadArgs { rate: None, ..args.load.clone() };
    let mut rounds: Vec<Vec<BenchResult>> = Vec::new();
    for round in 1..=args.rounds.max(1) {
        eprintln!("round {round}/{}: PUT sequenced, PUT journaled", args.rounds);
        rounds.push(vec![
            load::run(&url, &closed.spec("PUT sequenced (answered once the log has it)", Operation::TernPut { ns: "default".into() })).await?,
            load::run(&url, &closed.spec("PUT journaled (answered once the journal has it)", Operation::TernPutJournaled { ns: "default".into() })).await?,
        ]);
    }
    let results: Vec<BenchResult> = (0..rounds[0].len()).map(|i| super::suite::median(rounds.iter().map(|r| r[i].clone()).collect())).collect();
    let _ = tern.start_kill();
    let _ = tern.wait().await;
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "value_bytes": args.load.value_bytes,
        "results": results,
        "rounds": rounds,
    });
    std::fs::write(args.out.join("journal.json"), serde_json::to_vec_pretty(&report)?)?;
    let md = markdown(&results);
    std::fs::write(args.out.join("journal.md"), &md)?;
    print!("{md}");
    Ok(())
}
