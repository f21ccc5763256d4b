//! `NodeConfig`: what a node is told at start (built from the settings by
//! `server`), and what follows from it.

use std::path::PathBuf;
use std::time::Duration;

use crate::apply::ApplyConfig;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub data_dir: PathBuf,
    /// redb page cache per partition store.
    pub store_cache_bytes: usize,
    pub apply: ApplyConfig,
    /// Where partition snapshots live (the apply loop restores from them:
    /// `apply.recovery`); this node's snapshot schedule writes there.
    pub snapshots: Option<crate::snapshot::Snapshots>,
    /// Snapshots kept per partition when this node takes one.
    pub snapshot_retain: usize,
    /// Subscription bounds and intervals.
    pub watch: crate::watch::WatchConfig,
    /// How much this node's journal may hold (`journal_*` settings).
    pub journal: crate::journal::JournalLimits,
    /// Lost journal entries to go on past (`accept_journal_loss`).
    pub journal_accept_lost: Vec<crate::log::embedded::AcceptLost>,
    /// Journal plain writes while the log refuses them (the `ripcord` setting).
    pub ripcord: bool,
    /// Keep the journal's copy in the snapshot store (`journal_objects`).
    pub journal_objects: bool,
    /// Replay another node's journal whose lease is this old (`journal_claim_after_ms`).
    pub journal_claim_after: Duration,
    /// This node's name (shown in its journal's lease).
    pub node_id: String,
    /// How long a held partition with procedures may apply nothing before
    /// this node appends a tick to it (zero: never).
    pub procedure_tick: Duration,
    /// Relay held partitions' outboxes to their output topics (`publisher.rs`).
    pub procedure_publish: bool,
    /// Read every served store through at a bounded pace (`scrub.rs`).
    pub scrub: super::ScrubConfig,
}

impl NodeConfig {
    /// Where the journal keeps its copy: the snapshot store, when there is
    /// one and `journal_objects` is on.
    pub(super) fn journal_objects_config(&self) -> Option<crate::journal::ObjectsConfig> {
        let snapshots = self.snapshots.as_ref().filter(|_| self.journal_objects)?;
        let (store, root) = snapshots.object_store();
        Some(crate::journal::ObjectsConfig {
            objects: crate::journal::objects::JournalObjects::new(store, root),
            node: self.node_id.clone(),
            lease_renew: lease_renew(self.journal_claim_after),
        })
    }
}

/// The lease is renewed four times per claim delay: a few lost renewals do
/// not get a live node's journal claimed.
fn lease_renew(claim_after: Duration) -> Duration {
    (claim_after / 4).max(Duration::from_millis(250))
}
