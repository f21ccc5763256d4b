//! A partition's feed: the recent events the apply loop produced (the ring),
//! the index of the partition's queues, and the dispatcher task that
//! fans new events out to them.
//!
//! The apply loop only appends to the ring (a short lock, never more) and
//! wakes the dispatcher: it never waits on a queue. The dispatcher takes
//! everything new in one round and leaves one batch per matching queue
//! (one `Arc` for all the namespace-wide ones), so its cost per round is the
//! number of queues concerned, not the number of events.
//!
//! `dispatched_next`: every event below it has been left in the queue of
//! every queue registered at the time. A queue registers only at a
//! mark at or above it (`register`); one that stands lower first catches up
//! from the ring or the log. With no queue the apply loop advances it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use super::event::{Event, Mark};
use super::filter::Index;
use super::queue::{Batch, WatchQueue};

/// Most events a partition's ring keeps, and most bytes: history beyond it
/// is read back from the log.
#[derive(Debug, Clone, Copy)]
pub struct RingLimits {
    pub events_max: usize,
    pub bytes_max: usize,
}

#[cfg(test)]
impl RingLimits {
    /// Limits for unit tests (a node's come from its settings).
    pub const TEST: RingLimits = RingLimits { events_max: 8192, bytes_max: 4 * 1024 * 1024 };
}
/// Beyond its limits the ring still keeps events not yet dispatched, up to
/// this much more: the dispatcher is only ever behind by a scheduling delay,
/// and dropping what it has not sent would force every queue to resync.
const UNDISPATCHED_EVENTS_MAX: usize = 65_536;
const UNDISPATCHED_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The dispatcher re-checks this often even without a wake-up.
const DISPATCH_IDLE_CHECK: Duration = Duration::from_secs(1);
/// How many queues ahead a push asks for a queue's memory, and
/// how much of it (the `WatchQueue`'s first two lines: queue, signal, limits).
const PREFETCH_AHEAD: usize = 4;
const QUEUE_PREFETCH_LINES: usize = 2;

pub struct PartitionFeed {
    pub partition: u32,
    limits: RingLimits,
    ring: Mutex<Ring>,
    index: RwLock<Index>,
    wake: Notify,
    dispatcher_started: AtomicBool,
}

struct Ring {
    events: VecDeque<Arc<Event>>,
    bytes: usize,
    /// Every event of offsets in `[start, next)` is in `events`.
    start: u64,
    /// The applied offset the ring has caught up with.
    next: u64,
    dispatched_next: u64,
    queues: usize,
}

/// Events read for a queue catching up: everything it watches in
/// `[from, reached)`.
pub struct Chunk {
    pub events: Vec<Arc<Event>>,
    pub reached: u64,
}

impl PartitionFeed {
    pub fn new(partition: u32, applied_next: u64, limits: RingLimits) -> PartitionFeed {
        assert!(limits.events_max > 0 && limits.bytes_max > 0);
        PartitionFeed {
            partition,
            limits,
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                bytes: 0,
                start: applied_next,
                next: applied_next,
                dispatched_next: applied_next,
                queues: 0,
            }),
            index: RwLock::new(Index::default()),
            wake: Notify::new(),
            dispatcher_started: AtomicBool::new(false),
        }
    }

    /// Called by the apply loop after each commit: the events of the batch
    /// (in order) and the applied offset it reached.
    pub fn append(&self, events: Vec<Arc<Event>>, applied_next: u64) {
        let wake = {
            let mut ring = self.ring.lock();
            assert!(applied_next >= ring.next, "the applied offset never moves backwards");
            for event in events {
                assert!(event.offset >= ring.next && event.offset < applied_next, "events belong to the batch just applied");
                ring.bytes += event.size_bytes();
                ring.events.push_back(event);
            }
            ring.next = applied_next;
            if ring.queues == 0 {
                ring.dispatched_next = ring.next;
            }
            self.trim(&mut ring);
            ring.queues > 0
        };
        if wake {
            self.wake.notify_one();
        }
    }

    /// The partition's state jumped to `applied_next` without events (a
    /// restore from a snapshot): the ring restarts there, and every
    /// queue is marked overflowed, so its session resets it (sends the
    /// current state) instead of skipping what it cannot be told.
    pub fn jump(&self, applied_next: u64) {
        let index = self.index.read();
        let mut ring = self.ring.lock();
        assert!(applied_next >= ring.next, "the applied offset never moves backwards");
        ring.events.clear();
        ring.bytes = 0;
        (ring.start, ring.next, ring.dispatched_next) = (applied_next, applied_next, applied_next);
        for queue in index.everything.iter().chain(index.by_pk.values().flatten()) {
            queue.overflow();
        }
    }

    /// Evicts the oldest events past the limits, sparing undispatched ones
    /// up to the hard bound.
    fn trim(&self, ring: &mut Ring) {
        let hard_events_max = self.limits.events_max + UNDISPATCHED_EVENTS_MAX;
        let hard_bytes_max = self.limits.bytes_max + UNDISPATCHED_BYTES_MAX;
        while ring.events.len() > self.limits.events_max || ring.bytes > self.limits.bytes_max {
            let front = ring.events.front().expect("a ring over its bound is not empty");
            let over_hard = ring.events.len() > hard_events_max || ring.bytes > hard_bytes_max;
            if front.offset >= ring.dispatched_next && !over_hard {
                break;
            }
            let old = ring.events.pop_front().expect("checked above");
            ring.bytes -= old.size_bytes();
            ring.start = ring.start.max(old.offset + 1);
        }
    }

    pub fn dispatched_next(&self) -> u64 {
        self.ring.lock().dispatched_next
    }

    /// The offset after the last batch appended: the ring has every event
    /// below it that it still holds (`ring_chunk`).
    pub fn appended_next(&self) -> u64 {
        self.ring.lock().next
    }

    pub fn queues(&self) -> usize {
        self.ring.lock().queues
    }

    /// Registers `queue` standing at `mark`, if nothing it still needs
    /// was dispatched already; otherwise returns `dispatched_next` (catch up
    /// to it first, then try again).
    pub fn register(self: &Arc<Self>, queue: &Arc<WatchQueue>, mark: Mark) -> Result<(), u64> {
        {
            let mut index = self.index.write();
            let mut ring = self.ring.lock();
            if mark.offset < ring.dispatched_next {
                return Err(ring.dispatched_next);
            }
            index.insert(queue.clone());
            ring.queues += 1;
            assert_eq!(ring.queues, index.len(), "the ring counts exactly the indexed queues");
        }
        self.start_dispatcher();
        Ok(())
    }

    /// Registers `queue` at the current head; returns its mark there.
    pub fn register_at_head(self: &Arc<Self>, queue: &Arc<WatchQueue>) -> Mark {
        loop {
            let head = Mark::at(self.dispatched_next());
            if self.register(queue, head).is_ok() {
                return head;
            }
        }
    }

    pub fn unregister(&self, queue: &WatchQueue) {
        let mut index = self.index.write();
        if index.remove(queue) {
            let mut ring = self.ring.lock();
            ring.queues -= 1;
            if ring.queues == 0 {
                ring.dispatched_next = ring.next;
            }
        }
    }

    /// The events at or after `from` and below `to` (at most about
    /// `events_max`, cut at a mutation boundary), if the ring still has them.
    pub fn ring_chunk(&self, from: Mark, to: u64, events_max: usize) -> Option<Chunk> {
        let ring = self.ring.lock();
        if from.offset < ring.start {
            return None;
        }
        let first = ring.events.partition_point(|e| e.offset < from.offset);
        let mut events = Vec::new();
        let mut reached = to.min(ring.next);
        for event in ring.events.range(first..) {
            if event.offset >= reached {
                break;
            }
            if events.len() >= events_max && event.op_index == 0 {
                reached = event.offset;
                break;
            }
            if !from.covers(event) {
                events.push(event.clone());
            }
        }
        Some(Chunk { events, reached: reached.max(from.offset) })
    }

    fn start_dispatcher(self: &Arc<Self>) {
        if self.dispatcher_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let feed = Arc::downgrade(self);
        tokio::spawn(async move { dispatch_loop(feed).await });
    }

    /// One round: everything new to the queues it concerns.
    fn dispatch(&self) {
        let index = self.index.read();
        let (events, upto, lost) = {
            let ring = self.ring.lock();
            let from = ring.dispatched_next;
            if from >= ring.next {
                return;
            }
            let lost = from < ring.start;
            let first = ring.events.partition_point(|e| e.offset < from);
            (ring.events.range(first..).cloned().collect::<Vec<_>>(), ring.next, lost)
        };
        if lost {
            // The ring moved past events not yet dispatched (the dispatcher
            // fell behind by a whole ring): nobody may get a gap.
            tracing::warn!(partition = self.partition, "watch dispatch fell behind the ring; queues resync");
            crate::metrics::WATCH_DISPATCH_LOST.inc();
            index.everything.iter().chain(index.by_pk.values().flatten()).for_each(|s| s.overflow());
        } else if !events.is_empty() {
            fan_out(&index, events);
        }
        let mut ring = self.ring.lock();
        assert!(upto >= ring.dispatched_next);
        ring.dispatched_next = upto;
        self.trim(&mut ring);
    }
}

fn fan_out(index: &Index, events: Vec<Arc<Event>>) {
    if !index.everything.is_empty() {
        let shared: Batch = events.iter().cloned().collect();
        for (i, queue) in index.everything.iter().enumerate() {
            prefetch_ahead(&index.everything, i);
            queue.push(shared.clone());
        }
    }
    if index.by_pk.is_empty() {
        return;
    }
    // Events per watched pk, in order; then one batch shared by every
    // queue of the whole pk, and a filtered one for each narrower one.
    let mut by_pk: HashMap<&str, Vec<Arc<Event>>> = HashMap::new();
    for event in &events {
        if index.by_pk.contains_key(&event.pk) {
            by_pk.entry(&event.pk).or_default().push(event.clone());
        }
    }
    for (pk, pk_events) in by_pk {
        let queues = &index.by_pk[pk];
        let shared: Batch = pk_events.iter().cloned().collect();
        for (i, queue) in queues.iter().enumerate() {
            prefetch_ahead(queues, i);
            if queue.watches_whole_pk() {
                queue.push(shared.clone());
            } else {
                let narrower = &queue.filter;
                let matching: Vec<Arc<Event>> = pk_events.iter().filter(|e| narrower.matches(&e.pk, &e.sk)).cloned().collect();
                if !matching.is_empty() {
                    queue.push(matching.into());
                }
            }
        }
    }
}

/// Each queue's queue is memory of its own: asked for a few
/// queues ahead of the `i`th, its loads overlap with the pushes between.
fn prefetch_ahead(queues: &[Arc<WatchQueue>], i: usize) {
    if let Some(ahead) = queues.get(i + PREFETCH_AHEAD) {
        crate::prefetch::prefetch(Arc::as_ptr(ahead), QUEUE_PREFETCH_LINES);
    }
}

async fn dispatch_loop(feed: Weak<PartitionFeed>) {
    loop {
        let notified = {
            let Some(feed) = feed.upgrade() else { return };
            feed.dispatch();
            // Register interest before dropping the strong reference, so a
            // wake-up between here and the wait is not lost.
            let feed_for_wait = feed.clone();
            async move {
                let _ = tokio::time::timeout(DISPATCH_IDLE_CHECK, feed_for_wait.wake.notified()).await;
            }
        };
        notified.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Mutation, Op, OpKind};
    use crate::fanout::filter::Filter;
    use crate::fanout::queue::{Drained, Mode, QueueLimits};

    fn events(offset: u64, pk: &str, sks: &[&str]) -> Vec<Arc<Event>> {
        let ops = sks
            .iter()
            .map(|sk| Op { pk: pk.into(), sk: (*sk).into(), kind: OpKind::Put(bytes::Bytes::from_static(b"1")), condition: None })
            .collect();
        Event::of_mutation(0, offset, &Mutation { write_id: bytes::Bytes::new(), ops, ..Default::default() })
    }

    fn queue(id: u64, filter: Filter) -> Arc<WatchQueue> {
        Arc::new(WatchQueue::new(id, id % 3, filter, Mode::Log, QueueLimits { events_max: 100, bytes_max: 1 << 20 }))
    }

    fn drained(s: &WatchQueue) -> Vec<(u64, String, String)> {
        let mut batches = Vec::new();
        match s.drain(&mut batches) {
            Drained::Batches => batches.iter().flat_map(|b| b.iter().map(|e| (e.offset, e.pk.to_string(), e.sk.to_string()))).collect(),
            Drained::Empty => vec![],
            _ => panic!("unexpected overflow"),
        }
    }

    #[tokio::test]
    async fn dispatch_reaches_only_matching_queues_and_registration_needs_a_current_mark() {
        let feed = Arc::new(PartitionFeed::new(0, 0, RingLimits::TEST));
        feed.append(events(0, "a", &["x"]), 1);
        let everything = queue(1, Filter::Namespace);
        let prefix = queue(2, Filter::Prefix { pk: "a".into(), prefix: "y".into() });
        let other = queue(3, Filter::Pk { pk: "b".into() });
        // No queue yet: the apply loop advanced dispatched_next itself.
        assert_eq!(feed.dispatched_next(), 1);
        assert_eq!(feed.register(&everything, Mark::at(0)), Err(1), "offset 0 was dispatched before it registered");
        assert_eq!(feed.register_at_head(&everything), Mark::at(1));
        feed.register(&prefix, Mark::at(1)).unwrap();
        feed.register(&other, Mark::at(5)).unwrap();
        feed.append(events(1, "a", &["x", "yz"]), 2);
        feed.dispatch();
        assert_eq!(drained(&everything), vec![(1, "a".into(), "x".into()), (1, "a".into(), "yz".into())]);
        assert_eq!(drained(&prefix), vec![(1, "a".into(), "yz".into())]);
        assert_eq!(drained(&other), vec![]);
        assert_eq!(feed.dispatched_next(), 2);
        // The ring serves catch-up from any mark it still covers, inside a mutation too.
        let chunk = feed.ring_chunk(Mark { offset: 1, ops_done: 1 }, 2, 100).unwrap();
        assert_eq!((chunk.events.len(), chunk.reached), (1, 2));
        assert_eq!(&*chunk.events[0].sk, "yz");
        feed.unregister(&everything);
        feed.unregister(&prefix);
        feed.unregister(&other);
        assert_eq!(feed.queues(), 0);
    }

    #[test]
    fn the_ring_is_bounded_and_says_when_history_is_older_than_it() {
        let feed = PartitionFeed::new(0, 0, RingLimits::TEST);
        for offset in 0..(RingLimits::TEST.events_max as u64 + 10) {
            feed.append(events(offset, "a", &["x"]), offset + 1);
        }
        assert!(feed.ring_chunk(Mark::at(0), 5, 100).is_none(), "evicted: read the log instead");
        let chunk = feed.ring_chunk(Mark::at(20), RingLimits::TEST.events_max as u64, 100).unwrap();
        assert_eq!(chunk.events.len(), 100);
        assert_eq!(chunk.reached, 120, "cut at a mutation boundary");
    }
}
