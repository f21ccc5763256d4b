//! When snapshots are taken: on a schedule (every `interval`, or sooner once
//! `entries` log entries were applied since the last one) and on demand,
//! for the partitions this node serves. Only a node configured as a snapshot
//! writer runs the schedule; any node can restore.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::Node;
use crate::log::TopicPartition;
use crate::partition::PartitionStatus;
use crate::snapshot::{SnapshotError, SnapshotReport, Snapshots};

#[derive(Debug, Clone)]
pub struct SnapshotPolicy {
    /// Longest time between two snapshots of a partition that changed.
    pub interval: Duration,
    /// Snapshot sooner once this many entries were applied since the last one.
    pub entries: u64,
    /// Snapshots kept per partition (older ones are pruned).
    pub retain: usize,
}

/// How often the schedule looks at the partitions.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Takes snapshots of the partitions `node` serves (optionally only one
/// namespace / partition), now, then prunes old ones. One result per partition.
pub async fn take_now(
    node: &Node,
    snapshots: &Snapshots,
    namespace: Option<&str>,
    partition: Option<u32>,
    retain: usize,
) -> Vec<(TopicPartition, Result<SnapshotReport, SnapshotError>)> {
    let mut results = Vec::new();
    for ns in node.namespaces() {
        if namespace.is_some_and(|n| n != &*ns.name) {
            continue;
        }
        for handle in &ns.handles {
            if partition.is_some_and(|p| p != handle.partition) || handle.status() != PartitionStatus::Serving {
                continue;
            }
            let result = match (handle.store().read(), node.log.identity(&ns.name).await) {
                (Ok(reader), Ok(log)) => snapshots.create(&ns.name, handle.partition, ns.partitions, reader, &log).await,
                (Err(e), _) => Err(SnapshotError::Partition(e.to_string())),
                (_, Err(e)) => Err(SnapshotError::Store(format!("naming the log: {e}"))),
            };
            // Deleted while this snapshot was taken: it must not outlive it
            // (`--restore` would bring the namespace back). Its manifest
            // only: a namespace created again under the name may share chunks.
            if let (Ok(report), true) = (&result, ns.is_deleted()) {
                if let Err(e) = snapshots.delete_manifest(&report.manifest).await {
                    tracing::error!(ns = %ns.name, error = %e, "a snapshot of a namespace deleted meanwhile could not be deleted");
                }
                continue;
            }
            match &result {
                Ok(report) => {
                    tracing::info!(tp = %handle.tp, applied_next = report.applied_next, bytes_uploaded = report.bytes_uploaded, "snapshot taken");
                    if let Err(e) = snapshots.prune(&ns.name, handle.partition, retain).await {
                        tracing::warn!(tp = %handle.tp, error = %e, "pruning old snapshots failed");
                    }
                }
                Err(e) => tracing::error!(tp = %handle.tp, error = %e, "snapshot failed; the next attempt retries"),
            }
            results.push((handle.tp.clone(), result));
        }
    }
    results
}

/// Runs the schedule until `shutdown`.
pub async fn run(node: std::sync::Weak<Node>, snapshots: Snapshots, policy: SnapshotPolicy, mut shutdown: watch::Receiver<bool>) {
    // Per partition of one open of its namespace (`Namespace::opening`: one
    // deleted and created again starts anew): the applied offset of its
    // last snapshot and when it was taken. Bounded by the partitions held:
    // those of namespaces no longer held go each round.
    let mut last: HashMap<(TopicPartition, u64), (u64, Instant)> = HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
        let Some(node) = node.upgrade() else { return };
        let namespaces = node.namespaces();
        last.retain(|(tp, opening), _| namespaces.iter().any(|ns| ns.opening == *opening && *ns.name == *tp.topic));
        for ns in namespaces {
            for handle in &ns.handles {
                if handle.status() != PartitionStatus::Serving {
                    continue;
                }
                let applied_next = handle.applied_next();
                let key = (handle.tp.clone(), ns.opening);
                let (last_offset, last_at) = match last.get(&key) {
                    Some(known) => *known,
                    None => {
                        // First look: what the object store already has.
                        let newest = snapshots.list(&ns.name, handle.partition).await.ok().and_then(|m| m.first().map(|(o, _)| *o));
                        let known = (newest.unwrap_or(0), Instant::now());
                        last.insert(key.clone(), known);
                        known
                    }
                };
                let changed = applied_next.saturating_sub(last_offset);
                let due = changed >= policy.entries || (changed > 0 && last_at.elapsed() >= policy.interval);
                if !due {
                    continue;
                }
                let results = take_now(&node, &snapshots, Some(&ns.name), Some(handle.partition), policy.retain).await;
                if let Some((_, Ok(report))) = results.first() {
                    last.insert(key, (report.applied_next, Instant::now()));
                } else {
                    // Failed (e.g. the object store is down): the interval restarts, the entry
                    // count does not, so a busy partition retries at the next check.
                    last.insert(key, (last_offset, Instant::now()));
                }
            }
        }
    }
}
