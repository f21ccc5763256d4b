//! Which holder a request goes to (`rank_holders`: owners before members
//! handing off, same region, reachable, nearest, least lag), and whether
//! this node is cut off from every other region (`isolated`).

use super::member::{Member, Rtt};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How a holder ranks, compared in order: handing off (after owners), in
/// another region, unreachable, its round-trip class, less applied.
type Rank = (bool, bool, u8, u64, std::cmp::Reverse<u64>);

/// Whether gossip knows nodes of other regions and hears none of them.
/// `Cluster::holders`, on a given view: the live `peers` serving
/// `partition` of `namespace`, best first for a caller in `region` that
/// measured `rtts`.
pub(super) fn rank_holders(peers: &[Arc<Member>], rtts: &BTreeMap<String, Rtt>, region: &str, namespace: &str, partition: u32) -> Vec<Arc<Member>> {
    let mut holders: Vec<(Rank, Arc<Member>)> = peers
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

pub(super) fn isolated(peers: Arc<RwLock<Vec<Arc<Member>>>>, rtts: Arc<RwLock<BTreeMap<String, Rtt>>>, region: String) -> crate::node::Isolated {
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
pub(super) fn reaches(member: &Member, rtts: &BTreeMap<String, Rtt>) -> bool {
    member.state == "live" && !matches!(rtts.get(&member.id), Some(Rtt::Unreachable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
