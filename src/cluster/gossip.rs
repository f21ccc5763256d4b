//! Gossip with `chitchat`: advertise this node's keys, read everyone else's.
//!
//! Two tasks, both ending on shutdown:
//! - advertise: every `ADVERTISE_INTERVAL`, write this node's `held.<ns>` keys
//!   (only when they changed, so idle nodes send no new versions);
//! - observe: on every change of chitchat's live-node set or their keys,
//!   rebuild the peer list the router reads (one write lock per change, no
//!   lock on the request path beyond a read).

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use chitchat::transport::UdpTransport;
use chitchat::{spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, NodeState};
use parking_lot::RwLock;
use tokio::sync::watch;

use super::{handing_off_partitions, held_partitions, refused_partitions, Member, Rtt, SelfInfo};
use crate::node::Node;

#[derive(Debug, Clone)]
pub struct GossipConfig {
    /// UDP address to gossip on.
    pub listen: SocketAddr,
    /// UDP address peers send to (`listen`, unless a NAT or relay is in between).
    pub advertise: SocketAddr,
    /// Other nodes' gossip addresses (`HOST:PORT`); any live one is enough to join.
    pub seeds: Vec<String>,
    /// Nodes gossip only with nodes of the same cluster id.
    pub cluster_id: String,
    pub interval: Duration,
    /// Seals every datagram (`sealed.rs`); None: plain chitchat UDP (no authentication).
    pub key: Option<super::sealed::ClusterKey>,
}

/// How often this node's held partitions and offsets are readvertised.
const ADVERTISE_INTERVAL: Duration = Duration::from_millis(250);
/// Key prefix of the per-namespace held-partitions keys.
const HELD_PREFIX: &str = "held.";
/// Key prefix of the per-namespace refused-partitions keys.
const REFUSED_PREFIX: &str = "refused.";
/// Key prefix of the per-namespace handing-off keys (same encoding as held).
const HANDOFF_PREFIX: &str = "handoff.";
/// Key prefix of the per-region API addresses (`advertise_api_for`).
const API_PREFIX: &str = "api.";
/// Key of the round trips a node measured to its peers.
const RTT_KEY: &str = "rtt";

pub(super) struct Gossip {
    handle: tokio::sync::Mutex<Option<ChitchatHandle>>,
    stop: watch::Sender<bool>,
}

impl Gossip {
    pub(super) async fn start(
        me: &SelfInfo,
        node: Arc<Node>,
        peers: Arc<RwLock<Vec<Arc<Member>>>>,
        rtts: Arc<RwLock<BTreeMap<String, Rtt>>>,
        config: GossipConfig,
    ) -> anyhow::Result<Gossip> {
        // A restarted node is a new generation, so peers drop its old state.
        let generation = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64;
        let chitchat_config = ChitchatConfig {
            chitchat_id: ChitchatId::new(me.id.clone(), generation, config.advertise),
            cluster_id: config.cluster_id.clone(),
            gossip_interval: config.interval,
            listen_addr: config.listen,
            seed_nodes: config.seeds.clone(),
            failure_detector_config: FailureDetectorConfig {
                // With frequent gossip, a silent peer is suspected within ~1-3 s.
                initial_interval: config.interval * 4,
                dead_node_grace_period: Duration::from_secs(3600),
                ..FailureDetectorConfig::default()
            },
            marked_for_deletion_grace_period: Duration::from_secs(3600),
            catchup_callback: None,
            extra_liveness_predicate: None,
            protocol_version: chitchat::ProtocolVersion::V0,
        };
        let mut initial =
            vec![("region".to_string(), me.region.clone()), ("group".to_string(), me.group.clone()), ("api".to_string(), me.api.clone())];
        initial.extend(me.api_for.iter().map(|(region, address)| (format!("{API_PREFIX}{region}"), address.clone())));
        let sealed = config.key.clone().map(|key| super::sealed::SealedTransport { key });
        let transport: &dyn chitchat::transport::Transport = match &sealed {
            Some(sealed) => sealed,
            None => &UdpTransport,
        };
        let handle =
            spawn_chitchat(chitchat_config, initial, transport).await.map_err(|e| anyhow::anyhow!("cannot gossip on {}: {e}", config.listen))?;
        tracing::info!(listen = %config.listen, seeds = ?config.seeds, "gossip started");
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(advertise(handle.chitchat(), Arc::downgrade(&node), rtts, stopped.clone()));
        let live = handle.chitchat().lock().await.live_nodes_watcher();
        tokio::spawn(observe(live, me.clone(), peers, stopped));
        Ok(Gossip { handle: tokio::sync::Mutex::new(Some(handle)), stop })
    }

    pub(super) async fn shutdown(&self) {
        self.stop.send_replace(true);
        if let Some(handle) = self.handle.lock().await.take() {
            if let Err(e) = handle.shutdown().await {
                tracing::warn!(error = %e, "gossip did not stop cleanly");
            }
        }
    }
}

type Chitchat = Arc<tokio::sync::Mutex<chitchat::Chitchat>>;

/// Readvertises this node's held partitions and measured round trips while they change.
async fn advertise(chitchat: Chitchat, node: std::sync::Weak<Node>, rtts: Arc<RwLock<BTreeMap<String, Rtt>>>, mut stop: watch::Receiver<bool>) {
    let mut advertised: BTreeMap<String, String> = BTreeMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(ADVERTISE_INTERVAL) => {}
            _ = stop.changed() => return,
        }
        let Some(node) = node.upgrade() else { return };
        let mut current: BTreeMap<String, String> =
            held_partitions(&node).into_iter().map(|(ns, partitions)| (format!("{HELD_PREFIX}{ns}"), encode_held(&partitions))).collect();
        for (ns, partitions) in handing_off_partitions(&node) {
            current.insert(format!("{HANDOFF_PREFIX}{ns}"), encode_held(&partitions));
        }
        for (ns, partitions) in refused_partitions(&node) {
            let list: Vec<String> = partitions.keys().map(u32::to_string).collect();
            current.insert(format!("{REFUSED_PREFIX}{ns}"), list.join(","));
        }
        current.insert(RTT_KEY.to_string(), encode_rtts(&rtts.read()));
        // Namespaces no longer held become empty values (chitchat keys are not reused after delete).
        for key in advertised.keys() {
            current.entry(key.clone()).or_default();
        }
        if current == advertised {
            continue;
        }
        let mut chitchat = chitchat.lock().await;
        let state = chitchat.self_node_state();
        for (key, value) in &current {
            if advertised.get(key) != Some(value) {
                state.set(key, value);
            }
        }
        advertised = current;
    }
}

/// Rebuilds the peer list on every change gossip reports.
async fn observe(
    mut live: watch::Receiver<BTreeMap<ChitchatId, NodeState>>,
    me: SelfInfo,
    peers: Arc<RwLock<Vec<Arc<Member>>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut ever_seen: BTreeMap<String, Member> = BTreeMap::new();
    loop {
        let current: Vec<Member> =
            live.borrow_and_update().iter().filter(|(id, _)| *id.node_id != *me.id).map(|(id, state)| member_of(id, state, &me.region)).collect();
        let live_ids: HashSet<String> = current.iter().map(|m| m.id.clone()).collect();
        for member in current {
            ever_seen.insert(member.id.clone(), member);
        }
        let mut all: Vec<Member> = ever_seen.values().cloned().collect();
        for member in &mut all {
            if !live_ids.contains(&member.id) {
                // A dead node holds nothing a request could be routed to.
                member.state = "dead";
                member.held.clear();
                member.handing_off.clear();
                member.refused.clear();
            }
        }
        *peers.write() = all.into_iter().map(Arc::new).collect();
        tokio::select! {
            changed = live.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// A peer as gossip describes it; its API address is the one it advertises
/// for `region` (this node's), else its own.
fn member_of(id: &ChitchatId, state: &NodeState, region: &str) -> Member {
    let held = state
        .key_values()
        .filter_map(|(key, value)| Some((key.strip_prefix(HELD_PREFIX)?.to_string(), decode_held(value))))
        .filter(|(_, partitions)| !partitions.is_empty())
        .collect();
    let handing_off = state
        .key_values()
        .filter_map(|(key, value)| Some((key.strip_prefix(HANDOFF_PREFIX)?.to_string(), decode_held(value))))
        .filter(|(_, partitions)| !partitions.is_empty())
        .collect();
    let refused = state
        .key_values()
        .filter_map(|(key, value)| {
            let ns = key.strip_prefix(REFUSED_PREFIX)?;
            let partitions: BTreeMap<u32, Option<String>> = value.split(',').filter_map(|p| p.parse().ok()).map(|p| (p, None)).collect();
            (!partitions.is_empty()).then(|| (ns.to_string(), partitions))
        })
        .collect();
    Member {
        id: id.node_id.to_string(),
        region: state.get("region").unwrap_or_default().to_string(),
        group: state.get("group").unwrap_or_default().to_string(),
        api: state.get(&format!("{API_PREFIX}{region}")).or_else(|| state.get("api")).unwrap_or_default().to_string(),
        rtt: decode_rtts(state.get(RTT_KEY).unwrap_or_default()),
        state: "live",
        is_self: false,
        held,
        handing_off,
        refused,
    }
}

/// `0:17,3:5` = partition 0 at applied_next 17, partition 3 at 5.
fn encode_held(partitions: &BTreeMap<u32, u64>) -> String {
    let mut out = String::with_capacity(partitions.len() * 8);
    for (p, offset) in partitions {
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&format!("{p}:{offset}"));
    }
    out
}

/// The inverse of `encode_held`; malformed items (another version's format) are ignored.
fn decode_held(value: &str) -> BTreeMap<u32, u64> {
    value
        .split(',')
        .filter_map(|item| {
            let (p, offset) = item.split_once(':')?;
            Some((p.parse().ok()?, offset.parse().ok()?))
        })
        .collect()
}

/// `b:61.2,c:-` = 61.2 ms to b, c unreachable (0.1 ms resolution: the
/// value changes, and is sent again, only when a round trip does by that much).
fn encode_rtts(rtts: &BTreeMap<String, Rtt>) -> String {
    let items: Vec<String> = rtts
        .iter()
        .map(|(peer, rtt)| match rtt.ms() {
            Some(ms) => format!("{peer}:{ms:.1}"),
            None => format!("{peer}:-"),
        })
        .collect();
    items.join(",")
}

/// The inverse of `encode_rtts`; malformed items are ignored.
fn decode_rtts(value: &str) -> BTreeMap<String, Rtt> {
    value
        .split(',')
        .filter_map(|item| {
            let (peer, ms) = item.rsplit_once(':')?;
            let rtt = match ms {
                "-" => Rtt::Unreachable,
                ms => Rtt::Measured(Duration::from_secs_f64(ms.parse::<f64>().ok().filter(|ms| ms.is_finite() && *ms >= 0.0)? / 1000.0)),
            };
            Some((peer.to_string(), rtt))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_partitions_round_trip() {
        let held: BTreeMap<u32, u64> = [(0, 17), (3, 5), (15, 1 << 40)].into_iter().collect();
        let encoded = encode_held(&held);
        assert_eq!(encoded, "0:17,3:5,15:1099511627776");
        assert_eq!(decode_held(&encoded), held);
        assert!(decode_held("").is_empty());
        assert_eq!(decode_held("1:2,garbage,3:x"), [(1, 2)].into_iter().collect());
    }

    #[test]
    fn round_trips_round_trip() {
        let rtts: BTreeMap<String, Rtt> =
            [("eu-west-1".to_string(), Rtt::Measured(Duration::from_micros(61_200))), ("ap:1".to_string(), Rtt::Unreachable)].into_iter().collect();
        let encoded = encode_rtts(&rtts);
        assert_eq!(encoded, "ap:1:-,eu-west-1:61.2");
        assert_eq!(decode_rtts(&encoded), rtts);
        assert!(decode_rtts("").is_empty());
        assert_eq!(decode_rtts("a:1.5,b:x,c:-1,d:NaN").len(), 1);
    }
}
