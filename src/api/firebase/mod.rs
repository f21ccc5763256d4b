//! Firebase Realtime Database compatibility: the REST API (`/{path}.json`),
//! its streaming form (`Accept: text/event-stream`) and the rules endpoint
//! (`/.settings/rules.json`), on the same listener as `/v1`.
//!
//! The database is the namespace named by the `ns` query parameter (the
//! emulator's convention; `default` without one), its tree the pk
//! `tree::TREE_PK` (`crate::tree`). Errors are Firebase's:
//! `{"error": "<message>"}` with its statuses.
//!
//! Who is asking (`Caller`) is decided in one place, `caller`: the owner
//! token is the admin (rules do not apply; `auth_variable_override` sets
//! the `auth` rules see), in emulator mode an unsigned ID token's claims
//! become `auth`, and anyone else is `auth = null`. Tern's own tokens (the
//! security issue) plug in there.

mod indexes;
pub mod realtime;
mod rest;
mod rules_file;
mod stream;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::Value;

use super::{access, AppState};
use crate::auth::{Identity, Verb};
use crate::partition::Namespace;
use crate::api::sse::{Encoder, SessionFuture};
use crate::partition::ReadView;
use crate::watch::ConnectionId;
use crate::rules::Rules;
use crate::store::tree::{value_at, READ_BYTES_MAX};
use crate::tree::TREE_PK;

/// The pk and sk of a database's rules (a record written through the log,
/// so every replica has them).
pub const RULES_PK: &str = crate::node::reserved::SETTINGS_PK;
pub const RULES_SK: &str = crate::node::reserved::RULES_SK;
/// Partitions of a database created on first use (a tree is one partition).
const CREATED_PARTITIONS: u32 = 1;
/// Bytes of a request body: a write's JSON is bounded by the mutation limit.
const BODY_BYTES_MAX: usize = crate::limits::MUTATION_BYTES_MAX;

/// How this node speaks Firebase.
#[derive(Clone, Default)]
pub struct FirebaseConfig {
    /// The bearer token that is the admin (`owner` in `tern dev`, the emulator's).
    pub owner_token: Option<String>,
    /// Emulator conventions: databases created on first use, open rules
    /// until some are set, unsigned ID tokens' claims taken as `auth`.
    pub emulator: bool,
    /// Parsed rules per namespace (`rules_of`).
    rules: Arc<Mutex<HashMap<String, CachedRules>>>,
    /// Query indexes (`indexes.rs`).
    indexes: Arc<indexes::Indexes>,
    /// The last push id's time and random part (ids made in one
    /// millisecond increment it, so they stay ordered).
    push: Arc<Mutex<(u64, [u8; 12])>>,
    /// This node's realtime connections, for the onDisconnect sweeper.
    pub registry: Arc<realtime::ondisconnect::Registry>,
    /// Closes the realtime connections when the node stops.
    pub closing: Arc<realtime::Closing>,
}

impl FirebaseConfig {
    pub fn new(owner_token: Option<String>, emulator: bool) -> FirebaseConfig {
        FirebaseConfig { owner_token, emulator, ..Default::default() }
    }

    /// Closes every realtime connection (the node stops); each makes its
    /// onDisconnect writes as it goes.
    pub fn close_connections(&self) {
        self.closing.close_all();
    }
}

/// A Firebase error: `{"error": message}` with a status.
#[derive(Debug)]
pub struct FbError {
    pub status: StatusCode,
    pub message: String,
}

impl FbError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> FbError {
        FbError { status, message: message.into() }
    }
    pub fn bad(message: impl Into<String>) -> FbError {
        FbError::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn denied() -> FbError {
        FbError::new(StatusCode::UNAUTHORIZED, "Permission denied")
    }
}

impl std::fmt::Display for FbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl IntoResponse for FbError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        (self.status, [(header::CONTENT_TYPE, "application/json; charset=utf-8")], body).into_response()
    }
}

/// A Tern error (a write's outcome, a forward) in Firebase's form.
impl From<crate::api::error::ApiError> for FbError {
    fn from(e: crate::api::error::ApiError) -> FbError {
        match e.code {
            "unauthenticated" | "permission_denied" | "too_many_failed_authentications" => FbError::new(e.status, format!("{}: {}", e.code, e.message)),
            _ => FbError::new(e.status, e.message),
        }
    }
}

impl From<crate::store::StoreError> for FbError {
    fn from(e: crate::store::StoreError) -> FbError {
        FbError::new(StatusCode::SERVICE_UNAVAILABLE, format!("the store cannot be read: {e}"))
    }
}

impl From<crate::store::tree::TreeError> for FbError {
    fn from(e: crate::store::tree::TreeError) -> FbError {
        match e {
            too_large @ crate::store::tree::TreeError::TooLarge { .. } => FbError::new(StatusCode::PAYLOAD_TOO_LARGE, too_large.to_string()),
            crate::store::tree::TreeError::Store(e) => e.into(),
        }
    }
}

/// Who is asking.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The owner: rules do not apply, unless it asked to be seen as `auth`
    /// (`auth_variable_override`).
    Admin { as_auth: Option<Value> },
    /// Anyone else: rules apply with this `auth` (null: signed out).
    User { auth: Value },
}

impl Caller {
    /// The `auth` rules see, or None when rules do not apply.
    pub fn rules_auth(&self) -> Option<&Value> {
        match self {
            Caller::Admin { as_auth: None } => None,
            Caller::Admin { as_auth: Some(auth) } | Caller::User { auth } => Some(auth),
        }
    }

    /// Whether the caller's credential has expired by `now_ms` (its
    /// token's `exp`, in seconds; a credential without one never expires).
    /// A stream then ends with `auth_revoked`.
    pub fn expired(&self, now_ms: u64) -> bool {
        match self {
            // The SDKs' emulator tokens (`mockUserToken`) claim to be issued
            // at the epoch and expire an hour later; the emulator takes them
            // as never expiring, so do we (a verified JWT's `exp` was
            // checked when it was verified, and is looked at here too).
            Caller::User { auth } if auth.pointer("/token/iat").and_then(Value::as_f64) == Some(0.0) => false,
            Caller::User { auth } => auth.pointer("/token/exp").and_then(Value::as_f64).is_some_and(|exp| exp * 1000.0 <= now_ms as f64),
            Caller::Admin { .. } => false,
        }
    }
}

/// The query parameters of one request (URL-decoded; the last of a name wins).
pub struct Query(pub(super) Vec<(String, String)>);

impl Query {
    /// A request's few parameters, in order (a list: no hashing per request).
    pub(super) fn parse(raw: Option<&str>) -> Query {
        Query(form_urlencoded::parse(raw.unwrap_or("").as_bytes()).into_owned().collect())
    }
    /// The parameter's value; the last one when it is given more than once.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// `/{path}.json` and `/.settings/rules.json`: every Firebase request.
pub async fn handle(state: AppState, request: Request) -> Response {
    match dispatch(state, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn dispatch(state: AppState, request: Request) -> Result<Response, FbError> {
    let (parts, body) = request.into_parts();
    let connection = parts.extensions.get::<ConnectionId>().copied().unwrap_or(ConnectionId(0));
    let query = Query::parse(parts.uri.query());
    let method = method_of(&parts.method, &parts.headers, &query)?;
    let path = parts.uri.path().strip_suffix(".json").expect("routed here for .json paths");
    let verb = verb_of(&method, path, wants_stream(&parts.headers));
    let identity = if state.access.enabled() { Some(access::caller_of(&state, &parts).map_err(FbError::from)?) } else { None };
    let caller = caller(&state, identity.as_ref(), &parts.headers, &query, verb)?;
    let namespace = database(&state, &query).await?;
    if path == "/.settings/rules" {
        let body = read_body(body).await?;
        return rules_file::handle(&state, &namespace, &caller, &method, &query, body).await;
    }
    let keys = crate::tree::path::parse_url_path(path).map_err(FbError::bad)?;
    let sk = crate::tree::path::sk_of(&keys);
    if method == axum::http::Method::GET && wants_stream(&parts.headers) {
        return stream::open(&state, namespace, caller, sk, &query, &parts.headers, connection).await;
    }
    let body = read_body(body).await?;
    rest::handle(&state, &namespace, &caller, &method, sk, &query, &parts.headers, &parts.uri, body).await
}

/// A streaming request (`GET /{path}.json`, `Accept: text/event-stream`),
/// which the API's own HTTP/2 connections run beside their other watches
/// (`open_h2c_stream`).
pub fn is_stream_request<B>(request: &http::Request<B>) -> bool {
    let path = request.uri().path();
    request.method() == axum::http::Method::GET
        && crate::api::is_firebase_path(path)
        && path != "/.settings/rules.json"
        && wants_stream(request.headers())
}

fn wants_stream(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/event-stream"))
}

/// Sets up a streaming request of an HTTP/2 connection (`is_stream_request`)
/// as `dispatch` would: its session leaves its messages in `outbox`, the
/// returned encoder turns them into Firebase's events; an error is the
/// response to send instead.
pub async fn open_h2c_stream(
    state: &AppState,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    peer: Option<std::net::IpAddr>,
    connection: ConnectionId,
    outbox: crate::watch::Outbox,
) -> Result<(SessionFuture, Box<dyn Encoder>), Response> {
    let opened = async {
        let query = Query::parse(uri.query());
        let identity = if state.access.enabled() { Some(access::identify(state, headers, uri, peer).map_err(FbError::from)?) } else { None };
        let caller = caller(state, identity.as_ref(), headers, &query, Verb::Watch)?;
        let namespace = database(state, &query).await?;
        let path = uri.path().strip_suffix(".json").expect("a Firebase path");
        let keys = crate::tree::path::parse_url_path(path).map_err(FbError::bad)?;
        let sk = crate::tree::path::sk_of(&keys);
        stream::open_session(state, namespace, caller, sk, &query, headers, connection, outbox).await
    };
    match opened.await {
        Ok((session, translator)) => Ok((session, Box::new(translator))),
        Err(e) => Err(e.into_response()),
    }
}

/// The method, after `X-HTTP-Method-Override` (header or `x-http-method-override` parameter) on a POST.
fn method_of(method: &axum::http::Method, headers: &HeaderMap, query: &Query) -> Result<axum::http::Method, FbError> {
    let over = headers.get("x-http-method-override").and_then(|v| v.to_str().ok()).or(query.get("x-http-method-override"));
    match over {
        Some(name) if *method == axum::http::Method::POST => match name.to_ascii_uppercase().as_str() {
            m @ ("GET" | "PUT" | "PATCH" | "DELETE" | "POST") => Ok(m.parse().expect("a known method")),
            other => Err(FbError::bad(format!("X-HTTP-Method-Override must be GET, PUT, PATCH, DELETE or POST, got {other:?}"))),
        },
        _ => Ok(method.clone()),
    }
}

async fn read_body(body: axum::body::Body) -> Result<bytes::Bytes, FbError> {
    axum::body::to_bytes(body, BODY_BYTES_MAX).await.map_err(|_| {
        FbError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Data to write exceeds the maximum size that can be modified with a single request ({BODY_BYTES_MAX} bytes in Tern: the mutation limit)"),
        )
    })
}

/// The database of a request: its namespace, created on first use in
/// emulator mode.
pub(super) async fn database(state: &AppState, query: &Query) -> Result<Arc<Namespace>, FbError> {
    let name = query.get("ns").unwrap_or("default");
    if let Some(ns) = state.node.namespace(name) {
        return Ok(ns);
    }
    if !state.firebase.emulator {
        return Err(FbError::new(
            StatusCode::NOT_FOUND,
            format!("Database {name:?} does not exist: create it first (tern ns create {name} --partitions 1, or PUT /v1/ns/{name})"),
        ));
    }
    crate::limits::check_namespace_name(name).map_err(|e| FbError::bad(e.message))?;
    state.node.create_namespace(name, CREATED_PARTITIONS).await.map_err(|e| FbError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    state.node.namespace(name).ok_or_else(|| FbError::new(StatusCode::SERVICE_UNAVAILABLE, "the database was created but is not open yet; retry"))
}

/// The verb a Firebase request needs: rules take `admin`, streams `watch`,
/// reads `read`, everything else `write`.
fn verb_of(method: &axum::http::Method, path: &str, stream: bool) -> Verb {
    match *method {
        _ if path == "/.settings/rules" => Verb::Admin,
        axum::http::Method::GET if stream => Verb::Watch,
        axum::http::Method::GET => Verb::Read,
        _ => Verb::Write,
    }
}

/// Who is asking. With authentication on (`identity` is the request's): the
/// root token, and a token whose grants allow `verb` on the database's tree,
/// are the owner (rules do not apply, like the Admin SDK's service account);
/// a JWT without such a grant is a user whose claims are `auth` (rules
/// decide); an API key without one is refused (403). Without
/// authentication: `legacy_caller`.
pub(super) fn caller(state: &AppState, identity: Option<&Identity>, headers: &HeaderMap, query: &Query, verb: Verb) -> Result<Caller, FbError> {
    let Some(identity) = identity else { return legacy_caller(&state.firebase, headers, query) };
    let ns = query.get("ns").unwrap_or("default");
    let as_admin = || -> Result<Caller, FbError> {
        let as_auth = match query.get("auth_variable_override") {
            None => None,
            Some(text) => Some(serde_json::from_str::<Value>(text).map_err(|_| FbError::bad("auth_variable_override must be a JSON object or null"))?),
        };
        Ok(Caller::Admin { as_auth })
    };
    match identity.allows(ns, TREE_PK, verb) {
        Ok(()) => as_admin(),
        Err(denied) => match identity.firebase_auth() {
            Some(auth) if verb != Verb::Admin => Ok(Caller::User { auth }),
            _ => {
                crate::metrics::AUTH_DENIED.inc();
                Err(FbError::new(StatusCode::FORBIDDEN, format!("permission_denied: {}", denied.message)))
            }
        },
    }
}

/// Who is asking without authentication: `Authorization: Bearer <token>` or `?auth=<token>`.
pub(super) fn legacy_caller(config: &FirebaseConfig, headers: &HeaderMap, query: &Query) -> Result<Caller, FbError> {
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ").map(str::trim));
    let Some(token) = bearer.or(query.get("auth")).or(query.get("access_token")) else {
        return Ok(Caller::User { auth: Value::Null });
    };
    if config.owner_token.as_deref() == Some(token) {
        let as_auth = match query.get("auth_variable_override") {
            None => None,
            Some(text) => Some(serde_json::from_str::<Value>(text).map_err(|_| FbError::bad("auth_variable_override must be a JSON object or null"))?),
        };
        return Ok(Caller::Admin { as_auth });
    }
    if config.emulator {
        if let Some(auth) = unsigned_id_token_auth(token) {
            let caller = Caller::User { auth };
            if caller.expired(now_ms()) {
                return Err(FbError::new(StatusCode::UNAUTHORIZED, "Auth token is expired"));
            }
            return Ok(caller);
        }
    }
    Err(FbError::new(StatusCode::UNAUTHORIZED, "Could not parse auth token."))
}

/// The emulator's convention: an ID token's claims are taken as they are,
/// signature unchecked (emulator mode only: anyone can mint one).
fn unsigned_id_token_auth(token: &str) -> Option<Value> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    let uid = claims.get("user_id").or(claims.get("sub")).or(claims.get("uid"))?.as_str()?.to_string();
    let provider = claims.pointer("/firebase/sign_in_provider").and_then(Value::as_str).unwrap_or("custom").to_string();
    Some(serde_json::json!({ "uid": uid, "provider": provider, "token": claims }))
}

/// Whether a database without rules is open: the emulator's convention,
/// never with authentication on (deny by default).
pub fn open_without_rules(state: &AppState) -> bool {
    state.firebase.emulator && !state.access.enabled()
}

/// The rules of `namespace` as this node has applied them.
///
/// Parsed once per version of their record, and read from the store only
/// when the rules' partition applied something since the last read: the
/// partition's applied position is taken *before* the record is read, so
/// a cached entry is never older than the position it is kept under.
pub fn rules_of(state: &AppState, namespace: &Namespace) -> Result<Arc<Rules>, FbError> {
    let handle = namespace.handle(namespace.partition_of(RULES_PK));
    let applied_next = handle.applied_next();
    if let Some(cached) = state.firebase.rules.lock().get(&*namespace.name) {
        if cached.applied_next == applied_next {
            return Ok(cached.rules.clone());
        }
    }
    let record = handle.store().read()?.get(RULES_PK, RULES_SK)?;
    let version = record.as_ref().map_or(u64::MAX, |r| r.version);
    let mut cache = state.firebase.rules.lock();
    if let Some(cached) = cache.get_mut(&*namespace.name) {
        if cached.version == version {
            cached.applied_next = cached.applied_next.max(applied_next);
            return Ok(cached.rules.clone());
        }
    }
    let text = match &record {
        Some(r) => serde_json::from_slice::<String>(&r.value).unwrap_or_default(),
        None if open_without_rules(state) => crate::rules::OPEN.to_string(),
        None => crate::rules::LOCKED.to_string(),
    };
    // Saved rules were checked when saved; a record a foreign writer broke locks the database.
    let rules = Arc::new(Rules::parse(&text).unwrap_or_else(|_| Rules::parse(crate::rules::LOCKED).expect("fixed rules parse")));
    cache.insert(namespace.name.to_string(), CachedRules { applied_next, version, rules: rules.clone() });
    Ok(rules)
}

/// A database's parsed rules, as of a position of their partition.
struct CachedRules {
    /// The partition's applied position when the record was read (or
    /// later seen unchanged).
    applied_next: u64,
    /// The record's version (`u64::MAX`: no record, the default rules).
    version: u64,
    rules: Arc<Rules>,
}

/// The tree as this node has applied it, for rules to read.
pub struct TreeData {
    pub view: Arc<ReadView>,
}

impl crate::rules::eval::Data for TreeData {
    fn current(&self, sk: &str) -> Value {
        value_at(&self.view.reader, TREE_PK, sk, false, READ_BYTES_MAX).unwrap_or(Value::Null)
    }
    fn priority(&self, sk: &str) -> Value {
        let leaf = self.view.reader.get(TREE_PK, &crate::tree::path::join(sk, crate::tree::path::PRIORITY_KEY));
        leaf.ok().flatten().and_then(|record| serde_json::from_slice(&record.value).ok()).unwrap_or(Value::Null)
    }
}

/// A read view of the tree's partition: the one its other readers share
/// while nothing new was applied (`Handle::read_view`), so a read after
/// this node applied a write sees it.
pub fn tree_view(namespace: &Namespace) -> Result<Arc<ReadView>, FbError> {
    Ok(namespace.handle(namespace.partition_of(TREE_PK)).read_view()?)
}

/// The `value` of a change event (`{"pk", "sk", "value", …}`): what the
/// op wrote (a tree op's value, resolved by the apply loop).
pub fn event_value(event: &crate::fanout::Event) -> Value {
    serde_json::from_slice::<Value>(&event.data).ok().and_then(|mut v| v.get_mut("value").map(Value::take)).unwrap_or(Value::Null)
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Firebase's push id: 8 characters of milliseconds, then 12 random ones,
/// in an alphabet that sorts like the numbers; ids made in the same
/// millisecond increment the random part, so they sort as they were made.
pub fn push_id(config: &FirebaseConfig) -> String {
    const ALPHABET: &[u8; 64] = b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";
    let mut last = config.push.lock();
    let now = now_ms().max(last.0);
    if now == last.0 {
        for digit in last.1.iter_mut().rev() {
            if *digit < 63 {
                *digit += 1;
                break;
            }
            *digit = 0;
        }
    } else {
        last.0 = now;
        for digit in last.1.iter_mut() {
            *digit = rand::random_range(0..64);
        }
    }
    let mut id = [0u8; 20];
    let mut time = now;
    for slot in id[..8].iter_mut().rev() {
        *slot = ALPHABET[(time % 64) as usize];
        time /= 64;
    }
    for (slot, digit) in id[8..].iter_mut().zip(last.1) {
        *slot = ALPHABET[digit as usize];
    }
    String::from_utf8(id.to_vec()).expect("the alphabet is ASCII")
}

/// A JSON response, pretty when asked (`print=pretty`), empty when asked (`print=silent` → 204).
pub fn json_response(status: StatusCode, value: &Value, query: &Query, extra: Vec<(header::HeaderName, String)>) -> Result<Response, FbError> {
    let mut response = match query.get("print") {
        Some("silent") => StatusCode::NO_CONTENT.into_response(),
        Some("pretty") => {
            let body = serde_json::to_string_pretty(value).expect("a Value serializes");
            (status, [(header::CONTENT_TYPE, "application/json; charset=utf-8")], body).into_response()
        }
        None => (status, [(header::CONTENT_TYPE, "application/json; charset=utf-8")], value.to_string()).into_response(),
        Some(other) => return Err(FbError::bad(format!("print must be pretty or silent, got {other:?}"))),
    };
    for (name, value) in extra {
        if let Ok(value) = value.parse() {
            response.headers_mut().insert(name, value);
        }
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_ids_are_twenty_characters_and_sort_as_made() {
        let config = FirebaseConfig::default();
        let ids: Vec<String> = (0..2000).map(|_| push_id(&config)).collect();
        assert!(ids.iter().all(|id| id.len() == 20));
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids, "later ids sort after earlier ones, also within a millisecond");
        assert!(ids.windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn unsigned_id_tokens_carry_their_claims_in_emulator_mode() {
        use base64::Engine;
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"alice","email":"a@x"}"#);
        let auth = unsigned_id_token_auth(&format!("eyJhbGciOiJub25lIn0.{claims}.")).unwrap();
        assert_eq!(auth["uid"], "alice");
        // The SDKs' mockUserToken: issued at the epoch, "expired" in 1970, taken as valid.
        let mock = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"bob","iat":0,"exp":3600}"#);
        let caller = Caller::User { auth: unsigned_id_token_auth(&format!("eyJhbGciOiJub25lIn0.{mock}.")).unwrap() };
        assert!(!caller.expired(now_ms()));
        let old = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"bob","iat":1,"exp":3600}"#);
        assert!(Caller::User { auth: unsigned_id_token_auth(&format!("eyJhbGciOiJub25lIn0.{old}.")).unwrap() }.expired(now_ms()));
        assert_eq!(auth["token"]["email"], "a@x");
        assert!(unsigned_id_token_auth("owner").is_none());
    }
}
