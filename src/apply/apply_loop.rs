//! The apply loop of one partition (`run`): open (`open.rs`), then read
//! batches from the log and apply them (`batch.rs`), commit each with its
//! offset, advance the offset, outcomes and events, until told to stop.

use super::stuck_reader::{StuckWatch, READER_STUCK};
use super::Recovery;
use super::{batch, open, rebuild};
use crate::fanout::Event;
use crate::log::{Log, LogError};
use crate::metrics;
use crate::partition::Outcome;
use crate::partition::{PartitionHandle, PartitionStatus};
use crate::procedure::Procedures;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct ApplyConfig {
    /// Most entries applied by one store transaction.
    pub batch_entries_max: usize,
    /// How often the store is made durable (and the log told what it may drop).
    pub fsync_interval: Duration,
    /// Under sustained load, the least time between two store commits, so
    /// entries arriving meanwhile share one transaction (redb's cost is per
    /// transaction). An idle partition still applies its first entry at once.
    pub linger: Duration,
    /// Snapshots to restore from before reading the log (`open.rs`).
    pub recovery: Recovery,
}

/// Longest the loop waits for new entries before checking for shutdown and fsync.
pub(super) const IDLE_POLL: Duration = Duration::from_millis(100);

/// Retry delays while the log is unavailable: 100 ms doubling to 5 s.
pub(super) const RETRY_DELAY_MIN: Duration = Duration::from_millis(100);

pub(super) const RETRY_DELAY_MAX: Duration = Duration::from_secs(5);

pub(crate) async fn run(handle: Arc<PartitionHandle>, log: Arc<dyn Log>, config: ApplyConfig, mut shutdown: watch::Receiver<bool>) {
    // A rebuild cut short (the partition let go meanwhile) goes on first.
    let opened = match handle.store().damage().why() {
        Some(_) => rebuild::rebuild(&handle, log.as_ref(), &config, &mut shutdown, None, 0).await,
        None => open::open_reader(&handle, log.as_ref(), &config, &mut shutdown).await.map(|(reader, catch_up_to)| rebuild::Rebuilt {
            reader,
            catch_up_to,
            pending: Vec::new(),
        }),
    };
    let Some(rebuild::Rebuilt { mut reader, mut catch_up_to, pending }) = opened else { return };
    let mut procedures = partition_procedures(&handle);
    if !pending.is_empty() && !apply(&handle, &procedures, pending).await {
        return;
    }
    let mut last_durable = Instant::now();
    let mut dirty = false;
    let mut retry_delay = RETRY_DELAY_MIN;
    let mut last_commit: Option<Instant> = None;
    let mut stuck = StuckWatch::new(&handle, READER_STUCK);
    // The brokers this partition's stuck readers fetched from or were told
    // led it, newest last (`Log::reader_elsewhere`).
    let mut suspects: Vec<i32> = Vec::new();
    // The offset at which this loop last rebuilt its store: damage found
    // again there, before anything more applied, is a fault that repeats
    // (a panic applying one entry), not a damaged disk: refused, not
    // rebuilt again (which would set a sound store aside every round).
    let mut rebuilt_at: Option<u64> = None;
    // When this loop rebuilt its store, within `REBUILDS_WINDOW` (at most
    // `REBUILDS_PER_WINDOW_MAX` kept): more is refused, not rebuilt again.
    let mut rebuilds: Vec<Instant> = Vec::with_capacity(REBUILDS_PER_WINDOW_MAX);
    serve_if_caught_up(&handle, catch_up_to);
    loop {
        if *shutdown.borrow() {
            break;
        }
        if let Some(why) = handle.store().damage().why() {
            // Damage found (by this loop or by a reader): out of service,
            // rebuilt in place; the damaged store is never flushed again.
            if handle.store().damage().panicked() && rebuilt_at == Some(handle.applied_next()) {
                refuse_repeated_damage(&handle, &why);
                return;
            }
            rebuilds.retain(|at| at.elapsed() < REBUILDS_WINDOW);
            if rebuilds.len() >= REBUILDS_PER_WINDOW_MAX {
                handle.set_status(PartitionStatus::Refused(format!(
                    "its store was found damaged {} times within {} minutes ({why}): a failing disk, or a fault that \
                     repeats; refused rather than setting another store aside (the node's log has each one)",
                    rebuilds.len() + 1,
                    REBUILDS_WINDOW.as_secs() / 60
                )));
                return;
            }
            rebuilds.push(Instant::now());
            let Some(rebuilt) = rebuild::rebuild(&handle, log.as_ref(), &config, &mut shutdown, Some(reader), catch_up_to).await else { return };
            (reader, catch_up_to) = (rebuilt.reader, rebuilt.catch_up_to);
            rebuilt_at = Some(handle.applied_next());
            procedures = partition_procedures(&handle);
            stuck = StuckWatch::new(&handle, READER_STUCK);
            (dirty, last_commit) = (true, None);
            if !rebuilt.pending.is_empty() && !apply(&handle, &procedures, rebuilt.pending).await {
                return;
            }
            serve_if_caught_up(&handle, catch_up_to);
            continue;
        }
        if let Some(wait) = last_commit.and_then(|at| config.linger.checked_sub(at.elapsed())) {
            if sleep_or_stop(wait, &mut shutdown).await {
                break;
            }
        }
        let batch = tokio::select! {
            batch = reader.next_batch(config.batch_entries_max, IDLE_POLL) => batch,
            // Err: the node (the sender) is gone, which is a shutdown too.
            changed = shutdown.changed() => match changed {
                Ok(()) => continue,
                Err(_) => break,
            },
        };
        let entries = match batch {
            Ok(entries) => {
                retry_delay = RETRY_DELAY_MIN;
                entries
            }
            Err(LogError::Closed) => break,
            Err(LogError::OffsetOutOfRange { .. }) => {
                // Retention overtook the reader: open again, which restores from
                // a snapshot that reaches the log's start, or refuses, loudly.
                tracing::warn!(tp = %handle.tp, applied_next = handle.applied_next(), "the log no longer holds the next entry; recovering");
                if dirty && !flush(&handle, log.as_ref()).await {
                    return;
                }
                dirty = false;
                handle.set_status(PartitionStatus::CatchingUp);
                drop(reader);
                let Some((reopened, end)) = open::open_reader(&handle, log.as_ref(), &config, &mut shutdown).await else { return };
                (reader, catch_up_to) = (reopened, end);
                serve_if_caught_up(&handle, catch_up_to);
                continue;
            }
            Err(e @ LogError::Corrupt(_)) => {
                handle.set_status(PartitionStatus::Refused(e.to_string()));
                return;
            }
            Err(e) => {
                tracing::warn!(tp = %handle.tp, error = %e, ?retry_delay, "log read failed; retrying");
                if sleep_or_stop(retry_delay, &mut shutdown).await {
                    break;
                }
                retry_delay = (retry_delay * 2).min(RETRY_DELAY_MAX);
                continue;
            }
        };
        let durable_due = last_durable.elapsed() >= config.fsync_interval;
        if entries.is_empty() {
            // Past a block by a restore or a rebuild too, not only by applying.
            handle.unblock_if_past();
            if let Some(why) = reader.blocked() {
                handle.block(reader.position().unwrap_or_else(|| handle.applied_next()), why);
            }
            if stuck.stuck(&handle) {
                reader = match reopen_elsewhere(&handle, log.as_ref(), reader, &mut suspects, &mut shutdown).await {
                    Some(reopened) => reopened,
                    None => break,
                };
                continue;
            }
            if let Some(position) = reader.position().filter(|p| *p > handle.applied_next()) {
                if !skip_to(&handle, position) {
                    return;
                }
                if damage_found(&handle) {
                    continue;
                }
                dirty = true;
                serve_if_caught_up(&handle, catch_up_to);
            }
            if dirty && durable_due {
                if !flush(&handle, log.as_ref()).await {
                    return;
                }
                dirty = false;
                last_durable = Instant::now();
            }
            continue;
        }
        let full = entries.len() >= config.batch_entries_max;
        if !apply(&handle, &procedures, entries).await {
            return;
        }
        handle.unblock_if_past();
        if damage_found(&handle) {
            continue;
        }
        // A full batch means a backlog: read on at once. Otherwise linger.
        last_commit = if full { None } else { Some(Instant::now()) };
        // Published and dispatched first: the checkpoint delays no one.
        if durable_due {
            if !flush(&handle, log.as_ref()).await {
                return;
            }
            last_durable = Instant::now();
            dirty = false;
        } else {
            dirty = true;
        }
        serve_if_caught_up(&handle, catch_up_to);
    }
    if dirty {
        flush(&handle, log.as_ref()).await;
    }
}

/// Most rebuilds of one partition's store within `REBUILDS_WINDOW` by one
/// apply loop: damage found more often (a failing disk, or damage reported
/// wrongly, again and again) refuses the partition rather than setting a
/// store aside every round and pushing older evidence out of `damaged/`.
const REBUILDS_PER_WINDOW_MAX: usize = 3;
const REBUILDS_WINDOW: Duration = Duration::from_secs(3600);

/// Whether damage was found in the partition's store (the loop's next
/// turn rebuilds it: nothing more is applied to or flushed from it).
fn damage_found(handle: &PartitionHandle) -> bool {
    handle.store().damage().why().is_some()
}

fn refuse_repeated_damage(handle: &PartitionHandle, why: &str) {
    handle.set_status(PartitionStatus::Refused(format!(
        "damage found again at log offset {} right after its store was rebuilt ({why}): a fault that repeats on the \
         same entry, not a damaged disk; refused rather than setting another store aside (the node's log has the \
         details)",
        handle.applied_next()
    )));
}

/// Most brokers a partition's apply loop remembers as suspects of
/// stranding its reader (oldest forgotten first).
pub(super) const SUSPECTS_MAX: usize = 16;

/// Opens the partition's reader again elsewhere (`stuck_reader.rs`), at
/// the next offset to apply, avoiding every broker a stuck reader of it
/// fetched from or was told led it (`suspects`, to which the stuck one's
/// are added); failing that, the log's usual reader, retried (100 ms
/// doubling to 5 s) until it opens. None when the log closed or the loop is
/// told to stop (which it never waits past).
pub(super) async fn reopen_elsewhere(
    handle: &PartitionHandle,
    log: &dyn Log,
    stuck: Box<dyn crate::log::LogReader>,
    suspects: &mut Vec<i32>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Box<dyn crate::log::LogReader>> {
    for broker in stuck.suspects() {
        suspects.retain(|known| *known != broker);
        suspects.push(broker);
    }
    if suspects.len() > SUSPECTS_MAX {
        suspects.drain(..suspects.len() - SUSPECTS_MAX);
    }
    let from = handle.applied_next();
    tracing::warn!(tp = %handle.tp, from, ?suspects, "the reader delivered nothing while acknowledged entries wait; opening it elsewhere");
    metrics::LOG_READERS_REOPENED.inc();
    // The stuck reader goes first: a log assigns a partition to one reader.
    drop(stuck);
    let mut opened = tokio::select! {
        opened = log.reader_elsewhere(&handle.tp, from, suspects) => opened,
        _ = shutdown.wait_for(|stop| *stop) => return None,
    };
    let mut retry_delay = RETRY_DELAY_MIN;
    loop {
        match opened {
            Ok(reader) => return Some(reader),
            Err(LogError::Closed) => return None,
            Err(e) => tracing::warn!(tp = %handle.tp, error = %e, ?retry_delay, "opening the partition's reader again failed; retrying"),
        }
        if sleep_or_stop(retry_delay, shutdown).await {
            return None;
        }
        retry_delay = (retry_delay * 2).min(RETRY_DELAY_MAX);
        opened = tokio::select! {
            opened = log.reader(&handle.tp, from) => opened,
            _ = shutdown.wait_for(|stop| *stop) => return None,
        };
    }
}

/// A catching-up partition serves once it has applied up to the log end it
/// saw when it opened (`catch_up_to`).
pub(super) fn serve_if_caught_up(handle: &PartitionHandle, catch_up_to: u64) {
    // Damage reported meanwhile: the loop rebuilds first, serving nothing.
    if handle.store().damage().why().is_some() {
        return;
    }
    if handle.status() == PartitionStatus::CatchingUp && handle.applied_next() >= catch_up_to {
        tracing::info!(tp = %handle.tp, applied_next = handle.applied_next(), "partition caught up");
        let was_rebuilding = handle.rebuilding().is_some();
        handle.set_status(PartitionStatus::Serving);
        if was_rebuilding {
            // Once per rebuild: a file removed and its directory synced.
            let store = handle.store();
            if let Err(e) = crate::store::damaged::clear_rebuilding(store.path()) {
                tracing::warn!(tp = %handle.tp, error = %e, "cannot remove the rebuilding mark; the next start catches up before serving again");
            }
        }
    }
}

/// Sleeps `wait` unless told to stop first; true if told to stop (or the
/// node, the sender, is gone). Every wait of the loop is cancellable.
pub(super) async fn sleep_or_stop(wait: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => *shutdown.borrow(),
        changed = shutdown.changed() => changed.is_err() || *shutdown.borrow(),
    }
}

/// Batches up to this many entries are applied inline on the async worker:
/// a non-durable redb commit of a small batch takes tens of microseconds,
/// less than handing it to the blocking pool and back. Large catch-up
/// batches (and every fsync, in `flush`) go to the blocking pool.
pub(super) const INLINE_BATCH_ENTRIES_MAX: usize = 64;

/// A partition's procedures, owned by its apply loop (the only caller);
/// shared only to hand them to the blocking pool with a large batch.
pub(crate) type PartitionProcedures = Arc<parking_lot::Mutex<Procedures>>;

/// A partition's procedures, none loaded yet (the first batch reads them from the store).
pub(crate) fn partition_procedures(handle: &PartitionHandle) -> PartitionProcedures {
    Arc::new(parking_lot::Mutex::new(Procedures::new(&handle.namespace, handle.partition)))
}

/// Applies one batch in one non-durable store transaction, then advances
/// its outcomes and dispatches its events; false if the partition was refused.
pub(crate) async fn apply(handle: &Arc<PartitionHandle>, procedures: &PartitionProcedures, entries: Vec<crate::log::LogRecord>) -> bool {
    let count = entries.len();
    let result = if count > INLINE_BATCH_ENTRIES_MAX {
        let task_handle = handle.clone();
        let task_procedures = procedures.clone();
        tokio::task::spawn_blocking(move || commit_batch(&task_handle, &mut task_procedures.lock(), &entries))
            .await
            .map_err(|e| format!("apply task panicked: {e}"))
    } else {
        // A panic inside the store (redb meeting a damaged page) is damage, not the end of the loop.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit_batch(handle, &mut procedures.lock(), &entries)))
            .map_err(|panic| format!("applying a batch panicked: {}", panic_message(&*panic)))
    };
    match result {
        Ok(Ok((outcomes, applied_next, events))) => {
            metrics::APPLY_BATCH_ENTRIES.observe(count as f64);
            record_outcome_metrics(handle, &outcomes);
            handle.advance(outcomes, applied_next);
            handle.feed.append(events, applied_next);
            true
        }
        // Reported by the store: the loop rebuilds the partition next.
        Ok(Err(e)) if e.damaged => true,
        Ok(Err(e)) => {
            handle.set_status(PartitionStatus::Refused(format!("store write failed: {e}")));
            false
        }
        Err(reason) => {
            let store = handle.store();
            store.damage().report_panic(store.path(), &reason);
            true
        }
    }
}

/// A panic's message, for the record.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => message.to_string(),
        (None, Some(message)) => message.clone(),
        (None, None) => "(no message)".to_string(),
    }
}

/// A committed batch: each entry's outcome, the applied offset reached, and
/// the change events for watches (encoded once, here).
pub(super) type Applied = (Vec<(u64, Outcome)>, u64, Vec<Arc<Event>>);

pub(super) fn commit_batch(
    handle: &PartitionHandle,
    procedures: &mut Procedures,
    entries: &[crate::log::LogRecord],
) -> Result<Applied, crate::store::StoreError> {
    let applied = handle.store().apply(false, |tx| {
        let mut events = Vec::new();
        let partition = handle.partition;
        let outcomes = batch::apply_entries_with(tx, entries, partition, handle.partitions, procedures, &mut |offset, mutation| {
            events.extend(Event::of_mutation(partition, offset, mutation));
        })?;
        Ok((outcomes, tx.state().applied_next, events))
    });
    match &applied {
        // Committed: the procedures are in step with the store at this offset.
        Ok(applied) => procedures.in_step(applied.1),
        // Not committed: what the procedures hold may be ahead of the store.
        Err(_) => procedures.out_of_step(),
    }
    applied
}

pub(super) fn record_outcome_metrics(handle: &PartitionHandle, outcomes: &[(u64, Outcome)]) {
    for (_, outcome) in outcomes {
        match outcome {
            Outcome::Skipped(reason) => {
                tracing::warn!(tp = %handle.tp, %reason, "skipped a malformed log entry");
                metrics::APPLY_SKIPPED_ENTRIES.with_label_values(&[&handle.namespace, reason.label()]).inc();
            }
            Outcome::ConditionFailed { .. } => {
                metrics::APPLY_CONDITION_FAILED.with_label_values(&[&handle.namespace]).inc();
            }
            Outcome::Duplicate { of, .. } => {
                tracing::debug!(tp = %handle.tp, of, "dropped a retried write (its write id was applied before)");
                metrics::APPLY_DUPLICATES.with_label_values(&[&handle.namespace]).inc();
            }
            Outcome::JournalRepeated { lane_next } => {
                tracing::debug!(tp = %handle.tp, lane_next, "dropped a journaled write applied before (a copy appended again)");
                metrics::APPLY_DUPLICATES.with_label_values(&[&handle.namespace]).inc();
            }
            Outcome::JournalAhead { lane_next } => {
                tracing::debug!(tp = %handle.tp, lane_next, "a journaled write ahead of its lane waits to be appended again");
            }
            Outcome::KeyReused { of } => {
                tracing::debug!(tp = %handle.tp, of, "refused a write whose write id was applied before for another payload");
            }
            Outcome::Applied => {}
        }
    }
}

/// Moves the applied offset over log offsets without entries (the reader's
/// `position`); false if the partition was refused.
pub(crate) fn skip_to(handle: &Arc<PartitionHandle>, position: u64) -> bool {
    match handle.store().apply(false, |tx| {
        tx.skip_to(position);
        Ok(())
    }) {
        Ok(()) => {
            handle.advance(Vec::new(), position);
            handle.feed.append(Vec::new(), position);
            true
        }
        // Reported by the store: the loop rebuilds the partition next.
        Err(e) if e.damaged => true,
        Err(e) => {
            handle.set_status(PartitionStatus::Refused(format!("store write failed: {e}")));
            false
        }
    }
}

/// Makes the store durable and releases the log below it; false if refused.
pub(crate) async fn flush(handle: &Arc<PartitionHandle>, log: &dyn Log) -> bool {
    let store = handle.store();
    let started = Instant::now();
    match tokio::task::spawn_blocking(move || store.flush_durable()).await {
        Ok(Ok(())) => {
            metrics::STORE_FSYNC_SECONDS.observe(started.elapsed().as_secs_f64());
            log.release_below(&handle.tp, handle.applied_next());
            true
        }
        Ok(Err(e)) if e.damaged => true,
        Ok(Err(e)) => {
            handle.set_status(PartitionStatus::Refused(format!("store fsync failed: {e}")));
            false
        }
        // A panic inside the store (redb meeting a damaged page) is damage.
        Err(e) if e.is_panic() => {
            let store = handle.store();
            store.damage().report_panic(store.path(), &format!("making the store durable panicked: {e}"));
            true
        }
        Err(e) => {
            handle.set_status(PartitionStatus::Refused(format!("store fsync task failed: {e}")));
            false
        }
    }
}
