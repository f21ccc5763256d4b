//! Every wait is bounded: a log that stops answering (a broker outage, a
//! stalled disk) makes requests fail within their own bounds, never hang.

use std::sync::Arc;
use std::time::Duration;

use tern::cluster::{Cluster, SelfInfo};
use tern::node::Node;

use crate::common::steered_log::SteeredLog;

/// Generous: only a hang (the bug) exceeds it.
const HANG: Duration = Duration::from_secs(20);

/// With the log's offsets stalled, a strong read answers within its own
/// `timeout_ms` (503 log_unavailable), and describing a namespace of 16
/// partitions answers at once with the offsets it could not get as null.
/// Before the fix both waited for the log (the describe one partition after
/// another): they never answered while it was stalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_log_bounds_strong_reads_and_namespace_views() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SteeredLog::new(&dir.path().join("log")));
    let settings = tern::settings::Settings { data_dir: dir.path().join("node"), store_cache_bytes: 1 << 20, ..Default::default() };
    let node = Node::start(settings.node_config(None), log.clone()).await.unwrap();
    node.create_namespace("ns", 16).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let me = SelfInfo { id: "alone".into(), region: "r1".into(), group: "g".into(), api: address.clone(), api_for: Default::default() };
    let app = tern::http::app(node.clone(), Cluster::with_peers(me, node.clone(), Vec::new()));
    tokio::spawn(async move {
        axum::serve(listener, axum::ServiceExt::<axum::extract::Request>::into_make_service(app)).await.unwrap();
    });
    let client = reqwest::Client::new();
    let url = format!("http://{address}");
    let response = client.put(format!("{url}/v1/ns/ns/kv/k/?wait=applied")).body("1").send().await.unwrap();
    assert_eq!(response.status(), 200);

    log.offsets_open.send_replace(false);
    let strong = client.get(format!("{url}/v1/ns/ns/kv/k/?consistency=strong&timeout_ms=300")).send();
    let response = tokio::time::timeout(HANG, strong).await.expect("a strong read answers within its timeout").unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "log_unavailable", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("timeout_ms=300"), "{body}");

    let described = tokio::time::timeout(HANG, client.get(format!("{url}/v1/ns/ns")).send()).await.expect("the view answers").unwrap();
    assert_eq!(described.status(), 200);
    let body: serde_json::Value = described.json().await.unwrap();
    let state = body["state"].as_array().unwrap();
    assert_eq!(state.len(), 16);
    assert!(state.iter().all(|p| p["log_end_offset"].is_null() && p["records"].is_u64()), "{body}");
    // A local read needs no log: answered as ever.
    let local = client.get(format!("{url}/v1/ns/ns/kv/k/")).send().await.unwrap();
    assert_eq!(local.status(), 200);
    log.offsets_open.send_replace(true);
    node.stop_apply().await;
}
