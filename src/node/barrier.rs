//! Read barriers: where a strong read waits, so that it sees every write
//! acknowledged before it began — whatever the brokers do.
//!
//! A log whose end offset is decided in one place (the embedded log: one
//! process appends and says where it ends) answers with its end offset.
//! Kafka cannot: a partition's leader cut off from the other brokers (its
//! clients still reach it) keeps answering with its old high watermark
//! while the controller has made another broker leader, which acknowledges
//! new writes; Kafka has no leader lease (issue 36, defect 12: strong reads
//! answered 404 for writes acknowledged 7–39 ms earlier). So on Kafka a
//! strong read appends a barrier — an entry that changes nothing (a tick
//! with time 0: it moves no log time, fires no timer) — with `acks=all`,
//! and waits until the partition has applied everything below the offset
//! the log gave it. Only the partition's current leader with its in-sync
//! replicas can acknowledge it, and every write acknowledged before the
//! barrier was sent is in the log below it (acknowledged writes are never
//! truncated: `acks=all`, `min.insync.replicas`, no unclean elections).
//! A deposed leader cannot acknowledge it: the read fails (503) rather than
//! answer stale.
//!
//! Barriers are shared: a read uses the last barrier of its partition that
//! was *sent after the read began*, or sends one; at most one is in flight
//! per partition, so under load a barrier serves every read that waited
//! for it, and a read sends at most one of its own after the one in flight.
//!
//! Bounds: one entry per partition that had a strong read (namespaces ×
//! partitions, both bounded); one barrier in flight per partition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::log::{Log, LogError, TopicPartition};

/// A barrier that landed: when it was sent (in the ticket order) and where.
#[derive(Clone, Copy)]
struct Landed {
    sent_ticket: u64,
    offset: u64,
}

/// One partition's last barrier; its lock is held while one is in flight.
type Slot = Arc<tokio::sync::Mutex<Option<Landed>>>;

/// The node's read barriers (one slot per partition read strongly).
#[derive(Default)]
pub(super) struct ReadBarriers {
    /// Orders "a read began" before "a barrier was sent".
    tickets: AtomicU64,
    slots: Mutex<HashMap<TopicPartition, Slot>>,
}

impl ReadBarriers {
    /// The offset below which `tp` holds every entry acknowledged before
    /// this call: the log's end where that is authoritative, else a
    /// barrier's offset.
    pub(super) async fn pass(&self, log: &dyn Log, tp: &TopicPartition) -> Result<u64, LogError> {
        if log.end_offset_is_linearizable() {
            return log.end_offset(tp).await;
        }
        let began = self.tickets.fetch_add(1, Ordering::SeqCst);
        let slot = self.slots.lock().entry(tp.clone()).or_default().clone();
        let mut last = slot.lock().await;
        if let Some(landed) = *last {
            if landed.sent_ticket > began {
                return Ok(landed.offset);
            }
        }
        let sent_ticket = self.tickets.fetch_add(1, Ordering::SeqCst);
        let offset = super::write::append(log, tp, barrier_entry()).await?;
        tracing::debug!(%tp, offset, "a read barrier landed");
        *last = Some(Landed { sent_ticket, offset });
        Ok(offset)
    }
}

/// A barrier: a tick with time 0, which every replica applies as nothing.
fn barrier_entry() -> Bytes {
    Bytes::from(crate::codec::encode_tick(0))
}
