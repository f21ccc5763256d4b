//! Authentication and authorization at the API's edge (issue 20).
//!
//! Every request but the public ones (`/healthz`, `/readyz`, the demo page,
//! and `/metrics` when `public_metrics`) must carry a token:
//! `Authorization: Bearer TOKEN` — or, where browsers cannot set headers,
//! `?access_token=TOKEN` on watches (`EventSource`, WebSocket) and
//! Firebase's `?auth=TOKEN`. `admit` (called by the service's front,
//! `http/front.rs`) authenticates it once; the front hands the `Identity`
//! to a fast-path handler, or leaves it in the request's extensions for
//! the router's; each handler then asks `require` for the verb on the keys
//! it touches, so a request is decided where its keys are known (a batch's
//! every op, a multi-get's every key). HTTP/2 watch streams, which the
//! connection serves without the router, authenticate through the same
//! `identify`.
//!
//! Answers: 401 `unauthenticated` with `WWW-Authenticate: Bearer`, 403
//! `permission_denied` naming the missing grant, 429
//! `too_many_failed_authentications` (with `Retry-After`) for a source
//! address past its failed-authentication budget. No answer, log line or
//! metric ever holds a token.
//!
//! A forwarded request carries the caller's `Authorization` (and query) to
//! the holder, which decides again: no node takes another's word.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};

use super::error::ApiError;
use super::state::AppState;
use crate::auth::{AuthError, Authenticator, Identity, Verb};

/// The client's address, left in each request's extensions by the transport.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

/// How this node admits requests.
#[derive(Default)]
pub struct Access {
    /// None: authentication is off (every request is `Identity::Open`).
    pub authenticator: Option<Arc<Authenticator>>,
    /// The root token, which this node presents to others to read the API
    /// keys (`tokens.rs`); never sent anywhere else.
    pub root_token: Option<String>,
    /// `/metrics` without a token.
    pub public_metrics: bool,
    /// `/healthz` and `/readyz` without a token (load balancers, orchestrators).
    pub public_health: bool,
}

impl Access {
    pub fn enabled(&self) -> bool {
        self.authenticator.is_some()
    }

    /// 401 when `identity`, authenticated when its connection opened, is no
    /// longer valid (a revoked key, an expired JWT): asked by long-lived
    /// connections before each request they decide.
    pub fn still_valid(&self, identity: &Identity) -> Result<(), ApiError> {
        let Some(authenticator) = &self.authenticator else { return Ok(()) };
        authenticator.still_valid(identity, crate::codec::now_ms()).map_err(|e| unauthenticated(&e))
    }

    /// Resolves once `identity` is no longer valid (never without
    /// authentication): see `Authenticator::lapsed`.
    pub fn lapsed(&self, identity: &Identity) -> impl std::future::Future<Output = ()> + Send + 'static {
        let authenticator = self.authenticator.clone();
        let identity = identity.clone();
        async move {
            match authenticator {
                Some(authenticator) => authenticator.lapsed(&identity).await,
                None => std::future::pending().await,
            }
        }
    }

    /// `session`, ended as soon as `identity` is no longer valid: every
    /// watch (SSE, HTTP/2, WebSocket subscriptions, Firebase streams and
    /// listens) runs through this, so a revoked key or an expired JWT stops
    /// receiving data within the key refresh, not when it reconnects.
    pub fn guard(&self, identity: &Identity, session: super::SessionFuture) -> super::SessionFuture {
        if matches!(identity, Identity::Open | Identity::Root) {
            return session;
        }
        let lapsed = self.lapsed(identity);
        Box::pin(async move {
            tokio::select! {
                () = session => {}
                () = lapsed => {}
            }
        })
    }
}

/// Paths anyone may ask for: the demo page's static files and the API's
/// description (they hold no data), health (`public_health`) and metrics
/// (`public_metrics`).
pub fn is_public(access: &Access, path: &str) -> bool {
    // A path ending in `.json` is a Firebase location (`/console/x.json` is
    // the tree's `console/x`), never one of the pages' files.
    let page_file = |prefix: &str| path.starts_with(prefix) && !path.ends_with(".json");
    matches!(path, "/" | "/console" | "/demo" | "/demo/firebase" | "/v1/openapi.json")
        || page_file("/console/")
        || page_file("/demo/client/")
        || page_file("/demo/firebase/sdk/")
        || (access.public_health && matches!(path, "/healthz" | "/readyz"))
        || (access.public_metrics && path == "/metrics")
}

/// Who is asking, for the service's front (`http/front.rs`): None for a
/// public path (no identity needed), or the refusal (401, 429), which the
/// front answers in the protocol's own shape.
pub fn admit(app: &AppState, request: &Request) -> Result<Option<Identity>, ApiError> {
    if !app.access.enabled() {
        return Ok(Some(Identity::Open));
    }
    if is_public(&app.access, request.uri().path()) {
        return Ok(None);
    }
    let peer = super::peer_of(request.extensions());
    identify(app, request.headers(), request.uri(), peer).map(Some)
}

/// Who sent a request with these headers and this URI (see the module doc).
pub fn identify(app: &AppState, headers: &HeaderMap, uri: &Uri, peer: Option<IpAddr>) -> Result<Identity, ApiError> {
    let Some(authenticator) = &app.access.authenticator else { return Ok(Identity::Open) };
    let token = bearer(headers, uri).unwrap_or_default();
    // The token first: a good one is served whatever its address did, so
    // one client's bad tokens never lock out the others behind the same
    // proxy or forwarding node. Only failures are limited by address.
    let error = match authenticator.authenticate(token.as_ref()) {
        Ok(identity) => return Ok(identity),
        Err(error) => error,
    };
    // The clock is read for failures only (the limiter's): a good token costs none.
    let now = Instant::now();
    if let Some(wait) = peer.and_then(|ip| authenticator.limiter.blocked_for(ip, now)) {
        crate::metrics::AUTH_FAILURES.with_label_values(&["rate_limited"]).inc();
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failed_authentications",
            format!("too many failed authentications from this address; retry in {} s", wait.as_secs().max(1)),
        )
        .with("retry_after_s", wait.as_secs().max(1)));
    }
    let reason = if error == AuthError::Missing { "missing" } else { "invalid" };
    crate::metrics::AUTH_FAILURES.with_label_values(&[reason]).inc();
    if let Some(ip) = peer {
        authenticator.limiter.failed(ip, now);
    }
    Err(unauthenticated(&error))
}

/// The request's token: the `Authorization: Bearer` header (borrowed: the
/// hot path allocates nothing), else a query parameter (`access_token`, or
/// Firebase's `auth`).
fn bearer<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<std::borrow::Cow<'a, str>> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let text = value.to_str().ok()?;
        let (scheme, token) = text.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| std::borrow::Cow::Borrowed(token.trim()));
    }
    let query = uri.query()?;
    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "access_token" || k == "auth").map(|(_, v)| v)
}

/// 401 `unauthenticated`; its `"token": "missing" | "invalid"` says which,
/// and picks the `WWW-Authenticate` challenge (`challenge`).
pub fn unauthenticated(error: &AuthError) -> ApiError {
    let token = if *error == AuthError::Missing { "missing" } else { "invalid" };
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", error.message()).with("token", token)
}

/// Leaves `identity` on a request for its handler (`caller_of`). With
/// authentication off nothing is left: `caller_of` answers `Open` without
/// it, and the request is spared an extensions map.
pub fn attach(request: &mut Request, identity: Identity) {
    if !matches!(identity, Identity::Open) {
        request.extensions_mut().insert(identity);
    }
}

/// Who sent the request `parts` belong to: the identity the service's front
/// left on it (`attach`), else (authentication off, or a request that did
/// not pass the front: an HTTP/2 watch stream)
/// authenticated now.
pub fn caller_of(app: &AppState, parts: &axum::http::request::Parts) -> Result<Identity, ApiError> {
    if let Some(identity) = parts.extensions.get::<Identity>() {
        return Ok(identity.clone());
    }
    identify(app, &parts.headers, &parts.uri, super::peer_of(&parts.extensions))
}

/// The extractor of `caller_of`.
pub struct Caller(pub Identity);

impl axum::extract::FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, app: &AppState) -> Result<Self, Self::Rejection> {
        caller_of(app, parts).map(Caller)
    }
}

/// 403 `permission_denied` unless `identity` may do `verb` on (`ns`, `pk`).
pub fn require(identity: &Identity, ns: &str, pk: &str, verb: Verb) -> Result<(), ApiError> {
    identity.allows(ns, pk, verb).map_err(denied)
}

/// 403 unless `identity` may do `verb` somewhere in `ns`.
pub fn require_anywhere(identity: &Identity, ns: &str, verb: Verb) -> Result<(), ApiError> {
    identity.allows_anywhere(ns, verb).map_err(denied)
}

/// 403 unless `identity` may do `verb` on all of a scope, carve-outs included.
pub fn require_all_of(identity: &Identity, ns: &str, prefix: &str, verb: Verb) -> Result<(), ApiError> {
    identity.allows_all_of(ns, prefix, verb).map_err(denied)
}

/// 403 unless `identity` may do `verb` on every namespace.
pub fn require_everywhere(identity: &Identity, verb: Verb) -> Result<(), ApiError> {
    identity.allows_everywhere(verb).map_err(denied)
}

fn denied(denied: crate::auth::Denied) -> ApiError {
    crate::metrics::AUTH_DENIED.inc();
    ApiError::new(StatusCode::FORBIDDEN, "permission_denied", denied.message)
}

/// The `WWW-Authenticate` header of a 401 (RFC 6750: `error="invalid_token"`
/// when a token was sent); None for any other answer.
pub fn challenge(error: &ApiError) -> Option<HeaderValue> {
    if error.status != StatusCode::UNAUTHORIZED {
        return None;
    }
    let invalid = error.details.get("token").and_then(serde_json::Value::as_str) == Some("invalid");
    Some(HeaderValue::from_static(if invalid { "Bearer realm=\"tern\", error=\"invalid_token\"" } else { "Bearer realm=\"tern\"" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_header_or_the_query() {
        let uri: Uri = "/v1/ws?access_token=abc%2B".parse().unwrap();
        assert_eq!(bearer(&HeaderMap::new(), &uri).as_deref(), Some("abc+"));
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  xyz "));
        assert_eq!(bearer(&headers, &uri).as_deref(), Some("xyz"), "the header wins; the scheme is case-insensitive");
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic eHl6"));
        assert_eq!(bearer(&headers, &uri), None, "another scheme is no bearer token");
        assert_eq!(bearer(&HeaderMap::new(), &"/x.json?auth=t".parse().unwrap()).as_deref(), Some("t"));
    }

    #[test]
    fn only_health_the_console_and_the_demo_are_public() {
        let access = Access { public_health: true, ..Default::default() };
        for path in ["/healthz", "/readyz", "/demo", "/demo/client/tern.js"] {
            assert!(is_public(&access, path), "{path}");
        }
        for path in ["/", "/console", "/console/app.js"] {
            assert!(is_public(&access, path), "{path}: the console's pages (every call they make is authenticated)");
        }
        // Firebase locations under the pages' paths stay behind a token
        // (review found `/console/settings.json` answered by the console).
        for path in ["/console/settings.json", "/demo/client/x.json", "/demo/firebase/sdk/a.json"] {
            assert!(!is_public(&access, path), "{path}");
        }
        for path in ["/metrics", "/v1/ns", "/demo/", "/healthz/x", "/.json", "/v1/ws"] {
            assert!(!is_public(&access, path), "{path}");
        }
        assert!(is_public(&Access { public_metrics: true, ..Default::default() }, "/metrics"));
        assert!(!is_public(&Access::default(), "/healthz"), "health behind a token when not public_health");
    }
}
