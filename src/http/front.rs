//! The front: the one service every connection's requests go to. It
//! decides, in order:
//!
//! 1. `/.ws` is Firebase's realtime protocol (it authenticates in its own
//!    messages: a browser cannot set a header on a WebSocket);
//! 2. who is asking (`edge::admit`: 401 and 429 here, in the shape of the
//!    protocol the path belongs to);
//! 3. by prefix: every `/v1/…` path is the native API's (even one ending
//!    in `.json`); any other path ending in `.json` is Firebase's
//!    (`firebase::is_firebase_path`); everything else (operations, the
//!    demo pages) is the API router's;
//! 4. a plain single-record GET or PUT (no query string) is answered on the
//!    fast path (`api::fast_path`), before the router and its extractors:
//!    server CPU per GET fell from ~13-15 µs to ~10 µs (a bare hello server:
//!    ~9.3 µs, BENCHMARKS.md); anything else goes to the router with the
//!    identity in its extensions.
//!
//! One layer for all of it, so the hottest calls pay for neither a second
//! middleware nor an extensions map.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};

use crate::edge::{admit, attach, AppState, Route, RouteMetrics};
use crate::firebase::{self, Firebase};
use crate::{api, cluster::Cluster, node::Node};

/// What the front and the transport hand requests to: each protocol's state.
#[derive(Clone)]
pub struct Protocols {
    /// The native API's (and the edge's) state.
    pub api: AppState,
    pub firebase: Firebase,
    /// Origins whose pages may call either protocol (`cors_origins`; `*`:
    /// any; empty: no cross-origin access).
    pub cors_origins: Vec<String>,
}

impl Protocols {
    /// Both protocols on `app`, Firebase as `firebase` says, no CORS.
    pub fn new(app: AppState, firebase: firebase::FirebaseConfig) -> Protocols {
        Protocols { firebase: Firebase::new(app.clone(), firebase), api: app, cors_origins: Vec::new() }
    }
}

/// How long a browser may keep a preflight's answer.
const CORS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);
/// Response headers a page on another origin may read: the positions,
/// versions and errors the protocols put in headers (one header value:
/// what HTTP/2 answers itself sends as is; the layer takes it split).
pub(super) const CORS_EXPOSED: &str =
    "etag, location, retry-after, x-tern-error-code, x-tern-served-by, x-tern-staleness-ms, x-tern-ripcord, x-tern-not-held, x-firebase-etag";

/// CORS for `origins` (validated by `Settings::cors_origins`), or none.
/// It wraps the front, so a preflight (which carries no credentials) is
/// answered before authentication; every other request is admitted as
/// usual and its answer, refusals included, carries the CORS headers.
fn cors_layer(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow_origin = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| axum::http::HeaderValue::from_str(o).ok()))
    };
    let methods = [Method::GET, Method::HEAD, Method::PUT, Method::POST, Method::PATCH, Method::DELETE, Method::OPTIONS];
    Some(
        CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods(methods)
            .allow_headers(AllowHeaders::mirror_request())
            .expose_headers(CORS_EXPOSED.split(", ").map(axum::http::HeaderName::from_static).collect::<Vec<_>>())
            .max_age(CORS_MAX_AGE),
    )
}

/// Every Firebase request (`/{path}.json`), one histogram per method.
const FIREBASE_ROUTES: [&str; 6] =
    ["GET /{path}.json", "PUT /{path}.json", "PATCH /{path}.json", "POST /{path}.json", "DELETE /{path}.json", "OTHER /{path}.json"];

/// The histogram of a Firebase request's method (`FIREBASE_ROUTES`).
fn firebase_route_of(method: &Method) -> usize {
    match *method {
        Method::GET => 0,
        Method::PUT => 1,
        Method::PATCH => 2,
        Method::POST => 3,
        Method::DELETE => 4,
        _ => 5,
    }
}

/// Shared by every request (the service clones one `Arc` per request).
struct Front {
    protocols: Protocols,
    /// The API's router: what the front does not answer itself.
    router: axum::Router,
    get_metrics: Arc<RouteMetrics>,
    put_metrics: Arc<RouteMetrics>,
    firebase_metrics: [Arc<RouteMetrics>; 6],
}

/// Every route either protocol serves, with who may call it: the native
/// API's table and Firebase's paths (`tests/it/auth.rs` walks them all with
/// every kind of bad credential).
pub fn routes() -> Vec<Route> {
    let mut routes = api::routes();
    routes.extend(firebase::routes());
    routes
}

/// Every message type of the long-lived protocols, as (endpoint, type):
/// `/v1/ws`'s client messages and the realtime protocol's actions
/// (`/.ws`). `tests/it/isolation.rs` walks each with every kind of
/// principal, as it walks `routes`.
pub fn messages() -> Vec<(&'static str, &'static str)> {
    let ws = api::WS_MESSAGE_TYPES.iter().map(|t| ("/v1/ws", *t));
    let realtime = firebase::realtime::ACTIONS.iter().map(|a| (firebase::realtime::PATH, *a));
    ws.chain(realtime).collect()
}

/// The `Access-Control-Allow-Origin` the answer to a request with
/// `headers` carries under `origins`, for what HTTP/2 connections answer
/// themselves (their watch streams, outside the service and its layer).
pub(super) fn cors_allow_origin(origins: &[String], headers: &axum::http::HeaderMap) -> Option<axum::http::HeaderValue> {
    let origin = headers.get(axum::http::header::ORIGIN)?;
    if origins.iter().any(|o| o == "*") {
        return Some(axum::http::HeaderValue::from_static("*"));
    }
    origins.iter().any(|o| o.as_bytes() == origin.as_bytes()).then(|| origin.clone())
}

/// `response` with the CORS headers `allow_origin` (`cors_allow_origin`) calls for.
pub(super) fn with_cors(mut response: Response, allow_origin: Option<axum::http::HeaderValue>) -> Response {
    if let Some(origin) = allow_origin {
        insert_cors(response.headers_mut(), origin);
    }
    response
}

/// The CORS headers of an answer HTTP/2 gives itself, for a page of `origin`.
pub(super) fn insert_cors(headers: &mut axum::http::HeaderMap, origin: axum::http::HeaderValue) {
    headers.insert(axum::http::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.append(axum::http::header::VARY, axum::http::HeaderValue::from_static("origin"));
    headers.insert(axum::http::header::ACCESS_CONTROL_EXPOSE_HEADERS, axum::http::HeaderValue::from_static(CORS_EXPOSED));
}

/// The service to serve: the front (see the module doc) before the API's router.
pub fn service(
    protocols: Protocols,
) -> impl tower::Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send> + Clone + Send + 'static {
    let router = api::router(protocols.api.clone());
    let cors = cors_layer(&protocols.cors_origins);
    let front = FrontDoor(Arc::new(Front {
        protocols,
        router,
        get_metrics: RouteMetrics::new(api::GET_RECORD_ROUTE),
        put_metrics: RouteMetrics::new(api::PUT_RECORD_ROUTE),
        firebase_metrics: FIREBASE_ROUTES.map(RouteMetrics::new),
    }));
    tower::Layer::layer(&tower::util::option_layer(cors), front)
}

/// The front as a service: `front_door` for every request. Written out
/// rather than `axum::middleware::from_fn`, which per request clones the
/// router twice and boxes it as `Next` besides boxing the future; here a
/// request costs one `Arc` clone and its door's boxed future
/// (`front_door`), and the router is cloned only for what the front hands it.
#[derive(Clone)]
struct FrontDoor(Arc<Front>);

impl tower::Service<Request> for FrontDoor {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = BoxedAnswer;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        // The router is always ready (axum's `Router::poll_ready`), and the front holds nothing that fills.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        front_door(self.0.clone(), request)
    }
}

/// The router's door: what the front does not answer itself.
fn router_door(front: Arc<Front>, request: Request) -> BoxedAnswer {
    Box::pin(async move { Ok(to_router(&front, request).await) })
}

/// What the front does not answer itself: the API's router.
async fn to_router(front: &Front, request: Request) -> Response {
    let Ok(response) = tower::ServiceExt::oneshot(front.router.clone(), request).await;
    response
}

/// The service of a node without authentication, speaking Firebase with
/// its defaults (in-process tests).
pub fn app(
    node: Arc<Node>,
    cluster: Arc<Cluster>,
) -> impl tower::Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send> + Clone + Send + 'static {
    app_with(node, cluster, firebase::FirebaseConfig::default())
}

/// As `app`, with Firebase's settings (an owner token, the emulator's conventions).
pub fn app_with(
    node: Arc<Node>,
    cluster: Arc<Cluster>,
    firebase: firebase::FirebaseConfig,
) -> impl tower::Service<Request, Response = Response, Error = std::convert::Infallible, Future: Send> + Clone + Send + 'static {
    service(Protocols::new(AppState::new(node, cluster), firebase))
}

/// Which door a request goes through: decided before any future is made
/// (the path, then who is asking: `admit` does not wait), so each door's
/// future is boxed at its own size. One future for all of them was as large
/// as the largest (Firebase's, the router's, a forwarded read's) and was
/// moved about whole for every plain GET.
fn front_door(front: Arc<Front>, mut request: Request) -> BoxedAnswer {
    let path = request.uri().path();
    if path == firebase::realtime::PATH {
        return Box::pin(async move { Ok(firebase::realtime::upgrade(front.protocols.firebase.clone(), request).await) });
    }
    let is_firebase = firebase::is_firebase_path(path);
    let identity = match admit(&front.protocols.api, &request) {
        Ok(Some(identity)) => identity,
        // Public: no identity needed.
        Ok(None) => return router_door(front, request),
        Err(refused) if is_firebase => return answered(firebase::refusal(refused)),
        Err(refused) => return answered(refused.into_response()),
    };
    if is_firebase {
        attach(&mut request, identity);
        return Box::pin(firebase_door(front, request));
    }
    let plain = request.uri().query().is_none();
    match *request.method() {
        Method::GET | Method::PUT if plain => Box::pin(fast_door(front, identity, request)),
        _ => {
            attach(&mut request, identity);
            router_door(front, request)
        }
    }
}

/// What the front's service answers with.
type BoxedAnswer = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

/// An answer already made (a refusal).
fn answered(response: Response) -> BoxedAnswer {
    Box::pin(std::future::ready(Ok(response)))
}

/// A Firebase request (`/{path}.json`), timed per method.
async fn firebase_door(front: Arc<Front>, request: Request) -> Result<Response, std::convert::Infallible> {
    let started = Instant::now();
    let metrics = &front.firebase_metrics[firebase_route_of(request.method())];
    let response = firebase::handle(front.protocols.firebase.clone(), request).await;
    metrics.observe(response.status(), started);
    Ok(response)
}

/// A plain GET or PUT (no query string): the fast path, else the router.
async fn fast_door(front: Arc<Front>, identity: crate::auth::Identity, request: Request) -> Result<Response, std::convert::Infallible> {
    let metrics = if request.method() == Method::GET { &front.get_metrics } else { &front.put_metrics };
    let started = Instant::now();
    match api::fast_path(&front.protocols.api, &identity, request).await {
        Ok(response) => {
            metrics.observe(response.status(), started);
            Ok(response)
        }
        Err(mut request) => {
            attach(&mut request, identity);
            Ok(to_router(&front, request).await)
        }
    }
}
