//! How a partition's store lays out its one redb table: record keys and
//! values, and the metadata keys beside them (applied state, format,
//! partition count, write ids, the not-applied record).

use std::path::Path;

use redb::{ReadableTable, Table, TableDefinition};

use super::damaged::DamageFound;
use super::hash::StateHash;
use super::{StoreError, StoreState};

/// One table for records and metadata, so a read opens a single table.
/// Records: (pk, sk) key encoding → `[version: u64 LE][crc32c: u32 LE][value
/// JSON text]`, the checksum over the key, the version and the value
/// (`record_checksum`), checked on every read: a record damaged on disk is
/// never served (`decode_value`).
/// Metadata: keys starting with `[0, 0]` (a pk of length 0, which no record
/// has) → u64 LE, or 32 bytes for the state hash.
pub(super) const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("records");

/// The applied state, one 64-byte value written by every apply transaction
/// (one B-tree insert rather than five): `applied_next`, `applied_entries`,
/// `skipped_entries`, `record_count` (u64 LE each), then the 32-byte state hash.
pub(super) const META_STATE: &[u8] = b"\0\0state";
pub(super) const META_STATE_BYTES: usize = 64;
/// The partition count of the namespace this store belongs to.
pub(super) const META_PARTITIONS: &[u8] = b"\0\0partitions";
/// The layout of this store's keys and values; a store of another layout is refused.
pub(super) const META_FORMAT: &[u8] = b"\0\0format";
/// 2: the state hash covers the outcome metadata (`is_outcome_meta`).
/// 3: every record carries its checksum (`encode_value`).
/// Older stores are upgraded in place when opened (`PartitionStore::open`).
pub(super) const FORMAT_VERSION: u64 = 3;
/// While a format-2 store is upgraded to 3 (in bounded transactions): the
/// last record key rewritten with its checksum. Records after it are still
/// of format 2; gone once the format says 3.
pub(super) const META_UPGRADED_TO: &[u8] = b"\0\0upgraded_to";
/// The log this store's offsets are positions in (`Log::identity` of its
/// namespace's topic, UTF-8): a store of a namespace deleted and created
/// again under its name, or of another log, is never taken for this one's.
/// Describes the store: not hashed, not in snapshots.
/// Its letter starts no outcome metadata's prefix (`is_outcome_meta`):
/// `\0\0log` was taken for a journal lane's, and the scrub found the
/// state hash short of it.
pub(super) const META_LOG: &[u8] = b"\0\0origin_log";
/// The longest log identity a store keeps (`META_LOG`).
pub(crate) const LOG_IDENTITY_BYTES_MAX: usize = 1024;
/// Every metadata key starts with this; no record key does (pk is never empty).
pub(super) const META_PREFIX: [u8; 2] = [0, 0];
/// `\0\0w<write id>` -> `[offset u64 LE][outcome]`: write ids applied recently.
pub(super) const META_WRITE_ID: &[u8] = b"\0\0w";
/// `\0\0x<offset u64 BE><write id>` -> empty: the same, by offset, for eviction.
pub(super) const META_WRITE_ID_BY_OFFSET: &[u8] = b"\0\0x";
/// `\0\0n<offset u64 BE>` -> empty: a mutation at this offset decoded but did
/// not apply (a failed condition, a duplicate write id). Subscribers replaying
/// the log read this to skip it exactly as the apply loop did.
pub(super) const META_NOT_APPLIED: &[u8] = b"\0\0n";
/// The lowest offset the not-applied record covers: where this store began
/// applying (0, a restored snapshot's offset, or the offset at upgrade).
pub(super) const META_NOT_APPLIED_FROM: &[u8] = b"\0\0journal_from";
/// `\0\0l<lane>` -> `[next u64 LE][at u64 LE]`: per journal lane (one
/// node's journal of a namespace), the next lane offset to apply and the
/// log offset that set it (`journal_lanes.rs`).
pub(super) const META_JOURNAL_LANE: &[u8] = b"\0\0l";
/// `\0\0m<at u64 BE><lane>` -> empty: the same lanes by the log offset that
/// last moved them, to forget the least recent first.
pub(super) const META_JOURNAL_LANE_BY_AT: &[u8] = b"\0\0m";
/// `\0\0#...`: what procedures keep (definitions, log time, timers, outbox;
/// `procedures.rs`).
pub(super) const META_PROCEDURES: &[u8] = b"\0\0#";

/// Metadata that decides how later entries apply (remembered write ids, by
/// id and by offset; the not-applied record; procedures' definitions, log
/// time, timers and outbox): it is covered by the state
/// hash and travels in snapshots with the records. The rest of the metadata
/// (state, format, partition count, `not_applied_from`) describes this store.
pub(crate) fn is_outcome_meta(key: &[u8]) -> bool {
    [META_WRITE_ID, META_WRITE_ID_BY_OFFSET, META_NOT_APPLIED, META_PROCEDURES, META_JOURNAL_LANE, META_JOURNAL_LANE_BY_AT]
        .iter()
        .any(|prefix| key.starts_with(prefix))
}

pub(super) fn meta_u64(table: &impl ReadableTable<&'static [u8], &'static [u8]>, key: &[u8]) -> Result<u64, redb::StorageError> {
    Ok(table.get(key)?.map_or(0, |g| u64::from_le_bytes(g.value().try_into().expect("meta values are 8 bytes"))))
}

/// Bytes before a stored record's value: its version and its checksum.
pub(super) const VALUE_HEADER_BYTES: usize = 12;

/// CRC32C over a record's key, version and value: a flipped bit or a
/// record moved under another key fails it.
pub(super) fn record_checksum(key: &[u8], version: u64, value: &[u8]) -> u32 {
    let crc = crc32c::crc32c(key);
    let crc = crc32c::crc32c_append(crc, &version.to_le_bytes());
    crc32c::crc32c_append(crc, value)
}

/// A record as stored: `[version][checksum][value]`.
pub(super) fn encode_value(key: &[u8], version: u64, value: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(VALUE_HEADER_BYTES + value.len());
    stored.extend_from_slice(&version.to_le_bytes());
    stored.extend_from_slice(&record_checksum(key, version, value).to_le_bytes());
    stored.extend_from_slice(value);
    stored
}

/// A stored record that fails its checksum (or is too short to hold one):
/// damaged on disk, never served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DamagedRecord {
    /// Which record (its key, for the node's own log only: a reader's
    /// answer and `/readyz` never name keys).
    pub(super) key: String,
    /// What was found.
    pub(super) what: String,
}

/// A stored record's version and value, its checksum verified (pair
/// assertion with `encode_value`).
pub(super) fn decode_value<'v>(key: &[u8], stored: &'v [u8]) -> Result<(u64, &'v [u8]), DamagedRecord> {
    let damaged = |what: String| DamagedRecord { key: super::key::describe(key), what };
    if stored.len() < VALUE_HEADER_BYTES {
        return Err(damaged(format!("a record is {} bytes, shorter than its {VALUE_HEADER_BYTES}-byte header", stored.len())));
    }
    let version = u64::from_le_bytes(stored[..8].try_into().expect("8 bytes"));
    let checksum = u32::from_le_bytes(stored[8..VALUE_HEADER_BYTES].try_into().expect("4 bytes"));
    let value = &stored[VALUE_HEADER_BYTES..];
    let computed = record_checksum(key, version, value);
    if checksum != computed {
        return Err(damaged(format!("a record fails its checksum (stored {checksum:08x}, computed {computed:08x}): damaged on disk")));
    }
    Ok((version, value))
}

/// A record as snapshots carry it (`[version][value]`, the layout of
/// format 2, unchanged so snapshots stay readable by every build).
pub(super) fn snapshot_form(version: u64, value: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(value);
}

/// A record of a snapshot (or of a format-2 store): `[version][value]`.
pub(super) fn decode_snapshot_form(stored: &[u8]) -> Option<(u64, &[u8])> {
    let version = u64::from_le_bytes(stored.get(..8)?.try_into().ok()?);
    Some((version, &stored[8..]))
}

pub(super) fn read_state(table: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<StoreState, redb::StorageError> {
    let Some(guard) = table.get(META_STATE)? else {
        return Ok(StoreState { applied_next: 0, applied_entries: 0, skipped_entries: 0, record_count: 0, state_hash: StateHash::default() });
    };
    let bytes = guard.value();
    assert_eq!(bytes.len(), META_STATE_BYTES, "the stored state is {META_STATE_BYTES} bytes");
    let get = |i: usize| -> Result<u64, redb::StorageError> { Ok(u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap())) };
    let state_hash = StateHash::from_bytes(&bytes[32..64]);
    Ok(StoreState { applied_next: get(0)?, applied_entries: get(1)?, skipped_entries: get(2)?, record_count: get(3)?, state_hash })
}

pub(super) fn write_state(table: &mut Table<&'static [u8], &'static [u8]>, state: &StoreState) -> Result<(), redb::StorageError> {
    let mut bytes = [0u8; META_STATE_BYTES];
    for (i, n) in [state.applied_next, state.applied_entries, state.skipped_entries, state.record_count].iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&n.to_le_bytes());
    }
    bytes[32..64].copy_from_slice(&state.state_hash.to_bytes());
    table.insert(META_STATE, bytes.as_slice())?;
    Ok(())
}

/// Maps redb errors to store errors naming the database file (damage,
/// redb's `Corrupted`, is reported to `damage` as well).
pub(super) fn storage_error<'a>(path: &'a Path, damage: &'a DamageFound) -> impl Fn(redb::StorageError) -> StoreError + 'a {
    move |e| super::partition_store::failure(path, damage, e.into())
}

/// Why a read of stored records failed: redb's error, or a record that
/// failed its checksum.
#[derive(Debug)]
pub(super) enum ReadFailure {
    Storage(redb::StorageError),
    Damaged(DamagedRecord),
}

impl From<redb::StorageError> for ReadFailure {
    fn from(e: redb::StorageError) -> Self {
        ReadFailure::Storage(e)
    }
}

impl From<DamagedRecord> for ReadFailure {
    fn from(e: DamagedRecord) -> Self {
        ReadFailure::Damaged(e)
    }
}

/// A read failure as a store error naming the file; damage is reported.
pub(super) fn read_failure(path: &Path, damage: &DamageFound, e: ReadFailure) -> StoreError {
    match e {
        ReadFailure::Storage(e) => super::partition_store::failure(path, damage, e.into()),
        ReadFailure::Damaged(record) => {
            tracing::error!(store = %path.display(), record = %record.key, what = %record.what, "a damaged record was not served");
            super::partition_store::damaged(path, damage, &record.what)
        }
    }
}

/// A key bound as a borrowed slice bound (what redb's `range` takes).
pub(super) fn slice_bound(b: &std::ops::Bound<Vec<u8>>) -> std::ops::Bound<&[u8]> {
    match b {
        std::ops::Bound::Included(v) => std::ops::Bound::Included(v.as_slice()),
        std::ops::Bound::Excluded(v) => std::ops::Bound::Excluded(v.as_slice()),
        std::ops::Bound::Unbounded => std::ops::Bound::Unbounded,
    }
}

/// Visits `(sk, value)` of `pk`'s records in `table` whose sk starts with
/// `prefix`, from `from` on, in sk order, while `visit` returns true: one
/// walk for read views and apply transactions alike (`scan_prefix`).
/// The highest version among `pk`'s records whose sk starts with `prefix`.
pub(super) fn max_version(table: &impl ReadableTable<&'static [u8], &'static [u8]>, pk: &str, prefix: &str) -> Result<Option<u64>, ReadFailure> {
    let (lower, upper) = super::key::prefix_bounds(pk, prefix, None);
    let mut max = None;
    for entry in table.range::<&[u8]>((slice_bound(&lower), slice_bound(&upper)))? {
        let (k, v) = entry?;
        let version = decode_value(k.value(), v.value())?.0;
        max = Some(max.map_or(version, |m: u64| m.max(version)));
    }
    Ok(max)
}

pub(super) fn scan_prefix(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    pk: &str,
    prefix: &str,
    from: Option<&str>,
    visit: &mut dyn FnMut(&str, &[u8]) -> bool,
) -> Result<(), ReadFailure> {
    let (lower, upper) = super::key::prefix_bounds(pk, prefix, from);
    let skip = super::key::pk_prefix(pk).len();
    for entry in table.range::<&[u8]>((slice_bound(&lower), slice_bound(&upper)))? {
        let (k, v) = entry?;
        let value = decode_value(k.value(), v.value())?.1;
        let sk = std::str::from_utf8(&k.value()[skip..]).expect("a key that passed its checksum is UTF-8");
        if !visit(sk, value) {
            break;
        }
    }
    Ok(())
}
