//! A record's history (`GET /v1/ns/{ns}/history`, `tern history`): the
//! namespace's `history_max` last versions of each record, with the
//! position, time and writer of each, on real nodes.

use serde_json::{json, Value};

use crate::auth::{create_token, secured};
use crate::common::{self, error_code, Tern};

fn history_url(t: &Tern, ns: &str, query: &str) -> String {
    format!("{}/v1/ns/{ns}/history?{query}", t.url)
}

/// The versions of an answer as (op, value, writer).
fn versions(answer: &Value) -> Vec<(String, Value, String)> {
    answer["versions"]
        .as_array()
        .unwrap_or_else(|| panic!("versions: {answer}"))
        .iter()
        .map(|v| (v["op"].as_str().unwrap().to_string(), v["value"].clone(), v["writer"].as_str().unwrap().to_string()))
        .collect()
}

/// With authentication: each version names the key (or root) that wrote
/// it, its position is the write's, its time the writer's clock; the
/// newest `history_max` are kept; a lower `history_max` trims at the next
/// write and 0 removes what a record had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_keeps_its_last_versions_with_when_and_by_whom() {
    let dir = tempfile::tempdir().unwrap();
    let (t, root) = secured(dir.path(), &[]).await;
    let url = t.url.clone();
    let set_history_max = |n: u64| t.client.put(format!("{url}/v1/ns/app")).bearer_auth(&root).json(&json!({ "history_max": n }));
    let (status, body) = t.send(set_history_max(3)).await;
    assert_eq!((status, &body["history_max"]), (200, &json!(3)), "{body}");
    let (key_id, key) = create_token(&t, &root, json!({"ns": "app", "verbs": ["read", "write"]})).await;
    let before_ms = common::now_ms();
    let mut positions = Vec::new();
    for (token, request) in
        [(&root, Some(json!({"v": 1}))), (&key, Some(json!({"v": 2}))), (&key, None), (&root, Some(json!("three"))), (&key, Some(json!(4)))]
    {
        let target = format!("{url}/v1/ns/app/kv/p1/s?wait=applied");
        let request = match request {
            Some(value) => t.client.put(target).json(&value),
            None => t.client.delete(target),
        };
        let (status, body) = t.send(request.bearer_auth(token)).await;
        assert_eq!(status, 200, "{body}");
        positions.push(body["position"].as_str().unwrap().to_string());
    }
    let (status, answer) = t.send(t.client.get(history_url(&t, "app", "pk=p1&sk=s")).bearer_auth(&key)).await;
    assert_eq!(status, 200, "{answer}");
    let by_key = format!("key:{key_id}");
    assert_eq!(
        versions(&answer),
        vec![("put".into(), json!(4), by_key.clone()), ("put".into(), json!("three"), "root".into()), ("delete".into(), Value::Null, by_key.clone())],
        "the newest three, newest first: {answer}"
    );
    assert_eq!(answer["history_max"], 3);
    let answered: Vec<&str> = answer["versions"].as_array().unwrap().iter().map(|v| v["position"].as_str().unwrap()).collect();
    assert_eq!(answered, [&positions[4], &positions[3], &positions[2]].map(String::as_str), "each version's position is its write's");
    for v in answer["versions"].as_array().unwrap() {
        let time_ms = v["time_ms"].as_u64().unwrap();
        assert!(time_ms >= before_ms && time_ms <= common::now_ms(), "the writer's clock: {v}");
        let offset: u64 = v["position"].as_str().unwrap().rsplit(':').next().unwrap().parse().unwrap();
        assert_eq!(v["version"], offset - 1, "the version is the offset that made it");
    }
    // A limit takes the newest.
    let (_, answer) = t.send(t.client.get(history_url(&t, "app", "pk=p1&sk=s&limit=1")).bearer_auth(&key)).await;
    assert_eq!(versions(&answer), vec![("put".into(), json!(4), by_key.clone())]);
    // A record never written, or of another sk: no versions.
    let (_, answer) = t.send(t.client.get(history_url(&t, "app", "pk=p1")).bearer_auth(&key)).await;
    assert_eq!(versions(&answer), vec![], "{answer}");

    // Reading history takes read on the key; a token of another prefix gets 403.
    let (_, other) = create_token(&t, &root, json!({"ns": "app", "prefix": "q", "verbs": ["read"]})).await;
    let (status, body) = t.send(t.client.get(history_url(&t, "app", "pk=p1&sk=s")).bearer_auth(&other)).await;
    assert_eq!((status, error_code(&body)), (403, "permission_denied"), "{body}");

    // history_max 1: the next write trims the record's history to it.
    assert_eq!(t.send(set_history_max(1)).await.0, 200);
    let (status, _) = t.send(t.client.put(format!("{url}/v1/ns/app/kv/p1/s?wait=applied")).bearer_auth(&key).json(&json!(5))).await;
    assert_eq!(status, 200);
    let (_, answer) = t.send(t.client.get(history_url(&t, "app", "pk=p1&sk=s")).bearer_auth(&key)).await;
    assert_eq!(versions(&answer), vec![("put".into(), json!(5), by_key.clone())], "{answer}");
    // history_max 0: none kept, and the next write removes what was.
    assert_eq!(t.send(set_history_max(0)).await.0, 200);
    let (status, _) = t.send(t.client.put(format!("{url}/v1/ns/app/kv/p1/s?wait=applied")).bearer_auth(&key).json(&json!(6))).await;
    assert_eq!(status, 200);
    let (_, answer) = t.send(t.client.get(history_url(&t, "app", "pk=p1&sk=s")).bearer_auth(&key)).await;
    assert_eq!((versions(&answer), &answer["history_max"]), (vec![], &json!(0)), "{answer}");
}

/// `tern dev`: keys a URL path cannot carry and route words have their
/// history; after a crash the store replays the log and the history reads
/// back exactly as before (the writer's time and name travel in the log
/// entry); the CLI prints it; bad input gets precise errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_survives_a_crash_reads_every_key_and_refuses_bad_input() {
    let data = tempfile::tempdir().unwrap();
    let mut t = Tern::dev(data.path()).await;
    let (status, body) = t.send(t.client.put(format!("{}/v1/ns/default", t.url)).json(&json!({"history_max": 64}))).await;
    assert_eq!((status, &body["history_max"]), (200, &json!(64)), "{body}");
    let keys = [("dot", "."), ("dots", ".."), ("history", "kv"), ("é/日本", ""), ("p", "s")];
    for round in 0..70 {
        for (pk, sk) in keys {
            // A one-op batch: a key a URL path cannot carry travels in the body.
            let ops = json!({"ops": [{"op": "put", "pk": pk, "sk": sk, "value": {"round": round}}]});
            let (status, body) = t.send(t.client.post(format!("{}/v1/ns/default/batch?wait=applied", t.url)).json(&ops)).await;
            assert_eq!(status, 200, "{body}");
        }
    }
    let mut before = Vec::new();
    for (pk, sk) in keys {
        let query = format!("pk={}&sk={}", urlencoding(pk), urlencoding(sk));
        let (status, answer) = t.get_json(&format!("/v1/ns/default/history?{query}")).await;
        assert_eq!(status, 200, "{answer}");
        let rounds: Vec<Value> = answer["versions"].as_array().unwrap().iter().map(|v| v["value"]["round"].clone()).collect();
        assert_eq!(rounds, (6..70).rev().map(|r| json!(r)).collect::<Vec<_>>(), "{pk:?}/{sk:?}: the newest 64, newest first");
        before.push(answer["versions"].clone());
    }

    // To another node, a read says whether its replica serves caught up,
    // "no record" as a value: a node reading the namespace settings at a
    // holder trusts neither answer otherwise. Not said to clients.
    for pk in ["p", "never-written"] {
        let answer = t.client.get(t.kv_url("default", pk, Some("s"))).header("x-tern-forwarded-by", "another-node").send().await.unwrap();
        assert_eq!(answer.headers().get("x-tern-serving").map(|v| v.to_str().unwrap()), Some("1"), "{pk}: {:?}", answer.headers());
        let answer = t.client.get(t.kv_url("default", pk, Some("s"))).send().await.unwrap();
        assert!(!answer.headers().contains_key("x-tern-serving"), "{pk}");
    }

    // A crash: the store reopens at its last durable commit and replays the log.
    t.kill9();
    let t = Tern::dev(data.path()).await;
    t.wait_caught_up("default").await;
    for ((pk, sk), before) in keys.iter().zip(&before) {
        let query = format!("pk={}&sk={}", urlencoding(pk), urlencoding(sk));
        let (_, answer) = t.get_json(&format!("/v1/ns/default/history?{query}")).await;
        assert_eq!(&answer["versions"], before, "{pk:?}/{sk:?}: the same history after replay");
    }

    // The CLI.
    let (ok, out, err) = common::cli(&t.url, &["history", "p", "s", "--limit", "2"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("VERSION  OP   TIME (UTC)"), "{out}");
    assert!(lines[1].contains(" put ") && lines[1].ends_with("{\"round\":69}"), "{out}");
    let (ok, _, err) = common::cli(&t.url, &["--ns", "nope", "history", "p"]);
    assert!(!ok && err.contains("namespace_not_found"), "{err}");
    // `tern ns create` changes an existing namespace of any partition count
    // (review found it sent 16 partitions and was refused for 4).
    let (status, _) = t.send(t.client.put(format!("{}/v1/ns/few", t.url)).json(&json!({"partitions": 4}))).await;
    assert_eq!(status, 201);
    let (ok, out, err) = common::cli(&t.url, &["ns", "create", "few", "--history-max", "3"]);
    assert!(ok && out.contains("partitions 4"), "{out} {err}");
    let (_, described) = t.get_json("/v1/ns/few").await;
    assert_eq!(described["history_max"], 3, "{described}");

    // Bad input.
    let long_pk = "k".repeat(1025);
    for (query, status, code) in [
        ("", 400, "invalid_parameter"),
        ("sk=s", 400, "invalid_parameter"),
        ("pk=p&limit=0", 400, "invalid_parameter"),
        ("pk=p&limit=65", 400, "invalid_parameter"),
        ("pk=p&limit=x", 400, "invalid_parameter"),
        ("pk=p&color=red", 400, "invalid_parameter"),
        ("pk=p&partition=16", 400, "invalid_request"),
        ("pk=p&after=other:0:1", 400, "invalid_position"),
        (&format!("pk={long_pk}"), 413, "key_too_large"),
    ] {
        let (got, body) = t.get_json(&format!("/v1/ns/default/history?{query}")).await;
        assert_eq!((got, error_code(&body)), (status, code), "{query:.40}: {body}");
    }
    let (got, body) = t.get_json("/v1/ns/nope/history?pk=p").await;
    assert_eq!((got, error_code(&body)), (404, "namespace_not_found"), "{body}");
    for bad in [json!({"history_max": 65}), json!({"history_max": -1}), json!({"history_max": "3"})] {
        let (got, body) = t.send(t.client.put(format!("{}/v1/ns/default", t.url)).json(&bad)).await;
        assert_eq!(got, 400, "{bad}: {body}");
    }
    let (_, body) = t.get_json("/v1/ns/default").await;
    assert_eq!(body["history_max"], 64, "a refused change changed nothing");
}

/// Percent-encodes a query value.
fn urlencoding(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}
