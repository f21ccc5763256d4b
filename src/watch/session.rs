//! One watch, from its start to its end: catch up (from the ring or
//! the log) or send the current state, register with each watched partition's feed,
//! then deliver what the dispatcher leaves in its queue, with periodic
//! `progress` and `keep-alive` messages. The transport (SSE or WebSocket)
//! only turns `Message`s into bytes.
//!
//! Every change it sends carries the cursor after it, and it never sends a
//! change its cursor already covers: replayed history, dispatched events and
//! the current state's position meet without a gap or a repeat.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::task::{Context, Poll};

use smallvec::SmallVec;

use super::history::{self, HistoryError};
use super::outlet::Outlet;
use super::wakes::{LiveWakes, Wake};
use super::{Start, WatchConfig};
use crate::fanout::cursor::{Cursor, Marks};
use crate::fanout::event::{Event, Mark};
use crate::fanout::feed::Chunk;
use crate::fanout::filter::Filter;
use crate::fanout::queue::{Batch, Drained, Mode, WatchQueue};
use crate::log::Log;
use crate::partition::Namespace;
use crate::partition::PartitionStatus;

/// Events sent per catch-up step (then the cursor moves and the step repeats).
const CATCH_UP_EVENTS_MAX: usize = 1024;
/// Records read per page of the current state.
const STATE_PAGE_RECORDS: usize = 1000;
/// Bytes of keys and values one page of state holds at most (at least one
/// record): a state of large values is read a few records at a time. It
/// waits in the session while its client does not read: per watch, what a
/// client that never reads holds (4 MiB before issue 35: 16 such watches
/// of a 32 MiB state held ~0.5 GiB with the outlets' share).
const STATE_PAGE_BYTES_MAX: usize = 1024 * 1024;

/// What a watch tells its client.
#[derive(Debug)]
pub enum Message {
    /// A put or delete; `id` is the cursor after it (none inside a
    /// conflated or current-state run, whose end carries it).
    Change {
        event: Arc<Event>,
        id: ChangeId,
    },
    /// The full state of what is watched follows (as puts), then `Synced`.
    /// `reason` is `snapshot` when asked for (`from=snapshot`), otherwise
    /// why the watch is reset (`history_gone`, `slow_consumer`).
    Begin {
        position: String,
        reason: &'static str,
    },
    Synced {
        position: String,
    },
    Progress {
        position: String,
    },
    KeepAlive,
    /// The watch ends; it may resume from `position`.
    Cancel {
        reason: &'static str,
        position: String,
        message: String,
    },
    /// Encoded by the transport itself (a WebSocket reply to a client
    /// message), passed through in order with the watches' messages.
    Reply(String),
}

impl Message {
    /// Bytes this message holds, for the outlet's bound (`OUTLET_BYTES_MAX`).
    pub fn size_bytes(&self) -> usize {
        let held = match self {
            Message::Change { event, id: ChangeId::Cursor(cursor) } => event.size_bytes() + cursor.len(),
            Message::Change { event, .. } => event.size_bytes(),
            Message::Begin { position, .. } | Message::Synced { position } | Message::Progress { position } => position.len(),
            Message::KeepAlive => 0,
            Message::Cancel { position, message, .. } => position.len() + message.len(),
            Message::Reply(text) => text.len(),
        };
        std::mem::size_of::<Message>() + held
    }
}

/// The `id` a change carries: the watch's cursor after it.
#[derive(Debug)]
pub enum ChangeId {
    /// None inside a current-state or conflated run (its end carries the position).
    None,
    /// The event's own position (`Event::position_after`, formatted before
    /// the change is sent): the watch watches only the event's
    /// partition, so its cursor after the event is what every such
    /// watch's is, and the transport may share the encoded event too.
    Event,
    /// The watch's whole cursor (it watches several partitions).
    Cursor(String),
}

impl ChangeId {
    /// The id as text, if the change has one.
    pub fn text<'a>(&'a self, event: &'a Event) -> Option<&'a str> {
        match self {
            ChangeId::None => None,
            ChangeId::Event => Some(event.formatted_position_after().expect("formatted before the change was sent")),
            ChangeId::Cursor(text) => Some(text),
        }
    }
}

/// A live session's state besides the session itself.
struct Live {
    wakes: LiveWakes,
    /// Drained from the queue and not all delivered yet (a live watch
    /// finds one batch at a time: inline, no buffer of its own)...
    batches: SmallVec<[Batch; 1]>,
    /// ...from this event of the first batch on.
    next_event: usize,
}

/// What `poll_live` hands back to the session's async loop.
enum Step {
    /// A change the outlet has no room for: send it (waiting), then go on.
    Wait(Message),
    /// Not the queue: a timer or the node stopping.
    Woke(Wake),
    Conflated(Vec<Arc<Event>>),
    Overflowed,
}

/// Why a session stopped early.
enum Stop {
    HistoryGone(String),
    Cancel { reason: &'static str, message: String },
}

pub struct Session {
    namespace: Arc<Namespace>,
    log: Arc<dyn Log>,
    queue: Arc<WatchQueue>,
    cursor: Cursor,
    registered: BTreeSet<u32>,
    out: Outlet,
    config: WatchConfig,
    /// The cursor's marks when a position last went out (a change's id,
    /// `progress`, `synced`): `progress` is sent only once they moved.
    /// Compared, not formatted: a busy watch never formats its cursor.
    sent: Marks,
    /// Keeps the node's watch count.
    _slot: super::Slot,
    /// True once the node stops.
    closing: tokio::sync::watch::Receiver<bool>,
}

impl Session {
    #[allow(clippy::too_many_arguments)] // each is a part the session owns; a struct of them would only rename them
    pub(super) fn new(
        namespace: Arc<Namespace>,
        log: Arc<dyn Log>,
        queue: Arc<WatchQueue>,
        cursor: Cursor,
        out: Outlet,
        config: WatchConfig,
        slot: super::Slot,
        closing: tokio::sync::watch::Receiver<bool>,
    ) -> Session {
        Session { namespace, log, queue, cursor, registered: BTreeSet::new(), out, config, sent: Marks::default(), _slot: slot, closing }
    }

    pub async fn run(mut self, start: Start) {
        let started = match start {
            Start::Now => {
                for p in self.partitions() {
                    let mark = self.namespace.handle(p).feed.register_at_head(&self.queue);
                    self.cursor.marks.insert(p, mark);
                    self.registered.insert(p);
                }
                // The starting position, at once: a client holds a cursor
                // to resume from before anything changes.
                self.mark_sent();
                let position = self.cursor.to_string();
                self.send(Message::Progress { position }).await;
                Ok(())
            }
            // Boxed: the cold paths' state (log reads, store pages) then
            // takes no room in the future a live delivery polls (see `live`).
            Start::Cursor => Box::pin(self.catch_up_all()).await,
            Start::CurrentState => Box::pin(self.send_current_state("snapshot")).await,
        };
        let mut result = started;
        let stopped = loop {
            let stop = match result {
                Ok(()) => match self.live().await {
                    Err(stop) => stop,
                    Ok(never) => match never {},
                },
                Err(stop) => stop,
            };
            match stop {
                Stop::HistoryGone(why) => {
                    tracing::debug!(watch = self.queue.id, %why, "history gone; resetting the watch");
                    crate::metrics::WATCH_RESETS.with_label_values(&["history_gone"]).inc();
                    result = Box::pin(self.send_current_state("history_gone")).await;
                }
                other => break other,
            }
        };
        if let Stop::Cancel { reason, message } = stopped {
            let position = self.cursor.to_string();
            self.out.send(Message::Cancel { reason, position, message }).await;
        }
    }

    /// The watched partitions: the cursor names each of them (from `open`).
    fn partitions(&self) -> Vec<u32> {
        self.cursor.marks.partitions().collect()
    }

    async fn catch_up_all(&mut self) -> Result<(), Stop> {
        for p in self.partitions() {
            self.catch_up(p).await?;
        }
        Ok(())
    }

    /// Replays partition `p` from the cursor until the feed lets it register.
    async fn catch_up(&mut self, p: u32) -> Result<(), Stop> {
        let handle = self.namespace.handle(p).clone();
        loop {
            self.check_partition(p)?;
            let mark = self.cursor.marks[p];
            let head = match handle.feed.register(&self.queue, mark) {
                Ok(()) => {
                    self.registered.insert(p);
                    return Ok(());
                }
                Err(head) => head,
            };
            let chunk = match handle.feed.ring_chunk(mark, head, CATCH_UP_EVENTS_MAX) {
                Some(chunk) => chunk,
                None => match history::chunk_from_log(&handle, self.log.as_ref(), mark, head, CATCH_UP_EVENTS_MAX).await {
                    Ok(chunk) => chunk,
                    Err(HistoryError::Gone(why)) => return Err(Stop::HistoryGone(why)),
                    Err(e) => return Err(Stop::Cancel { reason: "unavailable", message: e.to_string() }),
                },
            };
            crate::metrics::WATCH_REPLAYED_EVENTS.inc_by(chunk.events.len() as u64);
            self.deliver_chunk(p, chunk).await;
        }
    }

    async fn deliver_chunk(&mut self, p: u32, chunk: Chunk) {
        for event in chunk.events {
            if self.queue.filter.matches(&event.pk, &event.sk) {
                self.deliver(&event).await;
            }
        }
        let mark = self.cursor.marks.get_mut(p).expect("watched partition");
        *mark = (*mark).max(Mark::at(chunk.reached));
    }

    fn check_partition(&self, p: u32) -> Result<(), Stop> {
        if self.namespace.is_deleted() {
            return Err(Stop::Cancel {
                reason: "namespace_deleted",
                message: format!("namespace {:?} was deleted; its records and history are gone", self.namespace.name),
            });
        }
        match self.namespace.handle(p).status() {
            PartitionStatus::Refused(reason) => {
                Err(Stop::Cancel { reason: "partition_refused", message: format!("partition {p} is refused: {reason}") })
            }
            PartitionStatus::NotHeld => Err(Stop::Cancel {
                reason: "not_held",
                message: format!("partition {p} is no longer held by this node; resume through a node that holds it"),
            }),
            PartitionStatus::Serving | PartitionStatus::CatchingUp => Ok(()),
        }
    }

    /// Sends one change unless the cursor already covers it.
    async fn deliver(&mut self, event: &Arc<Event>) {
        if let Some(change) = self.change(event) {
            self.send(change).await;
        }
    }

    /// The message for one change, and the cursor moved past it; none if
    /// the cursor already covers it.
    fn change(&mut self, event: &Arc<Event>) -> Option<Message> {
        if self.cursor.covers(event) {
            return None;
        }
        self.cursor.advance(event);
        self.mark_sent();
        let id = if self.cursor.marks.len() == 1 {
            // The event's own position is this cursor: formatted once for
            // every watch of the partition, not once each.
            // The namespace's own name: shared by every session, so hot in cache.
            let shared = event.position_after(&self.namespace.name);
            debug_assert_eq!(shared, self.cursor.to_string());
            ChangeId::Event
        } else {
            ChangeId::Cursor(self.cursor.to_string())
        };
        Some(Message::Change { event: event.clone(), id })
    }

    /// Waits only for room in the outlet: a send never fails (the
    /// transport that drives the session drops it when the client goes).
    async fn send(&self, message: Message) {
        self.out.send(message).await
    }

    /// Sends the full state of what is watched, consistent with one position
    /// per partition, then registers every partition from there.
    async fn send_current_state(&mut self, reason: &'static str) -> Result<(), Stop> {
        // Anything queued is older than the views read below: the state sent has it.
        self.queue.clear();
        let mut views = Vec::new();
        for p in self.partitions() {
            self.check_partition(p)?;
            let view = self.namespace.handle(p).read_view().map_err(|e| Stop::Cancel { reason: "unavailable", message: e.to_string() })?;
            self.cursor.marks.insert(p, Mark::at(view.applied_next));
            views.push((p, view));
        }
        let position = self.cursor.to_string();
        self.send(Message::Begin { position: position.clone(), reason }).await;
        for (p, view) in views {
            self.send_state(p, &view.reader).await?;
        }
        // The state is complete as of `position`; every change after it
        // follows `synced` (a client swaps its view in at `synced`).
        self.mark_sent();
        self.send(Message::Synced { position }).await;
        for p in self.partitions() {
            if !self.registered.contains(&p) {
                self.catch_up(p).await?;
            }
        }
        Ok(())
    }

    /// Every record of partition `p` the filter watches, page by page.
    async fn send_state(&self, p: u32, reader: &crate::store::StoreReader) -> Result<(), Stop> {
        let store_error = |e: crate::store::StoreError| Stop::Cancel { reason: "unavailable", message: e.to_string() };
        match &self.queue.filter {
            Filter::Record { pk, sk } => {
                if let Some(record) = reader.get(pk, sk).map_err(store_error)? {
                    self.send(Message::Change { event: Event::of_record(p, &record), id: ChangeId::None }).await;
                }
            }
            Filter::Pk { pk } | Filter::Prefix { pk, .. } | Filter::Tree { pk, .. } => {
                let prefix = match &self.queue.filter {
                    Filter::Prefix { prefix, .. } => Some(prefix.clone()),
                    // A tree location's leaves: its own, then those below it.
                    Filter::Tree { path, .. } => {
                        if !path.is_empty() {
                            if let Some(record) = reader.get(pk, path).map_err(store_error)? {
                                self.send(Message::Change { event: Event::of_record(p, &record), id: ChangeId::None }).await;
                            }
                        }
                        Some(crate::tree::path::descendants_prefix(path))
                    }
                    _ => None,
                };
                let mut range = crate::store::SkRange { prefix, ..Default::default() };
                loop {
                    let (records, more) = reader.list(pk, &range, STATE_PAGE_RECORDS, STATE_PAGE_BYTES_MAX).map_err(store_error)?;
                    range.page_after = records.last().map(|r| r.sk.clone());
                    for record in &records {
                        self.send(Message::Change { event: Event::of_record(p, record), id: ChangeId::None }).await;
                    }
                    if !more {
                        break;
                    }
                }
            }
            Filter::Namespace => {
                let mut after: Option<Vec<u8>> = None;
                loop {
                    let (records, more) = reader.scan_page(after.as_deref(), STATE_PAGE_RECORDS, STATE_PAGE_BYTES_MAX).map_err(store_error)?;
                    after = records.last().map(|(key, _)| key.clone());
                    for (_, record) in &records {
                        self.send(Message::Change { event: Event::of_record(p, record), id: ChangeId::None }).await;
                    }
                    if !more {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Delivers what the dispatcher leaves, until the client goes or the
    /// watch must stop; resets itself when it falls behind in state mode.
    async fn live(&mut self) -> Result<std::convert::Infallible, Stop> {
        let mut live = Live {
            wakes: LiveWakes::new(self.config.progress_interval, self.config.keep_alive_interval, self.closing.clone()),
            batches: SmallVec::new(),
            next_event: 0,
        };
        loop {
            match std::future::poll_fn(|cx| self.poll_live(&mut live, cx)).await {
                Step::Wait(change) => self.send(change).await,
                Step::Woke(Wake::Progress) => {
                    live.wakes.rearm_progress();
                    self.progress().await?;
                }
                Step::Woke(Wake::KeepAlive) => {
                    live.wakes.rearm_keep_alive();
                    self.send(Message::KeepAlive).await;
                }
                Step::Woke(Wake::NodeStopping) => {
                    return Err(Stop::Cancel {
                        reason: "shutting_down",
                        message: "the node is stopping; resume from the position on another node or after it restarts".into(),
                    })
                }
                Step::Woke(Wake::Queue) => unreachable!("poll_live drains the queue itself"),
                Step::Conflated(events) => {
                    crate::metrics::WATCH_CONFLATED_EVENTS.inc_by(events.len() as u64);
                    for event in events {
                        if !self.cursor.covers(&event) {
                            self.cursor.advance(&event);
                            self.send(Message::Change { event, id: ChangeId::None }).await;
                        }
                    }
                    // Everything dispatched is now reflected: the cursor can move to the head.
                    self.progress().await?;
                }
                Step::Overflowed => match self.queue.mode {
                    Mode::Log => {
                        crate::metrics::WATCH_CANCELLED.with_label_values(&["slow_consumer"]).inc();
                        return Err(Stop::Cancel {
                            reason: "slow_consumer",
                            message: format!(
                                "the watch fell more than {} events or {} bytes behind; resume from the position",
                                self.config.queue.events_max, self.config.queue.bytes_max
                            ),
                        });
                    }
                    Mode::State => {
                        crate::metrics::WATCH_RESETS.with_label_values(&["slow_consumer"]).inc();
                        Box::pin(self.send_current_state("slow_consumer")).await?;
                    }
                },
            }
        }
    }

    /// The live path of nearly every wake-up, with no await in it: takes
    /// what the queue holds and leaves each change in the outlet, then
    /// waits for the next wake-up. It returns for anything else: a change
    /// the outlet has no room for (or whose sender is shut), a timer, the
    /// node stopping, a conflated or overflowed queue. So a delivery
    /// touches only this session's cursor, `Live` and the watch, not
    /// the state of a waiting send or of a nested future (at 10,000
    /// watches each line of a session's memory is a wait for DRAM).
    fn poll_live(&mut self, live: &mut Live, cx: &mut Context<'_>) -> Poll<Step> {
        loop {
            if let Some(change) = self.deliver_drained(live) {
                return Poll::Ready(Step::Wait(change));
            }
            match live.wakes.poll_next(&self.queue.signal, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Wake::Queue) => {}
                Poll::Ready(other) => return Poll::Ready(Step::Woke(other)),
            }
            match self.queue.drain(&mut live.batches) {
                Drained::Empty | Drained::Batches => {}
                Drained::Conflated(events) => return Poll::Ready(Step::Conflated(events)),
                Drained::Overflowed => return Poll::Ready(Step::Overflowed),
            }
        }
    }

    /// Leaves every drained change in the outlet, in order; stops at the
    /// first one it has no room for and returns it (the cursor is past it:
    /// it must be sent before anything else).
    fn deliver_drained(&mut self, live: &mut Live) -> Option<Message> {
        while let Some(batch) = live.batches.first() {
            while let Some(event) = batch.get(live.next_event) {
                live.next_event += 1;
                let Some(change) = self.change(event) else { continue };
                if let Err(change) = self.out.try_send(change) {
                    return Some(change);
                }
            }
            live.batches.remove(0);
            live.next_event = 0;
        }
        None
    }

    /// Moves the cursor of every partition with nothing queued to what was
    /// dispatched, and sends it if it changed: an idle or filtered
    /// watch keeps a fresh position to resume from.
    async fn progress(&mut self) -> Result<(), Stop> {
        // A partition this node let go of (or refused) sends nothing more:
        // say so rather than fall silent.
        for &p in &self.registered {
            self.check_partition(p)?;
        }
        for &p in &self.registered {
            // Read the head first: everything dispatched below it is in the
            // queue by now, so an empty queue means none of it is pending.
            let head = self.namespace.handle(p).feed.dispatched_next();
            if self.queue.is_empty() {
                let mark = self.cursor.marks.get_mut(p).expect("watched partition");
                *mark = (*mark).max(Mark::at(head));
            }
        }
        if !self.cursor_was_sent() {
            self.mark_sent();
            let position = self.cursor.to_string();
            self.send(Message::Progress { position }).await;
        }
        Ok(())
    }

    /// Notes that the cursor as it stands goes out now.
    fn mark_sent(&mut self) {
        self.sent.copy_from(&self.cursor.marks);
    }

    /// Whether the cursor is where it was when a position last went out.
    fn cursor_was_sent(&self) -> bool {
        self.sent == self.cursor.marks
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for &p in &self.registered {
            self.namespace.handle(p).feed.unregister(&self.queue);
        }
    }
}
