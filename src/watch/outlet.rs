//! Where sessions leave their messages for the transport that drives them.
//!
//! A session has no task of its own: the transport's task (an SSE body, a
//! WebSocket connection, an HTTP/2 connection) polls its sessions, then
//! takes what they left here and writes it. So leaving a message wakes
//! nobody: the driver looks here after every poll of its sessions (a
//! channel would wake the driver's own task, which is already running, and
//! cost it a wasted second poll per delivery). Only a session that finds
//! the outlet full, or its own sender shut, waits; the driver wakes it when
//! it takes messages out, or opens the sender again.
//!
//! A driver that writes several watches to separate flow-controlled
//! streams (HTTP/2) shuts the sender of one whose stream cannot take more
//! (`shut`), so one slow stream holds back its own session only, never the
//! outlet the others share.
//!
//! The outlet lives exactly as long as the sessions that send to it (the
//! driver owns both), so a send never fails.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::task::{Poll, Waker};

use parking_lot::Mutex;

use super::session::Message;

/// Which watch on its transport a message belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// The transport carries one watch (an HTTP/1.1 SSE body).
    Only,
    /// A WebSocket watch: the client's id for it, JSON-encoded.
    Id(Arc<str>),
    /// An HTTP/2 watch: the connection's key for its stream.
    Stream(usize),
}

/// A message on its way to the transport.
#[derive(Debug)]
pub struct Tagged {
    pub tag: Tag,
    pub message: Message,
}

/// A session's end of the outlet.
pub struct Outlet {
    shared: Arc<Mutex<Shared>>,
    tag: Tag,
}

/// The driver's end: it takes the messages out.
pub struct OutletReader {
    shared: Arc<Mutex<Shared>>,
}

/// Bytes of messages an outlet holds before its senders wait (one message
/// is always let in, however large: a record is at most 1 MiB). With the
/// count bound this is what a client that never reads costs the node per
/// connection beside its socket buffers and its sessions' state pages: a
/// count bound alone let 256 messages of 256 KiB (64 MiB) wait per
/// connection, and as much again in the transport's hands (issue 35).
pub(crate) const OUTLET_BYTES_MAX: usize = 1024 * 1024;

struct Shared {
    messages: VecDeque<Tagged>,
    messages_max: usize,
    /// What `messages` hold (`Message::size_bytes`), at most
    /// `OUTLET_BYTES_MAX` plus one message.
    bytes: usize,
    /// Sessions waiting for room, each once (at most one per session the
    /// driver runs).
    waiting: Vec<Waker>,
    /// Senders the driver shut, each with the waker of its session if it
    /// waits (at most one entry per session the driver runs; nearly always
    /// empty, so a send looks at it only when it is not).
    shut: Vec<(Tag, Option<Waker>)>,
}

impl Outlet {
    /// An outlet holding at most `messages_max` messages, for one session
    /// (one watch per transport).
    pub fn new(messages_max: usize) -> (Outlet, OutletReader) {
        let reader = OutletReader::new(messages_max);
        (Outlet { shared: reader.shared.clone(), tag: Tag::Only }, reader)
    }

    /// Another session's end of the same outlet, its messages tagged `tag`.
    pub fn tagged(reader: &OutletReader, tag: Tag) -> Outlet {
        Outlet { shared: reader.shared.clone(), tag }
    }

    /// Leaves `message` if there is room and this sender is not shut;
    /// gives it back otherwise (then `send` waits for both).
    pub fn try_send(&self, message: Message) -> Result<(), Message> {
        let mut shared = self.shared.lock();
        if shared.is_shut(&self.tag) || shared.is_full() {
            return Err(message);
        }
        shared.push(Tagged { tag: self.tag.clone(), message });
        Ok(())
    }

    /// Leaves `message`, once there is room and this sender is not shut.
    pub fn send(&self, message: Message) -> impl Future<Output = ()> + '_ {
        let mut message = Some(message);
        std::future::poll_fn(move |cx| {
            let mut shared = self.shared.lock();
            if !shared.shut.is_empty() {
                if let Some((_, waiting)) = shared.shut.iter_mut().find(|(tag, _)| *tag == self.tag) {
                    *waiting = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
            if !shared.is_full() {
                let message = message.take().expect("a send completes once");
                shared.push(Tagged { tag: self.tag.clone(), message });
                return Poll::Ready(());
            }
            if !shared.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                shared.waiting.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

impl Shared {
    /// Full by count, or by bytes once it holds anything.
    fn is_full(&self) -> bool {
        self.messages.len() >= self.messages_max || (self.bytes >= OUTLET_BYTES_MAX && !self.messages.is_empty())
    }

    fn push(&mut self, tagged: Tagged) {
        self.bytes += tagged.message.size_bytes();
        self.messages.push_back(tagged);
        debug_assert!(self.messages.len() <= self.messages_max);
    }

    /// Nearly always empty: looked through only when it is not.
    fn is_shut(&self, tag: &Tag) -> bool {
        !self.shut.is_empty() && self.shut.iter().any(|(shut, _)| shut == tag)
    }
}

impl OutletReader {
    /// An outlet holding at most `messages_max` messages; sessions get
    /// their ends with `Outlet::tagged`.
    pub fn new(messages_max: usize) -> OutletReader {
        assert!(messages_max > 0);
        // Grown on demand: most of the time an outlet holds a message or two,
        // and there is one per connection.
        let shared = Shared { messages: VecDeque::new(), messages_max, bytes: 0, waiting: Vec::new(), shut: Vec::new() };
        OutletReader { shared: Arc::new(Mutex::new(shared)) }
    }

    /// Moves up to `max` messages into `out` (in the order they were left)
    /// and wakes the sessions that waited for room; returns how many moved.
    pub fn take(&self, out: &mut Vec<Tagged>, max: usize) -> usize {
        let (moved, waiting) = {
            let mut shared = self.shared.lock();
            let n = shared.messages.len().min(max);
            let mut taken = 0;
            out.extend(shared.messages.drain(..n).inspect(|t| taken += t.message.size_bytes()));
            shared.bytes -= taken;
            debug_assert!(shared.bytes == 0 || !shared.messages.is_empty(), "an empty outlet holds no bytes");
            let waiting = if n > 0 { std::mem::take(&mut shared.waiting) } else { Vec::new() };
            (n, waiting)
        };
        waiting.into_iter().for_each(Waker::wake);
        moved
    }

    /// Holds back the sender tagged `tag`: its next send waits until `open`.
    /// What it left before stays in the outlet, in order.
    pub fn shut(&self, tag: Tag) {
        let mut shared = self.shared.lock();
        if !shared.is_shut(&tag) {
            shared.shut.push((tag, None));
        }
    }

    /// Lets the sender tagged `tag` send again (and wakes it if it waits);
    /// nothing if it was not shut.
    pub fn open(&self, tag: &Tag) {
        let waiting = {
            let mut shared = self.shared.lock();
            let Some(i) = shared.shut.iter().position(|(shut, _)| shut == tag) else { return };
            shared.shut.swap_remove(i).1
        };
        if let Some(waker) = waiting {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// Large messages fill an outlet by bytes long before its count: one is
    /// always let in; then the sender waits until the reader takes.
    #[test]
    fn an_outlet_is_full_at_its_bytes_whatever_its_count() {
        let reader = OutletReader::new(256);
        let outlet = Outlet::tagged(&reader, Tag::Only);
        let big = || Message::Reply("x".repeat(OUTLET_BYTES_MAX / 2));
        assert!(outlet.try_send(big()).is_ok());
        assert!(outlet.try_send(big()).is_ok());
        assert!(outlet.try_send(big()).is_err(), "1 MiB held: full with 2 messages of 256");
        let mut out = Vec::new();
        assert_eq!(reader.take(&mut out, 1), 1);
        assert!(outlet.try_send(big()).is_ok(), "room again once taken");
        assert_eq!(reader.take(&mut out, 10), 2);
        let huge = Message::Reply("x".repeat(2 * OUTLET_BYTES_MAX));
        assert!(outlet.try_send(huge).is_ok(), "an empty outlet takes one message of any size");
        assert!(outlet.try_send(Message::KeepAlive).is_err());
        assert_eq!(reader.take(&mut out, 10), 1);
        assert_eq!(reader.shared.lock().bytes, 0);
    }

    #[test]
    fn a_full_outlet_holds_the_sender_until_the_reader_takes_and_keeps_the_order() {
        let (outlet, reader) = Outlet::new(2);
        let tagged = Outlet::tagged(&reader, Tag::Id("\"b\"".into()));
        assert!(outlet.send(Message::KeepAlive).now_or_never().is_some());
        assert!(tagged.send(Message::KeepAlive).now_or_never().is_some());
        let mut third = Box::pin(outlet.send(Message::Progress { position: "p".into() }));
        let (waker, woken) = futures_test_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(third.as_mut().poll(&mut cx).is_pending(), "full: the sender waits");
        let mut out = Vec::new();
        assert_eq!(reader.take(&mut out, 1), 1);
        assert!(woken.load(std::sync::atomic::Ordering::SeqCst), "taking wakes the waiting sender");
        assert!(third.as_mut().poll(&mut cx).is_ready());
        assert_eq!(reader.take(&mut out, 10), 2);
        let tags: Vec<Tag> = out.iter().map(|t| t.tag.clone()).collect();
        assert_eq!(tags, vec![Tag::Only, Tag::Id("\"b\"".into()), Tag::Only]);
        assert!(matches!(out[2].message, Message::Progress { .. }));
        assert_eq!(reader.take(&mut out, 10), 0, "all taken");
    }

    #[test]
    fn a_shut_sender_waits_with_room_to_spare_and_the_others_do_not() {
        let reader = OutletReader::new(8);
        let (one, two) = (Outlet::tagged(&reader, Tag::Stream(1)), Outlet::tagged(&reader, Tag::Stream(2)));
        assert!(one.send(Message::KeepAlive).now_or_never().is_some());
        reader.shut(Tag::Stream(1));
        reader.shut(Tag::Stream(1));
        let mut held = Box::pin(one.send(Message::Progress { position: "p".into() }));
        let (waker, woken) = futures_test_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(held.as_mut().poll(&mut cx).is_pending(), "shut: the sender waits although there is room");
        assert!(two.send(Message::KeepAlive).now_or_never().is_some(), "another sender is not held");
        let mut out = Vec::new();
        assert_eq!(reader.take(&mut out, 8), 2, "what the shut sender left before stays");
        assert!(held.as_mut().poll(&mut cx).is_pending(), "taking does not open a shut sender");
        reader.open(&Tag::Stream(2));
        assert!(!woken.load(std::sync::atomic::Ordering::SeqCst), "opening another sender wakes nobody");
        reader.open(&Tag::Stream(1));
        assert!(woken.load(std::sync::atomic::Ordering::SeqCst), "opening wakes the waiting sender");
        assert!(held.as_mut().poll(&mut cx).is_ready());
        assert_eq!(reader.take(&mut out, 8), 1);
        let tags: Vec<Tag> = out.iter().map(|t| t.tag.clone()).collect();
        assert_eq!(tags, vec![Tag::Stream(1), Tag::Stream(2), Tag::Stream(1)]);
    }

    #[test]
    fn try_send_leaves_the_message_only_with_room_and_an_open_sender() {
        let reader = OutletReader::new(2);
        let (one, two) = (Outlet::tagged(&reader, Tag::Stream(1)), Outlet::tagged(&reader, Tag::Stream(2)));
        assert!(one.try_send(Message::KeepAlive).is_ok());
        reader.shut(Tag::Stream(1));
        let back = one.try_send(Message::Progress { position: "p".into() });
        assert!(matches!(back, Err(Message::Progress { ref position }) if position == "p"), "shut: given back as it was");
        assert!(two.try_send(Message::KeepAlive).is_ok(), "another sender is not held");
        assert!(matches!(two.try_send(Message::KeepAlive), Err(Message::KeepAlive)), "full: given back");
        reader.open(&Tag::Stream(1));
        assert!(one.try_send(Message::KeepAlive).is_err(), "open, but still full");
        let mut out = Vec::new();
        assert_eq!(reader.take(&mut out, 1), 1);
        assert!(one.try_send(Message::Progress { position: "q".into() }).is_ok());
        assert_eq!(reader.take(&mut out, 8), 2);
        let tags: Vec<Tag> = out.iter().map(|t| t.tag.clone()).collect();
        assert_eq!(tags, vec![Tag::Stream(1), Tag::Stream(2), Tag::Stream(1)], "in the order left");
        assert!(matches!(out[2].message, Message::Progress { ref position } if position == "q"));
    }

    fn futures_test_waker() -> (Waker, Arc<std::sync::atomic::AtomicBool>) {
        struct Flag(Arc<std::sync::atomic::AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
        (Waker::from(Arc::new(Flag(woken.clone()))), woken)
    }
}
