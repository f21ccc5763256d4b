//! What the server does for each client request (`{"r","a","b"}`), and
//! what it answers (`{"r","b":{"s","d"}}`). Requests of one connection are
//! handled one at a time, in the order sent (the SDK pipelines them: its
//! `auth` goes first, then its listens and writes, all without waiting).
//!
//! | `a` | body | does |
//! |---|---|---|
//! | `s` | `{"c": counters}` | client stats: answered `ok`, kept nowhere |
//! | `auth`, `gauth` | `{"cred", "authvar"?, "noauth"?}` | sets who the connection is: `ok` `{"auth", "expires"}`, or `invalid_token` |
//! | `unauth` | | back to signed out |
//! | `q` | `{"p", "h", "q"?, "t"?}` | listens: the data (`d` pushes, tagged `t` for a query) then `ok` (`{"w":["no_index"]}` when the rules lack the query's `.indexOn`) |
//! | `n` | `{"p", "q"?, "t"?}` | stops a listen |
//! | `p`, `m` | `{"p", "d", "h"?}` | set, update: `ok` once applied and the connection's listens it reaches were sent its events; with `h` (a transaction) only if the current value hashes to `h`, else `datastale` |
//! | `g` | `{"p", "q"?}` | reads once: `ok` with the value |
//! | `o`, `om`, `oc` | `{"p", "d"}` | registers an onDisconnect set, update, or cancels those at and below `p` (`ondisconnect.rs`) |
//! | `appcheck`, `unappeck` | | `ok`: App Check tokens are not verified |
//! | `echo` | `{"d"}` | `ok` with `d` |

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use super::hash::hash;
use super::wire::{ok, response};
use crate::auth::{Identity, Verb};
use crate::codec::{now_ms, Condition};
use crate::edge::{identify, SessionFuture};
use crate::firebase::caller::{caller, legacy_caller, Caller};
use crate::firebase::commit::{check_write, commit, may_learn_condition, Committed, TreeWrite};
use crate::firebase::db::indexes::run_on_location;
use crate::firebase::db::ondisconnect::{Firer, RegisterError, Registered, Registrations};
use crate::firebase::db::tree_view;
use crate::firebase::error::FbError;
use crate::firebase::query::Query;
use crate::firebase::rest::check_read;
use crate::firebase::state::Firebase;
use crate::firebase::stream::{allowed, open_listen, Format, Translator};
use crate::partition::Namespace;
use crate::store::tree::{value_at, TreeError, READ_BYTES_MAX};
use crate::tree::path;
use crate::tree::query::{self as tree_query, OrderBy};
use crate::tree::value::{etag, validate_write};
use crate::tree::TREE_PK;
use crate::watch::{self, ConnectionId, Outlet};

/// How long a write waits to be applied here before it is answered as failed.
const WRITE_WAIT: Duration = Duration::from_millis(crate::limits::WAIT_MS_MAX);

/// Who the connection is.
pub(super) enum Credential {
    /// No credential yet: `auth` is null (rules decide); with Tern's
    /// authentication on, nothing is allowed until an `auth` message.
    Anonymous,
    /// Authentication off: the owner token, an emulator ID token.
    Legacy(Caller),
    /// Authentication on: a Tern token (root, API key, JWT) and the
    /// `authvar` the admin asked to act as.
    Identity { identity: Box<Identity>, authvar: Option<String> },
}

impl Credential {
    /// The credential `headers` carry (`Authorization: Bearer …`): with
    /// Tern's authentication on, the token it verifies to; else the owner
    /// token or an emulator ID token (`legacy_caller`). `authvar`: the
    /// `auth` an admin asked to act as (JSON).
    pub(super) fn of(
        state: &Firebase,
        headers: &axum::http::HeaderMap,
        peer: Option<std::net::IpAddr>,
        authvar: Option<String>,
    ) -> Result<Credential, FbError> {
        if state.app.access.enabled() {
            let uri: axum::http::Uri = super::PATH.parse().expect("a fixed path");
            let identity = identify(&state.app, headers, &uri, peer)?;
            return Ok(Credential::Identity { identity: Box::new(identity), authvar });
        }
        let pairs = authvar.map(|v| vec![("auth_variable_override".to_string(), v)]).unwrap_or_default();
        Ok(Credential::Legacy(legacy_caller(&state.config, headers, &Query(pairs))?))
    }
}

/// What the connection does once a request was handled.
pub(super) enum Effect {
    /// Send this answer.
    Reply(String),
    /// Send this answer once the connection's listens that the write at
    /// `sks` reaches were sent the events up to `version`.
    Written { reply: String, version: u64, sks: Vec<String> },
    /// A new listen: its session and translator (its answer follows its data).
    Listen(Box<Opened>),
    /// Stop the listen `key`, and send this answer.
    Unlisten { key: String, reply: String },
    /// Send this (an error) and close the connection.
    Close(String),
}

pub(super) struct Opened {
    pub key: String,
    pub sk: String,
    pub session: SessionFuture,
    pub translator: Translator,
}

/// Every action a client may send (`a` of a `d` message): `handle` acts on
/// these alone, and `tests/it/isolation.rs` walks each with every kind of
/// principal (through `http::messages`), so an action added later is
/// classified there or it fails.
pub const ACTIONS: &[&str] = &["s", "appcheck", "unappeck", "echo", "auth", "gauth", "unauth", "q", "n", "p", "m", "g", "o", "om", "oc"];

/// Distinct principals that may register onDisconnect writes on one
/// connection (an app uses one; each is checked again at the close).
const REGISTRANTS_MAX: usize = 16;

/// One connection's request handling: who it is, its onDisconnect writes.
pub(super) struct Requests {
    pub state: Firebase,
    pub namespace: Arc<Namespace>,
    pub session: String,
    pub connection: ConnectionId,
    pub peer: Option<std::net::IpAddr>,
    pub credential: Credential,
    pub registrations: Registrations,
    /// The credentials that registered onDisconnect writes here, one per
    /// principal (its latest credential: an SDK's refreshed token of the
    /// same user replaces the one that expires). At the close the writes
    /// are made only if every one of them is still valid: a key revoked
    /// after it registered writes nothing, whatever the connection's
    /// credential is by then (`registrants_valid`). At most
    /// `REGISTRANTS_MAX`.
    pub registrants: Vec<Identity>,
}

/// The key of a listen on its connection: its tag (queries) and path.
pub(super) fn listen_key(body: &Value) -> String {
    let tag = body.get("t").and_then(Value::as_u64).map_or(String::new(), |t| t.to_string());
    format!("{tag}|{}", body.get("p").and_then(Value::as_str).unwrap_or(""))
}

impl Requests {
    /// Handles request `r`; `outlet` is the new listen's end (action `q`).
    pub(super) async fn handle(&mut self, r: u64, action: &str, body: Value, outlet: Option<Outlet>) -> Effect {
        let result = match action {
            // Only listed actions are acted on (see `ACTIONS`).
            unlisted if !ACTIONS.contains(&unlisted) => Err(("invalid_args".to_string(), format!("unknown action {unlisted:?}"))),
            "s" | "appcheck" | "unappeck" => Ok(Effect::Reply(ok(r, json!("")))),
            "echo" => Ok(Effect::Reply(ok(r, body.get("d").cloned().unwrap_or(Value::Null)))),
            "auth" | "gauth" => self.auth(r, &body),
            "unauth" => {
                self.credential = Credential::Anonymous;
                Ok(Effect::Reply(ok(r, json!(""))))
            }
            "q" => self.listen(r, &body, outlet.expect("a listen comes with its outlet")).await,
            "n" => Ok(Effect::Unlisten { key: listen_key(&body), reply: ok(r, json!("")) }),
            "p" => self.write(r, &body, false).await,
            "m" => self.write(r, &body, true).await,
            "g" => self.get(r, &body).await,
            "o" => self.on_disconnect(r, &body, Some(false)).await,
            "om" => self.on_disconnect(r, &body, Some(true)).await,
            "oc" => self.on_disconnect(r, &body, None).await,
            other => Err(("invalid_args".to_string(), format!("unknown action {other:?}"))),
        };
        result.unwrap_or_else(|(status, message)| Effect::Reply(response(r, &status, json!(message))))
    }

    /// The caller for a request that needs `verb`; an expired credential
    /// (its token's `exp`) is refused as its listens are ended (`ac`).
    fn caller(&self, verb: Verb) -> Result<Caller, (String, String)> {
        if let Credential::Identity { identity, .. } = &self.credential {
            // As the credential is now, not as it was when it was sent.
            self.state.app.access.still_valid(identity).map_err(|e| denied_text(&format!("permission_denied: {}", e.message)))?;
        }
        let caller = self.credential_caller(verb)?;
        if caller.expired(now_ms()) {
            return Err(denied_text("permission_denied: the auth token is expired; the SDK authenticates again with a fresh one"));
        }
        Ok(caller)
    }

    /// Resolves once the connection's credential is no longer valid (a
    /// revoked key, an expired JWT); never for other credentials.
    pub(super) fn lapsed(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match &self.credential {
            Credential::Identity { identity, .. } => Box::pin(self.state.app.access.lapsed(identity)),
            Credential::Anonymous | Credential::Legacy(_) => Box::pin(std::future::pending()),
        }
    }

    fn credential_caller(&self, verb: Verb) -> Result<Caller, (String, String)> {
        match &self.credential {
            Credential::Anonymous if self.state.app.access.enabled() => {
                Err(denied_text("permission_denied: a token is needed (send it with the SDK's auth, as its ID token or Tern token)"))
            }
            Credential::Anonymous => Ok(Caller::User { auth: Value::Null }),
            Credential::Legacy(caller) => Ok(caller.clone()),
            Credential::Identity { identity, authvar } => {
                let mut pairs = vec![("ns".to_string(), self.namespace.name.to_string())];
                if let Some(authvar) = authvar {
                    pairs.push(("auth_variable_override".to_string(), authvar.clone()));
                }
                caller(&self.state.config, Some(identity), &axum::http::HeaderMap::new(), &Query(pairs), verb).map_err(|e| denied_text(&e.message))
            }
        }
    }

    /// Whether every credential that registered onDisconnect writes on
    /// this connection is still valid (see `registrants`).
    pub(super) fn registrants_valid(&self) -> bool {
        self.registrants.iter().all(|identity| self.state.app.access.still_valid(identity).is_ok())
    }

    /// Makes the connection's credential its principal's registrant: it
    /// replaces the one that principal registered with (an SDK's refreshed
    /// token), and with `add` (before it registers a write) it is added if
    /// new; false when that would pass `REGISTRANTS_MAX`.
    fn keep_registrant(&mut self, add: bool) -> bool {
        let Credential::Identity { identity, .. } = &self.credential else { return true };
        let principal = identity.principal();
        if let Some(known) = self.registrants.iter_mut().find(|known| known.principal() == principal) {
            *known = (**identity).clone();
            return true;
        }
        if !add {
            return true;
        }
        if self.registrants.len() >= REGISTRANTS_MAX {
            return false;
        }
        self.registrants.push((**identity).clone());
        true
    }

    fn auth(&mut self, r: u64, body: &Value) -> Result<Effect, (String, String)> {
        let Some(cred) = body.get("cred").and_then(Value::as_str) else {
            return Err(("invalid_token".into(), "auth needs its credential \"cred\"".into()));
        };
        let authvar = match (body.get("authvar"), body.get("noauth")) {
            (Some(var), _) => Some(var.to_string()),
            (None, Some(Value::Bool(true))) => Some("null".to_string()),
            _ => None,
        };
        let mut headers = axum::http::HeaderMap::new();
        let bearer =
            format!("Bearer {cred}").parse().map_err(|_| ("invalid_token".to_string(), "the credential is not a valid header value".to_string()))?;
        headers.insert(axum::http::header::AUTHORIZATION, bearer);
        self.credential = Credential::of(&self.state, &headers, self.peer, authvar).map_err(|e| ("invalid_token".to_string(), e.message))?;
        self.keep_registrant(false);
        let auth = match self.credential_caller(Verb::Read) {
            Ok(Caller::User { auth }) => auth,
            Ok(Caller::Admin { as_auth }) => as_auth.unwrap_or(json!({"provider": "owner"})),
            Err(_) => Value::Null,
        };
        let expires = auth.pointer("/token/exp").cloned().unwrap_or(Value::Null);
        Ok(Effect::Reply(ok(r, json!({"auth": auth, "expires": expires}))))
    }

    async fn listen(&mut self, r: u64, body: &Value, outlet: Outlet) -> Result<Effect, (String, String)> {
        let sk = path_of(body)?;
        let tag = body.get("t").and_then(Value::as_u64);
        let query_object = body.get("q").cloned().unwrap_or(Value::Null);
        let query = match tag {
            Some(_) => query_of(&query_object).map_err(|e| ("invalid_args".to_string(), e))?,
            None => None,
        };
        let caller = self.caller(Verb::Watch)?;
        let (state, namespace) = (&self.state, &self.namespace);
        if !allowed(state, namespace, &caller, &sk).map_err(from_fb)? {
            return Err(denied());
        }
        let mut answer = json!({});
        if let Some(needed) = query.as_ref().and_then(tree_query::index_needed) {
            if !state.db.rules_of(namespace).map_err(from_fb)?.index_on(&sk).contains(&needed) {
                answer = json!({"w": ["no_index"]});
            }
        }
        let format = Format::Realtime { tag, query: query_object, response: Some(ok(r, answer)) };
        let key = listen_key(body);
        let (session, translator) =
            open_listen(state, namespace.clone(), caller, sk.clone(), query, watch::Since::CurrentState, format, self.connection, outlet)
                .await
                .map_err(from_fb)?;
        // Each listen ends with the credential it was opened with, whatever
        // the connection authenticates as later (`auth`, `gauth` again).
        let session = match &self.credential {
            Credential::Identity { identity, .. } => state.app.access.guard(identity, session),
            Credential::Anonymous | Credential::Legacy(_) => session,
        };
        Ok(Effect::Listen(Box::new(Opened { key, sk, session, translator })))
    }

    async fn write(&mut self, r: u64, body: &Value, merge: bool) -> Result<Effect, (String, String)> {
        let sk = path_of(body)?;
        let data = body.get("d").cloned().unwrap_or(Value::Null);
        let bytes = Bytes::from(serde_json::to_vec(&data).expect("a Value serializes"));
        validate(&sk, &bytes, merge)?;
        let caller = self.caller(Verb::Write)?;
        let (state, namespace) = (&self.state, &*self.namespace);
        let mut write = TreeWrite { sk: sk.clone(), value: bytes, written: &data, merge, condition: None, write_id: Bytes::new(), wait: WRITE_WAIT };
        // A transaction: only if the value it started from is still there.
        if let Some(expected) = body.get("h").and_then(Value::as_str) {
            // The SDK hashes the value as it holds it, priorities and all;
            // the apply loop's condition is on the value without them.
            let view = tree_view(namespace).map_err(from_fb)?;
            let current = value_at(&view.reader, TREE_PK, &sk, true, READ_BYTES_MAX).map_err(tree_error)?;
            if hash(&current) != expected {
                // Stale, told only to a caller the rules let read or write there.
                return match may_learn_condition(state, namespace, &caller, &write).map_err(from_fb)? {
                    true => Ok(self.stale(r, &sk)),
                    false => Err(denied()),
                };
            }
            let mut plain = current;
            crate::tree::value::strip_priorities(&mut plain);
            write.condition = Some(Condition::IfTreeHash(etag(&plain)));
        }
        let sks = written_sks(&sk, &data, merge);
        let written_at = sk.clone();
        match commit(state, namespace, &caller, write).await {
            Ok(Committed::Applied { version }) => Ok(Effect::Written { reply: ok(r, json!("")), version, sks }),
            Ok(Committed::ConditionFailed) => Ok(self.stale(r, &written_at)),
            // The partition moved: unanswered, the SDK sends the write again
            // when it reconnects, and the reconnect is redirected to a holder.
            Ok(Committed::Forward) => Ok(Effect::Close(format!("this node no longer serves database {:?}; reconnect", &*namespace.name))),
            Err(e) => Err(from_fb(e)),
        }
    }

    /// A transaction's `datastale`, answered once this connection's
    /// listens of `sk` were sent the change that made the value what it
    /// is (the SDK runs the transaction again on what it holds when the
    /// answer comes: it must hold the newer value by then).
    fn stale(&self, r: u64, sk: &str) -> Effect {
        let reply = response(r, "datastale", json!("the value changed since the transaction read it"));
        let handle = self.namespace.handle(self.namespace.partition_of(TREE_PK));
        let last_change = tree_view(&self.namespace).ok().and_then(|view| {
            let at = view.reader.get(TREE_PK, sk).ok().flatten().map(|record| record.version);
            let below = view.reader.max_version(TREE_PK, &path::descendants_prefix(sk)).ok().flatten();
            at.max(below)
        });
        // No leaves left (deleted): the last change is at most what was applied.
        let version = last_change.unwrap_or_else(|| handle.applied_next().saturating_sub(1));
        Effect::Written { reply, version, sks: vec![sk.to_string()] }
    }

    async fn get(&mut self, r: u64, body: &Value) -> Result<Effect, (String, String)> {
        let sk = path_of(body)?;
        let query = query_of(body.get("q").unwrap_or(&Value::Null)).map_err(|e| ("invalid_args".to_string(), e))?;
        let caller = self.caller(Verb::Read)?;
        let (state, namespace) = (&self.state, &*self.namespace);
        let view = check_read(state, namespace, &caller, &sk, tree_view(namespace).map_err(from_fb)?).map_err(from_fb)?;
        // With priorities, as every value of this protocol (`stream::Format`).
        let value = match &query {
            None => value_at(&view.reader, TREE_PK, &sk, true, READ_BYTES_MAX).map_err(tree_error)?,
            // Indexed by the rules (`.indexOn`): the node's query index
            // selects, and only the selected children are read (as a REST
            // query); else the location is read and the query run on it.
            Some(query) if indexed(state, namespace, &sk, query)? => {
                tree_query::as_object(state.db.indexes.run(namespace, &view, &sk, query, true).await.map_err(from_fb)?)
            }
            Some(query) => tree_query::as_object(run_on_location(&view, &sk, query, true).map_err(from_fb)?),
        };
        Ok(Effect::Reply(ok(r, value)))
    }

    /// `o` (`merge` false), `om` (true), `oc` (None: cancel).
    async fn on_disconnect(&mut self, r: u64, body: &Value, merge: Option<bool>) -> Result<Effect, (String, String)> {
        let sk = path_of(body)?;
        let caller = self.caller(Verb::Write)?;
        let saved = match merge {
            None => self.registrations.cancel(firer(&self.state), &self.namespace, &self.session, &sk).await,
            Some(merge) => {
                let data = body.get("d").cloned().unwrap_or(Value::Null);
                let bytes = serde_json::to_vec(&data).expect("a Value serializes");
                validate(&sk, &bytes, merge)?;
                // Checked now, as Firebase does: the write is made later whatever the rules are then.
                check_write(&self.state, &self.namespace, &caller, &sk, &data, merge, now_ms()).map_err(from_fb)?;
                let op = Registered { sk, merge, value: data };
                if !self.keep_registrant(true) {
                    return Err((
                        "invalid_args".into(),
                        format!("at most {REGISTRANTS_MAX} credentials register onDisconnect writes on one connection"),
                    ));
                }
                self.registrations.add(firer(&self.state), &self.namespace, &self.session, op).await
            }
        };
        match saved {
            Ok(()) => Ok(Effect::Reply(ok(r, json!("")))),
            Err(RegisterError::Fired) => {
                Ok(Effect::Close("this connection's onDisconnect writes were made while it was open (its node was thought dead); reconnect".into()))
            }
            Err(RegisterError::TooMany(message)) => Err(("invalid_args".into(), message)),
            Err(RegisterError::TooLarge(message)) => Err(("too_big".into(), message)),
            Err(RegisterError::Write(e)) => Err(from_fb(e)),
        }
    }
}

/// This node, as it saves and fires a connection's registrations.
fn firer(state: &Firebase) -> Firer<'_> {
    Firer { node: &state.app.node, node_id: &state.app.cluster.me().id, registry: &state.db.registry }
}

/// Whether the rules index what `query` orders by at `sk` (or it needs
/// no index): only then does a get build and walk the node's query index.
fn indexed(state: &Firebase, namespace: &Namespace, sk: &str, query: &tree_query::Query) -> Result<bool, (String, String)> {
    match tree_query::index_needed(query) {
        None => Ok(true),
        Some(needed) => Ok(state.db.rules_of(namespace).map_err(from_fb)?.index_on(sk).contains(&needed)),
    }
}

/// The path of a request (`"p"`: `/a/b`, `/` for the root) as a sort key.
fn path_of(body: &Value) -> Result<String, (String, String)> {
    let text = body.get("p").and_then(Value::as_str).ok_or(("invalid_args".to_string(), "a request needs its path \"p\"".to_string()))?;
    let keys = path::parse_relative(text).map_err(|e| ("invalid_args".to_string(), e))?;
    path::check_path_len(&keys).map_err(|e| ("invalid_args".to_string(), e))?;
    Ok(path::sk_of(&keys))
}

fn validate(sk: &str, bytes: &[u8], merge: bool) -> Result<(), (String, String)> {
    if bytes.len() > crate::limits::MUTATION_BYTES_MAX {
        return Err((
            "too_big".into(),
            format!("a write is at most {} bytes in Tern, this one is {}", crate::limits::MUTATION_BYTES_MAX, bytes.len()),
        ));
    }
    validate_write(sk, bytes, merge).map_err(|e| ("invalid_args".to_string(), e))
}

/// The paths a write sets (an update's children, or its own path).
fn written_sks(sk: &str, data: &Value, merge: bool) -> Vec<String> {
    match (merge, data) {
        (true, Value::Object(update)) => {
            update.keys().filter_map(|k| path::parse_relative(k).ok()).map(|keys| path::join(sk, &path::sk_of(&keys))).collect()
        }
        _ => vec![sk.to_string()],
    }
}

/// A query as the SDK sends it (`queryParamsGetQueryObject`): `i` the index
/// (`.key`, `.value`, `.priority` or a child path; priority when absent),
/// `sp`/`sn`/`sin` the start value, key and inclusiveness, `ep`/`en`/`ein`
/// the end's, `l` the limit and `vf` which end it counts from (`l`, `r`).
/// None: the default query (the whole location).
pub(super) fn query_of(object: &Value) -> Result<Option<tree_query::Query>, String> {
    let Some(q) = object.as_object().filter(|q| !q.is_empty()) else { return Ok(None) };
    let order_by = match q.get("i").map(|i| i.as_str().ok_or("the index \"i\" must be a string")).transpose()? {
        None | Some(".priority") => OrderBy::Priority,
        Some(".key") => OrderBy::Key,
        Some(".value") => OrderBy::Value,
        Some(child) => OrderBy::Child(path::parse_relative(child)?),
    };
    let name = |field: &str| -> Result<Option<String>, String> {
        q.get(field).map(|n| n.as_str().map(str::to_string).ok_or(format!("\"{field}\" must be a key"))).transpose()
    };
    let inclusive = |field: &str| q.get(field).and_then(Value::as_bool).unwrap_or(true);
    let start = q.get("sp").map(|v| (v.clone(), inclusive("sin")));
    let end = q.get("ep").map(|v| (v.clone(), inclusive("ein")));
    let limit = match q.get("l") {
        None => None,
        Some(l) => Some(l.as_u64().filter(|l| *l > 0).ok_or("the limit \"l\" must be a positive integer")? as usize),
    };
    let (limit_first, limit_last) = match q.get("vf").and_then(Value::as_str) {
        Some("r") => (None, limit),
        _ => (limit, None),
    };
    Ok(Some(tree_query::Query { order_by, start, end, limit_first, limit_last, start_name: name("sn")?, end_name: name("en")? }))
}

fn denied() -> (String, String) {
    ("permission_denied".into(), "Permission denied".into())
}

fn denied_text(message: &str) -> (String, String) {
    ("permission_denied".into(), message.to_string())
}

fn unavailable(e: impl std::fmt::Display) -> (String, String) {
    ("unavailable".into(), e.to_string())
}

fn tree_error(e: TreeError) -> (String, String) {
    match e {
        too_large @ TreeError::TooLarge { .. } => ("too_big".into(), too_large.to_string()),
        TreeError::Store(e) => unavailable(e),
    }
}

fn from_fb(e: impl Into<FbError>) -> (String, String) {
    let e: FbError = e.into();
    match e.status.as_u16() {
        401 | 403 => ("permission_denied".into(), e.message),
        413 => ("too_big".into(), e.message),
        400 => ("invalid_args".into(), e.message),
        _ => ("unavailable".into(), e.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_query_objects_become_queries() {
        assert_eq!(query_of(&Value::Null).unwrap(), None);
        assert_eq!(query_of(&json!({})).unwrap(), None);
        let q = query_of(&json!({"i": "score", "sp": 10, "sin": false, "sn": "[MAX_NAME]", "l": 3, "vf": "r"})).unwrap().unwrap();
        assert_eq!(q.order_by, OrderBy::Child(vec!["score".into()]));
        assert_eq!(q.start, Some((json!(10), false)));
        assert_eq!(q.start_name.as_deref(), Some("[MAX_NAME]"));
        assert_eq!((q.limit_first, q.limit_last), (None, Some(3)));
        let by_key = query_of(&json!({"i": ".key", "ep": "m", "ein": true, "l": 2, "vf": "l"})).unwrap().unwrap();
        assert_eq!(by_key.order_by, OrderBy::Key);
        assert_eq!(by_key.limit_first, Some(2));
        assert!(query_of(&json!({"l": 0})).unwrap_err().contains("positive"));
        assert!(query_of(&json!({"i": "a.b"})).is_err(), "an index path with a bad key");
    }

    #[test]
    fn key_tie_breaks_select_as_the_sdk_means() {
        let value = json!({"a": 1, "b": 1, "c": 2});
        let rows = |q: Value| tree_query::run(&query_of(&q).unwrap().unwrap(), value.clone()).into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(rows(json!({"i": ".value", "sp": 1, "sn": "b", "sin": true})), vec!["b", "c"]);
        assert_eq!(rows(json!({"i": ".value", "sp": 1, "sn": "[MAX_NAME]", "sin": false})), vec!["c"], "startAfter(1)");
        assert_eq!(rows(json!({"i": ".value", "ep": 1, "en": "a", "ein": true})), vec!["a"]);
        assert_eq!(rows(json!({"i": ".value", "ep": 2, "en": "[MIN_NAME]", "ein": false})), vec!["a", "b"], "endBefore(2)");
    }
}
