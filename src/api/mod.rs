//! The v1 HTTP/JSON API (HTTP/1.1 keep-alive and h2c), on axum.
//!
//! Handlers are thin: parse and validate the request (every limit, with a
//! precise 4xx), call the node's write or read path, render the answer. They
//! never touch a store for writing.

// The transport (above the handlers: it hands them requests).
pub mod http;

// Handlers, one concern per file.
pub mod access;
mod admin;
mod cluster;
mod demo;
mod firebase;
mod namespaces;
mod ops;
mod procedures;
mod records;
mod sse;
pub mod tokens;
mod writes;
mod ws;

// What handlers share: request parsing and limits, errors, rendering, forwarding.
mod body;
mod error;
mod forward;
mod keys;
mod params;
mod render;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::handler::Handler;
use prometheus::Histogram;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::http::Method;
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::Router;

use self::error::ApiError;
use crate::cluster::Cluster;
use crate::node::Node;
use RouteAccess::{Authenticated, Public, Scoped};

#[derive(Clone)]
pub struct AppState {
    pub node: Arc<Node>,
    pub cluster: Arc<Cluster>,
    /// How this node speaks Firebase (`api/firebase/`); shared, so a
    /// request's clone of the state is reference counts only.
    pub firebase: Arc<firebase::FirebaseConfig>,
    /// Who may ask what (`access.rs`).
    pub access: Arc<access::Access>,
}

pub use self::firebase::FirebaseConfig;

/// Makes the onDisconnect writes of realtime connections that went away
/// without making them (their node restarted or died), until the node stops.
pub async fn firebase_sweep_forever(state: AppState) {
    let registry = state.firebase.registry.clone();
    firebase::realtime::ondisconnect::sweep_forever(state, registry).await
}

/// The service to serve: the router, behind the fast path for plain
/// single-key GETs and PUTs (the product's hottest calls), which skips
/// routing and extractors: server CPU per GET fell from ~13-15 µs to ~10 µs,
/// against ~9.3 µs for a bare hello server (BENCHMARKS.md).
pub fn app(
    node: Arc<Node>,
    cluster: Arc<Cluster>,
) -> impl tower::Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send> + Clone + Send + 'static
{
    service(state(node, cluster))
}

/// What every handler shares.
pub fn state(node: Arc<Node>, cluster: Arc<Cluster>) -> AppState {
    AppState { node, cluster, firebase: Arc::new(FirebaseConfig::default()), access: Arc::default() }
}

/// The service to serve for `state` (see `app`).
pub fn service(
    state: AppState,
) -> impl tower::Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send> + Clone + Send + 'static
{
    let fast = Arc::new(FastPath {
        app: state.clone(),
        get_metrics: RouteMetrics::new(GET_RECORD_ROUTE),
        put_metrics: RouteMetrics::new(PUT_RECORD_ROUTE),
        firebase_metrics: RouteMetrics::new(FIREBASE_ROUTE),
    });
    tower::Layer::layer(&axum::middleware::from_fn_with_state(fast, fast_path), router(state))
}

const GET_RECORD_ROUTE: &str = "GET /v1/ns/{ns}/kv/{*rest}";
const PUT_RECORD_ROUTE: &str = "PUT /v1/ns/{ns}/kv/{*rest}";
/// Every Firebase request (`/{path}.json`, any method), in one histogram.
const FIREBASE_ROUTE: &str = "/{path}.json";

/// Shared by every request (axum clones the state per request: one `Arc`).
struct FastPath {
    app: AppState,
    get_metrics: Arc<RouteMetrics>,
    put_metrics: Arc<RouteMetrics>,
    firebase_metrics: Arc<RouteMetrics>,
}

/// The service's front: decides who is asking (`access::admit`: 401 and
/// 429 here), then answers plain single-key GETs and PUTs directly, and
/// Firebase's `/{path}.json` (no route pattern can name any path: the
/// router would try every route before its fallback); everything else goes
/// to the router with the identity in its extensions. One layer for both,
/// so the hottest calls pay for neither a second middleware nor an
/// extensions map.
async fn fast_path(State(fast): State<Arc<FastPath>>, mut request: Request, next: Next) -> Response {
    // The realtime protocol authenticates in its own messages (a browser
    // cannot set a header on a WebSocket): `firebase::realtime` decides.
    if request.uri().path() == firebase::realtime::PATH {
        return firebase::realtime::upgrade(fast.app.clone(), request).await;
    }
    let identity = match access::admit(&fast.app, &request) {
        Ok(Some(identity)) => identity,
        // Public: no identity needed.
        Ok(None) => return next.run(request).await,
        Err(refused) => return refused,
    };
    if is_firebase_path(request.uri().path()) {
        access::attach(&mut request, identity);
        let started = Instant::now();
        let response = firebase::handle(fast.app.clone(), request).await;
        fast.firebase_metrics.observe(response.status(), started);
        return response;
    }
    let method = request.method().clone();
    let plain = request.uri().query().is_none();
    let metrics = match method {
        axum::http::Method::GET if plain => &fast.get_metrics,
        axum::http::Method::PUT if plain => &fast.put_metrics,
        _ => {
            access::attach(&mut request, identity);
            return next.run(request).await;
        }
    };
    let started = Instant::now();
    match records::fast_path(&fast.app, &identity, request).await {
        Ok(response) => {
            metrics.observe(response.status(), started);
            response
        }
        Err(mut request) => {
            access::attach(&mut request, identity);
            next.run(request).await
        }
    }
}

/// Who may call a route (`access.rs` decides; `tests/it/auth.rs` walks
/// every route of `routes()` with each kind of bad credential).
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

/// Every route the API serves, the Firebase paths (answered before the
/// router, `fast_path`) included. The router is built from this table
/// alone, so no route can be added without saying who may call it.
pub fn routes() -> Vec<Route> {
    let mut routes: Vec<Route> = table().into_iter().map(|(route, _)| route).collect();
    for method in [Method::GET, Method::PUT, Method::PATCH, Method::POST, Method::DELETE] {
        routes.push(Route { method, path: "/{path}.json", access: RouteAccess::Scoped });
    }
    routes.push(Route { method: Method::GET, path: "/.settings/rules.json", access: RouteAccess::Scoped });
    routes.push(Route { method: Method::PUT, path: "/.settings/rules.json", access: RouteAccess::Scoped });
    routes
}

/// The routes with their handlers (see `routes`).
fn table() -> Vec<(Route, MethodRouter<AppState>)> {
    fn r(method: Method, path: &'static str, access: RouteAccess, handler: MethodRouter<AppState>) -> (Route, MethodRouter<AppState>) {
        (Route { method, path, access }, handler)
    }
    vec![
        r(Method::GET, "/v1/ns", Authenticated, get(timed("GET /v1/ns", namespaces::list))),
        r(Method::PUT, "/v1/ns/{ns}", Scoped, put(timed("PUT /v1/ns/{ns}", namespaces::create))),
        r(Method::GET, "/v1/ns/{ns}", Scoped, get(timed("GET /v1/ns/{ns}", namespaces::describe))),
        r(Method::GET, "/v1/ns/{ns}/kv/{*rest}", Scoped, get(timed(GET_RECORD_ROUTE, records::kv))),
        r(Method::PUT, "/v1/ns/{ns}/kv/{*rest}", Scoped, put(timed(PUT_RECORD_ROUTE, records::kv))),
        r(Method::DELETE, "/v1/ns/{ns}/kv/{*rest}", Scoped, delete(timed("DELETE /v1/ns/{ns}/kv/{*rest}", records::kv))),
        r(Method::POST, "/v1/ns/{ns}/get", Scoped, post(timed("POST /v1/ns/{ns}/get", records::multi_get))),
        r(Method::POST, "/v1/ns/{ns}/batch", Scoped, post(timed("POST /v1/ns/{ns}/batch", records::batch))),
        r(Method::GET, "/v1/ns/{ns}/watch", Scoped, get(sse::sse)),
        r(Method::GET, "/v1/ns/{ns}/procedures", Scoped, get(timed("GET /v1/ns/{ns}/procedures", procedures::list))),
        r(Method::GET, "/v1/ns/{ns}/procedures/{name}", Scoped, get(timed("GET /v1/ns/{ns}/procedures/{name}", procedures::show))),
        r(Method::PUT, "/v1/ns/{ns}/procedures/{name}", Scoped, put(timed("PUT /v1/ns/{ns}/procedures/{name}", procedures::deploy))),
        r(Method::DELETE, "/v1/ns/{ns}/procedures/{name}", Scoped, delete(timed("DELETE /v1/ns/{ns}/procedures/{name}", procedures::remove))),
        r(Method::GET, "/v1/ns/{ns}/outbox", Scoped, get(timed("GET /v1/ns/{ns}/outbox", procedures::outbox))),
        r(Method::DELETE, "/v1/ns/{ns}/outbox", Scoped, delete(timed("DELETE /v1/ns/{ns}/outbox", procedures::trim_outbox))),
        r(Method::GET, "/v1/ws", Authenticated, get(ws::upgrade)),
        r(Method::GET, "/v1/writes/{id}", Authenticated, get(timed("GET /v1/writes/{id}", writes::status))),
        r(Method::POST, "/v1/tokens", Scoped, post(timed("POST /v1/tokens", tokens::create))),
        r(Method::GET, "/v1/tokens", Authenticated, get(timed("GET /v1/tokens", tokens::list))),
        r(Method::DELETE, "/v1/tokens/{id}", Scoped, delete(timed("DELETE /v1/tokens/{id}", tokens::revoke))),
        r(Method::GET, "/v1/cluster", Scoped, get(timed("GET /v1/cluster", cluster::show))),
        r(Method::POST, "/v1/admin/snapshots", Scoped, post(timed("POST /v1/admin/snapshots", admin::create))),
        r(Method::GET, "/v1/admin/snapshots", Scoped, get(timed("GET /v1/admin/snapshots", admin::list))),
        r(Method::GET, "/demo", Public, get(demo::page)),
        r(Method::GET, "/demo/client/{file}", Public, get(demo::client_file)),
        r(Method::GET, "/demo/firebase", Public, get(demo::firebase_page)),
        r(Method::GET, "/demo/firebase/sdk/{file}", Public, get(demo::firebase_sdk_file)),
        r(Method::GET, "/metrics", Scoped, get(ops::metrics)),
        r(Method::GET, "/healthz", Public, get(ops::healthz)),
        r(Method::GET, "/readyz", Public, get(ops::readyz)),
    ]
}

pub fn router(state: AppState) -> Router {
    table()
        .into_iter()
        .fold(Router::new(), |router, (route, handler)| router.route(route.path, handler))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// A route's latency histograms, one per status class, resolved once at
/// start-up so the request path does no label lookup.
struct RouteMetrics {
    by_class: [Histogram; 3],
}

impl RouteMetrics {
    fn new(route: &str) -> Arc<RouteMetrics> {
        let h = |class: &str| crate::metrics::HTTP_REQUEST_SECONDS.with_label_values(&[route, class]);
        Arc::new(RouteMetrics { by_class: [h("2xx"), h("4xx"), h("5xx")] })
    }
}

/// Wraps `handler` so its latency is recorded under `route`.
fn timed<H, T>(route: &'static str, handler: H) -> impl Handler<T, AppState>
where
    H: Handler<T, AppState>,
    T: 'static,
{
    handler.layer(axum::middleware::from_fn_with_state(RouteMetrics::new(route), track_latency))
}

impl RouteMetrics {
    fn observe(&self, status: StatusCode, started: Instant) {
        let class = match status.as_u16() {
            200..=399 => 0,
            400..=499 => 1,
            _ => 2,
        };
        self.by_class[class].observe(started.elapsed().as_secs_f64());
    }
}

async fn track_latency(State(metrics): State<Arc<RouteMetrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.observe(response.status(), started);
    response
}

/// A Firebase path (`/{path}.json`) that no route of Tern's own could
/// match: those live under `/v1/` and `/demo/`, and a `.json` path there
/// that no route takes still reaches Firebase through `fallback`.
pub(crate) fn is_firebase_path(path: &str) -> bool {
    path.ends_with(".json") && !path.starts_with("/v1/") && !path.starts_with("/demo/")
}

/// Paths no route names: Firebase's `/{path}.json` under `/v1/` or
/// `/demo/` (any other is taken before the router, `fast_path`), or nothing.
async fn fallback(State(state): State<AppState>, request: Request) -> Response {
    if request.uri().path().ends_with(".json") {
        return firebase::handle(state, request).await;
    }
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no route for {}; see docs/api.md", request.uri().path())).into_response()
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", format!("{method} is not allowed on {}", uri.path()))
        .into_response()
}

#[cfg(test)]
mod tests {
    use crate::api::is_firebase_path;

    #[test]
    fn firebase_paths_skip_the_router_but_never_take_a_route_of_tern() {
        assert!(is_firebase_path("/.json"));
        assert!(is_firebase_path("/users/alice.json"));
        assert!(is_firebase_path("/.settings/rules.json"));
        assert!(is_firebase_path("/v1.json"), "a tree location named v1 is not a route");
        // A record whose key ends in .json is still a record.
        assert!(!is_firebase_path("/v1/ns/default/kv/config.json"));
        assert!(!is_firebase_path("/demo/client/package.json"));
        assert!(!is_firebase_path("/metrics"));
    }
}
