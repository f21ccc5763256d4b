//! The native v1 API: the route table (`routes.rs`) and its handlers, one
//! concern per file, plus the operations endpoints and the demo pages.
//!
//! Handlers are thin: parse and validate the request (every limit, with a
//! precise 4xx), call the node's write or read path, render the answer.
//! What they share with Firebase's handlers (state, access, errors,
//! forwarding, the SSE encoder) is the edge's (`edge/`); the transport
//! that hands them requests is `http/`, above this room, which the
//! handlers never import; and nothing here knows Firebase. The API holds
//! no background loop and no cache of its own.
//!
//! A request: `routes.rs` (or the front's fast path, `records::fast_path`)
//! → a handler → `node::write` / `node::read` → a rendered answer
//! (`render.rs`), or `edge::to_holder` for a partition held elsewhere.

mod admin;
mod batch;
mod body;
mod cluster;
/// The web console.
mod console;
mod demo;
/// A record's last versions.
mod history;
pub(crate) mod keys;
mod list;
/// Listing a whole namespace across partitions.
mod list_namespace;
mod multi_get;
mod namespaces;
mod openapi;
mod ops;
mod outbox;
mod params;
mod procedures;
mod records;
mod render;
mod routes;
mod sse;
mod tokens;
mod write;
mod write_status;
mod ws;

pub(crate) use self::records::fast_path;
pub(crate) use self::routes::{router, routes, GET_RECORD_ROUTE, PUT_RECORD_ROUTE};
pub(crate) use self::sse::{open_sse, TernEvents};
pub(crate) use self::ws::MESSAGE_TYPES as WS_MESSAGE_TYPES;
