//! A partition's log time: the "now" of its procedures, and the clock their
//! timers fire by (docs/procedures.md, "Time").
//!
//! Log time is the largest entry time applied so far in the partition, so
//! it is the same on every replica at the same offset and never goes back.
//! An entry's own time comes from whoever wrote it: the holder's clock for
//! Tern's entries, a producer's `CreateTime` for a source topic's records.
//! Trusted alone, one writer whose clock was stepped a day forward (or one
//! record with a future timestamp) would move the log time a day ahead, for
//! good, and fire every pending timer at once.
//!
//! So a record the log stamped itself (Kafka's `LogAppendTime`, which every
//! namespace topic Tern creates uses: the leader broker's clock, written
//! into the record, alike for every replica) moves the log time at most
//! `AHEAD_OF_LOG_MS_MAX` past that stamp. A writer whose clock runs behind
//! the broker's still moves it only as far as its own time (log time never
//! runs ahead of what the writers said); one whose clock runs ahead is held
//! to the broker's. A record the log did not stamp (a source topic with
//! `CreateTime`; the embedded log, whose one node is writer and log alike)
//! moves it to its own time, as Kafka's `message.timestamp.after.max.ms`
//! lets it (1 hour by default since Kafka 4.0).

/// How far past the log's own stamp an entry's time may move the log time:
/// the clock skew between a writer and the leader broker that is tolerated
/// without holding the writer back. Small against any timer worth having;
/// large against NTP's usual skew.
pub const AHEAD_OF_LOG_MS_MAX: u64 = 1_000;

/// One entry's times, as the apply loop hands them to procedures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryTime {
    /// What the writer said (a procedure's input timestamp); 0: not said.
    pub own_ms: u64,
    /// How far the entry moves the log time: `own_ms`, bounded by the log's stamp.
    pub moves_to_ms: u64,
}

impl EntryTime {
    /// The times of an entry whose writer said `own_ms` and that the log
    /// stamped at `appended_ms` (None: not stamped).
    pub fn of(own_ms: u64, appended_ms: Option<u64>) -> EntryTime {
        let moves_to_ms = match appended_ms {
            Some(appended_ms) => own_ms.min(appended_ms.saturating_add(AHEAD_OF_LOG_MS_MAX)),
            None => own_ms,
        };
        debug_assert!(moves_to_ms <= own_ms, "the log's stamp only ever holds an entry's time back");
        EntryTime { own_ms, moves_to_ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_entry_moves_log_time_at_most_a_second_past_its_stamp() {
        let day_ms = 86_400_000;
        let stamp = 1_700_000_000_000;
        assert_eq!(EntryTime::of(stamp + day_ms, Some(stamp)).moves_to_ms, stamp + AHEAD_OF_LOG_MS_MAX);
        assert_eq!(EntryTime::of(stamp + day_ms, Some(stamp)).own_ms, stamp + day_ms, "the input keeps the writer's time");
        // A writer behind the broker, or slightly ahead: its own time.
        assert_eq!(EntryTime::of(stamp - 5_000, Some(stamp)).moves_to_ms, stamp - 5_000);
        assert_eq!(EntryTime::of(stamp + 999, Some(stamp)).moves_to_ms, stamp + 999);
        // Not said: moves nothing, stamped or not.
        assert_eq!(EntryTime::of(0, Some(stamp)).moves_to_ms, 0);
        // Not stamped: the writer's word.
        assert_eq!(EntryTime::of(stamp + day_ms, None).moves_to_ms, stamp + day_ms);
        // A stamp at the end of time does not overflow.
        assert_eq!(EntryTime::of(u64::MAX, Some(u64::MAX)).moves_to_ms, u64::MAX);
    }
}
