//! What the transport knows about the connection a request came on: its
//! id (watches and realtime sessions are per connection), the client's
//! address (the failed-authentication limiter's), and its place among the
//! open connections (`slot.rs`; none on HTTP/2, whose streams the
//! connection's own task serves). Left in each request's extensions as one
//! value: one insert per request instead of one per fact.

use std::net::IpAddr;

use axum::http::Extensions;

use super::access::Peer;
use super::slot::ConnectionSlot;
use crate::watch::ConnectionId;

#[derive(Debug, Clone)]
pub struct Transport {
    pub connection: ConnectionId,
    pub peer: Peer,
    pub slot: Option<ConnectionSlot>,
}

impl Transport {
    /// What the transport left on a request, if it passed one (in-process tests' do not).
    pub fn of(extensions: &Extensions) -> Option<&Transport> {
        extensions.get::<Transport>()
    }
}

/// The client's address of a request, if the transport said it.
pub fn peer_of(extensions: &Extensions) -> Option<IpAddr> {
    Transport::of(extensions).map(|t| t.peer.0)
}

/// The connection a request came on (0: not said, as in in-process tests).
pub fn connection_of(extensions: &Extensions) -> ConnectionId {
    Transport::of(extensions).map_or(ConnectionId(0), |t| t.connection)
}
