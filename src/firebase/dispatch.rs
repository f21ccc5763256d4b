//! Every Firebase REST request (`/{path}.json`, `/.settings/rules.json`):
//! who is asking, which database, then the rules file (`rules_file.rs`), a
//! stream (`stream.rs`) or a REST verb (`rest.rs`).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::caller::caller;
use super::error::FbError;
use super::query::Query;
use super::routes::is_firebase_path;
use super::state::Firebase;
use super::{rest, rules_file, stream};
use crate::auth::{Identity, Verb};
use crate::edge::{caller_of, connection_of, identify, Encoder, SessionFuture};
use crate::partition::Namespace;
use crate::watch::ConnectionId;

/// Partitions of a database created on first use (a tree is one partition).
const CREATED_PARTITIONS: u32 = 1;
/// Bytes of a request body: a write's JSON is bounded by the mutation limit.
const BODY_BYTES_MAX: usize = crate::limits::MUTATION_BYTES_MAX;

/// `/{path}.json` and `/.settings/rules.json`: every Firebase request.
pub async fn handle(state: Firebase, request: Request) -> Response {
    match dispatch(state, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn dispatch(state: Firebase, request: Request) -> Result<Response, FbError> {
    let (parts, body) = request.into_parts();
    let connection = connection_of(&parts.extensions);
    let query = Query::parse(parts.uri.query());
    let method = method_of(&parts.method, &parts.headers, &query)?;
    let path = parts.uri.path().strip_suffix(".json").expect("routed here for .json paths");
    let verb = verb_of(&method, path, wants_stream(&parts.headers));
    let identity = if state.app.access.enabled() { Some(caller_of(&state.app, &parts).map_err(FbError::from)?) } else { None };
    let caller = caller(&state.config, identity.as_ref(), &parts.headers, &query, verb)?;
    let namespace = database(&state, &query, identity.as_ref()).await?;
    if path == "/.settings/rules" {
        let body = read_body(body).await?;
        return rules_file::handle(&state, &namespace, &caller, &method, &query, &parts.headers, &parts.uri, body).await;
    }
    let keys = crate::tree::path::parse_url_path(path).map_err(FbError::bad)?;
    let sk = crate::tree::path::sk_of(&keys);
    if method == axum::http::Method::GET && wants_stream(&parts.headers) {
        return stream::open(&state, namespace, caller, identity.as_ref(), sk, &query, &parts.headers, connection).await;
    }
    let body = read_body(body).await?;
    rest::handle(&state, &namespace, &caller, &method, sk, &query, &parts.headers, &parts.uri, body).await
}

/// A streaming request (`GET /{path}.json`, `Accept: text/event-stream`),
/// which the API's own HTTP/2 connections run beside their other watches
/// (`open_h2c_stream`).
pub fn is_stream_request<B>(request: &http::Request<B>) -> bool {
    let path = request.uri().path();
    request.method() == axum::http::Method::GET && is_firebase_path(path) && path != "/.settings/rules.json" && wants_stream(request.headers())
}

fn wants_stream(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/event-stream"))
}

/// Sets up a streaming request of an HTTP/2 connection (`is_stream_request`)
/// as `dispatch` would: its session leaves its messages in `outlet`, the
/// returned encoder turns them into Firebase's events; an error is the
/// response to send instead.
pub async fn open_h2c_stream(
    state: &Firebase,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    peer: Option<std::net::IpAddr>,
    connection: ConnectionId,
    outlet: crate::watch::Outlet,
) -> Result<(SessionFuture, Box<dyn Encoder>), Response> {
    let opened = async {
        let query = Query::parse(uri.query());
        let identity = if state.app.access.enabled() { Some(identify(&state.app, headers, uri, peer).map_err(FbError::from)?) } else { None };
        let caller = caller(&state.config, identity.as_ref(), headers, &query, Verb::Watch)?;
        let namespace = database(state, &query, identity.as_ref()).await?;
        let path = uri.path().strip_suffix(".json").expect("a Firebase path");
        let keys = crate::tree::path::parse_url_path(path).map_err(FbError::bad)?;
        let sk = crate::tree::path::sk_of(&keys);
        let (session, translator) = stream::open_session(state, namespace, caller, sk, &query, headers, connection, outlet).await?;
        // Ends when the credential does (a revoked key, an expired JWT).
        let session = match &identity {
            Some(identity) => state.app.access.guard(identity, session),
            None => session,
        };
        Ok::<_, FbError>((session, translator))
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
/// emulator mode — with Tern's authentication on, only for `asker` with
/// `admin` on the namespace (as `PUT /v1/ns/{ns}` takes), never for an
/// anonymous caller (`asker` None).
pub(super) async fn database(state: &Firebase, query: &Query, asker: Option<&Identity>) -> Result<Arc<Namespace>, FbError> {
    let name = query.get("ns").unwrap_or("default");
    if let Some(ns) = state.app.node.namespace(name) {
        return Ok(ns);
    }
    let may_create = state.config.emulator
        && match state.app.access.enabled() {
            false => true,
            true => asker.is_some_and(|identity| identity.allows_all_of(name, "", Verb::Admin).is_ok()),
        };
    if !may_create {
        let how = match state.config.emulator {
            true => "; on first use only for a caller with admin on it",
            false => "",
        };
        return Err(FbError::new(
            StatusCode::NOT_FOUND,
            format!("Database {name:?} does not exist: create it first (tern ns create {name} --partitions 1, or PUT /v1/ns/{name}){how}"),
        ));
    }
    crate::limits::check_namespace_name(name).map_err(|e| FbError::bad(e.message))?;
    state.app.node.create_namespace(name, CREATED_PARTITIONS).await.map_err(|e| FbError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    state.app.node.namespace(name).ok_or_else(|| FbError::new(StatusCode::SERVICE_UNAVAILABLE, "the database was created but is not open yet; retry"))
}

/// The verb a Firebase request needs: rules take `admin`, streams `watch`,
/// reads `read`, everything else `write`.
fn verb_of(method: &axum::http::Method, path: &str, stream: bool) -> Verb {
    match *method {
        _ if path == "/.settings/rules" => Verb::Admin,
        axum::http::Method::GET if stream => Verb::Watch,
        // HEAD is refused (405) after this; a read-only token is told so, not 403.
        axum::http::Method::GET | axum::http::Method::HEAD => Verb::Read,
        _ => Verb::Write,
    }
}
