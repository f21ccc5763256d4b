//! A connection's place among the node's open connections
//! (`http_connections_max`): the listener takes one per connection it
//! serves and leaves a copy in each request's extensions. A protocol that
//! takes the socket over (a WebSocket upgrade: hyper's connection ends there
//! and the socket lives on in a task of its own) keeps its copy for as long
//! as it serves the socket, so an upgraded socket counts as long as it is
//! open. The place is given back when the last copy goes.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

/// One open connection's place; cloned into requests, freed with the last clone.
#[derive(Debug, Clone)]
pub struct ConnectionSlot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

impl ConnectionSlot {
    pub fn new(permit: OwnedSemaphorePermit) -> ConnectionSlot {
        ConnectionSlot(Arc::new(permit))
    }
}
