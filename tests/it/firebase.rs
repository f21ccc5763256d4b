//! The Firebase REST and streaming API over HTTP against a real `tern dev`:
//! every error and limit with Firebase's status and text, writing nothing;
//! streams that resume from `Last-Event-ID` with exactly what they missed;
//! the tree surviving a crash. (The official Admin SDK's own suite is
//! `tests/firebase/`.)

use std::time::Duration;

use crate::common::Tern;
use serde_json::{json, Value};

/// `/{path}.json?ns=fbtest` (`""` is the root, `/.json`).
fn fb(t: &Tern, path: &str, query: &str) -> String {
    let path = if path.is_empty() { "/" } else { path };
    format!("{}{path}.json?ns=fbtest{query}", t.url)
}

async fn text(response: reqwest::Response) -> (u16, String, reqwest::header::HeaderMap) {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, response.text().await.unwrap(), headers)
}

#[tokio::test]
async fn errors_and_limits_are_firebases_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let c = &t.client;
    let (status, _, _) = text(c.put(fb(&t, "/app", "")).body(r#"{"a": {"b": 1}, "n": 1}"#).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let rules = r#"{"rules": {".read": true, ".write": true, "app": {".indexOn": "n"}}}"#;
    let (status, _, _) = text(c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(rules).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let deep = format!("/{}", vec!["k"; 33].join("/"));
    let long_path = format!("/{}", vec!["x".repeat(200); 6].join("/"));
    let too_big = format!("\"{}\"", "x".repeat(4 * 1024 * 1024 + 1));
    // (what, request, status, error text it contains)
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
        ("a key with a dot", c.put(fb(&t, "/a.b", "")).body("1"), 400, "Invalid key"),
        ("a key with $", c.put(fb(&t, "/x", "")).body(r#"{"$a": 1}"#), 400, "Invalid key"),
        ("a key over 768 bytes", c.put(fb(&t, &format!("/{}", "k".repeat(769)), "")).body("1"), 400, "at most 768"),
        ("a path 33 keys deep", c.put(fb(&t, &deep, "")).body("1"), 400, "deeper than 32"),
        ("a path over 1 KiB", c.put(fb(&t, &long_path, "")).body("1"), 400, "at most 1024 bytes"),
        ("data 33 levels deep", c.put(fb(&t, "/x", "")).body(deep_value(33)), 400, "deeper than 32"),
        ("a body over 4 MiB", c.put(fb(&t, "/x", "")).body(too_big), 413, "exceeds the maximum size"),
        ("invalid JSON", c.put(fb(&t, "/x", "")).body("{"), 400, "couldn't parse JSON"),
        ("an unknown server value", c.put(fb(&t, "/x", "")).body(r#"{".sv": "now"}"#), 400, "unknown server value"),
        ("an update that is not an object", c.patch(fb(&t, "/x", "")).body("[1]"), 400, "must be a JSON object"),
        ("overlapping update paths", c.patch(fb(&t, "/x", "")).body(r#"{"a": 1, "a/b": 2}"#), 400, "ancestor"),
        ("a query without orderBy", c.get(fb(&t, "/app", "&limitToFirst=1")), 400, "orderBy must be defined when other query parameters are defined"),
        ("orderBy not JSON", c.get(fb(&t, "/app", "&orderBy=n")), 400, "orderBy must be a valid JSON encoded path"),
        (
            "an order without .indexOn",
            c.get(fb(&t, "/app", "&orderBy=%22zz%22")),
            400,
            "Index not defined, add \".indexOn\": \"zz\", for path \"/app\", to the rules",
        ),
        ("both limits", c.get(fb(&t, "/app", "&orderBy=%22n%22&limitToFirst=1&limitToLast=1")), 400, "cannot both be defined"),
        ("a zero limit", c.get(fb(&t, "/app", "&orderBy=%22n%22&limitToFirst=0")), 400, "positive integer"),
        ("shallow with a query", c.get(fb(&t, "/app", "&shallow=true&orderBy=%22$key%22")), 400, "Mixing 'shallow' and querying parameters"),
        ("a $key bound that is not a string", c.get(fb(&t, "/app", "&orderBy=%22$key%22&startAt=1")), 400, "must be strings"),
        ("print=ugly", c.get(fb(&t, "/app", "&print=ugly")), 400, "print must be"),
        ("a bad timeout", c.get(fb(&t, "/app", "&timeout=soon")), 400, "timeout must be"),
        ("a bad writeSizeLimit", c.put(fb(&t, "/x", "&writeSizeLimit=huge")).body("1"), 400, "writeSizeLimit"),
        ("an unknown method override", c.post(fb(&t, "/x", "")).header("X-HTTP-Method-Override", "BREW").body("1"), 400, "X-HTTP-Method-Override"),
        ("a token that is not one", c.get(fb(&t, "/app", "&auth=nonsense")), 401, "Could not parse auth token."),
        ("rules without the owner", c.get(fb(&t, "/.settings/rules", "")), 401, "only the owner"),
        (
            "rules that do not parse",
            c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(r#"{"rules": {".write": "auth.uid =="}}"#),
            400,
            "Error parsing rule /rules/.write",
        ),
        (
            "rules with an unknown key",
            c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(r#"{"rules": {".wirte": true}}"#),
            400,
            "unknown rule /rules/.wirte",
        ),
        ("a bad database name", c.get(format!("{}/x.json?ns=no%20spaces", t.url)), 400, ""),
    ];
    for (what, request, status, needle) in cases {
        let (got, body, _) = text(request.send().await.unwrap()).await;
        assert_eq!(got, status, "{what}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{what}: not JSON: {body}"));
        assert!(error["error"].as_str().is_some_and(|e| e.contains(needle)), "{what}: {body}");
    }
    // Nothing above wrote anything.
    let (_, body, _) = text(c.get(fb(&t, "", "")).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"app": {"a": {"b": 1}, "n": 1}}));
    let (_, rules_now, _) = text(c.get(fb(&t, "/.settings/rules", "")).bearer_auth("owner").send().await.unwrap()).await;
    assert_eq!(rules_now, rules);

    // ETags: 412 with the current tag and value; 304 when unchanged.
    let (_, _, headers) = text(c.get(fb(&t, "/app/n", "")).header("X-Firebase-ETag", "true").send().await.unwrap()).await;
    let tag = headers["etag"].to_str().unwrap().to_string();
    let (status, body, headers) = text(c.put(fb(&t, "/app/n", "")).header("if-match", "stale").body("2").send().await.unwrap()).await;
    assert_eq!((status, body.as_str(), headers["etag"].to_str().unwrap()), (412, "1", tag.as_str()));
    let (status, _, _) = text(c.get(fb(&t, "/app/n", "")).header("if-none-match", &tag).send().await.unwrap()).await;
    assert_eq!(status, 304);
    // A tag that is not even text fails the condition. Before, the write
    // went through unconditioned.
    let not_text = reqwest::header::HeaderValue::from_bytes(b"\"\xff\xfe\"").unwrap();
    let (status, body, _) = text(c.put(fb(&t, "/app/n", "")).header("if-match", not_text).body("9").send().await.unwrap()).await;
    assert_eq!((status, body.as_str()), (412, "1"), "a non-text tag matches nothing");
    // A conditional request gets the ETag back without X-Firebase-ETag, as
    // Firebase sends it (the Admin SDKs' set_if_unchanged and
    // get_if_changed read it). Both failed before: no ETag on the 200s.
    let (status, _, headers) = text(c.put(fb(&t, "/app/n", "")).header("if-match", &tag).body("2").send().await.unwrap()).await;
    assert_eq!(status, 200);
    let put_tag = headers.get("etag").map(|v| v.to_str().unwrap().to_string()).expect("a conditional PUT answers with the new ETag");
    let (status, body, headers) = text(c.get(fb(&t, "/app/n", "")).header("if-none-match", &tag).send().await.unwrap()).await;
    assert_eq!((status, body.as_str()), (200, "2"), "changed since the old tag");
    assert_eq!(headers.get("etag").map(|v| v.to_str().unwrap()), Some(put_tag.as_str()), "the 200 of if-none-match names the new tag");
    let (_, _, headers) = text(c.get(fb(&t, "/app/n", "")).send().await.unwrap()).await;
    assert!(headers.get("etag").is_none(), "an unconditional GET without X-Firebase-ETag has none");
    // Method override, print=silent, export with priorities, shallow.
    let (status, body, _) = text(c.post(fb(&t, "/app/a", "&print=silent")).header("X-HTTP-Method-Override", "DELETE").send().await.unwrap()).await;
    assert_eq!((status, body.as_str()), (204, ""));
    c.put(fb(&t, "/p", "")).body(r#"{"x": {".value": 1, ".priority": 5}, ".priority": "top"}"#).send().await.unwrap();
    let (_, body, _) = text(c.get(fb(&t, "/p", "&format=export")).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"x": {".value": 1, ".priority": 5}, ".priority": "top"}));
    let (_, body, _) = text(c.get(fb(&t, "", "&shallow=true")).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"app": true, "p": true}));
    // Unicode keys and values.
    c.put(fb(&t, "/ünï/çødé 🚀", "")).body(r#""✓""#).send().await.unwrap();
    let (_, body, _) = text(c.get(fb(&t, "/ünï", "")).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"çødé 🚀": "✓"}));
    // Route words: a /v1 record whose key ends in .json stays a record, a
    // tree location named v1 or metrics stays the tree's.
    let record = format!("{}/v1/ns/fbtest/kv/cfg/config.json", t.url);
    assert_eq!(c.put(format!("{record}?wait=applied")).body(r#""rec""#).send().await.unwrap().status(), 200);
    let (status, body, _) = text(c.get(&record).send().await.unwrap()).await;
    assert!(status == 200 && body.contains(r#""value":"rec""#), "{status} {body}");
    for location in ["/v1", "/metrics", "/demo"] {
        c.put(fb(&t, location, "")).body(r#""tree""#).send().await.unwrap();
        let (_, body, _) = text(c.get(fb(&t, location, "")).send().await.unwrap()).await;
        assert_eq!(body, r#""tree""#, "{location}");
    }
}

fn deep_value(levels: usize) -> String {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "k": v });
    }
    v.to_string()
}

/// Reads SSE events (name, id, data) from `response` until `count` arrived.
async fn events(response: &mut reqwest::Response, buffer: &mut String, count: usize) -> Vec<(String, Option<String>, Value)> {
    let mut out = Vec::new();
    while out.len() < count {
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let (mut name, mut id, mut data) = (String::new(), None, Value::Null);
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_string();
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_string());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).unwrap();
                }
            }
            if name != "keep-alive" {
                out.push((name, id, data));
            }
        }
        if out.len() >= count {
            break;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .expect("the stream is open");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    out
}

#[tokio::test]
async fn a_stream_resumes_from_last_event_id_with_exactly_what_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let c = &t.client;
    c.put(fb(&t, "/room", "")).body(r#"{"a": 1}"#).send().await.unwrap();
    let mut stream = c.get(fb(&t, "/room", "")).header("Accept", "text/event-stream").send().await.unwrap();
    let mut buffer = String::new();
    let first = events(&mut stream, &mut buffer, 1).await;
    assert_eq!((first[0].0.as_str(), &first[0].2), ("put", &json!({"path": "/", "data": {"a": 1}})));
    c.put(fb(&t, "/room/b", "")).body("2").send().await.unwrap();
    c.patch(fb(&t, "/room", "")).body(r#"{"a": 5, "c": 3}"#).send().await.unwrap();
    c.put(fb(&t, "/other", "")).body("0").send().await.unwrap();
    c.put(fb(&t, "", "")).body(r#"{"room": {"z": 1}}"#).send().await.unwrap();
    let seen = events(&mut stream, &mut buffer, 3).await;
    assert_eq!(seen[0].2, json!({"path": "/b", "data": 2}));
    assert_eq!((seen[1].0.as_str(), &seen[1].2), ("patch", &json!({"path": "/", "data": {"a": 5, "c": 3}})));
    assert_eq!(seen[2].2, json!({"path": "/", "data": {"z": 1}}), "a write above the location: its part at the location");
    drop(stream);
    // Missed while away: two changes. Resume after the first one seen.
    c.put(fb(&t, "/room/y", "")).body("7").send().await.unwrap();
    c.delete(fb(&t, "/room/z", "")).send().await.unwrap();
    let after_first = seen[0].1.clone().expect("events carry their position");
    let mut resumed = c.get(fb(&t, "/room", "")).header("Accept", "text/event-stream").header("Last-Event-ID", after_first).send().await.unwrap();
    let mut buffer = String::new();
    let replay = events(&mut resumed, &mut buffer, 4).await;
    let data: Vec<&Value> = replay.iter().map(|e| &e.2).collect();
    assert_eq!(
        data,
        vec![
            &json!({"path": "/", "data": {"a": 5, "c": 3}}),
            &json!({"path": "/", "data": {"z": 1}}),
            &json!({"path": "/y", "data": 7}),
            &json!({"path": "/z", "data": null}),
        ],
        "exactly the missed changes, in order, none twice"
    );
    // A position from the future is refused, not waited on.
    let status =
        c.get(fb(&t, "/room", "")).header("Accept", "text/event-stream").header("Last-Event-ID", "fbtest:0:999999").send().await.unwrap().status();
    assert!(status.is_client_error() || status.is_server_error());
    // A query stream: the query's whole result each time it changes.
    c.put(fb(&t, "/.settings/rules", ""))
        .bearer_auth("owner")
        .body(r#"{"rules": {".read": true, ".write": true, "s": {".indexOn": ".value"}}}"#)
        .send()
        .await
        .unwrap();
    c.put(fb(&t, "/s", "")).body(r#"{"a": 3, "b": 1, "c": 2}"#).send().await.unwrap();
    let mut top = c.get(fb(&t, "/s", "&orderBy=%22$value%22&limitToLast=2")).header("Accept", "text/event-stream").send().await.unwrap();
    let mut buffer = String::new();
    assert_eq!(events(&mut top, &mut buffer, 1).await[0].2, json!({"path": "/", "data": {"a": 3, "c": 2}}));
    c.put(fb(&t, "/s/d", "")).body("9").send().await.unwrap();
    assert_eq!(events(&mut top, &mut buffer, 1).await[0].2, json!({"path": "/", "data": {"a": 3, "d": 9}}));
}

/// Over HTTP/2 (h2c), streams run in the connection's task, and every
/// listener of one location shares one translation of each change: the
/// same frames must reach listeners at the same location, and listeners
/// above and below it must each get theirs.
#[tokio::test]
async fn streams_over_http2_share_a_connection_and_each_get_their_locations_events() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let c = &t.client;
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    c.put(fb(&t, "/room", "")).body(r#"{"a": 1, "b": {"x": 1}}"#).send().await.unwrap();
    let mut streams = Vec::new();
    for location in ["/room", "/room", "/room/b", ""] {
        let mut response = h2.get(fb(&t, location, "")).header("Accept", "text/event-stream").send().await.unwrap();
        assert_eq!(response.version(), reqwest::Version::HTTP_2);
        assert_eq!(response.status(), 200);
        let mut buffer = String::new();
        let first = events(&mut response, &mut buffer, 1).await;
        assert_eq!(first[0].0, "put", "{location}: the whole value first");
        streams.push((location, response, buffer));
    }
    c.put(fb(&t, "/room/b/x", "")).body("2").send().await.unwrap();
    c.patch(fb(&t, "/room", "")).body(r#"{"a": 5, "b/y": 3}"#).send().await.unwrap();
    // The update at /room is a patch of its direct child `a` and a put below it.
    let expected = |location: &str| -> Vec<(&str, Value)> {
        match location {
            "/room" => vec![
                ("put", json!({"path": "/b/x", "data": 2})),
                ("patch", json!({"path": "/", "data": {"a": 5}})),
                ("put", json!({"path": "/b/y", "data": 3})),
            ],
            "/room/b" => vec![("put", json!({"path": "/x", "data": 2})), ("put", json!({"path": "/y", "data": 3}))],
            _ => vec![
                ("put", json!({"path": "/room/b/x", "data": 2})),
                ("patch", json!({"path": "/room", "data": {"a": 5}})),
                ("put", json!({"path": "/room/b/y", "data": 3})),
            ],
        }
    };
    let mut ids = Vec::new();
    for (location, response, buffer) in streams.iter_mut() {
        let want = expected(location);
        let seen = events(response, buffer, want.len()).await;
        let got: Vec<(&str, Value)> = seen.iter().map(|e| (e.0.as_str(), e.2.clone())).collect();
        assert_eq!(got, want, "{location}");
        ids.push(seen.last().unwrap().1.clone().expect("the last frame of a change carries its position"));
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "every listener is at the same position: {ids:?}");
    // Rules that stop allowing the read cancel every stream, which then ends.
    let locked = r#"{"rules": {".read": false, ".write": true}}"#;
    c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(locked).send().await.unwrap();
    for (location, response, buffer) in streams.iter_mut() {
        let cancel = events(response, buffer, 1).await;
        assert_eq!((cancel[0].0.as_str(), &cancel[0].2), ("cancel", &json!("Permission denied")), "{location}");
        assert!(buffer.is_empty(), "{location}: nothing after the cancel: {buffer:?}");
        // The stream ends (an empty closing DATA frame may come first).
        loop {
            let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk()).await.expect("the stream ends").unwrap();
            match chunk {
                None => break,
                Some(bytes) => assert!(bytes.is_empty(), "{location}: nothing after the cancel: {bytes:?}"),
            }
        }
    }
    // A denied stream over HTTP/2 is refused before it starts.
    let status = h2.get(fb(&t, "/room", "")).header("Accept", "text/event-stream").send().await.unwrap().status();
    assert_eq!(status, 401);
}

/// A counter of the node's `/metrics`.
async fn metric(t: &Tern, name: &str) -> f64 {
    let text = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// The keys a `score` query should select, from the test's own model:
/// children without a score first, then by score, ties by key.
fn by_score(model: &std::collections::BTreeMap<String, Option<i64>>) -> Vec<String> {
    let mut rows: Vec<(&String, &Option<i64>)> = model.iter().collect();
    rows.sort_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)));
    rows.into_iter().map(|(k, _)| k.clone()).collect()
}

/// Query indexes are built once and kept current from the partition's
/// events: every kind of write (below, at and above the location; a set,
/// an update, a push, a delete) leaves the next query's answer exactly
/// what a full read would give, without a rebuild; replacing the location
/// rebuilds it.
#[tokio::test]
async fn query_indexes_follow_every_write_without_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let c = &t.client;
    let rules = r#"{"rules": {".read": true, ".write": true, "players": {".indexOn": ["score"]}}}"#;
    c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(rules).send().await.unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut players = serde_json::Map::new();
    for i in 0..300i64 {
        let score = (i * 37) % 101;
        players.insert(format!("p{i:03}"), json!({"name": format!("player {i}"), "score": score}));
        model.insert(format!("p{i:03}"), Some(score));
    }
    c.put(fb(&t, "/players", "")).json(&players).send().await.unwrap();
    let top = |n: usize| fb(&t, "/players", &format!("&orderBy=%22score%22&limitToLast={n}"));
    let keys_of = |body: &str| -> Vec<String> {
        let value: Value = serde_json::from_str(body).unwrap();
        value.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
    };
    let check = |model: &std::collections::BTreeMap<String, Option<i64>>, body: &str, n: usize, what: &str| {
        let all = by_score(model);
        let mut want: Vec<String> = all[all.len().saturating_sub(n)..].to_vec();
        want.sort();
        let mut got = keys_of(body);
        got.sort();
        assert_eq!(got, want, "{what}");
    };
    let (_, body, _) = text(c.get(top(5)).send().await.unwrap()).await;
    check(&model, &body, 5, "first query");
    assert_eq!(metric(&t, "tern_firebase_index_builds_total").await, 1.0);

    // Writes of every kind, each followed by a query.
    let writes: Vec<(&str, reqwest::RequestBuilder, Box<dyn Fn(&mut std::collections::BTreeMap<String, Option<i64>>)>)> = vec![
        (
            "a set below a child",
            c.put(fb(&t, "/players/p007/score", "")).body("1000"),
            Box::new(|m| {
                m.insert("p007".into(), Some(1000));
            }),
        ),
        (
            "an update at the location",
            c.patch(fb(&t, "/players", "")).body(r#"{"p008/score": 2000, "p009": null}"#),
            Box::new(|m| {
                m.insert("p008".into(), Some(2000));
                m.remove("p009");
            }),
        ),
        (
            "a new child",
            c.put(fb(&t, "/players/zz", "")).body(r#"{"score": 3000}"#),
            Box::new(|m| {
                m.insert("zz".into(), Some(3000));
            }),
        ),
        (
            "a child without the indexed path",
            c.put(fb(&t, "/players/p299", "")).body(r#"{"name": "no score"}"#),
            Box::new(|m| {
                m.insert("p299".into(), None);
            }),
        ),
        (
            "a delete",
            c.delete(fb(&t, "/players/zz", "")),
            Box::new(|m| {
                m.remove("zz");
            }),
        ),
        (
            "an update above the location",
            c.patch(fb(&t, "", "")).body(r#"{"players/p010/score": 4000, "elsewhere": 1}"#),
            Box::new(|m| {
                m.insert("p010".into(), Some(4000));
            }),
        ),
        ("a write elsewhere", c.put(fb(&t, "/other", "")).body("1"), Box::new(|_| {})),
    ];
    for (what, request, apply) in writes {
        assert!(request.send().await.unwrap().status().is_success(), "{what}");
        apply(&mut model);
        let (_, body, _) = text(c.get(top(5)).send().await.unwrap()).await;
        check(&model, &body, 5, what);
    }
    let (_, body, _) = text(c.get(fb(&t, "/players", "&orderBy=%22score%22&limitToFirst=3")).send().await.unwrap()).await;
    let firsts = by_score(&model);
    let mut want = firsts[..3].to_vec();
    want.sort();
    let mut got = keys_of(&body);
    got.sort();
    assert_eq!(got, want, "the lowest: the child without a score first");
    let (_, body, _) = text(c.get(fb(&t, "/players", "&orderBy=%22score%22&equalTo=2000")).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"p008": {"name": "player 8", "score": 2000}}));
    assert_eq!(metric(&t, "tern_firebase_index_builds_total").await, 1.0, "kept current, never rebuilt");
    assert!(metric(&t, "tern_firebase_index_children_updated_total").await >= 6.0);

    // Replacing the location rebuilds the index.
    c.put(fb(&t, "/players", "")).body(r#"{"a": {"score": 2}, "b": {"score": 1}}"#).send().await.unwrap();
    let (_, body, _) = text(c.get(top(1)).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"a": {"score": 2}}));
    assert_eq!(metric(&t, "tern_firebase_index_builds_total").await, 2.0);
    // $key needs no .indexOn; its index follows writes too.
    let by_key = fb(&t, "/players", "&orderBy=%22$key%22&startAt=%22b%22");
    let (_, body, _) = text(c.get(&by_key).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"b": {"score": 1}}));
    c.put(fb(&t, "/players/c", "")).body(r#"{"score": 0}"#).send().await.unwrap();
    let (_, body, _) = text(c.get(&by_key).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"b": {"score": 1}, "c": {"score": 0}}));
}

/// An unsigned ID token (the emulator's convention) for `uid`, expiring at `exp` (seconds).
fn id_token(uid: &str, exp: u64) -> String {
    use base64::Engine;
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.", b64(json!({"alg": "none"})), b64(json!({"sub": uid, "exp": exp})))
}

/// A stream whose credential expires ends with `auth_revoked`; an expired
/// credential is refused up front.
#[tokio::test]
async fn a_stream_ends_with_auth_revoked_when_its_credential_expires() {
    let dir = tempfile::tempdir().unwrap();
    // Credentials are looked at on each keep-alive: one a second here
    // (`tern serve`: `tern dev` takes its defaults).
    let data_dir = dir.path().to_str().unwrap();
    let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", data_dir, "--namespace", "fbtest:1", "--watch-keep-alive-ms", "1000"];
    let env = [("TERN_FIREBASE_EMULATOR", "true"), ("TERN_FIREBASE_OWNER_TOKEN", "owner")];
    let t = Tern::spawn_with_env(&args, &env, dir.path()).await;
    let c = &t.client;
    let rules = r#"{"rules": {".read": "auth != null", ".write": "auth != null"}}"#;
    c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(rules).send().await.unwrap();
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (status, body, _) = text(c.get(fb(&t, "/room", &format!("&auth={}", id_token("alice", now_s - 1)))).send().await.unwrap()).await;
    assert_eq!((status, body.as_str()), (401, r#"{"error":"Auth token is expired"}"#));
    let token = id_token("alice", now_s + 3);
    let mut stream = c.get(fb(&t, "/room", &format!("&auth={token}"))).header("Accept", "text/event-stream").send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let mut buffer = String::new();
    assert_eq!(events(&mut stream, &mut buffer, 1).await[0].0, "put");
    // Within a keep-alive (1 s) after the expiry.
    let revoked = events(&mut stream, &mut buffer, 1).await;
    assert_eq!((revoked[0].0.as_str(), &revoked[0].2), ("auth_revoked", &json!("credential is no longer valid")));
    let end = tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await.expect("the stream ends").unwrap();
    assert!(end.is_none(), "nothing after auth_revoked: {end:?}");
}

#[tokio::test]
async fn rules_deny_reads_and_writes_and_cancel_a_stream_they_stop_allowing() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let c = &t.client;
    let rules = |read: bool| format!(r#"{{"rules": {{"open": {{".read": {read}, ".write": true}}}}}}"#);
    c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(rules(true)).send().await.unwrap();
    let (status, body, _) = text(c.put(fb(&t, "/closed", "")).body("1").send().await.unwrap()).await;
    assert_eq!((status, body.as_str()), (401, r#"{"error":"Permission denied"}"#));
    let mut stream = c.get(fb(&t, "/open", "")).header("Accept", "text/event-stream").send().await.unwrap();
    let mut buffer = String::new();
    assert_eq!(events(&mut stream, &mut buffer, 1).await[0].0, "put");
    c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(rules(false)).send().await.unwrap();
    let cancel = events(&mut stream, &mut buffer, 1).await;
    assert_eq!((cancel[0].0.as_str(), &cancel[0].2), ("cancel", &json!("Permission denied")));
    // getPriority(): the stored priority (data) and the written one (newData).
    let ranked = r#"{"rules": {"ranked": {"$item": {".read": true, ".write": "newData.getPriority() != null && (!data.exists() || newData.getPriority() > data.getPriority())"}}}}"#;
    c.put(fb(&t, "/.settings/rules", "")).bearer_auth("owner").body(ranked).send().await.unwrap();
    let put = |body: &'static str| c.put(fb(&t, "/ranked/a", "")).body(body).send();
    assert_eq!(put(r#"{".value": 1, ".priority": 1}"#).await.unwrap().status(), 200);
    assert_eq!(put(r#"{".value": 2, ".priority": 0}"#).await.unwrap().status(), 401, "a lower priority than stored");
    assert_eq!(put(r#"2"#).await.unwrap().status(), 401, "no priority");
    assert_eq!(put(r#"{".value": 3, ".priority": 2}"#).await.unwrap().status(), 200);
    let (_, body, _) = text(c.get(fb(&t, "/ranked/a", "&format=export")).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({".value": 3, ".priority": 2}));
}

#[tokio::test]
async fn the_tree_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Tern::dev(dir.path()).await;
    let big: serde_json::Map<String, Value> = (0..2000).map(|i| (format!("k{i}"), json!({"v": i, "s": "x".repeat(100)}))).collect();
    let status = t.client.put(fb(&t, "/big", "")).json(&big).send().await.unwrap().status();
    assert_eq!(status, 200);
    t.client.patch(fb(&t, "/big", "")).body(r#"{"k1/v": {".sv": {"increment": 10}}}"#).send().await.unwrap();
    t.kill9();
    let t = Tern::dev(dir.path()).await;
    let (_, body, _) = text(t.client.get(fb(&t, "/big/k1", "")).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"v": 11, "s": "x".repeat(100)}));
    let (_, body, _) = text(t.client.get(fb(&t, "/big", "&shallow=true")).send().await.unwrap()).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap().as_object().unwrap().len(), 2000);
}

/// Every path under `/v1/` is the native API's, even one ending in `.json`
/// (the spec's routing rule): before, the router's fallback sent such a
/// path to the default Firebase database, so `GET /v1/openapi.json`
/// answered `null` and `PUT /v1/anything.json` wrote Firebase data.
#[tokio::test]
async fn json_paths_under_v1_are_the_apis_never_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let (status, body) = t.send(t.client.put(format!("{}/v1/anything.json", t.url)).body("{\"planted\": true}")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");
    // A `/v1/….json` route is the API's: its answer, not a database's.
    let (status, body) = t.send(t.client.get(format!("{}/v1/openapi.json", t.url))).await;
    assert_eq!((status, body["openapi"].as_str()), (200, Some("3.1.0")), "the API's description");
    for path in ["/v1/ns/default.json", "/v1/x/y.json"] {
        let (status, body) = t.send(t.client.get(format!("{}{path}", t.url))).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.get("error").and_then(|e| e.get("code")).is_some(), "{path}: the API's error shape, not Firebase's: {body}");
    }
    // Nothing reached the database.
    let (status, tree) = t.send(t.client.get(format!("{}/.json", t.url))).await;
    assert_eq!((status, tree), (200, Value::Null), "the default database is still empty");
    // And a tree location named v1 is still Firebase's.
    let (status, _) = t.send(t.client.put(format!("{}/v1.json", t.url)).body("1")).await;
    assert_eq!(status, 200);
}
