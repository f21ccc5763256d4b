//! The `tern` command line: `dev` and `serve` run a node; the client commands
//! (`put`, `get`, `del`, `ls`, `watch`, `ns`, `cluster`, `snapshot`) talk to one over HTTP.
//! (The benchmark harness is a program of its own: `tern-bench`, in `bench/`.)

mod client;
mod procedure;
mod token;
mod watch;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::settings::{Overrides, Settings};

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
    /// API keys: `tern token create --ns NS --prefix P --verbs read,write,watch,admin`, `ls`, `revoke ID`.
    Token(token::TokenArgs),
    /// What became of a write: `tern write-status ID` (journaled, applied with its outcome, or unknown).
    WriteStatus(client::WriteStatusArgs),
    /// Procedures: `tern procedure deploy NAME MODULE.wasm`, `ls`, `show NAME`, `rollback NAME VERSION`, `rm NAME`, `outbox P`, `trim P BELOW`.
    Procedure(procedure::ProcedureArgs),
}

#[derive(Args)]
pub struct DevArgs {
    /// HTTP address (default: the `listen` setting's, see docs/settings.md).
    #[arg(long)]
    pub listen: Option<String>,
    /// Where the log and the stores live (default: the `data_dir` setting's).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Object store URL for snapshots (default file://<data-dir>/snapshots).
    #[arg(long)]
    pub snapshots: Option<String>,
    /// Disaster recovery: the log was lost; restore from the snapshots and
    /// continue after them (writes acknowledged after them are lost).
    #[arg(long)]
    pub restore: bool,
    /// Require a token on every request; the admin token is written to
    /// `<data-dir>/admin.token` (mode 0600) at first start (docs/security.md).
    #[arg(long)]
    pub auth: bool,
}

/// A node of a cluster: every setting is a flag, a `TERN_*` variable and a
/// key of the config file (docs/settings.md, generated from `settings.rs`).
#[derive(Args)]
pub struct ServeArgs {
    /// TOML config file; flags and TERN_* variables override its keys.
    #[arg(long, env = "TERN_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: Overrides,
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

/// `tern dev`'s `default` namespace has this many partitions (the spec's).
const DEV_DEFAULT_PARTITIONS: u32 = 16;

pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Dev(args) => {
                init_tracing("text");
                // The defaults, but for what `tern dev` sets itself.
                let mut settings = Settings { namespaces: vec![format!("default:{DEV_DEFAULT_PARTITIONS}")], ..Settings::default() };
                if let Some(listen) = args.listen {
                    settings.listen = listen;
                }
                if let Some(data_dir) = args.data_dir {
                    settings.data_dir = data_dir;
                }
                settings.restore = args.restore;
                settings.auth = args.auth;
                // The Firebase emulator's conventions (docs/firebase.md).
                settings.firebase_owner_token = Some("owner".into());
                settings.firebase_emulator = true;
                // Journaled writes when the log refuses them (docs/api.md).
                settings.ripcord = true;
                // The journal's copy in object storage only where it adds durability: not on the same disk.
                settings.journal_objects = args.snapshots.is_some();
                settings.snapshots = Some(match args.snapshots {
                    Some(url) => url,
                    None => {
                        // file://<data-dir>/snapshots: object_store wants an absolute path.
                        std::fs::create_dir_all(&settings.data_dir)?;
                        let dir = std::fs::canonicalize(&settings.data_dir)?.join("snapshots");
                        format!("file://{}", dir.display())
                    }
                });
                crate::server::run(settings, "tern dev:").await
            }
            Command::Serve(args) => {
                let args = *args;
                let settings = Settings::load(args.config.as_deref(), args.settings)?;
                init_tracing(&settings.log_format);
                crate::server::run(settings, "tern serve:").await
            }
            Command::Put(args) => client::put(args).await,
            Command::Get(args) => client::get(args).await,
            Command::WriteStatus(args) => client::write_status(args).await,
            Command::Del(args) => client::del(args).await,
            Command::Ls(args) => client::ls(args).await,
            Command::Ns(args) => client::ns(args).await,
            Command::Watch(args) => watch::watch(args).await,
            Command::Cluster(args) => client::cluster(args).await,
            Command::Snapshot(args) => client::snapshot(args).await,
            Command::Token(args) => token::token(args).await,
            Command::Procedure(args) => procedure::procedure(args).await,
        }
    })
}
