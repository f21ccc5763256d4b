//! `EmbeddedLog`: the log on one machine — open (recovering a torn tail),
//! topics and their metadata, append through the group-commit writer,
//! readers, retention.

use super::super::{CreateOutcome, Log, LogError, LogReader, TopicInfo, TopicPartition};
use super::index::{Lost, PartitionState, TailDoubt};
use super::meta::{random_id, read_meta, write_meta, LogMeta, MetaRead, SettledMark, TopicMeta};
use super::segments::Segments;
use super::writer::{AppendRequest, Writer};
use super::{frame, reader};
use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Longest an append waits for the writer to make its entry durable.
pub(super) const APPEND_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct EmbeddedLogConfig {
    pub dir: PathBuf,
    /// A segment is closed and a new one started past this size.
    pub segment_bytes_max: u64,
    /// Delete the oldest segments while the log is larger than this.
    pub retention_bytes: Option<u64>,
    /// Delete segments whose newest write is older than this.
    pub retention_ms: Option<u64>,
    /// Per partition: bytes of newest entries kept in memory for tail readers.
    pub tail_cache_bytes: usize,
    /// Appends waiting for the writer; senders wait when it is full.
    pub queue_capacity: usize,
    /// Both copies of the metadata damaged (`meta.rs`) while no segment
    /// holds a byte: start again as a new log (true: the journal, whose
    /// opener then starts its lanes again too) or refuse (false: a log
    /// whose id names its snapshots).
    pub start_again_if_meta_lost_and_empty: bool,
    /// Lost ranges the operator accepted (`--accept-loss`): readers go on
    /// past exactly these. One that matches no lost range is ignored, with
    /// a warning.
    pub accept_lost: Vec<AcceptLost>,
}

/// One lost range an operator accepts: `<topic>/<partition>@<from>..<to>`,
/// exactly as the refusal named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptLost {
    pub topic: String,
    pub partition: u32,
    pub from: u64,
    pub to: u64,
}

impl AcceptLost {
    /// Parses `<namespace>/<partition>@<from>..<to>`, given to `--accept-loss`.
    pub fn parse(text: &str) -> Result<AcceptLost, String> {
        AcceptLost::parse_flag("--accept-loss", text)
    }

    /// Parses `<namespace>/<partition>@<from>..<to>`, given to `flag`.
    pub fn parse_flag(flag: &str, text: &str) -> Result<AcceptLost, String> {
        let bad = || format!("{flag} {text:?}: expected <namespace>/<partition>@<from>..<to>, as a refusal names it");
        let (tp, range) = text.rsplit_once('@').ok_or_else(bad)?;
        let (topic, partition) = tp.rsplit_once('/').ok_or_else(bad)?;
        let (from, to) = range.split_once("..").ok_or_else(bad)?;
        let accept = AcceptLost {
            topic: topic.to_string(),
            partition: partition.parse().map_err(|_| bad())?,
            from: from.parse().map_err(|_| bad())?,
            to: to.parse().map_err(|_| bad())?,
        };
        if accept.topic.is_empty() || accept.from >= accept.to {
            return Err(bad());
        }
        Ok(accept)
    }
}

impl AcceptLost {
    /// Whether this flag names offsets of `tp`.
    pub fn names(&self, tp: &crate::log::TopicPartition) -> bool {
        *self.topic == *tp.topic && self.partition == tp.partition
    }
}

impl std::fmt::Display for AcceptLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}@{}..{}", self.topic, self.partition, self.from, self.to)
    }
}

impl EmbeddedLogConfig {
    pub fn new(dir: impl Into<PathBuf>) -> EmbeddedLogConfig {
        EmbeddedLogConfig {
            dir: dir.into(),
            segment_bytes_max: 64 * 1024 * 1024,
            retention_bytes: None,
            retention_ms: None,
            tail_cache_bytes: 1024 * 1024,
            queue_capacity: 16 * 1024,
            start_again_if_meta_lost_and_empty: false,
            accept_lost: Vec::new(),
        }
    }
}

pub(super) struct Topic {
    pub(super) partitions: Vec<Arc<PartitionState>>,
}

/// What a log's metadata is, before the log opens (`EmbeddedLog::inspect_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaState {
    /// At least one copy verifies.
    Present,
    /// Neither copy exists.
    Missing,
    /// A copy exists and none verifies.
    Lost,
}

pub(crate) struct Inner {
    pub(super) config: EmbeddedLogConfig,
    pub(super) meta: Mutex<LogMeta>,
    pub(super) topics: RwLock<HashMap<Arc<str>, Arc<Topic>>>,
    /// The partitions of deleted topics whose frames segments still hold
    /// (`LogMeta::deleted`): served to no one, never holding retention
    /// back, but their start offsets are recorded as retention deletes
    /// their segments, so a reopen indexes what is left of them.
    pub(super) graves: RwLock<Vec<Arc<PartitionState>>>,
    pub(super) segments: Arc<Segments>,
    pub(super) queue: RwLock<Option<mpsc::Sender<AppendRequest>>>,
    pub(super) writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The damaged ranges (segment, from byte, to byte) this open found, at
    /// most `SETTLED_DAMAGE_MAX`: what a settled end records as known.
    pub(super) damage_at_open: Vec<(u64, u64, u64)>,
}

/// The embedded log. Cheap to clone.
#[derive(Clone)]
pub struct EmbeddedLog {
    pub(super) inner: Arc<Inner>,
}

impl EmbeddedLog {
    /// Opens (recovering) or creates the log in `config.dir`.
    pub fn open(config: EmbeddedLogConfig) -> Result<EmbeddedLog, LogError> {
        std::fs::create_dir_all(&config.dir)?;
        let (segments, ids) = Segments::open(&config.dir.join("wal"))?;
        let held_bytes: u64 = ids.iter().map(|id| segments.size_bytes(*id)).sum();
        let read = match read_meta(&config.dir)? {
            // Both copies gone while segments hold entries: lost, not new.
            MetaRead::New if held_bytes > 0 => MetaRead::Lost("both copies are missing".to_string()),
            read => read,
        };
        let (mut meta, mut rewrite) = match read {
            MetaRead::New => (LogMeta::default(), true),
            MetaRead::Found { meta, damaged: None } => (meta, false),
            MetaRead::Found { meta, damaged: Some(why) } => {
                tracing::warn!(dir = %config.dir.display(), %why, "one copy of the embedded log's metadata is damaged or missing; written again from the other");
                (meta, true)
            }
            MetaRead::Lost(why) => {
                if !(config.start_again_if_meta_lost_and_empty && held_bytes == 0) {
                    return Err(LogError::Corrupt(meta_lost_reason(&config.dir, &why, ids.len(), held_bytes)));
                }
                tracing::warn!(dir = %config.dir.display(), %why, "the embedded log's metadata is lost and its segments hold nothing: it starts again as a new log");
                (LogMeta::default(), true)
            }
        };
        if meta.log_id.is_empty() || meta.topics.iter().any(|t| t.uid.is_empty()) {
            meta.log_id = if meta.log_id.is_empty() { random_id() } else { meta.log_id };
            for topic in meta.topics.iter_mut().filter(|t| t.uid.is_empty()) {
                topic.uid = random_id();
            }
            rewrite = true;
        }
        if rewrite {
            write_meta(&config.dir, &mut meta)?;
        }
        let segments = Arc::new(segments);
        let mut by_id: HashMap<u32, (Arc<str>, Vec<Arc<PartitionState>>)> = HashMap::new();
        // Deleted topics' frames are indexed like any other (never taken for
        // damage), under ids no live topic has, and served to no one.
        for topic in meta.topics.iter().chain(&meta.deleted) {
            let partitions = (0..topic.partitions)
                .map(|p| {
                    let start = meta.start_offsets.get(&format!("{}:{p}", topic.id)).copied().unwrap_or(0);
                    Arc::new(PartitionState::new(topic.id, p, start, config.tail_cache_bytes))
                })
                .collect();
            by_id.insert(topic.id, (Arc::from(topic.name.as_str()), partitions));
        }
        let tail_cut = match ids.last() {
            Some(newest) => cut_torn_tail(&segments, *newest, &by_id)?,
            None => None,
        };
        let mut recovery = Recovery { settled: meta.settled.clone(), ..Recovery::default() };
        let mut active_bytes = 0;
        for id in &ids {
            active_bytes = recover_segment(&segments, *id, &by_id, &mut recovery)?;
        }
        recovery.mark_tails_in_doubt(&by_id, tail_cut);
        let damage_at_open: Vec<(u64, u64, u64)> =
            recovery.ranges.iter().take(super::meta::SETTLED_DAMAGE_MAX).map(|(segment, range, _)| (*segment, range.from, range.to)).collect();
        let deleted_ids: std::collections::HashSet<u32> = meta.deleted.iter().map(|t| t.id).collect();
        let live: TopicsById = by_id.iter().filter(|(id, _)| !deleted_ids.contains(id)).map(|(id, topic)| (*id, topic.clone())).collect();
        let accepted = accept_lost(&config.accept_lost, &meta.accepted, &live);
        let held_by_deleted = |id: u32| by_id.get(&id).is_some_and(|(_, partitions)| partitions.iter().any(|p| !p.index.lock().runs.is_empty()));
        let deleted_left: Vec<TopicMeta> = meta.deleted.iter().filter(|t| held_by_deleted(t.id)).cloned().collect();
        if accepted != meta.accepted || deleted_left != meta.deleted {
            let forgotten: Vec<String> = meta.deleted.iter().filter(|t| !deleted_left.contains(t)).map(|t| format!("{}:", t.id)).collect();
            let of_forgotten = |key: &String| forgotten.iter().any(|prefix| key.starts_with(prefix.as_str()));
            meta.start_offsets.retain(|key, _| !of_forgotten(key));
            meta.settled.retain(|key, _| !of_forgotten(key));
            meta.accepted = accepted;
            meta.accepted.retain(|key, _| !of_forgotten(key));
            meta.deleted = deleted_left;
            write_meta(&config.dir, &mut meta)?;
        }
        for (_, partitions) in by_id.values() {
            for p in partitions {
                let next = p.index.lock().next_offset;
                p.durable_end.send_replace(next);
            }
        }
        let active_id = ids.last().copied().unwrap_or(0);
        let active = segments.open_for_append(active_id)?;
        let (queue_tx, queue_rx) = mpsc::channel(config.queue_capacity);
        let writer =
            Writer { segments: segments.clone(), active, active_id, active_bytes, segment_bytes_max: config.segment_bytes_max, failed: None };
        let writer_thread = std::thread::Builder::new().name("tern-log-writer".into()).spawn(move || writer.run(queue_rx))?;
        let graves: Vec<Arc<PartitionState>> =
            meta.deleted.iter().filter_map(|t| by_id.get(&t.id)).flat_map(|(_, partitions)| partitions.iter().cloned()).collect();
        let topics = live.into_values().map(|(name, partitions)| (name, Arc::new(Topic { partitions }))).collect();
        tracing::info!(dir = %config.dir.display(), segments = ids.len(), "embedded log open");
        Ok(EmbeddedLog {
            inner: Arc::new(Inner {
                config,
                meta: Mutex::new(meta),
                topics: RwLock::new(topics),
                graves: RwLock::new(graves),
                segments,
                queue: RwLock::new(Some(queue_tx)),
                writer_thread: Mutex::new(Some(writer_thread)),
                damage_at_open,
            }),
        })
    }

    /// What opening the log in `dir` would find of its metadata, without
    /// opening it: whether it is lost (both copies damaged, or missing while
    /// segments hold bytes) or missing, and how many bytes its segments
    /// hold. The journal starts its lanes again before the log writes new
    /// metadata (a crash in between then starts them again, never not).
    pub fn inspect_meta(dir: &Path) -> Result<(MetaState, u64), LogError> {
        let held_bytes = super::segments::wal_bytes(&dir.join("wal"));
        let state = match read_meta(dir)? {
            MetaRead::New => MetaState::Missing,
            MetaRead::Found { .. } => MetaState::Present,
            MetaRead::Lost(_) => MetaState::Lost,
        };
        Ok((state, held_bytes))
    }

    pub(super) fn partition(&self, tp: &TopicPartition) -> Result<Arc<PartitionState>, LogError> {
        self.inner
            .topics
            .read()
            .get(&tp.topic)
            .and_then(|t| t.partitions.get(tp.partition as usize).cloned())
            .ok_or_else(|| LogError::UnknownPartition(tp.to_string()))
    }

    /// Deletes the oldest closed segments that retention allows and no local
    /// consumer still needs. Returns how many were deleted.
    pub fn enforce_retention(&self) -> Result<usize, LogError> {
        let config = &self.inner.config;
        let partitions = self.all_partitions();
        // With snapshots, a segment every partition's oldest retained snapshot
        // covers is deleted whatever the size and age limits say.
        let snapshots_in_use = partitions.iter().any(|p| p.index.lock().snapshot_floor.is_some());
        if config.retention_bytes.is_none() && config.retention_ms.is_none() && !snapshots_in_use {
            return Ok(0);
        }
        let ids = self.inner.segments.ids();
        let Some((_active, closed)) = ids.split_last() else { return Ok(0) };
        let mut total_bytes: u64 = ids.iter().map(|id| self.inner.segments.size_bytes(*id)).sum();
        let mut deleted = 0;
        for id in closed {
            let over_size = config.retention_bytes.is_some_and(|max| total_bytes > max);
            let too_old = config.retention_ms.is_some_and(|max| self.inner.segments.age_ms(*id) > max);
            // Never above what a local store still needs, nor above the oldest
            // retained snapshot (a replica restoring it must find the rest here).
            let unneeded = partitions.iter().all(|p| {
                let index = p.index.lock();
                let floor = index.snapshot_floor.map_or(index.release_below, |f| f.min(index.release_below));
                index.end_below_segment(id + 1) <= floor
            });
            // Every partition with entries in it has a snapshot (an empty one needs none).
            let covered_by_snapshots = snapshots_in_use
                && partitions.iter().all(|p| {
                    let index = p.index.lock();
                    index.snapshot_floor.is_some() || index.end_below_segment(id + 1) <= index.start_offset
                });
            if !(over_size || too_old || covered_by_snapshots) || !unneeded {
                break;
            }
            let graves = self.inner.graves.read().clone();
            self.record_start_offsets(&[partitions.as_slice(), graves.as_slice()].concat(), id + 1)?;
            let size = self.inner.segments.size_bytes(*id);
            // The new start is told before the file goes: once it is gone,
            // no reader is told its entries are still there (a watch
            // resuming below it gets a reset, not entries from the tail
            // cache; CI of 35a35cd, `watches::history_gone_resets_...`).
            for p in partitions.iter().chain(&graves) {
                p.index.lock().forget_segments_below(id + 1);
            }
            // A deleted topic none of whose frames is left is forgotten (its
            // metadata at the next open).
            self.inner.graves.write().retain(|p| !p.index.lock().runs.is_empty());
            self.inner.segments.delete(*id)?;
            total_bytes -= size;
            deleted += 1;
            tracing::info!(segment = id, size_bytes = size, "retention deleted a log segment");
        }
        Ok(deleted)
    }

    /// After `close`: when every entry of every partition is released (and
    /// no snapshot floor holds one), every segment goes, the newest too,
    /// each partition's start recorded first (offsets never start over).
    /// A log that held only released entries then holds nothing, which a
    /// journal whose metadata is lost can tell (`inspect_meta`). Returns
    /// whether they went.
    pub fn drop_segments_if_all_released(&self) -> Result<bool, LogError> {
        assert!(self.inner.queue.read().is_none(), "only a closed log drops its segments");
        let partitions = self.all_partitions();
        let all_released = partitions.iter().all(|p| {
            let index = p.index.lock();
            index.release_below >= index.next_offset && index.snapshot_floor.is_none_or(|floor| floor >= index.next_offset)
        });
        let ids = self.inner.segments.ids();
        let Some(&newest) = ids.last().filter(|_| all_released) else { return Ok(all_released) };
        self.record_start_offsets(&partitions, newest + 1)?;
        for id in ids {
            self.inner.segments.delete(id)?;
        }
        Ok(true)
    }

    /// Lets appends to every partition go on after an open that found
    /// its end in doubt: for a log no store reads (the journal, which
    /// checks its lost entries itself at open).
    pub fn settle_all_tails(&self) {
        for p in self.all_partitions() {
            p.index.lock().tail_in_doubt = None;
        }
    }

    /// Writes where `partition`'s end was settled: the log's end now, and
    /// the offset it goes on at (`SettledMark`).
    fn record_settled(&self, meta: &mut LogMeta, partition: &PartitionState, next_offset: u64) -> Result<(), LogError> {
        let segment_id = self.inner.segments.ids().last().copied().unwrap_or(0);
        let byte = self.inner.segments.size_bytes(segment_id);
        let damage = Some(self.inner.damage_at_open.clone());
        meta.settled.insert(format!("{}:{}", partition.topic_id, partition.partition), SettledMark { segment_id, byte, next_offset, damage });
        write_meta(&self.inner.config.dir, meta)
    }

    /// Why the newest entries of `tp` may be gone, found at open, until
    /// settled.
    pub fn tail_in_doubt(&self, tp: &TopicPartition) -> Option<TailDoubt> {
        self.partition(tp).ok().and_then(|p| p.index.lock().tail_in_doubt.clone())
    }

    /// The lost ranges of `tp` the operator accepted, exactly as named (by
    /// a flag at this open or an earlier one): not those taken as accepted
    /// for lying before an end settled earlier.
    pub fn accepted_exactly(&self, tp: &TopicPartition) -> Vec<(u64, u64)> {
        let Ok(partition) = self.partition(tp) else { return Vec::new() };
        self.inner.meta.lock().accepted.get(&format!("{}:{}", partition.topic_id, partition.partition)).cloned().unwrap_or_default()
    }

    /// The offsets of `tp` lost to damaged bytes, found at open.
    pub fn lost_ranges(&self, tp: &TopicPartition) -> Vec<super::index::Lost> {
        self.partition(tp).map(|p| p.index.lock().lost.clone()).unwrap_or_default()
    }

    /// Bytes of all segments on disk.
    pub fn bytes(&self) -> u64 {
        self.inner.segments.ids().iter().map(|id| self.inner.segments.size_bytes(*id)).sum()
    }

    /// Tells retention where the oldest retained snapshot of `tp` starts
    /// (its `applied_next`): entries below it may go once local stores are
    /// durable past them too; entries at or above it stay.
    pub fn set_snapshot_floor(&self, tp: &TopicPartition, offset: u64) {
        if let Ok(partition) = self.partition(tp) {
            partition.index.lock().snapshot_floor = Some(offset);
        }
    }

    pub(super) fn all_partitions(&self) -> Vec<Arc<PartitionState>> {
        self.inner.topics.read().values().flat_map(|t| t.partitions.iter().cloned()).collect()
    }

    /// Persists where each partition will start once segments `< segment_id_min` are gone.
    pub(super) fn record_start_offsets(&self, partitions: &[Arc<PartitionState>], segment_id_min: u64) -> Result<(), LogError> {
        let mut meta = self.inner.meta.lock();
        for p in partitions {
            let index = p.index.lock();
            // The end of what is indexed below the cut, never `next_offset`:
            // an append in flight has taken its offset but is not indexed yet.
            let start = index.end_below_segment(segment_id_min);
            meta.start_offsets.insert(format!("{}:{}", p.topic_id, p.partition), start);
        }
        write_meta(&self.inner.config.dir, &mut meta)
    }
}

/// Why a log whose metadata is lost is refused: what is lost, and the way
/// out that accepts exactly that loss.
fn meta_lost_reason(dir: &Path, why: &str, segments: usize, held_bytes: u64) -> String {
    format!(
        "the embedded log's metadata is lost: both copies fail their checks ({why}). It names the topics of the \
         {held_bytes} bytes in {segments} segments of {}/wal, which cannot be read without it. To recover, start the \
         node with --restore: the log is moved aside (to damaged/log.<ms>), each partition continues from what its \
         store applied (a partition without a store, from its newest snapshot), and the writes acknowledged after \
         that are lost (docs/damage.md)",
        dir.display()
    )
}

/// Most bytes one group commit of the writer spans: a crash during its
/// write and fsync can leave any of them unwritten, in any order.
const TORN_BATCH_BYTES_MAX: u64 =
    (super::writer::BATCH_BYTES_MAX + frame::PAYLOAD_BYTES_MAX + super::writer::BATCH_REQUESTS_MAX * frame::HEADER_BYTES) as u64;

type TopicsById = HashMap<u32, (Arc<str>, Vec<Arc<PartitionState>>)>;

fn partition_of<'a>(topics: &'a TopicsById, header: &frame::FrameHeader) -> Option<&'a Arc<PartitionState>> {
    topics.get(&header.topic_id).and_then(|(_, ps)| ps.get(header.partition as usize))
}

/// Cuts off the torn remains of the last group commit, which was never
/// acknowledged (its fsync did not return): damage that runs to the end of
/// the newest segment and looks torn (`looks_torn`), or damage with a
/// sector of zeros (pages a crash left unwritten) inside the last commit's
/// reach of the end, with everything after it. Damage anywhere else is not
/// a torn write, and is left for `recover_segment` to name.
/// Returns what was cut, if anything.
fn cut_torn_tail(segments: &Segments, id: u64, topics: &TopicsById) -> Result<Option<String>, LogError> {
    let path = segments.path(id);
    let scanned = frame::scan(&path, |header| partition_of(topics, header).is_some(), |_, _, _| Ok(()))?;
    let Some(cut_at) = torn_tail_start(&path, &scanned)? else { return Ok(None) };
    tracing::warn!(segment = %path.display(), at_byte = cut_at, file_bytes = scanned.file_bytes,
        "truncating the torn tail of the embedded log (an append whose fsync never returned, so never acknowledged)");
    let file = std::fs::OpenOptions::new().write(true).open(&path)?;
    file.set_len(cut_at)?;
    file.sync_all()?;
    Ok(Some(format!("log segment {id} was cut at byte {cut_at} of {} (a torn tail, or the segment damaged or cut short)", scanned.file_bytes)))
}

/// Where the torn tail of the newest segment starts, if it has one.
pub(super) fn torn_tail_start(path: &Path, scanned: &frame::Scanned) -> Result<Option<u64>, LogError> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    if let Some(tail) = scanned.damaged_tail() {
        if looks_torn(&file, tail)? {
            return Ok(Some(tail.from));
        }
    }
    let reach_start = scanned.file_bytes.saturating_sub(TORN_BATCH_BYTES_MAX);
    for range in scanned.damaged.iter().filter(|range| range.from >= reach_start) {
        // Bounded by TORN_BATCH_BYTES_MAX: the range lies within the last commit's reach.
        let mut bytes = vec![0u8; (range.to - range.from) as usize];
        file.read_exact_at(&mut bytes, range.from)?;
        if frame::has_zero_sector(&bytes, range.from) {
            return Ok(Some(range.from));
        }
    }
    Ok(None)
}

/// Whether damage that runs to the end of the newest segment looks like a
/// write a crash cut short: its first frame is one the file ends inside
/// of, or its bytes end in zeros from a sector boundary on, or hold a zero
/// sector (pages left unwritten read as zeros). Whole frames that fail
/// their checksum without them are damage to acknowledged entries (bits
/// flipped after their fsync), named like damage anywhere else, never cut
/// without a word (review of issue 37: a journal's last entry flipped was
/// dropped as torn, an acknowledged write lost).
fn looks_torn(file: &std::fs::File, tail: &frame::DamagedRange) -> Result<bool, LogError> {
    use std::os::unix::fs::FileExt;
    const SECTOR_BYTES: u64 = 512;
    let range_bytes = tail.to - tail.from;
    if range_bytes < frame::HEADER_BYTES as u64 {
        return Ok(true);
    }
    // Bounded by the segment's size (read once, at open).
    let mut bytes = vec![0u8; range_bytes as usize];
    file.read_exact_at(&mut bytes, tail.from)?;
    let header: &[u8; frame::HEADER_BYTES] = bytes[..frame::HEADER_BYTES].try_into().expect("checked above");
    if frame::decode_header(header).is_some_and(|h| frame::HEADER_BYTES as u64 + u64::from(h.payload_len) > range_bytes) {
        return Ok(true);
    }
    let last_sector = ((tail.to - 1) / SECTOR_BYTES * SECTOR_BYTES).max(tail.from);
    let zeros_to_the_end = bytes[(last_sector - tail.from) as usize..].iter().all(|b| *b == 0);
    Ok(zeros_to_the_end || frame::has_zero_sector(&bytes, tail.from))
}

/// A damaged range found at open: its segment, its bytes, and the
/// partition and offset its own header names when it is one frame.
type FoundRange = (u64, frame::DamagedRange, Option<((u32, u32), u64)>);

/// What recovery learned across segments.
#[derive(Default)]
struct Recovery {
    /// Every damaged range found so far, in log order, with the partition
    /// and offset its own header names when it is one frame (`take_range`).
    ranges: Vec<FoundRange>,
    /// Per (topic id, partition): how many ranges were found before its
    /// last frame. Fewer than `ranges.len()`: damage lies after it.
    damage_seen: HashMap<(u32, u32), usize>,
    /// Where partitions' ends were settled at earlier opens (`LogMeta::settled`).
    settled: BTreeMap<String, SettledMark>,
}

impl Recovery {
    /// Takes a damaged range found in segment `id`. Exactly one frame whose
    /// header names a known partition at the offset that partition expects
    /// next: that offset is lost, named at once (undone in `recover_segment`
    /// if a verified frame of that partition at that offset follows: the
    /// header was damaged too). Every other partition may have lost
    /// entries in it all the same (`mark_tails_in_doubt`).
    fn take_range(&mut self, id: u64, range: &frame::DamagedRange, topics: &TopicsById) {
        tracing::error!(
            segment = id,
            from_byte = range.from,
            to_byte = range.to,
            problem = range.problem,
            "damaged bytes in the embedded log: the frames they held are lost"
        );
        let mut named = None;
        if let Some(header) = &range.frame {
            if let Some(partition) = partition_of(topics, header) {
                let mut index = partition.index.lock();
                if header.offset == index.next_offset && index.lost.len() < super::index::LOST_RANGES_MAX {
                    index.record_lost(header.offset + 1, id, damage_cause(id, range), true);
                    named = Some(((header.topic_id, header.partition), header.offset));
                }
            }
        }
        self.ranges.push((id, range.clone(), named));
    }

    /// Marks every partition whose newest entries may have been lost: each
    /// one with damaged bytes after its last frame (but a frame whose own
    /// header names another partition, unless this one expects that very
    /// offset next: a flip in the partition field keeps the offset; and
    /// bytes before the point its end was settled at an earlier open), else all of them when a tail was cut
    /// (its frames named no partition that could be trusted). A partition
    /// settled past its frames goes on at the settled offset.
    fn mark_tails_in_doubt(&self, topics: &TopicsById, tail_cut: Option<String>) {
        for (_, partitions) in topics.values() {
            for p in partitions {
                let key = (p.topic_id, p.partition);
                let mark = self.settled.get(&format!("{}:{}", p.topic_id, p.partition));
                let seen = self.damage_seen.get(&key).copied().unwrap_or(0);
                let next_offset = p.index.lock().next_offset;
                let after: Vec<&FoundRange> = self.ranges[seen.min(self.ranges.len())..]
                    .iter()
                    .filter(|(_, _, named)| named.is_none_or(|(named, offset)| named != key && offset == next_offset))
                    .filter(|(segment, range, _)| mark.is_none_or(|m| !m.knew(*segment, range.from, range.to)))
                    .collect();
                let mut index = p.index.lock();
                index.tail_in_doubt = match after.first() {
                    Some((segment, range, _)) => Some(TailDoubt::Damaged {
                        why: format!(
                            "damaged bytes after its last entry, in log segment {segment} (bytes {}..{}: {})",
                            range.from, range.to, range.problem
                        ),
                        offsets_max: after.iter().map(|(_, r, _)| (r.to - r.from).div_ceil(frame::HEADER_BYTES as u64)).sum(),
                        segment_id: after.iter().map(|(segment, _, _)| *segment).max().expect("not empty"),
                    }),
                    None => tail_cut.clone().map(TailDoubt::Cut),
                };
                if let Some(mark) = mark.filter(|m| m.next_offset > index.next_offset && index.tail_in_doubt.is_none()) {
                    // Settled (accepted) past offsets no frame shows: on at it again.
                    let cause = "accepted at an earlier start (--accept-loss)".to_string();
                    let from = index.next_offset;
                    index.lost.push(Lost { from, to: mark.next_offset, cause, segment_id: mark.segment_id, named_by_header: false, accepted: true });
                    index.next_offset = mark.next_offset;
                }
            }
        }
    }
}

fn damage_cause(segment: u64, range: &frame::DamagedRange) -> String {
    format!("their frames were in damaged bytes of log segment {segment} (bytes {}..{}: {})", range.from, range.to, range.problem)
}

/// Scans one segment, indexing every valid frame, and records the offsets
/// of each partition that damaged bytes held (`PartitionIndex::record_lost`).
/// Returns the segment's length.
fn recover_segment(segments: &Segments, id: u64, topics: &TopicsById, recovery: &mut Recovery) -> Result<u64, LogError> {
    let path = segments.path(id);
    // Resync only onto a known partition's frame that is not behind it.
    let plausible = |header: &frame::FrameHeader| partition_of(topics, header).is_some_and(|p| header.offset >= p.index.lock().next_offset);
    let mut ranges_taken = 0;
    let scanned = frame::scan(&path, plausible, |header, position, damaged_here| {
        for range in &damaged_here[ranges_taken..] {
            recovery.take_range(id, range, topics);
        }
        ranges_taken = damaged_here.len();
        let partition = partition_of(topics, header).ok_or_else(|| {
            LogError::Corrupt(format!(
                "{}: frame at byte {position} names unknown topic id {} partition {}",
                path.display(),
                header.topic_id,
                header.partition
            ))
        })?;
        let mut index = partition.index.lock();
        if header.offset < index.start_offset && index.runs.is_empty() {
            // Below the recorded start: retention wrote the new start and
            // crashed before deleting this segment. Deleted in effect; skipped.
            return Ok(());
        }
        let key = (header.topic_id, header.partition);
        let damage_now = recovery.ranges.len();
        let damage_between = recovery.damage_seen.get(&key).copied().unwrap_or(0) < damage_now;
        let guessed_wrong = index.lost.last().is_some_and(|lost| lost.named_by_header && lost.from == header.offset && lost.to == header.offset + 1);
        if guessed_wrong {
            // A damaged frame's header named this partition at this offset,
            // and here is its verified frame: the header was damaged too.
            let lost = index.lost.pop().expect("checked");
            index.next_offset = lost.from;
        }
        if header.offset > index.next_offset && damage_between && index.lost.len() < super::index::LOST_RANGES_MAX {
            // The offsets between were in the damaged bytes: the last ones
            // before this frame.
            let (segment, range, _) = recovery.ranges.last().expect("damage lies between");
            index.record_lost(header.offset, *segment, damage_cause(*segment, range), false);
            // Accepted at an earlier open (`settle_tail`): still accepted,
            // if every damaged range between was known then.
            let mark = recovery.settled.get(&format!("{}:{}", header.topic_id, header.partition));
            let between = &recovery.ranges[recovery.damage_seen.get(&key).copied().unwrap_or(0)..];
            if mark.is_some_and(|m| m.next_offset >= header.offset && between.iter().all(|(s, r, _)| m.knew(*s, r.from, r.to))) {
                index.lost.last_mut().expect("just recorded").accepted = true;
            }
        }
        if header.offset != index.next_offset {
            return Err(LogError::Corrupt(format!(
                "{}: frame at byte {position} has offset {} but partition {}:{} expects {}",
                path.display(),
                header.offset,
                header.topic_id,
                header.partition,
                index.next_offset
            )));
        }
        index.record_position(id, header.offset, position as u32);
        index.next_offset += 1;
        recovery.damage_seen.insert(key, damage_now);
        Ok(())
    })?;
    for range in &scanned.damaged[ranges_taken..] {
        recovery.take_range(id, range, topics);
    }
    Ok(scanned.file_bytes)
}

/// Marks the lost ranges the operator accepted, exactly as named (by a
/// flag now, or at an earlier open: `remembered`). Returns those ranges
/// still found, to remember (`LogMeta::accepted`): one whose damaged bytes
/// retention deleted is no longer found, so no longer kept. A range taken
/// as accepted for lying before a settled end (`Recovery::settled`) is not
/// among them: the journal accepts only what the operator named
/// (`accepted_exactly`; review of issue 37: new damage before a journal
/// lane's settled end was taken silently).
fn accept_lost(accepted: &[AcceptLost], remembered: &BTreeMap<String, Vec<(u64, u64)>>, topics: &TopicsById) -> BTreeMap<String, Vec<(u64, u64)>> {
    let mut named: std::collections::HashSet<(u32, u32, u64, u64)> = std::collections::HashSet::new();
    for accept in accepted {
        let partition = topics.values().find(|(name, _)| **name == *accept.topic).and_then(|(_, ps)| ps.get(accept.partition as usize));
        let mut index = match partition {
            Some(partition) => partition.index.lock(),
            None => {
                tracing::warn!(%accept, "an accepted loss names a partition this log does not have; ignored");
                continue;
            }
        };
        let next_offset = index.next_offset;
        let key = partition.map(|p| (p.topic_id, p.partition)).expect("found above");
        match index.lost.iter_mut().find(|lost| lost.from == accept.from && lost.to == accept.to) {
            Some(lost) => {
                lost.accepted = true;
                named.insert((key.0, key.1, lost.from, lost.to));
                tracing::warn!(%accept, "a lost range of the log is accepted: readers go on past it, and its writes are lost");
            }
            // From the end: a range `settle_tail` takes once the store is checked.
            None if accept.from == next_offset => {}
            None => tracing::warn!(%accept, found = ?index.lost.iter().map(|l| (l.from, l.to)).collect::<Vec<_>>(),
                "an accepted loss matches no lost range of this partition; ignored"),
        }
    }
    let mut still_found = BTreeMap::new();
    for (_, partitions) in topics.values() {
        for p in partitions {
            let key = format!("{}:{}", p.topic_id, p.partition);
            let mut index = p.index.lock();
            let earlier = remembered.get(&key).map(Vec::as_slice).unwrap_or_default();
            let mut ranges = Vec::new();
            for lost in index.lost.iter_mut() {
                if earlier.contains(&(lost.from, lost.to)) || named.contains(&(p.topic_id, p.partition, lost.from, lost.to)) {
                    lost.accepted = true;
                    ranges.push((lost.from, lost.to));
                }
            }
            assert!(ranges.len() <= super::index::LOST_RANGES_MAX, "lost ranges are bounded");
            if !ranges.is_empty() {
                still_found.insert(key, ranges);
            }
        }
    }
    still_found
}

#[async_trait]
impl Log for EmbeddedLog {
    fn entry_bytes_max(&self) -> usize {
        frame::PAYLOAD_BYTES_MAX
    }

    async fn create_topic(&self, name: &str, partitions: u32) -> Result<CreateOutcome, LogError> {
        let mut meta = self.inner.meta.lock();
        if let Some(existing) = meta.topics.iter().find(|t| t.name == name) {
            if existing.partitions != partitions {
                return Err(LogError::PartitionCountMismatch { topic: name.to_string(), existing: existing.partitions, requested: partitions });
            }
            return Ok(CreateOutcome::AlreadyExists);
        }
        // Never an id a deleted topic's frames still carry.
        let id = meta.topics.iter().chain(&meta.deleted).map(|t| t.id + 1).max().unwrap_or(0);
        let mut next = meta.clone();
        next.topics.push(TopicMeta { name: name.to_string(), id, partitions, uid: random_id() });
        write_meta(&self.inner.config.dir, &mut next)?;
        *meta = next;
        let states = (0..partitions).map(|p| Arc::new(PartitionState::new(id, p, 0, self.inner.config.tail_cache_bytes))).collect();
        self.inner.topics.write().insert(Arc::from(name), Arc::new(Topic { partitions: states }));
        Ok(CreateOutcome::Created)
    }

    /// Forgets the topic at once: its name is free, its partitions answer
    /// no one, and its frames stay in their segments until retention
    /// deletes them (the metadata keeps its id until then: `LogMeta::deleted`).
    async fn delete_topic(&self, name: &str) -> Result<bool, LogError> {
        let mut meta = self.inner.meta.lock();
        let Some(at) = meta.topics.iter().position(|t| t.name == name) else { return Ok(false) };
        let mut next = meta.clone();
        // Its marks keyed by id stay while its frames do: they index them.
        let gone = next.topics.remove(at);
        next.deleted.push(gone);
        write_meta(&self.inner.config.dir, &mut next)?;
        *meta = next;
        if let Some(topic) = self.inner.topics.write().remove(name) {
            self.inner.graves.write().extend(topic.partitions.iter().cloned());
        }
        Ok(true)
    }

    async fn list_topics(&self) -> Result<Vec<TopicInfo>, LogError> {
        let meta = self.inner.meta.lock();
        Ok(meta.topics.iter().map(|t| TopicInfo { name: t.name.clone(), partitions: t.partitions, source_topic: None }).collect())
    }

    async fn append(&self, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
        if payload.len() > frame::PAYLOAD_BYTES_MAX {
            return Err(LogError::EntryTooLarge { size_bytes: payload.len(), max_bytes: frame::PAYLOAD_BYTES_MAX });
        }
        let partition = self.partition(tp)?;
        if let Some(doubt) = &partition.index.lock().tail_in_doubt {
            // Until its store is checked against the end (`settle_tail`):
            // an offset taken now could be one a
            // store applied under another write.
            return Err(LogError::Unavailable(format!("{tp}: the log's end is checked against its store first ({doubt})")));
        }
        let queue = self.inner.queue.read().clone().ok_or(LogError::Closed)?;
        let (reply, answer) = oneshot::channel();
        let appended = async {
            queue.send(AppendRequest { partition, payload, reply }).await.map_err(|_| LogError::Closed)?;
            // The writer took the entry and dropped its answer: it may have
            // written it (only a send that failed is surely not in the log).
            answer.await.map_err(|_| LogError::Ambiguous("the log's writer stopped with the entry in hand".into()))?
        };
        // Bounded even if the disk hangs in fsync: the caller learns the outcome
        // is unknown (the entry may still become durable) instead of waiting forever.
        match tokio::time::timeout(APPEND_WAIT, appended).await {
            Ok(result) => result,
            Err(_) => Err(LogError::Ambiguous(format!(
                "{tp}: the entry was not made durable within {APPEND_WAIT:?} (the disk is stalled?); it may still be \
                 appended: its outcome is unknown"
            ))),
        }
    }

    async fn identity(&self, topic: &str) -> Result<String, LogError> {
        let meta = self.inner.meta.lock();
        let uid = meta.topics.iter().find(|t| t.name == topic).map(|t| t.uid.clone());
        let uid = uid.ok_or_else(|| LogError::UnknownPartition(topic.to_string()))?;
        Ok(format!("embedded:{}/{topic}#{uid}", meta.log_id))
    }

    async fn rebase_empty(&self, tp: &TopicPartition, offset: u64) -> Result<(), LogError> {
        let partition = self.partition(tp)?;
        let mut meta = self.inner.meta.lock();
        // Held throughout, so no append takes an offset meanwhile.
        let mut index = partition.index.lock();
        if index.start_offset != index.next_offset || partition.durable_end() != index.next_offset {
            return Err(LogError::Unavailable(format!(
                "{tp} holds entries {}..{}: only an empty partition is moved",
                index.start_offset, index.next_offset
            )));
        }
        if offset <= index.next_offset {
            return Ok(());
        }
        // Recorded first: after a crash the partition reopens at the new start.
        meta.start_offsets.insert(format!("{}:{}", partition.topic_id, partition.partition), offset);
        write_meta(&self.inner.config.dir, &mut meta)?;
        index.start_offset = offset;
        index.next_offset = offset;
        partition.durable_end.send_replace(offset);
        tracing::warn!(%tp, offset, "empty log partition moved to start at a restored snapshot's offset");
        Ok(())
    }

    async fn end_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        Ok(self.partition(tp)?.durable_end())
    }

    async fn settle_tail(&self, tp: &TopicPartition, applied_next: u64) -> Result<bool, LogError> {
        let partition = self.partition(tp)?;
        let mut meta = self.inner.meta.lock();
        // Held throughout, so no append takes an offset meanwhile (and
        // while the tail is in doubt, none is in flight: `append`).
        let mut index = partition.index.lock();
        let end = index.next_offset;
        if partition.durable_end() != end {
            return Ok(false);
        }
        let accepts = |from: u64, to: u64| {
            self.inner.config.accept_lost.iter().any(|a| *a.topic == *tp.topic && a.partition == tp.partition && a.from == from && a.to == to)
        };
        let doubt = index.tail_in_doubt.clone();
        if applied_next <= end {
            let Some(TailDoubt::Damaged { why, offsets_max, segment_id }) = doubt else {
                // Nothing in doubt, or a torn tail: never acknowledged, so
                // no store applied it.
                index.tail_in_doubt = None;
                return Ok(false);
            };
            let to = end + offsets_max.max(1);
            if !accepts(end, to) {
                return Err(LogError::Corrupt(format!(
                    "log entries of {tp} after offset {end} may be lost: {why}, and no frame after them shows whether \
                     they held this partition's entries (at most {}). To go on, restart with --accept-loss \
                     {tp}@{end}..{to}: the log continues at {to}, so no offset is used twice, and the writes those \
                     offsets held, if any, are lost (docs/damage.md)",
                    to - end
                )));
            }
            // Accepted: the reader goes on past them, and appends start
            // after; recorded first, so a later open goes on at `to` too,
            // and knows the operator named exactly this range.
            let accepted = meta.accepted.entry(format!("{}:{}", partition.topic_id, partition.partition)).or_default();
            if !accepted.contains(&(end, to)) && accepted.len() < super::index::LOST_RANGES_MAX {
                accepted.push((end, to));
            }
            self.record_settled(&mut meta, &partition, to)?;
            index.lost.push(Lost { from: end, to, cause: why, segment_id, named_by_header: false, accepted: true });
            index.next_offset = to;
            index.tail_in_doubt = None;
            partition.durable_end.send_replace(to);
            tracing::error!(%tp, from = end, to, "an accepted possible loss at the log's end: it continues past it");
            return Ok(true);
        }
        let why = match (doubt, accepts(end, applied_next)) {
            (Some(doubt), _) => doubt.to_string(),
            (None, true) => "accepted with --accept-loss".to_string(),
            // Holds nothing and no damage seen: a new log, or another one (`ahead_reason` says what to do).
            (None, false) if index.start_offset == end => return Ok(false),
            (None, false) => {
                return Err(LogError::Corrupt(format!(
                    "the store applied up to offset {applied_next} but the log ends at {end}, with no damage found at \
                     its end: log offsets {end}..{applied_next} are gone from the log (the store holds them). If this \
                     is the log its stores came from (its newest segment was cut short at a frame's edge), restart \
                     with --accept-loss {tp}@{end}..{applied_next}: the log continues at {applied_next}, and writes \
                     acknowledged past {applied_next} that the store had not applied, if any, are lost \
                     (docs/damage.md)"
                )))
            }
        };
        // Recorded first: after a crash the partition reopens at the new start.
        meta.start_offsets.insert(format!("{}:{}", partition.topic_id, partition.partition), applied_next);
        self.record_settled(&mut meta, &partition, applied_next)?;
        index.runs.clear();
        index.tail.clear();
        index.tail_bytes = 0;
        index.lost.clear();
        index.start_offset = applied_next;
        index.next_offset = applied_next;
        index.tail_in_doubt = None;
        partition.durable_end.send_replace(applied_next);
        tracing::error!(%tp, from = end, to = applied_next, %why,
            "the log lost entries its store applied: it continues at the store's offset; entries below it are no longer \
             read from the log (watches resuming there start again from the current state), and writes acknowledged \
             past it that were not applied, if any, are lost");
        Ok(true)
    }

    /// One process appends and says where the log ends.
    fn end_offset_is_linearizable(&self) -> bool {
        true
    }

    /// Past every lost range not accepted: a reader below it could not
    /// read on to the end.
    async fn start_offset(&self, tp: &TopicPartition) -> Result<u64, LogError> {
        Ok(self.partition(tp)?.index.lock().readable_from())
    }

    fn lost(&self, tp: &TopicPartition) -> Option<(String, String)> {
        let partition = self.partition(tp).ok()?;
        let index = partition.index.lock();
        let lost: Vec<&super::index::Lost> = index.lost.iter().filter(|lost| !lost.accepted).collect();
        let first = lost.first()?;
        let ranges = lost.iter().map(|l| format!("{}..{}", l.from, l.to)).collect::<Vec<_>>().join(", ");
        let accept = lost.iter().map(|l| format!("--accept-loss {}/{}@{}..{}", tp.topic, tp.partition, l.from, l.to)).collect::<Vec<_>>().join(" ");
        Some((
            format!("log offsets {ranges} of {tp} are lost: {} (docs/damage.md)", first.cause),
            format!("To go on without exactly those writes, restart with {accept}"),
        ))
    }

    async fn reader(&self, tp: &TopicPartition, from: u64) -> Result<Box<dyn LogReader>, LogError> {
        let partition = self.partition(tp)?;
        Ok(Box::new(reader::EmbeddedReader::new(tp.clone(), partition, self.inner.segments.clone(), from)))
    }

    fn release_below(&self, tp: &TopicPartition, offset: u64) {
        if let Ok(partition) = self.partition(tp) {
            let mut index = partition.index.lock();
            index.release_below = index.release_below.max(offset);
        }
    }

    async fn close(&self) {
        let queue = self.inner.queue.write().take();
        drop(queue);
        let thread = self.inner.writer_thread.lock().take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}
