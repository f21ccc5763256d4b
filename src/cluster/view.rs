//! `Cluster`: the view of the cluster this node keeps — itself and every
//! peer gossip knows — and the questions asked of it: who holds a
//! partition (best first), how far a peer is, how to reach one.

use super::gossip;
use super::member::{Member, Rtt, SelfInfo};
use super::node_hooks::{applied_elsewhere, handing_off_partitions, held_partitions, read_elsewhere, refused_partitions, served_in_group};
use super::routing::{isolated, rank_holders};
use super::{GossipConfig, PeerClient};
use crate::node::Node;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Weight of a new probe in the smoothed round trip: a quarter, so one slow
/// probe (a pause, a new connection) moves it little and a lasting change shows within a few seconds.
pub(super) const RTT_SMOOTHING_WEIGHT: f64 = 0.25;

pub struct Cluster {
    pub(super) me: SelfInfo,
    pub(super) node: Arc<Node>,
    /// Every other node gossip knows, refreshed by the gossip task.
    /// Shared members: routing a request clones pointers, not partition maps.
    pub(super) peers: Arc<RwLock<Vec<Arc<Member>>>>,
    /// Round trips this node measured, by peer id (written by the prober, read by routing and gossip).
    pub(super) rtts: Arc<RwLock<BTreeMap<String, Rtt>>>,
    pub(super) gossip: Option<gossip::Gossip>,
    /// How this node reaches the others (`peer_client.rs`).
    pub(super) client: PeerClient,
}

impl Cluster {
    /// This node alone: no gossip, nothing to route to.
    pub fn alone(me: SelfInfo, node: Arc<Node>, client: PeerClient) -> Arc<Cluster> {
        Cluster::fixed(me, node, Vec::new(), client)
    }

    /// A fixed view of the other nodes, without gossip: for tests and tools
    /// that need a given cluster map.
    pub fn with_peers(me: SelfInfo, node: Arc<Node>, peers: Vec<Member>) -> Arc<Cluster> {
        Cluster::fixed(me, node, peers, PeerClient::plain())
    }

    pub(super) fn fixed(me: SelfInfo, node: Arc<Node>, peers: Vec<Member>, client: PeerClient) -> Arc<Cluster> {
        let peers = Arc::new(RwLock::new(peers.into_iter().map(Arc::new).collect()));
        let rtts: Arc<RwLock<BTreeMap<String, Rtt>>> = Arc::default();
        node.set_read_elsewhere(read_elsewhere(&me, peers.clone(), rtts.clone(), client.clone()));
        Arc::new(Cluster { me, node, peers, rtts, gossip: None, client })
    }

    /// Joins the cluster through `config.seeds` and keeps gossiping until `shutdown`.
    pub async fn join(me: SelfInfo, node: Arc<Node>, config: GossipConfig, client: PeerClient) -> anyhow::Result<Arc<Cluster>> {
        let peers = Arc::new(RwLock::new(Vec::new()));
        let rtts: Arc<RwLock<BTreeMap<String, Rtt>>> = Arc::default();
        let gossip = gossip::Gossip::start(&me, node.clone(), peers.clone(), rtts.clone(), config).await?;
        node.set_served_elsewhere(served_in_group(peers.clone(), me.group.clone()));
        node.set_applied_elsewhere(applied_elsewhere(peers.clone()));
        node.set_isolated(isolated(peers.clone(), rtts.clone(), me.region.clone()));
        node.set_read_elsewhere(read_elsewhere(&me, peers.clone(), rtts.clone(), client.clone()));
        Ok(Arc::new(Cluster { me, node, peers, rtts, gossip: Some(gossip), client }))
    }

    pub fn me(&self) -> &SelfInfo {
        &self.me
    }

    /// How this node reaches the others.
    pub fn client(&self) -> &PeerClient {
        &self.client
    }

    /// Every known node, this one first.
    pub fn members(&self) -> Vec<Member> {
        let mut members = vec![self.self_member()];
        members.extend(self.peers.read().iter().map(|m| Member::clone(m)));
        members
    }

    /// This node, read from its own partition handles (not from gossip).
    pub(super) fn self_member(&self) -> Member {
        Member {
            id: self.me.id.clone(),
            region: self.me.region.clone(),
            group: self.me.group.clone(),
            api: self.me.api.clone(),
            rtt: self.rtts.read().clone(),
            state: "live",
            is_self: true,
            held: held_partitions(&self.node),
            handing_off: handing_off_partitions(&self.node),
            refused: refused_partitions(&self.node)
                .into_iter()
                .map(|(ns, partitions)| (ns, partitions.into_iter().map(|(p, reason)| (p, Some(reason))).collect()))
                .collect(),
        }
    }

    /// The live peers that serve `partition` of `namespace`, best first:
    /// owners before members handing it off (the new owner may still be
    /// catching up: the old one serves meanwhile), then same region, then
    /// reachable (a peer whose last probe failed comes last), then the
    /// nearest by measured round trip (other regions only: inside one the
    /// differences are noise), then least lag. Empty when none is known.
    pub fn holders(&self, namespace: &str, partition: u32) -> Vec<Arc<Member>> {
        rank_holders(&self.peers.read(), &self.rtts.read(), &self.me.region, namespace, partition)
    }

    /// Records a probe of `peer`: its round trip, or None when it did not answer.
    pub fn record_rtt(&self, peer: &str, sample: Option<Duration>) {
        let mut rtts = self.rtts.write();
        let smoothed = match (sample, rtts.get(peer)) {
            (None, _) => Rtt::Unreachable,
            (Some(sample), Some(Rtt::Measured(before))) => {
                Rtt::Measured(before.mul_f64(1.0 - RTT_SMOOTHING_WEIGHT) + sample.mul_f64(RTT_SMOOTHING_WEIGHT))
            }
            (Some(sample), _) => Rtt::Measured(sample),
        };
        rtts.insert(peer.to_string(), smoothed);
    }

    /// This node's smoothed round trip to `peer`, if probed.
    pub fn rtt(&self, peer: &str) -> Option<Rtt> {
        self.rtts.read().get(peer).copied()
    }

    /// Forgets the round trips of nodes no longer known (bounds the table by the membership).
    pub fn retain_rtts(&self, known: &std::collections::HashSet<String>) {
        self.rtts.write().retain(|id, _| known.contains(id));
    }

    /// Leaves the cluster (peers see this node go at once, not after failure detection).
    pub async fn shutdown(&self) {
        if let Some(gossip) = &self.gossip {
            gossip.shutdown().await;
        }
    }
}
