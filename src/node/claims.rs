//! Replaying the journals of lost nodes (issue 19, the slow path).
//!
//! A node keeps a copy of its journal in object storage
//! (`journal::objects`) and renews a lease beside it. When a journal's
//! lease has not been renewed for `journal_claim_after` (its node is gone,
//! or came back with a new data directory and so a new journal), any node
//! that scans the store claims it, appends its entries to the log in
//! journal order, waits until it sees them applied, and only then deletes
//! each object; when none is left it retires the lease and the claim.
//!
//! Every journaled write has a write id, so a journal replayed twice (two
//! claimers, a claimer that stopped half-way, or an owner that comes back
//! with its data directory and sequences its local journal too) is applied
//! once — within the write-id window. A claim only saves work.
//!
//! Bounds: one journal at a time; `APPENDS_IN_FLIGHT_MAX` appends in
//! flight; `APPLIED_WAIT_MAX` for an object's entries to be seen applied
//! (else the object stays, and the next scan tries again).

use std::collections::BTreeMap;
use std::sync::Weak;
use std::time::Duration;

use futures::StreamExt;

use super::Node;
use crate::journal::objects::{now_ms, Entry, JournalObjects};

/// Appends of a claimed journal handed to the log at once, in order.
const APPENDS_IN_FLIGHT_MAX: usize = 256;
/// How long a replayed object's entries may take to be seen applied.
const APPLIED_WAIT_MAX: Duration = Duration::from_secs(60);
const APPLIED_POLL: Duration = Duration::from_millis(50);
/// Scans are at least this far apart (at most `claim_after` / 2).
const SCAN_INTERVAL_MAX: Duration = Duration::from_secs(30);

/// Scans the journals in `objects` every so often and replays lost ones.
pub(super) async fn run(
    node: Weak<Node>,
    objects: JournalObjects,
    own: String,
    claim_after: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let interval = (claim_after / 2).min(SCAN_INTERVAL_MAX);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        let Some(node) = node.upgrade() else { return };
        if let Err(e) = scan(&node, &objects, &own, claim_after).await {
            tracing::warn!(error = %e, "replaying lost journals failed; the next scan tries again");
        }
    }
}

/// Claims and replays every journal but `own` whose lease is older than `claim_after`.
async fn scan(node: &Node, objects: &JournalObjects, own: &str, claim_after: Duration) -> Result<(), String> {
    for journal in objects.journals().await? {
        if journal == own {
            continue;
        }
        let renewed_at_ms = objects.lease(&journal).await?.map_or(0, |l| l.renewed_at_ms);
        if now_ms().saturating_sub(renewed_at_ms) < claim_after.as_millis() as u64 {
            continue;
        }
        // A claim older than twice the wait is a claimer that stopped.
        if !objects.claim(&journal, own, claim_after * 2).await? {
            continue;
        }
        crate::metrics::JOURNAL_CLAIMS.inc();
        tracing::info!(journal, renewed_at_ms, "a journal's lease expired: replaying it");
        replay(node, objects, &journal).await?;
    }
    Ok(())
}

/// Replays one claimed journal, object by object, in journal order.
async fn replay(node: &Node, objects: &JournalObjects, journal: &str) -> Result<(), String> {
    for (seq, path) in objects.entries(journal).await? {
        let entries = objects.read_entries(&path).await?;
        let appended = append_all(node, &entries).await?;
        wait_applied(node, &appended).await?;
        objects.delete(&path).await?;
        tracing::info!(journal, seq, entries = entries.len(), "a lost journal's object is applied; deleted");
    }
    objects.retire(journal).await?;
    tracing::info!(journal, "a lost journal is replayed and retired");
    Ok(())
}

/// Appends `entries` to the log in their order; returns, per namespace and
/// partition, the highest log offset appended.
async fn append_all(node: &Node, entries: &[Entry]) -> Result<BTreeMap<(String, u32), u64>, String> {
    let mut handles = Vec::with_capacity(entries.len());
    for entry in entries {
        let namespace = node.namespace(&entry.ns).ok_or_else(|| format!("namespace {:?} of a journaled write is unknown here", entry.ns))?;
        if namespace.partitions != entry.partitions {
            return Err(format!(
                "namespace {:?} has {} partitions, its journaled write was for {}: it was made again; the object is kept",
                entry.ns, namespace.partitions, entry.partitions
            ));
        }
        handles.push(namespace.handle(entry.partition).clone());
    }
    let log = node.log.as_ref();
    // Collected first: a stream over a borrowing closure is not `Send` to the compiler.
    let appends: Vec<_> = entries.iter().zip(&handles).map(|(entry, handle)| super::write::append(log, &handle.tp, entry.payload.clone())).collect();
    let mut results = futures::stream::iter(appends).buffered(APPENDS_IN_FLIGHT_MAX);
    let mut highest = BTreeMap::new();
    let mut at = 0;
    while let Some(result) = results.next().await {
        let entry = &entries[at];
        at += 1;
        let log_offset = result.map_err(|e| format!("the log refused a replayed write: {e}"))?;
        crate::metrics::JOURNAL_CLAIMED_SEQUENCED.inc();
        let top = highest.entry((entry.ns.clone(), entry.partition)).or_insert(log_offset);
        *top = (*top).max(log_offset);
    }
    Ok(highest)
}

/// Waits until every partition applied past what was appended to it: here,
/// or on another member (as gossip advertises).
async fn wait_applied(node: &Node, appended: &BTreeMap<(String, u32), u64>) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + APPLIED_WAIT_MAX;
    for ((ns, partition), log_offset) in appended {
        loop {
            if node.applied_next(ns, *partition) > *log_offset {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("{ns}/{partition} did not apply offset {log_offset} within {APPLIED_WAIT_MAX:?}; the object is kept"));
            }
            tokio::time::sleep(APPLIED_POLL).await;
        }
    }
    Ok(())
}
