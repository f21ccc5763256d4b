//! Record keys from the raw request path.
//!
//! `/v1/ns/{ns}/kv/{pk}` and `/v1/ns/{ns}/kv/{pk}/{sk}`: each key is one
//! percent-encoded path segment (a `/` inside a key is `%2F`). The raw path is
//! parsed here, not by the router, so that `%2F` is never confused with a
//! separator. `/kv/{pk}/` (trailing slash) is the empty sort key.

use std::sync::Arc;

use percent_encoding::percent_decode_str;

use crate::edge::ApiError;
use crate::edge::AppState;
use crate::limits;
use crate::partition::Namespace;

/// The namespace a request names, or 404 `namespace_not_found`.
pub(super) fn namespace(state: &AppState, ns: &str) -> Result<Arc<Namespace>, ApiError> {
    state.node.namespace(ns).ok_or_else(|| ApiError::unknown_namespace(ns))
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct KeyPath {
    pub pk: String,
    /// `None` when the path names only a pk (`/kv/{pk}`).
    pub sk: Option<String>,
}

/// Parses by segments: `/v1/ns/`, the namespace segment, `kv/`, then the
/// keys. Never by searching for `/kv/`: a namespace (or key) named `kv` is
/// an ordinary name.
pub(crate) fn parse(raw_path: &str) -> Result<KeyPath, ApiError> {
    let rest = raw_path
        .strip_prefix("/v1/ns/")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(_namespace, rest)| rest.strip_prefix("kv/"))
        .ok_or_else(|| ApiError::bad_request("invalid_key", "the path must be /v1/ns/{ns}/kv/{pk}[/{sk}]"))?;
    let mut segments = rest.split('/');
    let pk = decode(segments.next().unwrap_or(""), "pk")?;
    let sk = segments.next().map(|s| decode(s, "sk")).transpose()?;
    if segments.next().is_some() {
        return Err(ApiError::bad_request("invalid_key", "the path has more than two key segments; percent-encode a / inside a key as %2F"));
    }
    limits::check_pk(&pk)?;
    if let Some(sk) = &sk {
        limits::check_sk(sk)?;
    }
    Ok(KeyPath { pk, sk })
}

fn decode(segment: &str, what: &str) -> Result<String, ApiError> {
    percent_decode_str(segment)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ApiError::bad_request("invalid_key", format!("{what} is not valid UTF-8 after percent-decoding")))
}

/// The `{ns}` segment of `/v1/ns/{ns}/...`, from the raw path, so that a bad
/// segment gets Tern's JSON error rather than the router's plain text.
pub(super) struct NsName(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for NsName {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        let segment = parts.uri.path().strip_prefix("/v1/ns/").and_then(|rest| rest.split('/').next()).unwrap_or("");
        let name = percent_decode_str(segment)
            .decode_utf8()
            .map_err(|_| ApiError::bad_request("invalid_namespace", "the namespace name is not valid UTF-8 after percent-decoding"))?;
        Ok(NsName(name.into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_segments() {
        assert_eq!(parse("/v1/ns/d/kv/user").unwrap(), KeyPath { pk: "user".into(), sk: None });
        assert_eq!(parse("/v1/ns/d/kv/user/").unwrap(), KeyPath { pk: "user".into(), sk: Some("".into()) });
        assert_eq!(parse("/v1/ns/d/kv/a%2Fb/c%20d").unwrap(), KeyPath { pk: "a/b".into(), sk: Some("c d".into()) });
        assert_eq!(parse("/v1/ns/d/kv/a/b/c").unwrap_err().code, "invalid_key");
        assert_eq!(parse("/v1/ns/d/kv/%FF").unwrap_err().code, "invalid_key");
        assert_eq!(parse("/v1/ns/d/kv//x").unwrap_err().code, "invalid_key");
        // Route words are ordinary names in every position.
        for word in ["kv", "watch", "get", "batch", "ns", "v1"] {
            assert_eq!(parse(&format!("/v1/ns/{word}/kv/user")).unwrap(), KeyPath { pk: "user".into(), sk: None });
            assert_eq!(parse(&format!("/v1/ns/{word}/kv/{word}/{word}")).unwrap(), KeyPath { pk: word.into(), sk: Some(word.into()) });
            assert_eq!(parse(&format!("/v1/ns/d/kv/{word}")).unwrap(), KeyPath { pk: word.into(), sk: None });
        }
        assert_eq!(parse("/v1/ns/kv/kv").unwrap_err().code, "invalid_key");
        let long = format!("/v1/ns/d/kv/{}", "k".repeat(1025));
        assert_eq!(parse(&long).unwrap_err().code, "key_too_large");
    }
}
