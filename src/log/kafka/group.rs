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
//!
//! A consumer that fails for good (librdkafka's fatal errors: fenced by
//! another member with this node's `group.instance.id`, e.g. after the
//! coordinator stalled) is made again, with a backoff from
//! `REBUILD_WAIT_MIN` to `REBUILD_WAIT_MAX`, and subscribed to the same
//! topics; meanwhile the node is assigned nothing (`Assignment::Pending`,
//! which `/readyz` reports: what it ran become hand-offs, served until
//! another member serves them) — issue 36: a fenced member held no partition for
//! good, with no error anywhere.

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

/// Waits before making a failed consumer again, doubling to the max.
const REBUILD_WAIT_MIN: Duration = Duration::from_millis(500);
const REBUILD_WAIT_MAX: Duration = Duration::from_secs(30);
/// A consumer fenced again within this long of being made waits longer
/// (doubling) before the next: two nodes configured with one node id fence
/// each other in turn, and must not do it every second.
const REBUILT_STABLE: Duration = Duration::from_secs(60);
/// One poll's wait; also how often a fatal error is looked for.
const POLL_WAIT: Duration = Duration::from_secs(1);

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
    /// Shared by every consumer made for this member (a rebuilt one too).
    assignment: Arc<watch::Sender<Assignment>>,
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

/// The consumer a member uses now (made again after a fatal error).
type ConsumerSlot = Arc<parking_lot::RwLock<Arc<StreamConsumer<GroupContext>>>>;

/// A member of a replica group's consumer group.
pub(super) struct GroupMember {
    consumer: ConsumerSlot,
    topic_prefix: String,
    sources: Arc<super::sources::Sources>,
    assignment: watch::Receiver<Assignment>,
    /// The topics subscribed to; re-subscribing only when this changes.
    followed: Arc<Mutex<BTreeSet<String>>>,
}

/// Everything needed to make the member's consumer (again).
#[derive(Clone)]
struct Recipe {
    config: ClientConfig,
    topic_prefix: String,
    sources: Arc<super::sources::Sources>,
    assignment: Arc<watch::Sender<Assignment>>,
}

impl Recipe {
    fn make(&self) -> Result<StreamConsumer<GroupContext>, LogError> {
        let context = GroupContext { topic_prefix: self.topic_prefix.clone(), sources: self.sources.clone(), assignment: self.assignment.clone() };
        self.config.create_with_context(context).map_err(|e| LogError::Unavailable(format!("kafka: {e}")))
    }
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
        let session_ms = session_timeout.as_millis().max(1);
        let mut config = base.clone();
        config
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
            .set("enable.partition.eof", "false");
        let recipe = Recipe { config, topic_prefix: topic_prefix.to_string(), sources: sources.clone(), assignment: Arc::new(sender) };
        let consumer: ConsumerSlot = Arc::new(parking_lot::RwLock::new(Arc::new(recipe.make()?)));
        let followed = Arc::new(Mutex::new(BTreeSet::new()));
        tokio::spawn(poll(Arc::downgrade(&consumer), recipe, followed.clone()));
        Ok(GroupMember { consumer, topic_prefix: topic_prefix.to_string(), sources, assignment: receiver, followed })
    }

    /// Runs `look` on the client of the consumer the member uses now (for
    /// `rebootstrap.rs`), under the lock: a clone could be the last handle,
    /// closed here and not where `rebuild` awaits it.
    pub(super) fn with_client<R>(&self, look: impl FnOnce(&rdkafka::client::Client<GroupContext>) -> R) -> R {
        look(self.consumer.read().client())
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
        match self.consumer.read().subscribe(&names) {
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
        if let Err(e) = self.consumer.read().commit(&committed, CommitMode::Async) {
            tracing::debug!(%tp, error = %e, "replica group offset commit (for lag monitoring) failed");
        }
    }
}

/// Polls the member's consumer (polling serves the rebalance callbacks; a
/// message can only slip through between an assignment and its pause:
/// dropped), and makes it again after a fatal error. Ends with the member.
async fn poll(slot: std::sync::Weak<parking_lot::RwLock<Arc<StreamConsumer<GroupContext>>>>, recipe: Recipe, followed: Arc<Mutex<BTreeSet<String>>>) {
    let mut wait = REBUILD_WAIT_MIN;
    let mut rebuilt_at: Option<std::time::Instant> = None;
    loop {
        let Some(consumer) = slot.upgrade().map(|slot| slot.read().clone()) else { return };
        let polled = tokio::time::timeout(POLL_WAIT, consumer.recv()).await;
        // A fatal error reaches the error callback, not `recv`: looked for
        // every turn (so at most `POLL_WAIT` after it happened).
        if let Some((code, reason)) = consumer.client().fatal_error() {
            tracing::error!(?code, %reason, wait_ms = wait.as_millis() as u64, "the replica group consumer failed for good (fenced: \
                another node with this node id, or the coordinator lost track of it); assigned nothing until it is made again");
            // Assigned nothing meanwhile: another member may hold its partitions now.
            recipe.assignment.send_replace(Assignment::Pending);
            drop(consumer);
            wait = match rebuilt_at {
                Some(at) if at.elapsed() < REBUILT_STABLE => (wait * 2).min(REBUILD_WAIT_MAX),
                _ => REBUILD_WAIT_MIN,
            };
            if !rebuild(&slot, &recipe, &followed, wait).await {
                return;
            }
            rebuilt_at = Some(std::time::Instant::now());
            continue;
        }
        if let Ok(Err(e)) = polled {
            tracing::warn!(error = %e, "replica group consumer error");
            drop(consumer);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Makes the consumer again (bounded backoff) and subscribes it to the
/// followed topics; false if the member is gone meanwhile.
async fn rebuild(
    slot: &std::sync::Weak<parking_lot::RwLock<Arc<StreamConsumer<GroupContext>>>>,
    recipe: &Recipe,
    followed: &Mutex<BTreeSet<String>>,
    mut wait: Duration,
) -> bool {
    loop {
        tokio::time::sleep(wait).await;
        let Some(slot) = slot.upgrade() else { return false };
        // Held until the new consumer is in the slot: a `follow` meanwhile
        // would subscribe the old one and be lost.
        let replaced = {
            let topics = followed.lock();
            recipe.make().and_then(|consumer| {
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                if !names.is_empty() {
                    consumer.subscribe(&names).map_err(|e| LogError::Unavailable(format!("kafka: {e}")))?;
                }
                Ok(std::mem::replace(&mut *slot.write(), Arc::new(consumer)))
            })
        };
        match replaced {
            Ok(old) => {
                // Closing the failed consumer polls until it is closed:
                // not on a runtime worker. Awaited, so that its last
                // callbacks (a revoke of what it held) run before the new
                // one is polled and assigned anything.
                let _ = tokio::task::spawn_blocking(move || drop(old)).await;
                crate::metrics::GROUP_CONSUMER_REBUILT.inc();
                tracing::info!("the replica group consumer is made again; rejoining the group");
                return true;
            }
            Err(e) => {
                tracing::warn!(error = %e, wait_ms = wait.as_millis() as u64, "making the replica group consumer again failed; retrying");
                wait = (wait * 2).min(REBUILD_WAIT_MAX);
            }
        }
    }
}
