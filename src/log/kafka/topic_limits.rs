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
//! A topic's limit is learned with DescribeConfigs (the effective value:
//! the topic's own, or its broker's `message.max.bytes`) when its namespace
//! opens, every `node::namespaces::ENTRY_LIMITS_REFRESH`, and at once after
//! its leader refused an entry for its size. Until then it is Tern's own.
//!
//! Bounds: one limit per namespace this node opened.

use std::collections::HashMap;

use parking_lot::RwLock;

use super::ENTRY_BYTES_MAX;

/// What a record adds to its entry in a batch of one (the batch's header,
/// the record's varints, the MAC header of an entry in a source topic):
/// under 200 bytes; kept with room to spare.
pub(super) const RECORD_FRAMING_BYTES: usize = 1024;

/// Each namespace's largest entry, as last learned.
#[derive(Default)]
pub(super) struct TopicLimits(RwLock<HashMap<String, usize>>);

impl TopicLimits {
    /// `namespace`'s largest entry: as learned, else Tern's own bound.
    pub(super) fn of(&self, namespace: &str) -> usize {
        self.0.read().get(namespace).copied().unwrap_or(ENTRY_BYTES_MAX)
    }

    pub(super) fn learned(&self, namespace: &str, entry_bytes_max: usize) {
        assert!(entry_bytes_max <= ENTRY_BYTES_MAX, "a topic's limit is never above Tern's own");
        self.0.write().insert(namespace.to_string(), entry_bytes_max);
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
    fn a_topic_tern_made_takes_terns_largest_entry() {
        assert_eq!(entry_limit(MESSAGE_BYTES_MAX as u64), ENTRY_BYTES_MAX);
        assert_eq!(entry_limit(u64::MAX), ENTRY_BYTES_MAX);
    }

    #[test]
    fn a_smaller_topic_takes_its_limit_less_the_framing() {
        // Kafka's default max.message.bytes.
        assert_eq!(entry_limit(1_048_588), 1_048_588 - RECORD_FRAMING_BYTES);
        assert_eq!(entry_limit(100), 0, "a topic smaller than a record's framing takes no entry");
        assert_eq!(entry_limit(0), 0);
    }

    #[test]
    fn an_unknown_namespace_has_terns_bound_until_learned() {
        let limits = TopicLimits::default();
        assert_eq!(limits.of("ns"), ENTRY_BYTES_MAX);
        limits.learned("ns", 1000);
        assert_eq!((limits.of("ns"), limits.of("other")), (1000, ENTRY_BYTES_MAX));
    }
}
