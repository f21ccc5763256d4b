//! A node as this node sees it (`Member`: its region, group, addresses,
//! round trips, and the partitions it serves, refuses or hands off), this
//! node's own identity (`SelfInfo`), and a measured round trip (`Rtt`).

use std::collections::BTreeMap;
use std::time::Duration;

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
