//! `tern watch [PK]`: prints changes as they happen, over SSE. Reconnects
//! by itself (1 s doubling to 30 s, jittered) and resumes from the last
//! position it printed, so it misses and repeats nothing.

use std::time::Duration;

use clap::Args;
use serde_json::Value;

use super::client::Common;

#[derive(Args)]
pub struct WatchArgs {
    #[command(flatten)]
    common: Common,
    /// Watch one pk (omit for the whole namespace).
    pk: Option<String>,
    /// With PK: only sort keys starting with this.
    #[arg(long)]
    prefix: Option<String>,
    /// With PK: one record.
    #[arg(long)]
    sk: Option<String>,
    /// `now` (default), `snapshot` (the current state first), or a position.
    #[arg(long, default_value = "now")]
    from: String,
    /// `state` (default) or `log`.
    #[arg(long)]
    mode: Option<String>,
    /// Exit after this many changes.
    #[arg(long)]
    count: Option<u64>,
}

const RETRY_DELAY_MIN: Duration = Duration::from_secs(1);
const RETRY_DELAY_MAX: Duration = Duration::from_secs(30);

pub(super) async fn watch(a: WatchArgs) -> anyhow::Result<()> {
    let mut query: Vec<(&str, String)> = Vec::new();
    for (key, value) in [("pk", &a.pk), ("prefix", &a.prefix), ("sk", &a.sk), ("mode", &a.mode)] {
        if let Some(value) = value {
            query.push((key, value.clone()));
        }
    }
    let url = format!("{}/v1/ns/{}/watch", a.common.url.trim_end_matches('/'), a.common.ns);
    let client = a.common.client()?;
    let mut position: Option<String> = None;
    let mut printed = 0u64;
    let mut retry_delay = RETRY_DELAY_MIN;
    loop {
        let mut request = client.get(&url).query(&query);
        match &position {
            Some(id) => request = request.header("Last-Event-ID", id),
            None => request = request.query(&[("from", &a.from)]),
        }
        let error = match request.send().await {
            Ok(response) if response.status().is_success() => {
                let ended = stream(response, &a, &mut position, &mut printed, &mut retry_delay).await?;
                if a.count.is_some_and(|n| printed >= n) {
                    return Ok(());
                }
                ended
            }
            Ok(response) => {
                let status = response.status();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                let refused = super::client::refusal(status.as_u16(), &body);
                if status.is_client_error() {
                    return Err(refused.into());
                }
                refused.message
            }
            Err(e) => super::exit::unreachable(&e).message,
        };
        let jittered = retry_delay.mul_f64(0.5 + rand::random::<f64>() / 2.0);
        eprintln!("watch: {error}; reconnecting in {:.1} s", jittered.as_secs_f64());
        tokio::time::sleep(jittered).await;
        retry_delay = (retry_delay * 2).min(RETRY_DELAY_MAX);
    }
}

/// Prints one connection's events; returns why it ended.
async fn stream(
    mut response: reqwest::Response,
    a: &WatchArgs,
    position: &mut Option<String>,
    printed: &mut u64,
    retry_delay: &mut Duration,
) -> anyhow::Result<String> {
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok("the stream ended".into()),
            Err(e) => return Ok(format!("the stream broke: {e}")),
        };
        *retry_delay = RETRY_DELAY_MIN;
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buffer.drain(..end + 2).collect();
            let (mut event, mut id, mut data) = (String::new(), None, String::new());
            for line in String::from_utf8_lossy(&block[..end]).lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = v.to_string();
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_string());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = v.to_string();
                }
            }
            if event.is_empty() {
                continue;
            }
            if let Some(id) = &id {
                *position = Some(id.clone());
            }
            let data: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            if event == "cancel" {
                *position = data["position"].as_str().map(str::to_string).or(position.take());
                return Ok(format!("the server ended the watch: {}", data["reason"]));
            }
            if event == "keep-alive" || (event == "progress" && !a.common.json) {
                continue;
            }
            print_event(a.common.json, &event, id.as_deref(), &data);
            if event == "put" || event == "delete" {
                *printed += 1;
                if a.count.is_some_and(|n| *printed >= n) {
                    return Ok("done".into());
                }
            }
        }
    }
}

fn print_event(json: bool, event: &str, id: Option<&str>, data: &Value) {
    if json {
        println!("{}", serde_json::json!({ "event": event, "id": id, "data": data }));
        return;
    }
    match event {
        "put" => println!(
            "put     {}/{} = {}  (version {})",
            data["pk"].as_str().unwrap_or(""),
            data["sk"].as_str().unwrap_or(""),
            data["value"],
            data["version"]
        ),
        "delete" => println!("delete  {}/{}  (version {})", data["pk"].as_str().unwrap_or(""), data["sk"].as_str().unwrap_or(""), data["version"]),
        "snapshot" | "reset" => println!("{event}  (state as of {}; {})", data["position"].as_str().unwrap_or(""), data["reason"]),
        "synced" => println!("synced  {}", data["position"].as_str().unwrap_or("")),
        other => println!("{other}  {data}"),
    }
}
