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

use super::ripcord_host::RipcordHost;
use super::Node;
use crate::log::{LogReader, TopicPartition};

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
/// The released marks go to disk (a small fsynced file write, for every
/// lane at once) at most this often; a restart replays what was released
/// since (appended again, applied once).
const RELEASE_INTERVAL: Duration = Duration::from_millis(200);
/// Released journal objects (object storage) are deleted at most this often.
const OBJECTS_DELETE_INTERVAL: Duration = Duration::from_secs(1);
const RETRY_WAIT_MIN: Duration = Duration::from_millis(50);
const RETRY_WAIT_MAX: Duration = Duration::from_secs(2);

/// One partition's journal on its way to the log.
pub(crate) struct Lane {
    /// The next journal offset to append.
    next: u64,
    reader: Option<Box<dyn LogReader>>,
    /// (journal offset, log offset) of appended entries not yet seen applied.
    in_flight: VecDeque<(u64, u64)>,
    /// Journal offsets below this are seen applied (and released).
    releasable: u64,
    /// After a refused append: no new try before this.
    retry_at: Option<Instant>,
    retry_wait: Duration,
}

impl Lane {
    /// A lane whose entries below `start` are released.
    pub(crate) fn starting_at(start: u64) -> Lane {
        Lane { next: start, reader: None, in_flight: VecDeque::new(), releasable: start, retry_at: None, retry_wait: RETRY_WAIT_MIN }
    }
}

/// A lane's task, and what wakes it.
struct Worker {
    wake: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

/// The sequencer: starts a task per journal lane with entries to append
/// (issue 36, defect 3: each lane goes at its own pace, so a partition
/// whose appends wait on the log — its leader cut off — holds back no
/// other; they used to share rounds that waited for every lane), wakes
/// them; a task of its own writes the released marks and deletes
/// released journal objects (`keep_journal`). Bound: one task per
/// partition with journaled writes not yet released.
pub(super) async fn run(node: Weak<Node>, wake: Arc<Notify>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut workers: HashMap<(String, u32), Worker> = HashMap::new();
    let keeper = tokio::spawn(keep_journal(node.clone(), shutdown.clone()));
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => break,
        }
        if *shutdown.borrow() {
            break;
        }
        let Some(strong) = node.upgrade() else { break };
        match strong.journal.pending().await {
            Ok(pending) => {
                workers.retain(|_, worker| !worker.task.is_finished());
                for p in pending {
                    let key = (p.ns.clone(), p.partition);
                    let worker = workers.entry(key).or_insert_with(|| {
                        let wake = Arc::new(Notify::new());
                        let task = tokio::spawn(lane_worker(node.clone(), p.ns.clone(), p.partition, wake.clone(), shutdown.clone()));
                        Worker { wake, task }
                    });
                    worker.wake.notify_one();
                }
            }
            Err(e) => tracing::warn!(error = %e, "the sequencer could not read what the journal holds; retrying"),
        }
    }
    keeper.abort();
    for worker in workers.into_values() {
        worker.task.abort();
    }
}

/// Writes the journal's released marks every `RELEASE_INTERVAL` and
/// deletes its released objects every `OBJECTS_DELETE_INTERVAL`, apart
/// from the sequencer's loop, so that no journaled write waits for an
/// fsync or an object store to be woken.
async fn keep_journal(node: Weak<Node>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut objects_deleted_at = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RELEASE_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
        let Some(node) = node.upgrade() else { return };
        if let Err(e) = node.journal.persist_released().await {
            tracing::warn!(error = %e, "writing the journal's released marks (or deleting its released segments) failed; retrying");
        }
        if objects_deleted_at.elapsed() >= OBJECTS_DELETE_INTERVAL {
            objects_deleted_at = Instant::now();
            if let Err(e) = node.journal.delete_released_objects().await {
                tracing::warn!(error = %e, "deleting released journal objects failed; retrying");
            }
        }
    }
}

/// One lane's task: appends its entries in journal order and releases
/// what was seen applied, until nothing of the lane is left unreleased.
async fn lane_worker(node: Weak<Node>, ns: String, partition: u32, wake: Arc<Notify>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut lane: Option<Lane> = None;
    let mut busy = false;
    loop {
        // A turn that left entries to append goes on at once (draining a
        // backlog is not paced by the tick); else it waits to be woken.
        if !busy {
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => return,
            }
        }
        if *shutdown.borrow() {
            return;
        }
        let Some(node) = node.upgrade() else { return };
        let p = match node.journal.pending_of(&ns, partition).await {
            Ok(Some(p)) => p,
            // Everything released: nothing in flight, the task is done.
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(ns, partition, error = %e, "the sequencer could not read the lane; retrying");
                busy = false;
                continue;
            }
        };
        let Some(tp) = node.topic_partition(&ns, partition) else { return };
        let lane = lane.get_or_insert_with(|| Lane::starting_at(p.start));
        busy = match lane_round(node.as_ref(), p, &tp, lane).await {
            Ok(busy) => busy,
            Err(e) => {
                tracing::warn!(ns, partition, error = %e, "the sequencer's turn failed; retrying");
                false
            }
        };
        drop(node);
        // Let other tasks run between back-to-back turns.
        tokio::task::yield_now().await;
    }
}

/// One lane's turn (`p`: what the journal holds of the lane; `tp`: its
/// partition in the log): append, then release. Returns whether it has
/// more to append now.
pub(crate) async fn lane_round(
    host: &dyn RipcordHost,
    p: crate::journal::Pending,
    tp: &TopicPartition,
    lane: &mut Lane,
) -> Result<bool, crate::journal::JournalError> {
    lane.next = lane.next.max(p.start);
    // Every entry of the lane below its released mark was seen applied.
    let Some(name) = host.journal().lane(&p.ns) else { return Ok(false) };
    let place = |offset: u64, gap_from: Option<u64>| crate::codec::JournalPlace { lane: name.clone(), offset, from: p.start, gap_from };
    let appended = append(host, &p.ns, tp, lane, p.end, &place).await?;
    let busy = appended > 0 && lane.next < p.end && lane.in_flight.len() < IN_FLIGHT_MAX;
    release(host, &p.ns, p.partition, lane);
    Ok(busy)
}

/// Appends journal entries `[lane.next, end)` to the log, in order, up to
/// `ENTRIES_PER_ROUND_MAX` of them, `APPENDS_IN_FLIGHT_MAX` at a time;
/// returns how many the log took.
///
/// Each entry carries its place in the journal (`JournalPlace`: the lane,
/// its offset, the lane's released mark), and the apply loop applies a
/// lane's entries in lane order, each once (`apply::batch`).
///
/// The appends are issued in journal order (each is handed to the log, in
/// order, before the next; both logs keep the order they were handed
/// entries in: the embedded log's queue is FIFO, Kafka's idempotent
/// producer keeps a partition's order across its retries). Results are
/// taken in order: at the first refusal — or an offset not above the one
/// before, which no log should give — the lane stops there and tries that
/// entry again later. Entries after it that the log did take are ahead of
/// their lane where they landed, so not applied there; they are appended
/// again after the retried one, and applied then, once (issue 36, defect 4:
/// they used to apply before it, out of journal order).
async fn append(
    host: &dyn RipcordHost,
    ns: &str,
    tp: &TopicPartition,
    lane: &mut Lane,
    end: u64,
    place: &(dyn Fn(u64, Option<u64>) -> crate::codec::JournalPlace + Sync),
) -> Result<usize, crate::journal::JournalError> {
    let partition = tp.partition;
    if lane.next >= end || lane.in_flight.len() >= IN_FLIGHT_MAX || lane.retry_at.is_some_and(|at| host.now() < at) {
        return Ok(0);
    }
    if lane.reader.is_none() {
        lane.reader = Some(host.journal().reader(ns, partition, lane.next).await?);
    }
    let reader = lane.reader.as_mut().expect("opened above");
    let entries = reader.next_batch(ENTRIES_PER_ROUND_MAX.min(IN_FLIGHT_MAX - lane.in_flight.len()), Duration::ZERO).await?;
    let log = host.log();
    // Collected first: a stream over a borrowing closure is not `Send` to the compiler.
    let mut expected = lane.next;
    let mut payloads = Vec::with_capacity(entries.len());
    for entry in &entries {
        payloads.push(placed(&entry.payload, &place(entry.offset, gap_before(host, ns, partition, expected, entry.offset))));
        expected = entry.offset + 1;
    }
    let appends: Vec<_> = payloads.into_iter().map(|payload| super::write::append(log, tp, payload)).collect();
    let mut results = futures::stream::iter(appends).buffered(APPENDS_IN_FLIGHT_MAX);
    let mut appended = 0;
    let mut at = 0;
    while let Some(result) = results.next().await {
        let entry = &entries[at];
        at += 1;
        assert!(
            entry.offset == lane.next || host.journal().gap_accepted(ns, partition, lane.next, entry.offset),
            "journal entries are read in order, none skipped but those whose loss was accepted"
        );
        // The log gave an offset not above the last one appended: taken as
        // a refusal, so that released entries are always applied in order.
        let result = match result {
            Ok(log_offset) if lane.in_flight.back().is_some_and(|&(_, last)| log_offset <= last) => {
                Err(crate::log::LogError::Unavailable(format!("the log put journal entry {} at {log_offset}, not after the last", entry.offset)))
            }
            other => other,
        };
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
                // Its partition's log refuses writes: ripcord journals the
                // partition's plain writes at once meanwhile.
                host.log_refused(ns, partition);
                lane.retry_at = Some(host.now() + lane.retry_wait);
                lane.retry_wait = (lane.retry_wait * 2).min(RETRY_WAIT_MAX);
                // The reader is past the entries not appended: read them again.
                lane.reader = None;
                break;
            }
        }
    }
    if appended > 0 {
        host.log_took(ns, partition);
    }
    Ok(appended)
}

/// Where the gap before the journal entry at `offset` starts, when the
/// entries `expected..offset` are missing: the reader goes past lost
/// entries only when their loss was accepted (`--accept-journal-loss`),
/// and stores then take the entry as the lane's next once they reached
/// `expected` (`JournalPlace::decide`).
fn gap_before(host: &dyn RipcordHost, ns: &str, partition: u32, expected: u64, offset: u64) -> Option<u64> {
    if offset == expected {
        return None;
    }
    assert!(
        offset > expected && host.journal().gap_accepted(ns, partition, expected, offset),
        "the journal's reader skips only lost entries whose loss was accepted: {ns}/{partition} {expected}..{offset}"
    );
    Some(expected)
}

/// A journal entry with its place set. One that does not decode (the
/// journal damaged) goes as it is: every replica skips it alike as
/// malformed, and the lane goes on (held back, it would stop the lane).
fn placed(payload: &bytes::Bytes, place: &crate::codec::JournalPlace) -> bytes::Bytes {
    crate::codec::with_journal_place(payload, place).unwrap_or_else(|e| {
        tracing::error!(journal_offset = place.offset, error = %e, "a journal entry does not decode; appended as it is, to be skipped");
        payload.clone()
    })
}

/// Releases the journal entries whose writes were seen applied (in
/// memory; `Journal::persist_released` writes the marks).
fn release(host: &dyn RipcordHost, ns: &str, partition: u32, lane: &mut Lane) {
    let applied_next = host.applied_next(ns, partition);
    let before = lane.releasable;
    while let Some(&(journal_offset, log_offset)) = lane.in_flight.front() {
        if log_offset >= applied_next {
            break;
        }
        lane.in_flight.pop_front();
        lane.releasable = journal_offset + 1;
    }
    if lane.releasable > before {
        host.journal().release_below(ns, partition, lane.releasable);
    }
}
