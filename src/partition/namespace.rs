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
}

impl Namespace {
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
