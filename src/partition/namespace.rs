//! A namespace as this node holds it: its name, its fixed partition count
//! and one handle per partition.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::PartitionHandle;
use crate::partitioner::partition_of;
use crate::position::Position;

pub struct Namespace {
    pub name: Arc<str>,
    pub partitions: u32,
    pub handles: Vec<Arc<PartitionHandle>>,
    /// The existing Kafka topic this namespace reads as its log, if it was
    /// created on one (`source_topic`); None: its own topic.
    pub source_topic: Option<Arc<str>>,
    /// Set once the namespace was deleted (here, or by another node, as
    /// this node learned): whoever still holds it (a watch, a read in
    /// flight) stops, saying so.
    pub deleted: std::sync::atomic::AtomicBool,
    /// Which open of a namespace this is on this node (`next_opening`): a
    /// namespace deleted and created again under its name is another one,
    /// and what is cached by name (options, rules) checks it.
    pub opening: u64,
    /// The log it was opened on (`Log::identity`; None if the log could
    /// not say then): discovery closes it when the log of its name is
    /// another topic now (`node/deletion.rs`).
    pub log_identity: Option<String>,
}

/// A number no other open of a namespace in this process had.
pub(crate) fn next_opening() -> u64 {
    static OPENINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    OPENINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Namespace {
    /// Whether the namespace was deleted (`Node::delete_namespace`).
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn partition_of(&self, pk: &str) -> u32 {
        partition_of(pk, self.partitions)
    }

    pub fn handle(&self, partition: u32) -> &Arc<PartitionHandle> {
        &self.handles[partition as usize]
    }

    /// The applied position of the given partitions, right now.
    pub fn position_of(&self, partitions: impl IntoIterator<Item = u32>) -> Position {
        let offsets: BTreeMap<u32, u64> = partitions.into_iter().map(|p| (p, self.handle(p).applied_next())).collect();
        assert!(!offsets.is_empty(), "a position names at least one partition");
        Position { namespace: self.name.to_string(), offsets }
    }
}
