//! The native API's route table: every route with who may call it and its
//! handler. The router is built from this table alone (`router`), and the
//! table is what `tests/it/auth.rs` walks (`routes`, through
//! `http::routes`), so no route is added without saying who may call it.
//! A path under `/v1/` that no route names is a 404 here, never another
//! protocol's (`http/front.rs` sends every `/v1/…` path to this router).

use axum::extract::Request;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::Router;

use super::{
    admin, batch, cluster, console, demo, history, list_namespace, multi_get, namespaces, openapi, ops, outbox, procedures, records, sse, tokens,
    write_status, ws,
};
use crate::edge::{timed, ApiError, AppState, Route, RouteAccess};
use RouteAccess::{Authenticated, Public, Scoped};

/// The route of a single record's GET and PUT: the front's fast path
/// answers the plain ones and records their latency under these names.
pub(crate) const GET_RECORD_ROUTE: &str = "GET /v1/ns/{ns}/kv/{*rest}";
pub(crate) const PUT_RECORD_ROUTE: &str = "PUT /v1/ns/{ns}/kv/{*rest}";

/// Every route of the native API (and the operations and demo pages).
pub(crate) fn routes() -> Vec<Route> {
    table().into_iter().map(|(route, _)| route).collect()
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
        r(Method::DELETE, "/v1/ns/{ns}", Scoped, delete(timed("DELETE /v1/ns/{ns}", namespaces::delete))),
        r(Method::GET, "/v1/ns/{ns}/kv", Scoped, get(timed("GET /v1/ns/{ns}/kv", list_namespace::list_namespace))),
        r(Method::GET, "/v1/ns/{ns}/kv/{*rest}", Scoped, get(timed(GET_RECORD_ROUTE, records::kv))),
        r(Method::PUT, "/v1/ns/{ns}/kv/{*rest}", Scoped, put(timed(PUT_RECORD_ROUTE, records::kv))),
        r(Method::DELETE, "/v1/ns/{ns}/kv/{*rest}", Scoped, delete(timed("DELETE /v1/ns/{ns}/kv/{*rest}", records::kv))),
        r(Method::POST, "/v1/ns/{ns}/get", Scoped, post(timed("POST /v1/ns/{ns}/get", multi_get::multi_get))),
        r(Method::POST, "/v1/ns/{ns}/batch", Scoped, post(timed("POST /v1/ns/{ns}/batch", batch::batch))),
        r(Method::GET, "/v1/ns/{ns}/history", Scoped, get(timed("GET /v1/ns/{ns}/history", history::history))),
        r(Method::GET, "/v1/ns/{ns}/watch", Scoped, get(sse::sse)),
        r(Method::GET, "/v1/ns/{ns}/procedures", Scoped, get(timed("GET /v1/ns/{ns}/procedures", procedures::list))),
        r(Method::GET, "/v1/ns/{ns}/procedures/{name}", Scoped, get(timed("GET /v1/ns/{ns}/procedures/{name}", procedures::show))),
        r(Method::PUT, "/v1/ns/{ns}/procedures/{name}", Scoped, put(timed("PUT /v1/ns/{ns}/procedures/{name}", procedures::deploy))),
        r(Method::DELETE, "/v1/ns/{ns}/procedures/{name}", Scoped, delete(timed("DELETE /v1/ns/{ns}/procedures/{name}", procedures::remove))),
        r(Method::GET, "/v1/ns/{ns}/outbox", Scoped, get(timed("GET /v1/ns/{ns}/outbox", outbox::read))),
        r(Method::DELETE, "/v1/ns/{ns}/outbox", Scoped, delete(timed("DELETE /v1/ns/{ns}/outbox", outbox::trim))),
        r(Method::GET, "/v1/ws", Authenticated, get(ws::upgrade)),
        r(Method::GET, "/v1/openapi.json", Public, get(openapi::document)),
        r(Method::GET, "/v1/writes/{id}", Authenticated, get(timed("GET /v1/writes/{id}", write_status::status))),
        r(Method::POST, "/v1/tokens", Scoped, post(timed("POST /v1/tokens", tokens::create))),
        r(Method::GET, "/v1/tokens", Authenticated, get(timed("GET /v1/tokens", tokens::list))),
        r(Method::DELETE, "/v1/tokens/{id}", Scoped, delete(timed("DELETE /v1/tokens/{id}", tokens::revoke))),
        r(Method::GET, "/v1/cluster", Scoped, get(timed("GET /v1/cluster", cluster::show))),
        r(Method::POST, "/v1/admin/snapshots", Scoped, post(timed("POST /v1/admin/snapshots", admin::create))),
        r(Method::GET, "/v1/admin/snapshots", Scoped, get(timed("GET /v1/admin/snapshots", admin::list))),
        r(Method::GET, "/", Public, get(console::root)),
        r(Method::GET, "/console", Public, get(console::page)),
        r(Method::GET, "/console/{file}", Public, get(console::file)),
        r(Method::GET, "/demo", Public, get(demo::page)),
        r(Method::GET, "/demo/client/{file}", Public, get(demo::client_file)),
        r(Method::GET, "/demo/firebase", Public, get(demo::firebase_page)),
        r(Method::GET, "/demo/firebase/sdk/{file}", Public, get(demo::firebase_sdk_file)),
        r(Method::GET, "/metrics", Scoped, get(ops::metrics)),
        r(Method::GET, "/healthz", Public, get(ops::healthz)),
        r(Method::GET, "/readyz", Public, get(ops::readyz)),
    ]
}

/// The router of `routes`, with 404 and 405 answers of the API's own.
pub(crate) fn router(state: AppState) -> Router {
    table()
        .into_iter()
        .fold(Router::new(), |router, (route, handler)| router.route(route.path, handler))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// A path no route names: 404, whatever it ends with (a `/v1/….json`
/// path is the API's, never a Firebase database's).
async fn fallback(request: Request) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no route for {}; see docs/api.md", request.uri().path())).into_response()
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", format!("{method} is not allowed on {}", uri.path())).into_response()
}
