//! Clients that try to make a node hold more than its bounds (issue 35,
//! defect 6): each test reproduces one way a single small client grew the
//! node's memory without bound before, and checks the bound now, by the
//! node's resident memory (`/proc/<pid>/status`, `VmRSS`) and by what the
//! node answers.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::common::Tern;

/// The node's resident memory, in MiB.
fn rss_mib(node: &Tern) -> u64 {
    let pid = node.child.as_ref().expect("running").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).unwrap().parse().unwrap();
    kib / 1024
}

/// A value of about `bytes` bytes (a JSON string).
fn value_of(bytes: usize) -> Value {
    json!("v".repeat(bytes))
}

/// Puts `value` at (`pk`, `sk`) of `default` and waits until this node applied it.
async fn put_applied(node: &Tern, pk: &str, sk: &str, value: &Value) {
    let url = format!("{}/v1/ns/default/kv/{pk}/{sk}?wait=applied", node.url);
    let (status, answer) = node.send(node.client.put(url).json(value)).await;
    assert_eq!(status, 200, "{answer}");
}

/// Before the fix, a realtime client that sent 8,000 `echo` requests (no
/// credential needed) and read nothing took the node from 72 to 342 MiB:
/// every answer was queued. Now the node stops reading a client whose
/// answers are not drained: its queue stays near 4 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realtime_client_that_never_reads_is_not_read_either() {
    let dir = tempfile::tempdir().unwrap();
    let node = Tern::dev(dir.path()).await;
    let before = rss_mib(&node);
    let ws_url = format!("{}/.ws?v=5&ns=default", node.url.replacen("http", "ws", 1));
    // A small receive buffer and no reading: the node's answers pile up on its side.
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(4096);
    let (ws, _) = tokio_tungstenite::connect_async_with_config(&ws_url, Some(config), false).await.unwrap();
    let (mut sink, stream) = ws.split();
    let echo = json!({"t": "d", "d": {"r": 1, "a": "echo", "b": {"d": "e".repeat(60_000)}}}).to_string();
    // 8,000 echoes of 60 KB: 480 MB of answers if all were queued.
    let mut sent = 0;
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        for _ in 0..8_000 {
            if sink.send(Message::text(echo.clone())).await.is_err() {
                break;
            }
            sent += 1;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_mib(&node);
    eprintln!("realtime, unread echoes: {sent} sent (the rest waited in TCP), RSS {before} -> {after} MiB");
    assert!(after < before + 100, "RSS grew from {before} to {after} MiB");
    // The node still serves others.
    let (status, _) = node.get_json("/v1/ns/default").await;
    assert_eq!(status, 200);
    drop((sink, stream));
}

/// Before the fix, one 13 KB multi-get of the same 1 MiB record 1,000
/// times took the node from 67 MB to 1.1 GB, rendering each copy. Now a key
/// is read once, and an answer past 64 MiB is refused before it is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_get_of_one_key_many_times_is_read_once_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let node = Tern::dev(dir.path()).await;
    // Applied before it is read: a record not yet applied here reads as null.
    put_applied(&node, "big", "", &value_of(1_000_000)).await;
    let before = rss_mib(&node);
    let get = |copies: usize| {
        let keys: Vec<Value> = (0..copies).map(|_| json!({"pk": "big"})).collect();
        node.client.post(format!("{}/v1/ns/default/get", node.url)).json(&json!({ "keys": keys }))
    };
    // Only the status and the code: before the fix this was a 1 GB answer.
    let response = get(1_000).send().await.unwrap();
    let status = response.status().as_u16();
    let code = match status {
        413 => response.json::<Value>().await.unwrap()["error"]["code"].as_str().unwrap_or_default().to_string(),
        _ => String::new(),
    };
    assert_eq!((status, code.as_str()), (413, "answer_too_large"));
    let after = rss_mib(&node);
    eprintln!("multi-get of one 1 MB key 1,000 times: RSS {before} -> {after} MiB");
    assert!(after < before + 100, "RSS grew from {before} to {after} MiB");
    // Within the bound, every copy is answered in order.
    let (status, answer) = node.send(get(20)).await;
    let items = answer["items"].as_array().unwrap();
    assert_eq!((status, items.len()), (200, 20));
    assert!(items.iter().all(|i| i["pk"] == "big" && i["value"].as_str().map(str::len) == Some(1_000_000)));
}

/// A list page ends early at 64 MiB of records (before the fix it held up
/// to `limit` records of 1 MiB: 1 GB), and its cursor goes on from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_page_of_large_records_ends_at_the_answer_bound_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let node = Tern::dev(dir.path()).await;
    let value = value_of(1_000_000);
    let records = 70;
    for i in 0..records {
        put_applied(&node, "big", &format!("{i:03}"), &value).await;
    }
    let (status, page) = node.get_json("/v1/ns/default/kv/big?limit=1000").await;
    let first = page["items"].as_array().unwrap().len();
    assert!(status == 200 && first < records && first >= 60, "a page of {first} records");
    let cursor = page["next_cursor"].as_str().expect("more follow");
    let (_, rest) = node.get_json(&format!("/v1/ns/default/kv/big?limit=1000&cursor={cursor}")).await;
    assert_eq!(first + rest["items"].as_array().unwrap().len(), records, "every record once");
    assert_eq!(rest["next_cursor"], Value::Null);
}
