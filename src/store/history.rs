//! A record's history: the last `history_max` versions of each record
//! (puts and deletes), each with the log position that made it, the
//! writer's clock and the writer (`codec::Mutation::writer`), like NATS
//! KV's per-key history.
//!
//! It lives in a table of its own (`history`) in the partition's store
//! file, written by the same apply transaction as the records it follows,
//! so a record and its history never disagree. It is this replica's
//! account of what it applied: not covered by the state hash and not in
//! snapshots, so a replica restored from a snapshot (or rebuilt from a
//! log whose oldest entries are gone) has the history of what it applied
//! since. How many versions to keep is the namespace's `history_max`,
//! carried by each client write (`codec::Mutation::history_max`), so every
//! replica keeps alike whenever it applies the entry (0, the default: none,
//! and a write removes what its record had; absent: as it is).
//!
//! Key: `[record key length: u16 BE][record key][offset: u64 BE]`: every
//! version of one record is one contiguous range (the length prefix keeps
//! one record's range from holding another whose key extends it), oldest
//! first.
//! Value: `[time_ms: u64 LE][crc32c: u32 LE][kind: u8][writer length:
//! u8][writer][value]`, the checksum over the key and everything after it
//! (checked on every read: a damaged entry is reported, never shown).

use redb::{ReadableTable, ReadableTableMetadata, Table, TableDefinition};

use super::key;
use super::layout::{DamagedRecord, ReadFailure};

pub(super) const HISTORY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("history");

use crate::limits::HISTORY_MAX_MAX;

/// Bytes before a version's writer: time, checksum, kind, writer length.
const HEADER_BYTES: usize = 14;
const KIND_PUT: u8 = 0;
const KIND_DELETE: u8 = 1;

/// One version of a record, as its history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// The log offset that made it (its version).
    pub offset: u64,
    /// The writer's clock when it wrote it (ms since the epoch; 0: not known).
    pub time_ms: u64,
    /// Who wrote it (`codec::Mutation::writer`; empty: not known).
    pub writer: String,
    /// The value written; None: the record was deleted.
    pub value: Option<Vec<u8>>,
}

/// A version noted by the apply transaction, written when it commits.
pub(super) struct Noted {
    pub(super) record_key: Vec<u8>,
    pub(super) entry: HistoryEntry,
    /// How many versions of the record to keep (its mutation's `history_max`).
    pub(super) keep: u32,
}

/// The versions an apply transaction applied, for their records' history.
#[derive(Default)]
pub(super) struct HistoryNotes {
    /// Whether this store's history table may hold entries (then writes
    /// keeping none still trim their record's history): as the store was
    /// when the transaction began, or once it noted a version to keep.
    pub(super) table_has_entries: bool,
    pub(super) noted: Vec<Noted>,
}

impl HistoryNotes {
    /// Whether a write keeping `keep` versions must be noted at all (the
    /// common case, history off and none kept, costs nothing).
    pub(super) fn wanted(&self, keep: u32) -> bool {
        keep > 0 || self.table_has_entries
    }
}

/// The history key prefix of a record: its versions' keys start with it.
fn prefix_of(record_key: &[u8]) -> Vec<u8> {
    let length = u16::try_from(record_key.len()).expect("record keys are under 64 KiB (pk and sk are bounded)");
    let mut prefix = Vec::with_capacity(2 + record_key.len() + 8);
    prefix.extend_from_slice(&length.to_be_bytes());
    prefix.extend_from_slice(record_key);
    prefix
}

fn encode(history_key: &[u8], entry: &HistoryEntry) -> Vec<u8> {
    let writer = entry.writer.as_bytes();
    assert!(writer.len() <= usize::from(u8::MAX), "a writer is at most {} bytes (codec)", crate::limits::WRITER_BYTES_MAX);
    let value = entry.value.as_deref().unwrap_or_default();
    let mut stored = Vec::with_capacity(HEADER_BYTES + writer.len() + value.len());
    stored.extend_from_slice(&entry.time_ms.to_le_bytes());
    stored.extend_from_slice(&[0; 4]);
    stored.push(if entry.value.is_some() { KIND_PUT } else { KIND_DELETE });
    stored.push(writer.len() as u8);
    stored.extend_from_slice(writer);
    stored.extend_from_slice(value);
    let crc = checksum(history_key, &stored);
    stored[8..12].copy_from_slice(&crc.to_le_bytes());
    stored
}

/// CRC32C over the key and the stored value with its checksum field zeroed.
fn checksum(history_key: &[u8], stored: &[u8]) -> u32 {
    let crc = crc32c::crc32c(history_key);
    let crc = crc32c::crc32c_append(crc, &stored[..8]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &stored[12..])
}

/// A stored version, its checksum verified (pair assertion with `encode`).
fn decode(history_key: &[u8], stored: &[u8]) -> Result<HistoryEntry, DamagedRecord> {
    let damaged = |what: String| DamagedRecord { key: key::describe(&history_key[2..history_key.len().saturating_sub(8).max(2)]), what };
    if stored.len() < HEADER_BYTES || history_key.len() < 2 + 8 {
        return Err(damaged(format!("a history entry is {} bytes, shorter than its header", stored.len())));
    }
    let stored_crc = u32::from_le_bytes(stored[8..12].try_into().expect("4 bytes"));
    let computed = checksum(history_key, stored);
    if stored_crc != computed {
        return Err(damaged(format!("a history entry fails its checksum (stored {stored_crc:08x}, computed {computed:08x}): damaged on disk")));
    }
    let writer_len = usize::from(stored[13]);
    let writer = stored.get(HEADER_BYTES..HEADER_BYTES + writer_len).ok_or_else(|| damaged("a history entry's writer is cut short".into()))?;
    let value = &stored[HEADER_BYTES + writer_len..];
    let offset = u64::from_be_bytes(history_key[history_key.len() - 8..].try_into().expect("8 bytes"));
    Ok(HistoryEntry {
        offset,
        time_ms: u64::from_le_bytes(stored[..8].try_into().expect("8 bytes")),
        writer: String::from_utf8_lossy(writer).into_owned(),
        value: (stored[12] == KIND_PUT).then(|| value.to_vec()),
    })
}

/// Writes the noted versions in log order, each followed by trimming its
/// record's history to the newest `keep` it says (all of it when 0): the
/// same versions survive however the entries were batched into apply
/// transactions. Bounded: per note, one insert and at most
/// `HISTORY_MAX_MAX + 1` removals (a record holds at most that many before
/// a note). Returns whether the table holds anything.
pub(super) fn write(table: &mut Table<&'static [u8], &'static [u8]>, notes: &HistoryNotes) -> Result<bool, redb::StorageError> {
    let mut stale = Vec::new();
    for noted in &notes.noted {
        assert!(noted.keep <= HISTORY_MAX_MAX, "history_max is checked when an entry is decoded");
        let prefix = prefix_of(&noted.record_key);
        if noted.keep > 0 {
            let mut history_key = prefix.clone();
            history_key.extend_from_slice(&noted.entry.offset.to_be_bytes());
            let stored = encode(&history_key, &noted.entry);
            debug_assert_eq!(decode(&history_key, &stored).as_ref(), Ok(&noted.entry), "a version reads back as written");
            table.insert(history_key.as_slice(), stored.as_slice())?;
        }
        let end = key::prefix_successor(&prefix).expect("a length-prefixed key has a successor");
        stale.clear();
        for entry in table.range::<&[u8]>(prefix.as_slice()..end.as_slice())?.rev().skip(noted.keep as usize).take(HISTORY_MAX_MAX as usize + 1) {
            stale.push(entry?.0.value().to_vec());
        }
        for history_key in &stale {
            table.remove(history_key.as_slice())?;
        }
    }
    Ok(!table.is_empty()?)
}

/// The newest `max` versions of a record, newest first.
pub(super) fn read(table: &impl ReadableTable<&'static [u8], &'static [u8]>, pk: &str, sk: &str, max: u32) -> Result<Vec<HistoryEntry>, ReadFailure> {
    let prefix = prefix_of(&key::encode(pk, sk));
    let end = key::prefix_successor(&prefix).expect("a length-prefixed key has a successor");
    let mut versions = Vec::new();
    for entry in table.range::<&[u8]>(prefix.as_slice()..end.as_slice())?.rev().take(max as usize) {
        let (k, v) = entry?;
        versions.push(decode(k.value(), v.value())?);
    }
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::ReadableDatabase;

    fn entry(offset: u64, value: Option<&str>) -> HistoryEntry {
        HistoryEntry { offset, time_ms: 1_700_000_000_000 + offset, writer: "key:abc".into(), value: value.map(|v| v.as_bytes().to_vec()) }
    }

    #[test]
    fn a_version_reads_back_and_a_flipped_bit_is_caught() {
        let mut history_key = prefix_of(&key::encode("pk", "sk"));
        history_key.extend_from_slice(&7u64.to_be_bytes());
        for e in [entry(7, Some("{\"a\":1}")), entry(7, None), HistoryEntry { writer: String::new(), ..entry(7, Some("")) }] {
            let stored = encode(&history_key, &e);
            assert_eq!(decode(&history_key, &stored).unwrap(), e);
            for i in 0..stored.len() {
                let mut flipped = stored.clone();
                flipped[i] ^= 0x10;
                assert!(decode(&history_key, &flipped).is_err(), "byte {i} flipped");
            }
        }
    }

    #[test]
    fn one_records_range_never_holds_a_longer_keys_versions() {
        // ("a", "b") and ("a", "b\0\0\0\0\0\0\0\0x"): without the length
        // prefix the second's versions would sort inside the first's range.
        let short = prefix_of(&key::encode("a", "b"));
        let long = prefix_of(&key::encode("a", "b\0\0\0\0\0\0\0\0x"));
        let end = key::prefix_successor(&short).unwrap();
        let mut long_key = long;
        long_key.extend_from_slice(&1u64.to_be_bytes());
        assert!(!(short.as_slice() <= long_key.as_slice() && long_key.as_slice() < end.as_slice()));
    }

    #[test]
    fn writes_keep_the_newest_max_versions_and_max_zero_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("h.redb")).unwrap();
        let record = key::encode("k", "");
        let other = key::encode("k", "x");
        let write_notes = |max: u32, offsets: &[u64], record_key: &[u8]| {
            let notes = HistoryNotes {
                table_has_entries: true,
                noted: offsets
                    .iter()
                    .map(|o| Noted { record_key: record_key.to_vec(), entry: entry(*o, Some(&format!("{o}"))), keep: max })
                    .collect(),
            };
            let txn = db.begin_write().unwrap();
            write(&mut txn.open_table(HISTORY).unwrap(), &notes).unwrap();
            txn.commit().unwrap();
        };
        let read_back = |max: u32, sk: &str| {
            let txn = db.begin_read().unwrap();
            read(&txn.open_table(HISTORY).unwrap(), "k", sk, max).unwrap().iter().map(|e| e.offset).collect::<Vec<_>>()
        };
        write_notes(3, &[1, 2], &record);
        write_notes(3, &[5], &other);
        write_notes(3, &[3, 4, 6], &record);
        assert_eq!(read_back(64, ""), vec![6, 4, 3], "the newest 3, newest first");
        assert_eq!(read_back(2, ""), vec![6, 4], "a read takes at most max");
        assert_eq!(read_back(64, "x"), vec![5], "another record's history is its own");
        write_notes(1, &[7], &record);
        assert_eq!(read_back(64, ""), vec![7], "a lower max trims at the next write");
        write_notes(0, &[8], &record);
        assert_eq!(read_back(64, ""), Vec::<u64>::new(), "max 0: a write removes its record's history");
        assert_eq!(read_back(64, "x"), vec![5]);
    }

    /// Review found: trimming each record once per transaction, to its last
    /// note's count, kept more when counts changed within a transaction
    /// than one entry per transaction did. Now each note trims after itself.
    #[test]
    fn the_same_versions_survive_however_entries_are_batched() {
        let record = key::encode("k", "");
        // (offset, keep) in log order; the count changes along the way.
        let writes: [(u64, u32); 7] = [(1, 3), (2, 3), (3, 3), (4, 1), (5, 3), (6, 0), (7, 2)];
        let survivors = |batches: &[&[(u64, u32)]]| {
            let dir = tempfile::tempdir().unwrap();
            let db = redb::Database::create(dir.path().join("h.redb")).unwrap();
            for batch in batches {
                let notes = HistoryNotes {
                    table_has_entries: true,
                    noted: batch.iter().map(|(o, keep)| Noted { record_key: record.clone(), entry: entry(*o, Some("v")), keep: *keep }).collect(),
                };
                let txn = db.begin_write().unwrap();
                write(&mut txn.open_table(HISTORY).unwrap(), &notes).unwrap();
                txn.commit().unwrap();
            }
            let txn = db.begin_read().unwrap();
            read(&txn.open_table(HISTORY).unwrap(), "k", "", 64).unwrap().iter().map(|e| e.offset).collect::<Vec<_>>()
        };
        let one_by_one: Vec<&[(u64, u32)]> = writes.iter().map(std::slice::from_ref).collect();
        let expected = survivors(&one_by_one);
        assert_eq!(expected, vec![7], "6 kept none, 7 keeps itself (of up to 2)");
        assert_eq!(survivors(&[&writes[..]]), expected, "all in one transaction");
        assert_eq!(survivors(&[&writes[..3], &writes[3..]]), expected, "in two");
        assert_eq!(survivors(&[&writes[..5]]), vec![5, 4], "4 trimmed to itself, then 5 added");
    }
}
