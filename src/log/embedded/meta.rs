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

/// One copy on disk: the metadata and the checksum of its canonical form.
#[derive(Serialize, Deserialize)]
struct MetaFile {
    #[serde(flatten)]
    meta: LogMeta,
    /// BLAKE3 (hex) of `serde_json::to_vec(&meta)`; absent in files older
    /// builds wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum: Option<String>,
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

fn checksum(meta: &LogMeta) -> String {
    blake3::hash(&serde_json::to_vec(meta).expect("meta serializes")).to_hex().to_string()
}

/// Reads both copies; the newest that verifies wins.
pub(super) fn read_meta(dir: &Path) -> Result<MetaRead, LogError> {
    let mut found: Vec<LogMeta> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut missing = 0;
    for name in META_FILES {
        let path = dir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => match verified(&bytes) {
                Ok(meta) => found.push(meta),
                Err(why) => problems.push(format!("{}: {why}", path.display())),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing += 1;
                problems.push(format!("{}: missing", path.display()));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if missing == META_FILES.len() {
        return Ok(MetaRead::New);
    }
    let newest = found.into_iter().max_by_key(|meta| meta.generation);
    let read = match newest {
        None => MetaRead::Lost(problems.join("; ")),
        Some(meta) => {
            // Both verified but of different generations: a crash between the two writes; the older is written again.
            let damaged = (!problems.is_empty()).then(|| problems.join("; "));
            MetaRead::Found { meta, damaged }
        }
    };
    Ok(read)
}

/// A copy's metadata, if it parses and its checksum (when it has one) verifies.
fn verified(bytes: &[u8]) -> Result<LogMeta, String> {
    let file: MetaFile = serde_json::from_slice(bytes).map_err(|e| format!("unreadable ({e})"))?;
    match &file.checksum {
        Some(stored) if *stored != checksum(&file.meta) => Err("its checksum does not match its content".to_string()),
        _ => Ok(file.meta),
    }
}

/// Writes both copies, one generation newer, each atomically: the first
/// before the second, so one of them is whole whenever the node stops.
pub(super) fn write_meta(dir: &Path, meta: &mut LogMeta) -> Result<(), LogError> {
    meta.generation += 1;
    let file = MetaFile { checksum: Some(checksum(meta)), meta: meta.clone() };
    let bytes = serde_json::to_vec_pretty(&file).expect("meta serializes");
    assert!(verified(&bytes).is_ok_and(|read| read == *meta), "the metadata reads back as written");
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
    fn an_older_builds_file_is_read_and_the_newer_copy_wins() {
        let dir = tempfile::tempdir().unwrap();
        // What builds before the checksum wrote: the bare fields.
        std::fs::write(
            dir.path().join(META_FILES[0]),
            br#"{"log_id":"abc","topics":[{"name":"ns","id":1,"partitions":2,"uid":"u"}],"start_offsets":{"1:1":5}}"#,
        )
        .unwrap();
        match read(dir.path()) {
            MetaRead::Found { meta, damaged: Some(_) } => {
                assert_eq!((meta.log_id.as_str(), meta.start_offsets.get("1:1"), meta.generation), ("abc", Some(&5), 0));
            }
            other => panic!("{other:?}"),
        }
        // The copy one generation newer wins over the primary.
        let mut newer = sample();
        newer.generation = 41;
        let bytes = serde_json::to_vec(&MetaFile { checksum: Some(checksum(&newer)), meta: newer.clone() }).unwrap();
        std::fs::write(dir.path().join(META_FILES[1]), bytes).unwrap();
        match read(dir.path()) {
            MetaRead::Found { meta, damaged: None } => assert_eq!(meta, newer),
            other => panic!("{other:?}"),
        }
    }
}
