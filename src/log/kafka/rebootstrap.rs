//! A Kafka client that lost every broker gets its bootstrap servers back.
//!
//! librdkafka (2.10 on, still in 2.15: confluentinc/librdkafka#5301) forgets
//! every broker a Metadata answer does not name. A broker that is shutting
//! down (controlled shutdown) or starting (still fenced) answers with the
//! cluster's topics and no live broker, so a client that asks at that
//! moment forgets every broker it knew, its bootstrap servers included.
//! With no broker left it asks nothing more; its own re-bootstrap comes only
//! if a forgotten broker's going down happens to count as the last of the
//! cluster's (it depends on the order of its threads), and its timer for
//! unanswered asks was stopped by that very answer. Often it never comes:
//! the node's writes, reads or group membership stop for good (issue 36: in
//! 2 of 3 CI runs a node's writes failed for minutes after its broker was
//! back, and never came back).
//!
//! So every `CHECK_INTERVAL` the node looks at each of its long-lived
//! clients: one that has known no broker at every look for `EMPTY_FOR_MIN`
//! gets its bootstrap servers added again (`rd_kafka_brokers_add`), as its
//! own re-bootstrap would do. It connects, asks for metadata, and learns the
//! brokers again. One that still knows none (the cluster is down, or the
//! bootstrap broker was told of no broker too) gets them again after
//! `READD_WAIT_MIN`, then twice as late each time, up to `READD_WAIT_MAX`.
//!
//! A client never seen knowing a broker is no exception: it can learn and
//! lose them between two looks (a node started while its broker shut down:
//! its producer learned the broker and was told of none within its first
//! second, and librdkafka had already let its bootstrap servers go once it
//! learned one). Before, such a client was taken for one still
//! bootstrapping and left alone: its writes stopped for good (the
//! Metadata test below failed in CI and in 4 of 4 runs here). A client
//! still bootstrapping that gets its servers added again already has them:
//! librdkafka adds none twice.
//! (Short-lived clients, a publisher's or a history reader's, are made again
//! after a failure, so a new one knows its bootstrap servers.)
//!
//! Bounds: librdkafka keeps a copy of the list for each add (and parses
//! every copy at each of its own re-bootstraps), so a client gets at most
//! `ADDS_MAX` adds in its life: past it, the loss is logged once, and the
//! client stays without brokers until the node restarts. Each check is two
//! short calls per client.

use std::ffi::CString;
use std::time::{Duration, Instant};

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

/// How often the node looks at its clients.
pub(super) const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long a client must know no broker before its bootstrap servers are
/// added again: a Metadata answer replaces brokers in one step, so knowing
/// none at every look for two seconds is the loss above, not a client between answers.
pub(super) const EMPTY_FOR_MIN: Duration = Duration::from_secs(2);
/// How long after an add a client that still knows no broker gets the
/// bootstrap servers again (then twice as late each time): a broker in
/// controlled shutdown answers "no broker" for seconds, and an add while it
/// does is lost; 5 s brings the writes back soon after it is up.
pub(super) const READD_WAIT_MIN: Duration = Duration::from_secs(5);
/// The latest a client that still knows no broker gets them again: a
/// cluster down for a week costs about 1,000 adds.
pub(super) const READD_WAIT_MAX: Duration = Duration::from_secs(600);
/// Most adds of the bootstrap servers to one client (each leaves a copy of
/// the list, tens of bytes, in librdkafka).
pub(super) const ADDS_MAX: u32 = 1_000;

/// What a check found a client needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    Nothing,
    /// It lost every broker: add the bootstrap servers again.
    Bootstrap,
    /// It lost every broker, and had its `ADDS_MAX` adds already (said once).
    GivenUp,
}

/// One client slot's history, across the clients it holds in turn (the
/// producer and the group consumer are made again after fatal errors).
#[derive(Debug)]
pub(super) struct Watched {
    /// The client looked at last (its handle's address), to start over when
    /// it changes. (A client made twice within one look could reuse the
    /// address and keep its predecessor's history: at worst one add that
    /// was not needed.)
    client: usize,
    /// Since when it has known none, at every look.
    empty_since: Option<Instant>,
    /// The last add while it has known none, and the wait before the next.
    added_at: Option<Instant>,
    readd_wait: Duration,
    adds: u32,
    given_up: bool,
}

impl Default for Watched {
    fn default() -> Watched {
        Watched { client: 0, empty_since: None, added_at: None, readd_wait: READD_WAIT_MIN, adds: 0, given_up: false }
    }
}

impl Watched {
    /// Notes that `client` knows `learned` brokers at `now`; what it needs.
    pub(super) fn note(&mut self, client: usize, learned: usize, now: Instant) -> Need {
        if client != self.client {
            *self = Watched { client, ..Watched::default() };
        }
        if learned > 0 {
            *self = Watched { client, adds: self.adds, given_up: self.given_up, ..Watched::default() };
            return Need::Nothing;
        }
        match self.added_at {
            // Added, and it still knows none: again after the wait.
            Some(at) => {
                if now.duration_since(at) < self.readd_wait {
                    return Need::Nothing;
                }
                self.readd_wait = (self.readd_wait * 2).min(READD_WAIT_MAX);
            }
            None => {
                let since = *self.empty_since.get_or_insert(now);
                if now.duration_since(since) < EMPTY_FOR_MIN {
                    return Need::Nothing;
                }
            }
        }
        self.added_at = Some(now);
        if self.adds >= ADDS_MAX {
            let said = std::mem::replace(&mut self.given_up, true);
            return if said { Need::Nothing } else { Need::GivenUp };
        }
        self.adds += 1;
        Need::Bootstrap
    }

    /// Adds so far.
    pub(super) fn adds(&self) -> u32 {
        self.adds
    }
}

/// Checks one client: `name` says which in the log. Adds `bootstrap` back to
/// it when `watched` says it lost every broker.
pub(super) fn check<C: ClientContext>(name: &str, client: &Client<C>, watched: &mut Watched, bootstrap: &CString) {
    let native = client.native_ptr();
    let learned = learned_brokers(native);
    match watched.note(native as usize, learned, Instant::now()) {
        Need::Nothing => {}
        Need::Bootstrap => {
            // SAFETY: the client is alive (borrowed); librdkafka copies the list.
            let added = unsafe { rd::rd_kafka_brokers_add(native, bootstrap.as_ptr()) };
            crate::metrics::KAFKA_BOOTSTRAP_READDED.inc();
            tracing::warn!(
                client = name,
                added,
                adds = watched.adds(),
                "a Kafka client had lost every broker (a Metadata answer named none: librdkafka#5301); its bootstrap servers were added again"
            );
        }
        Need::GivenUp => {
            tracing::error!(
                client = name,
                adds = ADDS_MAX,
                "a Kafka client lost every broker and got its last add of the bootstrap servers; restart the node"
            )
        }
    }
}

/// How many brokers a client learned from Metadata answers (its bootstrap
/// servers not counted).
fn learned_brokers(native: *mut rd::rd_kafka_t) -> usize {
    let mut count: usize = 0;
    // SAFETY: the caller holds the client alive; librdkafka returns a list
    // it malloc'ed (possibly empty, possibly NULL), ours to free.
    unsafe {
        let ids = rd::rd_kafka_brokers_learned_ids(native, &mut count);
        if !ids.is_null() {
            rd::rd_kafka_mem_free(native, ids.cast());
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// The CI failure of kafka_outage's Metadata test: the producer
    /// learned its broker and was told of none between two looks, so it
    /// was never seen knowing one, and was left alone for good.
    #[test]
    fn a_client_never_seen_knowing_a_broker_gets_its_bootstrap_servers_too() {
        let (mut watched, start) = (Watched::default(), Instant::now());
        assert_eq!(watched.note(1, 0, start), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND * 2), Need::Bootstrap);
        assert_eq!(watched.note(1, 0, start + SECOND * 3), Need::Nothing, "then after the wait");
    }

    #[test]
    fn a_client_that_lost_every_broker_gets_its_bootstrap_servers_back() {
        let (mut watched, start) = (Watched::default(), Instant::now());
        assert_eq!(watched.note(1, 3, start), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND), Need::Nothing, "not at the first look");
        assert_eq!(watched.note(1, 0, start + SECOND * 2), Need::Nothing, "not before EMPTY_FOR_MIN");
        assert_eq!(watched.note(1, 0, start + SECOND * 3), Need::Bootstrap);
        // It knows brokers again: a later loss is a new one.
        assert_eq!(watched.note(1, 1, start + SECOND * 4), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND * 5), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND * 7), Need::Bootstrap, "a second loss, a second add");
        assert_eq!(watched.adds(), 2);
    }

    #[test]
    fn a_client_that_still_knows_none_gets_them_again_ever_later() {
        let (mut watched, start) = (Watched::default(), Instant::now());
        assert_eq!(watched.note(1, 3, start), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND), Need::Nothing);
        let added_at = start + SECOND * 3;
        assert_eq!(watched.note(1, 0, added_at), Need::Bootstrap);
        let mut adds_at = Vec::new();
        for s in 1..3600u32 {
            let now = added_at + SECOND * s;
            if watched.note(1, 0, now) == Need::Bootstrap {
                adds_at.push(s);
            }
        }
        // 5 s, then 10, 20, 40, 80, 160, 320, then every 600 s.
        assert_eq!(adds_at, [5, 15, 35, 75, 155, 315, 635, 1235, 1835, 2435, 3035]);
    }

    #[test]
    fn brokers_known_again_in_time_need_nothing() {
        let (mut watched, start) = (Watched::default(), Instant::now());
        assert_eq!(watched.note(1, 3, start), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND), Need::Nothing);
        assert_eq!(watched.note(1, 2, start + SECOND * 2), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND * 3), Need::Nothing, "the wait starts over");
        assert_eq!(watched.note(1, 0, start + SECOND * 4), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND * 5), Need::Bootstrap);
    }

    #[test]
    fn a_client_made_again_starts_over() {
        let (mut watched, start) = (Watched::default(), Instant::now());
        assert_eq!(watched.note(1, 3, start), Need::Nothing);
        assert_eq!(watched.note(1, 0, start + SECOND), Need::Nothing);
        // The slot now holds a new client: its wait starts over.
        assert_eq!(watched.note(2, 0, start + SECOND * 10), Need::Nothing);
        assert_eq!(watched.note(2, 0, start + SECOND * 11), Need::Nothing);
        assert_eq!(watched.note(2, 0, start + SECOND * 12), Need::Bootstrap);
    }

    #[test]
    fn adds_stop_at_their_bound_and_say_so_once() {
        let (mut watched, mut now) = (Watched::default(), Instant::now());
        for _ in 0..ADDS_MAX {
            assert_eq!(watched.note(1, 1, now), Need::Nothing);
            now += SECOND * 3;
            assert_eq!(watched.note(1, 0, now), Need::Nothing);
            now += SECOND * 3;
            assert_eq!(watched.note(1, 0, now), Need::Bootstrap);
        }
        assert_eq!(watched.note(1, 1, now), Need::Nothing);
        now += SECOND * 3;
        assert_eq!(watched.note(1, 0, now), Need::Nothing);
        now += SECOND * 3;
        assert_eq!(watched.note(1, 0, now), Need::GivenUp);
        for _ in 0..10 {
            now += READD_WAIT_MAX;
            assert_eq!(watched.note(1, 0, now), Need::Nothing, "said once");
        }
        assert_eq!(watched.adds(), ADDS_MAX);
    }
}
