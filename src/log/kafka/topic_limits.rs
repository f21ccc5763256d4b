//! The largest entry each namespace's topic takes (issue 36, defect 5).
//!
//! Tern creates its topics, and configures its producer, for entries of up
//! to `ENTRY_BYTES_MAX` (8 MiB). A topic may take less: a source topic, or
//! a topic an older Tern created with Kafka's default `max.message.bytes`
//! (about 1 MB). Its leader refuses a larger entry for ever, so the write
//! path asks `Log::entry_bytes_max_of` and refuses such a write with 413
//! before anything is made durable: it is never journaled (the sequencer
//! would try it again at every turn, holding up the acknowledged writes of
//! its lane behind it).
//!
//! **Batches.** `max.message.bytes` bounds a record *batch*, and librdkafka
//! never splits a batch its broker refused: every record in it fails. The
//! producer batches up to `PRODUCER_BATCH_BYTES` per partition, so on a
//! topic that takes less, writes that each fit would be refused together
//! (the sequencer hands a lane's appends over at once). There, appends go
//! one at a time per partition (`one_at_a_time`): each batch is one record,
//! at one `acks=all` round trip per append per partition. The turn is held
//! until the produce ends, even if its caller stopped waiting (its record
//! may still be queued in the producer); a write whose partition started
//! failing while it waited fails at once, as at its breaker ticket. Should
//! the setting change while appends are in flight (the limit raised or
//! lowered), a batch refused whole is tried again (the sequencer's next
//! turn, a claim's next scan), and an append that overtakes one still
//! waiting is caught by the sequencer's order check: it heals.
//!
//! A topic's limit is learned with DescribeConfigs (the effective value:
//! the topic's own, or its broker's `message.max.bytes`), for all the
//! namespaces due in one request: a namespace is due before it opens,
//! `LIMIT_AGE_MAX` after it was learned, and at once after its leader
//! refused an entry for its size (`refused`); the node asks every
//! `node::namespaces::ENTRY_LIMITS_CHECK`. Until learned, the limit is
//! Tern's own.
//!
//! Bounds: one limit per namespace this node opened.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::ENTRY_BYTES_MAX;

/// What a record adds to its entry in a batch of one (the batch's header,
/// the record's varints, the MAC header of an entry in a source topic:
/// about 140 bytes), and what a journaled write grows by after the write
/// path checked it (its place in its lane, added by the sequencer: at most
/// about 155 bytes): kept with room to spare.
pub(super) const RECORD_FRAMING_BYTES: usize = 1024;

/// The most the producer puts in one batch of a partition (librdkafka's
/// `batch.size`, set to its default so that it is stated here): a topic
/// that takes batches at least this large never refuses one of entries
/// that each fit.
pub(super) const PRODUCER_BATCH_BYTES: usize = 1_000_000;

/// A limit learned longer ago than this is learned again (an operator may
/// change a topic's `max.message.bytes`).
pub(super) const LIMIT_AGE_MAX: Duration = Duration::from_secs(60);

/// One namespace's topic, as last learned.
#[derive(Clone, Copy, Debug)]
struct Learned {
    entry_bytes_max: usize,
    one_at_a_time: bool,
    at: Instant,
    /// Its leader refused an entry for its size since: learn again.
    stale: bool,
}

/// Each namespace's topic limit, as last learned.
#[derive(Default)]
pub(super) struct TopicLimits(RwLock<HashMap<String, Learned>>);

impl TopicLimits {
    /// Forgets what was learned of `namespace`'s topic (deleted).
    pub(super) fn forget(&self, namespace: &str) {
        self.0.write().remove(namespace);
    }

    /// `namespace`'s largest entry: as learned, else Tern's own bound.
    pub(super) fn of(&self, namespace: &str) -> usize {
        self.0.read().get(namespace).map_or(ENTRY_BYTES_MAX, |learned| learned.entry_bytes_max)
    }

    /// Whether `namespace`'s appends go one at a time per partition (its
    /// topic takes smaller batches than the producer makes).
    pub(super) fn one_at_a_time(&self, namespace: &str) -> bool {
        self.0.read().get(namespace).is_some_and(|learned| learned.one_at_a_time)
    }

    /// Whether `namespace`'s limit is to be learned (again).
    pub(super) fn due(&self, namespace: &str) -> bool {
        self.0.read().get(namespace).is_none_or(|learned| learned.stale || learned.at.elapsed() >= LIMIT_AGE_MAX)
    }

    /// Its topic's `max.message.bytes` is `max_message_bytes`, as described now.
    pub(super) fn learned(&self, namespace: &str, max_message_bytes: u64) -> usize {
        let entry_bytes_max = entry_limit(max_message_bytes);
        assert!(entry_bytes_max <= ENTRY_BYTES_MAX, "a topic's limit is never above Tern's own");
        let one_at_a_time = max_message_bytes < PRODUCER_BATCH_BYTES as u64;
        let learned = Learned { entry_bytes_max, one_at_a_time, at: Instant::now(), stale: false };
        self.0.write().insert(namespace.to_string(), learned);
        entry_bytes_max
    }

    /// Its leader refused an entry for its size: the limit is learned again
    /// at the node's next ask (within `ENTRY_LIMITS_CHECK`).
    pub(super) fn refused(&self, namespace: &str) {
        if let Some(learned) = self.0.write().get_mut(namespace) {
            learned.stale = true;
        }
    }
}

/// One lock per partition whose topic takes appends one at a time (tokio's
/// mutex is fair: appends land in the order they asked). Bounded by the
/// partitions of such topics.
#[derive(Default)]
pub(super) struct Turns(parking_lot::Mutex<HashMap<(String, u32), Turn>>);

/// One partition's turn: held by the append in flight.
pub(super) type Turn = std::sync::Arc<tokio::sync::Mutex<()>>;

impl Turns {
    pub(super) fn of(&self, topic: &str, partition: u32) -> Turn {
        self.0.lock().entry((topic.to_string(), partition)).or_default().clone()
    }
}

/// The largest entry a topic whose `max.message.bytes` is
/// `max_message_bytes` takes: less a record's framing, at most Tern's own
/// bound.
pub(super) fn entry_limit(max_message_bytes: u64) -> usize {
    let bytes = usize::try_from(max_message_bytes).unwrap_or(usize::MAX);
    bytes.saturating_sub(RECORD_FRAMING_BYTES).min(ENTRY_BYTES_MAX)
}

#[cfg(test)]
mod tests {
    use super::super::kafka_log::MESSAGE_BYTES_MAX;
    use super::*;

    #[test]
    fn a_topic_tern_made_takes_terns_largest_entry_in_batches() {
        assert_eq!(entry_limit(MESSAGE_BYTES_MAX as u64), ENTRY_BYTES_MAX);
        assert_eq!(entry_limit(u64::MAX), ENTRY_BYTES_MAX);
        let limits = TopicLimits::default();
        limits.learned("ns", MESSAGE_BYTES_MAX as u64);
        assert!(!limits.one_at_a_time("ns"));
        // Kafka's default max.message.bytes takes the producer's batches too.
        limits.learned("ns", 1_048_588);
        assert_eq!((limits.of("ns"), limits.one_at_a_time("ns")), (1_048_588 - RECORD_FRAMING_BYTES, false));
    }

    #[test]
    fn a_smaller_topic_takes_its_limit_less_the_framing_one_at_a_time() {
        let limits = TopicLimits::default();
        assert_eq!(limits.learned("ns", 200_000), 200_000 - RECORD_FRAMING_BYTES);
        assert!(limits.one_at_a_time("ns"), "two entries that each fit would be refused as one batch");
        assert_eq!(entry_limit(100), 0, "a topic smaller than a record's framing takes no entry");
        assert_eq!(entry_limit(0), 0);
    }

    #[test]
    fn a_namespace_is_due_until_learned_and_again_after_a_refusal() {
        let limits = TopicLimits::default();
        assert_eq!((limits.of("ns"), limits.one_at_a_time("ns"), limits.due("ns")), (ENTRY_BYTES_MAX, false, true));
        limits.learned("ns", 200_000);
        assert!(!limits.due("ns") && limits.due("other"));
        limits.refused("ns");
        assert!(limits.due("ns"), "learned again after its leader refused an entry for its size");
        assert_eq!(limits.of("ns"), 200_000 - RECORD_FRAMING_BYTES, "the limit stays until learned again");
    }
}
