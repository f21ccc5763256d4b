//! Scrubbing a running store: reading every entry at a bounded pace to find
//! damage before a reader meets it.
//!
//! A record damaged on disk is found when it is read: a point read of a
//! record whose key was damaged misses it (it reads as absent), and a
//! record nobody reads stays damaged until a snapshot or a list meets it.
//! The scrub reads each entry once per pass, a chunk at a time (one read
//! transaction per chunk, so no pass pins old pages for long), verifying
//! each record's checksum (`tally.rs`, the rule of `tern check`). When the
//! store did not change during the pass, the records and metadata also
//! must add up to the state hash and count kept beside them: that finds
//! what no checksum covers (a record lost, metadata changed). Damage found
//! is reported (`DamageFound`), and the partition's apply loop rebuilds it
//! as for damage any reader finds (`apply/rebuild.rs`).

use std::ops::Bound;

use redb::ReadableDatabase;

use super::layout::{read_state, RECORDS};
use super::partition_store::damaged;
use super::tally::Tally;
use super::{PartitionStore, StoreError, StoreState};

/// Bytes of entries one step reads at most (with `entries_max`): a step of
/// large values holds its read transaction no longer than a small one.
const STEP_BYTES_MAX: usize = 4 << 20;

/// One pass over a store, between chunks.
#[derive(Debug)]
pub struct ScrubPass {
    /// The state kept beside the records when the pass began.
    began: StoreState,
    tally: Tally,
    /// The last key checked (None: none yet).
    after: Option<Vec<u8>>,
    /// Entries checked so far.
    entries: u64,
}

impl ScrubPass {
    /// Entries checked so far in this pass (records and metadata).
    pub fn entries_checked(&self) -> u64 {
        self.entries
    }
}

/// How a pass ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScrubOutcome {
    /// Every record verified, and they add up to the state kept beside them.
    Intact { records: u64 },
    /// Every record verified; the store changed during the pass, so the
    /// sum was not compared (a later pass of an idle moment compares it).
    Changed { records: u64 },
}

impl PartitionStore {
    /// Begins a pass over this store (damage found reading its state is
    /// reported, a panic inside the storage engine too).
    pub fn scrub_begin(&self) -> Result<ScrubPass, StoreError> {
        self.guarded(|| self.scrub_state())
    }

    fn scrub_state(&self) -> Result<ScrubPass, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(RECORDS).map_err(|e| self.error(e))?;
        let began = read_state(&table).map_err(|e| self.error(e))?;
        let tally = Tally::of(&table).map_err(|e| self.error(e))?;
        Ok(ScrubPass { began, tally, after: None, entries: 0 })
    }

    /// Checks up to `entries_max` more entries of the pass: Ok(None) while
    /// entries remain, the outcome once it has checked the last. Damage
    /// found is reported to the store's `DamageFound` and returned (a panic
    /// inside the storage engine, meeting a damaged page, too).
    pub fn scrub_step(&self, pass: &mut ScrubPass, entries_max: usize) -> Result<Option<ScrubOutcome>, StoreError> {
        assert!(entries_max > 0, "a step checks at least one entry");
        self.guarded(|| self.scrub_chunk(pass, entries_max))
    }

    /// Runs `read`, a panic inside it (redb meeting a damaged page) reported as damage.
    fn guarded<T>(&self, read: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)) {
            Ok(outcome) => outcome,
            Err(panic) => {
                let why = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                let why = format!("reading it panicked inside the storage engine: {}", why.unwrap_or_default());
                self.damage.report_panic(&self.path, &why);
                Err(damaged(&self.path, &self.damage, &why))
            }
        }
    }

    fn scrub_chunk(&self, pass: &mut ScrubPass, entries_max: usize) -> Result<Option<ScrubOutcome>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(RECORDS).map_err(|e| self.error(e))?;
        let from = match &pass.after {
            Some(after) => Bound::Excluded(after.as_slice()),
            None => Bound::Unbounded,
        };
        let mut entries = table.range::<&[u8]>((from, Bound::Unbounded)).map_err(|e| self.error(e))?;
        let mut bytes = 0usize;
        for _ in 0..entries_max {
            if bytes >= STEP_BYTES_MAX {
                break;
            }
            let Some(entry) = entries.next() else {
                return self.scrub_end(pass, &read_state(&table).map_err(|e| self.error(e))?).map(Some);
            };
            let (key, value) = entry.map_err(|e| self.error(e))?;
            if let Err(record) = pass.tally.add(key.value(), value.value()) {
                // The key goes to the node's log only, never into an answer.
                tracing::error!(store = %self.path.display(), record = %record.key, what = %record.what, "the scrub found a damaged record");
                return Err(damaged(&self.path, &self.damage, &format!("the scrub found {}", record.what)));
            }
            pass.after = Some(key.value().to_vec());
            pass.entries += 1;
            bytes += key.value().len() + value.value().len();
        }
        Ok(None)
    }

    /// The pass checked the last entry; `now` is the state kept beside the
    /// records as the last chunk read it.
    fn scrub_end(&self, pass: &ScrubPass, now: &StoreState) -> Result<ScrubOutcome, StoreError> {
        let records = pass.tally.records();
        // The applied offset only moves forward and the hash covers every
        // record and piece of metadata: the same state is the same store.
        if *now != pass.began {
            return Ok(ScrubOutcome::Changed { records });
        }
        match pass.tally.agrees_with(now) {
            Ok(()) => Ok(ScrubOutcome::Intact { records }),
            Err(why) => Err(damaged(&self.path, &self.damage, &format!("the scrub found that {why}"))),
        }
    }
}
