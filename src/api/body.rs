//! Request bodies: read with a hard byte bound, parsed as JSON with errors
//! that say where the problem is.

use axum::body::Body;
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

/// Reads at most `limit_bytes`; more is a 413 with `code`.
pub(super) async fn read(body: Body, limit_bytes: usize, code: &'static str, what: &str) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit_bytes).await.map_err(|e| {
        let too_large =
            std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) || e.to_string().contains("length limit");
        if too_large {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, code, format!("{what} is larger than the limit of {limit_bytes} bytes"))
        } else {
            ApiError::bad_request("invalid_body", format!("could not read the request body: {e}"))
        }
    })
}

/// Parses a JSON body into `T`; syntax errors are `invalid_json`, shape errors `invalid_request`.
pub(super) fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::bad_request("invalid_request", format!("request body: {e}")),
        _ => ApiError::bad_request("invalid_json", format!("request body is not valid JSON: {e}")),
    })
}

/// Checks that `bytes` is one JSON value; returns it without surrounding whitespace.
pub(super) fn json_value(bytes: Bytes) -> Result<Bytes, ApiError> {
    if let Err(e) = serde_json::from_slice::<&serde_json::value::RawValue>(&bytes) {
        return Err(ApiError::bad_request("invalid_json", format!("the value is not valid JSON: {e}")));
    }
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(0);
    let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |e| e + 1);
    Ok(bytes.slice(start..end))
}
use crate::edge::ApiError;
