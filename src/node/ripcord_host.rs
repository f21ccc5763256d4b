//! What ripcord's background work (the sequencer's lanes, the replay of
//! lost journals) needs of its node: the narrow interface, so the work can
//! run on a node or in the simulation (`sim/journals.rs`), whose clock and
//! gossip are its own and whose seeds replay exactly.

use std::time::Instant;

use super::Node;
use crate::journal::Journal;
use crate::log::{Log, TopicPartition};

/// A node as the sequencer and the replay of lost journals see it.
pub(crate) trait RipcordHost: Sync {
    /// The node's journal.
    fn journal(&self) -> &Journal;
    /// The log journaled writes are appended to.
    fn log(&self) -> &dyn Log;
    /// How many partitions namespace `ns` has here; None if it is unknown.
    fn partitions(&self, ns: &str) -> Option<u32>;
    /// The topic partition of `partition` of `ns`; None if the namespace is
    /// unknown here or has no such partition (made again with fewer).
    fn topic_partition(&self, ns: &str, partition: u32) -> Option<TopicPartition>;
    /// The most any member applied of the partition (here, or by gossip).
    fn applied_next(&self, ns: &str, partition: u32) -> u64;
    /// The log refused an append to the partition (ripcord journals its plain writes).
    fn log_refused(&self, ns: &str, partition: u32);
    /// The log took an append to the partition.
    fn log_took(&self, ns: &str, partition: u32);
    /// Now, for the lanes' waits.
    fn now(&self) -> Instant;
}

impl RipcordHost for Node {
    fn journal(&self) -> &Journal {
        &self.journal
    }

    fn log(&self) -> &dyn Log {
        self.log.as_ref()
    }

    fn partitions(&self, ns: &str) -> Option<u32> {
        self.namespace(ns).map(|namespace| namespace.partitions)
    }

    fn topic_partition(&self, ns: &str, partition: u32) -> Option<TopicPartition> {
        self.namespace(ns).filter(|namespace| partition < namespace.partitions).map(|namespace| namespace.handle(partition).tp.clone())
    }

    fn applied_next(&self, ns: &str, partition: u32) -> u64 {
        Node::applied_next(self, ns, partition)
    }

    fn log_refused(&self, ns: &str, partition: u32) {
        Node::log_refused(self, ns, partition)
    }

    fn log_took(&self, ns: &str, partition: u32) {
        Node::log_took(self, ns, partition)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}
