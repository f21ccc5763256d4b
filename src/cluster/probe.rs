//! Round-trip probes: how far each peer is, for routing (`Cluster::holders`
//! prefers the nearest holder of another region) and for operators
//! (`/v1/cluster`, `tern_peer_rtt_seconds`, and gossip's `rtt` key, so every
//! node shows the whole matrix).
//!
//! Every `PROBE_INTERVAL`, one `GET /healthz` to each known live peer, over
//! the peer client's pooled connections: the path a forwarded request takes,
//! at the address this node reaches the peer at (its address for this
//! region), so a proxy or a WAN link between regions is in the measurement.
//! A probe unanswered within `PROBE_TIMEOUT` marks the peer unreachable
//! until one is answered; routing tries reachable holders first.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::{Cluster, Member, Rtt};

/// How often every peer is probed.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// The longest a probe waits: past it the peer counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Most peers probed at once (a round probes them in batches of this many).
const PROBES_IN_FLIGHT_MAX: usize = 64;

/// Probes the peers until the task is aborted (at shutdown).
pub async fn probe_forever(cluster: Arc<Cluster>) {
    let mut ticks = tokio::time::interval(PROBE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The peers whose series this node exports, as (id, region).
    let mut shown = HashSet::new();
    loop {
        ticks.tick().await;
        shown = probe_round(&cluster, shown).await;
    }
}

/// One round: every live peer once; forgets peers no longer known. Returns
/// the peers whose series it set; the series of those `shown` before that
/// were not probed (gone, dead, another region now) are removed: a peer's
/// last answer is no metric of it once it is not probed.
async fn probe_round(cluster: &Cluster, shown: HashSet<(String, String)>) -> HashSet<(String, String)> {
    let members = cluster.members();
    let known: HashSet<String> = members.iter().map(|m| m.id.clone()).collect();
    cluster.retain_rtts(&known);
    let live: Vec<Member> = members.into_iter().filter(|m| !m.is_self && m.state == "live").collect();
    let probed: HashSet<(String, String)> = live.iter().map(|m| (m.id.clone(), m.region.clone())).collect();
    for (id, region) in shown.difference(&probed) {
        let _ = crate::metrics::PEER_RTT_SECONDS.remove_label_values(&[id, region]);
        let _ = crate::metrics::PEER_REACHABLE.remove_label_values(&[id, region]);
    }
    for batch in live.chunks(PROBES_IN_FLIGHT_MAX) {
        let probes = batch.iter().map(|peer| async move { (peer, cluster.client().probe(peer, PROBE_TIMEOUT).await) });
        for (peer, sample) in futures::future::join_all(probes).await {
            cluster.record_rtt(&peer.id, sample);
            let labels = [peer.id.as_str(), peer.region.as_str()];
            let answered = match cluster.rtt(&peer.id) {
                Some(Rtt::Measured(rtt)) => {
                    crate::metrics::PEER_RTT_SECONDS.with_label_values(&labels).set(rtt.as_secs_f64());
                    true
                }
                _ => {
                    // No round trip to show: the series goes (a sentinel would read as one).
                    let _ = crate::metrics::PEER_RTT_SECONDS.remove_label_values(&labels);
                    false
                }
            };
            crate::metrics::PEER_REACHABLE.with_label_values(&labels).set(i64::from(answered));
        }
    }
    probed
}
