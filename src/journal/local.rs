//! The local journal: an embedded log of its own in `<data_dir>/journal`,
//! bounded, whose entries are released once applied; the write ids of
//! pending entries; what a restart must sequence again; and its slot for
//! the copy in object storage (`objects.rs`).

use super::objects;
use crate::codec::{self, Mutation};
use crate::log::embedded::segments::write_atomically;
use crate::log::embedded::{AcceptLost, EmbeddedLog, EmbeddedLogConfig, MetaState, TailDoubt};
use crate::log::{CreateOutcome, Log, LogError, LogReader, TopicPartition};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Segments are small, so that releasing a few seconds of writes frees disk
/// soon (a segment is deleted once all of its entries are released).
pub(super) const SEGMENT_BYTES_MAX: u64 = 8 * 1024 * 1024;

/// How much the journal may hold that is not released yet.
#[derive(Debug, Clone, Copy)]
pub struct JournalLimits {
    pub entries_max: u64,
    pub bytes_max: u64,
    /// The oldest entry not yet applied may be at most this old (the
    /// sequencer has been unable to sequence it for that long).
    pub age_max: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("the journal is full: {entries} entries and {bytes} bytes not yet sequenced and applied (bounds: {entries_max} entries, {bytes_max} bytes); the write was not journaled")]
    Full { entries: u64, bytes: u64, entries_max: u64, bytes_max: u64 },
    #[error("the journal's oldest write has waited {age_ms} ms to be sequenced and applied (bound: {age_max_ms} ms): the log has been unavailable too long; the write was not journaled")]
    TooOld { age_ms: u64, age_max_ms: u64 },
    #[error("namespace {ns:?} has {partitions} partitions but its journal has {journaled}: the namespace was made again; sequence or drop its journal first")]
    PartitionsChanged { ns: String, partitions: u32, journaled: u32 },
    #[error("the journal failed: {0}")]
    Log(#[from] LogError),
    /// The local journal has the write (it will be sequenced and applied),
    /// object storage did not take it: not as durable as asked.
    #[error("the write is in this node's journal and will be applied, but object storage did not take it ({0}); retry with the same Idempotency-Key to be sure, it is applied once")]
    Objects(String),
    /// Object storage has not answered since the node started: a
    /// journaled write cannot be made as durable as configured.
    #[error("the journal's object storage is not reachable ({0}); the write was not journaled")]
    ObjectsUnavailable(String),
}

/// What a partition's journal holds: entries in `[start, end)` are
/// journaled and not released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub ns: String,
    pub partition: u32,
    pub start: u64,
    pub end: u64,
}

/// Entries and bytes not yet released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub entries: u64,
    pub bytes: u64,
}

pub struct Journal {
    /// The journal's id (its folder in object storage; its lanes' names).
    pub(super) id: String,
    pub(super) log: EmbeddedLog,
    pub(super) limits: JournalLimits,
    /// Per namespace: its partitions (as its journal topic was made).
    pub(super) topics: Mutex<HashMap<String, u32>>,
    /// Per "ns:partition": the offset below which everything is released,
    /// persisted in `RELEASED_FILE` (a restarted node replays from there).
    /// Moves only once on disk (`persist_released`).
    pub(super) released: Arc<Mutex<HashMap<String, u64>>>,
    pub(super) released_file: PathBuf,
    /// Per partition: marks seen applied (`release_below`) and not yet on
    /// disk. Bound: one per partition of the journal's topics.
    pub(super) unpersisted: Mutex<HashMap<(String, u32), u64>>,
    /// One `persist_released` at a time (each writes the whole file).
    pub(super) persisting: tokio::sync::Mutex<()>,
    /// Held by the marks' file write itself: a `persist_released` given up
    /// while its write goes on (on the blocking pool) releases
    /// `persisting`, and the next one's write must not interleave with it
    /// in the same temporary file.
    pub(super) marks_file: Arc<Mutex<()>>,
    /// The write ids of the entries not released (bounded by the journal's
    /// own bounds): what `find` answers.
    pub(super) ids: Mutex<PendingIds>,
    /// Told whenever entries are released (`wait_released`).
    pub(super) released_changed: tokio::sync::Notify,
    pub(super) replayed_at_open: u64,
    /// The journal's copy in object storage, when configured.
    pub(super) objects: Option<Arc<ObjectsSlot>>,
}

/// The journal's copy in object storage: opened at start, or — when object
/// storage does not answer then — by a task that keeps trying, so a node
/// starts and serves without it (journaled writes are refused meanwhile).
pub(super) struct ObjectsSlot {
    pub(super) id: String,
    /// The local journal's directory (the objects' sequence floor).
    pub(super) dir: std::path::PathBuf,
    /// What the uploader reads of the local journal (`objects::LocalEntries`).
    pub(super) local: Arc<LocalReader>,
    pub(super) journal: std::sync::OnceLock<objects::ObjectJournal>,
    /// Why it is not open yet.
    pub(super) last_error: Mutex<String>,
    pub(super) opener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Retries of opening the journal's objects: the wait doubles up to this.
pub(super) const OBJECTS_OPEN_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

impl ObjectsSlot {
    pub(super) async fn try_open(&self, config: &ObjectsConfig, unreleased: &[objects::Entry], released: &[objects::LaneMark]) -> bool {
        let journal = objects::ObjectJournal::open(
            config.objects.clone(),
            &self.id,
            &config.node,
            config.lease_renew,
            unreleased.to_vec(),
            released.to_vec(),
            objects::LocalJournal { dir: self.dir.clone(), entries: self.local.clone() },
        );
        match journal.await {
            Ok(journal) => {
                let _ = self.journal.set(journal);
                true
            }
            Err(e) => {
                *self.last_error.lock() = e;
                false
            }
        }
    }

    pub(super) fn ready(&self) -> Result<&objects::ObjectJournal, JournalError> {
        let journal = self.journal.get().ok_or_else(|| JournalError::ObjectsUnavailable(self.last_error.lock().clone()))?;
        match journal.refuses() {
            Some(reason) => Err(JournalError::ObjectsUnavailable(reason)),
            None => Ok(journal),
        }
    }
}

/// Where and as whom the journal keeps its copy in object storage.
#[derive(Debug, Clone)]
pub struct ObjectsConfig {
    pub objects: objects::JournalObjects,
    /// Shown in the lease (who owns the journal).
    pub node: String,
    /// How often the lease is renewed.
    pub lease_renew: std::time::Duration,
}

/// The journal's entries not yet released, by partition (every entry:
/// `holds_pending`, the backlog and the oldest age count them all) and, for
/// those with a write id, by id. Keyed by offset, not kept in arrival order: appends of one
/// partition run concurrently and note their entries in any order, and the
/// sequencer can release an entry before its append noted it (issue 36,
/// review F12: such an entry stayed pending for good — the partition's
/// plain writes journaled, then every journaled write refused as too old).
#[derive(Default)]
pub(super) struct PendingIds {
    pub(super) by_id: HashMap<Bytes, (String, u32, u64)>,
    /// Per "ns:partition", by journal offset: what a release forgets.
    pub(super) order: HashMap<String, std::collections::BTreeMap<u64, (Bytes, std::time::Instant)>>,
    /// Per "ns:partition": offsets below this are released; noting one is a no-op.
    released: HashMap<String, u64>,
}

impl PendingIds {
    pub(super) fn add(&mut self, ns: &str, partition: u32, offset: u64, write_id: Bytes) {
        let key = released_key(ns, partition);
        if offset < self.released.get(&key).copied().unwrap_or(0) {
            return;
        }
        self.order.entry(key).or_default().insert(offset, (write_id.clone(), std::time::Instant::now()));
        // An entry without a write id (the journal's API allows one; a node
        // always makes one) still holds its partition: a plain write after
        // it must not pass it (found by the simulation).
        if !write_id.is_empty() {
            self.by_id.insert(write_id, (ns.to_string(), partition, offset));
        }
    }

    pub(super) fn release_below(&mut self, ns: &str, partition: u32, offset: u64) {
        let key = released_key(ns, partition);
        let mark = self.released.entry(key.clone()).or_insert(0);
        *mark = (*mark).max(offset);
        let Some(order) = self.order.get_mut(&key) else { return };
        let kept = order.split_off(&offset);
        for (at, (id, _)) in std::mem::replace(order, kept) {
            // A later entry with the same id keeps it.
            if self.by_id.get(&id).is_some_and(|(n, p, o)| n == ns && *p == partition && *o == at) {
                self.by_id.remove(&id);
            }
        }
    }

    /// Whether `key`'s partition has an entry not yet released.
    fn holds(&self, key: &str) -> bool {
        self.order.get(key).is_some_and(|order| !order.is_empty())
    }

    /// Past the last entry of `key`'s partition not yet released, if any.
    fn end_of(&self, key: &str) -> Option<u64> {
        self.order.get(key).and_then(|order| order.last_key_value()).map(|(offset, _)| offset + 1)
    }

    /// Whether every entry of `key`'s partition below `end` is released.
    fn released_to(&self, key: &str, end: u64) -> bool {
        self.order.get(key).is_none_or(|order| order.range(..end).next().is_none())
    }

    /// How long the oldest (lowest offset) pending entry of any partition has waited.
    fn oldest_age(&self) -> Option<std::time::Duration> {
        self.order.values().filter_map(|o| o.first_key_value().map(|(_, (_, at))| at.elapsed())).max()
    }

    fn len(&self) -> u64 {
        self.order.values().map(|o| o.len() as u64).sum()
    }
}

/// Where the released offsets are kept (JSON, written atomically).
pub(super) const RELEASED_FILE: &str = "released.json";

/// The journal's id (its folder in object storage), made at first open.
pub(crate) const ID_FILE: &str = "journal_id";

/// Reads the journal's id, making one at first open. A damaged one (not the
/// 32 hex digits every build wrote) is made again only while the journal
/// holds nothing (`held_bytes` 0), with its lanes (`start_lanes_again`);
/// with entries held it is refused: they name their lanes by it, and under
/// another id an entry applied before could be applied again.
pub(super) fn journal_id(dir: &Path, held_bytes: u64) -> Result<String, JournalError> {
    let path = dir.join(ID_FILE);
    // Bytes, not a string: bytes that are not UTF-8 are damage like any other.
    let read = std::fs::read(&path).map(|bytes| String::from_utf8(bytes).unwrap_or_default());
    match read {
        Ok(id) if is_journal_id(id.trim()) => return Ok(id.trim().to_string()),
        Ok(_) if held_bytes > 0 => {
            return Err(LogError::Corrupt(format!(
                "{} is damaged and the journal holds {held_bytes} bytes of entries whose lanes it names: under another \
                 id they could be applied twice. With journal objects, its id is the folder under tern/journal/ in \
                 object storage whose lease names this node: write that id back into the file. Otherwise stop the \
                 node and move the journal folder aside: its entries not yet sequenced are lost (docs/damage.md)",
                path.display()
            ))
            .into())
        }
        Ok(_) => {
            start_lanes_again(dir)?;
            return journal_id(dir, held_bytes);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(LogError::from(e).into()),
    }
    let id = format!("{:032x}", rand::random::<u128>());
    write_atomically(&path, id.as_bytes()).map_err(LogError::from)?;
    Ok(id)
}

pub(super) fn is_journal_id(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The released marks as written: `{"marks": {"<ns>:<partition>": offset},
/// "checksum": <BLAKE3 of the marks' JSON, keys sorted>}`. A flipped digit
/// that still parses (a mark raised, a key renamed) would leave journaled
/// writes below the mark never sequenced: the checksum tells it from marks
/// this node wrote (issue 37 review). Files older builds wrote (a plain
/// map, no checksum) are read as they are, once.
#[derive(serde::Serialize, serde::Deserialize)]
struct ReleasedFile {
    marks: std::collections::BTreeMap<String, u64>,
    checksum: String,
}

fn marks_checksum(marks: &std::collections::BTreeMap<String, u64>) -> String {
    blake3::hash(&serde_json::to_vec(marks).expect("a map of offsets serializes")).to_hex().to_string()
}

/// The released marks' file content (`ReleasedFile`).
pub(super) fn encode_released(marks: &HashMap<String, u64>) -> Vec<u8> {
    let marks: std::collections::BTreeMap<String, u64> = marks.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let checksum = marks_checksum(&marks);
    serde_json::to_vec(&ReleasedFile { marks, checksum }).expect("released marks serialize")
}

/// The released marks in `bytes`, or why they cannot be trusted.
pub(super) fn decode_released(bytes: &[u8]) -> Result<HashMap<String, u64>, String> {
    if let Ok(file) = serde_json::from_slice::<ReleasedFile>(bytes) {
        let computed = marks_checksum(&file.marks);
        if computed != file.checksum {
            return Err(format!("checksum mismatch (stored {}, computed {computed})", file.checksum));
        }
        return Ok(file.marks.into_iter().collect());
    }
    // An older build's file: a plain map, nothing to verify it by.
    serde_json::from_slice::<HashMap<String, u64>>(bytes).map_err(|e| e.to_string())
}

/// The released marks: derivable, so a damaged file is not fatal. Without
/// them the entries still held are sequenced again, and applied once (a
/// lane's entries at or below what a store applied are dropped there).
fn read_released(path: &Path) -> Result<HashMap<String, u64>, JournalError> {
    match std::fs::read(path) {
        Ok(bytes) => match decode_released(&bytes) {
            Ok(released) => Ok(released),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "the journal's released marks are damaged; the entries it holds are sequenced again (applied once)");
                Ok(HashMap::new())
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashMap::new()),
        Err(e) => Err(LogError::from(e).into()),
    }
}

/// Entries the journal's log lost to damaged bytes above what was released
/// are acknowledged writes not yet sequenced: they exist nowhere else (but
/// in journal objects, when on), so the journal refuses to open, naming
/// each lane's lost offsets and the flag that accepts exactly that loss.
/// Lost entries below a release mark were applied: nothing is lost.
///
/// Accepted ranges (`--accept-journal-loss`, as the refusal names them):
/// the journal's reader goes on past them, and the sequencer places the
/// next entry after each with its gap (`JournalPlace::gap_from`), so every
/// replica's lane goes on past the lost offsets once it reached them, and
/// every other entry still applies in lane order. Damaged bytes after a
/// lane's last entry may have held up to `offsets_max` more of it: accepted,
/// the lane goes on past all of them (`Log::settle_tail`), so no lane
/// offset that a store may have applied is used again.
async fn settle_lost_entries(
    log: &EmbeddedLog,
    topics: &HashMap<String, u32>,
    released: &HashMap<String, u64>,
    accepted: &[AcceptLost],
    with_objects: bool,
) -> Result<(), JournalError> {
    let mut lost = Vec::new();
    // Accepted lost ranges not yet released: lanes that go on past a gap.
    let mut gapped = Vec::new();
    let mut names: Vec<(&String, &u32)> = topics.iter().collect();
    names.sort();
    for (ns, &partitions) in names {
        for partition in 0..partitions {
            let tp = tp(ns, partition);
            let released_below = released.get(&released_key(ns, partition)).copied().unwrap_or(0);
            // Only what the operator named counts as accepted: not a range
            // the log takes as accepted for lying before an end it settled
            // earlier (new damage to older pending entries).
            let named = log.accepted_exactly(&tp);
            for range in log.lost_ranges(&tp).into_iter().filter(|range| range.to > released_below) {
                let range_name = format!("{ns}/{partition}@{}..{}", range.from, range.to);
                match named.contains(&(range.from, range.to)) {
                    true => gapped.push(range_name),
                    false => lost.push((range_name, range.cause)),
                }
            }
            // Damaged bytes after the lane's last entry may have held more of
            // it: how many, no later frame of the lane shows.
            if let Some(TailDoubt::Damaged { why, offsets_max, .. }) = log.tail_in_doubt(&tp) {
                let end = log.end_offset(&tp).await?;
                let to = end + offsets_max.max(1);
                let named = AcceptLost { topic: ns.clone(), partition, from: end, to };
                if !with_objects && accepted.contains(&named) {
                    log.settle_tail(&tp, 0).await?;
                    tracing::error!(lane = %named, "an accepted loss after a journal lane's last entry: the lane goes on past it");
                } else {
                    lost.push((named.to_string(), why));
                }
            }
        }
    }
    if with_objects && !gapped.is_empty() {
        // A claim of the objects would stop at the gap (`node::claims`).
        return Err(LogError::Corrupt(format!(
            "the journal goes on past lost entries accepted earlier (--accept-journal-loss), not yet released: lanes and \
             offsets {}. Journal objects cannot hold a lane with a gap: start this node without them (journal_objects = \
             false) until those lanes' entries are released, then turn them on again (docs/damage.md)",
            gapped.join(", ")
        ))
        .into());
    }
    let Some((_, cause)) = lost.first() else { return Ok(()) };
    let ranges = lost.iter().map(|(range, _)| range.as_str()).collect::<Vec<_>>().join(", ");
    let way_on = if with_objects {
        "Their copy in journal objects is sequenced by another node once this node's lease lapses: keep this node \
         stopped until then, then move its journal folder aside"
            .to_string()
    } else {
        let flags = lost.iter().map(|(range, _)| format!("--accept-journal-loss {range}")).collect::<Vec<_>>().join(" ");
        format!(
            "To go on without exactly those writes, restart with {flags}: every other entry the journal holds is \
             still sequenced and applied, in its lane's order"
        )
    };
    Err(LogError::Corrupt(format!(
        "the journal lost acknowledged writes not yet sequenced: lanes and offsets {ranges} ({cause}). {way_on} \
         (docs/damage.md)"
    ))
    .into())
}

/// The journal's log started again (its metadata lost, nothing held): a new
/// id, so new lanes, and no released marks (they were the old lanes').
fn start_lanes_again(dir: &Path) -> Result<(), JournalError> {
    let id = format!("{:032x}", rand::random::<u128>());
    write_atomically(&dir.join(ID_FILE), id.as_bytes()).map_err(LogError::from)?;
    write_atomically(&dir.join(RELEASED_FILE), &encode_released(&HashMap::new())).map_err(LogError::from)?;
    tracing::warn!(journal = %dir.display(), %id, "the journal started again under a new id: its metadata was lost and it held no entry");
    Ok(())
}

impl Journal {
    /// Opens (recovering) or creates the journal in `dir`.
    pub async fn open(dir: &Path, limits: JournalLimits, objects: Option<ObjectsConfig>) -> Result<Journal, JournalError> {
        Journal::open_accepting(dir, limits, objects, Vec::new()).await
    }

    /// As `open`, going on past exactly the lost entries in `accepted`
    /// (`--accept-journal-loss`: `settle_lost_entries`). Refused with
    /// journal objects on: there, lost entries have a copy (another node
    /// sequences it once this node's lease lapses), so nothing is lost.
    pub async fn open_accepting(
        dir: &Path,
        limits: JournalLimits,
        objects: Option<ObjectsConfig>,
        accepted: Vec<AcceptLost>,
    ) -> Result<Journal, JournalError> {
        if objects.is_some() && !accepted.is_empty() {
            return Err(LogError::Corrupt(format!(
                "--accept-journal-loss {}: this node's journal keeps a copy in object storage (journal objects), so \
                 its entries are not lost: leave the flag out (docs/damage.md)",
                accepted[0]
            ))
            .into());
        }
        assert!(limits.entries_max > 0 && limits.bytes_max > 0 && !limits.age_max.is_zero(), "journal bounds are positive");
        let mut config = EmbeddedLogConfig::new(dir);
        config.segment_bytes_max = SEGMENT_BYTES_MAX;
        config.accept_lost = accepted.clone();
        // Every closed segment whose entries are all released goes.
        config.retention_bytes = Some(0);
        // The journal's log metadata (its lanes' topics) lost while its
        // segments hold nothing: every entry was released, nothing is lost.
        // It starts again, under a new id, so its lanes are new ones and no
        // offset is used twice (an entry at an old lane's offset would be
        // taken for one applied before). With entries held, it is refused.
        config.start_again_if_meta_lost_and_empty = true;
        // Decided before the log writes new metadata: lanes started again
        // first, so a crash in between starts them again at the next open.
        let (meta, held_bytes) = EmbeddedLog::inspect_meta(dir)?;
        // Lanes exist once the journal ran (its `wal/` made at its first
        // open): an id file placed before that is the id to use.
        let lanes_exist = dir.join("wal").is_dir() && (dir.join(ID_FILE).exists() || dir.join(RELEASED_FILE).exists());
        if held_bytes == 0 && lanes_exist && meta != MetaState::Present {
            start_lanes_again(dir)?;
        }
        let log = EmbeddedLog::open(config)?;
        let topics = log.list_topics().await?.into_iter().map(|t| (t.name, t.partitions)).collect();
        let id = journal_id(dir, log.bytes())?;
        let released_file = dir.join(RELEASED_FILE);
        let released = read_released(&released_file)?;
        settle_lost_entries(&log, &topics, &released, &accepted, objects.is_some()).await?;
        log.settle_all_tails();
        // The log is told the marks on disk, as `persist_released` tells it
        // the ones that move: without them a lane never written again kept
        // every segment (retention, and a drained journal's close, wait for
        // every lane's mark). Review of issue 37.
        for (key, mark) in &released {
            if let Some((ns, partition)) = key.rsplit_once(':').and_then(|(ns, p)| Some((ns, p.parse::<u32>().ok()?))) {
                log.release_below(&tp(ns, partition), *mark);
            }
        }
        let released = Arc::new(Mutex::new(released));
        let objects = match objects {
            Some(config) => {
                // A damaged record of the objects' sequence numbers stops the
                // start with its path (a guess could reuse a number); the
                // objects' opener would only retry it.
                objects::read_seq_floor(dir).map_err(LogError::Corrupt)?;
                let released_now = released.lock().clone();
                let (unreleased, marks) = unreleased_entries(&log, &topics, &released_now).await?;
                let local = Arc::new(LocalReader { log: log.clone(), released: released.clone() });
                Some(open_objects(id.clone(), dir.to_path_buf(), config, unreleased, marks, local).await)
            }
            None => None,
        };
        let mut journal = Journal {
            id,
            objects,
            log,
            limits,
            topics: Mutex::new(topics),
            released,
            released_file,
            unpersisted: Mutex::default(),
            persisting: tokio::sync::Mutex::new(()),
            marks_file: Arc::default(),
            ids: Mutex::default(),
            released_changed: tokio::sync::Notify::new(),
            replayed_at_open: 0,
        };
        journal.index_pending_ids().await?;
        journal.replayed_at_open = journal.backlog().entries;
        let mut journaled = 0;
        for p in journal.pending().await? {
            let lost_within: u64 = journal
                .log
                .lost_ranges(&tp(&p.ns, p.partition))
                .iter()
                .filter(|range| range.accepted)
                .map(|range| range.to.min(p.end).saturating_sub(range.from.max(p.start)))
                .sum();
            journaled += p.end - p.start - lost_within;
        }
        if journaled != journal.replayed_at_open {
            // Every entry is indexed, with a write id or without: a
            // mismatch is an index that missed entries (never expected).
            tracing::warn!(journaled, counted = journal.replayed_at_open, "the journal's index of pending entries misses some");
        }
        if journal.replayed_at_open > 0 {
            tracing::info!(entries = journal.replayed_at_open, "the journal holds writes not yet applied; sequencing them");
        }
        Ok(journal)
    }

    /// Makes `mutation`, a write to `partition` of namespace `ns` (of
    /// `partitions`), durable in the journal; returns its journal offset.
    /// Refused when the journal is full.
    pub async fn append(&self, ns: &str, partitions: u32, partition: u32, mutation: &Mutation) -> Result<u64, JournalError> {
        self.append_at(ns, partitions, partition, mutation, codec::now_ms()).await
    }

    /// As `append`, stamped with the writer's clock at `time_ms` (the
    /// simulation's own clock; `append` takes this node's).
    pub async fn append_at(&self, ns: &str, partitions: u32, partition: u32, mutation: &Mutation, time_ms: u64) -> Result<u64, JournalError> {
        let (offset, copy) = self.append_local(ns, partitions, partition, mutation, time_ms).await?;
        if let Some((objects, entry)) = copy {
            objects.append(entry).await.map_err(JournalError::Objects)?;
        }
        Ok(offset)
    }

    /// As `append_at`, for the simulation: the caller goes away once the
    /// local journal has the entry, before its copy is handed to object
    /// storage (a client that went away; deterministic, unlike a dropped future).
    #[cfg(test)]
    pub(crate) async fn append_at_then_go_away(&self, ns: &str, partitions: u32, partition: u32, mutation: &Mutation, time_ms: u64) {
        let _ = self.append_local(ns, partitions, partition, mutation, time_ms).await;
    }

    /// The local half of `append_at`: the entry in the local journal, and
    /// its copy for object storage, when the journal keeps one.
    async fn append_local(
        &self,
        ns: &str,
        partitions: u32,
        partition: u32,
        mutation: &Mutation,
        time_ms: u64,
    ) -> Result<(u64, Option<(&objects::ObjectJournal, objects::Entry)>), JournalError> {
        assert!(partition < partitions, "a partition of the namespace");
        let backlog = self.backlog();
        if backlog.entries >= self.limits.entries_max || backlog.bytes >= self.limits.bytes_max {
            return Err(JournalError::Full {
                entries: backlog.entries,
                bytes: backlog.bytes,
                entries_max: self.limits.entries_max,
                bytes_max: self.limits.bytes_max,
            });
        }
        if let Some(age) = self.oldest_age() {
            if age > self.limits.age_max {
                return Err(JournalError::TooOld { age_ms: age.as_millis() as u64, age_max_ms: self.limits.age_max.as_millis() as u64 });
            }
        }
        // Taken once, before the local append: past it, the write is in the
        // journal and is answered with its write id whatever happens.
        let objects = match &self.objects {
            Some(slot) => Some(slot.ready()?),
            None => None,
        };
        self.topic(ns, partitions).await?;
        let payload = Bytes::from(codec::encode_at(mutation, time_ms));
        let offset = self.log.append(&tp(ns, partition), payload.clone()).await?;
        self.ids.lock().add(ns, partition, offset, mutation.write_id.clone());
        let copy = objects.map(|objects| (objects, objects::Entry { ns: ns.to_string(), partitions, partition, offset, payload }));
        Ok((offset, copy))
    }

    /// Deletes the journal's objects whose entries were all released.
    pub async fn delete_released_objects(&self) -> Result<usize, JournalError> {
        let Some(objects) = self.objects.as_ref().and_then(|slot| slot.journal.get()) else { return Ok(0) };
        objects.delete_released().await.map_err(JournalError::Objects)
    }

    /// Whether `ns`/`partition` has journaled writes not yet seen applied
    /// (ripcord then journals that partition's plain writes too, so they
    /// apply after them, in the order their clients saw).
    pub fn holds_pending(&self, ns: &str, partition: u32) -> bool {
        self.ids.lock().holds(&released_key(ns, partition))
    }

    /// Past the last journaled write of `ns`/`partition` not yet seen
    /// applied, if any: what a write answered after them waits for
    /// (`wait_released`).
    pub fn pending_end(&self, ns: &str, partition: u32) -> Option<u64> {
        self.ids.lock().end_of(&released_key(ns, partition))
    }

    /// Waits until every journaled write of `ns`/`partition` below `end`
    /// (`pending_end`, read when the waiting write came) is seen applied, at
    /// most until `deadline`: whether they are. Only those: the writes
    /// journaled meanwhile were answered after the waiting one, and a
    /// partition with steady journaled traffic never empties (review of
    /// issue 36: waiting for "none pending" refused every conditional write
    /// for as long as plain writes kept coming).
    pub async fn wait_released(&self, ns: &str, partition: u32, end: u64, deadline: tokio::time::Instant) -> bool {
        let key = released_key(ns, partition);
        loop {
            let released = self.released_changed.notified();
            tokio::pin!(released);
            // Registered before the check: a release between the two still wakes it.
            released.as_mut().enable();
            if self.ids.lock().released_to(&key, end) {
                return true;
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return self.ids.lock().released_to(&key, end);
            }
        }
    }

    /// The lane of this journal's topic of `ns` (`super::lane_of`); the
    /// topic exists (a journaled write made it), else None.
    pub fn lane(&self, ns: &str) -> Option<bytes::Bytes> {
        let partitions = *self.topics.lock().get(ns)?;
        Some(super::lane_of(&self.id, ns, partitions))
    }

    /// The journal's id in object storage, when it keeps a copy there.
    pub fn objects_id(&self) -> Option<&str> {
        self.objects.as_ref().map(|slot| slot.id.as_str())
    }

    /// How long the oldest entry not yet released has waited (since it was
    /// appended, or since this node opened its journal for one from before).
    pub fn oldest_age(&self) -> Option<std::time::Duration> {
        self.ids.lock().oldest_age()
    }

    /// Entries found pending when the journal was opened: what this node replays.
    pub fn replayed_at_open(&self) -> u64 {
        self.replayed_at_open
    }

    /// Where the pending entry with `write_id` is: namespace, partition and
    /// journal offset; none once it was released (or never journaled here).
    pub fn find(&self, write_id: &[u8]) -> Option<(String, u32, u64)> {
        self.ids.lock().by_id.get(write_id).cloned()
    }

    /// Reads the write ids of the pending entries (at open).
    pub(super) async fn index_pending_ids(&self) -> Result<(), JournalError> {
        for p in self.pending().await? {
            let partitions = self.topics.lock().get(&p.ns).copied().unwrap_or(p.partition + 1);
            let mut reader = self.reader(&p.ns, p.partition, p.start).await?;
            let mut at = p.start;
            while at < p.end {
                let batch = reader.next_batch(1024, std::time::Duration::ZERO).await?;
                let Some(last) = batch.last() else { break };
                at = last.offset + 1;
                for record in batch {
                    // One that does not decode is held and counted too, without an id.
                    let write_id = codec::decode(record.payload, p.partition, partitions).map(|m| m.write_id).unwrap_or_default();
                    self.ids.lock().add(&p.ns, p.partition, record.offset, write_id);
                }
            }
        }
        Ok(())
    }

    /// The journal of `partition` of `ns` from `from` on (entries decode
    /// with `codec::decode`).
    pub async fn reader(&self, ns: &str, partition: u32, from: u64) -> Result<Box<dyn LogReader>, JournalError> {
        Ok(self.log.reader(&tp(ns, partition), from).await?)
    }

    /// Every write of `partition` of `ns` below journal offset `offset` was
    /// seen applied: they are no longer pending for this node (`find`,
    /// `holds_pending`, `wait_released`, the backlog and its bounds), at
    /// once and in memory only. Their mark goes to disk, and their segments
    /// go, at the next `persist_released`; until then a restart replays
    /// them (appended again, applied once: their place in their lane).
    ///
    /// Cheap, so a lane releases at every turn: the mark's fsynced file
    /// write, made per drained lane on the runtime's threads, was what
    /// made journaled writes 2-3x slower (issue 36's benchmarks).
    pub fn release_below(&self, ns: &str, partition: u32, offset: u64) {
        // Lost entries whose loss was accepted right there go too: they are
        // never sequenced, and a drained journal then holds nothing.
        let offset = self.past_accepted_loss(ns, partition, offset);
        if offset <= self.released.lock().get(&released_key(ns, partition)).copied().unwrap_or(0) {
            return;
        }
        self.ids.lock().release_below(ns, partition, offset);
        let mut unpersisted = self.unpersisted.lock();
        let wanted = unpersisted.entry((ns.to_string(), partition)).or_insert(0);
        *wanted = (*wanted).max(offset);
        drop(unpersisted);
        self.released_changed.notify_waiters();
    }

    /// Writes the marks released since the last call (`release_below`) to
    /// disk, one atomic file write off the runtime's threads, then lets
    /// the journal's log delete the segments below them. A mark moves only
    /// once it is on disk: a failed write leaves the marks to write at the
    /// next call (review of issue 36: a mark moved before a failed write
    /// left its entries pending for good), and a call given up half way
    /// changes nothing in memory. The caller paces the calls (the
    /// sequencer: every `RELEASE_INTERVAL`).
    pub async fn persist_released(&self) -> Result<(), JournalError> {
        let _one = self.persisting.lock().await;
        let wanted = self.unpersisted.lock().clone();
        let mut next = self.released.lock().clone();
        let mut moved = Vec::new();
        for ((ns, partition), offset) in wanted {
            let mark = next.entry(released_key(&ns, partition)).or_insert(0);
            if offset > *mark {
                *mark = offset;
                moved.push((ns, partition, offset));
            }
        }
        if moved.is_empty() {
            return Ok(());
        }
        let bytes = encode_released(&next);
        let (file, marks_file) = (self.released_file.clone(), self.marks_file.clone());
        let write = move || {
            let _only = marks_file.lock();
            write_atomically(&file, &bytes)
        };
        match tokio::task::spawn_blocking(write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(LogError::from(e).into()),
            Err(e) => return Err(LogError::Io(std::io::Error::other(format!("writing {}: {e}", self.released_file.display()))).into()),
        }
        // Never lower: a persist given up after its write, and a later
        // one, may both have written.
        let mut released = self.released.lock();
        for (ns, partition, offset) in &moved {
            let mark = released.entry(released_key(ns, *partition)).or_insert(0);
            *mark = (*mark).max(*offset);
        }
        drop(released);
        let mut unpersisted = self.unpersisted.lock();
        for (ns, partition, offset) in &moved {
            let key = (ns.clone(), *partition);
            if unpersisted.get(&key).is_some_and(|wanted| wanted <= offset) {
                unpersisted.remove(&key);
            }
        }
        drop(unpersisted);
        for (ns, partition, offset) in moved {
            self.log.release_below(&tp(&ns, partition), offset);
        }
        // Segments left by a failure here go at a later call's retention.
        self.log.enforce_retention()?;
        Ok(())
    }

    /// Where the pending entries of `tp` start: past what was released,
    /// what the journal no longer has, and lost entries whose loss was
    /// accepted right there (`settle_lost_entries`).
    pub(super) async fn released_from(&self, ns: &str, partition: u32) -> Result<u64, JournalError> {
        let released = self.released.lock().get(&released_key(ns, partition)).copied().unwrap_or(0);
        let start = released.max(self.log.start_offset(&tp(ns, partition)).await?);
        Ok(self.past_accepted_loss(ns, partition, start))
    }

    /// `offset`, or past the accepted lost entries it falls in (and those
    /// right after them).
    fn past_accepted_loss(&self, ns: &str, partition: u32, offset: u64) -> u64 {
        let mut lost = self.log.lost_ranges(&tp(ns, partition));
        lost.retain(|range| range.accepted);
        lost.sort_by_key(|range| range.from);
        lost.iter().fold(offset, |at, range| if (range.from..range.to).contains(&at) { range.to } else { at })
    }

    /// Whether the journal entries `from..to` of `ns`/`partition` were lost
    /// and the loss accepted (`--accept-journal-loss`): the sequencer then
    /// places the entry at `to` after that gap (`JournalPlace::gap_from`).
    pub fn gap_accepted(&self, ns: &str, partition: u32, from: u64, to: u64) -> bool {
        from < to && self.past_accepted_loss(ns, partition, from) >= to
    }

    /// What each partition holds that is not released, in namespace and
    /// partition order (what a restarted node sequences again).
    pub async fn pending(&self) -> Result<Vec<Pending>, JournalError> {
        let topics: Vec<(String, u32)> = {
            let mut topics: Vec<(String, u32)> = self.topics.lock().iter().map(|(ns, n)| (ns.clone(), *n)).collect();
            topics.sort();
            topics
        };
        let mut out = Vec::new();
        for (ns, partitions) in topics {
            for partition in 0..partitions {
                let start = self.released_from(&ns, partition).await?;
                let end = self.log.end_offset(&tp(&ns, partition)).await?;
                if end > start {
                    out.push(Pending { ns: ns.clone(), partition, start, end });
                }
            }
        }
        Ok(out)
    }

    /// What `ns`/`partition`'s journal holds not released, if anything.
    pub async fn pending_of(&self, ns: &str, partition: u32) -> Result<Option<Pending>, JournalError> {
        if self.topics.lock().get(ns).is_none_or(|&partitions| partition >= partitions) {
            return Ok(None);
        }
        let start = self.released_from(ns, partition).await?;
        let end = self.log.end_offset(&tp(ns, partition)).await?;
        Ok((end > start).then(|| Pending { ns: ns.to_string(), partition, start, end }))
    }

    /// The journal's id (`ID_FILE`): its lanes and its folder in object storage are named by it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Entries and bytes not yet released.
    /// Counted from the write ids of the pending entries (every journaled
    /// write has one), so an append does not walk every partition.
    pub fn backlog(&self) -> Backlog {
        let entries = self.ids.lock().len();
        // Released entries whose marks are not on disk yet keep their
        // segments: their bytes count (marks that cannot be written must
        // not let the journal's files grow unbounded).
        let holds = entries > 0 || !self.unpersisted.lock().is_empty();
        Backlog { entries, bytes: if holds { self.log.bytes() } else { 0 } }
    }

    /// The namespace's journal topic, made on its first write. A namespace
    /// made again with another partition count (deleted, and created again
    /// under its name) gets its journal topic made again too, once nothing
    /// of the old one is pending (`remake_topic`); until then its
    /// journaled writes are refused (`PartitionsChanged`).
    pub(super) async fn topic(&self, ns: &str, partitions: u32) -> Result<(), JournalError> {
        let journaled = self.topics.lock().get(ns).copied();
        if let Some(journaled) = journaled {
            if journaled == partitions {
                return Ok(());
            }
            return self.remake_topic(ns, journaled, partitions).await;
        }
        match self.log.create_topic(ns, partitions).await? {
            CreateOutcome::Created | CreateOutcome::AlreadyExists => {}
        }
        self.topics.lock().insert(ns.to_string(), partitions);
        Ok(())
    }

    /// Makes `ns`'s journal topic again with `partitions` partitions, if
    /// nothing of its `journaled`-partition one is pending (released, and
    /// the marks on disk). Each partition the two share goes on above its
    /// released mark (`Log::rebase_empty`), so the marks stand for the new
    /// topic as they did for the old one, and nothing released is taken
    /// for new entries, nor new ones for released.
    async fn remake_topic(&self, ns: &str, journaled: u32, partitions: u32) -> Result<(), JournalError> {
        let _one = self.persisting.lock().await;
        let changed = || JournalError::PartitionsChanged { ns: ns.to_string(), partitions, journaled };
        let now = self.topics.lock().get(ns).copied();
        match now {
            Some(now) if now == partitions => return Ok(()),
            Some(now) if now == journaled => {}
            _ => return Err(changed()),
        }
        let pending = (0..journaled).any(|p| self.holds_pending(ns, p)) || self.unpersisted.lock().keys().any(|(n, _)| n == ns);
        if pending {
            return Err(changed());
        }
        for p in 0..journaled {
            let end = self.log.end_offset(&tp(ns, p)).await?;
            let released = self.released.lock().get(&released_key(ns, p)).copied().unwrap_or(0);
            if released < end {
                return Err(changed());
            }
        }
        self.log.delete_topic(ns).await?;
        self.log.create_topic(ns, partitions).await?;
        for p in 0..partitions.min(journaled) {
            let released = self.released.lock().get(&released_key(ns, p)).copied().unwrap_or(0);
            self.log.rebase_empty(&tp(ns, p), released).await?;
        }
        self.topics.lock().insert(ns.to_string(), partitions);
        tracing::info!(ns, journaled, partitions, "the journal's topic of a namespace made again with another partition count was made again");
        Ok(())
    }

    pub async fn close(&self) {
        let persisted = self.persist_released().await;
        if let Err(e) = &persisted {
            tracing::warn!(error = %e, "the journal's released marks were not written; a restart replays those entries (applied once)");
        }
        self.close_unpersisted().await;
        // A journal that drained leaves no segment behind: it holds nothing
        // then, even to a start that lost its metadata (docs/damage.md).
        if persisted.is_ok() && self.backlog().entries == 0 {
            if let Err(e) = self.log.drop_segments_if_all_released() {
                tracing::warn!(error = %e, "the drained journal's segments were not removed; the next start reads them");
            }
        }
    }

    /// Closes without writing the marks released since the last
    /// `persist_released`: what a node killed in between leaves.
    pub(crate) async fn close_unpersisted(&self) {
        if let Some(opener) = self.objects.as_ref().and_then(|slot| slot.opener.lock().take()) {
            opener.abort();
        }
        self.log.close().await;
    }
}

/// The local journal's entries not yet released, in journal order per
/// partition (bounded by the journal's own bounds): what its objects must
/// hold, put again when they are opened; and per lane where they start
/// (everything below is released): what the lease keeps
/// (`objects::Lease::released`).
async fn unreleased_entries(
    log: &EmbeddedLog,
    topics: &HashMap<String, u32>,
    released: &HashMap<String, u64>,
) -> Result<(Vec<objects::Entry>, Vec<objects::LaneMark>), JournalError> {
    let mut entries = Vec::new();
    let mut marks = Vec::new();
    // In namespace order: the first object after an open holds the same bytes whatever the map's order.
    let mut topics: Vec<(&String, &u32)> = topics.iter().collect();
    topics.sort();
    for (ns, &partitions) in topics {
        for partition in 0..partitions {
            let start = released.get(&released_key(ns, partition)).copied().unwrap_or(0).max(log.start_offset(&tp(ns, partition)).await?);
            if start > 0 {
                marks.push(objects::LaneMark { ns: ns.clone(), partition, below: start });
            }
            let end = log.end_offset(&tp(ns, partition)).await?;
            if start >= end {
                continue;
            }
            let mut reader = log.reader(&tp(ns, partition), start).await?;
            let mut next = start;
            while next < end {
                let batch = reader.next_batch(1024, std::time::Duration::ZERO).await?;
                if batch.is_empty() {
                    break;
                }
                for record in batch {
                    next = record.offset + 1;
                    entries.push(objects::Entry { ns: ns.clone(), partitions, partition, offset: record.offset, payload: record.payload });
                }
            }
        }
    }
    marks.sort_by(|a, b| (&a.ns, a.partition).cmp(&(&b.ns, b.partition)));
    Ok((entries, marks))
}

/// The local journal as its uploader reads it: entries an append did not
/// hand over in order, and what is released.
pub(super) struct LocalReader {
    log: EmbeddedLog,
    released: Arc<Mutex<HashMap<String, u64>>>,
}

impl objects::LocalEntries for LocalReader {
    fn released_below(&self, ns: &str, partition: u32) -> u64 {
        self.released.lock().get(&released_key(ns, partition)).copied().unwrap_or(0)
    }

    fn released_marks(&self) -> Vec<objects::LaneMark> {
        let released = self.released.lock();
        let lane = |key: &str| key.rsplit_once(':').and_then(|(ns, partition)| Some((ns.to_string(), partition.parse().ok()?)));
        released.iter().filter_map(|(key, below)| lane(key).map(|(ns, partition)| objects::LaneMark { ns, partition, below: *below })).collect()
    }

    fn read(
        &self,
        ns: &str,
        partitions: u32,
        partition: u32,
        from: u64,
        count_max: usize,
    ) -> futures::future::BoxFuture<'_, Result<Vec<objects::Entry>, String>> {
        let (ns, tp) = (ns.to_string(), tp(ns, partition));
        Box::pin(async move {
            let mut reader = self.log.reader(&tp, from).await.map_err(|e| e.to_string())?;
            let records = reader.next_batch(count_max, std::time::Duration::ZERO).await.map_err(|e| e.to_string())?;
            let entries = records.into_iter().take(count_max);
            Ok(entries
                .map(|record| objects::Entry { ns: ns.clone(), partitions, partition, offset: record.offset, payload: record.payload })
                .collect())
        })
    }
}

/// Opens the journal's objects now, or starts a task that keeps trying.
pub(super) async fn open_objects(
    id: String,
    dir: std::path::PathBuf,
    config: ObjectsConfig,
    unreleased: Vec<objects::Entry>,
    released: Vec<objects::LaneMark>,
    local: Arc<LocalReader>,
) -> Arc<ObjectsSlot> {
    let slot = Arc::new(ObjectsSlot {
        id,
        dir,
        local,
        journal: std::sync::OnceLock::new(),
        last_error: Mutex::new(String::new()),
        opener: Mutex::new(None),
    });
    if slot.try_open(&config, &unreleased, &released).await {
        return slot;
    }
    tracing::warn!(error = %slot.last_error.lock(), "the journal's object storage does not answer; journaled writes are refused until it does");
    let weak = Arc::downgrade(&slot);
    let opener = tokio::spawn(async move {
        let mut wait = std::time::Duration::from_secs(1);
        loop {
            tokio::time::sleep(wait).await;
            let Some(slot) = weak.upgrade() else { return };
            if slot.try_open(&config, &unreleased, &released).await {
                tracing::info!("the journal's object storage answers; journaled writes are taken again");
                return;
            }
            wait = (wait * 2).min(OBJECTS_OPEN_RETRY_MAX);
        }
    });
    *slot.opener.lock() = Some(opener);
    slot
}

pub(super) fn tp(ns: &str, partition: u32) -> TopicPartition {
    TopicPartition { topic: ns.into(), partition }
}

pub(super) fn released_key(ns: &str, partition: u32) -> String {
    format!("{ns}:{partition}")
}

#[cfg(test)]
mod pending_ids_tests {
    use super::*;

    /// Review F12: an entry noted after its release, or noted out of
    /// offset order, never stays pending.
    #[test]
    fn an_entry_noted_late_or_out_of_order_is_released() {
        let mut ids = PendingIds::default();
        let key = released_key("ns", 0);
        ids.add("ns", 0, 6, Bytes::from_static(b"b"));
        ids.add("ns", 0, 5, Bytes::from_static(b"a"));
        ids.release_below("ns", 0, 7);
        assert!(!ids.holds(&key), "both released whatever order they were noted in");
        assert!(ids.by_id.is_empty());
        // Released before its append noted it: the late note is a no-op.
        ids.add("ns", 0, 6, Bytes::from_static(b"late"));
        assert!(!ids.holds(&key));
        assert!(ids.by_id.is_empty());
        ids.add("ns", 0, 7, Bytes::from_static(b"c"));
        assert!(ids.holds(&key));
        assert_eq!(ids.len(), 1);
        assert!(ids.oldest_age().is_some());
    }
}
