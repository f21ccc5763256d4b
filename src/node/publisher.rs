//! The outbox publisher: relays each held partition's procedure outputs
//! (its outbox, `\0\0#o<offset><index>` in the store) to their Kafka output
//! topics, exactly once (docs/procedures.md, "The outbox").
//!
//! One task per held partition with procedures or an outbox. It reads the
//! outbox from the position the log's publisher committed last
//! (`Publisher::position`), in batches of at most `BATCH_MESSAGES_MAX`
//! messages and `BATCH_BYTES_MAX` bytes (the first message always), and
//! commits each batch with the position after it in one Kafka transaction
//! (`log/kafka/publisher.rs`). A crash anywhere repeats at most an aborted
//! batch, which nobody saw.
//!
//! Trimming: the outbox is part of the partition's state (hashed, in
//! snapshots), so replicas must drop published messages alike. Once per
//! `TRIM_INTERVAL`, while published messages are still stored, the
//! publisher appends a tick that says "published below offset N"
//! (`codec::encode_trim`); every replica deletes them when it applies that
//! entry. Nothing unpublished is ever trimmed: N is the committed position.
//!
//! Owns: the per-partition tasks. Never: writes the store (trims go
//! through the log), decides what a procedure emits.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::reserved::Writer;
use super::write::{Entry, WriteRequest};
use super::Node;
use crate::log::Outgoing;
use crate::partition::PartitionHandle;
use crate::procedure::outbox::OutboxMessage;

/// How often the node looks for held partitions that need a publisher.
pub(super) const ROUND_INTERVAL: Duration = Duration::from_millis(500);
/// Most messages in one transaction.
const BATCH_MESSAGES_MAX: usize = 5_000;
/// Most bytes of messages in one transaction (the first message always
/// goes: a dead letter is up to 7 MiB): what one batch holds in memory.
const BATCH_BYTES_MAX: usize = 64 << 20;
/// Longest an idle publisher waits for the partition to apply something.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Trim ticks are appended at most this often per partition.
const TRIM_INTERVAL: Duration = Duration::from_secs(1);
/// A failed publisher starts again after this, doubling up to `RETRY_WAIT_MAX`.
const RETRY_WAIT_MIN: Duration = Duration::from_millis(100);
const RETRY_WAIT_MAX: Duration = Duration::from_secs(5);
/// The unpublished-messages gauge counts up to this (a bounded scan).
const UNPUBLISHED_COUNTED_MAX: usize = 100_000;
/// While a backlog drains (batches cut short), the gauge is counted again
/// at most this often: the scan reads the messages' pages, up to 100,000
/// messages of up to 7 MiB.
const UNPUBLISHED_RECOUNT_INTERVAL: Duration = Duration::from_secs(1);

/// One publisher task per held partition with an outbox; bounded by the
/// partitions this node holds.
#[derive(Default)]
pub(super) struct Publishers {
    tasks: parking_lot::Mutex<std::collections::HashMap<crate::log::TopicPartition, tokio::task::JoinHandle<()>>>,
}

impl Node {
    /// Starts a publisher for every held partition that has procedures or
    /// outbox messages and none running.
    pub(super) fn start_publishers(self: &Arc<Self>) {
        let mut publishers = self.publishers.tasks.lock();
        publishers.retain(|_, task| !task.is_finished());
        for namespace in self.namespaces() {
            for handle in &namespace.handles {
                if !handle.is_held() || publishers.contains_key(&handle.tp) || !needs_publisher(handle) {
                    continue;
                }
                let task = run(Arc::downgrade(self), handle.clone(), namespace.partitions, self.tasks.shutdown.subscribe());
                publishers.insert(handle.tp.clone(), tokio::spawn(task));
            }
        }
    }
}

impl Node {
    /// Whether this node relays outboxes to Kafka (and so trims them): its
    /// log has output topics and `procedure_publish` is on. Where not, the
    /// outboxes are read and trimmed through the API.
    pub fn publishes_outboxes(&self) -> bool {
        self.config.procedure_publish && self.log.has_output_topics()
    }

    /// Whether this node runs the outbox publisher of `tp`.
    pub fn publishes(&self, tp: &crate::log::TopicPartition) -> bool {
        self.publishers.tasks.lock().get(tp).is_some_and(|task| !task.is_finished())
    }
}

fn needs_publisher(handle: &PartitionHandle) -> bool {
    let Ok(view) = handle.read_view() else { return false };
    view.reader.has_procedures().unwrap_or(false) || view.reader.outbox_len(1).map(|n| n > 0).unwrap_or(false)
}

/// Publishes while the partition is held, starting again after a failure.
async fn run(node: Weak<Node>, handle: Arc<PartitionHandle>, partitions: u32, mut shutdown: watch::Receiver<bool>) {
    let mut retry_wait = RETRY_WAIT_MIN;
    loop {
        let Some(strong) = node.upgrade() else { return };
        if !handle.is_held() || *shutdown.borrow() {
            return;
        }
        match publish_while_held(&strong, &handle, partitions, &shutdown).await {
            Ok(()) => return,
            Err(e) => {
                crate::metrics::OUTBOX_PUBLISH_ERRORS.with_label_values(&[&handle.tp.topic]).inc();
                tracing::warn!(tp = %handle.tp, error = %e, retry_in = ?retry_wait, "the outbox publisher failed; its batch is not visible and is published again");
            }
        }
        drop(strong);
        tokio::select! {
            _ = tokio::time::sleep(retry_wait) => {}
            _ = shutdown.changed() => return,
        }
        retry_wait = (retry_wait * 2).min(RETRY_WAIT_MAX);
    }
}

async fn publish_while_held(
    node: &Arc<Node>,
    handle: &Arc<PartitionHandle>,
    partitions: u32,
    shutdown: &watch::Receiver<bool>,
) -> Result<(), String> {
    let mut publisher = node.log.publisher(&handle.tp, partitions).await.map_err(|e| e.to_string())?;
    let mut position = publisher.position().await.map_err(|e| e.to_string())?;
    tracing::info!(tp = %handle.tp, offset = position.0, index = position.1, "outbox publisher started");
    let partition = handle.partition.to_string();
    let unpublished = crate::metrics::OUTBOX_UNPUBLISHED.with_label_values(&[handle.tp.topic.as_ref(), partition.as_str()]);
    let published = crate::metrics::OUTBOX_PUBLISHED.with_label_values(&[&handle.tp.topic]);
    let seconds = crate::metrics::OUTBOX_PUBLISH_SECONDS.with_label_values(&[&handle.tp.topic]);
    let mut trimmed_at: Option<Instant> = None;
    let mut counted_at: Option<Instant> = None;
    // At most one trim in flight, beside the transactions (a trim is a
    // sequenced write: waiting for it held the next transaction back).
    let mut trimming = Trimming(None);
    loop {
        if !handle.is_held() || *shutdown.borrow() {
            return Ok(());
        }
        let applied = handle.applied_next();
        let recount_due = counted_at.is_none_or(|at| at.elapsed() >= UNPUBLISHED_RECOUNT_INTERVAL);
        let batch = read_batch(handle, position, recount_due).map_err(|e| e.to_string())?;
        match batch.unpublished {
            Unpublished::All(n) => unpublished.set(n as i64),
            Unpublished::Counted(n) => {
                unpublished.set(n as i64);
                counted_at = Some(Instant::now());
            }
            // A backlog counted less than a second ago: the gauge keeps that count.
            Unpublished::NotCounted => {}
        }
        if let Some(next) = batch.next {
            let started = Instant::now();
            let count = batch.messages.len() as u64;
            publisher.publish(batch.messages, next).await.map_err(|e| e.to_string())?;
            seconds.observe(started.elapsed().as_secs_f64());
            published.inc_by(count);
            position = next;
        }
        // Published below: the position's offset, or, when nothing from the
        // position on was unpublished, every input applied (the last
        // offset's messages all came in one transaction with it).
        let published_below = if batch.next.is_none() { batch.applied_next.max(position.0) } else { position.0 };
        let trim_due = trimmed_at.is_none_or(|at| at.elapsed() >= TRIM_INTERVAL) && trimming.idle();
        if trim_due && batch.oldest_stored.is_some_and(|oldest| oldest < published_below) {
            let (node, handle) = (node.clone(), handle.clone());
            trimming.0 = Some(tokio::spawn(async move { append_trim(&node, &handle, published_below).await }));
            trimmed_at = Some(Instant::now());
        }
        if batch.next.is_none() {
            handle.wait_applied(applied + 1, IDLE_WAIT).await;
        }
    }
}

/// The trim in flight, if any; aborted when its publisher stops (a trim is
/// idempotent: one cut short is made again by the next publisher).
struct Trimming(Option<tokio::task::JoinHandle<()>>);

impl Trimming {
    fn idle(&self) -> bool {
        self.0.as_ref().is_none_or(|task| task.is_finished())
    }
}

impl Drop for Trimming {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// The next messages to publish, read from one snapshot of the store.
struct Batch {
    messages: Vec<Outgoing>,
    /// The position after them (None: nothing to publish).
    next: Option<(u64, u32)>,
    /// Messages from the position on.
    unpublished: Unpublished,
    /// The input offset of the oldest message still stored.
    oldest_stored: Option<u64>,
    /// The store's applied position in the same snapshot.
    applied_next: u64,
}

/// How many messages wait, as one batch's read tells.
enum Unpublished {
    /// The batch holds them all.
    All(usize),
    /// The batch was cut short; counted (up to `UNPUBLISHED_COUNTED_MAX`).
    Counted(usize),
    /// The batch was cut short; not counted this time.
    NotCounted,
}

/// Every stored message is under half a batch's bytes (a dead letter is
/// at most `DEAD_LETTER_BYTES_MAX`), so a batch cut by its bytes holds over
/// half of them: one that does not was not cut.
const _: () = assert!(crate::procedure::DEAD_LETTER_BYTES_MAX < BATCH_BYTES_MAX / 2);

fn read_batch(handle: &PartitionHandle, (offset, index): (u64, u32), recount_due: bool) -> Result<Batch, crate::store::StoreError> {
    let view = handle.read_view()?;
    let applied_next = view.reader.state()?.applied_next;
    let oldest_stored = view.reader.outbox_oldest_offset()?;
    let entries = view.reader.outbox_from(offset, index, BATCH_MESSAGES_MAX, BATCH_BYTES_MAX)?;
    let bytes: usize = entries.iter().map(|e| e.message.len()).sum();
    let unpublished = match entries.len() < BATCH_MESSAGES_MAX && bytes <= BATCH_BYTES_MAX / 2 {
        true => Unpublished::All(entries.len()),
        false if recount_due => Unpublished::Counted(view.reader.outbox_count_from(offset, index, UNPUBLISHED_COUNTED_MAX)?),
        false => Unpublished::NotCounted,
    };
    let next = entries.last().map(|e| (e.offset, e.index + 1));
    let mut messages = Vec::with_capacity(entries.len());
    for entry in entries {
        // Written by `procedure::put_outbox`; one that does not decode is a
        // bug, not input: stop rather than skip an output silently.
        let message = OutboxMessage::decode(&entry.message)
            .unwrap_or_else(|| panic!("{}: outbox message {}.{} does not decode", handle.tp, entry.offset, entry.index));
        let id = format!("{}/{}/{}.{}", handle.tp.topic, handle.partition, entry.offset, entry.index);
        messages.push(Outgoing { topic: message.topic, key: message.key, value: message.value, id });
    }
    Ok(Batch { messages, next, unpublished, oldest_stored, applied_next })
}

/// Appends the tick that trims the outbox below `offset` on every replica.
/// Its time is 0: it does not move the log time (a source topic's records
/// may carry times far from this node's clock; only they and idle ticks move it).
async fn append_trim(node: &Node, handle: &PartitionHandle, offset: u64) {
    // The namespace of this very handle: one created again under the name
    // has outboxes of its own, which this offset says nothing about.
    let Some(namespace) = node.namespace(&handle.tp.topic) else { return };
    if handle.is_closed() || !namespace.handles.get(handle.partition as usize).is_some_and(|held| std::ptr::eq(held.as_ref(), handle)) {
        return;
    }
    let trim = WriteRequest::new(Writer::Procedures, handle.partition, Entry::OutboxTrim { below: offset });
    if let Err(e) = node.write_sequenced(&namespace, trim).await {
        tracing::debug!(tp = %handle.tp, error = %e, "appending an outbox trim failed; the next one tries again");
    }
}
