//! Forwarding: any node answers any request. A read (or a write whose
//! outcome the caller waits for) of a partition this node does not hold is
//! sent on to the best holder the cluster knows (`Cluster::holders`: same
//! region, then the nearest by measured round trip, then least lag), over pooled keep-alive connections, and its
//! answer is relayed unchanged (status, body), with `x-tern-served-by`.
//!
//! One hop only: a forwarded request carries `x-tern-forwarded-by`, and a
//! node that receives one for a partition it does not hold answers 503
//! `not_held` instead of forwarding again (membership may be changing; the
//! client retries).

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::error::ApiError;
use super::state::AppState;
use crate::cluster::Member;

pub(super) use crate::cluster::peer_client::FORWARDED_BY;
pub const SERVED_BY: &str = "x-tern-served-by";
pub(super) const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The two headers every request is asked for (`Incoming::new`), as names:
/// looking one up by `&str` parses the name again each time.
const FORWARDED_BY_NAME: header::HeaderName = header::HeaderName::from_static(FORWARDED_BY);
const IDEMPOTENCY_KEY_NAME: header::HeaderName = header::HeaderName::from_static(IDEMPOTENCY_KEY);
/// The caller's headers a forwarded request carries, so the holder decides
/// as this node would have: who asks (`Authorization`, checked again
/// there), and Firebase's conditional requests (`X-Firebase-ETag`,
/// `If-Match`, `If-None-Match`).
const PASSED_HEADERS: [&str; 4] = ["authorization", "x-firebase-etag", "if-match", "if-none-match"];
/// The holder's answer headers relayed besides `Content-Type`: Firebase's
/// ETag, and how stale the holder's read may be.
const RELAYED_HEADERS: [header::HeaderName; 2] = [header::ETAG, header::HeaderName::from_static(STALENESS_HEADER)];
/// The header of a local read that says how stale it may be, in
/// milliseconds (`partition::freshness`); relayed from a holder as is
/// (the peer client reads it too: `cluster::peer_client`).
pub use crate::cluster::peer_client::{SERVING_HEADER, STALENESS_HEADER};
/// Marks (internally) a relayed answer that said `not_held`.
const NOT_HELD: &str = "x-tern-not-held";
/// An error answer's code as a header, in every protocol's error shape
/// (Firebase's `{"error": message}` has no room for it in the body): how a
/// forwarding node tells a holder's `not_held` from any other 503.
pub const ERROR_CODE_HEADER: &str = "x-tern-error-code";

/// Most holders tried for one request (each failed attempt is a connect error).
const HOLDERS_TRIED_MAX: usize = 3;
/// Largest answer relayed: a multi-get of the most keys with the largest values.
/// A holder's answer holds at most `limits::ANSWER_BYTES_MAX` of records
/// (a tree read at most `store::tree::READ_BYTES_MAX`, the same); twice that
/// leaves room for keys, escaping and framing. It was ~1 GB: 1,000 keys of
/// 1 MiB each, buffered here.
const ANSWER_BYTES_MAX: usize = 2 * crate::limits::ANSWER_BYTES_MAX;

/// How a request arrived, for passing it on.
pub struct Incoming<'a> {
    pub method: Method,
    /// Path and query exactly as received (percent-encoding kept).
    pub path_and_query: &'a str,
    /// Set when another node forwarded this request here.
    pub forwarded_by: Option<&'a str>,
    /// The `Idempotency-Key` header, if any (raw bytes, checked by the caller).
    pub idempotency_key: Option<&'a [u8]>,
    /// The request's headers (those in `PASSED_HEADERS` go on with it).
    pub headers: Option<&'a HeaderMap>,
    /// Who sent it, as its write id is scoped (`write_id.rs`); None: every
    /// caller is the same one (authentication off).
    pub principal: Option<String>,
}

impl<'a> Incoming<'a> {
    pub fn new(method: Method, uri: &'a axum::http::Uri, headers: &'a HeaderMap) -> Incoming<'a> {
        Incoming {
            // A HEAD goes on as the GET it is: a read (tried at the next
            // holder on failure), whose relayed body gives the length hyper
            // answers with, sending none of it.
            method: if method == Method::HEAD { Method::GET } else { method },
            path_and_query: uri.path_and_query().map_or(uri.path(), |pq| pq.as_str()),
            forwarded_by: headers.get(&FORWARDED_BY_NAME).and_then(|v| v.to_str().ok()),
            idempotency_key: headers.get(&IDEMPOTENCY_KEY_NAME).map(|v| v.as_bytes()),
            headers: Some(headers),
            principal: None,
        }
    }

    /// The request as sent by `identity` (its write id is scoped to it).
    pub fn by(mut self, identity: &crate::auth::Identity) -> Incoming<'a> {
        self.principal = identity.principal();
        self
    }

    /// As `by` for a write; a read has no write id, so it skips naming the
    /// principal (a `format!` per request with a key, on the read path).
    pub fn by_if_writing(self, identity: &crate::auth::Identity, writes: bool) -> Incoming<'a> {
        if writes {
            self.by(identity)
        } else {
            self
        }
    }

    /// The write id of this request (`write_id.rs`).
    pub fn write_id(&self) -> Result<Bytes, String> {
        super::scoped_write_id(self.principal.as_deref(), self.idempotency_key)
    }
}

/// Sends `incoming` with `body` to a holder of `partition` of `namespace`.
pub async fn to_holder(state: &AppState, incoming: &Incoming<'_>, namespace: &str, partition: u32, body: Bytes) -> Result<Response, ApiError> {
    if let Some(from) = incoming.forwarded_by {
        return Err(not_held(state, namespace, partition, from));
    }
    let holders = state.cluster.holders(namespace, partition);
    if holders.is_empty() {
        return Err(no_holder(state, namespace, partition));
    }
    let mut failures = Vec::new();
    for holder in holders.iter().take(HOLDERS_TRIED_MAX) {
        match send(state, holder, incoming, body.clone()).await {
            // Gossip was behind: that node let the partition go. It did not act on
            // the request, so the next holder may take it.
            Ok(response) if is_not_held(&response) => {
                failures.push(format!("{} ({}): no longer holds it", holder.id, holder.api));
            }
            Ok(response) => return Ok(response),
            Err(e) => {
                tracing::warn!(holder = %holder.id, error = %e, "forwarding to a holder failed");
                crate::metrics::FORWARD_FAILURES.inc();
                failures.push(format!("{} ({}): {e}", holder.id, holder.api));
                if !e.is_connect() {
                    // The holder may have acted on it: do not send it twice,
                    // and do not tell the client a retry is safe.
                    if incoming.method != Method::GET {
                        return Err(outcome_unknown(incoming, namespace, partition, &failures));
                    }
                    break;
                }
            }
        }
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "holder_unreachable",
        format!("partition {partition} of namespace {namespace:?} is held by other nodes, and forwarding failed: {}; retry", failures.join("; ")),
    ))
}

/// Forwards one request. Its errors carry no URL: the path and query may
/// hold the caller's token (`?access_token=`, Firebase's `?auth=`), and
/// these errors reach logs and answers.
pub async fn send(state: &AppState, holder: &Member, incoming: &Incoming<'_>, body: Bytes) -> Result<Response, reqwest::Error> {
    send_to(state, holder, incoming, body).await.map_err(reqwest::Error::without_url)
}

async fn send_to(state: &AppState, holder: &Member, incoming: &Incoming<'_>, body: Bytes) -> Result<Response, reqwest::Error> {
    let started = std::time::Instant::now();
    let request = state
        .cluster
        .client()
        .request(holder, &state.cluster.me().id, incoming.method.clone(), incoming.path_and_query)
        .header(header::CONTENT_TYPE, "application/json");
    let mut request = match incoming.idempotency_key {
        Some(key) => request.header(IDEMPOTENCY_KEY, key),
        None => request,
    };
    for name in PASSED_HEADERS {
        if let Some(value) = incoming.headers.and_then(|h| h.get(name)) {
            request = request.header(name, value);
        }
    }
    let response = request.body(body).send().await?;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let error_code = response.headers().get(ERROR_CODE_HEADER).cloned();
    let relayed_headers: Vec<(header::HeaderName, HeaderValue)> =
        RELAYED_HEADERS.iter().filter_map(|name| response.headers().get(name).map(|v| (name.clone(), v.clone()))).collect();
    let Some(bytes) = read_bounded(response).await? else {
        // Never relayed cut short as if it were the answer.
        let message = format!("the holder {} answered more than the {ANSWER_BYTES_MAX} bytes any answer holds; not relayed", holder.id);
        return Ok(ApiError::new(StatusCode::BAD_GATEWAY, "holder_error", message).into_response());
    };
    crate::metrics::FORWARD_SECONDS.observe(started.elapsed().as_secs_f64());
    let to = if holder.region == state.cluster.me().region { "same_region" } else { "other_region" };
    crate::metrics::FORWARDS.with_label_values(&[to]).inc();
    let not_held = status == StatusCode::SERVICE_UNAVAILABLE && said_not_held(&error_code, &bytes);
    let mut relayed = (status, bytes).into_response();
    if not_held {
        relayed.headers_mut().insert(NOT_HELD, HeaderValue::from_static("1"));
    }
    if let Some(content_type) = content_type {
        relayed.headers_mut().insert(header::CONTENT_TYPE, content_type);
    }
    for (name, value) in relayed_headers {
        relayed.headers_mut().insert(name, value);
    }
    if let Ok(id) = HeaderValue::from_str(&holder.id) {
        relayed.headers_mut().insert(SERVED_BY, id);
    }
    Ok(relayed)
}

/// The answer's body, or None past `ANSWER_BYTES_MAX` (a holder never sends
/// more; the rest is not read, rather than buffered without bound).
async fn read_bounded(mut response: reqwest::Response) -> Result<Option<Bytes>, reqwest::Error> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > ANSWER_BYTES_MAX {
            tracing::error!(bytes_max = ANSWER_BYTES_MAX, "a holder's answer exceeds the largest possible answer; not relayed");
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body.freeze()))
}

/// Whether a holder answered that it no longer holds the partition (`not_held`).
/// Whether a holder's 503 says `not_held`: its error-code header, or (a
/// holder of an older version, native API only) the code in its body.
fn said_not_held(error_code: &Option<HeaderValue>, body: &[u8]) -> bool {
    const CODE: &[u8] = b"\"not_held\"";
    match error_code {
        Some(code) => code.as_bytes() == b"not_held",
        None => body.windows(CODE.len()).any(|w| w == CODE),
    }
}

fn is_not_held(response: &Response) -> bool {
    response.headers().get(NOT_HELD).is_some()
}

/// A write was sent to a holder and the exchange failed after that (a reset,
/// a timeout): the holder may have applied it. A blind retry could apply it
/// twice; one with the same `Idempotency-Key` applies at most once.
fn outcome_unknown(incoming: &Incoming<'_>, namespace: &str, partition: u32, failures: &[String]) -> ApiError {
    let advice = match incoming.idempotency_key {
        Some(_) => "retry with the same Idempotency-Key: it is applied at most once",
        None => {
            "do not retry blindly: read the record to see whether it applied, or send writes with an Idempotency-Key \
             header, which makes a retry safe"
        }
    };
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "outcome_unknown",
        format!(
            "partition {partition} of namespace {namespace:?} is held by another node; the write was sent there and \
             the exchange failed before an answer ({}): it may or may not have been applied; {advice}",
            failures.join("; ")
        ),
    )
}

pub fn no_holder(state: &AppState, namespace: &str, partition: u32) -> ApiError {
    let known: Vec<String> = state.cluster.members().iter().map(|m| format!("{} ({})", m.id, m.state)).collect();
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no_holder",
        format!(
            "partition {partition} of namespace {namespace:?} is not held by this node ({}) and no live node that \
             serves it is known (known nodes: {}); the partition may be moving between nodes: retry, and see GET /v1/cluster",
            state.cluster.me().id,
            known.join(", ")
        ),
    )
}

pub fn not_held(state: &AppState, namespace: &str, partition: u32, from: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_held",
        format!(
            "node {} no longer holds partition {partition} of namespace {namespace:?} (forwarded here by {from}); \
             the partition is moving between nodes: retry",
            state.cluster.me().id
        ),
    )
}
