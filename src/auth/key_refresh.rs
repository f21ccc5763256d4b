//! Each node's key ring kept current: the API keys' records live in the
//! system namespace (`_tern`, pk `keys`, sk = key id: `api/tokens.rs`
//! writes them through the log), and every `REFRESH_INTERVAL` each node
//! reloads them — from its own store when it holds their partition, else
//! from a holder, asked as this node (`PeerClient::get_as_node`, with the
//! root token the nodes of a cluster share). A revocation therefore takes
//! effect on the node that took it at once and on every other within a
//! refresh. When no source answers, the keys known stay in force.

use std::sync::Arc;
use std::time::Duration;

use super::keys::{KeyRecord, KEYS_MAX};
use super::{Authenticator, KEYS_PK, SYSTEM_NAMESPACE};
use crate::cluster::{Cluster, RECORD_HOLDERS_TRIED_MAX};
use crate::node::Node;
use crate::store::SkRange;

/// How often each node reloads the keys: a revocation's delay elsewhere.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Partitions of the system namespace (a few keys; one partition keeps them in order).
pub const SYSTEM_PARTITIONS: u32 = 1;
/// Largest page of key records a holder answers (1,000 records of at most ~16 KiB).
const PAGE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Opens the system namespace (at start, when authentication is on).
pub async fn open_system_namespace(node: &Node) -> anyhow::Result<()> {
    node.create_system_namespace(SYSTEM_NAMESPACE, SYSTEM_PARTITIONS).await?;
    Ok(())
}

/// Reloads `authenticator`'s key ring every `REFRESH_INTERVAL`, until the
/// task is stopped.
pub async fn refresh_forever(authenticator: Arc<Authenticator>, node: Arc<Node>, cluster: Arc<Cluster>) {
    let mut interval = tokio::time::interval(REFRESH_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error = String::new();
    loop {
        interval.tick().await;
        match load(&node, &cluster).await {
            Ok(records) => {
                authenticator.keys.replace(records);
                last_error.clear();
            }
            // Keep the keys known; say a new problem once.
            Err(e) if e != last_error => {
                tracing::warn!(error = %e, "cannot reload the API keys; the ones known stay in force");
                last_error = e;
            }
            Err(_) => {}
        }
    }
}

/// Every stored key record: from this node's store, else from a holder.
async fn load(node: &Node, cluster: &Cluster) -> Result<Vec<KeyRecord>, String> {
    let namespace = node.namespace(SYSTEM_NAMESPACE).ok_or("the system namespace is not open")?;
    let partition = namespace.partition_of(KEYS_PK);
    let handle = namespace.handle(partition);
    if handle.is_held() {
        let reader = handle.read_store().map_err(|e| e.to_string())?;
        let (records, _) = reader.list(KEYS_PK, &SkRange::default(), KEYS_MAX, usize::MAX).map_err(|e| e.to_string())?;
        return Ok(records.iter().filter_map(|r| parse(&r.value)).collect());
    }
    let holders = cluster.holders(SYSTEM_NAMESPACE, partition);
    if holders.is_empty() {
        return Err("no live node that holds the API keys is known".into());
    }
    // The best holders in turn: one unreachable, or letting the partition
    // go, must not stop the refresh until the probes rank it lower.
    let mut failures = Vec::new();
    for holder in holders.iter().take(RECORD_HOLDERS_TRIED_MAX) {
        match load_from_holder(cluster, holder).await {
            Ok(records) => return Ok(records),
            Err(e) => failures.push(format!("{} ({}): {e}", holder.id, holder.api)),
        }
    }
    Err(format!("no holder of the API keys answered: {}", failures.join("; ")))
}

fn parse(value: &[u8]) -> Option<KeyRecord> {
    match serde_json::from_slice::<KeyRecord>(value) {
        Ok(record) => Some(record),
        Err(e) => {
            tracing::warn!(error = %e, "a stored API key record does not parse; skipped");
            None
        }
    }
}

/// Pages through a holder's list of the keys (GETs as this node), at most
/// as many pages as `KEYS_MAX` records fill.
async fn load_from_holder(cluster: &Cluster, holder: &crate::cluster::Member) -> Result<Vec<KeyRecord>, String> {
    let mut records = Vec::new();
    let mut cursor: Option<String> = None;
    let pages_max = KEYS_MAX / crate::limits::LIST_LIMIT_MAX + 1;
    for _ in 0..pages_max {
        let mut path = format!("/v1/ns/{SYSTEM_NAMESPACE}/kv/{KEYS_PK}?limit={}", crate::limits::LIST_LIMIT_MAX);
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, body) = cluster.client().get_as_node(holder, &cluster.me().id, &path, PAGE_BYTES_MAX).await?;
        if status != http::StatusCode::OK {
            return Err(format!("{} answered {status}: {}", holder.id, String::from_utf8_lossy(&body)));
        }
        let page: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        for item in page["items"].as_array().map(Vec::as_slice).unwrap_or_default() {
            if let Some(record) = item.get("value").and_then(|v| serde_json::from_value::<KeyRecord>(v.clone()).ok()) {
                records.push(record);
            }
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(records),
        }
    }
    Err(format!("more than {KEYS_MAX} keys"))
}
