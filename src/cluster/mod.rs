//! Cluster membership and routing: who the other nodes are, which partitions
//! each serves at which applied offset, and which one a request for a
//! partition this node does not hold should go to.
//!
//! Membership is gossiped with `chitchat` (Scuttlebutt reconciliation over
//! UDP, phi-accrual failure detection; `gossip.rs`). Each node publishes:
//!
//! | key | value |
//! |---|---|
//! | `region`, `group` | its region and replica group |
//! | `api` | its HTTP address |
//! | `api.<region>` | the HTTP address nodes of that region reach it at (`advertise_api_for`) |
//! | `rtt` | `peer:ms,...`: the round trips it measured to its peers (`-`: unreachable) |
//! | `held.<namespace>` | `partition:applied_next,...` of the partitions it serves (caught up, not refused) |
//! | `refused.<namespace>` | `partition,...` of the partitions it refuses (a gap in the log; see its `/readyz`) |
//!
//! Routing (`holders`) prefers a holder in this node's region, then the
//! nearest by measured round trip, then the one with the least lag (the
//! highest applied offset); a peer whose last probe failed comes after every
//! reachable one. The round trips are measured here (`probe.rs`, over the
//! same connections forwarding uses: `peer_client.rs`) and recorded
//! (`record_rtt`). Forwarding a request itself is the edge's job
//! (`edge::forward`), over this node's peer client.
//! Without `--gossip` the cluster is this node alone.

mod gossip;
pub mod peer_client;
pub mod probe;
pub mod sealed;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::partition::PartitionStatus;
use crate::node::Node;

pub use gossip::GossipConfig;
pub use peer_client::PeerClient;

/// One node as this node sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub id: String,
    pub region: String,
    pub group: String,
    /// `HOST:PORT` of its HTTP API, as this node reaches it (its address
    /// for this node's region when it advertises one).
    pub api: String,
    /// The round trips it measured to its peers, by peer id (gossiped;
    /// this node's own for itself).
    pub rtt: BTreeMap<String, Rtt>,
    /// `live` (gossip hears it), or `dead` (gossip lost it; kept for display).
    pub state: &'static str,
    pub is_self: bool,
    /// namespace -> partition -> applied_next, for partitions it serves.
    pub held: BTreeMap<String, BTreeMap<u32, u64>>,
    /// namespace -> partition -> why (the reason is known for this node only).
    pub refused: BTreeMap<String, BTreeMap<u32, Option<String>>>,
    /// namespace -> partition -> applied_next, for revoked partitions it still
    /// serves until their new owner does: a fallback for routing (so a
    /// hand-off never leaves a partition without an advertised server),
    /// never counted as "served elsewhere" by another member letting go.
    pub handing_off: BTreeMap<String, BTreeMap<u32, u64>>,
}

impl Member {
    pub fn holds(&self, namespace: &str, partition: u32) -> Option<u64> {
        self.held.get(namespace)?.get(&partition).copied()
    }

    /// Serves a revoked partition until its new owner does.
    pub fn hands_off(&self, namespace: &str, partition: u32) -> Option<u64> {
        self.handing_off.get(namespace)?.get(&partition).copied()
    }
}

/// This node's identity in the cluster.
#[derive(Debug, Clone)]
pub struct SelfInfo {
    pub id: String,
    pub region: String,
    pub group: String,
    pub api: String,
    /// region -> the address nodes of that region reach this one at.
    pub api_for: BTreeMap<String, String>,
}

/// A measured round trip to a peer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rtt {
    /// Smoothed (an exponentially weighted moving average of the probes).
    Measured(Duration),
    /// The last probe failed (no answer within its timeout).
    Unreachable,
}

impl Rtt {
    /// Milliseconds, or None when unreachable.
    pub fn ms(&self) -> Option<f64> {
        match self {
            Rtt::Measured(d) => Some(d.as_secs_f64() * 1000.0),
            Rtt::Unreachable => None,
        }
    }
}

/// Weight of a new probe in the smoothed round trip: a quarter, so one slow
/// probe (a pause, a new connection) moves it little and a lasting change shows within a few seconds.
const RTT_SMOOTHING_WEIGHT: f64 = 0.25;

pub struct Cluster {
    me: SelfInfo,
    node: Arc<Node>,
    /// Every other node gossip knows, refreshed by the gossip task.
    /// Shared members: routing a request clones pointers, not partition maps.
    peers: Arc<RwLock<Vec<Arc<Member>>>>,
    /// Round trips this node measured, by peer id (written by the prober, read by routing and gossip).
    rtts: Arc<RwLock<BTreeMap<String, Rtt>>>,
    gossip: Option<gossip::Gossip>,
    /// How this node reaches the others (`peer_client.rs`).
    client: PeerClient,
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

    fn fixed(me: SelfInfo, node: Arc<Node>, peers: Vec<Member>, client: PeerClient) -> Arc<Cluster> {
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
    fn self_member(&self) -> Member {
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

/// Most holders asked for one record (`read_elsewhere`), best first.
const RECORD_HOLDERS_TRIED_MAX: usize = 3;

/// Reads a record at the best holders of its partition (at most
/// `RECORD_HOLDERS_TRIED_MAX`), as this node: what the node calls for a
/// partition it does not hold (`Node::read_elsewhere`).
fn read_elsewhere(
    me: &SelfInfo,
    peers: Arc<RwLock<Vec<Arc<Member>>>>,
    rtts: Arc<RwLock<BTreeMap<String, Rtt>>>,
    client: PeerClient,
) -> crate::node::ReadElsewhere {
    let (id, region) = (me.id.clone(), me.region.clone());
    Arc::new(move |at: crate::node::RecordAt| {
        let holders = rank_holders(&peers.read(), &rtts.read(), &region, &at.ns, at.partition);
        let (client, id) = (client.clone(), id.clone());
        Box::pin(async move {
            if holders.is_empty() {
                return Err(format!("no live node that serves partition {} of namespace {:?} is known", at.partition, at.ns));
            }
            let mut failures = Vec::new();
            for holder in holders.iter().take(RECORD_HOLDERS_TRIED_MAX) {
                match client.read_record(holder, &id, &at).await {
                    Ok(value) => return Ok(value),
                    Err(e) => failures.push(format!("{} ({}): {e}", holder.id, holder.api)),
                }
            }
            Err(failures.join("; "))
        })
    })
}

/// The partitions this node refuses (it needs offsets the log no longer has, or
/// its store is ahead of the log), with the reason.
pub fn refused_partitions(node: &Node) -> BTreeMap<String, BTreeMap<u32, String>> {
    let mut refused = BTreeMap::new();
    for namespace in node.namespaces() {
        let partitions: BTreeMap<u32, String> = namespace
            .handles
            .iter()
            .filter_map(|h| match h.status() {
                PartitionStatus::Refused(reason) => Some((h.partition, reason)),
                _ => None,
            })
            .collect();
        if !partitions.is_empty() {
            refused.insert(namespace.name.to_string(), partitions);
        }
    }
    refused
}

/// Whether a live peer of replica group `group` serves a partition (gossip's view).
fn served_in_group(peers: Arc<RwLock<Vec<Arc<Member>>>>, group: String) -> crate::node::ServedElsewhere {
    Arc::new(move |tp| {
        peers.read().iter().any(|m| m.state == "live" && m.group == group && m.holds(&tp.topic, tp.partition).is_some())
    })
}

/// Whether gossip knows nodes of other regions and hears none of them.
/// `Cluster::holders`, on a given view: the live `peers` serving
/// `partition` of `namespace`, best first for a caller in `region` that
/// measured `rtts`.
fn rank_holders(peers: &[Arc<Member>], rtts: &BTreeMap<String, Rtt>, region: &str, namespace: &str, partition: u32) -> Vec<Arc<Member>> {
    let mut holders: Vec<((bool, bool, u8, u64, std::cmp::Reverse<u64>), Arc<Member>)> = peers
        .iter()
        .filter(|m| m.state == "live")
        .filter_map(|m| {
            let owned = m.holds(namespace, partition).map(|offset| (false, offset));
            let (handing_off, offset) = owned.or_else(|| m.hands_off(namespace, partition).map(|offset| (true, offset)))?;
            let other_region = m.region != region;
            let (reach, rtt_ms) = match rtts.get(&m.id) {
                Some(Rtt::Measured(rtt)) => (0, if other_region { rtt.as_millis() as u64 } else { 0 }),
                None => (1, if other_region { u64::MAX } else { 0 }),
                Some(Rtt::Unreachable) => (2, u64::MAX),
            };
            Some(((handing_off, other_region, reach, rtt_ms, std::cmp::Reverse(offset)), m.clone()))
        })
        .collect();
    holders.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
    holders.into_iter().map(|(_, m)| m).collect()
}

fn isolated(peers: Arc<RwLock<Vec<Arc<Member>>>>, rtts: Arc<RwLock<BTreeMap<String, Rtt>>>, region: String) -> crate::node::Isolated {
    Arc::new(move || {
        let (peers, rtts) = (peers.read(), rtts.read());
        let mut others = peers.iter().filter(|m| m.region != region).peekable();
        others.peek().is_some() && others.all(|m| !reaches(m, &rtts))
    })
}

/// Whether `member` looks reachable: gossip says live and its last probe
/// (if any) was answered. The probe notices a cut within its interval plus
/// timeout (`api::probe`: 3 s), before gossip's failure detection and
/// before Kafka's controller moves a cut-off broker's leaderships
/// (`broker.session.timeout.ms`): by then the node no longer trusts the
/// log's end that its own region's broker reports.
fn reaches(member: &Member, rtts: &BTreeMap<String, Rtt>) -> bool {
    member.state == "live" && !matches!(rtts.get(&member.id), Some(Rtt::Unreachable))
}

/// How far live members apply a partition (the highest `applied_next`
/// any advertises): the journal's sequencer releases entries applied there.
fn applied_elsewhere(peers: Arc<RwLock<Vec<Arc<Member>>>>) -> crate::node::AppliedElsewhere {
    Arc::new(move |ns, partition| {
        peers.read().iter().filter(|m| m.state == "live").filter_map(|m| m.holds(ns, partition).or(m.hands_off(ns, partition))).max()
    })
}

/// Revoked partitions this node still serves (caught up) until another
/// member of its group does: advertised apart from `held_partitions`.
pub fn handing_off_partitions(node: &Node) -> BTreeMap<String, BTreeMap<u32, u64>> {
    serving_partitions(node, true)
}

/// The partitions this node serves right now and owns: caught up, not
/// refused, and not revoked (a revoked partition being handed off is
/// advertised apart, `handing_off_partitions`: other members route to it but
/// never count on it to let go of theirs).
pub fn held_partitions(node: &Node) -> BTreeMap<String, BTreeMap<u32, u64>> {
    serving_partitions(node, false)
}

/// namespace -> partition -> applied_next of the partitions this node
/// serves caught up, either those it is handing off or those it owns.
fn serving_partitions(node: &Node, handing_off: bool) -> BTreeMap<String, BTreeMap<u32, u64>> {
    let mut serving = BTreeMap::new();
    for namespace in node.namespaces() {
        let partitions: BTreeMap<u32, u64> = namespace
            .handles
            .iter()
            .filter(|h| h.status() == PartitionStatus::Serving && node.is_handing_off(&h.tp) == handing_off)
            .map(|h| (h.partition, h.applied_next()))
            .collect();
        if !partitions.is_empty() {
            serving.insert(namespace.name.to_string(), partitions);
        }
    }
    serving
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, region: &str, state: &'static str) -> Arc<Member> {
        Arc::new(Member {
            id: id.into(),
            region: region.into(),
            group: region.into(),
            api: String::new(),
            rtt: BTreeMap::new(),
            state,
            is_self: false,
            held: BTreeMap::new(),
            handing_off: BTreeMap::new(),
            refused: BTreeMap::new(),
        })
    }

    fn holding(id: &str, region: &str, applied_next: u64) -> Arc<Member> {
        let mut m = Member::clone(&member(id, region, "live"));
        m.held.insert("ns".into(), [(0, applied_next)].into_iter().collect());
        Arc::new(m)
    }

    fn ranked(peers: &[Arc<Member>], rtts: &[(&str, Rtt)]) -> Vec<String> {
        let rtts = rtts.iter().map(|(id, rtt)| (id.to_string(), *rtt)).collect();
        rank_holders(peers, &rtts, "here", "ns", 0).iter().map(|m| m.id.clone()).collect()
    }

    #[test]
    fn holders_same_region_first_then_the_nearest_by_round_trip() {
        let ms = |n| Rtt::Measured(Duration::from_millis(n));
        let far = holding("far-1", "far", 10);
        let near = holding("near-1", "near", 5);
        let here = holding("here-2", "here", 1);
        // Another region's holders, by measured round trip (not by lag, not by name).
        assert_eq!(ranked(&[far.clone(), near.clone()], &[("far-1", ms(160)), ("near-1", ms(20))]), ["near-1", "far-1"]);
        assert_eq!(ranked(&[far.clone(), near.clone()], &[("far-1", ms(20)), ("near-1", ms(160))]), ["far-1", "near-1"]);
        // Same region first, even unprobed and behind.
        assert_eq!(ranked(&[far.clone(), near.clone(), here.clone()], &[("far-1", ms(1)), ("near-1", ms(2))]), ["here-2", "far-1", "near-1"]);
        // Probed before unprobed; an unreachable one last.
        assert_eq!(ranked(&[far.clone(), near.clone()], &[("near-1", ms(200))]), ["near-1", "far-1"]);
        assert_eq!(ranked(&[far.clone(), near.clone()], &[("far-1", Rtt::Unreachable)]), ["near-1", "far-1"]);
        // Inside one region round trips are noise: the least lag wins.
        let here_ahead = holding("here-3", "here", 9);
        assert_eq!(ranked(&[here.clone(), here_ahead], &[("here-2", ms(1)), ("here-3", ms(5))]), ["here-3", "here-2"]);
        // Not live, or not holding: not a holder.
        let gone = Arc::new(Member { state: "dead", ..Member::clone(&near) });
        assert_eq!(ranked(&[gone, member("x", "here", "live")], &[]), Vec::<String>::new());
    }

    #[test]
    fn isolated_when_no_node_of_another_region_is_reachable() {
        let peers = Arc::new(RwLock::new(vec![member("here-2", "here", "live"), member("far-1", "far", "live"), member("far-2", "far", "live")]));
        let rtts: Arc<RwLock<BTreeMap<String, Rtt>>> = Arc::default();
        let isolated = isolated(peers.clone(), rtts.clone(), "here".into());
        assert!(!isolated(), "every node live, none probed yet");
        rtts.write().insert("far-1".into(), Rtt::Unreachable);
        assert!(!isolated(), "far-2 still reachable");
        rtts.write().insert("far-2".into(), Rtt::Unreachable);
        assert!(isolated(), "both probes failed, although gossip still says live");
        rtts.write().insert("far-2".into(), Rtt::Measured(Duration::from_millis(60)));
        assert!(!isolated(), "far-2 answered again");
        *peers.write() = vec![member("here-2", "here", "live"), member("far-1", "far", "dead"), member("far-2", "far", "live")];
        rtts.write().clear();
        assert!(!isolated());
        *peers.write() = vec![member("here-2", "here", "live"), member("far-1", "far", "dead"), member("far-2", "far", "dead")];
        assert!(isolated(), "gossip says every other-region node is gone");
        *peers.write() = vec![member("here-2", "here", "dead")];
        assert!(!isolated(), "a one-region cluster is never cut off from other regions");
    }
}
