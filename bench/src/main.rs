//! `tern-bench`: Tern's benchmark harness, a program of its own beside the
//! product (the `tern` binary holds no benchmark code). `tern-bench suite`
//! runs every peer in one run on this machine and writes JSON, a Markdown
//! table and a PNG chart; `tern-bench http|etcd` measure one target;
//! `tern-bench hello` is the bare "hello" server on Tern's own HTTP stack
//! (axum + hyper), the local ceiling. `scripts/bench.sh` runs it.
//!
//! Load is closed-loop (each connection sends its next request as soon as
//! the previous answer arrives: maximum throughput) or open-loop (`--rate`:
//! requests are scheduled at a fixed rate and latency is measured from the
//! scheduled time, so a stalled server is not hidden by coordinated omission).

mod aggdemo;
mod cpu;
mod etcd;
mod fanout;
mod firebase;
mod hello;
mod journal;
mod kafka;
mod kafka_put;
mod load;
mod paths;
mod procedures;
mod read_path;
mod rebuild;
mod regions;
mod report;
mod scale;
mod security;
mod snapshot;
mod suite;
mod watch;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use self::load::{LoadSpec, Operation};

/// mimalloc, as in the `tern` binary: the harness's own allocations should
/// not be what limits the load it generates.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "tern-bench", about = "Tern's benchmark harness: Tern next to its peers, measured in one run (see BENCHMARKS.md)")]
struct BenchArgs {
    /// The `tern` binary to measure (default: the one beside this harness).
    #[arg(long, global = true, env = "TERN_BENCH_TERN")]
    tern: Option<PathBuf>,
    /// The Tern repository (its scripts start Kafka and S3; default: the current directory).
    #[arg(long, global = true)]
    repo: Option<PathBuf>,
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Everything, in one run: Tern GET/PUT, the hello server, etcd. Writes results to --out.
    Suite(suite::SuiteArgs),
    /// Tern on Apache Kafka next to Kafka's own tools, in one run.
    Kafka(kafka::KafkaArgs),
    /// Single-record PUT through Kafka against librdkafka alone (its floor), in alternating rounds.
    KafkaPut(kafka_put::KafkaPutBenchArgs),
    /// Three regions through latency-injecting proxies: in-region GET, put → visible elsewhere, throughput, region loss.
    Regions(regions::RegionsArgs),
    /// Snapshot and restore of one large partition, to file:// and a local S3 server.
    Snapshot(snapshot::SnapshotBenchArgs),
    /// What a node costs as its data grows: 1M to 100M records against 10,000, alternating.
    Scale(scale::ScaleBenchArgs),
    /// What a damaged store costs: healthy, fresh and damaged restarts of one partition, alternating.
    Rebuild(rebuild::RebuildBenchArgs),
    /// Put → event latency at many subscribers (SSE, WebSocket, Firebase streaming) next to etcd's watch.
    Watch(watch::WatchBenchArgs),
    /// Tern's Firebase REST API next to `/v1` and hello: a small node's GET, a 10 MB tree.
    Firebase(firebase::FirebaseBenchArgs),
    /// PUT acknowledgement: sequenced next to journaled, in alternating rounds.
    Journal(journal::JournalBenchArgs),
    /// GET and PUT with authentication and TLS next to the same without, in alternating rounds.
    Security(security::SecurityBenchArgs),
    /// GET against the bare hello server, with and without authentication, in alternating rounds.
    ReadPath(read_path::ReadPathBenchArgs),
    /// What a procedure (aggdemo) costs per record inside Tern: the same batched writes with and without it.
    Procedures(procedures::ProceduresBenchArgs),
    /// aggdemo from Kafka to Kafka through Tern (records/s, violations, latency, CPU per record) next to a floor without Tern.
    Aggdemo(aggdemo::AggdemoBenchArgs),
    /// Load one HTTP target.
    Http(HttpArgs),
    /// Serializable gets against etcd 3.
    Etcd(EtcdArgs),
    /// Serve the SSE fan-out floor (raw sockets; for `bench watch --runs sse-floor`).
    #[command(hide = true)]
    FanoutFloor {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Serve the bare hello server.
    Hello {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
}

#[derive(Args, Clone)]
pub struct LoadArgs {
    /// Concurrent connections.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Seconds of measured load (after warm-up).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Seconds of unmeasured warm-up.
    #[arg(long, default_value_t = 2)]
    pub warmup_seconds: u64,
    /// Open-loop rate in requests/s (default: closed loop).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    pub value_bytes: usize,
}

#[derive(Args)]
struct HttpArgs {
    #[arg(long, default_value = "http://127.0.0.1:7070")]
    url: String,
    /// get, put, put-journaled, firebase-get, scale-get or hello.
    #[arg(long, default_value = "get")]
    op: String,
    #[arg(long, default_value = "default")]
    ns: String,
    /// A bearer token to send (a node with authentication on).
    #[arg(long, env = "TERN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A PEM CA to trust for an https:// URL.
    #[arg(long)]
    ca: Option<PathBuf>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Args)]
struct EtcdArgs {
    #[arg(long, default_value = "127.0.0.1:2379")]
    endpoint: String,
    #[command(flatten)]
    load: LoadArgs,
}

impl LoadArgs {
    pub fn spec(&self, name: &str, operation: Operation) -> LoadSpec {
        LoadSpec {
            name: name.to_string(),
            operation,
            connections: self.connections,
            duration: Duration::from_secs(self.seconds),
            warmup: Duration::from_secs(self.warmup_seconds),
            rate_per_s: self.rate,
            keys: self.keys,
            value_bytes: self.value_bytes,
            authorization: None,
            tls: None,
        }
    }
}

fn main() {
    let args = BenchArgs::parse();
    // The library's own logs (the Kafka floor uses Tern's `Log`), as `tern` prints them.
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERN_LOG_LEVEL").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let result = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(anyhow::Error::from).and_then(|runtime| {
        runtime.block_on(async move {
            paths::init(args.tern.clone(), args.repo.clone())?;
            run(args).await
        })
    });
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Resolves on SIGTERM or SIGINT (the hello server and the fan-out floor stop on it).
pub async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler installs");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Suite(args) => suite::run(args).await,
        BenchCommand::Kafka(args) => kafka::run(args).await,
        BenchCommand::KafkaPut(args) => kafka_put::run(args).await,
        BenchCommand::Regions(args) => regions::run(args).await,
        BenchCommand::Snapshot(args) => snapshot::run(args).await,
        BenchCommand::Rebuild(args) => rebuild::run(args).await,
        BenchCommand::Scale(args) => scale::run(args).await,
        BenchCommand::Watch(args) => watch::run(args).await,
        BenchCommand::Firebase(args) => firebase::run(args).await,
        BenchCommand::Journal(args) => journal::run(args).await,
        BenchCommand::Security(args) => security::run(args).await,
        BenchCommand::ReadPath(args) => read_path::run(args).await,
        BenchCommand::Procedures(args) => procedures::run(args).await,
        BenchCommand::Aggdemo(args) => aggdemo::run(args).await,
        BenchCommand::Hello { listen } => hello::serve(&listen).await,
        BenchCommand::FanoutFloor { listen } => fanout::serve(&listen).await,
        BenchCommand::Http(args) => {
            let operation = match args.op.as_str() {
                "get" => Operation::TernGet { ns: args.ns },
                "put" => Operation::TernPut { ns: args.ns },
                "firebase-get" => Operation::FirebaseGet { ns: args.ns },
                "put-journaled" => Operation::TernPutJournaled { ns: args.ns },
                "hello" => Operation::Hello,
                // A node `tern-bench scale` loaded (its keys: `scale::pk`, `scale::sk`; --keys N records).
                "scale-get" => Operation::ScaleGet { ns: args.ns },
                other => anyhow::bail!("--op must be get, put, put-journaled, firebase-get, scale-get or hello, got {other:?}"),
            };
            let url: hyper::Uri = args.url.parse()?;
            let mut spec = args.load.spec(&args.op, operation);
            spec.authorization = args.token.map(|t| format!("Bearer {t}"));
            spec.tls = args.ca.as_deref().map(load::tls_trusting).transpose()?;
            let result = load::run(&url, &spec).await?;
            println!("{}", serde_json::to_string_pretty(&result)?);
            Ok(())
        }
        BenchCommand::Etcd(args) => {
            let result = etcd::run_gets(&args.endpoint, &args.load.spec("etcd get", Operation::Hello)).await?;
            println!("{}", serde_json::to_string_pretty(&result)?);
            Ok(())
        }
    }
}
