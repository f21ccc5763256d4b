//! Procedures over HTTP and the CLI against a real `tern dev` (issue 23):
//! deploy a WebAssembly module, writes run it in their partition's apply
//! loop (records it writes, its outbox, dead letters), every bad input is
//! refused with a clear error and nothing appended, a node killed and
//! restarted goes on from its store, rollback and removal are new versions.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::common::{checkout, cli, error_code, Tern};

const PARTITIONS: u32 = 16;

fn counter_wasm() -> std::path::PathBuf {
    checkout().join("examples/procedures/build/counter.wasm")
}

fn partition_of(pk: &str) -> u32 {
    tern::partitioner::partition_of(pk, PARTITIONS)
}

/// The `count` record each partition's procedure keeps, by partition.
async fn counts(node: &Tern, partitions: &[u32]) -> BTreeMap<u32, Value> {
    let mut found = BTreeMap::new();
    for &p in partitions {
        let (status, body) = node.get_json(&format!("/v1/ns/default/kv/count?partition={p}")).await;
        assert_eq!(status, 200, "{body}");
        if let Some(record) = body["items"].as_array().unwrap().first() {
            found.insert(p, record["value"].clone());
        }
    }
    found
}

/// The outbox of `partition`: (topic, value as JSON).
async fn outbox(node: &Tern, partition: u32) -> Vec<(String, Value)> {
    let (status, body) = node.get_json(&format!("/v1/ns/default/outbox?partition={partition}&limit=1000")).await;
    assert_eq!(status, 200, "{body}");
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["topic"].as_str().unwrap().to_string(), serde_json::from_str(m["value"].as_str().unwrap()).unwrap()))
        .collect()
}

async fn write_all(node: &Tern, keys: &[&str], value: &Value) {
    for key in keys {
        let response = node.client.put(node.kv_url("default", key, None)).query(&[("wait", "applied")]).json(value).send().await.unwrap();
        assert_eq!(response.status(), 200, "{key}");
    }
}

#[tokio::test]
async fn a_procedure_deployed_over_http_runs_per_write_in_its_partition_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Tern::dev(dir.path()).await;
    let url = node.url.clone();

    // Deployed with the CLI: the version is the deploy entry's offset in partition 0.
    let (ok, out, err) = cli(&url, &["procedure", "deploy", "counter", counter_wasm().to_str().unwrap(), "--params", r#"{"x": 1}"#]);
    assert!(ok, "{err}");
    assert!(out.starts_with("deployed  counter  version "), "{out}");
    let (ok, out, _) = cli(&url, &["procedure", "ls"]);
    assert!(ok && out.contains("counter") && out.contains("10000000"), "{out}");

    let keys = ["in/a", "in/b", "in/c", "in/d", "in/e", "in/f"];
    write_all(&node, &keys, &json!("v")).await;
    write_all(&node, &["other"], &json!(1)).await;
    let partitions: Vec<u32> = keys.iter().map(|k| partition_of(k)).collect();
    let mut expected: BTreeMap<u32, Value> = BTreeMap::new();
    for &p in &partitions {
        *expected.entry(p).or_insert(json!(0)) = json!(expected.get(&p).and_then(Value::as_u64).unwrap_or(0) + 1);
    }
    assert_eq!(counts(&node, &partitions).await, expected, "one count per partition an input landed in");
    let p = partitions[0];
    let seen = outbox(&node, p).await;
    // `GET /v1/ns` and `tern ns show` tell each partition's outbox backlog.
    let (_, shown) = node.get_json("/v1/ns/default").await;
    assert_eq!(shown["state"][p as usize]["procedures"]["outbox_messages"], json!(seen.len()), "{shown}");
    let (ok, out, err) = cli(&url, &["ns", "show", "default"]);
    assert!(ok && out.contains("PROCEDURE") && out.contains("counter") && out.contains("OUTBOX"), "{out}{err}");
    // Per procedure, this node's counters: every input was a record in.
    let (_, listed) = node.get_json("/v1/ns/default/procedures").await;
    let counters = &listed["procedures"][0]["counters"];
    assert_eq!(counters["records"], json!(keys.len() + 1), "{listed}");
    assert_eq!(counters["dead_letters"], json!(0), "{listed}");
    assert!(counters["fuel_used"].as_u64().unwrap() > 0 && counters["outputs"].as_u64().unwrap() >= keys.len() as u64, "{listed}");
    let records = (keys.len() + 1).to_string();
    let counters_table = out.split("this node, since it started:").nth(1).unwrap_or_default();
    let counted = counters_table.lines().any(|l| l.starts_with("counter") && l.split_whitespace().nth(1) == Some(records.as_str()));
    assert!(out.contains("DEAD LETTERS") && counted, "{out}");
    // The embedded log publishes nothing: no publisher's lag is shown.
    assert!(shown["state"][p as usize]["procedures"]["unpublished_messages"].is_null(), "{shown}");
    assert!(seen.iter().all(|(topic, _)| topic == "default.seen"), "{seen:?}");
    assert!(seen.iter().any(|(_, v)| v["key"] == "in/a" && v["v"] == "v"), "{seen:?}");

    // A value the procedure fails on: its writes are dropped, a dead letter says why.
    let boom = keys.iter().find(|k| partition_of(k) == p).unwrap();
    write_all(&node, &[boom], &json!("boom")).await;
    let letters = outbox(&node, p).await;
    let (topic, dead) = letters.last().unwrap();
    assert_eq!(topic, "default.counter.dead");
    assert!(dead["reason"].as_str().unwrap().starts_with("aborted: asked to fail"), "{dead}");
    assert_eq!(counts(&node, &[p]).await[&p], expected[&p], "the failed call's put is not applied");

    // kill -9: the node reloads the procedure from its stores and goes on counting.
    node.kill9();
    let node = Tern::dev(dir.path()).await;
    write_all(&node, &[boom], &json!("again")).await;
    assert_eq!(counts(&node, &[p]).await[&p], json!(expected[&p].as_u64().unwrap() + 1));

    // Rollback to the first version, then removal: each a new version.
    let (_, shown) = node.get_json("/v1/ns/default/procedures/counter").await;
    let first = shown["version"].as_u64().unwrap();
    let (ok, out, err) = cli(&url_of(&node), &["procedure", "rollback", "counter", &first.to_string()]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("(the definition of version {first})")), "{out}");
    let (_, shown) = node.get_json("/v1/ns/default/procedures/counter").await;
    assert!(shown["version"].as_u64().unwrap() > first);
    assert_eq!(shown["versions"].as_array().unwrap().len(), 2);
    assert_eq!(shown["params"], json!({"x": 1}), "a rollback deploys the kept definition whole");
    let (ok, _, err) = cli(&url_of(&node), &["procedure", "rm", "counter"]);
    assert!(ok, "{err}");
    let before = counts(&node, &[p]).await[&p].clone();
    write_all(&node, &[boom], &json!("after removal")).await;
    assert_eq!(counts(&node, &[p]).await[&p], before, "a removed procedure runs no more");
    let (_, listed) = node.get_json("/v1/ns/default/procedures").await;
    assert_eq!(listed["procedures"], json!([]));
}

/// Nothing is written after "arm": only the node's ticks (every
/// `procedure_tick_ms`, 1 s by default) move the partition's log time past
/// the timer, which then fires.
#[tokio::test]
async fn ticks_fire_timers_in_a_partition_nothing_is_written_to() {
    let dir = tempfile::tempdir().unwrap();
    let node = Tern::dev(dir.path()).await;
    let ticker = checkout().join("examples/procedures/build/ticker.wasm");
    let (ok, _, err) = cli(&node.url, &["procedure", "deploy", "ticker", ticker.to_str().unwrap()]);
    assert!(ok, "{err}");
    write_all(&node, &["arm"], &json!(1)).await;
    let p = partition_of("arm");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let fired = loop {
        let messages = outbox(&node, p).await;
        if let Some((topic, value)) = messages.into_iter().find(|(topic, _)| topic == "default.fired") {
            break (topic, value);
        }
        assert!(std::time::Instant::now() < deadline, "the timer never fired");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(fired.1["timer"], "t");
    assert!(fired.1["now"].as_u64().unwrap() >= fired.1["at"].as_u64().unwrap(), "{}", fired.1);
    let metrics = node.client.get(format!("{}/metrics", node.url)).send().await.unwrap().text().await.unwrap();
    let ticks = metrics.lines().find(|l| l.starts_with("tern_procedure_ticks_total ")).unwrap();
    assert!(ticks.rsplit(' ').next().unwrap().parse::<f64>().unwrap() >= 1.0, "{ticks}");
}

fn url_of(node: &Tern) -> String {
    node.url.clone()
}

#[tokio::test]
async fn bad_procedure_requests_get_clear_errors_and_append_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = Tern::dev(dir.path()).await;
    let put = |path: &str, body: Value| node.client.put(format!("{}{path}", node.url)).json(&body);
    let module = |bytes: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    let offsets = |state: &Value| state["state"].as_array().unwrap().iter().map(|p| p["log_end_offset"].clone()).collect::<Vec<_>>();
    let (_, before) = node.get_json("/v1/ns/default").await;
    let counter = module(&std::fs::read(counter_wasm()).unwrap());
    let wasi = module(br#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))"#);
    let cases: Vec<(&str, Value, u16, &str, &str)> = vec![
        ("/v1/ns/default/procedures/a%20b", json!({"runtime": "wasm", "module": "AA=="}), 400, "invalid_procedure", "letters, digits"),
        ("/v1/ns/nope/procedures/p", json!({"runtime": "wasm", "module": "AA=="}), 404, "namespace_not_found", ""),
        ("/v1/ns/default/procedures/p", json!({"runtime": "lua", "module": "AA=="}), 400, "invalid_procedure", "unknown variant"),
        ("/v1/ns/default/procedures/p", json!({"runtime": "wasm", "module": "!!"}), 400, "invalid_procedure", "not base64"),
        (
            "/v1/ns/default/procedures/p",
            json!({"runtime": "wasm", "module": module(b"\0asm garbage")}),
            400,
            "invalid_procedure",
            "not a valid WebAssembly module",
        ),
        ("/v1/ns/default/procedures/p", json!({"runtime": "wasm", "module": wasi}), 400, "invalid_procedure", "no WASI"),
        (
            "/v1/ns/default/procedures/p",
            json!({"runtime": "wasm", "module": "AA==", "fuel_per_record": 0}),
            400,
            "invalid_procedure",
            "fuel_per_record",
        ),
        ("/v1/ns/default/procedures/p", json!({"runtime": "wasm", "module": "AA==", "removed": true}), 400, "invalid_procedure", "DELETE"),
        ("/v1/ns/default/procedures/p", json!({"from_version": 7}), 404, "not_found", "no procedure \"p\""),
        // Topics that are not the namespace's own (before the fix, deployed: its outputs reached another namespace's log).
        (
            "/v1/ns/default/procedures/p",
            json!({"runtime": "wasm", "module": counter, "outputs": {"o": "tern.victim"}}),
            400,
            "invalid_procedure",
            "is not namespace \"default\"'s",
        ),
        (
            "/v1/ns/default/procedures/p",
            json!({"runtime": "wasm", "module": counter, "dead_letter_topic": "defaultx.d"}),
            400,
            "invalid_procedure",
            "start with \"default.\"",
        ),
        // Names equal to route words are names like any other: here, a module that does not load.
        ("/v1/ns/default/procedures/kv", json!({"runtime": "wasm", "module": "AA=="}), 400, "invalid_procedure", "not a valid WebAssembly module"),
    ];
    for (path, body, status, code, text) in cases {
        let (got, answer) = node.send(put(path, body)).await;
        assert_eq!((got, error_code(&answer)), (status, code), "{path}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(text), "{path}: {answer}");
    }
    // Larger than a value: 413, read no further.
    let huge = "A".repeat(tern::limits::VALUE_BYTES_MAX + 8);
    let (status, answer) = node.send(put("/v1/ns/default/procedures/p", json!({"runtime": "wasm", "module": huge}))).await;
    assert_eq!((status, error_code(&answer)), (413, "definition_too_large"), "{answer}");
    let (status, answer) = node.send(node.client.delete(format!("{}/v1/ns/default/procedures/p", node.url))).await;
    assert_eq!((status, error_code(&answer)), (404, "not_found"));
    for query in ["", "partition=16", "partition=x", "partition=0&limit=0", "partition=0&after=3"] {
        let (status, answer) = node.get_json(&format!("/v1/ns/default/outbox?{query}")).await;
        assert_eq!((status, error_code(&answer)), (400, "invalid_request"), "{query}: {answer}");
    }
    for path in ["/v1/ns/default/kv/k?partition=99", "/v1/ns/default/kv/k/s?partition=-1"] {
        let (status, answer) = node.get_json(path).await;
        assert_eq!((status, error_code(&answer)), (400, "invalid_request"), "{path}: {answer}");
    }
    // Nothing was appended to any partition's log.
    let (_, listed) = node.get_json("/v1/ns/default/procedures").await;
    assert_eq!(listed["procedures"], json!([]));
    let (_, after) = node.get_json("/v1/ns/default").await;
    assert_eq!(offsets(&after), offsets(&before));
}

#[tokio::test]
async fn a_source_topic_needs_the_kafka_log() {
    let dir = tempfile::tempdir().unwrap();
    let node = Tern::dev(dir.path()).await;
    let request = node.client.put(format!("{}/v1/ns/feed", node.url)).json(&json!({"source_topic": "events"}));
    let (status, answer) = node.send(request).await;
    assert_eq!((status, error_code(&answer)), (400, "invalid_source_topic"), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("Kafka"), "{answer}");
    let (status, _) = node.get_json("/v1/ns/feed").await;
    assert_eq!(status, 404, "nothing was created");
}

/// One page of partition `p`'s outbox: (offset, index) of each message.
async fn outbox_ids(node: &Tern, p: u32) -> Vec<(u64, u64)> {
    let (status, body) = node.get_json(&format!("/v1/ns/default/outbox?partition={p}&limit=1000")).await;
    assert_eq!(status, 200, "{body}");
    body["messages"].as_array().unwrap().iter().map(|m| (m["offset"].as_u64().unwrap(), m["index"].as_u64().unwrap())).collect()
}

/// On the embedded log no publisher relays outboxes: a consumer reads one
/// (`tern procedure outbox`) and trims what it took (`DELETE
/// .../outbox?partition=P&below=OFFSET`, `tern procedure trim`), so it
/// does not grow for ever. Every bad trim is refused and trims nothing.
#[tokio::test]
async fn the_embedded_logs_outbox_is_read_then_trimmed_by_its_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let node = Tern::dev(dir.path()).await;
    let url = node.url.clone();
    let (ok, _, err) = cli(&url, &["procedure", "deploy", "counter", counter_wasm().to_str().unwrap()]);
    assert!(ok, "{err}");
    let p = partition_of("in/0");
    let keys: Vec<String> = (0..200).map(|i| format!("in/{i}")).filter(|k| partition_of(k) == p).take(6).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    write_all(&node, &keys, &json!("v")).await;
    let before = outbox_ids(&node, p).await;
    let offsets: std::collections::BTreeSet<u64> = before.iter().map(|(o, _)| *o).collect();
    assert!(offsets.len() >= 6, "one input offset per write: {before:?}");

    // The CLI pages through it.
    let (ok, out, err) = cli(&url, &["procedure", "outbox", &p.to_string(), "--limit", "2"]);
    assert!(ok, "{err}");
    assert!(out.contains("default.seen") && out.contains(&format!("default:{p}:{}.{}", before[0].0, before[0].1)), "{out}");
    assert!(out.contains(&format!("next page: --after {}.{}", before[1].0, before[1].1)), "{out}");

    let trim = |query: &str| node.client.delete(format!("{url}/v1/ns/default/outbox?{query}"));
    let (_, ns) = node.get_json("/v1/ns/default").await;
    let end = ns["state"][p as usize]["applied_offset"].as_u64().unwrap() + 1;
    for (query, status, code) in [
        (String::new(), 400, "invalid_request"),
        (format!("partition={p}"), 400, "invalid_request"),
        ("below=3".to_string(), 400, "invalid_request"),
        (format!("partition={PARTITIONS}&below=3"), 400, "invalid_request"),
        ("partition=-1&below=3".to_string(), 400, "invalid_request"),
        (format!("partition={p}&below=0"), 400, "invalid_request"),
        (format!("partition={p}&below=x"), 400, "invalid_request"),
        (format!("partition={p}&below=18446744073709551616"), 400, "invalid_request"),
        (format!("partition={p}&below={}", end + 1000), 400, "invalid_position"),
        (format!("partition={p}&below=3&after=1.0"), 400, "invalid_parameter"),
    ] {
        let (got, body) = node.send(trim(&query)).await;
        assert_eq!((got, error_code(&body)), (status, code), "{query}: {body}");
    }
    let (got, body) = node.send(node.client.delete(format!("{url}/v1/ns/nope/outbox?partition=0&below=1"))).await;
    assert_eq!((got, error_code(&body)), (404, "namespace_not_found"), "{body}");
    assert_eq!(outbox_ids(&node, p).await, before, "refused trims trim nothing");

    // Took the first three inputs' messages: trimmed below the fourth's offset.
    let fourth: u64 = *offsets.iter().nth(3).unwrap();
    let (ok, out, err) = cli(&url, &["procedure", "trim", &p.to_string(), &fourth.to_string()]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("trimmed  partition {p}  below offset {fourth}"));
    let left: Vec<(u64, u64)> = before.iter().copied().filter(|(o, _)| *o >= fourth).collect();
    assert_eq!(outbox_ids(&node, p).await, left, "what was below is gone, the rest stays in order");
    let (_, shown) = node.get_json("/v1/ns/default").await;
    assert_eq!(shown["state"][p as usize]["procedures"]["outbox_messages"], json!(left.len()), "{shown}");
    // Again: nothing below any more, nothing appended.
    let (got, body) = node.send(trim(&format!("partition={p}&below={fourth}"))).await;
    assert_eq!((got, &body["done"], &body["position"]), (200, &json!(true), &Value::Null), "{body}");
    // Everything, up to the log's end: the outbox is empty; new messages come after.
    let (_, ns) = node.get_json("/v1/ns/default").await;
    let end = ns["state"][p as usize]["applied_offset"].as_u64().unwrap() + 1;
    let (got, body) = node.send(trim(&format!("partition={p}&below={end}"))).await;
    assert_eq!((got, &body["done"]), (200, &json!(true)), "{body}");
    assert!(body["position"].as_str().unwrap().starts_with(&format!("default:{p}:")), "{body}");
    assert_eq!(outbox_ids(&node, p).await, vec![]);
    write_all(&node, &keys[..1], &json!("later")).await;
    assert_eq!(outbox_ids(&node, p).await.len(), 1, "an input after the trim emits as before");
}

/// The next change event (not progress or keep-alive) as (event, pk, value, version).
async fn next_change(sse: &mut crate::common::watch::Sse) -> (String, String, Value, u64) {
    let e = sse.next_change(std::time::Duration::from_secs(20)).await.expect("a change within 20 s");
    let data = e.json();
    let version = data["version"].as_u64().unwrap_or(0);
    (e.event, data["pk"].as_str().unwrap_or("").to_string(), data["value"].clone(), version)
}

/// A procedure's record writes are changes like any: a watch gets them
/// live, after the entry's own ops and at its offset; a resume that the
/// node replays from memory gets them again; one from before the node
/// restarted (its history would come from the log, which does not hold
/// them) gets the current state instead, with them in it.
/// (After a kill -9 the node applies the log's tail again, procedures
/// included, so its memory has them anyway.)
#[tokio::test]
async fn a_procedures_record_writes_are_pushed_to_watches_and_never_lost_on_resume() {
    use crate::common::watch::Sse;
    let dir = tempfile::tempdir().unwrap();
    let mut node = Tern::dev(dir.path()).await;
    let (ok, _, err) = cli(&node.url, &["procedure", "deploy", "counter", counter_wasm().to_str().unwrap()]);
    assert!(ok, "{err}");
    let watch_url = format!("{}/v1/ns/default/watch?mode=log", node.url);
    let mut sse = Sse::connect(&node.client, &watch_url, None).await;
    let start = sse.next(std::time::Duration::from_secs(10)).await.unwrap().id.expect("the starting position");
    write_all(&node, &["in/a"], &json!("v")).await;
    let live = [next_change(&mut sse).await, next_change(&mut sse).await];
    let version = live[0].3;
    assert_eq!(live[0], ("put".to_string(), "in/a".to_string(), json!("v"), version), "the entry's own op first");
    assert_eq!(live[1], ("put".to_string(), "count".to_string(), json!(1), version), "then the procedure's write, at the same offset");

    // Resumed on the same node: replayed from memory, the same two changes.
    let mut resumed = Sse::connect(&node.client, &watch_url, Some(&start)).await;
    assert_eq!([next_change(&mut resumed).await, next_change(&mut resumed).await], live);
    drop((sse, resumed));

    // After a clean restart the node's memory is empty: the state, not a
    // replay from the log that would miss `count`.
    assert!(node.terminate().success());
    let node = Tern::dev(dir.path()).await;
    let watch_url = format!("{}/v1/ns/default/watch?mode=log", node.url);
    let mut after = Sse::connect(&node.client, &watch_url, Some(&start)).await;
    let reset = after.next_change(std::time::Duration::from_secs(20)).await.unwrap();
    assert_eq!(reset.event, "reset", "{reset:?}");
    assert_eq!(reset.json()["reason"], "history_gone", "{reset:?}");
    let mut state = BTreeMap::new();
    loop {
        let e = after.next_change(std::time::Duration::from_secs(20)).await.unwrap();
        if e.event == "synced" {
            break;
        }
        assert_eq!(e.event, "put", "{e:?}");
        let data = e.json();
        state.insert(data["pk"].as_str().unwrap().to_string(), data["value"].clone());
    }
    assert_eq!(state.get("count"), Some(&json!(1)), "{state:?}");
    assert_eq!(state.get("in/a"), Some(&json!("v")), "{state:?}");
    // And live again: the next write's count arrives.
    write_all(&node, &["in/a"], &json!("w")).await;
    let next = [next_change(&mut after).await, next_change(&mut after).await];
    assert_eq!((next[1].1.as_str(), &next[1].2), ("count", &json!(2)), "{next:?}");
}
