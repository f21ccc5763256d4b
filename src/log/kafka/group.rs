//! Replica groups on Kafka: a replica group *is* a Kafka consumer group.
//!
//! Every node of replica group `G` joins consumer group `tern.group.G` with the
//! cooperative-sticky assignor and static membership (`group.instance.id` =
//! node id, so a node that restarts within the session timeout gets its own
//! partitions back without a rebalance). The coordinator hands each partition
//! of the followed topics to exactly one member; that member applies and
//! serves it. A node alone in its group gets every partition.
//!
//! This consumer only *decides ownership*: every partition it is assigned is
//! paused at once and it never delivers a message. Entries are read by the
//! node's assign-mode reader from the offset the store chose (never from the
//! group's committed offset), so a partition moving between members can never
//! skip or repeat an offset. The group's committed offsets are written after
//! each durable apply, for lag monitoring only.
//!
//! Revoked and lost partitions leave the published assignment at once; the
//! node then stops applying and serving them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;

use crate::log::{Assignment, LogError, TopicPartition};

/// How a Kafka node decides which partitions it holds.
#[derive(Debug, Clone)]
pub enum Membership {
    /// Hold every partition; no consumer group (a node alone by configuration).
    AssignAll,
    /// Share the partitions with the other members of a replica group.
    Group {
        /// The replica group's name; the consumer group is `<topic prefix>group.<group>`.
        group: String,
        /// Static membership id: the node id.
        instance_id: String,
        /// How long the coordinator waits for a silent member (a crashed
        /// node, or one that stopped: static members do not leave the group)
        /// before moving its partitions. Bounded by the broker's
        /// `group.min.session.timeout.ms` / `group.max.session.timeout.ms`.
        session_timeout: Duration,
    },
}

/// The consumer group's id for replica group `group`: `<topic prefix>group.<group>`
/// (the prefix keeps clusters that share a Kafka cluster apart).
pub fn group_id(topic_prefix: &str, group: &str) -> String {
    format!("{topic_prefix}group.{group}")
}

/// Receives rebalance callbacks (on the consumer's poll task) and publishes
/// the resulting assignment.
pub(super) struct GroupContext {
    topic_prefix: String,
    /// Source topics are namespaces' topics too (`sources.rs`).
    sources: Arc<super::sources::Sources>,
    assignment: watch::Sender<Assignment>,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                // Never fetch through the group: the node's reader does, from the store's offset.
                if let Err(e) = consumer.pause(tpl) {
                    tracing::warn!(error = %e, "cannot pause newly assigned partitions (their messages are dropped)");
                }
                let added = self.partitions_of(tpl);
                crate::metrics::GROUP_PARTITIONS_ASSIGNED.inc_by(added.len() as u64);
                tracing::info!(partitions = ?added, "replica group assigned partitions");
                self.assignment.send_modify(|a| match a {
                    Assignment::Only(held) => held.extend(added),
                    // The first assignment after joining (possibly empty).
                    _ => *a = Assignment::Only(added.into_iter().collect()),
                });
            }
            Rebalance::Revoke(tpl) => {
                let removed = self.partitions_of(tpl);
                crate::metrics::GROUP_PARTITIONS_REVOKED.inc_by(removed.len() as u64);
                let lost = consumer.assignment_lost();
                tracing::info!(partitions = ?removed, lost, "replica group revoked partitions");
                self.assignment.send_modify(|a| {
                    if let Assignment::Only(held) = a {
                        for tp in &removed {
                            held.remove(tp);
                        }
                    }
                });
            }
            Rebalance::Error(e) => tracing::error!(error = %e, "replica group rebalance failed"),
        }
    }
}

impl GroupContext {
    /// The Tern partitions named by a rebalance (topics without the prefix are ignored).
    fn partitions_of(&self, tpl: &TopicPartitionList) -> Vec<TopicPartition> {
        tpl.elements()
            .iter()
            .filter_map(|e| {
                let namespace = match self.sources.namespace_of(e.topic()) {
                    Some(namespace) => Arc::from(namespace),
                    None => Arc::from(e.topic().strip_prefix(&self.topic_prefix)?),
                };
                Some(TopicPartition { topic: namespace, partition: e.partition() as u32 })
            })
            .collect()
    }
}

/// A member of a replica group's consumer group.
pub(super) struct GroupMember {
    consumer: Arc<StreamConsumer<GroupContext>>,
    topic_prefix: String,
    sources: Arc<super::sources::Sources>,
    assignment: watch::Receiver<Assignment>,
    /// The topics subscribed to; re-subscribing only when this changes.
    followed: Mutex<BTreeSet<String>>,
}

impl GroupMember {
    /// Creates the member; it joins the group once `follow` names a topic.
    pub(super) fn start(
        base: &ClientConfig,
        topic_prefix: &str,
        sources: Arc<super::sources::Sources>,
        group: &str,
        instance_id: &str,
        session_timeout: Duration,
    ) -> Result<GroupMember, LogError> {
        let (sender, receiver) = watch::channel(Assignment::Pending);
        let context = GroupContext { topic_prefix: topic_prefix.to_string(), sources: sources.clone(), assignment: sender };
        let session_ms = session_timeout.as_millis().max(1);
        let consumer: StreamConsumer<GroupContext> = base
            .clone()
            .set("group.id", group_id(topic_prefix, group))
            .set("group.instance.id", instance_id)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", session_ms.to_string())
            // Three heartbeats per session, as Kafka recommends.
            .set("heartbeat.interval.ms", (session_ms / 3).max(1).to_string())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // Never used to fetch (partitions are paused); must not fail the assignment.
            .set("auto.offset.reset", "latest")
            .set("enable.partition.eof", "false")
            .create_with_context(context)
            .map_err(|e| LogError::Unavailable(format!("kafka: {e}")))?;
        let consumer = Arc::new(consumer);
        // Polling serves the rebalance callbacks. A message can only slip through
        // in the instant between an assignment and its pause: dropped.
        let poller = Arc::downgrade(&consumer);
        tokio::spawn(async move {
            loop {
                let Some(consumer) = poller.upgrade() else { return };
                match tokio::time::timeout(Duration::from_secs(1), consumer.recv()).await {
                    Ok(Ok(_)) | Err(_) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "replica group consumer error");
                        drop(consumer);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Ok(GroupMember { consumer, topic_prefix: topic_prefix.to_string(), sources, assignment: receiver, followed: Mutex::new(BTreeSet::new()) })
    }

    pub(super) fn assignment(&self) -> watch::Receiver<Assignment> {
        self.assignment.clone()
    }

    /// Subscribes to the topics of `namespaces` (a change triggers an
    /// incremental rebalance; partitions of unchanged topics stay put).
    pub(super) fn follow(&self, namespaces: &[String]) {
        let topics: BTreeSet<String> =
            namespaces.iter().map(|ns| self.sources.topic_of(ns).unwrap_or_else(|| format!("{}{ns}", self.topic_prefix))).collect();
        let mut followed = self.followed.lock();
        if *followed == topics || topics.is_empty() {
            return;
        }
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        match self.consumer.subscribe(&names) {
            Ok(()) => {
                tracing::info!(topics = ?names, "replica group follows topics");
                *followed = topics;
            }
            Err(e) => tracing::error!(error = %e, "cannot subscribe the replica group consumer"),
        }
    }

    /// Commits `offset` as the group's position of `tp`, if this member holds
    /// it (a member may only commit what it owns). Monitoring only.
    pub(super) fn commit(&self, topic: &str, tp: &TopicPartition, offset: u64) {
        if !self.assignment.borrow().holds(tp) {
            return;
        }
        let mut committed = TopicPartitionList::new();
        if let Err(e) = committed.add_partition_offset(topic, tp.partition as i32, Offset::Offset(offset as i64)) {
            tracing::warn!(%tp, error = %e, "cannot build the offset commit");
            return;
        }
        if let Err(e) = self.consumer.commit(&committed, CommitMode::Async) {
            tracing::debug!(%tp, error = %e, "replica group offset commit (for lag monitoring) failed");
        }
    }
}
