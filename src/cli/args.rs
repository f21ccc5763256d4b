//! The command line's shape (clap): the subcommands and the flags of
//! `dev` and `serve` (every other setting comes through `Overrides`).

use super::{batch, client, procedure, token, watch};
use crate::settings::Overrides;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// The client commands' global flags and exit statuses (`exit.rs`), shown by `tern --help`.
const EXIT_STATUSES: &str = "The client commands take --url, --ns, --token, --ca and --json before or after the command \
(or TERN_URL, TERN_NS, TERN_TOKEN, TERN_CA; `tern snapshot` takes --ns after `create`): \
tern --url http://10.0.0.1:7070 get svc/api config\n\n\
Exit status of the client commands: 0 done; 1 any other error; 2 usage; 3 not found (404); \
4 conflict, a condition failed (409, 412); 5 refused, no valid token or grant (401, 403, 429); \
6 unreachable (no connection, or no answer in time).";

#[derive(Parser)]
#[command(name = "tern", version, about = "Tern: a replicated, realtime key-value database for configuration data", after_help = EXIT_STATUSES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// One node with the embedded log and a `default` namespace (16 partitions), ready to use.
    #[command(after_help = "Examples:\n  tern dev\n  tern dev --listen 127.0.0.1:8080 --data-dir /tmp/tern --auth")]
    Dev(DevArgs),
    /// A node from a config file, flags and TERN_* environment variables.
    #[command(
        after_help = "Examples:\n  tern serve --config /etc/tern/tern.toml\n  TERN_LOG=kafka://127.0.0.1:9092 tern serve --node-id n1 --data-dir /var/lib/tern"
    )]
    Serve(Box<ServeArgs>),
    /// Put a JSON value: `tern put PK [SK] VALUE`.
    #[command(
        after_help = "Examples:\n  tern put svc/api config '{\"replicas\": 3}' --wait\n  tern put flags checkout '\"on\"' --if-version 4\n  cat value.json | tern put svc/api config -"
    )]
    #[command(override_usage = "tern put [OPTIONS] <PK> [SK] <VALUE>")]
    Put(client::PutArgs),
    /// Get a record: `tern get PK [SK]`.
    #[command(after_help = "Examples:\n  tern get svc/api config\n  tern get svc/api config --strong --json")]
    Get(client::GetArgs),
    /// Delete a record: `tern del PK [SK]`.
    #[command(after_help = "Examples:\n  tern del svc/api config\n  tern del svc/api config --if-version 4 --wait")]
    Del(client::DelArgs),
    /// List a pk's records in sort-key order (`tern ls PK`), or the whole
    /// namespace in (pk, sk) order (`tern ls [--prefix P]`).
    #[command(after_help = "Examples:\n  tern ls svc/api --prefix con\n  tern ls --prefix svc/ --all")]
    Ls(client::LsArgs),
    /// A record's last versions, newest first, with when and by whom:
    /// `tern history PK [SK]` (the namespace keeps `history_max` of them).
    #[command(after_help = "Examples:\n  tern history svc/api config\n  tern ns create svc --history-max 10   # keep 10 versions per record")]
    History(client::HistoryArgs),
    /// Several records in one read: `tern mget PK SK [PK SK ...]` (`""` for the empty sort key).
    #[command(after_help = "Examples:\n  tern mget svc/api config flags/checkout \"\"\n  tern mget user:1 \"\" user:2 \"\" --strong")]
    Mget(batch::MgetArgs),
    /// An atomic batch of puts and deletes in one partition, from a file or stdin.
    #[command(
        after_help = "Examples:\n  tern batch ops.json --wait\n  printf '%s\\n' '{\"op\":\"put\",\"pk\":\"u1\",\"sk\":\"a\",\"value\":1}' '{\"op\":\"delete\",\"pk\":\"u1\",\"sk\":\"b\"}' | tern batch -"
    )]
    Batch(batch::BatchArgs),
    /// Print changes as they happen: `tern watch [PK] [--prefix P | --sk S] [--from now|snapshot|POSITION]`.
    #[command(after_help = "Examples:\n  tern watch svc/api --from snapshot\n  tern watch --count 10")]
    Watch(watch::WatchArgs),
    /// List, create or describe namespaces.
    Ns(client::NsArgs),
    /// The cluster as one node sees it: nodes, regions, groups, partitions held.
    #[command(after_help = "Example:\n  tern cluster --url http://10.0.0.1:7070")]
    Cluster(client::ClusterArgs),
    /// Take (`create`) or list (`ls`) partition snapshots.
    Snapshot(client::SnapshotArgs),
    /// API keys: `tern token create --ns NS --prefix P --verbs read,write,watch,admin`, `ls`, `revoke ID`.
    Token(token::TokenArgs),
    /// What became of a write: `tern write-status ID` (journaled, applied with its outcome, or unknown).
    #[command(after_help = "Example:\n  tern write-status j0123456789abcdef")]
    WriteStatus(client::WriteStatusArgs),
    /// Procedures: `tern procedure deploy NAME MODULE.wasm`, `ls`, `show NAME`, `rollback NAME VERSION`, `rm NAME`, `outbox P`, `trim P BELOW`.
    Procedure(procedure::ProcedureArgs),
    /// Print a completion script for a shell: `tern completions bash > ~/.local/share/bash-completion/completions/tern`.
    #[command(
        after_help = "Examples:\n  tern completions bash > ~/.local/share/bash-completion/completions/tern\n  tern completions zsh > ~/.zfunc/_tern\n  tern completions fish > ~/.config/fish/completions/tern.fish"
    )]
    Completions(CompletionsArgs),
    /// Verify a stopped node's data directory offline, changing nothing: `tern check DATA_DIR` (exit 1 if damaged; docs/damage.md).
    #[command(after_help = "Example:\n  tern check /var/lib/tern")]
    Check(CheckArgs),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag and argument of every command says what it is, and every
    /// command one runs shows an example (`tern COMMAND --help`).
    #[test]
    fn every_argument_has_help_and_every_command_an_example() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for argument in command.get_arguments() {
                let id = argument.get_id().as_str();
                if id != "help" && id != "version" && argument.get_help().is_none() {
                    missing.push(format!("{path}: argument {id} has no help"));
                }
            }
            let leaf = command.get_subcommands().next().is_none();
            if leaf && !command.get_after_help().is_some_and(|h| h.to_string().contains("Example")) {
                missing.push(format!("{path}: no example"));
            }
            for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(format!("{sub_path}: no about"));
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        let cli = super::Cli::command();
        for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(sub, &format!("tern {}", sub.get_name()), &mut missing);
        }
        assert!(missing.is_empty(), "{missing:#?}");
    }
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
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
    /// An origin whose pages may call this node (CORS), e.g. `http://localhost:5173`, or `*`; repeat for more.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origin: Vec<String>,
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
