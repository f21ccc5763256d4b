//! `tern token create|ls|revoke`: API keys over `/v1/tokens` (docs/security.md).
//!
//! `create` prints the new token alone on one line (scripts capture it:
//! `TOKEN=$(tern token create --ns app --prefix '' --verbs read)`); it is
//! shown once and never stored in the clear.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::{print, send, Common};

#[derive(Args)]
pub struct TokenArgs {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a token with one grant: `--ns NS --prefix PREFIX --verbs read,write,watch,admin`
    /// (`--ns '*'`: every namespace). Prints the token alone.
    #[command(
        after_help = "Examples:\n  tern token create --ns app --prefix users/ --verbs read,watch --description 'web frontend'\n  tern token create --ns '*' --verbs read"
    )]
    Create {
        /// pk prefix the grant covers (empty: every pk).
        #[arg(long, default_value = "")]
        prefix: String,
        /// Comma-separated: read, write, watch, admin.
        #[arg(long, value_delimiter = ',', required = true)]
        verbs: Vec<String>,
        /// A note kept with the token (who it is for).
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List the tokens you administer (ids and grants; never secrets).
    #[command(after_help = "Example:\n  tern token ls")]
    Ls,
    /// Revoke a token by id: refused on every node within seconds.
    #[command(after_help = "Example:\n  tern token revoke 0123456789abcdef")]
    Revoke {
        /// The token's id (`tern token ls`).
        id: String,
    },
}

pub(super) async fn token(a: TokenArgs) -> anyhow::Result<()> {
    let client = a.common.client()?;
    let base = format!("{}/v1/tokens", a.common.url.trim_end_matches('/'));
    match a.command {
        TokenCommand::Create { prefix, verbs, description } => {
            let body = json!({ "ns": a.common.ns, "prefix": prefix, "verbs": verbs, "description": description });
            let answer = send(client.post(&base).json(&body)).await?;
            print(&a.common, &answer, |b| println!("{}", b["token"].as_str().unwrap_or_default()));
        }
        TokenCommand::Ls => {
            let answer = send(client.get(&base)).await?;
            print(&a.common, &answer, |b| {
                for token in b["tokens"].as_array().map(Vec::as_slice).unwrap_or_default() {
                    println!(
                        "{}  {}  {}",
                        token["id"].as_str().unwrap_or(""),
                        grants_text(&token["grants"]),
                        token["description"].as_str().unwrap_or("")
                    );
                }
            });
        }
        TokenCommand::Revoke { id } => {
            let answer = send(client.delete(format!("{base}/{id}"))).await?;
            print(&a.common, &answer, |_| println!("revoked {id}"));
        }
    }
    Ok(())
}

fn grants_text(grants: &Value) -> String {
    let one = |g: &Value| {
        let verbs: Vec<&str> = g["verbs"].as_array().map(|v| v.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        format!("ns={} prefix={:?} verbs={}", g["ns"].as_str().unwrap_or(""), g["prefix"].as_str().unwrap_or(""), verbs.join(","))
    };
    grants.as_array().map(|g| g.iter().map(one).collect::<Vec<_>>().join("; ")).unwrap_or_default()
}
