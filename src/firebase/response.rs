//! A Firebase answer's body: JSON, pretty or silent as the request asks.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::FbError;
use super::query::Query;

/// A JSON response, pretty when asked (`print=pretty`), empty when asked (`print=silent` → 204).
pub(super) fn json_response(status: StatusCode, value: &Value, query: &Query, extra: Vec<(header::HeaderName, String)>) -> Result<Response, FbError> {
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
