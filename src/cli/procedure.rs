//! `tern procedure deploy|ls|show|rollback|rm`: procedures over
//! `/v1/ns/{ns}/procedures`; `tern procedure outbox|trim`: a partition's
//! outbox over `/v1/ns/{ns}/outbox` (docs/procedures.md).
//!
//! `deploy NAME MODULE.wasm` reads the module, base64-encodes it into a
//! definition with the flags' bounds and params, and prints the version.

use std::path::PathBuf;

use base64::Engine as _;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::{print, send, Common};

#[derive(Args)]
pub struct ProcedureArgs {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: ProcedureCommand,
}

#[derive(Subcommand)]
enum ProcedureCommand {
    /// Deploy a WebAssembly module as procedure NAME of the namespace (a new version).
    #[command(
        after_help = "Example:\n  tern procedure deploy aggregate build/aggdemo.wasm --params '{\"staleness_ms\": 60000}' --output aggregated=sessions"
    )]
    Deploy {
        /// The procedure's name in the namespace.
        name: String,
        /// The .wasm file.
        module: PathBuf,
        /// The procedure's params: a JSON object.
        #[arg(long, default_value = "{}")]
        params: String,
        /// Fuel (WebAssembly instructions) per call.
        #[arg(long)]
        fuel_per_record: Option<u64>,
        /// Bound on the module's linear memory, bytes.
        #[arg(long)]
        memory_bytes: Option<u64>,
        /// OUTPUT=TOPIC: where an output goes (default `<ns>.<output>`); repeatable.
        #[arg(long = "output", value_parser = parse_output)]
        outputs: Vec<(String, String)>,
        /// Where records the procedure fails on go (default `<ns>.<name>.dead`).
        #[arg(long)]
        dead_letter_topic: Option<String>,
    },
    /// The active procedures of the namespace.
    #[command(after_help = "Example:\n  tern procedure ls --ns orders")]
    Ls,
    /// One procedure and its kept versions.
    #[command(after_help = "Example:\n  tern procedure show aggregate")]
    Show {
        /// The procedure's name.
        name: String,
    },
    /// Deploy kept version VERSION of NAME again (as a new version).
    #[command(after_help = "Example:\n  tern procedure rollback aggregate 3")]
    Rollback {
        /// The procedure's name.
        name: String,
        /// A kept version (`tern procedure show NAME`).
        version: u64,
    },
    /// Remove procedure NAME: from its new version on, no code runs.
    #[command(after_help = "Example:\n  tern procedure rm aggregate")]
    Rm {
        /// The procedure's name.
        name: String,
    },
    /// Partition PARTITION's outbox: what its procedures emitted, oldest first.
    #[command(after_help = "Example:\n  tern procedure outbox 3 --limit 10")]
    Outbox {
        /// The partition.
        partition: u32,
        /// Only messages after this id's OFFSET.INDEX (a page's `next_after`).
        #[arg(long)]
        after: Option<String>,
        /// At most this many messages (1 to 1,000).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Trim partition PARTITION's outbox below input offset BELOW: the
    /// messages you took (where no publisher relays it: the embedded log).
    #[command(after_help = "Example:\n  tern procedure trim 3 120")]
    Trim {
        /// The partition.
        partition: u32,
        /// Messages of input offsets below this go.
        below: u64,
    },
}

fn parse_output(text: &str) -> Result<(String, String), String> {
    let (output, topic) = text.split_once('=').ok_or_else(|| format!("OUTPUT=TOPIC, got {text:?}"))?;
    Ok((output.to_string(), topic.to_string()))
}

pub(super) async fn procedure(a: ProcedureArgs) -> anyhow::Result<()> {
    let client = a.common.client()?;
    let base = format!("{}/v1/ns/{}/procedures", a.common.url.trim_end_matches('/'), a.common.ns);
    let outbox = format!("{}/v1/ns/{}/outbox", a.common.url.trim_end_matches('/'), a.common.ns);
    match a.command {
        ProcedureCommand::Deploy { name, module, params, fuel_per_record, memory_bytes, outputs, dead_letter_topic } => {
            let bytes = std::fs::read(&module).map_err(|e| anyhow::anyhow!("reading {}: {e}", module.display()))?;
            let params: Value = serde_json::from_str(&params).map_err(|e| anyhow::anyhow!("--params is not JSON: {e}"))?;
            let mut definition = json!({
                "runtime": "wasm",
                "module": base64::engine::general_purpose::STANDARD.encode(bytes),
                "params": params,
                "outputs": outputs.into_iter().map(|(o, t)| (o, Value::String(t))).collect::<serde_json::Map<String, Value>>(),
            });
            if let Some(fuel) = fuel_per_record {
                definition["fuel_per_record"] = json!(fuel);
            }
            if let Some(memory) = memory_bytes {
                definition["memory_bytes"] = json!(memory);
            }
            if let Some(topic) = dead_letter_topic {
                definition["dead_letter_topic"] = json!(topic);
            }
            let body = send(client.put(format!("{base}/{name}")).json(&definition)).await?;
            print(&a.common, &body, |b| println!("deployed  {name}  version {}", b["version"]));
        }
        ProcedureCommand::Ls => {
            let body = send(client.get(&base)).await?;
            print(&a.common, &body, |b| {
                println!("{:<24} {:>12} {:>12} {:>14}  MODULE", "NAME", "VERSION", "FUEL", "MEMORY");
                for p in b["procedures"].as_array().into_iter().flatten() {
                    println!(
                        "{:<24} {:>12} {:>12} {:>14}  {} bytes, blake3 {:.16}",
                        p["name"].as_str().unwrap_or(""),
                        p["version"],
                        p["fuel_per_record"],
                        p["memory_bytes"],
                        p["module_bytes"],
                        p["module_blake3"].as_str().unwrap_or("")
                    );
                }
            });
        }
        ProcedureCommand::Show { name } => {
            let body = send(client.get(format!("{base}/{name}"))).await?;
            print(&a.common, &body, |b| {
                let state = if b["removed"] == true { "removed" } else { "active" };
                println!("{name}  version {}  {state}", b["version"]);
                println!("{:>12}  {:>10}  MODULE", "VERSION", "BYTES");
                for v in b["versions"].as_array().into_iter().flatten() {
                    let removed = if v["summary"]["removed"] == true { "  (removal)" } else { "" };
                    println!(
                        "{:>12}  {:>10}  blake3 {:.16}{removed}",
                        v["version"],
                        v["summary"]["module_bytes"],
                        v["summary"]["module_blake3"].as_str().unwrap_or("")
                    );
                }
            });
        }
        ProcedureCommand::Rollback { name, version } => {
            let body = send(client.put(format!("{base}/{name}")).json(&json!({ "from_version": version }))).await?;
            print(&a.common, &body, |b| println!("deployed  {name}  version {} (the definition of version {version})", b["version"]));
        }
        ProcedureCommand::Rm { name } => {
            let body = send(client.delete(format!("{base}/{name}"))).await?;
            print(&a.common, &body, |b| println!("removed  {name}  version {}", b["version"]));
        }
        ProcedureCommand::Outbox { partition, after, limit } => {
            let mut query = vec![("partition", partition.to_string())];
            query.extend(after.map(|a| ("after", a)));
            query.extend(limit.map(|l| ("limit", l.to_string())));
            let body = send(client.get(outbox).query(&query)).await?;
            print(&a.common, &body, |b| {
                println!("{:<24} {:<24} {:<24}  VALUE", "ID", "PROCEDURE", "TOPIC");
                for m in b["messages"].as_array().into_iter().flatten() {
                    let value = m["value"].as_str().unwrap_or("(unreadable)");
                    println!(
                        "{:<24} {:<24} {:<24}  {value}",
                        m["id"].as_str().unwrap_or(""),
                        m["procedure"].as_str().unwrap_or(""),
                        m["topic"].as_str().unwrap_or("")
                    );
                }
                if let Some(next) = b["next_after"].as_str() {
                    println!("next page: --after {next}");
                }
            });
        }
        ProcedureCommand::Trim { partition, below } => {
            let query = [("partition", partition.to_string()), ("below", below.to_string())];
            let body = send(client.delete(outbox).query(&query)).await?;
            print(&a.common, &body, |b| {
                let more = if b["done"] == true { "" } else { " (more remains below: run it again)" };
                println!("trimmed  partition {partition}  below offset {below}{more}");
            });
        }
    }
    Ok(())
}
