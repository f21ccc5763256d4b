//! `AppState`: what every handler of either protocol is given. Cloned per
//! request by axum: reference counts only.

use std::sync::Arc;

use super::access::Access;
use crate::cluster::Cluster;
use crate::node::Node;

#[derive(Clone)]
pub struct AppState {
    pub node: Arc<Node>,
    /// Who the other nodes are and how to reach them (forwarding).
    pub cluster: Arc<Cluster>,
    /// Who may ask what (`access.rs`).
    pub access: Arc<Access>,
}

impl AppState {
    /// Without authentication (`Access::default`).
    pub fn new(node: Arc<Node>, cluster: Arc<Cluster>) -> AppState {
        AppState { node, cluster, access: Arc::default() }
    }
}
