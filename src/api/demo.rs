//! The live demo page, `GET /demo`: a table of a namespace's records kept
//! live by the TypeScript client's `watch` (served from `/demo/client/`,
//! the client's compiled `dist/`, embedded in the binary).

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("../../web/demo/index.html");
/// The Firebase demo: a shared list with presence on the official SDK
/// (`GET /demo/firebase`), and the SDK's two browser modules it loads
/// (`demo/firebase-sdk/README.md`: unchanged copies, checked by a test).
const FIREBASE_PAGE: &str = include_str!("../../web/demo/firebase.html");
const FIREBASE_SDK_FILES: [(&str, &str); 2] = [
    ("firebase-app.js", include_str!("../../web/demo/firebase-sdk/firebase-app.js")),
    ("firebase-database.js", include_str!("../../web/demo/firebase-sdk/firebase-database.js")),
];

/// The compiled client, file by file (`clients/typescript/dist`, kept
/// current by the client's build; CI checks it matches its sources).
const CLIENT_FILES: [(&str, &str); 6] = [
    ("index.js", include_str!("../../clients/typescript/dist/index.js")),
    ("client.js", include_str!("../../clients/typescript/dist/client.js")),
    ("errors.js", include_str!("../../clients/typescript/dist/errors.js")),
    ("sse.js", include_str!("../../clients/typescript/dist/sse.js")),
    ("types.js", include_str!("../../clients/typescript/dist/types.js")),
    ("watch.js", include_str!("../../clients/typescript/dist/watch.js")),
];

pub(super) async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response()
}

pub(super) async fn firebase_page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], FIREBASE_PAGE).into_response()
}

pub(super) async fn firebase_sdk_file(Path(file): Path<String>) -> Response {
    match FIREBASE_SDK_FILES.iter().find(|(name, _)| *name == file) {
        Some((_, text)) => ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], *text).into_response(),
        None => crate::edge::ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no Firebase SDK file {file:?}")).into_response(),
    }
}

pub(super) async fn client_file(Path(file): Path<String>) -> Response {
    match CLIENT_FILES.iter().find(|(name, _)| *name == file) {
        Some((_, text)) => ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], *text).into_response(),
        None => crate::edge::ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no demo file {file:?}")).into_response(),
    }
}
