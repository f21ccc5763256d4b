//! A route as the edge describes it — method, path pattern, who may call
//! it — and its latency metrics. Each protocol lists its own routes
//! (`api::routes`, `firebase::routes`); the front serves their union
//! (`http::routes`), which `tests/it/auth.rs` walks with every kind of bad
//! credential, so no route exists without saying who may call it.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::Histogram;

/// Who may call a route (`access.rs` decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAccess {
    /// Anyone: health (unless `public_health` is off), the demo's static
    /// files (and `/metrics` when `public_metrics`).
    Public,
    /// Any valid token; what it shows is filtered by the caller's grants
    /// (`GET /v1/ns`, `GET /v1/tokens`), or it holds no data of a namespace
    /// (`/v1/writes/{id}`: an id is known only to its writer; `/v1/ws`: each
    /// `sub` is decided on its own).
    Authenticated,
    /// A valid token with a grant for what the request touches (403 otherwise).
    Scoped,
}

/// One route: method, path pattern, who may call it.
#[derive(Debug, Clone)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub access: RouteAccess,
}

/// A route's latency histograms, one per status class, resolved once at
/// start-up so the request path does no label lookup.
pub struct RouteMetrics {
    by_class: [Histogram; 3],
}

impl RouteMetrics {
    pub fn new(route: &str) -> Arc<RouteMetrics> {
        let (method, path) = route.split_once(' ').expect("a route is METHOD PATH");
        let h = |class: &str| crate::metrics::HTTP_REQUEST_SECONDS.with_label_values(&[method, path, class]);
        Arc::new(RouteMetrics { by_class: [h("2xx"), h("4xx"), h("5xx")] })
    }

    /// Records one answer with `status`, started at `started`.
    pub fn observe(&self, status: StatusCode, started: Instant) {
        let class = match status.as_u16() {
            200..=399 => 0,
            400..=499 => 1,
            _ => 2,
        };
        self.by_class[class].observe(started.elapsed().as_secs_f64());
    }
}

/// Wraps `handler` so its latency is recorded under `route`.
pub fn timed<H, T, S>(route: &'static str, handler: H) -> impl Handler<T, S>
where
    H: Handler<T, S>,
    T: 'static,
    S: Clone + Send + Sync + 'static,
{
    handler.layer(axum::middleware::from_fn_with_state(RouteMetrics::new(route), track_latency))
}

async fn track_latency(State(metrics): State<Arc<RouteMetrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.observe(response.status(), started);
    response
}
