//! Forwarding's failure answers, in process with a fixed cluster map: a node
//! that holds no partition of a namespace (its log assigns it none) answers
//! reads through a holder, and says precisely why when it cannot:
//! `no_holder` (none known), `holder_unreachable` (known, not answering),
//! `not_held` (a forwarded request for a partition it does not hold). Plain
//! writes are still accepted (any node appends any write); writes that need
//! an outcome are not appended when no holder can report it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tern::cluster::{Cluster, Member, SelfInfo};
use tern::log::{Assignment, TopicPartition};
use tern::node::Node;

use crate::common::steered_log::SteeredLog;

/// Serves the API of a node that holds nothing, with `peers` as its cluster map.
async fn serve(dir: &std::path::Path, peers: Vec<Member>) -> (String, Arc<Node>) {
    serve_with(dir, peers, tern::firebase::FirebaseConfig::default()).await
}

/// `serve`, speaking Firebase as `firebase` says.
async fn serve_with(dir: &std::path::Path, peers: Vec<Member>, firebase: tern::firebase::FirebaseConfig) -> (String, Arc<Node>) {
    // Assigned no partition: a replica-group member whose peers hold them all.
    let log = SteeredLog::new(&dir.join("log"));
    log.assignment.send_replace(Assignment::Only(BTreeSet::new()));
    let settings = tern::settings::Settings { data_dir: dir.join("node"), store_cache_bytes: 1 << 20, ..Default::default() };
    let config = settings.node_config(None);
    let node = Node::start(config, Arc::new(log)).await.unwrap();
    node.create_namespace("ns", 2).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let me = SelfInfo { id: "edge".into(), region: "r1".into(), group: "g".into(), api: address.clone(), api_for: Default::default() };
    let state = tern::edge::AppState::new(node.clone(), Cluster::with_peers(me, node.clone(), peers));
    let app = tern::http::service(tern::http::Protocols::new(state, firebase));
    tokio::spawn(async move {
        axum::serve(listener, axum::ServiceExt::<axum::extract::Request>::into_make_service(app)).await.unwrap();
    });
    (format!("http://{address}"), node)
}

/// A live peer in region r1, group g, at `api`, with what it serves.
fn peer(id: &str, api: impl Into<String>, held: BTreeMap<String, BTreeMap<u32, u64>>, handing_off: BTreeMap<String, BTreeMap<u32, u64>>) -> Member {
    Member {
        id: id.into(),
        region: "r1".into(),
        group: "g".into(),
        api: api.into(),
        rtt: BTreeMap::new(),
        state: "live",
        is_self: false,
        held,
        handing_off,
        refused: BTreeMap::new(),
    }
}

async fn send(request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_holds_nothing_says_why_it_cannot_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (url, node) = serve(dir.path(), Vec::new()).await;
    let client = reqwest::Client::new();

    let (status, body) = send(client.get(format!("{url}/v1/ns/ns/kv/k/"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("no_holder")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("not held by this node (edge)") && message.contains("/v1/cluster"), "{message}");

    // A plain write is appended here; one that needs its outcome is not (no holder to report it).
    let tp = TopicPartition { topic: Arc::from("ns"), partition: tern::partitioner::partition_of("k", 2) };
    let (status, body) = send(client.put(format!("{url}/v1/ns/ns/kv/k/")).body("1")).await;
    assert_eq!(status, 200, "any node accepts a plain write: {body}");
    let end = node.log.end_offset(&tp).await.unwrap();
    let (status, body) = send(client.put(format!("{url}/v1/ns/ns/kv/k/?wait=applied")).body("2")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("no_holder")), "{body}");
    let (status, body) = send(client.put(format!("{url}/v1/ns/ns/kv/k/")).header("Idempotency-Key", "x").body("2")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("no_holder")), "{body}");
    assert_eq!(node.log.end_offset(&tp).await.unwrap(), end, "nothing appended for writes that could not learn their outcome");

    // Requests forwarded here are never forwarded again.
    let (status, body) = send(client.get(format!("{url}/v1/ns/ns/kv/k/")).header("x-tern-forwarded-by", "other")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("not_held")), "{body}");

    // The namespace view says which partitions this node does not hold.
    let (_, ns) = send(client.get(format!("{url}/v1/ns/ns"))).await;
    for p in ns["state"].as_array().unwrap() {
        assert_eq!((&p["held"], &p["status"]), (&serde_json::json!(false), &serde_json::json!("not_held")), "{p}");
    }
    let (status, _) = send(client.get(format!("{url}/readyz"))).await;
    assert_eq!(status, 200, "holding nothing is ready: there is nothing to catch up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_holder_is_a_clear_503() {
    // A port nothing listens on: bound, read, released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let held: BTreeMap<u32, u64> = [(0, 5), (1, 5)].into_iter().collect();
    let gone = peer("gone", closed.to_string(), [("ns".to_string(), held)].into_iter().collect(), BTreeMap::new());
    let dir = tempfile::tempdir().unwrap();
    let (url, _node) = serve(dir.path(), vec![gone]).await;
    let client = reqwest::Client::new();
    let (status, body) = send(client.get(format!("{url}/v1/ns/ns/kv/k/"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("holder_unreachable")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("gone"), "names the holder: {body}");
    let (status, body) = send(client.post(format!("{url}/v1/ns/ns/get")).json(&serde_json::json!({"keys": [{"pk": "k"}]}))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("holder_unreachable")), "{body}");
    let (_, cluster) = send(client.get(format!("{url}/v1/cluster"))).await;
    assert_eq!(cluster["nodes"][1]["id"], "gone", "{cluster}");
    assert_eq!(cluster["nodes"][1]["partitions"].as_array().unwrap().len(), 2, "{cluster}");
}

/// Forwarding errors reach answers and logs, so they never carry the
/// holder's URL: its query may hold the caller's token (Firebase's `?auth=`,
/// a watch's `?access_token=`). Before the fix the 503's message quoted
/// reqwest's error, URL and token included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_error_never_repeats_the_callers_token() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let held: BTreeMap<u32, u64> = [(0, 5), (1, 5)].into_iter().collect();
    let gone = peer("gone", closed.to_string(), [("ns".to_string(), held)].into_iter().collect(), BTreeMap::new());
    let dir = tempfile::tempdir().unwrap();
    let secret = "owner-secret-token-1234";
    let (url, _node) = serve_with(dir.path(), vec![gone], tern::firebase::FirebaseConfig::new(Some(secret.into()), false)).await;
    let response = reqwest::get(format!("{url}/scores.json?ns=ns&auth={secret}")).await.unwrap();
    assert_eq!(response.status(), 503);
    let text = response.text().await.unwrap();
    assert!(text.contains("gone"), "names the holder: {text}");
    assert!(!text.contains(secret), "the answer repeats the caller's token: {text}");
}

/// A hand-off in progress: the new owner is still catching up (it serves
/// nothing yet) and the old one still serves the partition it was revoked.
/// The old one is advertised as handing off, and requests go there instead
/// of failing. Before the fix a handing-off partition was not advertised at
/// all, so the group answered 503 `no_holder` for the whole catch-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_being_handed_off_is_served_by_its_old_owner() {
    let dev_dir = tempfile::tempdir().unwrap();
    let old_owner = crate::common::Tern::dev(dev_dir.path()).await;
    let (status, _) = old_owner.send(old_owner.client.put(format!("{}/v1/ns/ns", old_owner.url)).json(&serde_json::json!({"partitions": 2}))).await;
    assert_eq!(status, 201);
    let (status, _) = old_owner.send(old_owner.client.put(format!("{}/v1/ns/ns/kv/k/?wait=applied", old_owner.url)).body("7")).await;
    assert_eq!(status, 200);
    let handing_off: BTreeMap<u32, u64> = [(0, 1), (1, 1)].into_iter().collect();
    let old =
        peer("old-owner", old_owner.url.trim_start_matches("http://"), BTreeMap::new(), [("ns".to_string(), handing_off)].into_iter().collect());
    let dir = tempfile::tempdir().unwrap();
    let (url, _node) = serve(dir.path(), vec![old]).await;
    let client = reqwest::Client::new();
    let (status, body) = send(client.get(format!("{url}/v1/ns/ns/kv/k/"))).await;
    assert_eq!((status, body["value"].as_i64()), (200, Some(7)), "served by the member handing it off: {body}");
    let (_, cluster) = send(client.get(format!("{url}/v1/cluster"))).await;
    let shown = &cluster["nodes"][1]["handing_off"];
    assert_eq!(shown.as_array().map(Vec::len), Some(2), "{cluster}");
}

/// A holder that takes a forwarded write and drops the connection before
/// answering may have applied it: the client is told the outcome is
/// unknown (and how to retry safely), never "retry". Before the fix it was
/// told `holder_unreachable ... retry`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lost_in_forwarding_is_reported_as_outcome_unknown() {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                // Reads the request, then goes away without an answer.
                let mut buf = [0u8; 4096];
                let _ = tokio::time::timeout(std::time::Duration::from_millis(300), socket.read(&mut buf)).await;
                drop(socket);
            });
        }
    });
    let held: BTreeMap<u32, u64> = [(0, 5), (1, 5)].into_iter().collect();
    let flaky = peer("flaky", address, [("ns".to_string(), held)].into_iter().collect(), BTreeMap::new());
    let dir = tempfile::tempdir().unwrap();
    let (url, _node) = serve(dir.path(), vec![flaky]).await;
    let client = reqwest::Client::new();
    let (status, body) = send(client.put(format!("{url}/v1/ns/ns/kv/k/?wait=applied")).body("1")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (502, Some("outcome_unknown")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("Idempotency-Key"), "{body}");
    let (status, body) = send(client.put(format!("{url}/v1/ns/ns/kv/k/")).header("Idempotency-Key", "w1").body("1")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (502, Some("outcome_unknown")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("same Idempotency-Key"), "{body}");
    // A read is safe to retry: it says so.
    let (status, body) = send(client.get(format!("{url}/v1/ns/ns/kv/k/"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("holder_unreachable")), "{body}");
}

/// A Firebase request for a tree this node does not hold goes to the
/// holder with the caller's credentials and conditions (the holder checks
/// the rules for that caller again, and decides the ETag), and the
/// holder's `ETag` comes back. Before: the holder saw an anonymous request
/// without its conditions, and the answer lost its `ETag`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_firebase_request_carries_its_caller_and_conditions_and_relays_the_etag() {
    use axum::http::HeaderMap;
    let seen: Arc<parking_lot::Mutex<Vec<HeaderMap>>> = Arc::default();
    let holder = axum::Router::new().fallback({
        let seen = seen.clone();
        move |headers: HeaderMap| {
            seen.lock().push(headers);
            async { ([("etag", "\"tag-1\""), ("content-type", "application/json; charset=utf-8")], "42") }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let holder_api = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, holder).await.unwrap() });
    let held = BTreeMap::from([("ns".to_string(), BTreeMap::from([(0, 1), (1, 1)]))]);
    let dir = tempfile::tempdir().unwrap();
    let firebase = tern::firebase::FirebaseConfig::new(Some("owner".into()), false);
    let (url, _node) = serve_with(dir.path(), vec![peer("holder", holder_api, held, BTreeMap::new())], firebase).await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{url}/scores/alice.json?ns=ns"))
        .bearer_auth("owner")
        .header("X-Firebase-ETag", "true")
        .header("If-None-Match", "\"tag-0\"")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["etag"], "\"tag-1\"", "the holder's ETag comes back");
    assert_eq!(response.headers()["x-tern-served-by"], "holder");
    assert_eq!(response.text().await.unwrap(), "42");
    let put = client.put(format!("{url}/scores/alice.json?ns=ns")).bearer_auth("owner").header("If-Match", "\"tag-1\"").body("43");
    assert_eq!(put.send().await.unwrap().status(), 200);
    let seen = seen.lock();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0]["authorization"], "Bearer owner");
    assert_eq!(seen[0]["x-firebase-etag"], "true");
    assert_eq!(seen[0]["if-none-match"], "\"tag-0\"");
    assert_eq!(seen[1]["authorization"], "Bearer owner");
    assert_eq!(seen[1]["if-match"], "\"tag-1\"");
    assert_eq!(seen[1]["x-tern-forwarded-by"], "edge");
}

/// A database's rules file on a node that does not hold its partition is
/// read and written at a holder: the store here is not the rules every
/// replica enforces. Before: GET answered this node's empty store (the
/// default rules), and PUT failed with 503 `not_held`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_file_of_a_database_held_elsewhere_is_read_and_written_at_a_holder() {
    use axum::http::{Method, Uri};
    type Seen = (Method, String, Option<axum::http::HeaderValue>, bytes::Bytes);
    let seen: Arc<parking_lot::Mutex<Vec<Seen>>> = Arc::default();
    let holder = axum::Router::new().fallback({
        let seen = seen.clone();
        move |method: Method, uri: Uri, headers: axum::http::HeaderMap, body: bytes::Bytes| {
            seen.lock().push((method, uri.to_string(), headers.get("authorization").cloned(), body));
            async { ([("content-type", "application/json; charset=utf-8")], r#"{"rules": {".read": "auth != null"}}"#) }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let holder_api = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, holder).await.unwrap() });
    let held = BTreeMap::from([("ns".to_string(), BTreeMap::from([(0, 1), (1, 1)]))]);
    let dir = tempfile::tempdir().unwrap();
    let firebase = tern::firebase::FirebaseConfig::new(Some("owner".into()), false);
    let (url, _node) = serve_with(dir.path(), vec![peer("holder", holder_api, held, BTreeMap::new())], firebase).await;
    let client = reqwest::Client::new();
    let rules_url = format!("{url}/.settings/rules.json?ns=ns");

    let read = client.get(&rules_url).bearer_auth("owner").send().await.unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.headers()["x-tern-served-by"], "holder");
    assert_eq!(read.text().await.unwrap(), r#"{"rules": {".read": "auth != null"}}"#);

    let rules = r#"{"rules": {".read": true, ".write": false}}"#;
    let written = client.put(&rules_url).bearer_auth("owner").body(rules).send().await.unwrap();
    assert_eq!(written.status(), 200, "{:?}", written.text().await);
    {
        let seen = seen.lock();
        assert_eq!(seen.len(), 2);
        assert_eq!((seen[0].0.clone(), seen[0].1.as_str()), (Method::GET, "/.settings/rules.json?ns=ns"));
        assert_eq!((seen[1].0.clone(), seen[1].1.as_str(), &seen[1].3[..]), (Method::PUT, "/.settings/rules.json?ns=ns", rules.as_bytes()));
        for (method, _, authorization, _) in seen.iter() {
            assert_eq!(authorization.as_ref().map(|v| v.as_bytes()), Some(&b"Bearer owner"[..]), "{method}: the holder checks the owner again");
        }
    }

    // Only the owner reads or writes rules, with GET or PUT: anything else
    // is refused here, never forwarded.
    let anonymous = client.get(&rules_url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let deleted = client.delete(&rules_url).bearer_auth("owner").send().await.unwrap();
    assert_eq!(deleted.status(), 405);
    assert_eq!(seen.lock().len(), 2, "the refused requests were not forwarded");
}

/// A holder that let the partition go (gossip was behind) answers a
/// forwarded Firebase request 503 `not_held`, and the next holder is asked.
/// Before: Firebase's error body (`{"error": message}`) lost the code, so
/// the forwarding node relayed the 503 instead of trying the next holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firebase_request_goes_on_to_the_next_holder_when_one_no_longer_holds_it() {
    let holder = axum::Router::new().fallback(|| async { ([("content-type", "application/json; charset=utf-8")], "42") });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let holder_api = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, holder).await.unwrap() });
    let firebase = || tern::firebase::FirebaseConfig::new(Some("owner".into()), false);
    // A real node that holds nothing: asked by another node, it says not_held.
    let (stale_dir, edge_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (stale_url, _stale) = serve_with(stale_dir.path(), Vec::new(), firebase()).await;
    let held = BTreeMap::from([("ns".to_string(), BTreeMap::from([(0, 1), (1, 1)]))]);
    // Ranked first: the same offsets, and its id sorts first.
    let peers = vec![
        peer("a-stale", stale_url.trim_start_matches("http://"), held.clone(), BTreeMap::new()),
        peer("b-holder", holder_api, held, BTreeMap::new()),
    ];
    let (url, _node) = serve_with(edge_dir.path(), peers, firebase()).await;
    let client = reqwest::Client::new();

    let stale_says = client.get(format!("{stale_url}/scores/alice.json?ns=ns")).bearer_auth("owner").header("x-tern-forwarded-by", "test");
    let stale_says = stale_says.send().await.unwrap();
    assert_eq!(stale_says.status(), 503);
    assert_eq!(stale_says.headers()["x-tern-error-code"], "not_held", "Firebase's error shape carries the code as a header");

    let read = client.get(format!("{url}/scores/alice.json?ns=ns")).bearer_auth("owner").send().await.unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.headers()["x-tern-served-by"], "b-holder");
    assert_eq!(read.text().await.unwrap(), "42");
}

/// A node that holds no partition of a namespace lists it through the
/// partitions' holder (one page per partition, merged): the same records in
/// `(pk, sk)` order, page by page, as the holder lists them itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_listing_merges_the_pages_of_its_holders() {
    let dev_dir = tempfile::tempdir().unwrap();
    let holder = crate::common::Tern::dev(dev_dir.path()).await;
    let (status, _) = holder.send(holder.client.put(format!("{}/v1/ns/ns", holder.url)).json(&serde_json::json!({"partitions": 2}))).await;
    assert_eq!(status, 201);
    let mut written = BTreeSet::new();
    for i in 0..25 {
        let pk = format!("k{}", i * 7 % 25);
        let url = format!("{}?wait=applied", holder.kv_url("ns", &pk, Some(&format!("s{}", i % 3))));
        let (status, body) = holder.send(holder.client.put(url).json(&i)).await;
        assert_eq!(status, 200, "{body}");
        written.insert((pk, format!("s{}", i % 3)));
    }
    let held: BTreeMap<u32, u64> = [(0, 1), (1, 1)].into_iter().collect();
    let holder_peer = peer("holder", holder.url.trim_start_matches("http://"), [("ns".to_string(), held)].into_iter().collect(), BTreeMap::new());
    let dir = tempfile::tempdir().unwrap();
    let (url, _node) = serve(dir.path(), vec![holder_peer]).await;
    let client = reqwest::Client::new();
    let (mut listed, mut cursor) = (Vec::new(), None::<String>);
    for _ in 0..100 {
        let page_url = match &cursor {
            Some(cursor) => format!("{url}/v1/ns/ns/kv?limit=4&cursor={cursor}"),
            None => format!("{url}/v1/ns/ns/kv?limit=4"),
        };
        let (status, body) = send(client.get(page_url)).await;
        assert_eq!(status, 200, "{body}");
        let position = body["position"].as_str().unwrap();
        assert!(position.starts_with("ns:") && position.contains("0:") && position.contains("1:"), "both partitions' offsets: {body}");
        for item in body["items"].as_array().unwrap() {
            listed.push((item["pk"].as_str().unwrap().to_string(), item["sk"].as_str().unwrap().to_string()));
        }
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(listed, written.into_iter().collect::<Vec<_>>());
    // One partition: passed to its holder whole.
    let (status, body) = send(client.get(format!("{url}/v1/ns/ns/kv?partition=1&limit=1000"))).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["items"].as_array().unwrap().iter().all(|item| tern::partitioner::partition_of(item["pk"].as_str().unwrap(), 2) == 1), "{body}");
    // HEAD is forwarded as the read it is: the GET's length, no body (it said 0 before).
    for path in ["/v1/ns/ns/kv/k0/s0", "/v1/ns/ns/kv?partition=1&limit=3"] {
        let get = client.get(format!("{url}{path}")).send().await.unwrap();
        let (get_status, got) = (get.status(), get.bytes().await.unwrap());
        let head = client.head(format!("{url}{path}")).send().await.unwrap();
        assert_eq!((head.status(), get_status), (reqwest::StatusCode::OK, reqwest::StatusCode::OK), "{path}");
        let length = head.headers().get("content-length").map(|v| v.to_str().unwrap().to_string());
        assert_eq!(length, Some(got.len().to_string()), "{path}");
        assert!(head.bytes().await.unwrap().is_empty());
    }
}
