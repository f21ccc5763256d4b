//! `tern`'s entry: parse the command line, set up logging, and run the
//! command (a node, or a client command over HTTP).

use super::args::{Cli, Command};
use super::{batch, client, procedure, token, watch};
use crate::settings::Settings;
use clap::Parser;

pub(super) fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERN_LOG_LEVEL").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: a log redirected to a file or a journal stays plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// `tern dev`'s `default` namespace has this many partitions (the spec's).
pub(super) const DEV_DEFAULT_PARTITIONS: u32 = 16;

pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse_from(hoist_global_flags(std::env::args_os().collect()));
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
                settings.accept_loss = args.accept_loss;
                settings.accept_journal_loss = args.accept_journal_loss;
                settings.auth = args.auth;
                settings.cors_origins = args.cors_origin;
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
            Command::History(args) => client::history(args).await,
            Command::Mget(args) => batch::mget(args).await,
            Command::Batch(args) => batch::batch(args).await,
            Command::Ns(args) => client::ns(args).await,
            Command::Watch(args) => watch::watch(args).await,
            Command::Cluster(args) => client::cluster(args).await,
            Command::Snapshot(args) => client::snapshot(args).await,
            Command::Token(args) => token::token(args).await,
            Command::Procedure(args) => procedure::procedure(args).await,
            Command::Check(args) => check(&args.data_dir),
            Command::Completions(args) => {
                clap_complete::generate(args.shell, &mut <Cli as clap::CommandFactory>::command(), "tern", &mut std::io::stdout());
                Ok(())
            }
        }
    })
}

/// The client commands' flags that may come before the command, as
/// etcdctl's do (`tern --url U --token T get k`): (flag, takes a value).
const GLOBAL_FLAGS: [(&str, bool); 5] = [("--url", true), ("--ns", true), ("--token", true), ("--ca", true), ("--json", false)];

/// `args` with the global flags given before the command moved to just
/// after it, where each command takes them (its own and its subcommands').
/// Anything else before the command (`--help`, `--version`, a typo) stays
/// where it is, for clap to answer.
fn hoist_global_flags(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut rest = args.into_iter();
    let mut out: Vec<std::ffi::OsString> = rest.next().into_iter().collect();
    let mut hoisted = Vec::new();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy().into_owned();
        let flag = GLOBAL_FLAGS.iter().find(|(name, _)| text == *name || text.starts_with(&format!("{name}=")));
        match flag {
            Some((name, takes_value)) => {
                hoisted.push(arg);
                if *takes_value && text == *name {
                    hoisted.extend(rest.next());
                }
            }
            None => {
                out.push(arg);
                if !text.starts_with('-') {
                    // The command: the flags go right after it.
                    out.append(&mut hoisted);
                }
                break;
            }
        }
    }
    out.append(&mut hoisted);
    out.extend(rest);
    out
}

/// `tern check DATA_DIR`: one line per file looked at, then a summary; exits
/// 1 when anything is damaged.
fn check(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let checked = crate::server::check_data_dir(data_dir)?;
    for finding in &checked.findings {
        let verdict = if finding.damaged { "DAMAGED" } else { "ok" };
        println!("{verdict:<8} {}: {}", finding.path.display(), finding.says);
    }
    let damaged = checked.damaged();
    println!("{} files checked, {damaged} damaged", checked.findings.len());
    if damaged > 0 {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::hoist_global_flags;

    fn hoisted(args: &[&str]) -> Vec<String> {
        let args = args.iter().map(std::ffi::OsString::from).collect();
        hoist_global_flags(args).into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn global_flags_before_the_command_go_after_it() {
        assert_eq!(
            hoisted(&["tern", "--url", "http://h:1", "--token=t", "--json", "get", "k", "s"]),
            ["tern", "get", "--url", "http://h:1", "--token=t", "--json", "k", "s"]
        );
        assert_eq!(hoisted(&["tern", "--ns", "dns", "ns", "show", "dns"]), ["tern", "ns", "--ns", "dns", "show", "dns"]);
        // Nothing to move, or nothing it knows: left as it is.
        assert_eq!(hoisted(&["tern", "get", "k", "--url", "u"]), ["tern", "get", "k", "--url", "u"]);
        assert_eq!(hoisted(&["tern", "--version"]), ["tern", "--version"]);
        assert_eq!(hoisted(&["tern", "--url"]), ["tern", "--url"]);
        assert_eq!(hoisted(&["tern"]), ["tern"]);
    }
}
