//! What the cluster tells the node through its hooks (`Node::set_*`), and
//! what it reads of the node for gossip: the partitions this node serves,
//! refuses or hands off.

use super::member::{Member, Rtt, SelfInfo};
use super::routing::rank_holders;
use super::PeerClient;
use crate::node::Node;
use crate::partition::PartitionStatus;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most holders asked for one record (`read_elsewhere`, the API keys'
/// refresh), best first.
pub const RECORD_HOLDERS_TRIED_MAX: usize = 3;

/// Reads a record at the best holders of its partition (at most
/// `RECORD_HOLDERS_TRIED_MAX`), as this node: what the node calls for a
/// partition it does not hold (`Node::read_elsewhere`).
pub(super) fn read_elsewhere(
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
pub(super) fn served_in_group(peers: Arc<RwLock<Vec<Arc<Member>>>>, group: String) -> crate::node::ServedElsewhere {
    Arc::new(move |tp| peers.read().iter().any(|m| m.state == "live" && m.group == group && m.holds(&tp.topic, tp.partition).is_some()))
}

/// How far live members apply a partition (the highest `applied_next`
/// any advertises): the journal's sequencer releases entries applied there.
pub(super) fn applied_elsewhere(peers: Arc<RwLock<Vec<Arc<Member>>>>) -> crate::node::AppliedElsewhere {
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
pub(super) fn serving_partitions(node: &Node, handing_off: bool) -> BTreeMap<String, BTreeMap<u32, u64>> {
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
