//! Subscriptions against a real node over real HTTP (SSE) and WebSocket
//! clients: every change in log order with positions, resume without loss or
//! repetition (from the ring and from the log), snapshots, resets when
//! history is gone, slow consumers in both modes, and thousands of
//! subscribers on one node.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::watch::{offsets_of, Change, Sse, Truth};
use common::Tern;
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

async fn serve(data: &std::path::Path, extra: &[&str]) -> Tern {
    let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap(), "--namespace", "w:4"];
    args.extend_from_slice(extra);
    Tern::spawn(&args, data).await
}

fn watch_url(t: &Tern, query: &str) -> String {
    format!("{}/v1/ns/w/watch?{query}", t.url)
}

fn change(kind: &str, pk: &str, sk: &str, value: Value, version: u64) -> Change {
    Change { kind: kind.into(), pk: pk.into(), sk: sk.into(), value, version }
}

/// One random write through the API; records what applied in `truth`.
async fn random_write(t: &Tern, truth: &Mutex<Truth>, n: u64) {
    let (pk, sk) = {
        let mut rng = rand::rng();
        (format!("p{}", rng.random_range(0..12)), format!("s{}", rng.random_range(0..4)))
    };
    let choice = rand::rng().random_range(0..10);
    let (status, body) = match choice {
        0..=4 => t.send(t.client.put(t.kv_url("w", &pk, Some(&sk))).json(&json!({ "n": n }))).await,
        5 | 6 => t.send(t.client.delete(t.kv_url("w", &pk, Some(&sk)))).await,
        7 => {
            let url = format!("{}?if_version=999999999", t.kv_url("w", &pk, Some(&sk)));
            let (status, body) = t.send(t.client.put(url).json(&json!("never"))).await;
            assert_eq!(status, 409, "a failed condition: {body}");
            return;
        }
        _ => {
            let ops = json!([
                {"op": "put", "pk": pk, "sk": "b1", "value": n},
                {"op": "delete", "pk": pk, "sk": sk},
                {"op": "put", "pk": pk, "sk": "b2", "value": [n, n]},
            ]);
            t.send(t.client.post(format!("{}/v1/ns/w/batch", t.url)).json(&json!({ "ops": ops }))).await
        }
    };
    assert_eq!(status, 200, "{body}");
    let version = body["version"].as_u64().unwrap();
    let partition = *offsets_of(body["position"].as_str().unwrap()).keys().next().unwrap();
    let changes = match choice {
        0..=4 => vec![change("put", &pk, &sk, json!({ "n": n }), version)],
        5 | 6 => vec![change("delete", &pk, &sk, Value::Null, version)],
        _ => vec![
            change("put", &pk, "b1", json!(n), version),
            change("delete", &pk, &sk, Value::Null, version),
            change("put", &pk, "b2", json!([n, n]), version),
        ],
    };
    truth.lock().record(partition, version, changes);
}

/// Reads a subscription, dropping the connection after a random number of
/// events and resuming from the last id, until its cursor reaches `end` (once
/// `done`). Returns the changes received, per partition, in arrival order.
async fn flaky_subscriber(
    t: &Tern,
    client: &reqwest::Client,
    query: &str,
    start: String,
    done: Arc<std::sync::atomic::AtomicBool>,
    truth: Arc<Mutex<Truth>>,
) -> (BTreeMap<u32, Vec<Change>>, usize) {
    let mut received: BTreeMap<u32, Vec<Change>> = BTreeMap::new();
    let mut last_id = start;
    let mut reconnects = 0;
    loop {
        let mut sse = Sse::connect(client, &watch_url(t, query), Some(&last_id)).await;
        reconnects += 1;
        // Drop the connection after a random number of events (progress included).
        let budget = rand::rng().random_range(1..40);
        let mut seen = 0;
        while seen < budget {
            let Some(event) = sse.next(Duration::from_millis(300)).await else { break };
            match event.event.as_str() {
                "put" | "delete" => {
                    let id = event.id.clone().expect("changes carry ids outside snapshots");
                    let change = Change::from_event(&event);
                    let p = tern::partitioner::partition_of(&change.pk, 4);
                    received.entry(p).or_default().push(change);
                    last_id = id;
                    seen += 1;
                }
                "progress" => {
                    last_id = event.id.unwrap();
                    seen += 1;
                }
                "cancel" => {
                    last_id = event.json()["position"].as_str().unwrap().to_string();
                    break;
                }
                "keep-alive" => {}
                other => panic!("unexpected event {other}: {event:?}"),
            }
        }
        drop(sse);
        if done.load(std::sync::atomic::Ordering::SeqCst) {
            let end = truth.lock().end(4);
            let at = offsets_of(&last_id);
            if at.iter().all(|(p, o)| *o >= end[p]) {
                return (received, reconnects);
            }
        }
        let pause = rand::rng().random_range(0..20);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// `client` carries the subscriptions: HTTP/1.1 (a connection each, closed
/// to disconnect) or HTTP/2 (streams of one connection, reset to disconnect).
async fn no_loss_no_duplicates(t: Tern, client: reqwest::Client) {
    let truth = Arc::new(Mutex::new(Truth::default()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = Arc::new(t);
    let p3 = tern::partitioner::partition_of("p3", 4);
    let p5 = tern::partitioner::partition_of("p5", 4);
    let subscribers = [
        ("mode=log".to_string(), "w:0:0,1:0,2:0,3:0".to_string()),
        ("pk=p3&mode=log".to_string(), format!("w:{p3}:0")),
        ("pk=p5&prefix=b&mode=log".to_string(), format!("w:{p5}:0")),
    ];
    let mut readers = Vec::new();
    for (query, start) in subscribers.clone() {
        let (t, client, done, truth) = (t.clone(), client.clone(), done.clone(), truth.clone());
        readers.push(tokio::spawn(async move { flaky_subscriber(&t, &client, &query, start, done, truth).await }));
    }
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let (t, truth) = (t.clone(), truth.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..600 {
                random_write(&t, &truth, w * 1_000_000 + i).await;
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let filters: [Box<dyn Fn(&str, &str) -> bool>; 3] =
        [Box::new(|_, _| true), Box::new(|pk, _| pk == "p3"), Box::new(|pk, sk| pk == "p5" && sk.starts_with('b'))];
    let mut total_reconnects = 0;
    for ((reader, filter), (query, _)) in readers.into_iter().zip(filters).zip(subscribers) {
        let (received, reconnects) = tokio::time::timeout(Duration::from_secs(120), reader).await.expect("subscriber finishes").unwrap();
        let expected = truth.lock().expected(filter);
        assert!(reconnects >= 2, "{query}: the subscriber resumed {reconnects} times");
        total_reconnects += reconnects;
        for (p, want) in &expected {
            let got = received.get(p).cloned().unwrap_or_default();
            assert_eq!(got.len(), want.len(), "{query}: partition {p}: received {} changes, the log has {}", got.len(), want.len());
            assert_eq!(&got, want, "{query}: partition {p} differs from the log");
        }
        assert_eq!(received.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "{query}");
    }
    assert!(total_reconnects > 20, "subscribers resumed {total_reconnects} times in all");
    // Every subscription a subscriber left has ended on the node.
    let deadline = std::time::Instant::now() + WAIT;
    while watch_subscribers(&t).await != 0 {
        assert!(std::time::Instant::now() < deadline, "{} subscriptions still open", watch_subscribers(&t).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The node's `tern_watch_subscribers` gauge.
async fn watch_subscribers(t: &Tern) -> u64 {
    let text = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with("tern_watch_subscribers ")).expect("the gauge is exported");
    line["tern_watch_subscribers ".len()..].trim().parse().unwrap()
}

/// A client that speaks HTTP/2 with prior knowledge (h2c), as a proxy or a
/// gRPC-style client would; browsers reach the same path through TLS + ALPN.
fn h2_client() -> reqwest::Client {
    reqwest::Client::builder().http2_prior_knowledge().build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_subscribers_get_exactly_the_log_replayed_from_ring_and_log() {
    let dir = tempfile::tempdir().unwrap();
    // A tiny ring: most resumes read history back from the log.
    let t = serve(dir.path(), &["--watch-ring-events-max", "16", "--watch-progress-ms", "50"]).await;
    let client = t.client.clone();
    no_loss_no_duplicates(t, client).await;
}

/// The same over HTTP/2: every subscription a stream of one connection,
/// reset by the client to disconnect (the path `api/h2c.rs` serves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_subscribers_over_http2_get_exactly_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path(), &["--watch-ring-events-max", "16", "--watch-progress-ms", "50"]).await;
    no_loss_no_duplicates(t, h2_client()).await;
}

/// Over HTTP/2 a watch is a stream of the client's connection: errors are
/// answered on it with their status, events arrive on every stream, a
/// stream the client resets ends its subscription then (not at its next
/// message), and a stopping node cancels the rest with `shutting_down`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_streams_of_an_http2_connection() {
    let dir = tempfile::tempdir().unwrap();
    // Quiet subscriptions send nothing for ten minutes: only the reset can end one.
    let mut t = serve(dir.path(), &["--watch-progress-ms", "600000", "--watch-keep-alive-ms", "600000"]).await;
    let h2 = h2_client();
    for (path, status, code) in [("/v1/ns/w/watch?mode=fast", 400, "invalid_parameter"), ("/v1/ns/nope/watch", 404, "namespace_not_found")] {
        let response = h2.get(format!("{}{path}", t.url)).send().await.unwrap();
        assert_eq!((response.version(), response.status().as_u16()), (reqwest::Version::HTTP_2, status), "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(common::error_code(&body), code, "{path}: {body}");
    }
    // Three watches on one connection; the namespace percent-encoded in one.
    let mut one_pk = Sse::connect(&h2, &watch_url(&t, "pk=a"), None).await;
    let mut everything = Sse::connect(&h2, &watch_url(&t, ""), None).await;
    let mut encoded = Sse::connect(&h2, &format!("{}/v1/ns/%77/watch?pk=a&sk=x", t.url), None).await;
    for sse in [&mut one_pk, &mut everything, &mut encoded] {
        assert_eq!(sse.next(WAIT).await.unwrap().event, "progress", "from=now starts with the position");
    }
    assert_eq!(watch_subscribers(&t).await, 3);
    let (status, put) = t.send(t.client.put(t.kv_url("w", "a", Some("x"))).json(&json!({"v": 1}))).await;
    assert_eq!(status, 200, "{put}");
    for sse in [&mut one_pk, &mut everything, &mut encoded] {
        let event = sse.next_change(WAIT).await.unwrap();
        assert_eq!((event.event.as_str(), event.json()), ("put", json!({"pk": "a", "sk": "x", "value": {"v": 1}, "version": put["version"]})));
    }
    // Dropping a response resets its stream; the connection and the other watches stay.
    drop(one_pk);
    let deadline = std::time::Instant::now() + WAIT;
    while watch_subscribers(&t).await != 2 {
        assert!(std::time::Instant::now() < deadline, "the reset stream's subscription did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The node stops: the open watches are cancelled, with a position to resume from.
    assert!(t.terminate().success());
    for sse in [&mut everything, &mut encoded] {
        let cancel = sse.next(WAIT).await.expect("a cancel before the stream ends");
        assert_eq!((cancel.event.as_str(), cancel.json()["reason"].as_str()), ("cancel", Some("shutting_down")), "{cancel:?}");
        assert!(cancel.json()["position"].as_str().is_some(), "{cancel:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_subscribers_get_exactly_the_log_on_kafka() {
    let Ok(bootstrap) = std::env::var("TERN_TEST_KAFKA") else {
        panic!("TERN_TEST_KAFKA must name a Kafka broker: run scripts/test.sh, or scripts/kafka.sh start and export it")
    };
    let dir = tempfile::tempdir().unwrap();
    let log = format!("kafka://{bootstrap}");
    let prefix = format!("t{}.", rand::random::<u32>());
    let args = ["--log", &log, "--kafka-topic-prefix", &prefix, "--group", "watch", "--watch-ring-events-max", "16", "--watch-progress-ms", "50"];
    let t = serve(dir.path(), &args).await;
    let client = t.client.clone();
    no_loss_no_duplicates(t, client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_carry_positions_and_resume_inside_a_mutation() {
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path(), &[]).await;
    let mut all = Sse::connect(&t.client, &watch_url(&t, ""), None).await;
    let start = all.next(WAIT).await.unwrap();
    assert_eq!(start.event, "progress", "from=now starts with the position");
    let mut record = Sse::connect(&t.client, &watch_url(&t, "pk=a&sk=x"), None).await;
    record.next(WAIT).await.unwrap();
    let (status, put) = t.send(t.client.put(t.kv_url("w", "a", Some("x"))).json(&json!({"v": 1}))).await;
    assert_eq!(status, 200, "{put}");
    let ops = json!([{"op": "put", "pk": "a", "sk": "y", "value": 2}, {"op": "delete", "pk": "a", "sk": "x"}]);
    let (status, batch) = t.send(t.client.post(format!("{}/v1/ns/w/batch", t.url)).json(&json!({ "ops": ops }))).await;
    assert_eq!(status, 200, "{batch}");

    let e1 = all.next_change(WAIT).await.unwrap();
    assert_eq!((e1.event.as_str(), e1.json()), ("put", json!({"pk": "a", "sk": "x", "value": {"v": 1}, "version": put["version"]})));
    let p = *offsets_of(put["position"].as_str().unwrap()).keys().next().unwrap();
    assert_eq!(offsets_of(e1.id.as_deref().unwrap())[&p], offsets_of(put["position"].as_str().unwrap())[&p]);
    let e2 = all.next_change(WAIT).await.unwrap();
    let e3 = all.next_change(WAIT).await.unwrap();
    assert_eq!((e2.event.as_str(), e3.event.as_str()), ("put", "delete"));
    assert!(e2.id.as_deref().unwrap().contains(&format!("{p}:{}.1", batch["version"])), "inside the mutation: {:?}", e2.id);
    assert_eq!(offsets_of(e3.id.as_deref().unwrap())[&p], offsets_of(batch["position"].as_str().unwrap())[&p]);
    // The record subscription sees its record's put and delete only.
    let r1 = record.next_change(WAIT).await.unwrap();
    let r2 = record.next_change(WAIT).await.unwrap();
    assert_eq!((r1.event.as_str(), r2.event.as_str()), ("put", "delete"));
    assert_eq!(r2.json()["value"], Value::Null);

    // Resuming inside the batch gives exactly its rest; resuming before it gives all of it.
    let mut resumed = Sse::connect(&t.client, &watch_url(&t, ""), e2.id.as_deref()).await;
    assert_eq!(resumed.next_change(WAIT).await.unwrap(), e3);
    let mut resumed = Sse::connect(&t.client, &watch_url(&t, ""), e1.id.as_deref()).await;
    assert_eq!(resumed.next_change(WAIT).await.unwrap(), e2);
    assert_eq!(resumed.next_change(WAIT).await.unwrap(), e3);
    let from = format!("pk=a&from={}", urlencode(e1.id.as_deref().unwrap()));
    let mut by_query = Sse::connect(&t.client, &watch_url(&t, &from), None).await;
    assert_eq!(by_query.next_change(WAIT).await.unwrap().event, "put");

    // After a restart the ring is empty: history comes from the log.
    let mut t = t;
    assert!(t.terminate().success());
    let t = serve(dir.path(), &[]).await;
    let mut replay = Sse::connect(&t.client, &watch_url(&t, ""), start.id.as_deref()).await;
    for want in [&e1, &e2, &e3] {
        assert_eq!(&replay.next_change(WAIT).await.unwrap(), want);
    }
}

fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_watch_requests_get_precise_errors() {
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path(), &["--watch-subscribers-max", "1"]).await;
    let long_pk = "k".repeat(1025);
    let cases: Vec<(String, u16, &str)> = vec![
        ("/v1/ns/nope/watch".into(), 404, "namespace_not_found"),
        ("/v1/ns/w/watch?prefix=a".into(), 400, "invalid_parameter"),
        ("/v1/ns/w/watch?pk=a&prefix=b&sk=c".into(), 400, "invalid_parameter"),
        ("/v1/ns/w/watch?mode=fast".into(), 400, "invalid_parameter"),
        ("/v1/ns/w/watch?from=yesterday".into(), 400, "invalid_position"),
        ("/v1/ns/w/watch?from=other:0:1".into(), 400, "invalid_position"),
        ("/v1/ns/w/watch?from=w:0:1".into(), 400, "invalid_position"),
        ("/v1/ns/w/watch?from=w:0:1.0,1:0,2:0,3:0".into(), 400, "invalid_position"),
        ("/v1/ns/w/watch?colour=red".into(), 400, "invalid_parameter"),
        // A position from the future (beyond the log's end) would silently skip
        // every event up to it. Accepted before the fix.
        ("/v1/ns/w/watch?from=w:0:1000000,1:0,2:0,3:0".into(), 400, "invalid_position"),
        ("/v1/ns/w/watch?pk=a&from=w:0:99999,1:99999,2:99999,3:99999".into(), 400, "invalid_position"),
        (format!("/v1/ns/w/watch?pk={long_pk}"), 413, "key_too_large"),
    ];
    for (path, status, code) in cases {
        // An accepted watch would be a stream that never ends: bounded.
        let (got, body) = tokio::time::timeout(WAIT, t.get_json(&path)).await.unwrap_or_else(|_| panic!("{path}: accepted, not refused"));
        assert_eq!((got, common::error_code(&body)), (status, code), "{path}: {body}");
    }
    let (status, body) = t.send(t.client.get(watch_url(&t, "")).header("Last-Event-ID", "garbage")).await;
    assert_eq!((status, common::error_code(&body)), (400, "invalid_position"));
    // The node's bound on subscriptions: the second one is refused, and a
    // slot frees when its subscriber leaves.
    let first = Sse::connect(&t.client, &watch_url(&t, ""), None).await;
    let (status, body) = t.get_json("/v1/ns/w/watch").await;
    assert_eq!((status, common::error_code(&body)), (503, "too_many_subscribers"), "{body}");
    drop(first);
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let response = t.client.get(watch_url(&t, "")).send().await.unwrap();
        if response.status() == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the slot was never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_websocket_messages_get_precise_errors_and_the_connection_stays() {
    use tokio_tungstenite::tungstenite::Message as Ws;
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path(), &[]).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/v1/ws", t.url.replace("http://", "ws://"))).await.unwrap();
    async fn next_error(ws: &mut (impl futures::Stream<Item = Result<Ws, tokio_tungstenite::tungstenite::Error>> + Unpin)) -> Value {
        loop {
            if let Ws::Text(text) = tokio::time::timeout(WAIT, ws.next()).await.expect("a reply").unwrap().unwrap() {
                let v: Value = serde_json::from_str(&text).unwrap();
                if v["type"] == "error" {
                    return v;
                }
            }
        }
    }
    let long_id = "i".repeat(129);
    for (message, code) in [
        (json!({"type": "sub", "id": "", "ns": "w"}), "invalid_message"),
        (json!({"type": "sub", "id": long_id, "ns": "w"}), "invalid_message"),
        (json!({"type": "sub", "id": "a", "ns": "w", "mode": "fast"}), "invalid_parameter"),
        (json!({"type": "sub", "id": "a", "ns": "w", "colour": "red"}), "invalid_message"),
        (json!({"type": "unsub", "id": "never"}), "unknown_subscription"),
    ] {
        ws.send(Ws::Text(message.to_string().into())).await.unwrap();
        assert_eq!(next_error(&mut ws).await["error"]["code"], code, "{message}");
    }
    ws.send(Ws::Binary(vec![1, 2, 3].into())).await.unwrap();
    assert_eq!(next_error(&mut ws).await["error"]["code"], "invalid_message");
    // At most 1,000 subscriptions on one connection.
    for i in 0..1000 {
        ws.send(Ws::Text(json!({"type": "sub", "id": format!("s{i}"), "ns": "w", "pk": format!("k{i}")}).to_string().into())).await.unwrap();
    }
    ws.send(Ws::Text(json!({"type": "sub", "id": "one-too-many", "ns": "w"}).to_string().into())).await.unwrap();
    let error = next_error(&mut ws).await;
    assert_eq!((error["id"].as_str(), error["error"]["code"].as_str()), (Some("one-too-many"), Some("too_many_subscriptions")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_snapshot_is_consistent_with_its_position_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let t = Arc::new(serve(dir.path(), &[]).await);
    let truth = Arc::new(Mutex::new(Truth::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..2u64 {
        let (t, truth, stop) = (t.clone(), truth.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                random_write(&t, &truth, w * 1_000_000 + i).await;
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut views = Vec::new();
    for query in ["from=snapshot", "pk=p3&from=snapshot", "pk=p5&prefix=b&from=snapshot"] {
        views.push((query, Sse::connect(&t.client, &watch_url(&t, query), None).await, BTreeMap::new()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Build each view: snapshot, then changes, while writers go on.
    for (query, sse, view) in views.iter_mut() {
        let begin = sse.next_change(WAIT).await.unwrap();
        assert_eq!(begin.event, "snapshot", "{query}");
        loop {
            let e = sse.next_change(WAIT).await.unwrap();
            if e.event == "synced" {
                assert_eq!(e.id.as_deref(), e.json()["position"].as_str());
                break;
            }
            assert_eq!((e.event.as_str(), e.id.as_ref()), ("put", None), "{query}: snapshot records are puts without ids");
            let c = Change::from_event(&e);
            view.insert((c.pk, c.sk), c.value);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }
    let end = truth.lock().end(4);
    let state = truth.lock().state();
    let filters: [Box<dyn Fn(&str, &str) -> bool>; 3] =
        [Box::new(|_, _| true), Box::new(|pk, _| pk == "p3"), Box::new(|pk, sk| pk == "p5" && sk.starts_with('b'))];
    for ((query, sse, view), filter) in views.iter_mut().zip(filters) {
        // Apply changes until the subscriber's position covers every write.
        loop {
            let e = sse.next(WAIT).await.unwrap_or_else(|| panic!("{query}: stream ended"));
            match e.event.as_str() {
                "put" => {
                    let c = Change::from_event(&e);
                    view.insert((c.pk, c.sk), c.value);
                }
                "delete" => {
                    let c = Change::from_event(&e);
                    view.remove(&(c.pk, c.sk));
                }
                "progress" | "keep-alive" => {}
                other => panic!("{query}: unexpected {other}"),
            }
            if let Some(id) = &e.id {
                if offsets_of(id).iter().all(|(p, o)| *o >= end[p]) && !id.contains('.') {
                    break;
                }
            }
        }
        let want: BTreeMap<_, _> = state.iter().filter(|((pk, sk), _)| filter(pk, sk)).map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(*view, want, "{query}: snapshot + changes = the final state");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_gone_resets_with_the_full_state() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--log-segment-bytes",
        "1048576",
        "--log-retention-bytes",
        "1",
        "--store-fsync-interval-ms",
        "100",
        "--log-retention-check-ms",
        "100",
        "--watch-ring-events-max",
        "4",
    ];
    let t = serve(dir.path(), &args).await;
    let big = "x".repeat(100 * 1024);
    // `wait=applied`: a plain write answers once the log has it, and the
    // reset below must find every write applied (on a loaded machine an
    // apply loop can lag the retention wait).
    let applied = |pk: &str| format!("{}?wait=applied", t.kv_url("w", pk, Some("v")));
    for i in 0..30 {
        let (status, body) = t.send(t.client.put(applied(&format!("k{i}"))).json(&json!({ "i": i, "pad": big }))).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = t.send(t.client.delete(applied("k0"))).await;
    assert_eq!(status, 200);
    let first_segment = dir.path().join("log").join("wal").join(format!("{:020}.seg", 0));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while first_segment.exists() {
        assert!(std::time::Instant::now() < deadline, "retention did not delete the first segment");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut sse = Sse::connect(&t.client, &watch_url(&t, ""), Some("w:0:0,1:0,2:0,3:0")).await;
    let reset = sse.next_change(WAIT).await.unwrap();
    assert_eq!(reset.event, "reset", "history from offset 0 is gone: {reset:?}");
    assert_eq!(reset.json()["reason"], "history_gone");
    let mut view = BTreeMap::new();
    loop {
        let e = sse.next_change(WAIT).await.unwrap();
        if e.event == "synced" {
            break;
        }
        let c = Change::from_event(&e);
        assert_eq!(c.value["i"].as_u64().map(|i| format!("k{i}")), Some(c.pk.clone()));
        view.insert(c.pk, c.version);
    }
    let want: Vec<String> = (1..30).map(|i| format!("k{i}")).collect();
    assert_eq!(view.keys().cloned().collect::<std::collections::BTreeSet<_>>(), want.into_iter().collect(), "every live record, not the deleted one");
    // Live changes follow the reset.
    t.send(t.client.put(t.kv_url("w", "after", Some("v"))).json(&json!(1))).await;
    let e = sse.next_change(WAIT).await.unwrap();
    assert_eq!((e.event.as_str(), e.json()["pk"].as_str()), ("put", Some("after")));
}

/// Writes `batches` batch calls of 100 records with ~2 KiB values to pk `slow-<i % 8>`.
async fn write_burst(t: &Tern, batches: usize) -> Truth {
    let mut truth = Truth::default();
    let pad = "y".repeat(2048);
    for b in 0..batches {
        let pk = format!("slow-{}", b % 8);
        let ops: Vec<Value> =
            (0..100).map(|i| json!({"op": "put", "pk": pk, "sk": format!("s{}", i % 50), "value": {"b": b, "i": i, "pad": pad}})).collect();
        let (status, body) = t.send(t.client.post(format!("{}/v1/ns/w/batch", t.url)).json(&json!({ "ops": ops }))).await;
        assert_eq!(status, 200, "{body}");
        let version = body["version"].as_u64().unwrap();
        let partition = *offsets_of(body["position"].as_str().unwrap()).keys().next().unwrap();
        let changes =
            ops.iter().map(|op| change("put", op["pk"].as_str().unwrap(), op["sk"].as_str().unwrap(), op["value"].clone(), version)).collect();
        truth.record(partition, version, changes);
    }
    truth
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumers_are_conflated_or_cancelled_and_never_slow_the_others() {
    slow_consumers(|t| t.client.clone()).await;
}

/// The same over one HTTP/2 connection: the slow streams' windows shut
/// (hyper's client opens 2 MiB per stream and reads a stream only as its
/// body is read), their sessions are held back, and the fast stream on the
/// same connection still gets everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_streams_of_an_http2_connection_are_conflated_or_cancelled_and_never_slow_the_others() {
    slow_consumers(|_| h2_client()).await;
}

async fn slow_consumers(client_for: impl Fn(&Tern) -> reqwest::Client) {
    let dir = tempfile::tempdir().unwrap();
    // 2,000 events of slack: 20 batch calls, so a reader that keeps reading
    // is never cut even on a loaded machine; one that reads nothing is
    // (its socket buffers or its stream's window hold several thousand more).
    let t = serve(dir.path(), &["--watch-queue-events-max", "2000", "--watch-progress-ms", "100"]).await;
    let client = client_for(&t);
    let mut fast = Sse::connect(&client, &watch_url(&t, "mode=log"), None).await;
    let fast_start = fast.next(WAIT).await.unwrap().id.unwrap();
    let mut slow_log = Sse::connect(&client, &watch_url(&t, "mode=log"), None).await;
    let slow_log_start = slow_log.next(WAIT).await.unwrap().id.unwrap();
    let mut slow_state = Sse::connect(&client, &watch_url(&t, "mode=state"), None).await;
    slow_state.next(WAIT).await.unwrap();
    // The fast subscriber reads everything while the slow ones read nothing.
    let fast_reader = tokio::spawn(async move {
        let mut got = 0usize;
        while got < 400 * 100 {
            let e = fast.next_change(WAIT).await.expect("the fast subscriber keeps receiving");
            assert_eq!(e.event, "put", "the fast subscriber is never cut: {e:?}");
            got += 1;
        }
        got
    });
    let truth = write_burst(&t, 400).await;
    assert_eq!(tokio::time::timeout(Duration::from_secs(120), fast_reader).await.unwrap().unwrap(), 40_000);
    let _ = fast_start;

    // mode=log: cancelled with the position it reached; resuming from there gives exactly the rest.
    let mut received: Vec<Change> = Vec::new();
    let cancel_position = loop {
        let e = slow_log.next(WAIT).await.expect("the slow log subscriber is cancelled");
        match e.event.as_str() {
            "put" => {
                received.push(Change::from_event(&e));
                assert!(received.len() < 40_000, "the slow log subscriber got every event: it was never cut");
            }
            "cancel" => {
                assert_eq!(e.json()["reason"], "slow_consumer");
                break e.json()["position"].as_str().unwrap().to_string();
            }
            "keep-alive" | "progress" => {}
            other => panic!("unexpected {other}"),
        }
    };
    assert!(received.len() < 40_000, "it was cut before the end");
    assert_ne!(cancel_position, slow_log_start);
    let mut resumed = Sse::connect(&client, &watch_url(&t, "mode=log"), Some(&cancel_position)).await;
    while received.len() < 40_000 {
        let e = resumed.next_change(WAIT).await.expect("the rest is replayed");
        received.push(Change::from_event(&e));
    }
    let expected: Vec<Change> = truth.expected(|_, _| true).into_values().flatten().collect();
    let mut got_sorted = received.clone();
    got_sorted.sort_by_key(|c| (tern::partitioner::partition_of(&c.pk, 4), c.version));
    let mut want_sorted = expected.clone();
    want_sorted.sort_by_key(|c| (tern::partitioner::partition_of(&c.pk, 4), c.version));
    assert_eq!(got_sorted, want_sorted, "cancel + resume = the log exactly");

    // mode=state: conflated or reset, and the final state is exact.
    let state = truth.state();
    let mut view: BTreeMap<(String, String), Value> = BTreeMap::new();
    let end = truth.end(4);
    let mut conflated_or_reset = false;
    loop {
        let e = slow_state.next(WAIT).await.expect("the slow state subscriber catches up");
        match e.event.as_str() {
            "put" => {
                conflated_or_reset |= e.id.is_none();
                let c = Change::from_event(&e);
                view.insert((c.pk, c.sk), c.value);
            }
            "reset" => {
                conflated_or_reset = true;
                view.clear();
            }
            "synced" | "progress" | "keep-alive" => {}
            other => panic!("unexpected {other}"),
        }
        if let Some(id) = &e.id {
            if offsets_of(id).iter().all(|(p, o)| *o >= end[p]) && !id.contains('.') {
                break;
            }
        }
    }
    assert!(conflated_or_reset, "the slow state subscriber was conflated or reset");
    assert_eq!(view, state, "the slow state subscriber ends with the exact state");
}

/// Resident memory of a process, from /proc.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_subscribers_each_receive_every_event() {
    const SUBSCRIBERS: usize = 2000;
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path(), &[]).await;
    let pid = t.child.as_ref().unwrap().id();
    let before = rss_bytes(pid);
    let mut streams = Vec::with_capacity(SUBSCRIBERS);
    for i in 0..SUBSCRIBERS {
        // Every tenth watches the whole namespace; the others one of 50 pks.
        let query = if i % 10 == 0 { String::new() } else { format!("pk=pk{}", i % 50) };
        let client = reqwest::Client::new();
        let mut sse = Sse::connect(&client, &watch_url(&t, &query), None).await;
        assert_eq!(sse.next(WAIT).await.unwrap().event, "progress");
        streams.push((i, sse, client));
    }
    let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("tern_watch_subscribers {SUBSCRIBERS}")), "the gauge counts them");
    let rss_per_subscriber = rss_bytes(pid).saturating_sub(before) / SUBSCRIBERS as u64;
    assert!(rss_per_subscriber < 64 * 1024, "{rss_per_subscriber} bytes per subscriber");
    for round in 0..3 {
        for k in 0..50 {
            let (status, _) = t.send(t.client.put(t.kv_url("w", &format!("pk{k}"), Some("s"))).json(&json!({"round": round}))).await;
            assert_eq!(status, 200);
        }
    }
    let results = futures::future::join_all(streams.into_iter().map(|(i, mut sse, _client)| async move {
        let want = if i % 10 == 0 { 150 } else { 3 };
        let mut got = Vec::new();
        while got.len() < want {
            let Some(e) = sse.next_change(WAIT).await else { break };
            got.push(Change::from_event(&e));
        }
        (i, want, got)
    }))
    .await;
    for (i, want, got) in results {
        assert_eq!(got.len(), want, "subscriber {i}");
        if i % 10 != 0 {
            let rounds: Vec<u64> = got.iter().map(|c| c.value["round"].as_u64().unwrap()).collect();
            assert_eq!(rounds, vec![0, 1, 2], "subscriber {i} in order");
            assert!(got.iter().all(|c| c.pk == format!("pk{}", i % 50)));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_multiplexes_subscriptions_with_the_same_events_and_positions() {
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path(), &[]).await;
    let ws_url = format!("{}/v1/ws", t.url.replace("http://", "ws://"));
    let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
    use tokio_tungstenite::tungstenite::Message as Ws;
    async fn recv(ws: &mut (impl futures::Stream<Item = Result<Ws, tokio_tungstenite::tungstenite::Error>> + Unpin)) -> Value {
        loop {
            match tokio::time::timeout(WAIT, ws.next()).await.expect("a message").unwrap().unwrap() {
                Ws::Text(text) => {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    if v["type"] != "keep-alive" {
                        return v;
                    }
                }
                _ => continue,
            }
        }
    }
    ws.send(Ws::Text(json!({"type": "sub", "id": "all", "ns": "w"}).to_string().into())).await.unwrap();
    assert_eq!(recv(&mut ws).await, json!({"type": "subscribed", "id": "all"}));
    let start = recv(&mut ws).await;
    assert_eq!(start["type"], "progress");
    ws.send(Ws::Text(json!({"type": "sub", "id": "a", "ns": "w", "pk": "a", "from": "snapshot"}).to_string().into())).await.unwrap();
    ws.send(Ws::Text(json!({"type": "sub", "id": "a", "ns": "w"}).to_string().into())).await.unwrap();
    ws.send(Ws::Text(json!({"type": "sub", "id": "x", "ns": "nope"}).to_string().into())).await.unwrap();
    ws.send(Ws::Text("not json".into())).await.unwrap();
    let mut replies = Vec::new();
    for _ in 0..6 {
        replies.push(recv(&mut ws).await);
    }
    let has = |pred: &dyn Fn(&Value) -> bool| replies.iter().any(pred);
    assert!(has(&|r| r["type"] == "subscribed" && r["id"] == "a"));
    assert!(has(&|r| r["type"] == "snapshot" && r["id"] == "a"));
    assert!(has(&|r| r["type"] == "synced" && r["id"] == "a"));
    assert!(has(&|r| r["type"] == "error" && r["id"] == "a" && r["error"]["code"] == "duplicate_subscription"));
    assert!(has(&|r| r["type"] == "error" && r["id"] == "x" && r["error"]["code"] == "namespace_not_found"));
    assert!(has(&|r| r["type"] == "error" && r["id"].is_null() && r["error"]["code"] == "invalid_message"));

    let mut sse = Sse::connect(&t.client, &watch_url(&t, ""), start["position"].as_str()).await;
    let (status, _) = t.send(t.client.put(t.kv_url("w", "a", Some("k"))).json(&json!({"v": 1}))).await;
    assert_eq!(status, 200);
    let mut got = BTreeMap::new();
    while got.len() < 2 {
        let m = recv(&mut ws).await;
        assert_eq!(m["type"], "put", "{m}");
        got.insert(m["id"].as_str().unwrap().to_string(), m);
    }
    let sse_event = sse.next_change(WAIT).await.unwrap();
    assert_eq!(got["all"]["position"].as_str(), sse_event.id.as_deref(), "the same position as over SSE");
    assert_eq!(got["all"]["value"], json!({"v": 1}));
    assert_eq!(got["a"]["version"], sse_event.json()["version"]);

    ws.send(Ws::Text(json!({"type": "unsub", "id": "all"}).to_string().into())).await.unwrap();
    assert_eq!(recv(&mut ws).await, json!({"type": "unsubscribed", "id": "all"}));
    t.send(t.client.delete(t.kv_url("w", "a", Some("k")))).await;
    let m = recv(&mut ws).await;
    assert_eq!((m["type"].as_str(), m["id"].as_str()), (Some("delete"), Some("a")), "only the remaining subscription: {m}");

    // The connection's sessions live as long as it does: closing it frees
    // every slot it held (the SSE subscriber above keeps its own).
    ws.close(None).await.unwrap();
    let gauge_reads = |n: usize| {
        let (client, url) = (t.client.clone(), format!("{}/metrics", t.url));
        async move { client.get(url).send().await.unwrap().text().await.unwrap().contains(&format!("tern_watch_subscribers {n}\n")) }
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !gauge_reads(1).await {
        assert!(tokio::time::Instant::now() < deadline, "the closed connection's subscriptions were not released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(sse);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_changes_and_stops_after_count() {
    let dir = tempfile::tempdir().unwrap();
    let t = serve(dir.path(), &[]).await;
    t.send(t.client.put(t.kv_url("w", "cfg", Some("a"))).json(&json!(1))).await;
    let url = t.url.clone();
    let watcher =
        tokio::task::spawn_blocking(move || common::cli(&url, &["watch", "--ns", "w", "cfg", "--from", "snapshot", "--count", "3", "--json"]));
    // The snapshot's put counts as one; two more changes end it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    t.send(t.client.put(t.kv_url("w", "cfg", Some("b"))).json(&json!(2))).await;
    t.send(t.client.delete(t.kv_url("w", "cfg", Some("a")))).await;
    let (ok, stdout, stderr) = tokio::time::timeout(WAIT, watcher).await.unwrap().unwrap();
    assert!(ok, "{stderr}");
    let events: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).filter(|k| *k != "progress").collect();
    assert_eq!(kinds, vec!["snapshot", "put", "synced", "put", "delete"], "{stdout}");
    let (ok, _, stderr) = common::cli(&t.url, &["watch", "--ns", "nope"]);
    assert!(!ok && stderr.contains("namespace_not_found"), "{stderr}");
}
