//! What procedures keep in a partition's store besides records (issue 23,
//! docs/procedures.md): their deployed definitions, the partition's log
//! time, timers and the outbox. All of it is outcome metadata: it decides
//! how later entries apply, so it is covered by the state hash, travels in
//! snapshots, and changes only inside an apply transaction, with the offset.
//!
//! Keys (every one starts with `\0\0#`, `META_PROCEDURES`):
//! - `\0\0#p<name>` → the active definition (JSON, `procedure::Definition`);
//! - `\0\0#v<name>\0<version u64 BE>` → every deployed version kept (history);
//! - `\0\0#c` → the partition's log time, ms (u64 LE): the largest record
//!   timestamp applied so far (a procedure's "now");
//! - `\0\0#t<at ms u64 BE><procedure>\0<timer>` → empty: timers by due time;
//! - `\0\0#u<procedure>\0<timer>` → due time (u64 LE): the same, by name;
//! - `\0\0#o<offset u64 BE><index u32 BE>` → an outbox message (bytes the
//!   procedure module encodes): outputs in the order they were emitted;
//! - `\0\0#s<procedure>\0<key>` → a procedure's private state (bytes).

use redb::ReadableTable;

use super::layout::META_PROCEDURES;
use super::{ApplyTxn, StoreError, StoreReader};

const DEFINITION: u8 = b'p';
const VERSION: u8 = b'v';
const CLOCK: u8 = b'c';
const TIMER_BY_TIME: u8 = b't';
const TIMER_BY_NAME: u8 = b'u';
const OUTBOX: u8 = b'o';
const STATE: u8 = b's';

fn key(kind: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut key = Vec::with_capacity(META_PROCEDURES.len() + 1 + parts.iter().map(|p| p.len()).sum::<usize>());
    key.extend_from_slice(META_PROCEDURES);
    key.push(kind);
    for part in parts {
        key.extend_from_slice(part);
    }
    key
}

/// The prefix of every key of one kind.
fn prefix(kind: u8) -> Vec<u8> {
    key(kind, &[])
}

/// `procedure\0timer`: a timer's name inside its procedure's.
fn timer_name(procedure: &str, timer: &str) -> Vec<u8> {
    [procedure.as_bytes(), &[0], timer.as_bytes()].concat()
}

fn key_of_state(procedure: &str, state_key: &[u8]) -> Vec<u8> {
    key(STATE, &[procedure.as_bytes(), &[0], state_key])
}

/// A due timer: its procedure, its name and when it was due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueTimer {
    pub procedure: String,
    pub timer: String,
    pub at_ms: u64,
}

/// An outbox message as stored: where it came from and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// The input record's offset.
    pub offset: u64,
    /// Its place among that record's outputs.
    pub index: u32,
    pub message: Vec<u8>,
}

/// The active definition of every procedure in `table`, in name order.
fn procedures_in(table: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<Vec<(String, Vec<u8>)>, redb::StorageError> {
    let from = prefix(DEFINITION);
    let mut found = Vec::new();
    for entry in table.range::<&[u8]>(from.as_slice()..)? {
        let (k, v) = entry?;
        let Some(name) = k.value().strip_prefix(from.as_slice()) else { break };
        found.push((String::from_utf8_lossy(name).into_owned(), v.value().to_vec()));
    }
    Ok(found)
}

/// Every kept version of `name` in `table`: `(version, definition)`, oldest first.
fn versions_in(table: &impl ReadableTable<&'static [u8], &'static [u8]>, name: &str) -> Result<Vec<(u64, Vec<u8>)>, redb::StorageError> {
    let from = key(VERSION, &[name.as_bytes(), &[0]]);
    let mut versions = Vec::new();
    for entry in table.range::<&[u8]>(from.as_slice()..)? {
        let (k, v) = entry?;
        let Some(version) = k.value().strip_prefix(from.as_slice()) else { break };
        versions.push((u64::from_be_bytes(version.try_into().expect("version keys end in 8 bytes")), v.value().to_vec()));
    }
    Ok(versions)
}

fn u64_le(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("procedure meta values of 8 bytes"))
}

impl ApplyTxn<'_, '_> {
    /// The active definition of every procedure, in name order.
    pub fn procedures(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        procedures_in(&*self.records).map_err(|e| self.error(e))
    }

    /// The active definition of `name`.
    pub fn procedure(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let guard = self.records.get(key(DEFINITION, &[name.as_bytes()]).as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map(|g| g.value().to_vec()))
    }

    /// Makes `definition` the active one of `name` and keeps it as `version`
    /// in the history, forgetting the oldest versions past `versions_kept`.
    pub fn deploy_procedure(&mut self, name: &str, version: u64, definition: &[u8], versions_kept: usize) -> Result<(), StoreError> {
        assert!(versions_kept > 0, "the active version is always kept");
        self.put_meta(&key(DEFINITION, &[name.as_bytes()]), definition)?;
        self.put_meta(&key(VERSION, &[name.as_bytes(), &[0], &version.to_be_bytes()]), definition)?;
        let versions = self.procedure_versions(name)?;
        for old in versions.iter().take(versions.len().saturating_sub(versions_kept)) {
            self.remove_meta(&key(VERSION, &[name.as_bytes(), &[0], &old.to_be_bytes()]))?;
        }
        Ok(())
    }

    /// The versions of `name` kept, oldest first.
    pub fn procedure_versions(&self, name: &str) -> Result<Vec<u64>, StoreError> {
        Ok(versions_in(&*self.records, name).map_err(|e| self.error(e))?.into_iter().map(|(v, _)| v).collect())
    }

    /// The partition's log time (ms): the largest timestamp applied so far.
    pub fn log_time_ms(&self) -> Result<u64, StoreError> {
        let guard = self.records.get(prefix(CLOCK).as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map_or(0, |g| u64_le(g.value())))
    }

    /// Moves the log time forward to `time_ms` (never back).
    pub fn advance_log_time(&mut self, time_ms: u64) -> Result<u64, StoreError> {
        let now = self.log_time_ms()?;
        if time_ms > now {
            self.put_meta(&prefix(CLOCK), &time_ms.to_le_bytes())?;
            return Ok(time_ms);
        }
        Ok(now)
    }

    /// Sets (or moves) timer `timer` of `procedure` to fire at `at_ms`.
    pub fn set_timer(&mut self, procedure: &str, timer: &str, at_ms: u64) -> Result<(), StoreError> {
        self.cancel_timer(procedure, timer)?;
        let name = timer_name(procedure, timer);
        self.put_meta(&key(TIMER_BY_TIME, &[&at_ms.to_be_bytes(), &name]), &[])?;
        self.put_meta(&key(TIMER_BY_NAME, &[&name]), &at_ms.to_le_bytes())
    }

    /// Cancels timer `timer` of `procedure`; true if it was set.
    pub fn cancel_timer(&mut self, procedure: &str, timer: &str) -> Result<bool, StoreError> {
        let name = timer_name(procedure, timer);
        let by_name = key(TIMER_BY_NAME, &[&name]);
        let at = self.records.get(by_name.as_slice()).map_err(|e| self.error(e))?.map(|g| u64_le(g.value()));
        let Some(at) = at else { return Ok(false) };
        self.remove_meta(&by_name)?;
        self.remove_meta(&key(TIMER_BY_TIME, &[&at.to_be_bytes(), &name]))?;
        Ok(true)
    }

    /// When timer `timer` of `procedure` is due, if it is set.
    pub fn timer_at(&self, procedure: &str, timer: &str) -> Result<Option<u64>, StoreError> {
        let by_name = key(TIMER_BY_NAME, &[&timer_name(procedure, timer)]);
        Ok(self.records.get(by_name.as_slice()).map_err(|e| self.error(e))?.map(|g| u64_le(g.value())))
    }

    /// The earliest timer due at or before `now_ms`, if any (by due time,
    /// then procedure and timer name: the same order on every replica).
    pub fn next_due_timer(&self, now_ms: u64) -> Result<Option<DueTimer>, StoreError> {
        let from = prefix(TIMER_BY_TIME);
        let Some(entry) = self.records.range::<&[u8]>(from.as_slice()..).map_err(|e| self.error(e))?.next() else {
            return Ok(None);
        };
        let (k, _) = entry.map_err(|e| self.error(e))?;
        let Some(rest) = k.value().strip_prefix(from.as_slice()) else { return Ok(None) };
        let at_ms = u64::from_be_bytes(rest[..8].try_into().expect("timer keys start with 8 bytes of time"));
        if at_ms > now_ms {
            return Ok(None);
        }
        let name = &rest[8..];
        let split = name.iter().position(|b| *b == 0).expect("timer names hold their procedure's");
        Ok(Some(DueTimer {
            procedure: String::from_utf8_lossy(&name[..split]).into_owned(),
            timer: String::from_utf8_lossy(&name[split + 1..]).into_owned(),
            at_ms,
        }))
    }

    /// When the earliest timer of any procedure is set to fire (None: no timer).
    pub fn earliest_timer_ms(&self) -> Result<Option<u64>, StoreError> {
        let from = prefix(TIMER_BY_TIME);
        let Some(entry) = self.records.range::<&[u8]>(from.as_slice()..).map_err(|e| self.error(e))?.next() else {
            return Ok(None);
        };
        let (k, _) = entry.map_err(|e| self.error(e))?;
        let Some(rest) = k.value().strip_prefix(from.as_slice()) else { return Ok(None) };
        Ok(Some(u64::from_be_bytes(rest[..8].try_into().expect("timer keys start with 8 bytes of time"))))
    }

    /// Procedure `procedure`'s private state at `key`.
    pub fn procedure_state(&self, procedure: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let k = key_of_state(procedure, key);
        Ok(self.records.get(k.as_slice()).map_err(|e| self.error(e))?.map(|g| g.value().to_vec()))
    }

    /// Writes (Some) or deletes (None) procedure `procedure`'s state at `key`.
    pub fn set_procedure_state(&mut self, procedure: &str, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let k = key_of_state(procedure, key);
        match value {
            Some(v) => self.put_meta(&k, v),
            None => self.remove_meta(&k),
        }
    }

    /// Puts an output of the record at `offset` in the outbox.
    pub fn put_outbox(&mut self, offset: u64, index: u32, message: &[u8]) -> Result<(), StoreError> {
        self.put_meta(&key(OUTBOX, &[&offset.to_be_bytes(), &index.to_be_bytes()]), message)
    }

    /// Removes up to `count_max` outbox messages of records below `offset`,
    /// oldest first (once published); returns how many.
    pub fn trim_outbox_below(&mut self, offset: u64, count_max: usize) -> Result<usize, StoreError> {
        let keys = self.keys_below(&prefix(OUTBOX), offset, count_max)?;
        for k in &keys {
            self.remove_meta(k)?;
        }
        Ok(keys.len())
    }
}

impl StoreReader {
    /// The active definition of every procedure, in name order.
    pub fn procedures(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        procedures_in(&self.table).map_err(|e| self.error(e))
    }

    /// Every kept version of `name`: `(version, definition)`, oldest first.
    pub fn procedure_versions(&self, name: &str) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        versions_in(&self.table, name).map_err(|e| self.error(e))
    }

    /// Whether any procedure was ever deployed here (a removal counts: it
    /// is kept as the active definition). Reads one key.
    pub fn has_procedures(&self) -> Result<bool, StoreError> {
        let from = prefix(DEFINITION);
        let first = self.table.range::<&[u8]>(from.as_slice()..).map_err(|e| self.error(e))?.next();
        Ok(match first {
            Some(entry) => entry.map_err(|e| self.error(e))?.0.value().starts_with(&from),
            None => false,
        })
    }

    /// Procedure `procedure`'s private state at `key`.
    pub fn procedure_state(&self, procedure: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let k = key_of_state(procedure, key);
        Ok(self.table.get(k.as_slice()).map_err(|e| self.error(e))?.map(|g| g.value().to_vec()))
    }

    /// The partition's log time (ms).
    pub fn log_time_ms(&self) -> Result<u64, StoreError> {
        let guard = self.table.get(prefix(CLOCK).as_slice()).map_err(|e| self.error(e))?;
        Ok(guard.map_or(0, |g| u64_le(g.value())))
    }

    /// Up to `count_max` outbox messages from `(offset, index)` on, in
    /// order, and no more of them than fit `bytes_max` (the first always:
    /// a dead letter is up to 7 MiB, so a count alone bounds no memory).
    pub fn outbox_from(&self, offset: u64, index: u32, count_max: usize, bytes_max: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let base = prefix(OUTBOX);
        let from = key(OUTBOX, &[&offset.to_be_bytes(), &index.to_be_bytes()]);
        let (mut found, mut bytes) = (Vec::new(), 0usize);
        for entry in self.table.range::<&[u8]>(from.as_slice()..).map_err(|e| self.error(e))?.take(count_max) {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            let Some(rest) = k.value().strip_prefix(base.as_slice()) else { break };
            bytes = bytes.saturating_add(v.value().len());
            if bytes > bytes_max && !found.is_empty() {
                break;
            }
            found.push(OutboxEntry {
                offset: u64::from_be_bytes(rest[..8].try_into().expect("outbox keys hold an offset")),
                index: u32::from_be_bytes(rest[8..12].try_into().expect("outbox keys hold an index")),
                message: v.value().to_vec(),
            });
        }
        Ok(found)
    }

    /// How many outbox messages there are from `(offset, index)` on,
    /// counting at most `count_max` (nothing is copied, but redb reads the
    /// pages that hold them: a scan of their bytes, done sparingly).
    pub fn outbox_count_from(&self, offset: u64, index: u32, count_max: usize) -> Result<usize, StoreError> {
        let base = prefix(OUTBOX);
        let from = key(OUTBOX, &[&offset.to_be_bytes(), &index.to_be_bytes()]);
        let mut counted = 0;
        for entry in self.table.range::<&[u8]>(from.as_slice()..).map_err(|e| self.error(e))?.take(count_max) {
            let (k, _) = entry.map_err(|e| self.error(e))?;
            if !k.value().starts_with(base.as_slice()) {
                break;
            }
            counted += 1;
        }
        Ok(counted)
    }

    /// The input offset of the oldest message the outbox holds (its key
    /// only: a message is up to 7 MiB).
    pub fn outbox_oldest_offset(&self) -> Result<Option<u64>, StoreError> {
        let base = prefix(OUTBOX);
        let Some(first) = self.table.range::<&[u8]>(base.as_slice()..).map_err(|e| self.error(e))?.next() else { return Ok(None) };
        let (k, _) = first.map_err(|e| self.error(e))?;
        Ok(k.value().strip_prefix(base.as_slice()).map(|rest| u64::from_be_bytes(rest[..8].try_into().expect("outbox keys hold an offset"))))
    }

    /// How many messages the outbox holds, counting at most `count_max`.
    pub fn outbox_len(&self, count_max: usize) -> Result<usize, StoreError> {
        self.outbox_count_from(0, 0, count_max)
    }
}
