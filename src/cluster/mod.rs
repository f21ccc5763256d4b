//! Cluster membership and routing: who the other nodes are, which partitions
//! each serves at which applied offset, and which one a request for a
//! partition this node does not hold should go to.
//!
//! Membership is gossiped with `chitchat` (Scuttlebutt reconciliation over
//! UDP, phi-accrual failure detection; `gossip.rs`). Each node advertises:
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

pub use gossip::GossipConfig;
pub use peer_client::PeerClient;
mod member;
mod node_hooks;
mod routing;
mod view;

pub use self::member::{Member, Rtt, SelfInfo};
pub use self::node_hooks::{handing_off_partitions, held_partitions, refused_partitions, RECORD_HOLDERS_TRIED_MAX};
pub use self::view::Cluster;
