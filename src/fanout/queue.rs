//! A watch's bounded queue: where the dispatcher leaves events and the
//! watch's session picks them up.
//!
//! Pushing never waits. When a push would pass the bound (events or bytes):
//! - `Mode::State` folds the queue into the latest event per key
//!   (conflation): the watch later receives each changed key once, with
//!   its newest value, and exact positions. If even that passes the bound
//!   the queue is dropped and marked overflowed: the watch gets a
//!   `reset` with the current state.
//! - `Mode::Log` marks the queue overflowed: the watch is cancelled
//!   with `slow_consumer` and the position it reached, from which it can
//!   resume (replayed from the log).
//!
//! Either way one slow watch costs the others nothing.

use std::collections::HashMap;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use smallvec::SmallVec;

use super::event::Event;
use super::filter::Filter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every change, in order; a queue that falls too far behind is cancelled.
    Log,
    /// The latest state; a queue that falls behind gets changes conflated.
    State,
}

#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    pub events_max: usize,
    pub bytes_max: usize,
}

/// Events dispatched to one watch in one round (one partition).
pub(crate) type Batch = Arc<[Arc<Event>]>;

/// The fan-out's side of one watch: its filter, its bounded queue and the
/// signal that wakes its session.
///
/// Laid out for the fan-out: at 10,000 watches a put touches 10,000 of
/// these, from the dispatcher and again from each session, and each line
/// not in cache is a wait for memory (the delivery's main cost). So what
/// both touch per event sits in the first two cache lines: the queue's
/// lock and state (one batch inline, no buffer of its own) and the
/// signal's flag in the first, the signal's waker, the limits and the
/// mode in the second. The rest is only read when a session starts or
/// catches up.
#[repr(C, align(64))]
pub struct WatchQueue {
    state: Mutex<QueueState>,
    pub signal: Signal,
    limits: QueueLimits,
    pub mode: Mode,
    /// The filter is a whole pk (`Filter::Pk`): every batch of the pk goes as is.
    whole_pk: bool,
    pub id: u64,
    /// The connection it is delivered on (0: unknown). The index keeps one
    /// connection's queues together, so an event wakes the task that
    /// drives them once, not once per queue.
    pub group: u64,
    pub filter: Filter,
}

/// The lines the fan-out touches (see `WatchQueue`).
const CACHE_LINE_BYTES: usize = 64;
const _: () = assert!(std::mem::size_of::<Mutex<QueueState>>() < CACHE_LINE_BYTES, "the queue and the signal's flag share a line");
const _: () = assert!(std::mem::offset_of!(WatchQueue, signal) + std::mem::offset_of!(Signal, raised) < CACHE_LINE_BYTES);
const _: () = assert!(std::mem::offset_of!(WatchQueue, whole_pk) < 2 * CACHE_LINE_BYTES);

/// Tells the queue's session that its queue changed: a flag and the
/// waker of the one task that waits. Cheaper than a `Notify` (no waiter
/// list, no lock): at 10,000 queues it is paid 10,000 times a put.
/// The flag comes first: it shares the queue's cache line.
#[derive(Default)]
#[repr(C)]
pub struct Signal {
    raised: AtomicBool,
    waker: AtomicWaker,
}

impl Signal {
    /// Wakes the watch: the queue has something (the dispatcher's push; tests).
    pub(crate) fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Takes the signal: true if it was raised since it was last taken.
    pub fn take(&self) -> bool {
        self.raised.swap(false, Ordering::AcqRel)
    }

    /// Has `waker` woken by the next raise; true (and the signal taken) if
    /// one came in meanwhile, which woke nobody.
    pub fn register(&self, waker: &std::task::Waker) -> bool {
        self.waker.register(waker);
        self.take()
    }
}

/// The queue. Small on purpose (see `WatchQueue`): counts as `u32` (the
/// limits are checked to fit), the conflation map boxed (only a queue
/// that fell behind in state mode has one).
#[derive(Default)]
struct QueueState {
    /// A live queue holds one batch at a time: inline, no allocation.
    batches: SmallVec<[Batch; 1]>,
    events: u32,
    bytes: u32,
    /// Latest event per key, once the queue overflowed in state mode.
    conflated: Option<Box<Conflated>>,
    overflowed: bool,
}

#[derive(Default)]
struct Conflated {
    /// Latest event per (partition, pk, sk).
    latest: HashMap<(u32, Box<str>, Box<str>), Arc<Event>>,
    bytes: usize,
}

/// What the queue's task finds when it looks.
pub enum Drained {
    Empty,
    /// The queued batches, moved into the caller's vector.
    Batches,
    /// Latest event per key, in log order per partition.
    Conflated(Vec<Arc<Event>>),
    /// Too far behind: cancel (log mode) or reset (state mode).
    Overflowed,
}

impl WatchQueue {
    pub fn new(id: u64, group: u64, filter: Filter, mode: Mode, limits: QueueLimits) -> WatchQueue {
        assert!(limits.events_max > 0 && limits.bytes_max > 0);
        assert!(u32::try_from(limits.events_max).is_ok() && u32::try_from(limits.bytes_max).is_ok(), "queue counts are u32");
        let whole_pk = matches!(filter, Filter::Pk { .. });
        WatchQueue { state: Mutex::new(QueueState::default()), signal: Signal::default(), limits, mode, whole_pk, id, group, filter }
    }

    /// Whether every event of the watched pk matches (no narrower filter to apply).
    pub fn watches_whole_pk(&self) -> bool {
        self.whole_pk
    }

    /// Leaves a batch for the queue. Never waits.
    pub fn push(&self, batch: Batch) {
        let bytes: usize = batch.iter().map(|e| e.size_bytes()).sum();
        {
            let mut state = self.state.lock();
            if state.overflowed {
                return;
            }
            let events = state.events as usize + batch.len();
            let bytes = state.bytes as usize + bytes;
            let fits = events <= self.limits.events_max && bytes <= self.limits.bytes_max;
            if fits && state.conflated.is_none() {
                // Within the limits, which fit in u32 (checked in `new`).
                state.events = events as u32;
                state.bytes = bytes as u32;
                state.batches.push(batch);
            } else {
                match self.mode {
                    Mode::Log => state.overflow(),
                    Mode::State => {
                        let queued = std::mem::take(&mut state.batches);
                        state.events = 0;
                        state.bytes = 0;
                        let conflated = state.conflated.get_or_insert_with(Box::default);
                        let folded = queued.iter().chain(std::iter::once(&batch)).all(|b| conflated.fold(b, self.limits));
                        if !folded {
                            state.overflow();
                        }
                    }
                }
            }
        }
        self.signal.raise();
    }

    /// Marks the queue overflowed: the dispatcher lost events this queue needed.
    pub fn overflow(&self) {
        self.state.lock().overflow();
        self.signal.raise();
    }

    /// Takes what is queued; batches go into `batches` (kept by the
    /// caller, so a busy queue allocates nothing per drain).
    pub fn drain(&self, batches: &mut impl Extend<Batch>) -> Drained {
        let mut state = self.state.lock();
        if state.overflowed {
            return Drained::Overflowed;
        }
        if let Some(conflated) = state.conflated.take() {
            let mut events: Vec<Arc<Event>> = conflated.latest.into_values().collect();
            events.sort_by_key(|e| (e.partition, e.offset, e.op_index));
            return Drained::Conflated(events);
        }
        if state.batches.is_empty() {
            return Drained::Empty;
        }
        state.events = 0;
        state.bytes = 0;
        batches.extend(state.batches.drain(..));
        Drained::Batches
    }

    /// Nothing waits here: every event dispatched so far was taken.
    pub fn is_empty(&self) -> bool {
        let state = self.state.lock();
        !state.overflowed && state.batches.is_empty() && state.conflated.is_none()
    }

    /// Forgets everything queued (a reset is about to send the whole state).
    pub fn clear(&self) {
        *self.state.lock() = QueueState::default();
    }
}

impl QueueState {
    fn overflow(&mut self) {
        *self = QueueState { overflowed: true, ..QueueState::default() };
    }
}

impl Conflated {
    /// Folds a batch into the latest-per-key map; false if the map passes the bound.
    fn fold(&mut self, batch: &Batch, limits: QueueLimits) -> bool {
        for event in batch.iter() {
            let key = (event.partition, event.pk.clone(), event.sk.clone());
            self.bytes += event.size_bytes();
            if let Some(old) = self.latest.insert(key, event.clone()) {
                self.bytes -= old.size_bytes();
            }
            if self.latest.len() > limits.events_max || self.bytes > limits.bytes_max {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Mutation, Op, OpKind};

    fn batch(offset: u64, keys: &[&str]) -> Batch {
        let ops = keys
            .iter()
            .map(|k| Op { pk: "p".into(), sk: (*k).into(), kind: OpKind::Put(bytes::Bytes::from_static(b"1")), condition: None })
            .collect();
        Event::of_mutation(0, offset, &Mutation { write_id: bytes::Bytes::new(), ops, ..Default::default() }).into()
    }

    #[test]
    fn state_mode_conflates_to_the_latest_event_per_key_then_resets_past_the_bound() {
        let sub = WatchQueue::new(1, 0, Filter::Namespace, Mode::State, QueueLimits { events_max: 3, bytes_max: 1 << 20 });
        sub.push(batch(0, &["a", "b"]));
        sub.push(batch(1, &["a"]));
        sub.push(batch(2, &["a", "b"])); // 5 events > 3: conflated to a@2, b@2
        let mut batches = Vec::new();
        match sub.drain(&mut batches) {
            Drained::Conflated(events) => {
                let got: Vec<(u64, &str)> = events.iter().map(|e| (e.offset, &*e.sk)).collect();
                assert_eq!(got, vec![(2, "a"), (2, "b")]);
            }
            _ => panic!("expected conflated events"),
        }
        assert!(sub.is_empty());
        sub.push(batch(3, &["a", "b", "c"]));
        sub.push(batch(4, &["d"])); // conflated map of 4 keys > 3: overflowed
        assert!(matches!(sub.drain(&mut batches), Drained::Overflowed));
        assert!(batches.is_empty());
        sub.clear();
        assert!(sub.is_empty());
    }

    #[test]
    fn log_mode_overflows_instead_of_conflating() {
        let sub = WatchQueue::new(1, 0, Filter::Namespace, Mode::Log, QueueLimits { events_max: 2, bytes_max: 1 << 20 });
        sub.push(batch(0, &["a", "b"]));
        let mut batches = Vec::new();
        assert!(matches!(sub.drain(&mut batches), Drained::Batches));
        assert_eq!(batches.len(), 1);
        batches.clear();
        sub.push(batch(1, &["a", "b"]));
        sub.push(batch(2, &["c"]));
        assert!(matches!(sub.drain(&mut batches), Drained::Overflowed));
        sub.push(batch(3, &["a"]));
        assert!(matches!(sub.drain(&mut batches), Drained::Overflowed), "stays overflowed until the queue deals with it");
        assert!(batches.is_empty());
    }
}
