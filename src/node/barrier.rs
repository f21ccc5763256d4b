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
//! strong read appends a barrier — a tick at this node's clock, which
//! changes no record (it moves the partition's log time like any holder's
//! tick, and fires the procedure timers due by then) — with `acks=all`,
//! and waits until the partition has applied everything below the offset
//! the log gave it. Only the partition's current leader with its in-sync
//! replicas can acknowledge it, and every write acknowledged before the
//! barrier was sent is in the log below it (acknowledged writes are never
//! truncated: `acks=all`, `min.insync.replicas`, no unclean elections).
//! A deposed leader cannot acknowledge it: the read fails (503) rather than
//! answer stale.
//!
//! Barriers are shared: a read uses the last barrier of its partition that
//! was *sent after the read began*, or waits for the one in flight and then
//! sends the next. The append runs in a task of its own, so a read that
//! gives up (its timeout, its client gone) neither leaves a second barrier
//! free to start nor stops the one in flight: at most one barrier is in
//! flight per partition, and one starts only for a read still waiting.
//! Each barrier is an entry in the log: strong reads cost log offsets (at
//! most one per round trip to the leader per partition and node).
//!
//! Bounds: one slot per partition that had a strong read (namespaces ×
//! partitions, both bounded); one barrier in flight per partition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::log::{Log, LogError, TopicPartition};

/// A barrier's outcome: its offset, or why it failed (said to every waiter).
type Outcome = Option<Result<u64, String>>;

/// A barrier that landed: when it was sent (in the ticket order) and where.
#[derive(Clone, Copy)]
struct Landed {
    sent_ticket: u64,
    offset: u64,
}

/// The barrier in flight: when it was sent, and where its outcome appears.
struct InFlight {
    sent_ticket: u64,
    outcome: watch::Receiver<Outcome>,
}

/// One partition's barriers.
#[derive(Default)]
struct Slot {
    landed: Option<Landed>,
    in_flight: Option<InFlight>,
}

/// What a read does next.
enum Step {
    Passed(u64),
    /// Wait for this barrier (sent at the ticket), then decide again.
    Wait(u64, watch::Receiver<Outcome>),
}

/// The node's read barriers (one slot per partition read strongly).
#[derive(Default)]
pub(super) struct ReadBarriers {
    /// Orders "a read began" before "a barrier was sent".
    tickets: AtomicU64,
    slots: Mutex<HashMap<TopicPartition, Arc<Mutex<Slot>>>>,
}

impl ReadBarriers {
    /// The offset below which `tp` holds every entry acknowledged before
    /// this call: the log's end where that is authoritative, else a
    /// barrier's offset.
    pub(super) async fn pass(&self, log: &Arc<dyn Log>, tp: &TopicPartition) -> Result<u64, String> {
        if log.end_offset_is_linearizable() {
            return log.end_offset(tp).await.map_err(|e| e.to_string());
        }
        let began = self.tickets.fetch_add(1, Ordering::SeqCst);
        let slot = self.slots.lock().entry(tp.clone()).or_default().clone();
        // Each turn waits for one barrier to end; the second turn at the
        // latest waits for one sent after this read began.
        loop {
            let (sent_ticket, mut outcome) = match self.step(&slot, log, tp, began) {
                Step::Passed(offset) => return Ok(offset),
                Step::Wait(sent_ticket, outcome) => (sent_ticket, outcome),
            };
            let ended = outcome.wait_for(Option::is_some).await.map_err(|_| LogError::Closed.to_string())?.clone().expect("waited for it");
            if sent_ticket > began {
                return ended;
            }
        }
    }

    /// Under the slot's lock: a barrier sent after `began` that landed, or
    /// the one in flight to wait for, or a new one (sent now, in a task).
    fn step(&self, slot: &Arc<Mutex<Slot>>, log: &Arc<dyn Log>, tp: &TopicPartition, began: u64) -> Step {
        let mut state = slot.lock();
        if let Some(landed) = state.landed.filter(|landed| landed.sent_ticket > began) {
            return Step::Passed(landed.offset);
        }
        if let Some(in_flight) = &state.in_flight {
            return Step::Wait(in_flight.sent_ticket, in_flight.outcome.clone());
        }
        let sent_ticket = self.tickets.fetch_add(1, Ordering::SeqCst);
        let (report, outcome) = watch::channel(None);
        state.in_flight = Some(InFlight { sent_ticket, outcome: outcome.clone() });
        tokio::spawn(send(slot.clone(), log.clone(), tp.clone(), sent_ticket, report));
        Step::Wait(sent_ticket, outcome)
    }
}

/// Appends one barrier and reports its outcome to the slot and its waiters.
async fn send(slot: Arc<Mutex<Slot>>, log: Arc<dyn Log>, tp: TopicPartition, sent_ticket: u64, report: watch::Sender<Outcome>) {
    let mut ending = Ending { slot, report: Some(report) };
    let appended = super::write::append(log.as_ref(), &tp, barrier_entry()).await;
    if let Ok(offset) = appended {
        tracing::debug!(%tp, offset, "a read barrier landed");
        ending.slot.lock().landed = Some(Landed { sent_ticket, offset });
    }
    ending.report(appended.map_err(|e| e.to_string()));
}

/// Clears the slot's barrier in flight and tells its waiters how it ended,
/// also when its task ends without saying (a panic, the runtime stopping):
/// else no barrier would start on that partition again.
struct Ending {
    slot: Arc<Mutex<Slot>>,
    report: Option<watch::Sender<Outcome>>,
}

impl Ending {
    fn report(&mut self, outcome: Result<u64, String>) {
        self.slot.lock().in_flight = None;
        if let Some(report) = self.report.take() {
            report.send_replace(Some(outcome));
        }
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        if self.report.is_some() {
            self.report(Err("the read barrier's task ended before the log answered".into()));
        }
    }
}

/// A barrier: a tick at this node's clock (`barrier.rs` says why a tick).
fn barrier_entry() -> Bytes {
    Bytes::from(crate::codec::encode_tick(crate::codec::now_ms()))
}
