//! Rebuilding a partition whose store was found damaged while the node runs
//! (`store::damaged::DamageFound`: a record that failed its checksum, a page
//! redb found corrupted, a panic inside the store while applying).
//!
//! The partition stops serving reads at once (`PartitionHandle::start_rebuilding`:
//! 503, `/readyz` and `tern_partition_rebuilding` name it), and the damaged
//! file is moved into `damaged/` (bounded, `store::damaged`). A new store is
//! built beside the one readers and writers see, through a detached handle
//! (`PartitionHandle::detached`): the same recovery as at start (`open.rs`:
//! the newest verified snapshot of this log, or the log from its start;
//! refused, naming the offsets, where neither reaches), then the log,
//! applied up to the offset the damaged store had reached. Nothing below that
//! offset is published again (outcomes, events and the applied offset were
//! published once, from the damaged store, and the log applied again gives
//! the same state). At that offset the new store takes the damaged one's
//! place; the loop goes on from there and the partition serves again.
//!
//! Bounded: one rebuild per damage found. Damage in the new store while it
//! is rebuilt refuses the partition, naming both. A rebuild cut short (the
//! partition let go, the node stopping) leaves its new store at the store's
//! path; the next loop of the partition, or the next start, goes on from it.

use std::sync::Arc;

use tokio::sync::watch;

use super::apply_loop::{commit_batch, flush, partition_procedures, reopen_elsewhere, skip_to, sleep_or_stop, IDLE_POLL, SUSPECTS_MAX};
use super::stuck_reader::{BlockedWait, READER_STUCK};
use super::{open, ApplyConfig, RETRY_DELAY_MAX, RETRY_DELAY_MIN};
use crate::log::{Log, LogError, LogReader, LogRecord};
use crate::metrics;
use crate::partition::{PartitionHandle, PartitionStatus};
use crate::store::damaged::{open_or_set_aside, set_aside_running};

/// A rebuilt partition, its new store in place.
pub(super) struct Rebuilt {
    /// The new store's reader, past every entry below `pending`'s.
    pub reader: Box<dyn LogReader>,
    /// The partition serves once its applied offset reaches this.
    pub catch_up_to: u64,
    /// Entries the reader delivered at or past the damaged store's offset:
    /// the loop applies (and publishes) them first.
    pub pending: Vec<LogRecord>,
}

/// Rebuilds the partition whose store reported damage; None when refused
/// (the status says why) or told to stop. `damaged_reader` (the loop's) is
/// dropped first: a log assigns a partition to one reader.
pub(super) async fn rebuild(
    handle: &Arc<PartitionHandle>,
    log: &dyn Log,
    config: &ApplyConfig,
    shutdown: &mut watch::Receiver<bool>,
    damaged_reader: Option<Box<dyn LogReader>>,
    catch_up_to: u64,
) -> Option<Rebuilt> {
    drop(damaged_reader);
    let started = std::time::Instant::now();
    let damaged = handle.store();
    let why = damaged.damage().why().expect("a rebuild starts from damage found");
    let Some(damaged_dir) = config.recovery.damaged_dir.clone() else {
        handle.set_status(PartitionStatus::Refused(format!("its store is damaged ({why}); restart the node to set it aside and rebuild it")));
        return None;
    };
    let high = handle.applied_next();
    let (path, partitions, cache_bytes) = (damaged.path().to_path_buf(), handle.partitions, config.recovery.store_cache_bytes);
    let opened = tokio::task::spawn_blocking(move || {
        let set_aside = set_aside_running(&damaged, &damaged_dir)?;
        drop(damaged);
        // What is at the path now is empty, or a rebuild's cut short (checked as every store is).
        let (store, found_damaged) = open_or_set_aside(&path, partitions, cache_bytes, &damaged_dir)?;
        Ok::<_, crate::store::StoreError>((set_aside, store, found_damaged))
    })
    .await;
    let (set_aside, store, found_damaged) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) => return refuse(handle, format!("its store is damaged ({why}); rebuilding it: {e}")),
        Err(e) => return refuse(handle, format!("its store is damaged ({why}); rebuilding it: the task failed: {e}")),
    };
    let rebuilding = match (set_aside, handle.rebuilding()) {
        (Some(set_aside), _) => {
            metrics::STORES_SET_ASIDE.inc();
            set_aside.to_string()
        }
        // Cut short before: go on under the same reason.
        (None, Some(rebuilding)) => rebuilding,
        (None, None) => format!("its store was damaged ({why})"),
    };
    if let Some(found) = found_damaged {
        metrics::STORES_SET_ASIDE.inc();
        tracing::error!(tp = %handle.tp, %found, "the store a rebuild left was damaged too; set aside, rebuilding from the start");
    }
    tracing::error!(tp = %handle.tp, %rebuilding, applied_next = high, "partition taken out of service: rebuilding it from snapshots and the log");
    handle.start_rebuilding(rebuilding.clone());
    handle.set_status(PartitionStatus::CatchingUp);
    let store = Arc::new(store);
    let applied_next = match store.read().and_then(|r| r.applied_next()) {
        Ok(applied_next) => applied_next,
        Err(e) => return refuse(handle, format!("{rebuilding}; rebuilding it: {e}")),
    };
    let detached = Arc::new(handle.detached(store, applied_next));
    let (reader, end, pending) = match catch_up_detached(handle, &detached, log, config, shutdown, high).await {
        CaughtUp::Done(done) => done,
        CaughtUp::Refused(reason) => return refuse(handle, format!("{rebuilding}; rebuilding it: {reason}")),
        CaughtUp::Stopped => return None,
    };
    if !flush(&detached, log).await {
        let reason = refused_reason(&detached);
        return refuse(handle, format!("{rebuilding}; rebuilding it: {reason}"));
    }
    // Pair assertion of the swap: a sound store at the damaged one's offset.
    if let Some(damage) = detached.store().damage().why() {
        return refuse(handle, format!("{rebuilding}; rebuilding it: the new store is damaged too: {damage}"));
    }
    if detached.applied_next() < high {
        return refuse(handle, format!("{rebuilding}; rebuilding it: the new store reached offset {} of {high}", detached.applied_next()));
    }
    // The new store records the log it follows, as the one it replaces did.
    if let Some(identity) = log.identity(&handle.namespace).await.ok().filter(|i| i.len() <= crate::store::LOG_IDENTITY_BYTES_MAX) {
        if let Err(e) = detached.store().set_log_identity(&identity) {
            return refuse(handle, format!("{rebuilding}; rebuilding it: {e}"));
        }
    }
    if let Err(e) = handle.replace_store(detached.store()) {
        return refuse(handle, format!("{rebuilding}; rebuilding it: {e}"));
    }
    tracing::info!(
        tp = %handle.tp, applied_next = handle.applied_next(), elapsed_ms = started.elapsed().as_millis() as u64,
        "partition store rebuilt in place; it serves again once caught up"
    );
    Some(Rebuilt { reader, catch_up_to: catch_up_to.max(high).max(end), pending })
}

fn refuse(handle: &PartitionHandle, reason: String) -> Option<Rebuilt> {
    handle.set_status(PartitionStatus::Refused(reason));
    None
}

fn refused_reason(detached: &PartitionHandle) -> String {
    match detached.status() {
        PartitionStatus::Refused(reason) => reason,
        other => format!("stopped while {other:?}"),
    }
}

enum CaughtUp {
    /// The reader, the log end it saw first, and the entries it delivered at or past `high`.
    Done((Box<dyn LogReader>, u64, Vec<LogRecord>)),
    Refused(String),
    Stopped,
}

/// Opens the detached handle's reader (restoring a snapshot first, as at
/// start) and applies the log to its store up to `high`, publishing nothing.
async fn catch_up_detached(
    handle: &PartitionHandle,
    detached: &Arc<PartitionHandle>,
    log: &dyn Log,
    config: &ApplyConfig,
    shutdown: &mut watch::Receiver<bool>,
    high: u64,
) -> CaughtUp {
    // No operator's flag skips offsets here: the store this one replaces
    // had applied them, and served what they wrote.
    let config = &ApplyConfig { recovery: open::Recovery { accept_lost: None, ..config.recovery.clone() }, ..config.clone() };
    let Some((mut reader, end)) = open::open_reader(detached, log, config, shutdown).await else {
        return stopped_or_refused(detached, shutdown);
    };
    if end < high && detached.applied_next() < high {
        // Offsets the damaged store applied are gone from the log (an
        // unclean election, another log): reading on would apply other
        // entries at them.
        return CaughtUp::Refused(format!(
            "the log ends at offset {end}, below the offset {high} the damaged store had applied: the log lost entries \
             this replica applied (an unclean broker election, or another log). Check the log"
        ));
    }
    let procedures = partition_procedures(detached);
    let mut retry_delay = RETRY_DELAY_MIN;
    // A reader blocked at a damaged Kafka batch is opened again elsewhere
    // (another broker may hold an intact copy), as the loop's is.
    let mut blocked_wait = BlockedWait::new(READER_STUCK);
    let mut suspects: Vec<i32> = Vec::with_capacity(SUSPECTS_MAX);
    while detached.applied_next() < high {
        let batch = tokio::select! {
            batch = reader.next_batch(config.batch_entries_max, IDLE_POLL) => batch,
            _ = shutdown.wait_for(|stop| *stop) => return CaughtUp::Stopped,
        };
        let mut entries = match batch {
            Ok(entries) => {
                retry_delay = RETRY_DELAY_MIN;
                entries
            }
            Err(LogError::Closed) => return CaughtUp::Stopped,
            Err(e @ (LogError::Corrupt(_) | LogError::OffsetOutOfRange { .. })) => return CaughtUp::Refused(e.to_string()),
            Err(e) => {
                tracing::warn!(tp = %detached.tp, error = %e, ?retry_delay, "log read failed while rebuilding; retrying");
                if sleep_or_stop(retry_delay, shutdown).await {
                    return CaughtUp::Stopped;
                }
                retry_delay = (retry_delay * 2).min(RETRY_DELAY_MAX);
                continue;
            }
        };
        if entries.is_empty() {
            if let Some(why) = reader.blocked() {
                // Shown on the partition the node serves (`/readyz`).
                handle.block(reader.position().unwrap_or_else(|| detached.applied_next()), why);
                if blocked_wait.due() {
                    reader = match reopen_elsewhere(detached, log, reader, &mut suspects, shutdown).await {
                        Some(reopened) => reopened,
                        None => return CaughtUp::Stopped,
                    };
                }
                continue;
            }
            if let Some(position) = reader.position().filter(|p| *p > detached.applied_next()) {
                if !skip_to(detached, position.min(high)) {
                    return CaughtUp::Refused(refused_reason(detached));
                }
                if let Some(why) = detached.store().damage().why() {
                    return CaughtUp::Refused(format!("the new store is damaged too: {why}"));
                }
            }
            continue;
        }
        blocked_wait.reset();
        handle.unblock_if_read_past(entries.last().map_or(0, |entry| entry.offset + 1));
        let pending = entries.split_off(entries.partition_point(|entry| entry.offset < high));
        if !entries.is_empty() {
            if let Err(reason) = apply_unseen(detached, &procedures, entries).await {
                return CaughtUp::Refused(reason);
            }
        }
        if !pending.is_empty() {
            // The reader has nothing between the last entry applied and `high`.
            if detached.applied_next() < high && !skip_to(detached, high) {
                return CaughtUp::Refused(refused_reason(detached));
            }
            if let Some(why) = detached.store().damage().why() {
                return CaughtUp::Refused(format!("the new store is damaged too: {why}"));
            }
            return CaughtUp::Done((reader, end, pending));
        }
    }
    CaughtUp::Done((reader, end, Vec::new()))
}

fn stopped_or_refused(detached: &PartitionHandle, shutdown: &watch::Receiver<bool>) -> CaughtUp {
    match detached.status() {
        PartitionStatus::Refused(reason) => CaughtUp::Refused(reason),
        _ if *shutdown.borrow() => CaughtUp::Stopped,
        other => CaughtUp::Refused(format!("stopped while {other:?}")),
    }
}

/// Applies entries below the damaged store's offset to the new store: its
/// offset moves (for the detached handle only), nothing is published.
async fn apply_unseen(
    detached: &Arc<PartitionHandle>,
    procedures: &super::apply_loop::PartitionProcedures,
    entries: Vec<LogRecord>,
) -> Result<(), String> {
    let (task_handle, task_procedures) = (detached.clone(), procedures.clone());
    let committed = tokio::task::spawn_blocking(move || commit_batch(&task_handle, &mut task_procedures.lock(), &entries)).await;
    match committed {
        Ok(Ok((_, applied_next, _))) => {
            detached.advance(Vec::new(), applied_next);
            Ok(())
        }
        Ok(Err(e)) if e.damaged => Err(format!("the new store is damaged too: {e}")),
        Ok(Err(e)) => Err(format!("the new store failed too: {e}")),
        Err(e) => Err(format!("applying to the new store panicked: {e}")),
    }
}
