//! The web console, `GET /console`: namespaces, records (a key tree, a JSON
//! editor whose writes carry `if_version`, history, live updates), a
//! Firebase database's tree, procedures, the cluster and API keys, all
//! through this API with the token its user signs in with (kept in the
//! browser tab's session only). Its files (`web/console/`) are embedded in
//! the binary; `GET /` sends a browser to it. The pages themselves are
//! public: they hold no data, every call they make is authenticated.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

const PAGE: &str = include_str!("../../web/console/index.html");
/// The console's other files: (name, content type, text).
const FILES: [(&str, &str, &str); 6] = [
    ("app.js", "text/javascript; charset=utf-8", include_str!("../../web/console/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_str!("../../web/console/api.js")),
    ("records.js", "text/javascript; charset=utf-8", include_str!("../../web/console/records.js")),
    ("firebase.js", "text/javascript; charset=utf-8", include_str!("../../web/console/firebase.js")),
    ("admin.js", "text/javascript; charset=utf-8", include_str!("../../web/console/admin.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("../../web/console/style.css")),
];

/// The console runs only its own scripts, calls only this node, and is
/// never framed by another page (no clickjacking of revoke or make-key).
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

pub(super) async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
        .into_response()
}

pub(super) async fn file(Path(file): Path<String>) -> Response {
    match FILES.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, text)) => ([(header::CONTENT_TYPE, *content_type), (header::CACHE_CONTROL, "no-cache")], *text).into_response(),
        None => crate::edge::ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no console file {file:?}")).into_response(),
    }
}

/// `GET /`: a browser pointed at a node lands in the console.
pub(super) async fn root() -> Redirect {
    Redirect::to("/console")
}
