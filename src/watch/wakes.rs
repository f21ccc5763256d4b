//! What wakes a live session: its queue's signal (nearly always), the
//! `progress` and `keep-alive` timers, and the node stopping.
//!
//! A busy watch is woken once per event, and at 10,000 watches
//! a put is 10,000 wake-ups. Polling a timer costs a registration each time
//! (a waker compared or cloned, the task's cooperative budget spent; at 100
//! sessions polled in one task the budget runs out and tokio makes the task
//! poll again). So the timers and the node's stop signal are polled only
//! when the session goes idle with a waker they do not hold yet (the first
//! time, after a timer was re-armed, or after the driver's waker changed);
//! otherwise they are only looked at: the clock against deadlines kept
//! here, and `watch::Receiver::has_changed`, a load. (Not
//! `Sleep::is_elapsed`: each timer's state is an allocation of its own,
//! and at 10,000 sessions every look at one is a cache miss.)

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::fanout::queue::Signal;

/// Why a live session woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Its queue has something (the common case).
    Queue,
    /// Time to send its position if it moved.
    Progress,
    /// Time for a `keep-alive`.
    KeepAlive,
    /// The node is stopping: cancel.
    NodeStopping,
}

pub(crate) struct LiveWakes {
    progress: Pin<Box<Sleep>>,
    /// When `progress` fires, kept here to be compared without touching it.
    progress_at: Instant,
    progress_interval: Duration,
    keep_alive: Pin<Box<Sleep>>,
    keep_alive_at: Instant,
    keep_alive_interval: Duration,
    /// Looked at on every wake-up (a version compare).
    closing: tokio::sync::watch::Receiver<bool>,
    /// Polled only to register (see the module doc).
    node_stopping: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// The waker the timers and `node_stopping` hold; none once a timer was
    /// re-armed (a fired timer holds no waker).
    registered: Option<Waker>,
}

impl LiveWakes {
    pub(crate) fn new(progress_interval: Duration, keep_alive_interval: Duration, closing: tokio::sync::watch::Receiver<bool>) -> LiveWakes {
        let mut stopping = closing.clone();
        let now = Instant::now();
        let (progress_at, keep_alive_at) = (now + progress_interval, now + keep_alive_interval);
        LiveWakes {
            progress: Box::pin(tokio::time::sleep_until(progress_at)),
            progress_at,
            progress_interval,
            keep_alive: Box::pin(tokio::time::sleep_until(keep_alive_at)),
            keep_alive_at,
            keep_alive_interval,
            closing,
            node_stopping: Box::pin(async move {
                let _ = stopping.wait_for(|closing| *closing).await;
            }),
            registered: None,
        }
    }

    /// The next reason to wake, once there is one; the queue first (a busy
    /// watch looks at nothing else), but never past the node stopping.
    pub(crate) fn poll_next(&mut self, signal: &Signal, cx: &mut Context<'_>) -> Poll<Wake> {
        if let Some(wake) = self.look(signal) {
            return Poll::Ready(wake);
        }
        if !self.registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            if self.node_stopping.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::NodeStopping);
            }
            if self.progress.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::Progress);
            }
            if self.keep_alive.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::KeepAlive);
            }
            self.registered = Some(cx.waker().clone());
        }
        if signal.register(cx.waker()) {
            return Poll::Ready(self.unless_stopping(Wake::Queue));
        }
        Poll::Pending
    }

    /// A wake-up's reason, found without registering anything.
    fn look(&mut self, signal: &Signal) -> Option<Wake> {
        if signal.take() {
            return Some(self.unless_stopping(Wake::Queue));
        }
        if self.stopping() {
            return Some(Wake::NodeStopping);
        }
        // A timer never fires before its deadline: woken by one, this sees it.
        let now = Instant::now();
        if now >= self.progress_at {
            return Some(Wake::Progress);
        }
        if now >= self.keep_alive_at {
            return Some(Wake::KeepAlive);
        }
        None
    }

    fn unless_stopping(&self, wake: Wake) -> Wake {
        if self.stopping() {
            Wake::NodeStopping
        } else {
            wake
        }
    }

    fn stopping(&self) -> bool {
        // The value only ever turns true: any change is the node stopping.
        !matches!(self.closing.has_changed(), Ok(false))
    }

    /// Starts the next `progress` interval (after it fired).
    pub(crate) fn rearm_progress(&mut self) {
        self.progress_at = Instant::now() + self.progress_interval;
        self.progress.as_mut().reset(self.progress_at);
        self.registered = None;
    }

    /// Starts the next `keep-alive` interval (after it fired).
    pub(crate) fn rearm_keep_alive(&mut self) {
        self.keep_alive_at = Instant::now() + self.keep_alive_interval;
        self.keep_alive.as_mut().reset(self.keep_alive_at);
        self.registered = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Count {
        fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }

        /// Waits (on the runtime, whose driver fires timers) until woken
        /// `n` times in all; bounded, so a missing wake-up fails the test.
        async fn reaches(&self, n: usize) {
            for _ in 0..500 {
                if self.get() >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("woken {} times, expected {n}", self.get());
        }
    }

    fn counting_waker() -> (Waker, Arc<Count>) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (Waker::from(count.clone()), count)
    }

    const PROGRESS: Duration = Duration::from_millis(100);
    const KEEP_ALIVE: Duration = Duration::from_millis(450);

    #[tokio::test]
    async fn the_queue_comes_first_but_never_past_the_node_stopping() {
        let (closing, receiver) = tokio::sync::watch::channel(false);
        let mut wakes = LiveWakes::new(PROGRESS, KEEP_ALIVE, receiver);
        let signal = Signal::default();
        let (waker, woken) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(wakes.poll_next(&signal, &mut cx).is_pending());
        signal.raise();
        assert_eq!(woken.get(), 1, "a raise wakes the registered waker");
        assert_eq!(wakes.poll_next(&signal, &mut cx), Poll::Ready(Wake::Queue));
        assert!(wakes.poll_next(&signal, &mut cx).is_pending(), "taken once");
        woken.reaches(2).await; // the progress timer
        signal.raise();
        assert_eq!(wakes.poll_next(&signal, &mut cx), Poll::Ready(Wake::Queue), "the queue before a due timer");
        assert_eq!(wakes.poll_next(&signal, &mut cx), Poll::Ready(Wake::Progress), "then the timer");
        wakes.rearm_progress();
        assert!(wakes.poll_next(&signal, &mut cx).is_pending());
        let before = woken.get();
        closing.send_replace(true);
        assert!(woken.get() > before, "the node stopping wakes the session");
        signal.raise();
        assert_eq!(wakes.poll_next(&signal, &mut cx), Poll::Ready(Wake::NodeStopping), "a stopping node wins over the queue");
    }

    #[tokio::test]
    async fn timers_wake_the_latest_waker_and_fire_again_once_rearmed() {
        let (_closing, receiver) = tokio::sync::watch::channel(false);
        // No keep-alive within the test: only progress may wake it.
        let mut wakes = LiveWakes::new(PROGRESS, Duration::from_secs(3600), receiver);
        let signal = Signal::default();
        let (first, first_woken) = counting_waker();
        let (second, second_woken) = counting_waker();
        assert!(wakes.poll_next(&signal, &mut Context::from_waker(&first)).is_pending());
        // The driver's waker changed: the timers must hold the new one.
        assert!(wakes.poll_next(&signal, &mut Context::from_waker(&second)).is_pending());
        second_woken.reaches(1).await;
        assert_eq!(first_woken.get(), 0, "only the latest waker is woken");
        let mut cx = Context::from_waker(&second);
        assert_eq!(wakes.poll_next(&signal, &mut cx), Poll::Ready(Wake::Progress));
        wakes.rearm_progress();
        assert!(wakes.poll_next(&signal, &mut cx).is_pending());
        second_woken.reaches(2).await;
        assert_eq!(wakes.poll_next(&signal, &mut cx), Poll::Ready(Wake::Progress), "a re-armed timer fires again");
    }

    #[tokio::test]
    async fn keep_alive_comes_due_while_progress_is_rearmed() {
        let (_closing, receiver) = tokio::sync::watch::channel(false);
        let mut wakes = LiveWakes::new(PROGRESS, KEEP_ALIVE, receiver);
        let signal = Signal::default();
        let (waker, woken) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut progress = 0;
        let mut seen = 0;
        loop {
            match wakes.poll_next(&signal, &mut cx) {
                Poll::Ready(Wake::Progress) => {
                    progress += 1;
                    wakes.rearm_progress();
                }
                Poll::Ready(Wake::KeepAlive) => break,
                Poll::Ready(other) => panic!("unexpected {other:?}"),
                Poll::Pending => {
                    seen += 1;
                    woken.reaches(seen).await;
                }
            }
        }
        assert!(progress >= 3, "progress fired {progress} times before the keep-alive");
    }
}
