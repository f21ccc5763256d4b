//! What this node's own acknowledged appends prove about where each
//! partition's log ends.
//!
//! A record the producer got acknowledged (acks=all) is below the
//! partition's high watermark from then on: the end offset is at least one
//! past it, whatever a broker says later. The end offset Tern asks for
//! (`Log::end_offset`) comes from the broker the client believes leads the
//! partition; a leader cut from the other brokers, deposed by the
//! controller while clients still reach it, goes on answering with its old
//! high watermark (Kafka has no leader lease). A replica reading from it
//! then applies nothing and believed itself current: lag 0, staleness
//! near 0. `Log::known_end_at` tells what this node's own appends proved;
//! the node's lag and staleness take the larger of it and the broker's
//! answer (`node/health.rs`), so the replica sees how far behind it is,
//! and its apply loop opens a reader on other brokers
//! (`Log::reader_elsewhere`). `end_offset` stays the broker's answer:
//! recovery decisions (a store ahead of the log is refused) need the
//! log's own word, and a topic recreated under the same name starts
//! again below what this node once appended.
//!
//! Bounded: one number and one instant per partition this node appended to.

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::Mutex;

use crate::log::TopicPartition;

#[derive(Default)]
pub(super) struct AckedEnds {
    /// Each partition's proven end, and when an append of it was last acknowledged.
    ends: Mutex<HashMap<TopicPartition, (u64, Instant)>>,
}

impl AckedEnds {
    /// The producer acknowledged a record of `tp` at `offset`.
    pub(super) fn acknowledged(&self, tp: &TopicPartition, offset: u64) {
        let now = Instant::now();
        let mut ends = self.ends.lock();
        let (end, at) = ends.entry(tp.clone()).or_insert((0, now));
        *end = (*end).max(offset.saturating_add(1));
        *at = now;
    }

    /// Forgets the ends of `namespace`'s partitions (its topic was deleted).
    pub(super) fn forget(&self, namespace: &str) {
        self.ends.lock().retain(|tp, _| &*tp.topic != namespace);
    }

    /// The least end offset of `tp` this node's appends proved, and when an append of `tp` was last acknowledged (None: never).
    pub(super) fn end_at(&self, tp: &TopicPartition) -> Option<(u64, Instant)> {
        self.ends.lock().get(tp).copied()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_end_is_one_past_the_highest_acknowledged_offset() {
        let ends = AckedEnds::default();
        let tp = TopicPartition { topic: Arc::from("ns"), partition: 3 };
        let other = TopicPartition { topic: Arc::from("ns"), partition: 4 };
        assert_eq!(ends.end_at(&tp), None);
        let before = Instant::now();
        ends.acknowledged(&tp, 41);
        ends.acknowledged(&tp, 7);
        let (end, at) = ends.end_at(&tp).unwrap();
        assert!(end == 42 && at >= before, "the end, and the last acknowledgement's instant");
        assert_eq!(ends.end_at(&other), None);
    }
}
