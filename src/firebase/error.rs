//! Firebase's errors: `{"error": "<message>"}` with its statuses, and how
//! the edge's and the node's errors become one.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::edge::ApiError;

/// A Firebase error: `{"error": message}` with a status.
#[derive(Debug)]
pub struct FbError {
    pub status: StatusCode,
    pub message: String,
    /// Tern's error code when the error is Tern's (`From<ApiError>`), sent
    /// as a header (`edge::ERROR_CODE_HEADER`): Firebase's body has no
    /// place for it, and a forwarding node must tell `not_held` apart.
    code: Option<&'static str>,
    /// The methods a 405 names in `Allow` (RFC 9110 requires it).
    allow: Option<&'static str>,
}

impl FbError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> FbError {
        FbError { status, message: message.into(), code: None, allow: None }
    }
    /// 405 for `method`, naming the methods `allow`ed (as `Allow` lists them).
    pub fn method_not_allowed(method: &axum::http::Method, allow: &'static str, what: &str) -> FbError {
        let listed = allow.rsplit_once(", ").map_or(allow.to_string(), |(most, last)| format!("{most} or {last}"));
        let message = format!("{method} is not supported{what}; use {listed}");
        FbError { allow: Some(allow), ..FbError::new(StatusCode::METHOD_NOT_ALLOWED, message) }
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
        let mut response = (self.status, [(header::CONTENT_TYPE, "application/json; charset=utf-8")], body).into_response();
        // Never a panic on an answer: a code that is not a header value
        // (codes are snake_case) goes without the header.
        if let Some(code) = self.code.and_then(|code| header::HeaderValue::from_str(code).ok()) {
            response.headers_mut().insert(crate::edge::ERROR_CODE_HEADER, code);
        }
        if let Some(allow) = self.allow {
            response.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static(allow));
        }
        response
    }
}

/// A Tern error (a write's outcome, a forward) in Firebase's form.
impl From<ApiError> for FbError {
    fn from(e: ApiError) -> FbError {
        let error = match e.code {
            "unauthenticated" | "permission_denied" | "too_many_failed_authentications" => {
                FbError::new(e.status, format!("{}: {}", e.code, e.message))
            }
            _ => FbError::new(e.status, e.message),
        };
        FbError { code: Some(e.code), ..error }
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

impl From<crate::node::write::WriteError> for FbError {
    fn from(e: crate::node::write::WriteError) -> FbError {
        ApiError::from(e).into()
    }
}

/// A refusal at the front (401, 429) in Firebase's shape, with its challenge.
pub fn refusal(error: ApiError) -> Response {
    let challenge = crate::edge::challenge(&error);
    let mut response = FbError::from(error).into_response();
    if let Some(challenge) = challenge {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tern's code survives Firebase's error shape as a header; Firebase's
    /// own errors carry none.
    #[test]
    fn a_tern_error_in_firebase_shape_keeps_its_code_in_a_header() {
        let tern = FbError::from(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_held", "node x no longer holds ns/0")).into_response();
        assert_eq!(tern.headers()[crate::edge::ERROR_CODE_HEADER], "not_held");
        let own = FbError::bad("Invalid data; couldn't parse JSON object").into_response();
        assert!(own.headers().get(crate::edge::ERROR_CODE_HEADER).is_none());
    }
}
