//! How this node reaches the other nodes over HTTP: one pooled client
//! (keep-alive connections per peer, bounded), plaintext or TLS (other
//! nodes' certificates checked against the cluster's CA, this node's own
//! presented to peers that ask for one). Three kinds of request use it:
//!
//! - a caller's request forwarded to a holder (`edge::forward`): it carries
//!   the caller's credential, never this node's;
//! - round-trip probes (`probe.rs`);
//! - a record read at a holder as this node (`read_record`: the namespace
//!   settings of a partition this node does not hold), with this node's
//!   own credential (the root token the nodes of a cluster share).
//!
//! Every request is bounded (`CONNECT_TIMEOUT`, `REQUEST_TIMEOUT`), and an
//! error never carries the URL: a path may hold a caller's token.

use std::time::Duration;

use bytes::Bytes;

use super::Member;
use crate::limits::WAIT_MS_MAX;
use crate::node::RecordAt;

/// Set on a request one node sends another: the receiver never forwards
/// it again (one hop), and answers `not_held` instead.
pub const FORWARDED_BY: &str = "x-tern-forwarded-by";
/// Bound on connecting to a peer; a dead one is skipped for the next.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on one request: the longest wait a request may ask for, plus slack.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(WAIT_MS_MAX + 5_000);
/// Bound on one request this node makes as itself (settings and keys are
/// small and wanted soon).
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The header of a read's answer that says how stale it may be, in ms
/// (`partition::freshness`; absent until the replica was once current).
pub const STALENESS_HEADER: &str = "x-tern-staleness-ms";
/// The header of a record read answered to another node (one with
/// `FORWARDED_BY`): `1` when the replica serves caught up, `0` while it
/// catches up (after a restart, a wipe, a hand-off).
pub const SERVING_HEADER: &str = "x-tern-serving";
/// The most a holder's answer to `read_record` may be behind, in ms.
const RECORD_STALENESS_MS_MAX: u64 = 10_000;
/// Largest record answer read (`read_record`): a value of the largest size, framed.
const RECORD_ANSWER_BYTES_MAX: usize = crate::limits::VALUE_BYTES_MAX + 64 * 1024;
/// Idle keep-alive connections kept per peer.
const IDLE_CONNECTIONS_PER_PEER_MAX: usize = 64;

/// A pooled HTTP client to other nodes. Cheap to clone.
#[derive(Clone)]
pub struct PeerClient {
    client: reqwest::Client,
    /// `http`, or `https` when the nodes serve TLS (`secure`).
    scheme: &'static str,
    /// This node's credential for requests it makes as itself (`read_record`).
    credential: Option<String>,
}

impl Default for PeerClient {
    fn default() -> Self {
        PeerClient::plain()
    }
}

impl PeerClient {
    /// Plaintext HTTP, no credential of its own.
    pub fn plain() -> PeerClient {
        let client = PeerClient::builder().build().expect("the HTTP client builds with static settings");
        PeerClient { client, scheme: "http", credential: None }
    }

    /// Over TLS (the nodes serve it): other nodes' certificates are checked
    /// against `cluster_ca` (PEM; none: the system's roots), and this node
    /// presents `identity` (its certificate and key, PEM) to those that
    /// require client certificates.
    pub fn secure(cluster_ca: Option<&std::path::Path>, identity: Option<(&std::path::Path, &std::path::Path)>) -> anyhow::Result<PeerClient> {
        let mut builder = PeerClient::builder().https_only(true);
        if let Some(path) = cluster_ca {
            let pem = std::fs::read(path).map_err(|e| anyhow::anyhow!("cluster_ca_file {}: {e}", path.display()))?;
            for certificate in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| anyhow::anyhow!("cluster_ca_file {}: {e}", path.display()))? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        if let Some((cert, key)) = identity {
            let mut pem = std::fs::read(cert).map_err(|e| anyhow::anyhow!("tls_cert_file {}: {e}", cert.display()))?;
            pem.extend(std::fs::read(key).map_err(|e| anyhow::anyhow!("tls_key_file {}: {e}", key.display()))?);
            builder = builder
                .identity(reqwest::Identity::from_pem(&pem).map_err(|e| anyhow::anyhow!("this node's certificate as a client identity: {e}"))?);
        }
        let client = builder.build().map_err(|e| anyhow::anyhow!("the client to other nodes: {e}"))?;
        Ok(PeerClient { client, scheme: "https", credential: None })
    }

    /// The same client, presenting `token` on the requests this node makes
    /// as itself (`read_record`), never on forwarded ones.
    pub fn with_credential(mut self, token: Option<String>) -> PeerClient {
        self.credential = token;
        self
    }

    fn builder() -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_PEER_MAX)
            .tcp_nodelay(true)
            .no_proxy()
    }

    /// A request of `method` to `path_and_query` (as received: its
    /// percent-encoding kept) on `peer`, marked as sent by node `from`.
    pub fn request(&self, peer: &Member, from: &str, method: http::Method, path_and_query: &str) -> reqwest::RequestBuilder {
        let url = format!("{}://{}{}", self.scheme, peer.api, path_and_query);
        self.client.request(method, url).header(FORWARDED_BY, from)
    }

    /// One round trip to `peer` (`GET /healthz`), or None when it got no
    /// answer within `timeout`. Any answer counts: health may say otherwise,
    /// the round trip is real.
    pub async fn probe(&self, peer: &Member, timeout: Duration) -> Option<Duration> {
        let url = format!("{}://{}/healthz", self.scheme, peer.api);
        let started = std::time::Instant::now();
        match self.client.get(url).timeout(timeout).send().await {
            Ok(response) => {
                if !response.status().is_success() {
                    tracing::debug!(peer = %peer.id, status = %response.status(), "probe answered with an error");
                }
                Some(started.elapsed())
            }
            Err(e) => {
                tracing::debug!(peer = %peer.id, error = %e.without_url(), "probe unanswered");
                None
            }
        }
    }

    /// `GET path_and_query` on `peer` as this node (`from`, with this
    /// node's credential), within `READ_TIMEOUT`: the answer's status and
    /// body (at most `bytes_max`), or why there is none.
    pub async fn get_as_node(&self, peer: &Member, from: &str, path_and_query: &str, bytes_max: usize) -> Result<(http::StatusCode, Bytes), String> {
        let mut request = self.request(peer, from, http::Method::GET, path_and_query).timeout(READ_TIMEOUT);
        if let Some(token) = &self.credential {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| e.without_url().to_string())?;
        let status = response.status();
        Ok((status, read_bounded(response, bytes_max).await?))
    }

    /// `get_as_node`, with whether the answer says it is current: Ok, or
    /// why not (see `read_record`).
    async fn get_as_node_with_currency(
        &self,
        peer: &Member,
        from: &str,
        path: &str,
        bytes_max: usize,
    ) -> Result<(http::StatusCode, Result<(), String>, Bytes), String> {
        let mut request = self.request(peer, from, http::Method::GET, path).timeout(READ_TIMEOUT);
        if let Some(token) = &self.credential {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| e.without_url().to_string())?;
        let status = response.status();
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let staleness_ms: Option<u64> = header(STALENESS_HEADER).and_then(|v| v.parse().ok());
        let current = match (header(SERVING_HEADER).as_deref(), staleness_ms) {
            (Some("1"), Some(ms)) if ms > RECORD_STALENESS_MS_MAX => Err(format!("may be {ms} ms behind (more than {RECORD_STALENESS_MS_MAX})")),
            (Some("1"), _) => Ok(()),
            (Some(_), _) => Err("is catching up".to_string()),
            (None, _) => Err("did not say whether it serves caught up".to_string()),
        };
        Ok((status, current, read_bounded(response, bytes_max).await?))
    }

    /// Reads the record `at` on `holder` as this node (`from`): its value
    /// (JSON text), None when it has no such record, or why not. Only from
    /// a holder that serves caught up (`SERVING_HEADER`) and, where it knows
    /// how stale it may be (`STALENESS_HEADER`), at most
    /// `RECORD_STALENESS_MS_MAX` behind: a holder that is behind (restarted,
    /// wiped, catching up) is an error, never its older state (what the
    /// namespace settings are decided on). Not a strong read: that would put
    /// a log round trip (a barrier, on Kafka) and, while the log is down,
    /// its timeout in front of client writes.
    pub async fn read_record(&self, holder: &Member, from: &str, at: &RecordAt) -> Result<Option<Bytes>, String> {
        let path = format!("/v1/ns/{}/kv/{}/{}", encode(&at.ns), encode(&at.pk), encode(&at.sk));
        let (status, current, body) = self.get_as_node_with_currency(holder, from, &path, RECORD_ANSWER_BYTES_MAX).await?;
        if status.is_success() || status == http::StatusCode::NOT_FOUND {
            current.map_err(|why| format!("{} {why}", holder.id))?;
        }
        #[derive(serde::Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            value: &'a serde_json::value::RawValue,
        }
        #[derive(serde::Deserialize)]
        struct Refusal {
            error: RefusalError,
        }
        #[derive(serde::Deserialize)]
        struct RefusalError {
            code: String,
        }
        match status {
            http::StatusCode::OK => {
                let answer: Answer<'_> = serde_json::from_slice(&body).map_err(|e| format!("an answer that is not a record: {e}"))?;
                Ok(Some(Bytes::copy_from_slice(answer.value.get().as_bytes())))
            }
            http::StatusCode::NOT_FOUND if serde_json::from_slice::<Refusal>(&body).is_ok_and(|r| r.error.code == "not_found") => Ok(None),
            other => Err(format!("{} answered {other}: {}", holder.id, String::from_utf8_lossy(&body))),
        }
    }
}

/// A key as one path segment (`/` inside a key is `%2F`).
pub fn encode(key: &str) -> String {
    percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// An answer's body, refused past `bytes_max`.
async fn read_bounded(mut response: reqwest::Response, bytes_max: usize) -> Result<Bytes, String> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.without_url().to_string())? {
        if body.len() + chunk.len() > bytes_max {
            return Err(format!("the answer is larger than {bytes_max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}
