//! `tern batch` (an atomic batch of puts and deletes, `POST
//! /v1/ns/{ns}/batch`) and `tern mget PK SK [PK SK ...]` (several records in
//! one read, `POST /v1/ns/{ns}/get`). Keys travel in the body, so any key works
//! (`.` and `..` included).

use clap::Args;
use serde_json::{json, Value};

use super::client::{print, send, shorten, Common};
use super::exit::{CliError, Exit};
use super::table::{cell, Table};

/// The most bytes of a batch read from a file or stdin (the API takes at
/// most 4 MiB of keys and values; JSON around them is more).
const BATCH_INPUT_BYTES_MAX: u64 = 16 * 1024 * 1024;

#[derive(Args)]
pub struct BatchArgs {
    #[command(flatten)]
    common: Common,
    /// A file of ops (`-`: stdin): `{"ops": [...]}`, a JSON array of ops, or
    /// one op per line. An op: `{"op": "put"|"delete", "pk", "sk"?,
    /// "value"?, "if_version"?, "if_absent"?}`.
    file: String,
    /// Return after this node applied the batch.
    #[arg(long)]
    wait: bool,
    /// Apply it at most once, however often it is sent (1-64 visible ASCII characters).
    #[arg(long)]
    idempotency_key: Option<String>,
}

#[derive(Args)]
pub struct MgetArgs {
    #[command(flatten)]
    common: Common,
    /// The records to read, as PK SK pairs (`""` for the empty sort key;
    /// after `--` when a key starts with `-`).
    #[arg(value_names = ["PK", "SK"], num_args = 2.., required = true)]
    keys: Vec<String>,
    /// Read-your-writes: wait until this position is applied.
    #[arg(long)]
    after: Option<String>,
    /// Linearizable reads.
    #[arg(long)]
    strong: bool,
}

/// The ops of a batch file, in any of its three forms.
fn parse_ops(text: &str) -> Result<Vec<Value>, String> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            return match value {
                Value::Array(ops) => Ok(ops),
                Value::Object(mut body) if body.contains_key("ops") => match body.remove("ops") {
                    Some(Value::Array(ops)) => Ok(ops),
                    _ => Err("\"ops\" must be an array of ops".into()),
                },
                // One op alone on the only line.
                op @ Value::Object(_) => Ok(vec![op]),
                _ => Err("a batch is {\"ops\": [...]}, an array of ops, or one op per line".into()),
            };
        }
    }
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| serde_json::from_str::<Value>(line).map_err(|e| format!("line {}: not a JSON op ({e})", i + 1)))
        .collect()
}

fn read_input(file: &str) -> anyhow::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    let read = if file == "-" {
        std::io::stdin().take(BATCH_INPUT_BYTES_MAX + 1).read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(BATCH_INPUT_BYTES_MAX + 1).read_to_string(&mut text))
    };
    read.map_err(|e| usage(format!("cannot read {file}: {e}")))?;
    if text.len() as u64 > BATCH_INPUT_BYTES_MAX {
        return Err(usage(format!("{file} is over {BATCH_INPUT_BYTES_MAX} bytes")).into());
    }
    Ok(text)
}

fn usage(message: String) -> CliError {
    CliError { exit: Exit::Usage, message }
}

pub(super) async fn batch(a: BatchArgs) -> anyhow::Result<()> {
    let ops = parse_ops(&read_input(&a.file)?).map_err(usage)?;
    if ops.is_empty() {
        return Err(usage(format!("{}: no ops", a.file)).into());
    }
    let count = ops.len();
    let mut request = a.common.client()?.post(format!("{}/v1/ns/{}/batch", a.common.url.trim_end_matches('/'), a.common.ns));
    if a.wait {
        request = request.query(&[("wait", "applied")]);
    }
    if let Some(key) = &a.idempotency_key {
        if key.is_empty() || key.len() > crate::limits::WRITE_ID_BYTES_MAX || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(usage(format!("--idempotency-key is 1 to {} visible ASCII characters", crate::limits::WRITE_ID_BYTES_MAX)).into());
        }
        request = request.header("Idempotency-Key", key);
    }
    let body = send(request.json(&json!({ "ops": ops }))).await?;
    print(&a.common, &body, |b| {
        let duplicate = if b["duplicate"] == true { "  (a retry: applied before)" } else { "" };
        println!("ok  {count} ops  version {}  position {}{duplicate}", b["version"], b["position"].as_str().unwrap_or(""));
    });
    Ok(())
}

pub(super) async fn mget(a: MgetArgs) -> anyhow::Result<()> {
    if a.keys.len() % 2 == 1 {
        return Err(
            usage(format!("mget takes PK SK pairs (\"\" for the empty sort key); {:?} has no SK", a.keys.last().expect("one at least"))).into()
        );
    }
    let keys: Vec<(String, String)> = a.keys.chunks(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect();
    let mut request = a.common.client()?.post(format!("{}/v1/ns/{}/get", a.common.url.trim_end_matches('/'), a.common.ns));
    let mut query = Vec::new();
    if let Some(after) = &a.after {
        query.push(("after", after.clone()));
    }
    if a.strong {
        query.push(("consistency", "strong".to_string()));
    }
    request = request.query(&query);
    let body = send(request.json(&json!({ "keys": keys.iter().map(|(pk, sk)| json!({"pk": pk, "sk": sk})).collect::<Vec<_>>() }))).await?;
    print(&a.common, &body, |b| {
        let mut table = Table::new(&["PK", "SK", ">VERSION", "VALUE"]);
        for ((pk, sk), item) in keys.iter().zip(b["items"].as_array().map(Vec::as_slice).unwrap_or_default()) {
            match item {
                Value::Null => table.row(vec![pk.clone(), sk.clone(), "-".into(), "(not found)".into()]),
                record => table.row(vec![pk.clone(), sk.clone(), cell(&record["version"]), shorten(record["value"].to_string(), 60)]),
            }
        }
        table.print();
        eprintln!("position {}", b["position"].as_str().unwrap_or(""));
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_file_is_an_object_an_array_or_one_op_per_line() {
        let op = |pk: &str| json!({"op": "put", "pk": pk, "value": 1});
        assert_eq!(parse_ops(r#"{"ops": [{"op": "put", "pk": "a", "value": 1}]}"#).unwrap(), vec![op("a")]);
        assert_eq!(parse_ops(r#"[{"op": "put", "pk": "a", "value": 1}, {"op": "put", "pk": "b", "value": 1}]"#).unwrap(), vec![op("a"), op("b")]);
        assert_eq!(
            parse_ops("{\"op\": \"put\", \"pk\": \"a\", \"value\": 1}\n\n{\"op\": \"put\", \"pk\": \"b\", \"value\": 1}\n").unwrap(),
            vec![op("a"), op("b")]
        );
        assert_eq!(parse_ops(r#"{"op": "put", "pk": "a", "value": 1}"#).unwrap(), vec![op("a")]);
        assert!(parse_ops("{\"op\": \"put\"}\nnot json").unwrap_err().contains("line 2"));
        assert!(parse_ops(r#"{"ops": 3}"#).unwrap_err().contains("array"));
        assert_eq!(parse_ops("").unwrap(), Vec::<Value>::new());
    }
}
