//! The command line's shape (clap): the subcommands and the flags of
//! `dev` and `serve` (every other setting comes through `Overrides`).

use super::{client, procedure, token, watch};
use crate::settings::Overrides;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

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
    /// List a pk's records in sort-key order (`tern ls PK`), or the whole
    /// namespace in (pk, sk) order (`tern ls [--prefix P]`).
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
    /// Verify a stopped node's data directory offline, changing nothing: `tern check DATA_DIR` (exit 1 if damaged; docs/damage.md).
    Check(CheckArgs),
}

#[derive(Args)]
pub struct CheckArgs {
    /// The node's data directory.
    pub data_dir: PathBuf,
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
    /// `NS/PARTITION@FROM..TO`: go on past exactly these lost log offsets,
    /// as a refusal names them (docs/damage.md); their writes are lost.
    #[arg(long = "accept-loss", value_name = "NS/PARTITION@FROM..TO")]
    pub accept_loss: Vec<String>,
    /// `NS/PARTITION@FROM..TO`: go on past exactly these lost journal
    /// entries, as a refusal names them (docs/damage.md); their writes are lost.
    #[arg(long = "accept-journal-loss", value_name = "NS/PARTITION@FROM..TO")]
    pub accept_journal_loss: Vec<String>,
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
