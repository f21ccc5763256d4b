//! Client commands: thin wrappers over the HTTP API. Human output by default,
//! the API's JSON with `--json`. Errors print the API's code and message and
//! exit non-zero.

use clap::{Args, Subcommand};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;

use super::exit::{exit_of_status, unreachable, CliError};
use super::table::{cell, Table};

/// Everything but unreserved characters is encoded, so `/` in a key becomes `%2F`.
const KEY_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

#[derive(Args, Clone)]
pub(super) struct Common {
    /// Base URL of a Tern node.
    #[arg(long, env = "TERN_URL", default_value = "http://127.0.0.1:7070", global = true)]
    pub url: String,
    /// Namespace.
    #[arg(long, env = "TERN_NS", default_value = "default", global = true)]
    pub ns: String,
    /// Print the API's JSON instead of human output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Bearer token for a node that requires authentication (`tern dev --auth`: the contents of
    /// `<data-dir>/admin.token`, or a token from `tern token create`).
    #[arg(long, env = "TERN_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// PEM file of the CA to trust for an https:// URL (besides the system's).
    #[arg(long, env = "TERN_CA", global = true)]
    pub ca: Option<std::path::PathBuf>,
}

impl Common {
    /// An HTTP client that sends the token (marked sensitive: never printed)
    /// and trusts `--ca`.
    pub(super) fn client(&self) -> anyhow::Result<reqwest::Client> {
        let mut builder = reqwest::Client::builder();
        if let Some(token) = &self.token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.trim()))
                .map_err(|_| anyhow::anyhow!("--token holds characters a header cannot carry"))?;
            value.set_sensitive(true);
            builder = builder.default_headers([(reqwest::header::AUTHORIZATION, value)].into_iter().collect());
        }
        if let Some(path) = &self.ca {
            let pem = std::fs::read(path).map_err(|e| anyhow::anyhow!("--ca {}: {e}", path.display()))?;
            for certificate in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| anyhow::anyhow!("--ca {}: {e}", path.display()))? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        builder.build().map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))
    }
}

#[derive(Args)]
pub struct PutArgs {
    #[command(flatten)]
    common: Common,
    /// The record's partition key.
    #[arg(value_name = "PK")]
    pk: String,
    /// The sort key; given two arguments (`tern put PK VALUE`), this one is the VALUE and the sort key is empty.
    #[arg(value_name = "SK")]
    sk: String,
    /// JSON (quote strings: '"on"'); `-` reads it from stdin.
    #[arg(value_name = "VALUE")]
    value: Option<String>,
    /// Only if the record is still at this version (else exit 4, condition_failed).
    #[arg(long)]
    if_version: Option<u64>,
    /// Only if the record does not exist (else exit 4, condition_failed).
    #[arg(long)]
    if_absent: bool,
    /// Wait until this node has applied the write.
    #[arg(long)]
    wait: bool,
    /// Answered once this node's journal has it (`durability=journaled`);
    /// prints the write id to ask `tern write-status` about.
    #[arg(long, conflicts_with = "wait")]
    journaled: bool,
}

/// `tern write-status ID`: what became of a write (`GET /v1/writes/{id}`).
#[derive(Args)]
pub struct WriteStatusArgs {
    #[command(flatten)]
    common: Common,
    /// The write id: an Idempotency-Key, or the id a journaled write was answered with.
    id: String,
}

#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    common: Common,
    /// The record's partition key.
    pk: String,
    /// The record's sort key (default: the empty one).
    #[arg(default_value = "")]
    sk: String,
    /// Read-your-writes: wait until this position is applied.
    #[arg(long)]
    after: Option<String>,
    /// Linearizable read.
    #[arg(long)]
    strong: bool,
}

#[derive(Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    common: Common,
    /// The record's partition key.
    pk: String,
    /// The record's sort key (default: the empty one).
    #[arg(default_value = "")]
    sk: String,
    /// At most this many versions (1 to 64; default: all kept).
    #[arg(long)]
    limit: Option<u32>,
}

#[derive(Args)]
pub struct DelArgs {
    #[command(flatten)]
    common: Common,
    /// The record's partition key.
    pk: String,
    /// The record's sort key (default: the empty one).
    #[arg(default_value = "")]
    sk: String,
    /// Only if the record is still at this version (else exit 4, condition_failed).
    #[arg(long)]
    if_version: Option<u64>,
    /// Wait until this node has applied the delete.
    #[arg(long)]
    wait: bool,
}

#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    common: Common,
    /// The pk whose records to list, in sort-key order; without it, every
    /// record of the namespace in (pk, sk) order (`tern ls --prefix user/`).
    pk: Option<String>,
    /// With a pk: the sort-key prefix. Without: the pk prefix.
    #[arg(long)]
    prefix: Option<String>,
    /// With a pk: list from this sort key (inclusive).
    #[arg(long)]
    start: Option<String>,
    /// With a pk: list up to this sort key (exclusive).
    #[arg(long)]
    end: Option<String>,
    /// Records per page (1 to 1000).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// With a pk: in descending sort-key order.
    #[arg(long)]
    reverse: bool,
    /// Only this partition's records; with a pk, read that partition
    /// whatever the pk hashes to (a procedure's records).
    #[arg(long)]
    partition: Option<u32>,
    /// Go on from a page's `next_cursor`.
    #[arg(long)]
    cursor: Option<String>,
    /// Follow cursors until every matching record is listed.
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
pub struct NsArgs {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    action: Option<NsAction>,
}

#[derive(Subcommand)]
enum NsAction {
    /// List namespaces (the default).
    #[command(after_help = "Example:\n  tern ns ls --json")]
    Ls,
    /// Create a namespace (exists already with the same partitions: said, exit 0).
    #[command(after_help = "Examples:\n  tern ns create dns --partitions 8\n  tern ns create orders --source-topic orders")]
    Create {
        /// The namespace's name.
        name: String,
        /// Its partition count, fixed for its life (default 16 for a new
        /// namespace; left out, an existing namespace keeps its own).
        #[arg(long)]
        partitions: Option<u32>,
        /// Read this existing Kafka topic as the namespace's log (its
        /// partition count is the namespace's; `--partitions` is ignored).
        #[arg(long)]
        source_topic: Option<String>,
        /// Keep this many versions of each record (0 to 64; `tern history`);
        /// on an existing namespace, changes it.
        #[arg(long)]
        history_max: Option<u32>,
    },
    /// Show one namespace with per-partition state.
    #[command(after_help = "Example:\n  tern ns show default")]
    Show {
        /// The namespace's name.
        name: String,
    },
    /// Delete a namespace: every record, its log and its snapshots, on
    /// every node, for good. Repeat its name in --confirm.
    #[command(after_help = "Example:\n  tern ns delete scratch --confirm scratch")]
    Delete {
        /// The namespace's name.
        name: String,
        /// The namespace's name again: nothing is deleted unless it matches.
        #[arg(long, value_name = "NAME")]
        confirm: Option<String>,
    },
}

/// Partitions of a namespace `tern ns create` makes without `--partitions`.
const NEW_NAMESPACE_PARTITIONS: u32 = 16;

fn key_url(c: &Common, pk: &str, sk: Option<&str>) -> String {
    let mut url = format!("{}/v1/ns/{}/kv/{}", c.url.trim_end_matches('/'), c.ns, utf8_percent_encode(pk, KEY_SEGMENT));
    if let Some(sk) = sk {
        url.push('/');
        url.push_str(&utf8_percent_encode(sk, KEY_SEGMENT).to_string());
    }
    url
}

/// Sends a request; returns the JSON body of a 2xx, or an error naming the API's code and message.
pub(super) async fn send(request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    let response = request.send().await.map_err(|e| anyhow::Error::new(unreachable(&e)))?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(body);
    }
    Err(refusal(status.as_u16(), &body).into())
}

/// The node's error answer as the CLI says it, with its exit status.
pub(super) fn refusal(status: u16, body: &Value) -> CliError {
    let code = body["error"]["code"].as_str().unwrap_or("http_error");
    let message = body["error"]["message"].as_str().unwrap_or("no message");
    CliError { exit: exit_of_status(status), message: format!("{status} {code}: {message}") }
}

pub(super) fn print(common: &Common, body: &Value, human: impl FnOnce(&Value)) {
    if common.json {
        println!("{}", serde_json::to_string_pretty(body).expect("serializes"));
    } else {
        human(body);
    }
}

/// Whether a key is `.` or `..`: a path segment URL parsing (WHATWG, as
/// reqwest's) resolves away, even as `%2E`; sent in a path, the request
/// would address another record (`("k", ".")` would be `("k", "")`). Such a
/// key travels in a body: a one-op batch, or a multi-get.
fn unaddressable(keys: &[&str]) -> bool {
    keys.iter().any(|key| *key == "." || *key == "..")
}

/// A one-op batch for a key a path cannot carry (`unaddressable`); its
/// conditions are in `op`, `query` holds the batch's own (`wait`, `durability`).
async fn write_as_batch(common: &Common, op: Value, query: &[(&str, String)]) -> anyhow::Result<Value> {
    let query: Vec<_> = query.iter().filter(|(name, _)| !matches!(*name, "if_version" | "if_absent")).collect();
    let url = format!("{}/v1/ns/{}/batch", common.url.trim_end_matches('/'), common.ns);
    send(common.client()?.post(url).query(&query).json(&serde_json::json!({ "ops": [op] }))).await
}

fn parse_value(text: &str) -> anyhow::Result<String> {
    let text = if text == "-" { std::io::read_to_string(std::io::stdin())? } else { text.to_string() };
    serde_json::from_str::<Value>(&text).map_err(|e| anyhow::anyhow!("VALUE must be JSON ({e}); to store a string, quote it: '\"{text}\"'"))?;
    Ok(text)
}

pub(super) async fn put(a: PutArgs) -> anyhow::Result<()> {
    let (pk, sk, value) = match &a.value {
        None => (&a.pk, "", &a.sk),
        Some(value) => (&a.pk, a.sk.as_str(), value),
    };
    let mut query = Vec::new();
    if let Some(v) = a.if_version {
        query.push(("if_version", v.to_string()));
    }
    if a.if_absent {
        query.push(("if_absent", "true".to_string()));
    }
    if a.wait {
        query.push(("wait", "applied".to_string()));
    }
    if a.journaled {
        query.push(("durability", "journaled".to_string()));
    }
    let value = parse_value(value)?;
    let body = if unaddressable(&[pk, sk]) {
        let value: Value = serde_json::from_str(&value).expect("parse_value checked it");
        let op = serde_json::json!({ "op": "put", "pk": pk, "sk": sk, "value": value, "if_version": a.if_version, "if_absent": a.if_absent });
        write_as_batch(&a.common, op, &query).await?
    } else {
        let request = a.common.client()?.put(key_url(&a.common, pk, Some(sk))).query(&query).header("content-type", "application/json").body(value);
        send(request).await?
    };
    print(&a.common, &body, |b| match b["write_id"].as_str() {
        Some(id) => println!("journaled  write id {id}  (tern write-status {id})"),
        None => println!("ok  version {}  position {}", b["version"], b["position"].as_str().unwrap_or("")),
    });
    Ok(())
}

pub(super) async fn write_status(a: WriteStatusArgs) -> anyhow::Result<()> {
    let url = format!("{}/v1/writes/{}", a.common.url.trim_end_matches('/'), utf8_percent_encode(&a.id, KEY_SEGMENT));
    let body = send(a.common.client()?.get(url)).await?;
    print(&a.common, &body, |b| match b["state"].as_str() {
        Some("applied") => println!(
            "applied  {}  version {}  position {}",
            b["outcome"]["result"].as_str().unwrap_or(""),
            b["version"],
            b["position"].as_str().unwrap_or("")
        ),
        Some("journaled") => println!("journaled  (namespace {}, partition {}): not applied yet", b["ns"].as_str().unwrap_or(""), b["partition"]),
        _ => println!("unknown: not in this node's journal, not remembered by a partition it applies"),
    });
    Ok(())
}

pub(super) async fn get(a: GetArgs) -> anyhow::Result<()> {
    let mut query = Vec::new();
    if let Some(after) = &a.after {
        query.push(("after", after.clone()));
    }
    if a.strong {
        query.push(("consistency", "strong".to_string()));
    }
    let Some(body) = read_record(&a.common, &a.pk, &a.sk, &query).await? else {
        let message = format!("404 not_found: no record at pk {:?} sk {:?}", a.pk, a.sk);
        return Err(CliError { exit: super::exit::Exit::NotFound, message }.into());
    };
    print(&a.common, &body, |b| {
        println!("{}", serde_json::to_string_pretty(&b["value"]).expect("serializes"));
        eprintln!("version {}  position {}", b["version"], b["position"].as_str().unwrap_or(""));
    });
    Ok(())
}

pub(super) async fn history(a: HistoryArgs) -> anyhow::Result<()> {
    let mut query = vec![("pk", a.pk.clone()), ("sk", a.sk.clone())];
    if let Some(limit) = a.limit {
        query.push(("limit", limit.to_string()));
    }
    let url = format!("{}/v1/ns/{}/history", a.common.url.trim_end_matches('/'), a.common.ns);
    let body = send(a.common.client()?.get(url).query(&query)).await?;
    print(&a.common, &body, |b| {
        let versions = b["versions"].as_array().map(Vec::as_slice).unwrap_or_default();
        if versions.is_empty() {
            match b["history_max"].as_u64() {
                Some(0) => eprintln!("no history: namespace {} keeps none (tern ns create {} --history-max N)", a.common.ns, a.common.ns),
                _ => eprintln!("no versions of pk {:?} sk {:?} kept", a.pk, a.sk),
            }
            return;
        }
        let mut table = Table::new(&[">VERSION", "OP", "TIME (UTC)", "WRITER", "VALUE"]);
        for v in versions {
            let time = v["time_ms"].as_i64().filter(|t| *t > 0).and_then(chrono::DateTime::from_timestamp_millis);
            let time = time.map_or("-".to_string(), |t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string());
            let writer = v["writer"].as_str().filter(|w| !w.is_empty()).unwrap_or("-").to_string();
            let value = if v["op"] == "delete" { "(deleted)".to_string() } else { shorten(v["value"].to_string(), 60) };
            table.row(vec![cell(&v["version"]), cell(&v["op"]), time, writer, value]);
        }
        table.print();
    });
    Ok(())
}

pub(super) async fn del(a: DelArgs) -> anyhow::Result<()> {
    let mut query = Vec::new();
    if let Some(v) = a.if_version {
        query.push(("if_version", v.to_string()));
    }
    if a.wait {
        query.push(("wait", "applied".to_string()));
    }
    // Say when nothing was there: a delete is answered the same either way.
    // A linearizable read before it tells (with --if-version the condition
    // says it: 409 if the record is gone). The delete is sent whatever the
    // read saw: a write racing it must not be left in place.
    let existing = if a.if_version.is_none() { version_of(&a.common, &a.pk, &a.sk).await } else { None };
    let body = if unaddressable(&[&a.pk, &a.sk]) {
        let op = serde_json::json!({ "op": "delete", "pk": a.pk, "sk": a.sk, "if_version": a.if_version });
        let query: Vec<_> = query.into_iter().filter(|(name, _)| *name != "if_version").collect();
        write_as_batch(&a.common, op, &query).await?
    } else {
        send(a.common.client()?.delete(key_url(&a.common, &a.pk, Some(&a.sk))).query(&query)).await?
    };
    print(&a.common, &body, |b| {
        let position = b["position"].as_str().unwrap_or("");
        match (b["write_id"].as_str(), existing) {
            (Some(id), _) => println!("journaled  write id {id}  (tern write-status {id})"),
            (None, Some(None)) => println!("deleted  position {position}  (nothing was at pk {:?} sk {:?})", a.pk, a.sk),
            (None, Some(Some(version))) => println!("deleted  version {version}  position {position}"),
            (None, None) => match a.if_version {
                Some(version) => println!("deleted  version {version}  position {position}"),
                None => println!("deleted  position {position}"),
            },
        }
    });
    Ok(())
}

/// The version of the record at (pk, sk) as of now (a linearizable read:
/// it sees every acknowledged write): `Some(None)` when there is none,
/// `None` when it cannot be told (no read grant, an error: the delete says
/// less).
async fn version_of(common: &Common, pk: &str, sk: &str) -> Option<Option<u64>> {
    let strong = [("consistency", "strong".to_string())];
    let record = read_record(common, pk, sk, &strong).await.ok()?;
    Some(record.and_then(|record| record["version"].as_u64()))
}

/// The record at (pk, sk) with the position the read saw, None when there
/// is none (any other refusal, a missing namespace too, is an error).
/// `query`: the read's own parameters (`after`, `consistency`).
async fn read_record(common: &Common, pk: &str, sk: &str, query: &[(&str, String)]) -> anyhow::Result<Option<Value>> {
    let client = common.client()?;
    if unaddressable(&[pk, sk]) {
        let url = format!("{}/v1/ns/{}/get", common.url.trim_end_matches('/'), common.ns);
        let keys = serde_json::json!({ "keys": [{ "pk": pk, "sk": sk }] });
        let answer = send(client.post(url).query(query).json(&keys)).await?;
        let Value::Object(record) = &answer["items"][0] else { return Ok(None) };
        let mut record = Value::Object(record.clone());
        record["position"] = answer["position"].clone();
        return Ok(Some(record));
    }
    match send(client.get(key_url(common, pk, Some(sk))).query(query)).await {
        Ok(record) => Ok(Some(record)),
        Err(e) if e.downcast_ref::<CliError>().is_some_and(|e| e.message.starts_with("404 not_found:")) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) async fn ls(a: LsArgs) -> anyhow::Result<()> {
    let client = a.common.client()?;
    let url = match &a.pk {
        Some(pk) => key_url(&a.common, pk, None),
        None => {
            if a.start.is_some() || a.end.is_some() || a.reverse {
                let message = "--start, --end and --reverse list one pk's records: give the pk".to_string();
                return Err(CliError { exit: super::exit::Exit::Usage, message }.into());
            }
            format!("{}/v1/ns/{}/kv", a.common.url.trim_end_matches('/'), a.common.ns)
        }
    };
    let mut cursor = a.cursor.clone();
    let mut all_items = Vec::new();
    loop {
        let mut query = vec![("limit", a.limit.to_string())];
        let partition = a.partition.map(|p| p.to_string());
        for (key, value) in [("prefix", &a.prefix), ("start", &a.start), ("end", &a.end), ("cursor", &cursor), ("partition", &partition)] {
            if let Some(v) = value {
                query.push((key, v.clone()));
            }
        }
        if a.reverse {
            query.push(("reverse", "true".to_string()));
        }
        let body = send(client.get(&url).query(&query)).await?;
        let items = body["items"].as_array().cloned().unwrap_or_default();
        cursor = body["next_cursor"].as_str().map(str::to_string);
        if !a.all {
            print(&a.common, &body, |_| print_items(&items, a.pk.is_none(), cursor.as_deref()));
            return Ok(());
        }
        all_items.extend(items);
        if cursor.is_none() {
            break;
        }
    }
    let body = serde_json::json!({ "items": all_items });
    print(&a.common, &body, |_| print_items(&all_items, a.pk.is_none(), None));
    Ok(())
}

/// `text` cut to at most `chars_max` characters, `...` marking a cut (at
/// a character's boundary: a byte index inside a UTF-8 character panicked).
pub(super) fn shorten(text: String, chars_max: usize) -> String {
    if text.chars().count() <= chars_max {
        return text;
    }
    let mut cut: String = text.chars().take(chars_max.saturating_sub(3)).collect();
    cut.push_str("...");
    cut
}

/// A table of records: with their pk when they are of many pks.
fn print_items(items: &[Value], with_pk: bool, cursor: Option<&str>) {
    let mut table = if with_pk { Table::new(&["PK", "SK", ">VERSION", "VALUE"]) } else { Table::new(&["SK", ">VERSION", "VALUE"]) };
    for item in items {
        let value = shorten(item["value"].to_string(), if with_pk { 60 } else { 80 });
        let mut row = vec![cell(&item["sk"]), cell(&item["version"]), value];
        if with_pk {
            row.insert(0, cell(&item["pk"]));
        }
        table.row(row);
    }
    table.print();
    if let Some(cursor) = cursor {
        println!("(more: --all, or --cursor {cursor})");
    }
}

pub(super) async fn ns(a: NsArgs) -> anyhow::Result<()> {
    let client = a.common.client()?;
    let base = a.common.url.trim_end_matches('/').to_string();
    match a.action.unwrap_or(NsAction::Ls) {
        NsAction::Ls => {
            let body = send(client.get(format!("{base}/v1/ns"))).await?;
            print(&a.common, &body, |b| {
                let mut table = Table::new(&["NAME", ">PARTITIONS"]);
                for n in b["namespaces"].as_array().into_iter().flatten() {
                    table.row(vec![cell(&n["name"]), cell(&n["partitions"])]);
                }
                table.print();
            });
        }
        NsAction::Create { name, partitions, source_topic, history_max } => {
            let mut body = match (source_topic, partitions) {
                (Some(topic), _) => serde_json::json!({ "source_topic": topic }),
                (None, Some(partitions)) => serde_json::json!({ "partitions": partitions }),
                // Not given: an existing namespace keeps its count (sending 16
                // would be refused as another count); a new one gets 16.
                (None, None) => match client.get(format!("{base}/v1/ns/{name}")).send().await.map(|r| r.status()) {
                    Ok(status) if status.is_success() => serde_json::json!({}),
                    _ => serde_json::json!({ "partitions": NEW_NAMESPACE_PARTITIONS }),
                },
            };
            if let Some(history_max) = history_max {
                body["history_max"] = history_max.into();
            }
            let request = client.put(format!("{base}/v1/ns/{name}")).json(&body);
            let body = send(request).await?;
            print(&a.common, &body, |b| {
                let verb = if b["created"].as_bool() == Some(true) { "created" } else { "exists" };
                match b["source_topic"].as_str() {
                    Some(topic) => println!("{verb}  {name}  partitions {}  source_topic {topic}", b["partitions"]),
                    None => println!("{verb}  {name}  partitions {}", b["partitions"]),
                }
            });
        }
        NsAction::Delete { name, confirm } => {
            if confirm.as_deref() != Some(name.as_str()) {
                let message = format!(
                    "deleting namespace {name:?} removes every record in it, its log and its snapshots, on every node, for good; \
                     to confirm, repeat its name: tern ns delete {name} --confirm {name}"
                );
                return Err(CliError { exit: super::exit::Exit::Usage, message }.into());
            }
            let segment = utf8_percent_encode(&name, KEY_SEGMENT).to_string();
            let request = client.delete(format!("{base}/v1/ns/{segment}")).query(&[("confirm", name.as_str())]);
            let body = send(request).await?;
            print(&a.common, &body, |b| {
                println!("deleted  {name}  partitions {}", b["partitions"]);
            });
        }
        NsAction::Show { name } => {
            let body = send(client.get(format!("{base}/v1/ns/{name}"))).await?;
            print(&a.common, &body, |b| {
                match b["source_topic"].as_str() {
                    Some(topic) => println!("{}  partitions {}  source_topic {topic}", name, b["partitions"]),
                    None => println!("{}  partitions {}", name, b["partitions"]),
                }
                let mut table = Table::new(&[">PARTITION", "STATUS", ">APPLIED", ">LOG END", ">LAG", ">RECORDS", "STATE HASH"]);
                for p in b["state"].as_array().into_iter().flatten() {
                    // The first 16 hex digits tell two replicas apart; --json has all.
                    let hash: String = p["state_hash"].as_str().unwrap_or("").chars().take(16).collect();
                    // Applied: the entries below `applied_offset + 1` (none: `-`).
                    let applied = match p["applied_offset"].as_i64() {
                        Some(offset) if offset >= 0 => offset.to_string(),
                        _ => "-".to_string(),
                    };
                    let row = [&p["partition"], &p["status"]].map(cell).into_iter().chain([applied]);
                    table.row(row.chain([&p["log_end_offset"], &p["lag"], &p["records"]].map(cell)).chain([hash]).collect());
                }
                table.print();
            });
            print_procedures(&a.common, &client, &base, &name).await?;
        }
    }
    Ok(())
}

/// `tern ns show`'s procedures: each one's version, and each partition's
/// outbox backlog and log time (human output only).
async fn print_procedures(common: &Common, client: &reqwest::Client, base: &str, name: &str) -> anyhow::Result<()> {
    if common.json {
        return Ok(());
    }
    let listed = send(client.get(format!("{base}/v1/ns/{name}/procedures"))).await?;
    let procedures = listed["procedures"].as_array().cloned().unwrap_or_default();
    if procedures.is_empty() {
        return Ok(());
    }
    println!();
    let mut table = Table::new(&["PROCEDURE", ">VERSION", ">FUEL", ">MODULE"]);
    for p in &procedures {
        table.row(vec![cell(&p["name"]), cell(&p["version"]), cell(&p["fuel_per_record"]), human_bytes(p["module_bytes"].as_u64().unwrap_or(0))]);
    }
    table.print();
    println!("this node, since it started:");
    let mut table = Table::new(&["PROCEDURE", ">RECORDS", ">OUTPUTS", ">DEAD LETTERS", ">FUEL", ">µS PER CALL"]);
    for p in &procedures {
        let c = &p["counters"];
        table.row([&p["name"], &c["records"], &c["outputs"], &c["dead_letters"], &c["fuel_used"], &c["call_us_mean"]].map(cell).into());
    }
    table.print();
    let shown = send(client.get(format!("{base}/v1/ns/{name}"))).await?;
    let mut table = Table::new(&[">PARTITION", ">OUTBOX", ">UNPUBLISHED", ">LOG TIME MS"]);
    for p in shown["state"].as_array().into_iter().flatten().filter(|p| !p["procedures"].is_null()) {
        let procedures = &p["procedures"];
        table
            .row([&p["partition"], &procedures["outbox_messages"], &procedures["unpublished_messages"], &procedures["log_time_ms"]].map(cell).into());
    }
    table.print();
    Ok(())
}

#[derive(Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    common: Common,
}

/// `tern cluster`: the nodes one node knows, one row per node, with the
/// partitions each serves as `ns/partition@applied_offset` and the round
/// trip from the asked node; then where the asked node sends a request for
/// each partition it does not hold.
pub(super) async fn cluster(a: ClusterArgs) -> anyhow::Result<()> {
    let base = a.common.url.trim_end_matches('/').to_string();
    let body = send(a.common.client()?.get(format!("{base}/v1/cluster"))).await?;
    print(&a.common, &body, |b| {
        let mut table = Table::new(&["NODE", "REGION", "GROUP", "ADDRESS", "STATE", ">RTT_MS", "PARTITIONS"]);
        for n in b["nodes"].as_array().into_iter().flatten() {
            let partitions: Vec<String> = n["partitions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}@{}", p["ns"].as_str().unwrap_or(""), p["partition"], p["applied_offset"]))
                .chain(
                    n["refused"].as_array().into_iter().flatten().map(|p| format!("{}/{}:REFUSED", p["ns"].as_str().unwrap_or(""), p["partition"])),
                )
                .collect();
            let id = format!("{}{}", n["id"].as_str().unwrap_or(""), if n["self"] == true { " *" } else { "" });
            let rtt = match (&n["rtt_ms"], n["self"] == true, n["reachable"] == false) {
                (_, true, _) => "-".to_string(),
                (_, _, true) => "unreach".to_string(),
                (serde_json::Value::Number(ms), _, _) => format!("{:.1}", ms.as_f64().unwrap_or(0.0)),
                _ => "?".to_string(),
            };
            let partitions = if partitions.is_empty() { "-".to_string() } else { partitions.join(" ") };
            table.row(vec![id, cell(&n["region"]), cell(&n["group"]), cell(&n["address"]), cell(&n["state"]), rtt, partitions]);
        }
        table.print();
        let forwarded: Vec<String> = b["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["local"] != true)
            .map(|r| match r["holder"].as_str() {
                Some(holder) => format!("{}/{}->{}({})", r["ns"].as_str().unwrap_or(""), r["partition"], holder, r["region"].as_str().unwrap_or("")),
                None => format!("{}/{}->NONE", r["ns"].as_str().unwrap_or(""), r["partition"]),
            })
            .collect();
        if !forwarded.is_empty() {
            println!("forwarded from {}: {}", b["self"].as_str().unwrap_or(""), forwarded.join(" "));
        }
    });
    Ok(())
}

#[derive(Args)]
pub struct SnapshotArgs {
    /// Base URL of a Tern node.
    #[arg(long, env = "TERN_URL", default_value = "http://127.0.0.1:7070", global = true)]
    url: String,
    /// Print the API's JSON instead of human output.
    #[arg(long, global = true)]
    json: bool,
    /// Bearer token (see `Common`).
    #[arg(long, env = "TERN_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// PEM file of the CA to trust for an https:// URL.
    #[arg(long, env = "TERN_CA", global = true)]
    ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    action: SnapshotAction,
}

#[derive(Subcommand)]
enum SnapshotAction {
    /// Take snapshots now of the partitions the node serves.
    #[command(after_help = "Examples:\n  tern snapshot create\n  tern snapshot create --ns default --partition 12")]
    Create {
        /// Only this namespace.
        #[arg(long)]
        ns: Option<String>,
        /// Only this partition (needs --ns).
        #[arg(long, requires = "ns")]
        partition: Option<u32>,
    },
    /// List the snapshots in the node's object store.
    #[command(after_help = "Example:\n  tern snapshot ls")]
    Ls,
}

/// `tern snapshot create|ls`.
pub(super) async fn snapshot(a: SnapshotArgs) -> anyhow::Result<()> {
    let base = a.url.trim_end_matches('/').to_string();
    let common = Common { url: a.url.clone(), ns: String::new(), json: a.json, token: a.token.clone(), ca: a.ca.clone() };
    let client = common.client()?;
    match a.action {
        SnapshotAction::Create { ns, partition } => {
            // One request per partition, so a person sees each one as it is
            // taken (on a terminal), and one failure does not hide the rest.
            let targets = match partition {
                Some(p) => vec![(ns.clone().expect("clap: --partition requires --ns"), p)],
                None => snapshot_targets(&client, &base, ns.as_deref()).await?,
            };
            let progress = !common.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
            let (mut reports, mut failures) = (Vec::new(), Vec::new());
            for (i, (ns, p)) in targets.iter().enumerate() {
                let body = serde_json::json!({ "ns": ns, "partition": p });
                let response =
                    client.post(format!("{base}/v1/admin/snapshots")).json(&body).send().await.map_err(|e| anyhow::Error::new(unreachable(&e)))?;
                let status = response.status().as_u16();
                let answer: Value = response.json().await.unwrap_or(Value::Null);
                let taken = answer["snapshots"].as_array().cloned().unwrap_or_default();
                if status >= 400 && taken.is_empty() {
                    return Err(refusal(status, &answer).into());
                }
                for s in taken {
                    if let Some(error) = s["error"].as_str() {
                        failures.push(format!("{ns}/{p}: {error}"));
                    }
                    if progress {
                        let done = match s["error"].as_str() {
                            Some(error) => format!("failed: {error}"),
                            None => format!(
                                "{} uploaded of {}",
                                human_bytes(s["bytes_uploaded"].as_u64().unwrap_or(0)),
                                human_bytes(s["bytes_total"].as_u64().unwrap_or(0))
                            ),
                        };
                        eprintln!("[{}/{}] {ns}/{p}: {done}", i + 1, targets.len());
                    }
                    reports.push(s);
                }
            }
            let answer = serde_json::json!({ "snapshots": reports });
            print(&common, &answer, |b| {
                let mut table = Table::new(&["NAMESPACE", ">PARTITION", ">APPLIED", ">RECORDS", ">CHUNKS", ">UPLOADED", ">TOTAL"]);
                let (mut uploaded, mut total) = (0, 0);
                for s in b["snapshots"].as_array().into_iter().flatten() {
                    let (up, all) = (s["bytes_uploaded"].as_u64().unwrap_or(0), s["bytes_total"].as_u64().unwrap_or(0));
                    (uploaded, total) = (uploaded + up, total + all);
                    let row = [&s["ns"], &s["partition"], &s["applied_offset"], &s["records"], &s["chunks"]].map(cell).into_iter();
                    table.row(row.chain([human_bytes(up), human_bytes(all)]).collect());
                }
                table.print();
                let count = b["snapshots"].as_array().map_or(0, Vec::len) - failures.len();
                println!("{count} snapshots taken: {} uploaded, {} in all", human_bytes(uploaded), human_bytes(total));
            });
            if !failures.is_empty() {
                let message = format!("{} of {} snapshots failed: {}", failures.len(), reports.len(), failures.join("; "));
                return Err(CliError { exit: super::exit::Exit::Other, message }.into());
            }
        }
        SnapshotAction::Ls => {
            let answer = send(client.get(format!("{base}/v1/admin/snapshots"))).await?;
            print(&common, &answer, |b| {
                let mut table = Table::new(&["NAMESPACE", ">PARTITION", ">APPLIED", "MANIFEST"]);
                for s in b["snapshots"].as_array().into_iter().flatten() {
                    table.row([&s["ns"], &s["partition"], &s["applied_offset"], &s["manifest"]].map(cell).into());
                }
                table.print();
            });
        }
    }
    Ok(())
}

/// The partitions `tern snapshot create` takes, one request each: those
/// the node serves, of namespace `ns` or of every namespace it lists.
async fn snapshot_targets(client: &reqwest::Client, base: &str, ns: Option<&str>) -> anyhow::Result<Vec<(String, u32)>> {
    let names: Vec<String> = match ns {
        Some(ns) => vec![ns.to_string()],
        None => {
            let listed = send(client.get(format!("{base}/v1/ns"))).await?;
            listed["namespaces"].as_array().into_iter().flatten().filter_map(|n| n["name"].as_str().map(str::to_string)).collect()
        }
    };
    let mut targets = Vec::new();
    for name in names {
        let segment = utf8_percent_encode(&name, KEY_SEGMENT).to_string();
        let described = send(client.get(format!("{base}/v1/ns/{segment}"))).await?;
        for p in described["state"].as_array().into_iter().flatten() {
            if p["held"] == true && p["status"] == "serving" {
                targets.extend(p["partition"].as_u64().map(|partition| (name.clone(), partition as u32)));
            }
        }
    }
    Ok(targets)
}

/// `bytes` for people: `512 B`, `1.5 KiB`, `2.0 MiB`, `3.1 GiB`.
pub(super) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_are_shown_in_binary_units() {
        let shown: Vec<String> = [0, 1023, 1024, 1536, 5 * 1024 * 1024, 3 << 30].into_iter().map(super::human_bytes).collect();
        assert_eq!(shown, ["0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "3.0 GiB"]);
    }

    /// A value cut for the table keeps whole characters: `tern ls` of a
    /// record whose JSON passed 80 bytes inside a multi-byte character
    /// panicked ("byte index 77 is not a char boundary").
    #[test]
    fn a_long_value_is_cut_at_a_character() {
        let value = format!("\"{}\"", "é".repeat(100));
        let cut = super::shorten(value.clone(), 80);
        assert_eq!(cut.chars().count(), 80);
        assert!(cut.ends_with("...") && value.starts_with(cut.trim_end_matches("...")));
        assert_eq!(super::shorten("short".into(), 80), "short");
    }
}
