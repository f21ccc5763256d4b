//! Round-trip probes: how far each peer is, for routing (`Cluster::holders`
//! prefers the nearest holder of another region) and for operators
//! (`/v1/cluster`, `tern_peer_rtt_seconds`, and gossip's `rtt` key, so every
//! node shows the whole matrix).
//!
//! Every `PROBE_INTERVAL`, one `GET /healthz` to each known live peer, over
//! the forwarder's pooled connections: the path a forwarded request takes,
//! at the address this node reaches the peer at (its address for this
//! region), so a proxy or a WAN link between regions is in the measurement.
//! A probe unanswered within `PROBE_TIMEOUT` marks the peer unreachable
//! until one is answered; routing tries reachable holders first.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::AppState;
use crate::cluster::{Member, Rtt};

/// How often every peer is probed.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// The longest a probe waits: past it the peer counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Most peers probed at once (a round probes them in batches of this many).
const PROBES_IN_FLIGHT_MAX: usize = 64;

/// Probes the peers until the task is aborted (at shutdown).
pub async fn probe_forever(state: AppState) {
    let mut ticks = tokio::time::interval(PROBE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        probe_round(&state).await;
    }
}

/// One round: every live peer once; forgets peers no longer known.
async fn probe_round(state: &AppState) {
    let members = state.cluster.members();
    let known: HashSet<String> = members.iter().map(|m| m.id.clone()).collect();
    state.cluster.retain_rtts(&known);
    let live: Vec<Member> = members.into_iter().filter(|m| !m.is_self && m.state == "live").collect();
    for batch in live.chunks(PROBES_IN_FLIGHT_MAX) {
        let probes = batch.iter().map(|peer| async move { (peer, probe(state, peer).await) });
        for (peer, sample) in futures::future::join_all(probes).await {
            state.cluster.record_rtt(&peer.id, sample);
            let seconds = match state.cluster.rtt(&peer.id) {
                Some(Rtt::Measured(rtt)) => rtt.as_secs_f64(),
                _ => -1.0,
            };
            crate::metrics::PEER_RTT_SECONDS.with_label_values(&[&peer.id, &peer.region]).set(seconds);
        }
    }
}

/// One probe's round trip, or None when it got no answer in time.
async fn probe(state: &AppState, peer: &Member) -> Option<Duration> {
    let url = format!("{}://{}/healthz", state.forwarder.scheme, peer.api);
    let started = Instant::now();
    let answered = state.forwarder.client.get(url).timeout(PROBE_TIMEOUT).send().await;
    match answered {
        Ok(response) if response.status().is_success() => Some(started.elapsed()),
        Ok(response) => {
            tracing::debug!(peer = %peer.id, status = %response.status(), "probe answered with an error");
            // It answered: the round trip is real even if health says otherwise.
            Some(started.elapsed())
        }
        Err(e) => {
            tracing::debug!(peer = %peer.id, error = %e.without_url(), "probe unanswered");
            None
        }
    }
}
