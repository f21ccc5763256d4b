//! Failing fast while a partition's leader does not take writes.
//!
//! A produce to a leader that cannot be reached (its region cut off, its
//! broker gone and no new leader elected yet) is retried by librdkafka until
//! `delivery.timeout.ms`: every write would hang that long before failing.
//! Once a write to a partition failed, the next one goes on as the probe
//! (riding librdkafka's retries, so it succeeds as soon as the log takes
//! writes again) and every other write to that partition fails at once
//! with the reason, until a write succeeds. A caller with ripcord on
//! journals them instead (`api::records`).
//!
//! Bound: at most one write in flight per failing partition; the table has
//! one entry per failing partition (removed when one succeeds).

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::Mutex;

/// A partition whose last write failed.
struct Failing {
    since: Instant,
    probing: bool,
}

type Key = (String, u32);

#[derive(Default)]
pub(super) struct Breaker {
    failing: Mutex<HashMap<Key, Failing>>,
}

/// A write let through; tell how it ended (`ended`). Dropped unended (the
/// caller gave up waiting), it frees the probe slot and changes nothing else.
pub(super) struct Ticket<'a> {
    breaker: &'a Breaker,
    key: Key,
    probe: bool,
    ended: bool,
}

impl Breaker {
    /// Forgets the partitions of `topic` (deleted).
    pub(super) fn forget(&self, topic: &str) {
        self.failing.lock().retain(|(t, _), _| t != topic);
    }

    /// A ticket for one write, or how many ms the partition has been failing
    /// when a probe is already in flight (the write must fail now).
    pub(super) fn admit(&self, topic: &str, partition: u32) -> Result<Ticket<'_>, u64> {
        let key = (topic.to_string(), partition);
        let mut failing = self.failing.lock();
        let probe = match failing.get_mut(&key) {
            None => false,
            Some(state) if state.probing => return Err(state.since.elapsed().as_millis() as u64),
            Some(state) => {
                state.probing = true;
                true
            }
        };
        Ok(Ticket { breaker: self, key, probe, ended: false })
    }

    /// Record how a write to the partition ended, as soon as it ended: a
    /// write that waits for the partition's turn (`topic_limits.rs`) must
    /// see the failure of the one before it, though that one's caller has
    /// not ended its ticket yet. Idempotent; `Ticket::ended` does it too.
    pub(super) fn note(&self, topic: &str, partition: u32, ok: bool) {
        let mut failing = self.failing.lock();
        note_locked(&mut failing, (topic.to_string(), partition), ok);
    }

    /// How many ms the partition has been failing (its last write failed), if it is.
    pub(super) fn failing_ms(&self, topic: &str, partition: u32) -> Option<u64> {
        self.failing.lock().get(&(topic.to_string(), partition)).map(|state| state.since.elapsed().as_millis() as u64)
    }
}

impl Ticket<'_> {
    /// Whether this write probes a failing partition.
    pub(super) fn is_probe(&self) -> bool {
        self.probe
    }

    /// The write ended; `ok` when the log took it, or its leader refused
    /// it for itself (too large for the topic: the partition takes writes).
    pub(super) fn ended(mut self, ok: bool) {
        self.ended = true;
        let mut failing = self.breaker.failing.lock();
        note_locked(&mut failing, self.key.clone(), ok);
        if let Some(state) = failing.get_mut(&self.key).filter(|_| self.probe) {
            state.probing = false;
        }
    }
}

/// A success closes the partition's entry; a failure opens it (keeping the
/// time of the first failure and a probe in flight).
fn note_locked(failing: &mut HashMap<Key, Failing>, key: Key, ok: bool) {
    if ok {
        failing.remove(&key);
    } else {
        failing.entry(key).or_insert(Failing { since: Instant::now(), probing: false });
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.ended && self.probe {
            if let Some(state) = self.breaker.failing.lock().get_mut(&self.key) {
                state.probing = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_probe_at_a_time_while_failing() {
        let breaker = Breaker::default();
        let before = breaker.admit("t", 0).unwrap();
        let concurrent = breaker.admit("t", 0).unwrap();
        before.ended(false);
        let probe = breaker.admit("t", 0).unwrap();
        assert!(breaker.admit("t", 0).is_err(), "a probe is in flight");
        assert!(breaker.admit("t", 1).is_ok(), "another partition is not affected");
        // A write let through before the failure ends later: the probe goes on.
        concurrent.ended(false);
        assert!(breaker.admit("t", 0).is_err());
        // The probe failed: the next write probes again.
        probe.ended(false);
        let probe = breaker.admit("t", 0).unwrap();
        assert!(breaker.admit("t", 0).is_err());
        // The probe's caller gave up: the slot is free again.
        drop(probe);
        let probe = breaker.admit("t", 0).unwrap();
        // It succeeded: writes go, many at once.
        probe.ended(true);
        let (a, b) = (breaker.admit("t", 0).unwrap(), breaker.admit("t", 0).unwrap());
        a.ended(true);
        b.ended(true);
    }

    #[test]
    fn a_noted_end_counts_before_its_ticket_is_ended() {
        let breaker = Breaker::default();
        let first = breaker.admit("t", 0).unwrap();
        let queued = breaker.admit("t", 0).unwrap();
        breaker.note("t", 0, false);
        assert!(breaker.failing_ms("t", 0).is_some(), "the write next in turn sees the failure");
        first.ended(false);
        let probe = breaker.admit("t", 0).unwrap();
        assert!(probe.is_probe() && !queued.is_probe());
        breaker.note("t", 0, true);
        assert!(breaker.failing_ms("t", 0).is_none(), "a success closes it at once");
        probe.ended(true);
        queued.ended(true);
    }
}
