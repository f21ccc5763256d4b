//! Verifying an embedded log's directory offline (`tern check`), without
//! changing it: both copies of its metadata (`meta.rs`) and every frame of
//! every segment against its checksum (`frame.rs`), as opening the log
//! would, except that nothing is cut or rewritten.

use std::path::{Path, PathBuf};

use super::frame;
use super::meta::{read_meta, MetaRead, META_FILES};

/// One thing a check looked at, and what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub path: PathBuf,
    /// Whether it found damage, whether or not the node heals it by itself
    /// at its next start (`says` tells which). Not damage: intact, or a
    /// state every start leaves (a torn tail, a copy of the metadata one
    /// write behind).
    pub damaged: bool,
    pub says: String,
}

impl Finding {
    pub fn ok(path: PathBuf, says: String) -> Finding {
        Finding { path, damaged: false, says }
    }
    pub fn damaged(path: PathBuf, says: String) -> Finding {
        Finding { path, damaged: true, says }
    }
}

/// Checks the embedded log (or journal) in `dir`.
pub fn verify(dir: &Path) -> Vec<Finding> {
    let wal = dir.join("wal");
    let held_bytes = super::segments::wal_bytes(&wal);
    let mut findings = vec![meta_finding(dir, held_bytes)];
    // Every (topic id, partition) the metadata names: where the scan may resync.
    let topics: Vec<(u32, u32)> = match read_meta(dir) {
        Ok(MetaRead::Found { meta, .. }) => meta.topics.iter().flat_map(|t| (0..t.partitions).map(move |p| (t.id, p))).collect(),
        _ => Vec::new(),
    };
    let mut ids: Vec<u64> = std::fs::read_dir(&wal)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_string_lossy().strip_suffix(".seg")?.parse().ok())
        .collect();
    ids.sort_unstable();
    for (i, id) in ids.iter().enumerate() {
        let path = wal.join(format!("{id:020}.seg"));
        findings.push(segment_finding(&path, i + 1 == ids.len(), &topics));
    }
    findings
}

fn meta_finding(dir: &Path, held_bytes: u64) -> Finding {
    let path = dir.join(META_FILES[0]);
    match read_meta(dir) {
        // As the log's open sees it: missing beside entries is lost.
        Ok(MetaRead::New) if held_bytes > 0 => {
            Finding::damaged(path, format!("both copies are missing while the segments hold {held_bytes} bytes (docs/damage.md)"))
        }
        Ok(MetaRead::New) => Finding::ok(path, "no metadata yet (a log never opened)".to_string()),
        Ok(MetaRead::Found { meta, damaged: None }) => {
            Finding::ok(path, format!("both copies verify (generation {}, {} topics)", meta.generation, meta.topics.len()))
        }
        Ok(MetaRead::Found { meta, damaged: Some(why) }) => Finding::ok(
            path,
            format!(
                "one copy verifies (generation {}, {} topics); the other is written again at the next start: {why}",
                meta.generation,
                meta.topics.len()
            ),
        ),
        Ok(MetaRead::Lost(why)) => Finding::damaged(path, format!("both copies fail their checks: {why} (docs/damage.md)")),
        Err(e) => Finding::damaged(path, e.to_string()),
    }
}

/// Scans a segment's frames, as the log's open does. In the newest
/// segment, the torn remains of an unacknowledged append at its end are cut
/// off at the next start; any other damaged bytes lose the frames they held.
fn segment_finding(path: &Path, is_newest: bool, topics: &[(u32, u32)]) -> Finding {
    let mut frames = 0u64;
    let plausible = |header: &frame::FrameHeader| topics.is_empty() || topics.contains(&(header.topic_id, header.partition));
    let scanned = match frame::scan(path, plausible, |_, _, _| {
        frames += 1;
        Ok(())
    }) {
        Ok(scanned) => scanned,
        Err(e) => return Finding::damaged(path.to_path_buf(), format!("cannot read: {e}")),
    };
    let torn_from = if is_newest { super::embedded_log::torn_tail_start(path, &scanned).ok().flatten() } else { None };
    let damaged: Vec<String> = scanned
        .damaged
        .iter()
        .filter(|range| torn_from.is_none_or(|torn| range.from < torn))
        .map(|range| format!("bytes {}..{} ({})", range.from, range.to, range.problem))
        .collect();
    let torn = torn_from.map(|torn| format!("; from byte {torn} of {}: a torn tail, cut off at the next start", scanned.file_bytes));
    let path = path.to_path_buf();
    match damaged.is_empty() {
        true => Finding::ok(path, format!("{frames} frames verify{}", torn.unwrap_or_default())),
        false => Finding::damaged(
            path,
            format!(
                "{frames} frames verify; no frame verifies in {}: the entries they held are lost{} (docs/damage.md)",
                damaged.join(", "),
                torn.unwrap_or_default()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::embedded::{EmbeddedLog, EmbeddedLogConfig};
    use crate::log::{Log, TopicPartition};

    #[tokio::test]
    async fn a_log_verifies_until_a_closed_segment_or_both_metadata_copies_are_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(EmbeddedLogConfig { segment_bytes_max: 1, ..EmbeddedLogConfig::new(dir.path()) }).unwrap();
        log.create_topic("t", 1).await.unwrap();
        let tp = TopicPartition { topic: "t".into(), partition: 0 };
        for i in 0..3 {
            log.append(&tp, bytes::Bytes::from(format!("entry {i}"))).await.unwrap();
        }
        log.close().await;
        let findings = verify(dir.path());
        assert!(findings.iter().all(|f| !f.damaged) && findings.len() >= 3, "{findings:?}");
        let closed = findings[1].path.clone();
        let mut bytes = std::fs::read(&closed).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&closed, bytes).unwrap();
        let findings = verify(dir.path());
        assert!(findings[1].damaged && findings[1].says.contains("checksum mismatch") && findings[1].says.contains("are lost"), "{findings:?}");
        for name in META_FILES {
            std::fs::write(dir.path().join(name), b"{").unwrap();
        }
        assert!(verify(dir.path())[0].damaged);
    }
}
