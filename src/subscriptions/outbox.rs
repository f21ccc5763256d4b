//! Where sessions leave their messages for the transport that drives them.
//!
//! A session has no task of its own: the transport's task (an SSE body, a
//! WebSocket connection) polls its sessions, then takes what they left here
//! and writes it. So leaving a message wakes nobody: the driver looks here
//! after every poll of its sessions (a channel would wake the driver's own
//! task, which is already running, and cost it a wasted second poll per
//! delivery). Only a session that finds the outbox full waits; the driver
//! wakes it when it takes messages out.
//!
//! The outbox lives exactly as long as the sessions that send to it (the
//! driver owns both), so a send never fails.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::task::{Poll, Waker};

use parking_lot::Mutex;

use super::session::Message;

/// A message on its way to the transport; `tag` names the subscription on
/// a connection that carries several (WebSocket: the client's id, as JSON).
#[derive(Debug)]
pub struct Tagged {
    pub tag: Option<Arc<str>>,
    pub message: Message,
}

/// A session's end of the outbox.
pub struct Outbox {
    shared: Arc<Mutex<Shared>>,
    tag: Option<Arc<str>>,
}

/// The driver's end: it takes the messages out.
pub struct OutboxReader {
    shared: Arc<Mutex<Shared>>,
}

struct Shared {
    messages: VecDeque<Tagged>,
    messages_max: usize,
    /// Sessions waiting for room, each once (at most one per session the
    /// driver runs).
    waiting: Vec<Waker>,
}

impl Outbox {
    /// An outbox holding at most `messages_max` messages, for one untagged
    /// session (one subscription per transport).
    pub fn new(messages_max: usize) -> (Outbox, OutboxReader) {
        let reader = OutboxReader::new(messages_max);
        (Outbox { shared: reader.shared.clone(), tag: None }, reader)
    }

    /// Another session's end of the same outbox, its messages tagged `tag`.
    pub fn tagged(reader: &OutboxReader, tag: Arc<str>) -> Outbox {
        Outbox { shared: reader.shared.clone(), tag: Some(tag) }
    }

    /// Leaves `message`, once there is room.
    pub fn send(&self, message: Message) -> impl Future<Output = ()> + '_ {
        let mut message = Some(message);
        std::future::poll_fn(move |cx| {
            let mut shared = self.shared.lock();
            if shared.messages.len() < shared.messages_max {
                let message = message.take().expect("a send completes once");
                shared.messages.push_back(Tagged { tag: self.tag.clone(), message });
                return Poll::Ready(());
            }
            if !shared.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                shared.waiting.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

impl OutboxReader {
    /// An outbox holding at most `messages_max` messages; sessions get
    /// their ends with `Outbox::tagged`.
    pub fn new(messages_max: usize) -> OutboxReader {
        assert!(messages_max > 0);
        // Grown on demand: most of the time an outbox holds a message or two,
        // and there is one per connection.
        OutboxReader { shared: Arc::new(Mutex::new(Shared { messages: VecDeque::new(), messages_max, waiting: Vec::new() })) }
    }

    /// Moves up to `max` messages into `out` (in the order they were left)
    /// and wakes the sessions that waited for room; returns how many moved.
    pub fn take(&self, out: &mut Vec<Tagged>, max: usize) -> usize {
        let (moved, waiting) = {
            let mut shared = self.shared.lock();
            let n = shared.messages.len().min(max);
            out.extend(shared.messages.drain(..n));
            let waiting = if n > 0 { std::mem::take(&mut shared.waiting) } else { Vec::new() };
            (n, waiting)
        };
        waiting.into_iter().for_each(Waker::wake);
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn a_full_outbox_holds_the_sender_until_the_reader_takes_and_keeps_the_order() {
        let (outbox, reader) = Outbox::new(2);
        let tagged = Outbox::tagged(&reader, "\"b\"".into());
        assert!(outbox.send(Message::KeepAlive).now_or_never().is_some());
        assert!(tagged.send(Message::KeepAlive).now_or_never().is_some());
        let mut third = Box::pin(outbox.send(Message::Progress { position: "p".into() }));
        let (waker, woken) = futures_test_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(third.as_mut().poll(&mut cx).is_pending(), "full: the sender waits");
        let mut out = Vec::new();
        assert_eq!(reader.take(&mut out, 1), 1);
        assert!(woken.load(std::sync::atomic::Ordering::SeqCst), "taking wakes the waiting sender");
        assert!(third.as_mut().poll(&mut cx).is_ready());
        assert_eq!(reader.take(&mut out, 10), 2);
        let tags: Vec<Option<&str>> = out.iter().map(|t| t.tag.as_deref()).collect();
        assert_eq!(tags, vec![None, Some("\"b\""), None]);
        assert!(matches!(out[2].message, Message::Progress { .. }));
        assert_eq!(reader.take(&mut out, 10), 0, "all taken");
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
