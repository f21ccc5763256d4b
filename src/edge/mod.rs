//! What both protocols at the edge share — the native API (`api/`) and
//! Firebase's (`firebase/`) — and nothing either owns alone:
//!
//! - `state.rs`: `AppState`, what every handler is given (the node, the
//!   cluster view, who may ask what);
//! - `access.rs`: who is asking (`admit`, `identify`) and whether they may
//!   (`require`), with the 401, 403 and 429 answers;
//! - `error.rs`: `ApiError`, the `{"error": {"code", "message"}}` answer,
//!   and how the node's errors become one;
//! - `forward.rs`: a request for a partition this node does not hold, sent
//!   on to a holder and its answer relayed (one hop);
//! - `route.rs`: a route's description (`Route`, `RouteAccess`: who may
//!   call it) and its latency metrics;
//! - `write_id.rs`: a request's `Idempotency-Key`, checked and scoped to
//!   the caller;
//! - `slot.rs`: a connection's place among the node's open connections,
//!   kept by a protocol that takes the socket over (WebSocket upgrades);
//! - `sse.rs`: a watch stream's encoder (`Encoder`) and the body that runs
//!   a session over HTTP/1.1, for Tern's events and Firebase's alike.
//!
//! The edge sits below both protocol rooms and the transport (`http/`):
//! it imports none of them, and neither protocol imports the other.

mod access;
mod error;
mod forward;
mod route;
mod slot;
mod sse;
mod state;
mod transport;
mod write_id;

pub use self::access::{
    admit, attach, caller_of, challenge, identify, is_public, require, require_all_of, require_anywhere, require_everywhere, unauthenticated, Access,
    Caller, Peer,
};
pub use self::error::ApiError;
pub use self::forward::{no_holder, not_held, send, to_holder, Incoming, ERROR_CODE_HEADER, SERVED_BY, SERVING_HEADER, STALENESS_HEADER};
pub use self::route::{timed, Route, RouteAccess, RouteMetrics};
pub use self::slot::ConnectionSlot;
pub use self::sse::{body, Encoder, SessionFuture, SSE_HEADERS};
pub use self::state::AppState;
pub use self::transport::{connection_of, peer_of, Transport};
pub use self::write_id::scoped_write_id;
