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
//! near 0. `Log::known_end` tells what this node's own appends proved;
//! the node's lag and staleness take the larger of it and the broker's
//! answer (`node/health.rs`), so the replica sees how far behind it is,
//! and its apply loop opens a reader on other brokers
//! (`Log::reader_elsewhere`). `end_offset` stays the broker's answer:
//! recovery decisions (a store ahead of the log is refused) need the
//! log's own word, and a topic recreated under the same name starts
//! again below what this node once appended.
//!
//! Bounded: one number per partition this node appended to.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::log::TopicPartition;

#[derive(Default)]
pub(super) struct AckedEnds {
    ends: Mutex<HashMap<TopicPartition, u64>>,
}

impl AckedEnds {
    /// The producer acknowledged a record of `tp` at `offset`.
    pub(super) fn acknowledged(&self, tp: &TopicPartition, offset: u64) {
        let mut ends = self.ends.lock();
        let end = ends.entry(tp.clone()).or_default();
        *end = (*end).max(offset.saturating_add(1));
    }

    /// The least end offset of `tp` this node's appends proved (0: none).
    pub(super) fn end(&self, tp: &TopicPartition) -> u64 {
        self.ends.lock().get(tp).copied().unwrap_or(0)
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
        assert_eq!(ends.end(&tp), 0);
        ends.acknowledged(&tp, 41);
        ends.acknowledged(&tp, 7);
        assert_eq!((ends.end(&tp), ends.end(&other)), (42, 0));
    }
}
