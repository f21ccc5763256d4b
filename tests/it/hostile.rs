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

/// The node's peak resident memory (MiB) while `work` runs, sampled every 100 ms.
async fn peak_rss_during<F: std::future::Future>(node: &Tern, work: F) -> (u64, F::Output) {
    let pid = node.child.as_ref().expect("running").id();
    let sample = move || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).map_or(0, |v| v.parse::<u64>().unwrap())
            / 1024
    };
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(sample()));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(sample(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let output = work.await;
    sampler.abort();
    (peak.load(std::sync::atomic::Ordering::Relaxed), output)
}

/// The growth of the node's resident memory that all the hostile clients of
/// `long_lived_protocols_stay_bounded_against_hostile_clients` together may
/// cause (docs/bounds.md, "Per connection"): their outlets, socket buffers
/// and state pages, far below what they ask for (each never-reading watch
/// asks for the whole 32 MiB state, again after every reset).
const HOSTILE_GROWTH_MIB_MAX: u64 = 450;

/// Every long-lived protocol (SSE, `/v1/ws`, HTTP/2 watches, Firebase
/// streams, realtime) driven at once by clients that never read, read
/// slowly, send at the maximum size and repeat requests, over 32 MiB of
/// state and 16 MiB of writes while they hang: the node's memory stays
/// under `HOSTILE_GROWTH_MIB_MAX` above its start, and a well-behaved client
/// is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_lived_protocols_stay_bounded_against_hostile_clients() {
    let dir = tempfile::tempdir().unwrap();
    let node = Tern::dev(dir.path()).await;
    let url = node.url.clone();
    let ws_base = url.replacen("http", "ws", 1);
    // 32 MiB of records (128 of 256 KiB) and a Firebase tree of 8 MiB.
    let value = value_of(256 * 1024);
    for i in 0..128 {
        put_applied(&node, &format!("big{i}"), "", &value).await;
    }
    for i in 0..32 {
        let (status, answer) = node.send(node.client.put(format!("{url}/tree/c{i}.json?ns=default")).json(&value)).await;
        assert_eq!(status, 200, "{answer}");
    }
    let before = rss_mib(&node);
    let small = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(4096);

    let (peak, served) = peak_rss_during(&node, async {
        let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
        // Never read: 16 SSE watches of the whole state, 16 HTTP/2 ones on
        // one connection, 8 Firebase streams of the tree.
        let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
        for i in 0..16 {
            let watch = format!("{url}/v1/ns/default/watch?from=snapshot");
            held.push(Box::new(node.client.get(&watch).send().await.unwrap()));
            held.push(Box::new(h2.get(&watch).send().await.unwrap()));
            if i < 8 {
                held.push(Box::new(node.client.get(format!("{url}/tree.json")).header("accept", "text/event-stream").send().await.unwrap()));
            }
        }
        // 4 /v1/ws connections with 16 such watches each, never read.
        for _ in 0..4 {
            let (mut ws, _) = tokio_tungstenite::connect_async_with_config(format!("{ws_base}/v1/ws"), Some(small), false).await.unwrap();
            for id in 0..16 {
                ws.send(Message::text(json!({"type": "sub", "id": format!("w{id}"), "ns": "default", "from": "snapshot"}).to_string()))
                    .await
                    .unwrap();
            }
            held.push(Box::new(ws));
        }
        // 4 realtime connections listening to 8 children of the tree each, never read.
        for _ in 0..4 {
            let (mut ws, _) =
                tokio_tungstenite::connect_async_with_config(format!("{ws_base}/.ws?v=5&ns=default"), Some(small), false).await.unwrap();
            for (r, child) in (0..8).enumerate() {
                let listen = json!({"t": "d", "d": {"r": r + 1, "a": "q", "b": {"p": format!("/tree/c{child}"), "h": ""}}});
                ws.send(Message::text(listen.to_string())).await.unwrap();
            }
            held.push(Box::new(ws));
        }
        // At the maximum size, never read: /v1/ws frames of 64 KiB, each answered with an error.
        let (maxed, _) = tokio_tungstenite::connect_async_with_config(format!("{ws_base}/v1/ws"), Some(small), false).await.unwrap();
        let (mut maxed_sink, maxed_stream) = maxed.split();
        let frame = format!("{{\"type\":\"sub\",\"id\":\"{}\"}}", "x".repeat(64 * 1024 - 32));
        let flood = tokio::spawn(async move {
            for _ in 0..2_000 {
                if tokio::time::timeout(Duration::from_secs(2), maxed_sink.send(Message::text(frame.clone()))).await.map_or(true, |r| r.is_err()) {
                    break;
                }
            }
            maxed_sink
        });
        // Read slowly: 4 SSE watches of the whole state, 16 KiB a second.
        let mut slow = Vec::new();
        for _ in 0..4 {
            let mut response = node.client.get(format!("{url}/v1/ns/default/watch?from=snapshot")).send().await.unwrap();
            slow.push(tokio::spawn(async move {
                for _ in 0..20 {
                    if response.chunk().await.ok().flatten().is_none() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                }
            }));
        }
        // Repeat: one /v1/ws connection subscribes and unsubscribes 1,000 times, reading.
        let churn = {
            let ws_base = ws_base.clone();
            tokio::spawn(async move {
                let (mut ws, _) = tokio_tungstenite::connect_async(format!("{ws_base}/v1/ws")).await.unwrap();
                for _ in 0..1_000 {
                    ws.send(Message::text(json!({"type": "sub", "id": "c", "ns": "default", "pk": "p"}).to_string())).await.unwrap();
                    ws.send(Message::text(json!({"type": "unsub", "id": "c"}).to_string())).await.unwrap();
                }
                let mut replies = 0;
                while replies < 2_000 {
                    match tokio::time::timeout(Duration::from_secs(20), ws.next()).await {
                        Ok(Some(Ok(Message::Text(_)))) => replies += 1,
                        Ok(Some(Ok(_))) => continue,
                        _ => break,
                    }
                }
                replies
            })
        };
        // 64 writes of 256 KiB while they hang: every watch above falls behind.
        for i in 0..64 {
            put_applied(&node, &format!("big{}", i % 128), "", &json!(format!("{i}{}", "w".repeat(256 * 1024)))).await;
        }
        // A well-behaved client is served throughout: its writes and reads,
        // and a watch that reads sees its write.
        let mut watch = node.client.get(format!("{url}/v1/ns/default/watch?pk=good")).send().await.unwrap();
        let mut served = 0;
        for i in 0..20 {
            let (status, _) = node.send(node.client.put(format!("{url}/v1/ns/default/kv/good/s")).json(&json!(i))).await;
            assert_eq!(status, 200);
            let (status, got) = node.get_json("/v1/ns/default/kv/good/s?consistency=strong").await;
            assert_eq!((status, &got["value"]), (200, &json!(i)));
            served += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut seen = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !seen.contains("\"value\":19") {
            match tokio::time::timeout_at(deadline, watch.chunk()).await {
                Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => panic!("the good watch did not see its write: {seen}"),
            }
        }
        assert_eq!(churn.await.unwrap(), 2_000, "every sub and unsub of the churning connection was answered");
        for task in slow {
            task.await.unwrap();
        }
        let sink = flood.await.unwrap();
        drop((sink, maxed_stream, held));
        served
    })
    .await;
    eprintln!("hostile long-lived clients: RSS {before} MiB before, peak {peak} MiB; {served} good requests served");
    assert_eq!(served, 20);
    assert!(peak < before + HOSTILE_GROWTH_MIB_MAX, "RSS grew from {before} to {peak} MiB");
    // And all of it is given back as the clients go.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, _) = node.get_json("/v1/ns/default").await;
    assert_eq!(status, 200);
}

/// A node keeps at most `http_connections_max` connections open: one
/// accepted past it is closed before anything is read, counted in
/// `tern_connections_refused_total`, and served again once one closes.
/// Before, every connection was served, so what clients could make a node
/// hold had no bound but the file descriptor limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_node_bound_are_closed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap(), "--namespace", "default:2", "--http-connections-max", "4"];
    let node = Tern::spawn(&args, dir.path()).await;
    let fresh = || reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let (status, _) = node.get_json("/v1/ns/default").await;
    assert_eq!(status, 200);
    // Hold connections — a /v1/ws socket, a realtime socket, an SSE watch,
    // in turn — until one is refused: at most 4 are open, the helper's
    // pooled one among them. An upgraded socket counts as long as it is
    // open (before the fix its place was given back at the upgrade).
    let ws_base = node.url.replacen("http", "ws", 1);
    let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    let refused = loop {
        let opened: Result<Box<dyn std::any::Any + Send>, String> = match held.len() % 3 {
            0 => tokio_tungstenite::connect_async(format!("{ws_base}/v1/ws")).await.map(|(ws, _)| Box::new(ws) as _).map_err(|e| e.to_string()),
            1 => tokio_tungstenite::connect_async(format!("{ws_base}/.ws?v=5&ns=default"))
                .await
                .map(|(ws, _)| Box::new(ws) as _)
                .map_err(|e| e.to_string()),
            _ => match fresh().get(format!("{}/v1/ns/default/watch", node.url)).send().await {
                Ok(watch) if watch.status() == 200 => Ok(Box::new(watch) as _),
                Ok(watch) => panic!("{}", watch.status()),
                Err(e) => Err(e.to_string()),
            },
        };
        match opened {
            Ok(connection) => {
                held.push(connection);
                assert!(held.len() < 4, "a fourth connection beside the pooled one was let in");
            }
            Err(e) => break e,
        }
    };
    assert!(held.len() >= 2, "two sockets fit beside the pooled connection: {refused}");
    // The pooled connection is still served; a held one closing makes room.
    let metrics = node.client.get(format!("{}/metrics", node.url)).send().await.unwrap();
    assert_eq!(metrics.status(), 200);
    let text = metrics.text().await.unwrap();
    let count: f64 = text.lines().find_map(|l| l.strip_prefix("tern_connections_refused_total ")).expect("the metric").parse().unwrap();
    assert!(count >= 1.0, "{count}");
    drop(held.remove(0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match fresh().get(format!("{}/healthz", node.url)).send().await {
            Ok(response) if response.status() == 200 => break,
            other => assert!(tokio::time::Instant::now() < deadline, "no room after a connection closed: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
