//! Which broker each partition is read from: the proof that a node reads
//! from a replica in its own region (KIP-392, "fetch from follower").
//!
//! With `client.rack` set to the node's region and brokers configured with
//! `broker.rack` and `replica.selector.class=RackAwareReplicaSelector`, the
//! leader tells the consumer to fetch from a replica in the consumer's rack.
//! librdkafka reports, per partition, the leader and the broker it fetches
//! from in its statistics (`statistics.interval.ms`); this context keeps the
//! latest (one entry per assigned partition), and `/v1/ns/{ns}` shows them.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{ConsumerContext, StreamConsumer};
use rdkafka::statistics::Statistics;

use crate::log::FetchSource;

/// The consumer type of the Kafka log.
pub(super) type LogConsumer = StreamConsumer<FetchContext>;

/// How often librdkafka reports its statistics to the main consumer.
pub(super) const STATISTICS_INTERVAL_MS: u32 = 2_000;

#[derive(Default, Clone)]
pub(crate) struct FetchContext {
    /// (topic, partition) -> where it is read from, as last reported.
    sources: Arc<Mutex<HashMap<(String, i32), FetchSource>>>,
}

impl FetchContext {
    pub(super) fn source(&self, topic: &str, partition: i32) -> Option<FetchSource> {
        self.sources.lock().get(&(topic.to_string(), partition)).copied()
    }
}

impl ClientContext for FetchContext {
    fn stats(&self, statistics: Statistics) {
        let mut sources = HashMap::new();
        for (name, topic) in &statistics.topics {
            for (id, partition) in &topic.partitions {
                // -1 is librdkafka's internal UA partition; brokers below 0 are unknown.
                if *id >= 0 && partition.leader >= 0 && partition.broker >= 0 {
                    sources.insert((name.clone(), *id), FetchSource { leader: partition.leader, fetching_from: partition.broker });
                }
            }
        }
        *self.sources.lock() = sources;
    }
}

impl ConsumerContext for FetchContext {}
