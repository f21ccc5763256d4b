//! The `tern` command line: `dev` and `serve` run a node; the client commands
//! (`put`, `get`, `del`, `ls`, `watch`, `ns`, `cluster`, `snapshot`) talk to one over HTTP; `bench` runs the
//! benchmark harness.

mod client;
mod watch;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Settings;

#[derive(Parser)]
#[command(name = "tern", version, about = "Tern: a replicated, realtime key-value database for configuration data")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// One node with the embedded log and a `default` namespace (16 partitions), ready to use.
    Dev(DevArgs),
    /// A node from a config file, flags and TERN_* environment variables.
    Serve(Box<ServeArgs>),
    /// Put a JSON value: `tern put PK [SK] VALUE`.
    Put(client::PutArgs),
    /// Get a record: `tern get PK [SK]`.
    Get(client::GetArgs),
    /// Delete a record: `tern del PK [SK]`.
    Del(client::DelArgs),
    /// List a pk's records in sort-key order.
    Ls(client::LsArgs),
    /// Print changes as they happen: `tern watch [PK] [--prefix P | --sk S] [--from now|snapshot|POSITION]`.
    Watch(watch::WatchArgs),
    /// List, create or describe namespaces.
    Ns(client::NsArgs),
    /// The cluster as one node sees it: nodes, regions, groups, partitions held.
    Cluster(client::ClusterArgs),
    /// Take (`create`) or list (`ls`) partition snapshots.
    Snapshot(client::SnapshotArgs),
    /// Run the benchmark harness (see BENCHMARKS.md).
    Bench(crate::bench::BenchArgs),
}

#[derive(Args)]
pub struct DevArgs {
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: String,
    #[arg(long, default_value = "./tern-data")]
    pub data_dir: PathBuf,
    /// Object store URL for snapshots (default file://<data-dir>/snapshots).
    #[arg(long)]
    pub snapshots: Option<String>,
}

/// Every flag is also `TERN_<NAME>` in the environment and `<name>` in the config file.
#[derive(Args)]
pub struct ServeArgs {
    /// TOML config file; flags and TERN_* variables override its keys.
    #[arg(long, env = "TERN_CONFIG")]
    pub config: Option<PathBuf>,
    #[arg(long, env = "TERN_NODE_ID")]
    pub node_id: Option<String>,
    #[arg(long, env = "TERN_LISTEN")]
    pub listen: Option<String>,
    #[arg(long, env = "TERN_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// `embedded` or kafka://HOST:PORT[,HOST:PORT]
    #[arg(long, env = "TERN_LOG")]
    pub log: Option<String>,
    #[arg(long, env = "TERN_REGION")]
    pub region: Option<String>,
    #[arg(long, env = "TERN_GROUP")]
    pub group: Option<String>,
    #[arg(long, env = "TERN_GOSSIP")]
    pub gossip: Option<String>,
    #[arg(long, env = "TERN_SEEDS", value_delimiter = ',')]
    pub seeds: Option<Vec<String>>,
    #[arg(long, env = "TERN_SNAPSHOTS")]
    pub snapshots: Option<String>,
    #[arg(long, env = "TERN_LOG_RETENTION_CHECK_MS")]
    pub log_retention_check_ms: Option<u64>,
    /// Object store setting KEY=VALUE (repeatable), e.g. aws_endpoint=http://127.0.0.1:9000
    #[arg(long = "snapshot-option", env = "TERN_SNAPSHOT_OPTIONS", value_delimiter = ',')]
    pub snapshot_options: Vec<String>,
    #[arg(long, env = "TERN_SNAPSHOT_WRITER")]
    pub snapshot_writer: Option<bool>,
    #[arg(long, env = "TERN_SNAPSHOT_INTERVAL_MS")]
    pub snapshot_interval_ms: Option<u64>,
    #[arg(long, env = "TERN_SNAPSHOT_ENTRIES")]
    pub snapshot_entries: Option<u64>,
    #[arg(long, env = "TERN_SNAPSHOT_RETAIN")]
    pub snapshot_retain: Option<usize>,
    #[arg(long, env = "TERN_GOSSIP_INTERVAL_MS")]
    pub gossip_interval_ms: Option<u64>,
    #[arg(long, env = "TERN_LOG_SEGMENT_BYTES")]
    pub log_segment_bytes: Option<u64>,
    #[arg(long, env = "TERN_LOG_RETENTION_BYTES")]
    pub log_retention_bytes: Option<u64>,
    #[arg(long, env = "TERN_LOG_RETENTION_MS")]
    pub log_retention_ms: Option<u64>,
    #[arg(long, env = "TERN_STORE_CACHE_BYTES")]
    pub store_cache_bytes: Option<usize>,
    #[arg(long, env = "TERN_STORE_FSYNC_INTERVAL_MS")]
    pub store_fsync_interval_ms: Option<u64>,
    #[arg(long, env = "TERN_APPLY_BATCH_MAX")]
    pub apply_batch_max: Option<usize>,
    #[arg(long, env = "TERN_APPLY_LINGER_MS")]
    pub apply_linger_ms: Option<u64>,
    /// text or json
    #[arg(long, env = "TERN_LOG_FORMAT")]
    pub log_format: Option<String>,
    #[arg(long, env = "TERN_KAFKA_TOPIC_PREFIX")]
    pub kafka_topic_prefix: Option<String>,
    #[arg(long, env = "TERN_KAFKA_REPLICATION_FACTOR")]
    pub kafka_replication_factor: Option<i32>,
    #[arg(long, env = "TERN_KAFKA_MIN_INSYNC_REPLICAS")]
    pub kafka_min_insync_replicas: Option<i32>,
    /// `group` (share partitions with the replica group) or `assign` (hold all)
    #[arg(long, env = "TERN_KAFKA_MEMBERSHIP")]
    pub kafka_membership: Option<String>,
    #[arg(long, env = "TERN_KAFKA_SESSION_TIMEOUT_MS")]
    pub kafka_session_timeout_ms: Option<u64>,
    #[arg(long, env = "TERN_KAFKA_LINGER_MS")]
    pub kafka_linger_ms: Option<u64>,
    #[arg(long, env = "TERN_KAFKA_FETCH_WAIT_MAX_MS")]
    pub kafka_fetch_wait_max_ms: Option<u64>,
    #[arg(long, env = "TERN_KAFKA_FETCH_MIN_BYTES")]
    pub kafka_fetch_min_bytes: Option<usize>,
    #[arg(long, env = "TERN_WATCH_QUEUE_EVENTS_MAX")]
    pub watch_queue_events_max: Option<usize>,
    #[arg(long, env = "TERN_WATCH_QUEUE_BYTES_MAX")]
    pub watch_queue_bytes_max: Option<usize>,
    #[arg(long, env = "TERN_WATCH_PROGRESS_MS")]
    pub watch_progress_ms: Option<u64>,
    #[arg(long, env = "TERN_WATCH_KEEP_ALIVE_MS")]
    pub watch_keep_alive_ms: Option<u64>,
    #[arg(long, env = "TERN_HTTP_IDLE_MS")]
    pub http_idle_ms: Option<u64>,
    #[arg(long, env = "TERN_WATCH_SUBSCRIBERS_MAX")]
    pub watch_subscribers_max: Option<usize>,
    #[arg(long, env = "TERN_WATCH_RING_EVENTS_MAX")]
    pub watch_ring_events_max: Option<usize>,
    #[arg(long, env = "TERN_WATCH_RING_BYTES_MAX")]
    pub watch_ring_bytes_max: Option<usize>,
    /// Create this namespace at start if missing, as NAME:PARTITIONS (repeatable).
    #[arg(long = "namespace", env = "TERN_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
}

impl ServeArgs {
    fn settings(&self) -> anyhow::Result<Settings> {
        let mut s = match &self.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        macro_rules! take {
            ($($field:ident),*) => { $( if let Some(v) = &self.$field { s.$field = v.clone(); } )* };
        }
        take!(node_id, listen, data_dir, log, region, group, seeds, log_segment_bytes, store_cache_bytes);
        take!(store_fsync_interval_ms, apply_batch_max, apply_linger_ms, log_format);
        take!(kafka_topic_prefix, kafka_replication_factor, kafka_min_insync_replicas, kafka_membership);
        take!(kafka_session_timeout_ms, gossip_interval_ms, kafka_linger_ms, kafka_fetch_wait_max_ms, kafka_fetch_min_bytes);
        take!(snapshot_writer, snapshot_interval_ms, snapshot_entries, snapshot_retain, log_retention_check_ms);
        take!(watch_queue_events_max, watch_queue_bytes_max, watch_progress_ms, watch_keep_alive_ms, watch_subscribers_max);
        take!(watch_ring_events_max, watch_ring_bytes_max, http_idle_ms);
        for option in &self.snapshot_options {
            let (key, value) = option
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--snapshot-option takes KEY=VALUE, got {option:?}"))?;
            s.snapshot_options.insert(key.to_string(), value.to_string());
        }
        if self.gossip.is_some() {
            s.gossip = self.gossip.clone();
        }
        if self.snapshots.is_some() {
            s.snapshots = self.snapshots.clone();
        }
        if self.log_retention_bytes.is_some() {
            s.log_retention_bytes = self.log_retention_bytes;
        }
        if self.log_retention_ms.is_some() {
            s.log_retention_ms = self.log_retention_ms;
        }
        Ok(s)
    }

    fn namespaces(&self) -> anyhow::Result<Vec<(String, u32)>> {
        self.namespaces
            .iter()
            .map(|spec| {
                let (name, partitions) = spec
                    .split_once(':')
                    .ok_or_else(|| anyhow::anyhow!("--namespace takes NAME:PARTITIONS, got {spec:?}"))?;
                Ok((name.to_string(), partitions.parse().map_err(|_| anyhow::anyhow!("bad partition count in {spec:?}"))?))
            })
            .collect()
    }
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERN_LOG_LEVEL")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Dev(args) => {
                init_tracing("text");
                let snapshots = match args.snapshots {
                    Some(url) => url,
                    None => {
                        // file://<data-dir>/snapshots: object_store wants an absolute path.
                        std::fs::create_dir_all(&args.data_dir)?;
                        let dir = std::fs::canonicalize(&args.data_dir)?.join("snapshots");
                        format!("file://{}", dir.display())
                    }
                };
                let settings = Settings {
                    listen: args.listen,
                    snapshots: Some(snapshots),
                    data_dir: args.data_dir,
                    ..Settings::default()
                };
                let options = crate::server::Options {
                    ensure_namespaces: vec![("default".to_string(), 16)],
                    banner: "tern dev:",
                };
                crate::server::run(settings, options).await
            }
            Command::Serve(args) => {
                let settings = args.settings()?;
                init_tracing(&settings.log_format);
                let options = crate::server::Options { ensure_namespaces: args.namespaces()?, banner: "tern serve:" };
                crate::server::run(settings, options).await
            }
            Command::Put(args) => client::put(args).await,
            Command::Get(args) => client::get(args).await,
            Command::Del(args) => client::del(args).await,
            Command::Ls(args) => client::ls(args).await,
            Command::Ns(args) => client::ns(args).await,
            Command::Watch(args) => watch::watch(args).await,
            Command::Cluster(args) => client::cluster(args).await,
            Command::Snapshot(args) => client::snapshot(args).await,
            Command::Bench(args) => {
                init_tracing("text");
                crate::bench::run(args).await
            }
        }
    })
}
