//! API keys: `POST /v1/tokens` makes one, `GET /v1/tokens` lists them,
//! `DELETE /v1/tokens/{id}` revokes one (`tern token create|ls|revoke`).
//!
//! A key's record (never its secret: `auth/keys.rs`) is stored in the
//! system namespace `_tern`, pk `keys`, sk = its id, written through the log
//! like any record: every node learns it in log order, snapshots carry it.
//! Each node keeps the records in its key ring, refreshed every second
//! (`auth/key_refresh.rs`). A revocation therefore takes effect on the
//! node that took it at once and on every other within a refresh.
//!
//! Who may: making a key takes `admin` on every grant it carries (an admin
//! of a scope delegates within it, never beyond); listing shows, and
//! revoking takes, the keys all of whose grants the caller administers.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::body;
use crate::auth::grant::{Grant, Verbs, GRANTS_PER_TOKEN_MAX};
use crate::auth::keys::{self, KeyRecord, DESCRIPTION_BYTES_MAX, KEYS_MAX};
use crate::auth::{Identity, Verb, KEYS_PK, SYSTEM_NAMESPACE};
use crate::codec::{Mutation, Op, OpKind};
use crate::edge::{require_all_of, ApiError, AppState, Caller};
use crate::node::reserved::Writer;
use crate::node::write::{Entry, WriteRequest};

/// How long making or revoking a key waits for this node to apply it.
const APPLY_WAIT: Duration = Duration::from_secs(10);
/// Bytes of a create request.
const CREATE_BODY_BYTES_MAX: usize = 64 * 1024;

/// `POST /v1/tokens`: `{"ns", "prefix", "verbs", "description"}` (one
/// grant) or `{"grants": [...], "description"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    ns: Option<String>,
    prefix: Option<String>,
    verbs: Option<Vec<String>>,
    grants: Option<Vec<Grant>>,
    #[serde(default)]
    description: String,
}

impl CreateBody {
    fn grants(self) -> Result<(Vec<Grant>, String), ApiError> {
        let bad = |m: String| ApiError::bad_request("invalid_grant", m);
        let grants = match (self.grants, self.ns) {
            (Some(_), Some(_)) => return Err(bad("give either grants or ns/prefix/verbs, not both".into())),
            (Some(grants), None) => grants,
            (None, Some(ns)) => {
                let verbs = self.verbs.ok_or_else(|| bad("verbs is required (read, write, watch, admin)".into()))?;
                let verbs = verbs.iter().map(|v| Verb::parse(v)).collect::<Result<Vec<_>, _>>().map_err(bad)?;
                vec![Grant { ns, prefix: self.prefix.unwrap_or_default(), verbs: Verbs::of(&verbs) }]
            }
            (None, None) => return Err(bad("a token needs grants: ns, prefix and verbs".into())),
        };
        if grants.is_empty() || grants.len() > GRANTS_PER_TOKEN_MAX {
            return Err(bad(format!("a token carries 1 to {GRANTS_PER_TOKEN_MAX} grants; got {}", grants.len())));
        }
        for grant in &grants {
            grant.check().map_err(bad)?;
        }
        if self.description.len() > DESCRIPTION_BYTES_MAX {
            return Err(bad(format!("description is at most {DESCRIPTION_BYTES_MAX} bytes")));
        }
        Ok((grants, self.description))
    }
}

/// 403 unless `identity` administers all of `grant`'s scope: a key minted
/// with it could reach no key its maker cannot (a carve-out of the maker's
/// inside the scope refuses it).
fn require_admin_of(identity: &Identity, grant: &Grant) -> Result<(), ApiError> {
    require_all_of(identity, &grant.ns, &grant.prefix, Verb::Admin)
}

fn administers(identity: &Identity, record: &KeyRecord) -> bool {
    record.grants.iter().all(|g| require_admin_of(identity, g).is_ok())
}

fn authentication_off() -> ApiError {
    ApiError::bad_request("authentication_off", "this node runs without authentication (start it with --auth): there are no tokens")
}

pub(super) async fn create(State(state): State<AppState>, Caller(identity): Caller, body: Body) -> Result<Response, ApiError> {
    let Some(authenticator) = state.access.authenticator.clone() else { return Err(authentication_off()) };
    let bytes = body::read(body, CREATE_BODY_BYTES_MAX, "body_too_large", "the token request").await?;
    let request: CreateBody = body::json(&bytes)?;
    let (grants, description) = request.grants()?;
    for grant in &grants {
        require_admin_of(&identity, grant)?;
    }
    if authenticator.keys.len() >= KEYS_MAX {
        return Err(ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "too_many_tokens",
            format!("the cluster holds {KEYS_MAX} tokens, the most; revoke some"),
        ));
    }
    let new = keys::generate(grants, identity.name(), description, now_ms());
    new.record.check().map_err(|e| ApiError::bad_request("invalid_grant", e))?;
    let value = Bytes::from(serde_json::to_vec(&new.record).expect("a key record serializes"));
    write_key(&state, &new.record.id, OpKind::Put(value)).await?;
    authenticator.keys.insert(new.record.clone());
    tracing::info!(id = %new.record.id, by = %identity.name(), "API key created");
    let body = json!({ "id": new.record.id, "token": new.token, "grants": new.record.grants, "created_ms": new.record.created_ms });
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

pub(super) async fn list(State(state): State<AppState>, Caller(identity): Caller) -> Result<Response, ApiError> {
    let Some(authenticator) = state.access.authenticator.clone() else { return Err(authentication_off()) };
    let tokens: Vec<serde_json::Value> = authenticator
        .keys
        .records()
        .into_iter()
        .filter(|r| administers(&identity, r))
        .map(|r| json!({ "id": r.id, "grants": r.grants, "created_ms": r.created_ms, "created_by": r.created_by, "description": r.description }))
        .collect();
    Ok(axum::Json(json!({ "tokens": tokens })).into_response())
}

pub(super) async fn revoke(State(state): State<AppState>, Caller(identity): Caller, Path(id): Path<String>) -> Result<Response, ApiError> {
    let Some(authenticator) = state.access.authenticator.clone() else { return Err(authentication_off()) };
    let not_found = || ApiError::new(StatusCode::NOT_FOUND, "token_not_found", format!("no token {id:?} (ids are 16 hex digits: tern token ls)"));
    let record = authenticator.keys.get(&id).ok_or_else(not_found)?;
    for grant in &record.grants {
        require_admin_of(&identity, grant)?;
    }
    write_key(&state, &id, OpKind::Delete).await?;
    authenticator.keys.remove(&id);
    tracing::info!(%id, by = %identity.name(), "API key revoked");
    Ok(axum::Json(json!({ "id": id, "revoked": true })).into_response())
}

/// Puts or deletes one key record through the log; waits until applied here
/// when this node holds the system partition.
async fn write_key(state: &AppState, id: &str, kind: OpKind) -> Result<(), ApiError> {
    let namespace = state.node.namespace(SYSTEM_NAMESPACE).ok_or_else(|| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "system_namespace_unavailable", "the system namespace is not open yet; retry")
    })?;
    let partition = namespace.partition_of(KEYS_PK);
    let mutation = Mutation { ops: vec![Op { pk: KEYS_PK.into(), sk: id.into(), kind, condition: None }], ..Default::default() };
    let request = WriteRequest::new(Writer::Tokens, partition, Entry::Mutation(mutation));
    // Applied here when this node applies the keys, so its next request knows the key.
    let request = if namespace.handle(partition).is_held() { request.applied_within(APPLY_WAIT) } else { request };
    state.node.write_sequenced(&namespace, request).await?;
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
