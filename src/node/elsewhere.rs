//! What the cluster tells the node about the other nodes, through hooks it
//! sets (the node is below the cluster and never sees it): whether another
//! member of this node's replica group serves a partition (hand-off), how
//! far others applied one (the sequencer's releases), whether this node is
//! cut off from every other region (freshness, strong reads), and reading a
//! record at a holder (the namespace options of a partition held elsewhere).

use std::sync::Arc;

use parking_lot::RwLock;

use super::Node;
use crate::log::TopicPartition;

/// One record of one partition, to be read at a node that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordAt {
    pub ns: String,
    pub partition: u32,
    pub pk: String,
    pub sk: String,
}

/// Reads a record at a holder of its partition: its value (JSON text), None
/// when there is no such record, or why no holder told.
pub type ReadElsewhere = Arc<dyn Fn(RecordAt) -> futures::future::BoxFuture<'static, Result<Option<bytes::Bytes>, String>> + Send + Sync>;

/// Whether this node hears no node of another region while it knows some.
pub type Isolated = Arc<dyn Fn() -> bool + Send + Sync>;

/// The highest `applied_next` another live member advertises for (namespace, partition).
pub type AppliedElsewhere = Arc<dyn Fn(&str, u32) -> Option<u64> + Send + Sync>;

/// Whether another live member of this node's replica group serves a partition.
pub type ServedElsewhere = Arc<dyn Fn(&TopicPartition) -> bool + Send + Sync>;

/// The hooks, each unset until the cluster sets it (a node alone: none).
#[derive(Default)]
pub(super) struct Elsewhere {
    pub(super) served: RwLock<Option<ServedElsewhere>>,
    applied: RwLock<Option<AppliedElsewhere>>,
    isolated: RwLock<Option<Isolated>>,
    read: RwLock<Option<ReadElsewhere>>,
}

impl Node {
    /// Lets the cluster tell the node whether another member of its replica
    /// group serves a partition; from then on revoked partitions are handed
    /// off instead of dropped.
    pub fn set_served_elsewhere(&self, check: ServedElsewhere) {
        *self.elsewhere.served.write() = Some(check);
    }

    /// Lets the cluster tell the node how far other members applied a
    /// partition (the sequencer's release of journal entries).
    pub fn set_isolated(&self, isolated: Isolated) {
        *self.elsewhere.isolated.write() = Some(isolated);
    }

    /// Whether the cluster says this node is cut off from every other region.
    pub fn is_isolated(&self) -> bool {
        self.elsewhere.isolated.read().as_ref().is_some_and(|isolated| isolated())
    }

    pub fn set_applied_elsewhere(&self, applied: AppliedElsewhere) {
        *self.elsewhere.applied.write() = Some(applied);
    }

    /// Lets the cluster read records of partitions this node does not hold
    /// at nodes that do (the namespace options).
    pub fn set_read_elsewhere(&self, read: ReadElsewhere) {
        *self.elsewhere.read.write() = Some(read);
    }

    /// Reads `at` at a node that holds its partition (see `ReadElsewhere`).
    pub async fn read_elsewhere(&self, at: RecordAt) -> Result<Option<bytes::Bytes>, String> {
        let read = self.elsewhere.read.read().clone();
        match read {
            Some(read) => read(at).await,
            None => Err(format!("partition {} of namespace {:?} is not held here and this node knows no other", at.partition, at.ns)),
        }
    }

    /// The next offset of `partition` of `ns` to apply: here when this node
    /// applies it, else the highest another live member advertises (0 when
    /// unknown).
    pub fn applied_next(&self, ns: &str, partition: u32) -> u64 {
        let Some(namespace) = self.namespace(ns) else { return 0 };
        if partition >= namespace.partitions {
            return 0;
        }
        let handle = namespace.handle(partition);
        if handle.is_held() {
            return handle.applied_next();
        }
        let elsewhere = self.elsewhere.applied.read().clone();
        elsewhere.and_then(|f| f(ns, partition)).unwrap_or(0)
    }
}
