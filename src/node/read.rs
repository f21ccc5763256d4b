//! Read consistency: before a read touches the local store, wait (bounded)
//! until this replica has applied what the caller asked for.
//!
//! - `Local`: no wait; whatever is applied.
//! - `After(position)`: read-your-writes; wait until every named partition
//!   that the read touches has applied up to the position.
//! - `Strong`: linearizable; pass a read barrier (`barrier.rs`: the log's
//!   end where one process decides it, else an entry appended through the
//!   partition's current leader) and wait until everything below it is
//!   applied. Refused at once on a node cut off from every other region
//!   (its barrier could not pass: said at once, and why).

use std::time::Duration;

use super::{Namespace, Node};
use crate::partition::PartitionStatus;
use crate::position::Position;

#[derive(Debug, Clone)]
pub enum Consistency {
    Local,
    After(Position),
    Strong,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("partition {partition} is not served by this node: {reason}")]
    Refused { partition: u32, reason: String },
    #[error("the position is for namespace {position_ns:?}, not {ns:?}")]
    WrongNamespace { position_ns: String, ns: String },
    #[error("the position names partition {partition}, but namespace {ns:?} has {partitions} (0 to {})", partitions - 1)]
    PositionPartitionUnknown { partition: u32, ns: String, partitions: u32 },
    #[error(
        "the position names partition(s) {named:?}, none of which this read reads (it reads {reads:?}): waiting on \
         them would not make this read see the write; pass the position the write of this key returned"
    )]
    PositionElsewhere { named: Vec<u32>, reads: Vec<u32> },
    #[error("this replica did not reach the requested position within {timeout_ms} ms")]
    NotCaughtUp { timeout_ms: u64, position: Position },
    #[error("cannot tell where the log ends (a strong read's barrier): {0}")]
    Log(String),
    #[error(
        "this node is cut off from every other region (gossip or round-trip probes), so the log's end it can reach \
         may be a replaced leader's: a strong read could miss acknowledged writes; read with consistency=local \
         (stale, see x-tern-staleness-ms) or from a node in another region"
    )]
    Isolated,
}

/// Refuses `after=POSITION` that cannot mean what the caller wants: a
/// position naming a partition the namespace does not have, or (for a
/// request as its client sent it; a forwarded one carries a subset of the
/// keys) naming none of the partitions the read reads. Before, both were
/// ignored and the read answered at once, maybe without the write.
pub fn check_position(namespace: &Namespace, consistency: &Consistency, reads: &[u32], forwarded: bool) -> Result<(), ReadError> {
    let Consistency::After(position) = consistency else { return Ok(()) };
    if position.namespace != *namespace.name {
        return Err(ReadError::WrongNamespace { position_ns: position.namespace.clone(), ns: namespace.name.to_string() });
    }
    if let Some(&partition) = position.offsets.keys().find(|p| **p >= namespace.partitions) {
        return Err(ReadError::PositionPartitionUnknown { partition, ns: namespace.name.to_string(), partitions: namespace.partitions });
    }
    if !forwarded && !reads.is_empty() && !reads.iter().any(|p| position.offsets.contains_key(p)) {
        return Err(ReadError::PositionElsewhere { named: position.offsets.keys().copied().collect(), reads: reads.to_vec() });
    }
    Ok(())
}

/// Refuses a read of a partition that is refused (damaged, fenced) or
/// rebuilding: what a `Local` read checks, and every other first.
pub fn refuse_unserved(namespace: &Namespace, partitions: &[u32]) -> Result<(), ReadError> {
    for &p in partitions {
        let handle = namespace.handle(p);
        if let PartitionStatus::Refused(reason) = handle.status() {
            return Err(ReadError::Refused { partition: p, reason });
        }
        if let Some(why) = handle.rebuilding() {
            return Err(ReadError::Refused { partition: p, reason: format!("rebuilding: {why}; it serves again once caught up") });
        }
    }
    Ok(())
}

/// Waits until `partitions` of `namespace` satisfy `consistency`.
pub async fn await_consistency(
    node: &Node,
    namespace: &Namespace,
    partitions: &[u32],
    consistency: &Consistency,
    timeout: Duration,
) -> Result<(), ReadError> {
    refuse_unserved(namespace, partitions)?;
    let deadline = tokio::time::Instant::now() + timeout;
    let targets: Vec<(u32, u64)> = match consistency {
        Consistency::Local => return Ok(()),
        Consistency::After(position) => {
            if position.namespace != *namespace.name {
                return Err(ReadError::WrongNamespace { position_ns: position.namespace.clone(), ns: namespace.name.to_string() });
            }
            partitions.iter().filter_map(|p| position.offsets.get(p).map(|o| (*p, *o))).collect()
        }
        Consistency::Strong => {
            if node.is_isolated() {
                return Err(ReadError::Isolated);
            }
            let log = &node.log;
            // The barriers pass within the read's own timeout, all at once.
            let ends = futures::future::try_join_all(partitions.iter().map(|&p| async move {
                let end = node.barriers.pass(log, &namespace.handle(p).tp).await.map_err(ReadError::Log)?;
                Ok::<_, ReadError>((p, end))
            }));
            match tokio::time::timeout_at(deadline, ends).await {
                Ok(ends) => ends?,
                Err(_) => return Err(ReadError::Log(format!("the log did not take the read's barrier within timeout_ms={}", timeout.as_millis()))),
            }
        }
    };
    for (p, target) in targets {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !namespace.handle(p).wait_applied(target, left).await {
            return Err(ReadError::NotCaughtUp {
                timeout_ms: timeout.as_millis() as u64,
                position: namespace.position_of(partitions.iter().copied()),
            });
        }
    }
    Ok(())
}
