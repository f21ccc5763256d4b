//! A subscriber's bounded queue: where the dispatcher leaves events and the
//! subscriber's own task picks them up.
//!
//! Pushing never waits. When a push would pass the bound (events or bytes):
//! - `Mode::State` folds the queue into the latest event per key
//!   (conflation): the subscriber later receives each changed key once, with
//!   its newest value, and exact positions. If even that passes the bound
//!   the queue is dropped and marked overflowed: the subscriber gets a
//!   `reset` with the current state.
//! - `Mode::Log` marks the queue overflowed: the subscriber is cancelled
//!   with `slow_consumer` and the position it reached, from which it can
//!   resume (replayed from the log).
//!
//! Either way one slow subscriber costs the others nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use futures::task::AtomicWaker;
use parking_lot::Mutex;

use super::event::Event;
use super::filter::Filter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every change, in order; a subscriber that falls too far behind is cancelled.
    Log,
    /// The latest state; a subscriber that falls behind gets changes conflated.
    State,
}

#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    pub events_max: usize,
    pub bytes_max: usize,
}

/// Events dispatched to one subscriber in one round (one partition).
pub type Batch = Arc<[Arc<Event>]>;

pub struct Subscriber {
    pub id: u64,
    /// The connection it is delivered on (0: unknown). The index keeps one
    /// connection's subscribers together, so an event wakes the task that
    /// drives them once, not once per subscriber.
    pub group: u64,
    pub filter: Filter,
    pub mode: Mode,
    limits: QueueLimits,
    state: Mutex<QueueState>,
    pub signal: Signal,
}

/// Tells the subscriber's session that its queue changed: a flag and the
/// waker of the one task that waits. Cheaper than a `Notify` (no waiter
/// list, no lock): at 10,000 subscribers it is paid 10,000 times a put.
#[derive(Default)]
pub struct Signal {
    raised: AtomicBool,
    waker: AtomicWaker,
}

impl Signal {
    pub(super) fn raise(&self) {
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

#[derive(Default)]
struct QueueState {
    batches: VecDeque<Batch>,
    events: usize,
    bytes: usize,
    /// Latest event per (partition, pk, sk), once the queue overflowed in state mode.
    conflated: HashMap<(u32, Box<str>, Box<str>), Arc<Event>>,
    conflated_bytes: usize,
    overflowed: bool,
}

/// What the subscriber's task finds when it looks.
pub enum Drained {
    Empty,
    /// The queued batches, moved into the caller's vector.
    Batches,
    /// Latest event per key, in log order per partition.
    Conflated(Vec<Arc<Event>>),
    /// Too far behind: cancel (log mode) or reset (state mode).
    Overflowed,
}

impl Subscriber {
    pub fn new(id: u64, group: u64, filter: Filter, mode: Mode, limits: QueueLimits) -> Subscriber {
        assert!(limits.events_max > 0 && limits.bytes_max > 0);
        Subscriber { id, group, filter, mode, limits, state: Mutex::new(QueueState::default()), signal: Signal::default() }
    }

    /// Leaves a batch for the subscriber. Never waits.
    pub fn push(&self, batch: Batch) {
        let bytes: usize = batch.iter().map(|e| e.size_bytes()).sum();
        {
            let mut state = self.state.lock();
            if state.overflowed {
                return;
            }
            let fits = state.events + batch.len() <= self.limits.events_max && state.bytes + bytes <= self.limits.bytes_max;
            if fits && state.conflated.is_empty() {
                state.events += batch.len();
                state.bytes += bytes;
                state.batches.push_back(batch);
            } else {
                match self.mode {
                    Mode::Log => state.overflow(),
                    Mode::State => {
                        let queued: Vec<Batch> = state.batches.drain(..).collect();
                        state.events = 0;
                        state.bytes = 0;
                        for b in queued.iter().chain(std::iter::once(&batch)) {
                            if !state.fold(b, self.limits) {
                                state.overflow();
                                break;
                            }
                        }
                    }
                }
            }
        }
        self.signal.raise();
    }

    /// Marks the queue overflowed: the dispatcher lost events this subscriber needed.
    pub fn overflow(&self) {
        self.state.lock().overflow();
        self.signal.raise();
    }

    /// Takes what is queued; batches go into `batches` (a vector the
    /// caller keeps, so a busy subscriber allocates nothing per drain).
    pub fn drain(&self, batches: &mut Vec<Batch>) -> Drained {
        let mut state = self.state.lock();
        if state.overflowed {
            return Drained::Overflowed;
        }
        if !state.conflated.is_empty() {
            let mut events: Vec<Arc<Event>> = state.conflated.drain().map(|(_, e)| e).collect();
            state.conflated_bytes = 0;
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
        !state.overflowed && state.batches.is_empty() && state.conflated.is_empty()
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

    /// Folds a batch into the latest-per-key map; false if the map passes the bound.
    fn fold(&mut self, batch: &Batch, limits: QueueLimits) -> bool {
        for event in batch.iter() {
            let key = (event.partition, event.pk.clone(), event.sk.clone());
            self.conflated_bytes += event.size_bytes();
            if let Some(old) = self.conflated.insert(key, event.clone()) {
                self.conflated_bytes -= old.size_bytes();
            }
            if self.conflated.len() > limits.events_max || self.conflated_bytes > limits.bytes_max {
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
        Event::of_mutation(0, offset, &Mutation { write_id: bytes::Bytes::new(), ops }).into()
    }

    #[test]
    fn state_mode_conflates_to_the_latest_event_per_key_then_resets_past_the_bound() {
        let sub = Subscriber::new(1, 0, Filter::Namespace, Mode::State, QueueLimits { events_max: 3, bytes_max: 1 << 20 });
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
        let sub = Subscriber::new(1, 0, Filter::Namespace, Mode::Log, QueueLimits { events_max: 2, bytes_max: 1 << 20 });
        sub.push(batch(0, &["a", "b"]));
        let mut batches = Vec::new();
        assert!(matches!(sub.drain(&mut batches), Drained::Batches));
        assert_eq!(batches.len(), 1);
        batches.clear();
        sub.push(batch(1, &["a", "b"]));
        sub.push(batch(2, &["c"]));
        assert!(matches!(sub.drain(&mut batches), Drained::Overflowed));
        sub.push(batch(3, &["a"]));
        assert!(matches!(sub.drain(&mut batches), Drained::Overflowed), "stays overflowed until the subscriber deals with it");
        assert!(batches.is_empty());
    }
}
