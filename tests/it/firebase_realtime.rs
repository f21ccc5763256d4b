//! The Firebase realtime protocol (`/.ws`, issue 21) spoken by hand, for
//! what the SDK tests (`tests/firebase-js/`) cannot do: bad input of every
//! kind, and onDisconnect writes made by *another* node when the node that
//! held the connection is killed (two nodes on Kafka, gossiping).

use crate::common;

use std::time::{Duration, Instant};

use common::Tern;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A realtime connection, as the SDK's `PersistentConnection` drives it.
struct Realtime {
    ws: Socket,
    next_r: u64,
    /// Pushes seen while waiting for answers.
    pushes: Vec<Value>,
}

impl Realtime {
    /// Connects to database `ns` and reads the server's hello.
    async fn connect(url: &str, ns: &str) -> (Realtime, Value) {
        let ws_url = format!("{}/.ws?v=5&ns={ns}", url.replacen("http://", "ws://", 1));
        let (ws, _) = tokio_tungstenite::connect_async(ws_url).await.expect("the upgrade");
        let mut rt = Realtime { ws, next_r: 0, pushes: Vec::new() };
        let hello = rt.next().await.expect("a hello");
        (rt, hello)
    }

    async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::Text(text.into())).await.unwrap();
    }

    /// The next message (frames joined), or None when the server closed.
    async fn next(&mut self) -> Option<Value> {
        let mut expected = 0usize;
        let mut joined = String::new();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(20), self.ws.next()).await.expect("a message within 20 s");
            let text = match frame {
                Some(Ok(Message::Text(text))) => text.to_string(),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => continue,
            };
            if expected == 0 && text.len() <= 6 && text.bytes().all(|b| b.is_ascii_digit()) {
                expected = text.parse().unwrap();
                continue;
            }
            joined.push_str(&text);
            if expected > 1 {
                expected -= 1;
                continue;
            }
            return Some(serde_json::from_str(&joined).expect("JSON messages"));
        }
    }

    /// Sends request `action` and returns its answer's body (`{"s","d"}`).
    async fn request(&mut self, action: &str, body: Value) -> Value {
        self.next_r += 1;
        let r = self.next_r;
        let message = json!({"t": "d", "d": {"r": r, "a": action, "b": body}});
        self.send_text(&message.to_string()).await;
        loop {
            let message = self.next().await.expect("the server answers before it closes");
            if message["d"]["r"] == r {
                return message["d"]["b"].clone();
            }
            self.pushes.push(message);
        }
    }
}

#[tokio::test]
async fn bad_input_gets_a_clear_answer_and_the_connection_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let tern = Tern::dev(dir.path()).await;
    let (mut rt, hello) = Realtime::connect(&tern.url, "bad").await;
    assert_eq!(hello["t"], "c");
    assert_eq!(hello["d"]["t"], "h");
    assert_eq!(hello["d"]["d"]["v"], "5");
    assert!(hello["d"]["d"]["s"].as_str().is_some_and(|s| s.len() == 32), "a session id");
    let answer = |b: &Value| (b["s"].as_str().unwrap().to_string(), b["d"].as_str().unwrap_or_default().to_string());
    // Paths: a key with a forbidden character, too deep, too long; no path.
    for (body, why) in [
        (json!({"p": "/a.b", "d": 1}), "'.'"),
        (json!({"p": format!("/{}", vec!["k"; 33].join("/")), "d": 1}), "deeper than 32"),
        (json!({"p": format!("/{}", "k".repeat(800)), "d": 1}), "768"),
        (json!({"d": 1}), "\"p\""),
    ] {
        let (status, message) = answer(&rt.request("p", body).await);
        assert_eq!(status, "invalid_args");
        assert!(message.contains(why), "{message} should say {why}");
    }
    // Data Firebase does not take: a key with '/', an unknown server value.
    let (status, _) = answer(&rt.request("p", json!({"p": "/x", "d": {"a/b": 1}})).await);
    assert_eq!(status, "invalid_args");
    let (status, _) = answer(&rt.request("p", json!({"p": "/x", "d": {".sv": "nope"}})).await);
    assert_eq!(status, "invalid_args");
    // An update whose paths overlap; a query that cannot be one.
    let (status, _) = answer(&rt.request("m", json!({"p": "/x", "d": {"a": 1, "a/b": 2}})).await);
    assert_eq!(status, "invalid_args");
    let (status, message) = answer(&rt.request("q", json!({"p": "/x", "t": 1, "q": {"l": 0}, "h": ""})).await);
    assert_eq!((status.as_str(), message.contains("positive")), ("invalid_args", true));
    let (status, message) = answer(&rt.request("zz", json!({})).await);
    assert_eq!((status.as_str(), message.contains("unknown action")), ("invalid_args", true));
    // Route words and unicode are keys like any other; nothing above landed.
    assert_eq!(rt.request("p", json!({"p": "/v1/ns/ws/é✓", "d": "ok"})).await["s"], "ok");
    assert_eq!(rt.request("g", json!({"p": "/v1/ns/ws/é✓"})).await["d"], "ok");
    assert_eq!(rt.request("g", json!({"p": "/x"})).await["d"], Value::Null);
    // A request over the size bound is refused whole; the connection goes on.
    // In the SDK's order (`{"t","d":{"r","a","b"}}`): the request number comes first.
    let huge = format!(r#"{{"t":"d","d":{{"r":99,"a":"p","b":{{"p":"/big","d":"{}"}}}}}}"#, "y".repeat(5 * 1024 * 1024));
    let pieces: Vec<String> = huge.as_bytes().chunks(16_384).map(|c| String::from_utf8(c.to_vec()).unwrap()).collect();
    rt.send_text(&pieces.len().to_string()).await;
    for piece in &pieces {
        rt.send_text(piece).await;
    }
    let refused = rt.next().await.unwrap();
    assert_eq!(refused["d"]["r"], 99);
    assert_eq!(refused["d"]["b"]["s"], "too_big");
    assert_eq!(rt.request("g", json!({"p": "/big"})).await["d"], Value::Null);
    // Keep-alives and pings.
    rt.send_text("0").await;
    rt.send_text(r#"{"t":"c","d":{"t":"p","d":{}}}"#).await;
    assert_eq!(rt.next().await.unwrap()["d"]["t"], "o", "a pong");
    assert_eq!(rt.request("s", json!({"c": {"sdk.js.12-0-0": 1}})).await["s"], "ok");
    // A message that is not JSON ends the connection with an error.
    rt.send_text("{not json").await;
    let error = rt.next().await.unwrap();
    assert_eq!((error["t"].as_str(), error["d"]["t"].as_str()), (Some("c"), Some("e")));
    assert!(rt.next().await.is_none(), "closed after the error");
    // A protocol version other than 5 is refused at the upgrade.
    let response = reqwest::get(format!("{}/.ws?v=4&ns=bad", tern.url)).await.unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("v=5"));
}

#[tokio::test]
async fn a_listens_data_comes_before_its_answer_and_a_writes_events_before_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let tern = Tern::dev(dir.path()).await;
    let (mut rt, _) = Realtime::connect(&tern.url, "order").await;
    assert_eq!(rt.request("p", json!({"p": "/doc", "d": {"v": 1}})).await["s"], "ok");
    let answer = rt.request("q", json!({"p": "/doc", "h": ""})).await;
    assert_eq!(answer["s"], "ok");
    assert_eq!(rt.pushes.len(), 1, "the data came first: {:?}", rt.pushes);
    assert_eq!(rt.pushes[0]["d"]["b"], json!({"p": "/doc", "d": {"v": 1}}));
    for i in 2..20 {
        rt.pushes.clear();
        assert_eq!(rt.request("p", json!({"p": "/doc/v", "d": i})).await["s"], "ok");
        assert_eq!(rt.pushes.len(), 1, "write {i}'s event came before its answer");
        assert_eq!(rt.pushes[0]["d"]["b"]["d"], i);
    }
    // A transaction whose hash is stale is refused, after the current value.
    rt.pushes.clear();
    let stale = rt.request("p", json!({"p": "/doc/v", "d": 100, "h": "not-the-hash"})).await;
    assert_eq!(stale["s"], "datastale");
    let current = rt.request("g", json!({"p": "/doc/v"})).await;
    assert_eq!(current["d"], 19);
}

/// Issue 36, defect 9: listeners of one location share an event's frames,
/// but a listen with a tag (`t`) and an empty query took the shared path
/// too, and its tag went into the frames every other listener there got:
/// the SDK drops a push tagged for a query it does not have, so an
/// untagged listener missed updates (1-2 of 30 arrived). Failed before:
/// the untagged listener's pushes carried `t`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tagged_listen_never_lends_its_tag_to_another_clients_pushes() {
    let dir = tempfile::tempdir().unwrap();
    let tern = Tern::dev(dir.path()).await;
    let (mut tagged, _) = Realtime::connect(&tern.url, "tags").await;
    let (mut plain, _) = Realtime::connect(&tern.url, "tags").await;
    assert_eq!(tagged.request("q", json!({"p": "/room", "t": 7, "q": {}, "h": ""})).await["s"], "ok");
    assert_eq!(plain.request("q", json!({"p": "/room", "h": ""})).await["s"], "ok");
    for i in 0..30 {
        assert_eq!(tagged.request("p", json!({"p": "/room/n", "d": i})).await["s"], "ok");
    }
    // The plain listener's pushes (the 30 writes' events, and perhaps a
    // first value): none carries a tag, and the last is the last write.
    let mut last = Value::Null;
    while last["d"]["b"]["d"] != json!(29) {
        let push = plain.next().await.expect("the plain listener gets every write");
        assert_eq!(push["d"]["a"], "d", "{push}");
        assert!(push["d"]["b"].get("t").is_none(), "a push for an untagged listen carries no tag: {push}");
        last = push;
    }
}

/// Issue 36, defect 8, over the realtime protocol: rules that read data
/// are judged against the state the write lands on. Eight connections race
/// to claim each of ten names under `!data.exists()`: exactly one wins each.
/// Failed before (rules judged against the holder's view, nothing checked
/// at apply): most names had several winners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_connections_racing_for_a_name_exactly_one_wins() {
    const NAMES: usize = 10;
    const RACERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let tern = Tern::dev(dir.path()).await;
    let rules = json!({"rules": {".read": true, "names": {"$name": {".write": "!data.exists()"}}}});
    let rules_url = format!("{}/.settings/rules.json?ns=claims", tern.url);
    assert_eq!(tern.client.put(rules_url).bearer_auth("owner").body(rules.to_string()).send().await.unwrap().status(), 200);
    let mut racers = Vec::new();
    for racer in 0..RACERS {
        racers.push((racer, Realtime::connect(&tern.url, "claims").await.0));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (racer, mut rt) in racers {
        tasks.spawn(async move {
            let mut won = Vec::new();
            for name in 0..NAMES {
                // Every racer sends its claims at once; the answers come in order.
                let answer = rt.request("p", json!({"p": format!("/names/n{name}"), "d": racer})).await;
                match answer["s"].as_str() {
                    Some("ok") => won.push(name),
                    Some("permission_denied") => {}
                    other => panic!("a claim is ok or permission_denied, got {other:?}: {answer}"),
                }
            }
            (racer, won)
        });
    }
    let mut winners = vec![Vec::new(); NAMES];
    while let Some(done) = tasks.join_next().await {
        let (racer, won) = done.unwrap();
        for name in won {
            winners[name].push(racer);
        }
    }
    let (mut rt, _) = Realtime::connect(&tern.url, "claims").await;
    let names = rt.request("g", json!({"p": "/names"})).await["d"].clone();
    for (name, won) in winners.iter().enumerate() {
        assert_eq!(won.len(), 1, "name n{name} was claimed by racers {won:?}");
        assert_eq!(names[format!("n{name}")], json!(won[0]), "the winner's value stays");
    }
}

/// Two nodes in separate replica groups on one Kafka topic, gossiping: a
/// connection on `a` registers onDisconnect writes; `a` is `kill -9`ed;
/// `b` sees it dead and makes them, once (an increment shows how often).
#[tokio::test]
async fn another_node_makes_the_ondisconnect_writes_of_a_killed_node_once() {
    let prefix = format!("rt{}.", rand::random::<u32>());
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let (gossip_a, gossip_b) = (common::free_udp_port(), common::free_udp_port());
    let seed = format!("127.0.0.1:{gossip_a}");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let start = |id: &'static str, gossip: u16, dir: &std::path::Path| {
        let (log, prefix, seed, dir) = (log.clone(), prefix.clone(), seed.clone(), dir.to_path_buf());
        async move {
            let gossip = format!("127.0.0.1:{gossip}");
            let args = [
                "serve",
                "--node-id",
                id,
                "--group",
                id,
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                dir.to_str().unwrap(),
                "--log",
                &log,
                "--kafka-topic-prefix",
                &prefix,
                "--namespace",
                "fbx:1",
                "--gossip",
                &gossip,
                "--seeds",
                &seed,
                "--firebase-emulator",
            ];
            Tern::spawn(&args, &dir).await
        }
    };
    let mut a = start("a", gossip_a, dirs[0].path()).await;
    let b = start("b", gossip_b, dirs[1].path()).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.get_json("/v1/cluster").await.1["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| n["state"] == "live").count()) < 2 {
        assert!(Instant::now() < deadline, "b never saw a");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut rt, _) = Realtime::connect(&a.url, "fbx").await;
    assert_eq!(rt.request("p", json!({"p": "/who", "d": "here"})).await["s"], "ok");
    assert_eq!(rt.request("o", json!({"p": "/who", "d": "gone"})).await["s"], "ok");
    assert_eq!(rt.request("o", json!({"p": "/count", "d": {".sv": {"increment": 1}}})).await["s"], "ok");
    a.kill9();
    // Emulator conventions: a database without rules is open.
    let read = |path: &str| b.client.get(format!("{}/{path}.json?ns=fbx", b.url)).send();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let who: Value = read("who").await.unwrap().json().await.unwrap();
        if who == "gone" {
            break;
        }
        assert!(Instant::now() < deadline, "b never made a's onDisconnect writes (who = {who})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Later sweeps, and a's restart (its own sweeper sees its old boot), do not make them again.
    let a = start("a", gossip_a, dirs[0].path()).await;
    a.wait_caught_up("fbx").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let count: Value = read("count").await.unwrap().json().await.unwrap();
    assert_eq!(count, 1, "made exactly once");
    let on_a: Value = a.client.get(format!("{}/count.json?ns=fbx", a.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(on_a, 1, "the same on the other replica group");
}

/// A realtime client that stops reading holds back only itself: its
/// listen's watch conflates (the latest value per leaf), as every Tern
/// subscription's does, and when it reads again it ends on the last value.
#[tokio::test]
async fn a_client_that_stops_reading_is_conflated_and_ends_on_the_last_value() {
    let dir = tempfile::tempdir().unwrap();
    // A small watch queue, so that the test need not outgrow the loopback's socket buffers by much.
    let args = ["dev", "--listen", "127.0.0.1:0", "--data-dir", dir.path().to_str().unwrap()];
    let tern = Tern::spawn_with_env(&args, &[("TERN_WATCH_QUEUE_EVENTS_MAX", "64")], dir.path()).await;
    let (mut slow, _) = Realtime::connect(&tern.url, "slow").await;
    assert_eq!(slow.request("q", json!({"p": "/doc", "h": ""})).await["s"], "ok");
    let conflated = |metrics: &str| -> u64 {
        metrics.lines().find_map(|l| l.strip_prefix("tern_watch_conflated_events_total ")).map_or(0, |v| v.trim().parse().unwrap())
    };
    let before = conflated(&reqwest::get(format!("{}/metrics", tern.url)).await.unwrap().text().await.unwrap());
    // 20 MB of changes while `slow` reads nothing: more than the socket
    // buffers, the connection's outbox and the watch's queue hold.
    let pad = "z".repeat(10_000);
    let writer = reqwest::Client::new();
    for seq in 0..2000u32 {
        let response = writer.put(format!("{}/doc.json?ns=slow", tern.url)).body(json!({"seq": seq, "pad": pad}).to_string()).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    // Reading again: the pushes end with the last value, nothing after it.
    let mut last_seq = None;
    while last_seq != Some(1999) {
        let push = slow.next().await.expect("the connection is still open");
        let data = &push["d"]["b"]["d"];
        if let Some(seq) = data.get("seq").or(Some(data)).and_then(Value::as_u64) {
            let path = push["d"]["b"]["p"].as_str().unwrap_or_default();
            if path == "/doc" || path == "/doc/seq" {
                last_seq = Some(seq);
            }
        }
    }
    assert_eq!(slow.request("g", json!({"p": "/doc/seq"})).await["d"], 1999);
    // Counted as the conflated run is sent, that is once the client read again.
    let after = conflated(&reqwest::get(format!("{}/metrics", tern.url)).await.unwrap().text().await.unwrap());
    assert!(after > before, "the slow listen was conflated ({before} → {after})");
}

/// Two nodes sharing one replica group on Kafka: the database (one
/// partition) is held by one of them. A client that connects to the other
/// is sent the protocol's reset to the holder (as Firebase redirects a
/// client to its database's server), and works there.
#[tokio::test]
async fn a_node_that_does_not_hold_the_database_resets_the_client_to_one_that_does() {
    let prefix = format!("rr{}.", rand::random::<u32>());
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let (gossip_1, gossip_2) = (common::free_udp_port(), common::free_udp_port());
    let seed = format!("127.0.0.1:{gossip_1}");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut nodes = Vec::new();
    for (id, gossip, dir) in [("n1", gossip_1, dirs[0].path()), ("n2", gossip_2, dirs[1].path())] {
        let gossip = format!("127.0.0.1:{gossip}");
        let args = [
            "serve",
            "--node-id",
            id,
            "--group",
            "g",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.to_str().unwrap(),
            "--log",
            &log,
            "--kafka-topic-prefix",
            &prefix,
            "--namespace",
            "fbr:1,spread:4",
            "--gossip",
            &gossip,
            "--seeds",
            &seed,
            "--firebase-emulator",
        ];
        nodes.push(Tern::spawn_listening(&args, &[], dir));
    }
    // Wait until the group's assignment settled with both members (each
    // serves partitions of `spread`: the rebalance that gave the second
    // member its share is over), both nodes agree, one of them serves the
    // database's partition, and no node still hands it off (a node handing
    // a partition off serves it, by design, until the new owner does).
    let deadline = Instant::now() + Duration::from_secs(90);
    let serves = |view: &Value, ns: &str| -> Vec<String> {
        view["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["state"] == "live" && n["partitions"].as_array().is_some_and(|p| p.iter().any(|p| p["ns"] == ns)))
            .map(|n| n["address"].as_str().unwrap().to_string())
            .collect()
    };
    let hands_off = |view: &Value, ns: &str| -> bool {
        view["nodes"].as_array().into_iter().flatten().any(|n| n["handing_off"].as_array().is_some_and(|p| p.iter().any(|p| p["ns"] == ns)))
    };
    let (holder, other) = loop {
        let views = [nodes[0].get_json("/v1/cluster").await.1, nodes[1].get_json("/v1/cluster").await.1];
        let settled = views.iter().all(|v| serves(v, "spread").len() == 2 && serves(v, "fbr").len() == 1 && !hands_off(v, "fbr"))
            && serves(&views[0], "fbr") == serves(&views[1], "fbr");
        if settled {
            let holder_url = format!("http://{}", serves(&views[0], "fbr")[0]);
            break if nodes[0].url == holder_url { (0, 1) } else { (1, 0) };
        }
        assert!(Instant::now() < deadline, "the group's assignment never settled: {views:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (mut rt, first) = Realtime::connect(&nodes[other].url, "fbr").await;
    assert_eq!(first["t"], "c");
    assert_eq!(first["d"]["t"], "r", "a reset, not a hello: {first}");
    let host = first["d"]["d"].as_str().unwrap();
    assert_eq!(format!("http://{host}"), nodes[holder].url);
    assert!(rt.next().await.is_none(), "the connection closes after the reset");
    // The holder serves it.
    let (mut rt, hello) = Realtime::connect(&nodes[holder].url, "fbr").await;
    assert_eq!(hello["d"]["t"], "h");
    assert_eq!(rt.request("p", json!({"p": "/x", "d": 1})).await["s"], "ok");
    assert_eq!(rt.request("g", json!({"p": "/x"})).await["d"], 1);
}

/// A credential that expires while its connection is open: requests after
/// that are refused, as its listens are ended (`ac`), until the SDK
/// authenticates again; a credential already expired is `invalid_token`.
#[tokio::test]
async fn a_credential_that_expires_is_refused_from_then_on() {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let tern = Tern::dev(dir.path()).await;
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let token = |exp: u64| {
        let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.", b64(json!({"alg": "none"})), b64(json!({"sub": "eve", "iat": now_s, "exp": exp})))
    };
    let (mut rt, _) = Realtime::connect(&tern.url, "expiry").await;
    let expired = rt.request("auth", json!({"cred": token(now_s - 10)})).await;
    assert_eq!(expired["s"], "invalid_token");
    let answer = rt.request("auth", json!({"cred": token(now_s + 2)})).await;
    assert_eq!(answer["s"], "ok");
    assert_eq!(answer["d"]["auth"]["uid"], "eve");
    assert_eq!(rt.request("p", json!({"p": "/x", "d": 1})).await["s"], "ok");
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let refused = rt.request("p", json!({"p": "/x", "d": 2})).await;
    assert_eq!(refused["s"], "permission_denied");
    assert!(refused["d"].as_str().unwrap().contains("expired"));
    // A fresh credential, and it goes on.
    assert_eq!(rt.request("auth", json!({"cred": token(now_s + 600)})).await["s"], "ok");
    assert_eq!(rt.request("p", json!({"p": "/x", "d": 3})).await["s"], "ok");
    assert_eq!(rt.request("g", json!({"p": "/x"})).await["d"], 3);
}

/// Issue 36, defect 11: a sweeper that wrongly took this node for dead
/// (gossip can be wrong) fires a live connection's onDisconnect writes; the
/// connection stayed open believing them armed, and they were never made
/// again when it really went. Now a connection whose registration was
/// fired while it lives is closed (within its armed check, 5 s), so the SDK
/// reconnects and the app registers again. Failed before: no close (the
/// helper's 20 s wait for a message ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_ondisconnect_was_fired_while_it_lives_is_closed() {
    use tern::node::reserved::Writer;
    use tern::node::write::{Entry, WriteRequest};
    let dir = tempfile::tempdir().unwrap();
    let log = std::sync::Arc::new(crate::common::steered_log::SteeredLog::new(&dir.path().join("log")));
    let settings = tern::settings::Settings { data_dir: dir.path().join("node"), store_cache_bytes: 1 << 20, ..Default::default() };
    let node = tern::node::Node::start(settings.node_config(None), log).await.unwrap();
    node.create_namespace("presence", 1).await.unwrap();
    // The emulator's conventions (as `tern dev`): a database without rules is open.
    let address = crate::common::steered_log::serve_alone(node.clone(), tern::firebase::FirebaseConfig::new(None, true)).await;
    let (mut rt, hello) = Realtime::connect(&format!("http://{address}"), "presence").await;
    let session = hello["d"]["d"]["s"].as_str().unwrap().to_string();
    assert_eq!(rt.request("o", json!({"p": "/status/me", "d": "offline"})).await["s"], "ok");
    // Fired by someone else: the record goes (as a firing entry deletes it).
    let namespace = node.namespace("presence").expect("the database's namespace");
    let pk = tern::firebase::db::ondisconnect::registrations_pk(&namespace);
    let op = tern::codec::Op { pk, sk: session, kind: tern::codec::OpKind::Delete, condition: None };
    let mutation = tern::codec::Mutation { ops: vec![op], ..Default::default() };
    let partition = namespace.partition_of(tern::tree::TREE_PK);
    node.write_sequenced(&namespace, WriteRequest::new(Writer::FirebaseTree, partition, Entry::Mutation(mutation))).await.unwrap();
    let started = Instant::now();
    assert!(rt.next().await.is_none(), "the connection is closed, not pushed to");
    assert!(started.elapsed() < Duration::from_secs(15), "closed at its next check: {:?}", started.elapsed());
    node.stop_apply().await;
}
