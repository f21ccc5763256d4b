//! The sequencer: appends journaled writes to the log (issue 19).
//!
//! A journaled write is answered once it is durable in this node's journal
//! (`Node::write`, `write.rs`); this task then appends it to the log, in
//! journal order per partition, at once (woken by each journaled write),
//! and releases journal entries once their writes were seen applied — by
//! this node if it applies the partition, else by another member
//! (`Node::set_applied_elsewhere`). A restarted node starts from what its
//! journal did not release: an entry appended before the stop but not seen
//! applied is appended again, and applied once (its write id).
//!
//! When the log refuses an append (down, slow), the partition's lane waits
//! (`RETRY_WAIT_MIN` doubling to `RETRY_WAIT_MAX`) and tries the same entry
//! again: nothing is skipped, nothing reordered; the journal's bounds stop
//! new journaled writes if the outage outlasts them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::Notify;

use super::Node;
use crate::log::LogReader;

/// Entries one lane appends per round before the next lane's turn.
const ENTRIES_PER_ROUND_MAX: usize = 256;
/// Appends of one lane handed to the log at once (the log batches them:
/// Kafka's producer into one request per `linger`, the embedded log into
/// one fsync).
const APPENDS_IN_FLIGHT_MAX: usize = 256;
/// Appended entries a lane remembers until they are seen applied; at the
/// bound it appends no more until some are.
const IN_FLIGHT_MAX: usize = 65_536;
/// How often the sequencer looks without being woken (releases, retries).
const TICK: Duration = Duration::from_millis(50);
/// Release is a small fsynced file write: at most this often per lane.
const RELEASE_INTERVAL: Duration = Duration::from_millis(200);
/// Released journal objects (object storage) are deleted at most this often.
const OBJECTS_DELETE_INTERVAL: Duration = Duration::from_secs(1);
const RETRY_WAIT_MIN: Duration = Duration::from_millis(50);
const RETRY_WAIT_MAX: Duration = Duration::from_secs(2);

/// One partition's journal on its way to the log.
struct Lane {
    /// The next journal offset to append.
    next: u64,
    reader: Option<Box<dyn LogReader>>,
    /// (journal offset, log offset) of appended entries not yet seen applied.
    in_flight: VecDeque<(u64, u64)>,
    /// Journal offsets below this are seen applied but not yet released.
    releasable: u64,
    released_at: Instant,
    /// After a refused append: no new try before this.
    retry_at: Option<Instant>,
    retry_wait: Duration,
}

pub(super) async fn run(node: Weak<Node>, wake: Arc<Notify>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut lanes: HashMap<(String, u32), Lane> = HashMap::new();
    let mut busy = false;
    let mut objects_deleted_at = Instant::now();
    loop {
        // A round that left entries to append goes on at once (draining a
        // backlog is not paced by the tick); else it waits to be woken.
        if !busy {
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => return,
            }
        } else if *shutdown.borrow() {
            return;
        }
        let Some(node) = node.upgrade() else { return };
        busy = match round(&node, &mut lanes).await {
            Ok(busy) => busy,
            Err(e) => {
                tracing::warn!(error = %e, "the sequencer's round failed; retrying");
                false
            }
        };
        if objects_deleted_at.elapsed() >= OBJECTS_DELETE_INTERVAL {
            objects_deleted_at = Instant::now();
            if let Err(e) = node.journal.delete_released_objects().await {
                tracing::warn!(error = %e, "deleting released journal objects failed; retrying");
            }
        }
        // Let other tasks run between back-to-back rounds.
        tokio::task::yield_now().await;
    }
}

/// Appends what each lane may, then releases what was seen applied; the
/// lanes run concurrently, so a partition whose appends wait on the log
/// (its leader down) holds back no other.
/// Returns whether some lane appended and has more to append.
async fn round(node: &Node, lanes: &mut HashMap<(String, u32), Lane>) -> Result<bool, crate::journal::JournalError> {
    let pending = node.journal.pending().await?;
    lanes.retain(|key, _| pending.iter().any(|p| (p.ns.as_str(), p.partition) == (key.0.as_str(), key.1)));
    let mut work = HashMap::new();
    for p in pending {
        let Some(namespace) = node.namespace(&p.ns) else { continue };
        if p.partition >= namespace.partitions {
            continue;
        }
        let key = (p.ns.clone(), p.partition);
        lanes.entry(key.clone()).or_insert_with(|| Lane {
            next: p.start,
            reader: None,
            in_flight: VecDeque::new(),
            releasable: p.start,
            released_at: Instant::now(),
            retry_at: None,
            retry_wait: RETRY_WAIT_MIN,
        });
        work.insert(key, (p, namespace));
    }
    let rounds: Vec<_> =
        lanes.iter_mut().filter_map(|(key, lane)| work.remove(key).map(|(p, namespace)| lane_round(node, p, namespace, lane))).collect();
    let mut busy = false;
    for result in futures::future::join_all(rounds).await {
        busy |= result?;
    }
    Ok(busy)
}

/// One lane's turn: append, then release. Returns whether it has more to append now.
async fn lane_round(
    node: &Node,
    p: crate::journal::Pending,
    namespace: Arc<crate::partition::Namespace>,
    lane: &mut Lane,
) -> Result<bool, crate::journal::JournalError> {
    lane.next = lane.next.max(p.start);
    let appended = append(node, &namespace, p.partition, lane, p.end).await?;
    let busy = appended > 0 && lane.next < p.end && lane.in_flight.len() < IN_FLIGHT_MAX;
    release(node, &namespace, p.partition, lane, p.end)?;
    Ok(busy)
}

/// Appends journal entries `[lane.next, end)` to the log, in order, up to
/// `ENTRIES_PER_ROUND_MAX` of them, `APPENDS_IN_FLIGHT_MAX` at a time;
/// returns how many the log took.
///
/// The appends are issued in journal order (each is handed to the log, in
/// order, before the next; both logs keep the order they were handed
/// entries in: the embedded log's queue is FIFO, Kafka's idempotent
/// producer keeps a partition's order across its retries). Results are
/// taken in order: at the first refusal the lane stops there and tries that
/// entry again later; entries after it that the log did take are appended
/// again then, and applied once (their write ids).
async fn append(
    node: &Node,
    namespace: &crate::partition::Namespace,
    partition: u32,
    lane: &mut Lane,
    end: u64,
) -> Result<usize, crate::journal::JournalError> {
    if lane.next >= end || lane.in_flight.len() >= IN_FLIGHT_MAX || lane.retry_at.is_some_and(|at| Instant::now() < at) {
        return Ok(0);
    }
    if lane.reader.is_none() {
        lane.reader = Some(node.journal.reader(&namespace.name, partition, lane.next).await?);
    }
    let reader = lane.reader.as_mut().expect("opened above");
    let entries = reader.next_batch(ENTRIES_PER_ROUND_MAX.min(IN_FLIGHT_MAX - lane.in_flight.len()), Duration::ZERO).await?;
    let tp = &namespace.handle(partition).tp;
    let log = node.log.as_ref();
    // Collected first: a stream over a borrowing closure is not `Send` to the compiler.
    let appends: Vec<_> = entries.iter().map(|entry| super::write::append(log, tp, entry.payload.clone())).collect();
    let mut results = futures::stream::iter(appends).buffered(APPENDS_IN_FLIGHT_MAX);
    let mut appended = 0;
    let mut at = 0;
    while let Some(result) = results.next().await {
        let entry = &entries[at];
        at += 1;
        assert_eq!(entry.offset, lane.next, "journal entries are read in order, none skipped");
        match result {
            Ok(log_offset) => {
                lane.in_flight.push_back((entry.offset, log_offset));
                lane.next = entry.offset + 1;
                lane.retry_wait = RETRY_WAIT_MIN;
                lane.retry_at = None;
                appended += 1;
                crate::metrics::JOURNAL_SEQUENCED.inc();
            }
            Err(e) => {
                tracing::warn!(tp = %tp, journal_offset = entry.offset, error = %e, wait_ms = lane.retry_wait.as_millis() as u64, "the log refused a journaled write; it stays journaled and is tried again");
                lane.retry_at = Some(Instant::now() + lane.retry_wait);
                lane.retry_wait = (lane.retry_wait * 2).min(RETRY_WAIT_MAX);
                // The reader is past the entries not appended: read them again.
                lane.reader = None;
                break;
            }
        }
    }
    if appended > 0 {
        node.log_took();
    }
    Ok(appended)
}

/// Releases the journal entries whose writes were seen applied.
fn release(
    node: &Node,
    namespace: &crate::partition::Namespace,
    partition: u32,
    lane: &mut Lane,
    end: u64,
) -> Result<(), crate::journal::JournalError> {
    let applied_next = node.applied_next(&namespace.name, partition);
    while let Some(&(journal_offset, log_offset)) = lane.in_flight.front() {
        if log_offset >= applied_next {
            break;
        }
        lane.in_flight.pop_front();
        lane.releasable = journal_offset + 1;
    }
    let all_applied = lane.releasable >= end;
    if lane.releasable > 0 && (all_applied || lane.released_at.elapsed() >= RELEASE_INTERVAL) {
        node.journal.release_below(&namespace.name, partition, lane.releasable)?;
        lane.released_at = Instant::now();
    }
    Ok(())
}
