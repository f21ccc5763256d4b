//! `GET /v1/openapi.json`: an OpenAPI 3.1 description of the native API,
//! kept beside the route table (`openapi.json`, embedded in the binary).
//! `tests/it/openapi.rs` checks it against `routes()` both ways, every
//! route described and nothing described that does not exist, and the
//! test command validates it with a standard validator.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The document, as served.
const DOCUMENT: &str = include_str!("openapi.json");

pub(super) async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
}
