//! Where a partition's apply loop starts reading, and the recoveries it may
//! make first. Before the first entry is read, the store's `applied_next` is
//! checked against the log's `[start, end)`:
//!
//! - a store that never applied anything is restored from the newest
//!   snapshot of this log, if one exists (faster than replaying, and the only
//!   way once retention deleted the log's first entries). Checked on every
//!   start, not only when no store file exists: a first start that found the
//!   object store unreachable does not leave the partition unrestorable;
//! - `applied_next < start` (retention deleted entries this store still
//!   needs, or they were lost to damaged bytes: `Log::lost`): restored from
//!   a snapshot that reaches `start`, replacing the stale store, or refused
//!   when none does, saying which offsets and why;
//! - `applied_next > end` (the store is ahead of the log): with `--restore`
//!   and an empty log partition (disaster recovery into a new log), the log
//!   partition is moved to start at `applied_next`, so new writes get
//!   versions above the restored ones; on a log that lost its newest
//!   entries (the embedded log's newest segment damaged or cut short), the
//!   log continues at `applied_next` (`Log::settle_tail`);
//!   otherwise refused, saying what to do.
//!
//! Transient failures (the log or the object store unreachable) are retried
//! with backoff until shutdown; the partition stays `CatchingUp` meanwhile
//! and `/readyz` says so. It never skips an offset silently.

use std::sync::Arc;

use tokio::sync::watch;

use super::{ApplyConfig, RETRY_DELAY_MAX, RETRY_DELAY_MIN};
use crate::log::{Log, LogError, LogReader};
use crate::partition::{PartitionHandle, PartitionStatus};
use crate::snapshot::{RestoreTarget, SnapshotError, Snapshots};

/// What the apply loop needs to recover a partition before reading its log.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// Where snapshots live; `None`: no restores (the log must hold everything).
    pub snapshots: Option<Snapshots>,
    /// `--restore`: restore snapshots of another log (a lost log's) and move
    /// empty log partitions to continue after them. Disaster recovery only.
    pub into_new_log: bool,
    /// The page cache of a restored store (as for every store).
    pub store_cache_bytes: usize,
    /// Where a store found damaged while it runs is moved (`<data dir>/damaged`,
    /// `store::damaged`); None: it is not rebuilt in place, its partition is
    /// refused until the next start (whose check sets it aside).
    pub damaged_dir: Option<std::path::PathBuf>,
    /// `--accept-loss` on a log that does not settle lost offsets itself
    /// (Kafka): offsets an operator accepted as lost below the partition's
    /// start (deleted by retention, or by `kafka-delete-records` past a
    /// batch damaged on every broker). A replica that needs them, and finds
    /// no snapshot that reaches the start, goes on at the start only when a
    /// flag covers every offset it skips (`accepted_gap`). None: the log
    /// settles lost offsets itself (the embedded log: `Log::lost`), and a
    /// refusal offers no flag here. A rebuild's catch-up takes none
    /// (`rebuild.rs`): the store it replaces had applied those offsets.
    pub accept_lost: Option<Vec<crate::log::embedded::AcceptLost>>,
}

impl Recovery {
    /// The flag that covers all of `[applied_next, start)` of `tp`, if any.
    fn accepted_gap(&self, tp: &crate::log::TopicPartition, applied_next: u64, start: u64) -> Option<&crate::log::embedded::AcceptLost> {
        self.accept_lost.iter().flatten().find(|flag| flag.names(tp) && flag.from <= applied_next && start <= flag.to)
    }

    /// A flag that covers `[from, start)` of `tp` for some `from` above
    /// `applied_next`: a snapshot reaching `from` makes the rest accepted.
    fn accepted_above(&self, tp: &crate::log::TopicPartition, applied_next: u64, start: u64) -> Option<&crate::log::embedded::AcceptLost> {
        self.accept_lost.iter().flatten().find(|flag| flag.names(tp) && flag.from > applied_next && start <= flag.to)
    }
}

/// Checks the store's offset against the log, recovers if it can, and opens
/// a reader at `applied_next`. Returns the reader and the log end seen (the
/// loop serves once it reached it), or `None` if refused or shut down.
pub(super) async fn open_reader(
    handle: &Arc<PartitionHandle>,
    log: &dyn Log,
    config: &ApplyConfig,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<(Box<dyn LogReader>, u64)> {
    let mut retry_delay = RETRY_DELAY_MIN;
    loop {
        match try_open(handle, log, &config.recovery).await {
            Ok(opened) => return Some(opened),
            Err(Step::Refuse(reason)) => {
                // A store set aside as damaged: what was found, and why the rebuild cannot finish.
                let reason = match handle.rebuilding() {
                    Some(why) => format!("{why}; rebuilding it: {reason}"),
                    None => reason,
                };
                handle.set_status(PartitionStatus::Refused(reason));
                return None;
            }
            Err(Step::Again) => retry_delay = RETRY_DELAY_MIN,
            Err(Step::Retry(why)) => {
                tracing::warn!(tp = %handle.tp, %why, ?retry_delay, "cannot open the partition yet; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(retry_delay) => {}
                    _ = shutdown.changed() => return None,
                }
                retry_delay = (retry_delay * 2).min(RETRY_DELAY_MAX);
            }
        }
        if *shutdown.borrow() {
            return None;
        }
    }
}

/// `applied_next < start`: the entries this store needs next are gone from
/// the log. Restored from a snapshot that reaches `start` (nothing lost);
/// else, on a log that does not settle lost offsets itself, gone past when
/// an operator's `--accept-loss` covers exactly what is skipped; else
/// refused, naming the offsets and the flag.
async fn past_the_start(
    handle: &Arc<PartitionHandle>,
    log: &dyn Log,
    recovery: &Recovery,
    applied_next: u64,
    start: u64,
) -> Result<(Box<dyn LogReader>, u64), Step> {
    let lost = log.lost(&handle.tp);
    let (needs, remedy) = match (&lost, &recovery.accept_lost) {
        (Some((lost, remedy)), _) => {
            (format!("needs log offset {applied_next} but the log can be read only from {start}: {lost}"), format!(". {remedy}"))
        }
        (None, accept_lost) => (
            format!("needs log offset {applied_next} but the log starts at {start} (older entries were deleted: by retention, or by an operator)"),
            // Offered only where the flag acts here (not on a log that
            // settles its lost offsets itself, nor in a rebuild).
            match accept_lost {
                Some(_) => format!(
                    ". To go on without them (their writes are lost on this replica), restart with --accept-loss {}/{}@{applied_next}..{start}",
                    handle.namespace, handle.partition
                ),
                None => String::new(),
            },
        ),
    };
    let no_snapshot = match &recovery.snapshots {
        None => "no snapshot store is configured (--snapshots)".to_string(),
        Some(snapshots) => match restore(handle, log, snapshots, recovery, start).await {
            Ok(()) => return Err(Step::Again),
            Err(Restore::Unavailable(why)) => return Err(Step::Retry(format!("{needs}; restoring a snapshot: {why}"))),
            Err(Restore::NoneExist(why) | Restore::Invalid(why) | Restore::OtherLog(why)) => format!("no snapshot reaches offset {start}: {why}"),
        },
    };
    if lost.is_none() {
        if let Some(flag) = recovery.accepted_gap(&handle.tp, applied_next, start) {
            if !super::apply_loop::skip_to(handle, start) {
                return Err(Step::Refuse(format!("{needs}; accepted by --accept-loss {flag}, but moving past them failed")));
            }
            // `skip_to` reports damage rather than failing: an open that
            // tried again would meet it again, at once, for ever.
            if let Some(why) = handle.store().damage().why() {
                return Err(Step::Refuse(format!("{needs}; accepted by --accept-loss {flag}, but the store is damaged: {why}")));
            }
            tracing::warn!(tp = %handle.tp, applied_next, start, %flag, "went on past offsets accepted as lost (--accept-loss): their writes are lost on this replica");
            crate::metrics::LOG_OFFSETS_ACCEPTED_LOST.inc_by(start - applied_next);
            return Err(Step::Again);
        }
        if let (Some(snapshots), Some(flag)) = (&recovery.snapshots, recovery.accepted_above(&handle.tp, applied_next, start)) {
            // Far behind: a snapshot reaching the flag's start makes the rest accepted.
            match restore(handle, log, snapshots, recovery, flag.from).await {
                Ok(()) => return Err(Step::Again),
                Err(Restore::Unavailable(why)) => return Err(Step::Retry(format!("{needs}; restoring a snapshot: {why}"))),
                Err(Restore::NoneExist(why) | Restore::Invalid(why) | Restore::OtherLog(why)) => {
                    return Err(Step::Refuse(format!(
                        "{needs}; --accept-loss {flag} accepts offsets from {} only, and no snapshot reaches {}: {why}",
                        flag.from, flag.from
                    )))
                }
            }
        }
    }
    Err(Step::Refuse(format!("{needs}; {no_snapshot}{remedy}")))
}

pub(crate) enum Step {
    /// Cannot serve this partition: the reason says why and what to do.
    Refuse(String),
    /// A transient failure: wait and try again.
    Retry(String),
    /// Recovered (restored or rebased): check again at once.
    Again,
}

fn classify(e: LogError) -> Step {
    match e {
        LogError::Corrupt(_) | LogError::OffsetOutOfRange { .. } => Step::Refuse(e.to_string()),
        other => Step::Retry(other.to_string()),
    }
}

pub(crate) async fn try_open(handle: &Arc<PartitionHandle>, log: &dyn Log, recovery: &Recovery) -> Result<(Box<dyn LogReader>, u64), Step> {
    let applied_next = handle.applied_next();
    let start = log.start_offset(&handle.tp).await.map_err(classify)?;
    let end = log.end_offset(&handle.tp).await.map_err(classify)?;
    if applied_next == 0 {
        if let Some(snapshots) = &recovery.snapshots {
            // Only a snapshot with something in it: one at 0 is an empty store.
            match restore(handle, log, snapshots, recovery, 1).await {
                Ok(()) => return Err(Step::Again),
                // Nothing to restore: the log decides below.
                Err(Restore::NoneExist(_)) => {}
                // Snapshots exist, none usable, and the log holds everything from 0: replaying is complete.
                Err(Restore::Invalid(why)) if start == 0 && end > 0 => {
                    tracing::warn!(tp = %handle.tp, %why, "no usable snapshot; replaying the log from 0")
                }
                // ...but an empty log would silently lose what they hold.
                Err(Restore::Invalid(why)) if start == 0 => {
                    return Err(Step::Refuse(format!(
                        "snapshots of this partition exist but none could be restored, and the log is empty: \
                         starting empty would lose their data. {why}"
                    )))
                }
                Err(Restore::Invalid(_)) => {}
                // Only another log's snapshots, and this log is empty: the signature
                // of a lost log (restore with --restore), never restored silently.
                Err(Restore::OtherLog(why)) if end == 0 => return Err(Step::Refuse(why)),
                // This log holds data: another cluster's snapshots in the bucket are
                // not this partition's; the log decides below.
                Err(Restore::OtherLog(why)) => {
                    tracing::warn!(tp = %handle.tp, %why, "ignoring snapshots of another log")
                }
                // The log still starts at 0: replaying it is complete too.
                Err(Restore::Unavailable(why)) if start == 0 && end > 0 => {
                    tracing::warn!(tp = %handle.tp, %why, "object store unavailable; replaying the log from 0 instead")
                }
                Err(Restore::Unavailable(why)) => return Err(Step::Retry(why)),
            }
        }
    }
    if applied_next < start {
        return past_the_start(handle, log, recovery, applied_next, start).await;
    }
    if applied_next > end {
        // A log that lost entries the store applied goes on after them first.
        if settle_tail(handle, log, applied_next).await? {
            return Err(Step::Again);
        }
        if recovery.into_new_log && start == end {
            log.rebase_empty(&handle.tp, applied_next).await.map_err(|e| Step::Refuse(e.to_string()))?;
            tracing::warn!(
                tp = %handle.tp, applied_next,
                "--restore: the empty log partition continues at the restored offset; writes acknowledged after \
                 the snapshot (offsets {applied_next} and up, in the lost log) are lost"
            );
            return Err(Step::Again);
        }
        return Err(Step::Refuse(ahead_reason(applied_next, start, end, recovery)));
    }
    if settle_tail(handle, log, applied_next).await? {
        return Err(Step::Again);
    }
    let reader = log.reader(&handle.tp, applied_next).await.map_err(classify)?;
    Ok((reader, end))
}

/// `Log::settle_tail`: whether the log moved (check again).
async fn settle_tail(handle: &Arc<PartitionHandle>, log: &dyn Log, applied_next: u64) -> Result<bool, Step> {
    match log.settle_tail(&handle.tp, applied_next).await {
        Ok(moved) => Ok(moved),
        Err(e @ LogError::Corrupt(_)) => Err(Step::Refuse(e.to_string())),
        Err(e) => Err(Step::Retry(e.to_string())),
    }
}

/// Why a store ahead of its log is refused, and what to do about it.
fn ahead_reason(applied_next: u64, start: u64, end: u64, recovery: &Recovery) -> String {
    let head = format!("the store has applied up to offset {applied_next} but the log ends at {end}");
    if start == end && recovery.snapshots.is_some() {
        format!(
            "{head} and is empty: the log was lost (or this is another log). To recover from the snapshots, restart \
             with --restore: the log continues at offset {applied_next}, and writes acknowledged after the snapshot \
             are lost. Otherwise point the node at the log its stores came from"
        )
    } else if start == end {
        format!(
            "{head} and is empty: the log was lost (or this is another log). Point the node at the log its stores \
             came from, or move `stores/` away to start empty"
        )
    } else {
        format!(
            "{head}: the log lost entries this replica applied (an unclean broker election, or another log). \
             Check the log; then move this replica's store away to rebuild it from the log and snapshots"
        )
    }
}

enum Restore {
    /// No snapshot (with anything in it) exists.
    NoneExist(String),
    /// Snapshots exist, none usable: the reason lists what was tried.
    Invalid(String),
    /// Snapshots exist but are of another log: never restored silently.
    OtherLog(String),
    /// The log or the object store could not be asked.
    Unavailable(String),
}

/// Restores the newest valid snapshot at or past `applied_next_min` of this
/// log, replacing the partition's store.
async fn restore(
    handle: &Arc<PartitionHandle>,
    log: &dyn Log,
    snapshots: &Snapshots,
    recovery: &Recovery,
    applied_next_min: u64,
) -> Result<(), Restore> {
    let identity = log.identity(&handle.namespace).await.map_err(|e| Restore::Unavailable(e.to_string()))?;
    let store = handle.store();
    let path = store.path().to_path_buf();
    drop(store);
    let target = RestoreTarget {
        namespace: &handle.namespace,
        partition: handle.partition,
        partitions: handle.partitions,
        path: &path,
        cache_bytes: recovery.store_cache_bytes,
        log: (!recovery.into_new_log).then_some(identity.as_str()),
        applied_next_min,
        replace: true,
    };
    let started = std::time::Instant::now();
    match snapshots.restore(&target).await {
        Ok((store, manifest)) => {
            tracing::info!(
                tp = %handle.tp, applied_next = manifest.applied_next, records = manifest.record_count,
                snapshot_log = %manifest.log, elapsed_ms = started.elapsed().as_millis() as u64,
                "partition restored from a snapshot"
            );
            // The restored store follows this log now (a snapshot of a lost
            // one too, under --restore): checked at every open (node/deletion.rs).
            if identity.len() <= crate::store::LOG_IDENTITY_BYTES_MAX {
                store.set_log_identity(&identity).map_err(|e| Restore::Unavailable(e.to_string()))?;
            }
            handle.replace_store(Arc::new(store)).map_err(|e| Restore::Unavailable(e.to_string()))?;
            // Counted once in place: a try that failed above is retried.
            crate::metrics::SNAPSHOT_RESTORES.inc();
            Ok(())
        }
        Err(SnapshotError::Store(e)) => Err(Restore::Unavailable(format!("object store: {e}"))),
        Err(e @ SnapshotError::NoneExist { .. }) => Err(Restore::NoneExist(e.to_string())),
        Err(SnapshotError::NoneValid { tried, other_log: true, .. }) => Err(Restore::OtherLog(format!(
            "snapshots of {}/{} exist but are of another log than this node's ({identity}); restart with --restore \
             to restore them into this log (disaster recovery), or give this cluster a snapshot store of its own. \
             Tried: {tried}",
            handle.namespace, handle.partition
        ))),
        Err(e) => Err(Restore::Invalid(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::embedded::AcceptLost;
    use crate::log::TopicPartition;

    fn recovery(flags: &[&str]) -> Recovery {
        Recovery { accept_lost: Some(flags.iter().map(|f| AcceptLost::parse(f).unwrap()).collect()), ..Recovery::default() }
    }

    /// A flag accepts a gap only when it covers every offset skipped: a
    /// replica further behind than the flag names needs a snapshot first,
    /// and a flag of another partition, or of offsets below, accepts nothing.
    #[test]
    fn a_flag_accepts_only_a_gap_it_covers_entirely() {
        let tp = TopicPartition { topic: "default".into(), partition: 0 };
        let exactly = recovery(&["default/0@11..12"]);
        assert!(exactly.accepted_gap(&tp, 11, 12).is_some());
        assert!(exactly.accepted_gap(&tp, 10, 12).is_none(), "offset 10 is not named");
        assert!(exactly.accepted_gap(&tp, 11, 13).is_none(), "offset 12 is not named");
        assert_eq!(exactly.accepted_above(&tp, 10, 12).map(|f| f.from), Some(11), "a snapshot reaching 11 makes the rest accepted");
        assert!(exactly.accepted_above(&tp, 11, 12).is_none());
        let other = TopicPartition { topic: "default".into(), partition: 1 };
        assert!(exactly.accepted_gap(&other, 11, 12).is_none());
        let ns = TopicPartition { topic: "defaults".into(), partition: 0 };
        assert!(exactly.accepted_gap(&ns, 11, 12).is_none());
        assert!(recovery(&["default/0@0..100"]).accepted_gap(&tp, 11, 12).is_some(), "a wider flag covers it");
        assert!(recovery(&[]).accepted_gap(&tp, 11, 12).is_none());
    }
}
