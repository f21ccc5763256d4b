//! The embedded log's metadata: its id, its topics (name, id, partitions)
//! and where each partition's retained entries start — in two checksummed
//! copies.
//!
//! Frames name their topic by id only (`frame.rs`), so this file is what
//! makes the segments readable: it exists nowhere else. It is written
//! atomically (temporary file, fsync, rename, directory fsync), so a crash
//! never tears it; a disk or filesystem can still damage it afterwards. So
//! it is kept twice, `log-meta.json` then `log-meta.copy.json`, each with a
//! generation (one more on every write) and a BLAKE3 checksum of its
//! content. Reading takes the newest copy whose checksum verifies and writes
//! the other again; a file older builds wrote (no checksum) is taken if it
//! parses. Both copies damaged: the log says so (`MetaRead::Lost`) and its
//! opener decides (`EmbeddedLog::open`).
//!
//! The JSON keeps its old top-level fields, so an older build still reads a
//! file this one wrote (it ignores `generation` and `checksum`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::super::LogError;
use super::segments::write_atomically;

/// The metadata's two copies, written in this order.
pub(super) const META_FILES: [&str; 2] = ["log-meta.json", "log-meta.copy.json"];

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LogMeta {
    /// Random, made when the log is created (or first opened by a build that
    /// names logs): the log part of `Log::identity`.
    #[serde(default)]
    pub(super) log_id: String,
    pub(super) topics: Vec<TopicMeta>,
    /// "topic_id:partition" → first retained offset, written before deletions.
    #[serde(default)]
    pub(super) start_offsets: BTreeMap<String, u64>,
    /// One more on every write: of two copies that verify, the newer wins.
    #[serde(default)]
    pub(super) generation: u64,
    /// "topic_id:partition" → where its end was settled after damage
    /// (`Log::settle_tail`): damage before that point is not doubted again
    /// at later opens, and the partition goes on at least at its offset.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) settled: BTreeMap<String, SettledMark>,
    /// "topic_id:partition" → lost ranges (from, to) the operator accepted
    /// (`--accept-loss`, `--accept-journal-loss`), exactly as found: still
    /// accepted at later opens without the flag, until retention deletes
    /// the bytes that held them (at most `index::LOST_RANGES_MAX` each).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) accepted: BTreeMap<String, Vec<(u64, u64)>>,
    /// Topics deleted (`Log::delete_topic`) whose frames segments may still
    /// hold: their ids are never given again, and their frames are indexed
    /// at open (a frame of an unknown id is damage) but belong to no topic.
    /// Forgotten at the first open that finds none of their frames left
    /// (retention deleted them): at most one per topic deleted since.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) deleted: Vec<TopicMeta>,
}

/// Where a partition's end was settled after damage, and at which offset
/// it goes on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SettledMark {
    /// The log's end when it was settled: the newest segment and its length.
    pub(super) segment_id: u64,
    pub(super) byte: u64,
    pub(super) next_offset: u64,
    /// The damaged ranges (segment, from byte, to byte) the log held when
    /// the end was settled: exactly those are not doubted again. None (a
    /// mark of an older build): every damaged byte before the mark's point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) damage: Option<Vec<(u64, u64, u64)>>,
}

/// Most damaged ranges a settled mark keeps; past it the rest are doubted
/// again at the next open (refused and named, never taken as settled).
pub(super) const SETTLED_DAMAGE_MAX: usize = 1_024;

impl SettledMark {
    /// Whether damaged bytes `from..to` of segment `segment` were known when
    /// this end was settled (review of issue 37: damage found later before
    /// the mark's point was taken as settled too, and a journal lane's
    /// newer loss went without a word).
    pub(super) fn knew(&self, segment: u64, from: u64, to: u64) -> bool {
        match &self.damage {
            Some(known) => known.contains(&(segment, from, to)),
            None => (segment, from) < (self.segment_id, self.byte),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TopicMeta {
    pub(super) name: String,
    pub(super) id: u32,
    pub(super) partitions: u32,
    /// Random, made when the topic is created: a topic deleted and created
    /// again under its name is another topic.
    #[serde(default)]
    pub(super) uid: String,
}

/// What reading the metadata found.
#[derive(Debug)]
pub(super) enum MetaRead {
    /// Neither copy exists: a new log.
    New,
    /// The newest copy that verifies; `damaged`: what was wrong with the
    /// other (damaged, or missing), which the caller writes again.
    Found { meta: LogMeta, damaged: Option<String> },
    /// A copy exists and none verifies: what each one showed.
    Lost(String),
}

/// 128 random bits, hex: the ids the embedded log names itself and its topics by.
pub(super) fn random_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// BLAKE3 (hex) of a copy's content without its `checksum` field, keys
/// sorted at every level: what a field added later changes is covered, and
/// no map's order matters.
fn checksum(content: &serde_json::Value) -> String {
    let mut canonical = Vec::new();
    write_canonical(content, &mut canonical);
    blake3::hash(&canonical).to_hex().to_string()
}

fn write_canonical(value: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, key).expect("a string serializes");
                out.push(b':');
                write_canonical(&map[key], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("a scalar serializes"),
    }
}

/// How a copy that reads was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// By this build or a later one: checksummed, with a generation.
    Checked,
    /// By a build before the copies (neither a checksum nor a generation):
    /// such a build writes only the first file, so it wrote it after every
    /// checksummed copy there is (a downgrade, then this build again).
    Older,
}

/// Reads both copies. Of those that read, one an older build wrote wins
/// (it is the newest, see `Written::Older`), else the newest generation
/// that verifies. The winner carries the largest generation seen, so the
/// next write is newer than every copy on disk.
pub(super) fn read_meta(dir: &Path) -> Result<MetaRead, LogError> {
    let mut found: Vec<(LogMeta, Written)> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let (mut missing, mut io_error) = (0, None);
    for name in META_FILES {
        let path = dir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => match verified(&bytes) {
                // Older builds write only the first file: a copy without a
                // checksum is damage (its checksum and generation lost), not
                // the newest write.
                Ok((_, Written::Older)) if name != META_FILES[0] => {
                    problems.push(format!("{}: neither a checksum nor a generation, which only the first file may lack", path.display()))
                }
                Ok(copy) => found.push(copy),
                Err(why) => problems.push(format!("{}: {why}", path.display())),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing += 1;
                problems.push(format!("{}: missing", path.display()));
            }
            // One copy unreadable is what the other is for.
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                io_error = Some(e);
            }
        }
    }
    if missing == META_FILES.len() {
        return Ok(MetaRead::New);
    }
    let generation_max = found.iter().map(|(meta, _)| meta.generation).max().unwrap_or(0);
    let older = found.iter().position(|(_, written)| *written == Written::Older);
    let winner = match older {
        Some(i) => Some(found.swap_remove(i)),
        None => found.into_iter().max_by_key(|(meta, _)| meta.generation),
    };
    let read = match (winner, io_error) {
        (None, Some(e)) => return Err(e.into()),
        (None, None) => MetaRead::Lost(problems.join("; ")),
        (Some((mut meta, written)), _) => {
            if written == Written::Older {
                problems.push(format!("{}: written by an older build", dir.join(META_FILES[0]).display()));
            }
            meta.generation = generation_max;
            // Both verified but of different generations: a crash between the two writes; written again.
            let damaged = (!problems.is_empty()).then(|| problems.join("; "));
            MetaRead::Found { meta, damaged }
        }
    };
    Ok(read)
}

/// A copy's metadata, if it parses and its checksum verifies (or it is
/// one an older build wrote: neither a checksum nor a generation).
fn verified(bytes: &[u8]) -> Result<(LogMeta, Written), String> {
    let mut content: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| format!("unreadable ({e})"))?;
    let object = content.as_object_mut().ok_or("not a JSON object")?;
    let stored = object.remove("checksum");
    let written = match (stored, object.contains_key("generation")) {
        (Some(serde_json::Value::String(stored)), true) if stored == checksum(&content) => Written::Checked,
        (Some(_), true) => return Err("its checksum does not match its content".to_string()),
        (None, false) => Written::Older,
        _ => return Err("a checksum without a generation, or a generation without a checksum".to_string()),
    };
    let meta = serde_json::from_value(content).map_err(|e| format!("unreadable ({e})"))?;
    Ok((meta, written))
}

/// Writes both copies, one generation newer, each atomically: the first
/// before the second, so one of them is whole whenever the node stops.
pub(super) fn write_meta(dir: &Path, meta: &mut LogMeta) -> Result<(), LogError> {
    meta.generation += 1;
    let mut content = serde_json::to_value(&*meta).expect("meta serializes");
    let sum = checksum(&content);
    content.as_object_mut().expect("meta is an object").insert("checksum".to_string(), serde_json::Value::String(sum));
    let bytes = serde_json::to_vec_pretty(&content).expect("meta serializes");
    assert!(verified(&bytes).is_ok_and(|(read, written)| read == *meta && written == Written::Checked), "the metadata reads back as written");
    for name in META_FILES {
        write_atomically(&dir.join(name), &bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LogMeta {
        LogMeta {
            log_id: random_id(),
            topics: vec![TopicMeta { name: "ns".into(), id: 1, partitions: 4, uid: random_id() }],
            start_offsets: BTreeMap::from([("1:0".to_string(), 7), ("1:3".to_string(), 2)]),
            generation: 0,
            settled: BTreeMap::new(),
            accepted: BTreeMap::from([("1:2".to_string(), vec![(5, 6)])]),
            deleted: vec![TopicMeta { name: "ns".into(), id: 0, partitions: 2, uid: random_id() }],
        }
    }

    fn read(dir: &Path) -> MetaRead {
        read_meta(dir).unwrap()
    }

    #[test]
    fn both_copies_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(read(dir.path()), MetaRead::New));
        let mut meta = sample();
        write_meta(dir.path(), &mut meta).unwrap();
        write_meta(dir.path(), &mut meta).unwrap();
        assert_eq!(meta.generation, 2);
        match read(dir.path()) {
            MetaRead::Found { meta: read, damaged: None } => assert_eq!(read, meta),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_damaged_copy_falls_back_to_the_other() {
        for victim in META_FILES {
            for damage in ["cut", "flip", "remove"] {
                let dir = tempfile::tempdir().unwrap();
                let mut meta = sample();
                write_meta(dir.path(), &mut meta).unwrap();
                let path = dir.path().join(victim);
                let mut bytes = std::fs::read(&path).unwrap();
                match damage {
                    "cut" => bytes.truncate(bytes.len() - 9),
                    // A digit of a start offset: still valid JSON, a wrong value.
                    _ => {
                        let at = bytes.windows(3).position(|w| w == b": 7").unwrap() + 2;
                        bytes[at] = b'8';
                    }
                }
                if damage == "remove" {
                    std::fs::remove_file(&path).unwrap();
                } else {
                    std::fs::write(&path, &bytes).unwrap();
                }
                match read(dir.path()) {
                    MetaRead::Found { meta: read, damaged: Some(why) } => {
                        assert_eq!(read, meta, "{victim} {damage}: the other copy, never the damaged one");
                        assert!(why.contains(victim), "{why}");
                    }
                    other => panic!("{victim} {damage}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn both_copies_damaged_is_lost_never_guessed() {
        let dir = tempfile::tempdir().unwrap();
        let mut meta = sample();
        write_meta(dir.path(), &mut meta).unwrap();
        for name in META_FILES {
            let path = dir.path().join(name);
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        }
        match read(dir.path()) {
            MetaRead::Lost(why) => assert!(why.contains("log-meta.json") && why.contains("log-meta.copy.json"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_older_builds_file_wins_over_a_checksummed_copy() {
        let dir = tempfile::tempdir().unwrap();
        // What builds before the checksum wrote: the bare fields, first file only.
        let legacy = br#"{"log_id":"abc","topics":[{"name":"ns","id":1,"partitions":2,"uid":"u"}],"start_offsets":{"1:1":5}}"#;
        std::fs::write(dir.path().join(META_FILES[0]), legacy).unwrap();
        match read(dir.path()) {
            MetaRead::Found { meta, damaged: Some(_) } => {
                assert_eq!((meta.log_id.as_str(), meta.start_offsets.get("1:1"), meta.generation), ("abc", Some(&5), 0));
            }
            other => panic!("{other:?}"),
        }
        // This build wrote both copies at generation 41; then an older build
        // rewrote the first (a downgrade, a new start offset), then this
        // build again: the older build's file is the newest.
        let mut ours = sample();
        ours.generation = 40;
        write_meta(dir.path(), &mut ours).unwrap();
        std::fs::write(dir.path().join(META_FILES[0]), legacy).unwrap();
        match read(dir.path()) {
            MetaRead::Found { mut meta, damaged: Some(why) } => {
                assert!(meta.log_id == "abc" && meta.generation == 41 && why.contains("older build"), "{meta:?} {why}");
                write_meta(dir.path(), &mut meta).unwrap();
                assert_eq!(meta.generation, 42, "newer than every copy on disk");
            }
            other => panic!("{other:?}"),
        }
        // The copy's checksum and generation lost (a damage that leaves a
        // parsable file): not taken for an older build's newest write.
        let mut ours = sample();
        write_meta(dir.path(), &mut ours).unwrap();
        let stale = br#"{"log_id":"stale","topics":[],"start_offsets":{}}"#;
        std::fs::write(dir.path().join(META_FILES[1]), stale).unwrap();
        match read(dir.path()) {
            MetaRead::Found { meta, damaged: Some(why) } => {
                assert!(meta.log_id == ours.log_id && why.contains("only the first file may lack"), "{meta:?} {why}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_flip_in_the_word_checksum_is_damage_not_an_older_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut meta = sample();
        write_meta(dir.path(), &mut meta).unwrap();
        let path = dir.path().join(META_FILES[0]);
        let text = std::fs::read_to_string(&path).unwrap().replace("\"checksum\"", "\"checksun\"");
        std::fs::write(&path, text).unwrap();
        match read(dir.path()) {
            MetaRead::Found { meta: read, damaged: Some(why) } => assert!(read == meta && why.contains(META_FILES[0]), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
