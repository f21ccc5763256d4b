//! Per-partition bookkeeping of the embedded log: where each entry sits on
//! disk, which offsets are durable, and a bounded cache of the newest entries
//! so that readers at the tail (the apply loop) never touch the disk.

use std::collections::VecDeque;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

/// Where the entries of one partition sit inside one segment. Offsets of a
/// partition are dense and a segment holds them in order, so a run is its
/// first offset plus one file position per entry.
#[derive(Debug)]
pub struct SegmentRun {
    pub segment_id: u64,
    pub first_offset: u64,
    pub positions: Vec<u32>,
}

impl SegmentRun {
    pub fn end_offset(&self) -> u64 {
        self.first_offset + self.positions.len() as u64
    }
}

#[derive(Debug)]
pub struct PartitionIndex {
    /// Lowest offset still on disk.
    pub start_offset: u64,
    /// Next offset to be assigned by the writer (may run ahead of durable).
    pub next_offset: u64,
    /// Runs in segment order; together they cover `start_offset..durable end`.
    pub runs: VecDeque<SegmentRun>,
    /// Newest durable entries, for tail readers: (offset, payload).
    pub tail: VecDeque<(u64, Bytes)>,
    pub tail_bytes: usize,
    pub tail_bytes_max: usize,
    /// Local consumers need nothing below this; retention stays below it.
    pub release_below: u64,
    /// With snapshots: the oldest retained snapshot of this partition starts
    /// here. Retention deletes what lies below it (and below `release_below`),
    /// and never deletes above it. `None`: no snapshots in use.
    pub snapshot_floor: Option<u64>,
    /// Offsets whose frames were in damaged bytes (found at open, in offset
    /// order, at most `LOST_RANGES_MAX`): no reader gets past one unless it
    /// was accepted (`--accept-loss`).
    pub lost: Vec<Lost>,
    /// Found at this open: entries past the last indexed one may have been
    /// lost, and why. Appends wait until the store is checked against the
    /// end (`Log::settle_tail`).
    pub tail_in_doubt: Option<TailDoubt>,
}

/// Why a partition's newest entries may be gone from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailDoubt {
    /// The newest segment's torn tail was cut: after a crash, entries
    /// never acknowledged; if a store applied past the end, the segment was
    /// damaged or cut short instead.
    Cut(String),
    /// Damaged bytes lie after this partition's last frame, and no frame
    /// after them shows whether they held its entries: at most
    /// `offsets_max` of them, the last in segment `segment_id`.
    Damaged { why: String, offsets_max: u64, segment_id: u64 },
}

impl std::fmt::Display for TailDoubt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TailDoubt::Cut(why) | TailDoubt::Damaged { why, .. } => f.write_str(why),
        }
    }
}

/// Most lost ranges one partition records; past it, the open is refused
/// (a log this damaged is restored, not read around).
pub const LOST_RANGES_MAX: usize = 64;

/// Offsets `from..to` of a partition whose frames were in damaged bytes of
/// the log: their entries exist nowhere in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub from: u64,
    pub to: u64,
    /// Which bytes of which segment, and what was wrong with them.
    pub cause: String,
    /// The segment whose damaged bytes held them (the last damage before
    /// the frame that showed the jump).
    pub segment_id: u64,
    /// Named by the damaged frame's own header, unverified: undone if a
    /// verified frame of the partition at that offset follows.
    pub named_by_header: bool,
    /// The operator accepted exactly this loss: readers go on past it.
    pub accepted: bool,
}

pub struct PartitionState {
    pub topic_id: u32,
    pub partition: u32,
    pub index: Mutex<PartitionIndex>,
    /// Durable end offset (next offset to be written), acknowledged after fsync.
    pub durable_end: watch::Sender<u64>,
}

impl PartitionState {
    pub fn new(topic_id: u32, partition: u32, next_offset: u64, tail_bytes_max: usize) -> PartitionState {
        PartitionState {
            topic_id,
            partition,
            index: Mutex::new(PartitionIndex {
                start_offset: next_offset,
                next_offset,
                runs: VecDeque::new(),
                tail: VecDeque::new(),
                tail_bytes: 0,
                tail_bytes_max,
                release_below: 0,
                snapshot_floor: None,
                lost: Vec::new(),
                tail_in_doubt: None,
            }),
            durable_end: watch::Sender::new(next_offset),
        }
    }

    pub fn durable_end(&self) -> u64 {
        *self.durable_end.borrow()
    }
}

impl PartitionIndex {
    /// Records that `offset` now sits at `position` of `segment_id`.
    pub fn record_position(&mut self, segment_id: u64, offset: u64, position: u32) {
        // Offsets are dense but for a lost range, which starts a new run.
        let after_lost = self.lost.last().is_some_and(|lost| lost.to == offset);
        // Several lost ranges may lie in a row (entries damaged one after another).
        let run_ends_at = if after_lost { self.lost_from(offset) } else { offset };
        match self.runs.back_mut() {
            Some(run) if run.segment_id == segment_id && !after_lost => {
                assert_eq!(run.end_offset(), offset, "offsets of a partition are dense within a segment");
                run.positions.push(position);
            }
            last => {
                if let Some(run) = last {
                    assert_eq!(run.end_offset(), run_ends_at, "offsets of a partition are dense across segments and lost ranges");
                }
                self.runs.push_back(SegmentRun { segment_id, first_offset: offset, positions: vec![position] });
            }
        }
    }

    /// Records that offsets `next_offset..to` were in damaged bytes: the
    /// partition goes on at `to`. Recovery only.
    pub fn record_lost(&mut self, to: u64, segment_id: u64, cause: String, named_by_header: bool) {
        assert!(to > self.next_offset, "a lost range holds at least one offset");
        self.lost.push(Lost { from: self.next_offset, to, cause, segment_id, named_by_header, accepted: false });
        self.next_offset = to;
    }

    /// Where the lost ranges that end right at `offset` (one after another,
    /// without an entry between) start; `offset` when none does.
    fn lost_from(&self, offset: u64) -> u64 {
        self.lost.iter().rev().fold(offset, |from, lost| if lost.to == from { lost.from } else { from })
    }

    /// The lowest offset from which every entry up to the end can be read:
    /// past every lost range not accepted.
    pub fn readable_from(&self) -> u64 {
        self.lost.iter().filter(|lost| !lost.accepted).map(|lost| lost.to).fold(self.start_offset, u64::max)
    }

    /// The accepted lost range `offset` falls in: a reader there goes on at its end.
    pub fn accepted_lost_at(&self, offset: u64) -> Option<&Lost> {
        self.lost.iter().find(|lost| lost.accepted && (lost.from..lost.to).contains(&offset))
    }

    /// Adds a durable entry to the tail cache, evicting the oldest past the byte bound.
    pub fn push_tail(&mut self, offset: u64, payload: Bytes) {
        if let Some((last, _)) = self.tail.back() {
            debug_assert_eq!(*last + 1, offset);
        }
        self.tail_bytes += payload.len();
        self.tail.push_back((offset, payload));
        while self.tail_bytes > self.tail_bytes_max && self.tail.len() > 1 {
            let (_, evicted) = self.tail.pop_front().expect("non-empty");
            self.tail_bytes -= evicted.len();
        }
    }

    /// Entries `from..` (at most `records_max`) if the tail cache holds `from`.
    pub fn read_tail(&self, from: u64, records_max: usize) -> Option<Vec<(u64, Bytes)>> {
        let first = self.tail.front()?.0;
        if from < first {
            return None;
        }
        let skip = (from - first) as usize;
        Some(self.tail.iter().skip(skip).take(records_max).cloned().collect())
    }

    /// File positions of entries `from..until` (at most `records_max`), as (segment, offset, position).
    pub fn locate(&self, from: u64, until: u64, records_max: usize) -> Vec<(u64, u64, u32)> {
        let mut found = Vec::new();
        let mut offset = from;
        for run in &self.runs {
            if offset >= until || found.len() >= records_max {
                break;
            }
            if offset < run.first_offset {
                // A lost range: the reader stops before it (`accepted_lost_at`).
                break;
            }
            if offset >= run.end_offset() {
                continue;
            }
            let skip = (offset - run.first_offset) as usize;
            for position in run.positions.iter().skip(skip) {
                if offset >= until || found.len() >= records_max {
                    break;
                }
                found.push((run.segment_id, offset, *position));
                offset += 1;
            }
        }
        found
    }

    /// Drops runs of segments `< segment_id_min` and advances `start_offset`.
    pub fn forget_segments_below(&mut self, segment_id_min: u64) {
        // Only indexed (durable, acknowledged) entries move the start: an append
        // in flight has taken `next_offset` but is not indexed yet, and must
        // stay above the start (it is acknowledged once its fsync returns).
        while self.runs.front().is_some_and(|run| run.segment_id < segment_id_min) {
            let run = self.runs.pop_front().expect("non-empty");
            self.start_offset = run.end_offset();
        }
        // A lost range below the first retained entry is gone with its segment.
        let first_retained = self.runs.front().map_or(self.start_offset, |run| run.first_offset);
        self.start_offset = self.start_offset.max(first_retained.min(self.next_offset));
        self.lost.retain(|lost| lost.to > self.start_offset);
    }

    /// The end offset of this partition's entries in segments `< segment_id_min`.
    pub fn end_below_segment(&self, segment_id_min: u64) -> u64 {
        let end = self.runs.iter().take_while(|run| run.segment_id < segment_id_min).last().map_or(self.start_offset, SegmentRun::end_offset);
        // A lost range right after them goes with them when its damaged
        // bytes do: recorded as the start, the jump holds at the next open
        // without them. (While they stay, the next open finds it again.)
        // Several in a row go together (`lost` is in offset order).
        self.lost.iter().fold(end, |at, lost| match lost.from == at && lost.segment_id < segment_id_min {
            true => lost.to.min(self.next_offset),
            false => at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_spans_runs_and_bounds() {
        let state = PartitionState::new(0, 0, 0, 1024);
        let mut index = state.index.lock();
        for (segment, offset, pos) in [(1, 0, 0), (1, 1, 10), (2, 2, 0), (2, 3, 30)] {
            index.record_position(segment, offset, pos);
        }
        assert_eq!(index.locate(1, 4, 10), vec![(1, 1, 10), (2, 2, 0), (2, 3, 30)]);
        assert_eq!(index.locate(0, 4, 2), vec![(1, 0, 0), (1, 1, 10)]);
        assert_eq!(index.locate(0, 1, 10), vec![(1, 0, 0)]);
        index.next_offset = 4;
        assert_eq!(index.end_below_segment(2), 2);
        index.forget_segments_below(2);
        assert_eq!(index.start_offset, 2);
        assert_eq!(index.locate(2, 4, 10).len(), 2);
    }

    #[test]
    fn tail_is_bounded_by_bytes() {
        let state = PartitionState::new(0, 0, 0, 10);
        let mut index = state.index.lock();
        for offset in 0..5u64 {
            index.push_tail(offset, Bytes::from_static(b"abcd"));
        }
        assert!(index.tail_bytes <= 10);
        assert_eq!(index.read_tail(0, 10), None);
        assert_eq!(index.read_tail(3, 10).unwrap().len(), 2);
    }
}
