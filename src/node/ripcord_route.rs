//! Which writes ripcord journals (issues 19 and 36): the write path's
//! choices as pure functions, so the node (`write.rs`) and the simulation
//! (`sim/journals.rs`) make the same ones.
//!
//! A plain client write (no condition, no `durability` asked, answered once
//! durable) rides ripcord: it goes to the log first, and to this node's
//! journal when the log surely did not take it. While its partition's log
//! refuses writes, or while the partition has journaled writes not yet
//! applied, it goes to the journal at once, so that a client's writes
//! through this node apply in the order it saw them answered (issue 36,
//! defect 3). A write that may be in the log is never journaled: a copy
//! would apply it twice, after writes answered since (defect 2). A client's
//! write that goes to the log waits until the partition's journaled writes
//! are applied, for the same order.

use crate::log::LogError;

/// Whether a write that rides ripcord goes to the journal without asking
/// the log: its partition's log refuses writes, or holds journaled writes
/// of this node not yet applied.
pub(crate) fn journal_first(rides_ripcord: bool, log_refuses: bool, holds_pending: bool) -> bool {
    rides_ripcord && (log_refuses || holds_pending)
}

/// What a write that goes to the log waits for: a client's write waits
/// until its partition's journaled writes of this node pending when it came
/// (those below `pending_end`, `Journal::pending_end`) are applied. Those
/// were answered before it, and one that passed them (a conditional or
/// sequenced write, a plain one with ripcord off) would be decided first
/// (issue 36, found by the simulation: seed 3). Not a write another node
/// forwarded (that node waited behind its own journal first), nor Tern's
/// own writes (ticks, trims, Firebase), which keep no client's order.
pub(crate) fn journal_to_wait_for(client: bool, forwarded: bool, pending_end: Option<u64>) -> Option<u64> {
    pending_end.filter(|_| client && !forwarded)
}

/// The journal refused a write sent to it first (full, too old, object
/// storage not ready): the log is tried only when nothing of the partition
/// waits in the journal (else the write would pass those before it).
pub(crate) fn try_log_after_journal_refused(holds_pending: bool) -> bool {
    !holds_pending
}

/// Whether the log's error says it is down or slow (not that the write is
/// wrong): it flags the partition as refusing.
pub(crate) fn refuses_every_write(error: &LogError) -> bool {
    matches!(error, LogError::Unavailable(_) | LogError::Ambiguous(_) | LogError::Closed | LogError::Io(_))
}

/// Whether the write the log failed on may be in the log all the same (in
/// flight when it failed): then it is answered with its unknown outcome,
/// never journaled. `Unavailable` and `Closed` are refusals before
/// anything was written.
pub(crate) fn may_be_in_the_log(error: &LogError) -> bool {
    matches!(error, LogError::Ambiguous(_) | LogError::Io(_))
}

/// The log failed a write: journal it only if it rides ripcord, the log is
/// down or slow, and the log surely did not take it.
pub(crate) fn journal_after_log_error(rides_ripcord: bool, error: &LogError) -> bool {
    rides_ripcord && refuses_every_write(error) && !may_be_in_the_log(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_write_the_log_surely_did_not_take_is_journaled_after_it_failed() {
        let down = LogError::Unavailable("down".into());
        let unknown = LogError::Ambiguous("in flight".into());
        assert!(journal_after_log_error(true, &down));
        assert!(!journal_after_log_error(true, &unknown), "a copy of a write that may have landed would apply twice");
        assert!(!journal_after_log_error(false, &down), "a conditional or sequenced write wants the log's answer");
        assert!(!journal_after_log_error(true, &LogError::EntryTooLarge { size_bytes: 2, max_bytes: 1 }), "a refusal of the write itself");
        assert!(journal_first(true, true, false) && journal_first(true, false, true) && !journal_first(true, false, false));
        assert!(!journal_first(false, true, true));
        assert!(try_log_after_journal_refused(false) && !try_log_after_journal_refused(true));
        assert_eq!(journal_to_wait_for(true, false, Some(7)), Some(7));
        assert_eq!(journal_to_wait_for(true, false, None), None, "nothing pending");
        assert_eq!(journal_to_wait_for(true, true, Some(7)), None, "forwarded: the forwarder waited");
        assert_eq!(journal_to_wait_for(false, false, Some(7)), None, "Tern's own writes");
    }
}
