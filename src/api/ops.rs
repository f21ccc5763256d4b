//! Operations endpoints: `/healthz` (alive), `/readyz` (caught up, nothing
//! refused), `/metrics` (Prometheus text).

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::auth::Verb;
use crate::edge::{caller_of, require_everywhere, ApiError, AppState};

pub(super) async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    let (ready, problems) = state.node.readiness();
    if ready {
        // Still ready for local reads and journaled writes while the log is down (ripcord).
        if state.node.ripcord_engaged() {
            let backlog = state.node.journal.backlog().entries;
            let note = format!("log unavailable, journaling: {backlog} write(s) not yet sequenced and applied");
            return Json(json!({ "ready": true, "journaling": note })).into_response();
        }
        return Json(json!({ "ready": true })).into_response();
    }
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", format!("{} partition(s) not ready: {}", problems.len(), problems.join("; ")))
        .with("problems", problems)
        .into_response()
}

/// Prometheus text: public with `public_metrics`, else `read` on every namespace.
pub(super) async fn metrics(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    if !state.access.public_metrics {
        let (parts, _) = request.into_parts();
        if let Err(e) = caller_of(&state, &parts).and_then(|identity| require_everywhere(&identity, Verb::Read)) {
            return e.into_response();
        }
    }
    // What /readyz says, as of this scrape (alerts on a node not ready).
    crate::metrics::NODE_READY.set(i64::from(state.node.readiness().0));
    crate::metrics::RIPCORD_ENGAGED.set(i64::from(state.node.ripcord_engaged()));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], crate::metrics::render()).into_response()
}
