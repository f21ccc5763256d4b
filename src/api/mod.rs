//! The v1 HTTP/JSON API (HTTP/1.1 keep-alive and h2c), on axum.
//!
//! Handlers are thin: parse and validate the request (every limit, with a
//! precise 4xx), call the node's write or read path, render the answer. They
//! never touch a store for writing.

mod body;
pub mod error;
mod keys;
mod namespaces;
mod ops;
mod params;
mod records;
mod render;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;

use self::error::ApiError;
use crate::node::Node;

#[derive(Clone)]
pub struct AppState {
    pub node: Arc<Node>,
}

pub fn router(node: Arc<Node>) -> Router {
    let state = AppState { node };
    Router::new()
        .route("/v1/ns", get(namespaces::list))
        .route("/v1/ns/{ns}", put(namespaces::create).get(namespaces::describe))
        .route("/v1/ns/{ns}/kv/{*rest}", get(records::kv).put(records::kv).delete(records::kv))
        .route("/v1/ns/{ns}/get", post(records::multi_get))
        .route("/v1/ns/{ns}/batch", post(records::batch))
        .route("/metrics", get(ops::metrics))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route_layer(axum::middleware::from_fn(track_latency))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Records request latency per route and status class.
async fn track_latency(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let method = request.method().clone();
    let response = next.run(request).await;
    if let Some(route) = route {
        let label = format!("{method} {route}");
        let status = match response.status().as_u16() {
            200..=299 => "2xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        crate::metrics::HTTP_REQUEST_SECONDS.with_label_values(&[&label, status]).observe(started.elapsed().as_secs_f64());
    }
    response
}

async fn not_found(uri: axum::http::Uri) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no route for {}; see docs/api.md", uri.path())).into_response()
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", format!("{method} is not allowed on {}", uri.path()))
        .into_response()
}
