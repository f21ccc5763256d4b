//! The scrub: every partition this node serves has its store read through
//! at a bounded pace (`store::scrub`: each record's checksum, and, over a
//! pass during which the store did not change, the state hash and count
//! kept beside the records), so damage on disk is found and the partition
//! rebuilt (`apply/rebuild.rs`) before a reader meets it.
//!
//! One partition at a time, `STEP_ENTRIES` entries a step on a blocking
//! thread, paced to `entries_per_second` for the whole node; a round over
//! every partition starts at most once per `interval`. A partition that is
//! not serving (catching up, rebuilding, refused, let go) is passed over,
//! and a pass whose store was replaced meanwhile (restored, rebuilt) is
//! dropped.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::Node;
use crate::partition::{PartitionHandle, PartitionStatus};
use crate::store::{PartitionStore, ScrubOutcome, ScrubPass};

/// Entries one step checks, in one read transaction: bounds how long a
/// step holds a blocking thread and pins the store's pages.
const STEP_ENTRIES: usize = 1_000;

/// How the scrub runs (`scrub_entries_per_second`, `scrub_interval_ms`).
#[derive(Debug, Clone, Copy)]
pub struct ScrubConfig {
    /// Entries checked per second across the node; 0: no scrub.
    pub entries_per_second: u64,
    /// The least time between the starts of two rounds.
    pub interval: Duration,
}

/// Scrubs round after round until shutdown (or the node is gone).
pub(super) async fn run(node: Weak<Node>, config: ScrubConfig, mut shutdown: watch::Receiver<bool>) {
    if config.entries_per_second == 0 {
        return;
    }
    // Exported from the start (0, not absent), so alerts see them.
    crate::metrics::SCRUB_ENTRIES.inc_by(0);
    crate::metrics::SCRUB_LAST_ROUND.add(0.0);
    for outcome in ["intact", "changed", "damaged"] {
        crate::metrics::SCRUB_PASSES.with_label_values(&[outcome]).inc_by(0);
    }
    loop {
        let round = Instant::now();
        let Some(handles) = node.upgrade().map(|node| held_handles(&node)) else { return };
        let mut whole = true;
        for handle in handles {
            match scrub_partition(&handle, config, &mut shutdown).await {
                Pass::Done => {}
                Pass::Skipped => whole = false,
                Pass::Stopped => return,
            }
        }
        // A round that passed over a partition (not serving, or replaced
        // meanwhile) does not count: the alert on this stays honest.
        if whole {
            crate::metrics::SCRUB_LAST_ROUND.set(crate::codec::now_ms() as f64 / 1000.0);
        }
        if stop_after(config.interval.saturating_sub(round.elapsed()), &mut shutdown).await {
            return;
        }
    }
}

/// How one partition's pass ended.
enum Pass {
    /// Every entry read (or damage found and reported).
    Done,
    /// Passed over: not serving, its store replaced, or unreadable for a
    /// reason other than damage.
    Skipped,
    /// Told to stop.
    Stopped,
}

/// The partitions of every namespace this node holds.
fn held_handles(node: &Node) -> Vec<Arc<PartitionHandle>> {
    node.namespaces().iter().flat_map(|ns| ns.handles.iter().filter(|h| h.is_held()).cloned()).collect()
}

/// Serving its own store: not catching up, rebuilding, refused or let go.
fn serving(handle: &PartitionHandle) -> bool {
    handle.status() == PartitionStatus::Serving && handle.rebuilding().is_none()
}

/// One pass over one partition's store, paced: after every step, the
/// time its entries take at `entries_per_second`.
async fn scrub_partition(handle: &Arc<PartitionHandle>, config: ScrubConfig, shutdown: &mut watch::Receiver<bool>) -> Pass {
    if *shutdown.borrow() {
        return Pass::Stopped;
    }
    let store = handle.store();
    if !serving(handle) || store.damage().why().is_some() {
        return Pass::Skipped;
    }
    let began = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || store.scrub_begin()).await
    };
    let mut pass = match began {
        Ok(Ok(pass)) => pass,
        Ok(Err(e)) => return passed_over(handle, &e.to_string()),
        Err(e) => return passed_over(handle, &e.to_string()),
    };
    loop {
        // Replaced (restored, rebuilt) or no longer served: this pass is moot.
        if !Arc::ptr_eq(&handle.store(), &store) || !serving(handle) {
            return Pass::Skipped;
        }
        let started = Instant::now();
        let before = pass.entries_checked();
        let (stepped, returned) = match step(&store, pass).await {
            Some(stepped) => stepped,
            None => return passed_over(handle, "the step's task failed"),
        };
        pass = returned;
        let checked = pass.entries_checked() - before;
        crate::metrics::SCRUB_ENTRIES.inc_by(checked);
        let ended = match stepped {
            Ok(None) => None,
            Ok(Some(outcome)) => {
                let label = match outcome {
                    ScrubOutcome::Intact { .. } => "intact",
                    ScrubOutcome::Changed { .. } => "changed",
                };
                crate::metrics::SCRUB_PASSES.with_label_values(&[label]).inc();
                tracing::debug!(tp = %handle.tp, ?outcome, "scrubbed");
                Some(Pass::Done)
            }
            Err(e) if e.damaged => {
                // Reported to the store: its apply loop rebuilds the partition.
                crate::metrics::SCRUB_PASSES.with_label_values(&["damaged"]).inc();
                tracing::error!(tp = %handle.tp, error = %e, "the scrub found damage; the partition is rebuilt");
                Some(Pass::Done)
            }
            Err(e) => Some(passed_over(handle, &e.to_string())),
        };
        // Paced after the last step too: many small stores keep the pace.
        let paced = Duration::from_secs_f64(checked as f64 / config.entries_per_second as f64);
        if stop_after(paced.saturating_sub(started.elapsed()), shutdown).await {
            return Pass::Stopped;
        }
        if let Some(ended) = ended {
            return ended;
        }
    }
}

/// One step on a blocking thread; the pass comes back with its result.
async fn step(store: &Arc<PartitionStore>, mut pass: ScrubPass) -> Option<(Result<Option<ScrubOutcome>, crate::store::StoreError>, ScrubPass)> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        let stepped = store.scrub_step(&mut pass, STEP_ENTRIES);
        (stepped, pass)
    })
    .await
    .ok()
}

/// A pass that could not go on for a reason other than damage (the store
/// closing under it): the next round tries again.
fn passed_over(handle: &PartitionHandle, why: &str) -> Pass {
    tracing::debug!(tp = %handle.tp, %why, "scrub pass dropped");
    Pass::Skipped
}

/// Waits `wait`; true when told to stop first.
async fn stop_after(wait: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(wait) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}
