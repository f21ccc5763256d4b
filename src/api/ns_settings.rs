//! Namespace settings: `write_mode` (issue 19), set by `PUT /v1/ns/{ns}`
//! and shown by `GET /v1/ns/{ns}`.
//!
//! They are a record of the namespace itself, pk `.settings` sk
//! `namespace`, JSON `{"write_mode": "sequenced" | "journaled"}`, written
//! through the log like any other record (beside the Firebase rules at
//! `.settings`/`rules`). So every replica of the namespace learns them in
//! log order, they survive restarts and snapshots, and a new replica
//! restored from a snapshot has them — no second source of truth to keep
//! in step.
//!
//! A node reads them where it can:
//! - when it holds the settings record's partition: from its store, read
//!   again only after that partition applied something (the applied
//!   position is taken before the read, so the cache is never older than
//!   what it is kept under; a write of the settings waits until applied
//!   here, so the next write on this node sees the new mode);
//! - else from a holder, asked at most every `REMOTE_TTL` (a mode changed
//!   on another node reaches this one within that); if no holder answers,
//!   the last known settings (at first: the defaults) stay in force.
//!
//! Owns: the settings record's format and the per-node cache. Never: the
//! write path's decisions (records.rs reads `write_mode` and decides).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, Method, StatusCode, Uri};
use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::forward::{self, Incoming};
use super::AppState;
use crate::codec::{Mutation, Op, OpKind};
use crate::partition::Namespace;

pub const SETTINGS_PK: &str = ".settings";
pub const SETTINGS_SK: &str = "namespace";
/// How long settings read from another node are used before asking again.
const REMOTE_TTL: Duration = Duration::from_secs(5);
/// How long writing the settings waits for this node to apply them.
const APPLY_WAIT: Duration = Duration::from_secs(10);

/// How a write to the namespace is acknowledged when the request does not
/// say (`?durability=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Answered with a position once the log has the write.
    #[default]
    Sequenced,
    /// Answered 202 once this node's journal has it; sequenced later.
    Journaled,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceSettings {
    #[serde(default)]
    pub write_mode: WriteMode,
}

/// Per namespace, the settings this node last read.
#[derive(Default)]
pub struct SettingsCache {
    entries: Mutex<HashMap<String, Cached>>,
}

#[derive(Clone, Copy)]
struct Cached {
    settings: NamespaceSettings,
    /// Read from this node's store at this applied position of the settings' partition.
    applied_next: Option<u64>,
    /// Read from a holder at this moment.
    fetched_at: Instant,
}

/// The settings of `namespace` as this node knows them (see the module doc).
pub async fn settings_of(state: &AppState, namespace: &Namespace) -> NamespaceSettings {
    let partition = namespace.partition_of(SETTINGS_PK);
    let handle = namespace.handle(partition);
    if handle.is_held() {
        let applied_next = handle.applied_next();
        if let Some(cached) = cached(state, namespace) {
            if cached.applied_next == Some(applied_next) {
                return cached.settings;
            }
        }
        let settings = match handle.store().read().and_then(|r| r.get(SETTINGS_PK, SETTINGS_SK)) {
            Ok(record) => record.map(|r| parse(&r.value)).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(ns = %namespace.name, error = %e, "reading the namespace settings failed; using the last known");
                return cached(state, namespace).map(|c| c.settings).unwrap_or_default();
            }
        };
        remember(state, namespace, Cached { settings, applied_next: Some(applied_next), fetched_at: Instant::now() });
        return settings;
    }
    if let Some(cached) = cached(state, namespace) {
        if cached.applied_next.is_none() && cached.fetched_at.elapsed() < REMOTE_TTL {
            return cached.settings;
        }
    }
    let known = cached(state, namespace).map(|c| c.settings).unwrap_or_default();
    let settings = match fetch_from_holder(state, namespace, partition).await {
        Ok(settings) => settings,
        Err(e) => {
            tracing::warn!(ns = %namespace.name, error = %e, "no holder told the namespace settings; using the last known");
            known
        }
    };
    remember(state, namespace, Cached { settings, applied_next: None, fetched_at: Instant::now() });
    settings
}

/// Writes the settings of `namespace` through the log. When this node
/// holds their partition it waits until it applied them, so its next write
/// sees them; else it remembers them at once (holders learn them from the log).
pub async fn write_settings(state: &AppState, namespace: &Namespace, settings: NamespaceSettings) -> Result<(), ApiError> {
    let partition = namespace.partition_of(SETTINGS_PK);
    let value = Bytes::from(serde_json::to_vec(&settings).expect("settings serialize"));
    let mutation = Mutation {
        write_id: Bytes::new(),
        ops: vec![Op { pk: SETTINGS_PK.into(), sk: SETTINGS_SK.into(), kind: OpKind::Put(value), condition: None }],
    };
    let held = namespace.handle(partition).is_held();
    crate::node::write::write(state.node.log.as_ref(), namespace, partition, &mutation, held, APPLY_WAIT).await?;
    if !held {
        remember(state, namespace, Cached { settings, applied_next: None, fetched_at: Instant::now() });
    }
    Ok(())
}

fn parse(value: &[u8]) -> NamespaceSettings {
    serde_json::from_slice(value).unwrap_or_else(|e| {
        // A record a foreign writer broke: the defaults, said once per read.
        tracing::warn!(error = %e, "the namespace settings record does not parse; using the defaults");
        NamespaceSettings::default()
    })
}

fn cached(state: &AppState, namespace: &Namespace) -> Option<Cached> {
    state.ns_settings.entries.lock().get(&*namespace.name).copied()
}

fn remember(state: &AppState, namespace: &Namespace, cached: Cached) {
    // On the write path: the key is allocated only the first time.
    let mut entries = state.ns_settings.entries.lock();
    match entries.get_mut(&*namespace.name) {
        Some(entry) => *entry = cached,
        None => {
            entries.insert(namespace.name.to_string(), cached);
        }
    }
}

/// Asks a holder of the settings' partition for the record (a forwarded
/// local GET); no record means the defaults.
async fn fetch_from_holder(state: &AppState, namespace: &Namespace, partition: u32) -> Result<NamespaceSettings, String> {
    let uri: Uri = format!("/v1/ns/{}/kv/{}/{}", namespace.name, SETTINGS_PK, SETTINGS_SK).parse().map_err(|e| format!("{e}"))?;
    let headers = HeaderMap::new();
    let incoming = Incoming::new(Method::GET, &uri, &headers);
    let response = forward::to_holder(state, &incoming, &namespace.name, partition, Bytes::new()).await.map_err(|e| format!("{}: {}", e.code, e.message))?;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1024 * 1024).await.map_err(|e| e.to_string())?;
    match status {
        StatusCode::OK => {
            let record: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
            let value = record.get("value").cloned().unwrap_or_default();
            Ok(serde_json::from_value(value).unwrap_or_default())
        }
        StatusCode::NOT_FOUND => Ok(NamespaceSettings::default()),
        other => Err(format!("the holder answered {other}: {}", String::from_utf8_lossy(&body))),
    }
}
