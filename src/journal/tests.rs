//! The journal on disk: entries come back in order after a restart,
//! released ones never do, and its bounds refuse rather than drop.

use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::codec::{self, Mutation};
use crate::codec::{Op, OpKind};

const ROOMY: JournalLimits = JournalLimits { entries_max: 1_000, bytes_max: 64 * 1024 * 1024, age_max: Duration::from_secs(3600) };

fn put(pk: &str, value: &str, write_id: &str) -> Mutation {
    Mutation {
        write_id: Bytes::copy_from_slice(write_id.as_bytes()),
        ops: vec![Op { pk: pk.into(), sk: "s".into(), kind: OpKind::Put(Bytes::copy_from_slice(value.as_bytes())), condition: None }],
        ..Default::default()
    }
}

/// Every pk below is written to partition `partition_of(pk, 2)` of "ns".
fn partition_of(pk: &str) -> u32 {
    crate::partitioner::partition_of(pk, 2)
}

async fn read_all(journal: &Journal, ns: &str, partition: u32, from: u64) -> Vec<(u64, Mutation)> {
    let mut reader = journal.reader(ns, partition, from).await.unwrap();
    let mut out = Vec::new();
    loop {
        let batch = reader.next_batch(100, Duration::from_millis(50)).await.unwrap();
        if batch.is_empty() {
            return out;
        }
        for record in batch {
            out.push((record.offset, codec::decode(record.payload, partition, 2).unwrap()));
        }
    }
}

#[tokio::test]
async fn entries_come_back_in_order_after_a_restart_and_released_ones_never_do() {
    let dir = tempfile::tempdir().unwrap();
    let writes: Vec<Mutation> = (0..6).map(|i| put(&format!("k{i}"), &i.to_string(), &format!("w{i}"))).collect();
    {
        let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
        for w in &writes {
            let p = partition_of(&w.ops[0].pk);
            journal.append("ns", 2, p, w).await.unwrap();
        }
        assert_eq!(journal.backlog().entries, 6);
        journal.close().await;
    }
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    let pending = journal.pending().await.unwrap();
    assert_eq!(pending.iter().map(|p| p.end - p.start).sum::<u64>(), 6);
    for p in &pending {
        let expected: Vec<&Mutation> = writes.iter().filter(|w| partition_of(&w.ops[0].pk) == p.partition).collect();
        let read = read_all(&journal, "ns", p.partition, p.start).await;
        assert_eq!(read.iter().map(|(_, m)| m).collect::<Vec<_>>(), expected, "partition {}: journal order", p.partition);
        // The first two of this partition were applied: released.
        journal.release_below("ns", p.partition, p.start + 2);
    }
    journal.close().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    let pending = journal.pending().await.unwrap();
    assert_eq!(pending.iter().map(|p| p.end - p.start).sum::<u64>(), 2, "released entries stay released after a restart");
    for p in &pending {
        assert_eq!(p.start, 2);
        let read = read_all(&journal, "ns", p.partition, p.start).await;
        assert_eq!(read.len() as u64, p.end - p.start);
        journal.release_below("ns", p.partition, p.end);
    }
    assert_eq!(journal.backlog().entries, 0, "released at once");
    assert_eq!(journal.pending().await.unwrap().len(), 2, "the marks are not on disk yet: a restart would replay");
    journal.persist_released().await.unwrap();
    assert!(journal.pending().await.unwrap().is_empty());
    assert_eq!(journal.backlog(), Backlog::default(), "their bytes go with their marks on disk");
    assert_eq!(journal.backlog(), Backlog::default());
}

#[tokio::test]
async fn a_full_journal_refuses_new_entries_and_takes_them_again_once_released() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), JournalLimits { entries_max: 2, bytes_max: 1 << 20, ..ROOMY }, None).await.unwrap();
    let p = partition_of("a");
    journal.append("ns", 2, p, &put("a", "1", "w1")).await.unwrap();
    journal.append("ns", 2, p, &put("a", "2", "w2")).await.unwrap();
    let error = journal.append("ns", 2, p, &put("a", "3", "w3")).await.unwrap_err();
    assert!(matches!(error, JournalError::Full { entries: 2, entries_max: 2, .. }), "{error}");
    assert!(error.to_string().contains("the write was not journaled"), "{error}");
    let read = read_all(&journal, "ns", p, 0).await;
    assert_eq!(read.len(), 2, "the refused write left nothing");
    journal.release_below("ns", p, 1);
    assert_eq!(journal.append("ns", 2, p, &put("a", "3", "w3")).await.unwrap(), 2);
    // Bytes are bounded too.
    let small = Journal::open(&dir.path().join("small"), JournalLimits { entries_max: 100, bytes_max: 10, ..ROOMY }, None).await.unwrap();
    small.append("ns", 2, p, &put("a", "1", "w1")).await.unwrap();
    assert!(matches!(small.append("ns", 2, p, &put("a", "2", "w2")).await.unwrap_err(), JournalError::Full { .. }));
}

#[tokio::test]
async fn a_namespace_made_again_with_other_partitions_is_refused_until_its_journal_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    journal.append("ns", 2, 0, &put("a", "1", "w1")).await.unwrap();
    let error = journal.append("ns", 3, 0, &put("a", "1", "w2")).await.unwrap_err();
    assert!(matches!(error, JournalError::PartitionsChanged { partitions: 3, journaled: 2, .. }), "{error}");
    journal.close().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert!(matches!(journal.append("ns", 3, 0, &put("a", "1", "w2")).await.unwrap_err(), JournalError::PartitionsChanged { .. }));
    // Done (released, its marks on disk): the journal's topic is made again
    // with the new count, and goes on above the released mark. Failed
    // before: refused for good (a namespace deleted and created again).
    journal.release_below("ns", 0, 1);
    journal.persist_released().await.unwrap();
    let pk_in = |p: u32| (0..).map(|i| format!("k{i}")).find(|pk| crate::partitioner::partition_of(pk, 3) == p).unwrap();
    assert_eq!(journal.append("ns", 3, 0, &put(&pk_in(0), "2", "w3")).await.unwrap(), 1, "above the released mark");
    assert_eq!(journal.append("ns", 3, 2, &put(&pk_in(2), "1", "w4")).await.unwrap(), 0, "a new partition starts at 0");
    journal.close().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    let pending: Vec<(u32, u64, u64)> = journal.pending().await.unwrap().iter().map(|p| (p.partition, p.start, p.end)).collect();
    assert_eq!(pending, vec![(0, 1, 2), (2, 0, 1)], "exactly the new entries are pending after a restart");
    let (_, mutation) = read_all_of(&journal, "ns", 0, 1, 3).await.remove(0);
    assert_eq!(mutation.write_id, Bytes::from_static(b"w3"));
}

async fn read_all_of(journal: &Journal, ns: &str, partition: u32, from: u64, partitions: u32) -> Vec<(u64, Mutation)> {
    let mut reader = journal.reader(ns, partition, from).await.unwrap();
    let batch = reader.next_batch(100, Duration::from_millis(50)).await.unwrap();
    batch.into_iter().map(|r| (r.offset, codec::decode(r.payload, partition, partitions).unwrap())).collect()
}

#[tokio::test]
async fn a_release_below_what_was_released_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    for i in 0..3 {
        journal.append("ns", 2, 0, &put("a", &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.release_below("ns", 0, 2);
    journal.persist_released().await.unwrap();
    journal.release_below("ns", 0, 1);
    journal.persist_released().await.unwrap();
    assert_eq!(journal.pending().await.unwrap(), vec![Pending { ns: "ns".into(), partition: 0, start: 2, end: 3 }]);
}

#[tokio::test]
async fn a_journal_whose_oldest_write_waited_too_long_refuses_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), JournalLimits { age_max: Duration::from_millis(100), ..ROOMY }, None).await.unwrap();
    journal.append("ns", 2, 0, &put("a", "1", "w1")).await.unwrap();
    assert!(journal.oldest_age().unwrap() < Duration::from_millis(100));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let error = journal.append("ns", 2, 0, &put("a", "2", "w2")).await.unwrap_err();
    assert!(matches!(error, JournalError::TooOld { age_max_ms: 100, .. }), "{error}");
    journal.release_below("ns", 0, 1);
    assert_eq!(journal.oldest_age(), None);
    journal.append("ns", 2, 0, &put("a", "2", "w2")).await.unwrap();
    journal.close().await;
    let reopened = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(reopened.replayed_at_open(), 1, "the unreleased write is replayed");
    assert_eq!(reopened.find(b"w2"), Some(("ns".to_string(), 0, 1)));
    assert_eq!(reopened.find(b"w1"), None, "released");
}

/// Review of issue 36: the released mark moved before it was written;
/// when the write failed, the same release tried again returned at once
/// ("below what was released") and the entries stayed pending for good
/// (the partition's plain writes journaled, its conditional writes
/// refused). Failed before: still pending after the retry. Now a release
/// is in memory at once, and its mark is written by `persist_released`,
/// which keeps a mark it could not write for its next call.
#[tokio::test]
async fn a_release_whose_mark_was_not_written_is_done_when_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    journal.append("ns", 2, 0, &put("a", "1", "w1")).await.unwrap();
    // A directory where the mark's temporary file goes: its write fails.
    let in_the_way = dir.path().join(super::local::RELEASED_FILE).with_extension("tmp");
    std::fs::create_dir_all(in_the_way.join("x")).unwrap();
    journal.release_below("ns", 0, 1);
    assert!(!journal.holds_pending("ns", 0), "seen applied: no longer pending for this node");
    assert!(journal.persist_released().await.is_err());
    assert_eq!(journal.pending().await.unwrap().len(), 1, "its mark is not on disk: a restart replays it");
    // Review of 2278846: its segments stay, so their bytes count against
    // the journal's bound (they counted 0 with no entry pending, and marks
    // that could never be written let the files grow unbounded).
    assert!(journal.backlog().bytes > 0, "{:?}", journal.backlog());
    std::fs::remove_dir_all(&in_the_way).unwrap();
    journal.persist_released().await.unwrap();
    assert!(journal.pending().await.unwrap().is_empty(), "written when tried again");
    journal.close().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert!(journal.pending().await.unwrap().is_empty(), "and after a restart");
}

/// A node killed between a release and its mark's write replays the
/// entries released since the last write (applied once: their place in
/// their lane); one closed writes its marks first.
#[tokio::test]
async fn a_restart_replays_only_what_was_released_after_the_last_written_mark() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    for i in 0..4 {
        journal.append("ns", 2, 0, &put("a", &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.release_below("ns", 0, 1);
    journal.persist_released().await.unwrap();
    journal.release_below("ns", 0, 3);
    journal.close_unpersisted().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(journal.pending().await.unwrap(), vec![Pending { ns: "ns".into(), partition: 0, start: 1, end: 4 }]);
    assert_eq!(journal.replayed_at_open(), 3);
    journal.release_below("ns", 0, 3);
    journal.close().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(journal.pending().await.unwrap(), vec![Pending { ns: "ns".into(), partition: 0, start: 3, end: 4 }]);
}

/// A write waits only for the journaled writes pending when it came
/// (`pending_end`), not for the partition to empty: under steady journaled
/// traffic it never would (review of issue 36: every conditional write was
/// refused while plain writes kept coming).
#[tokio::test]
async fn a_wait_for_release_waits_only_for_the_entries_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(journal.pending_end("ns", 0), None);
    journal.append("ns", 2, 0, &put("a", "1", "w1")).await.unwrap();
    let end = journal.pending_end("ns", 0).unwrap();
    assert_eq!(end, 1);
    let soon = || tokio::time::Instant::now() + Duration::from_millis(50);
    assert!(!journal.wait_released("ns", 0, end, soon()).await, "w1 is pending");
    // Journaled after the waiting write came: not waited for.
    journal.append("ns", 2, 0, &put("a", "2", "w2")).await.unwrap();
    let journal = std::sync::Arc::new(journal);
    let waiter = {
        let journal = journal.clone();
        tokio::spawn(async move { journal.wait_released("ns", 0, end, tokio::time::Instant::now() + Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    journal.release_below("ns", 0, 1);
    assert!(waiter.await.unwrap(), "woken by the release of w1, with w2 still pending");
    assert!(journal.holds_pending("ns", 0));
    assert!(journal.wait_released("ns", 1, 5, soon()).await, "another partition holds nothing");
}

/// Cuts `bytes` off the end of `path`, as a damaged disk may.
fn cut(path: &std::path::Path, bytes: usize) {
    let text = std::fs::read(path).unwrap();
    std::fs::write(path, &text[..text.len() - bytes]).unwrap();
}

/// Issue 37: nine bytes cut from the journal's `log-meta.json` stopped
/// every start of the node ("the journal failed: the log is corrupt: … EOF
/// while parsing a string"), on a node whose journal held nothing. Failed
/// before: that error, at the second open.
#[tokio::test]
async fn a_damaged_copy_of_the_journals_metadata_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    for i in 0..3 {
        journal.append("ns", 2, 0, &put("a", &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.close_unpersisted().await;
    cut(&dir.path().join("log-meta.json"), 9);
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(journal.pending().await.unwrap(), vec![Pending { ns: "ns".into(), partition: 0, start: 0, end: 3 }], "every entry, from the copy");
    journal.close_unpersisted().await;
    cut(&dir.path().join("log-meta.copy.json"), 9);
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(journal.pending().await.unwrap().len(), 1, "the copy written again from the primary");
}

/// Both copies lost: a journal that holds nothing starts again under a new
/// id (new lanes: no offset of an old lane is used twice); one that holds
/// entries is refused, saying what is lost and how to go on.
#[tokio::test]
async fn a_journal_whose_metadata_is_lost_starts_again_only_if_it_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    let id = journal.id().to_string();
    journal.close().await;
    for name in ["log-meta.json", "log-meta.copy.json"] {
        cut(&dir.path().join(name), 9);
    }
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_ne!(journal.id(), id, "a new id, so new lanes");
    journal.append("ns", 2, 0, &put("a", "1", "w1")).await.unwrap();
    journal.close_unpersisted().await;
    for name in ["log-meta.json", "log-meta.copy.json"] {
        cut(&dir.path().join(name), 9);
    }
    let error = Journal::open(dir.path(), ROOMY, None).await.err().expect("refused: it holds an entry").to_string();
    assert!(error.contains("metadata is lost") && error.contains("bytes in 1 segments") && error.contains("docs/damage.md"), "{error}");
}

/// A damaged id file: made again while the journal holds nothing, refused
/// while it holds entries (they name their lanes by it). Before: an empty
/// file silently made a new id, and garbage was taken as one.
#[tokio::test]
async fn a_damaged_journal_id_is_made_again_only_if_the_journal_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    let id = journal.id().to_string();
    journal.close().await;
    std::fs::write(dir.path().join(crate::journal::ID_FILE), &id[..20]).unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert!(journal.id() != id && journal.id().len() == 32, "made again");
    journal.append("ns", 2, 0, &put("a", "1", "w1")).await.unwrap();
    journal.close_unpersisted().await;
    std::fs::write(dir.path().join(crate::journal::ID_FILE), "").unwrap();
    let error = Journal::open(dir.path(), ROOMY, None).await.err().expect("refused").to_string();
    assert!(error.contains("journal_id is damaged") && error.contains("applied twice"), "{error}");
}

/// Damaged released marks are derivable: the entries held are sequenced
/// again (and applied once, by their lanes). Before: the node did not start.
#[tokio::test]
async fn damaged_released_marks_replay_what_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    for i in 0..3 {
        journal.append("ns", 2, 0, &put("a", &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.release_below("ns", 0, 2);
    journal.close().await;
    cut(&dir.path().join("released.json"), 3);
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(journal.pending().await.unwrap(), vec![Pending { ns: "ns".into(), partition: 0, start: 0, end: 3 }]);
}

/// Review of issue 37: a damaged digit that still parses (a mark raised
/// from 1 to 3) was trusted: entries 1 and 2, acknowledged and never
/// sequenced, were left behind for good (nothing pending). The marks now
/// carry a checksum: the damage is seen, and everything held is pending.
#[tokio::test]
async fn a_released_mark_damaged_into_another_number_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    for i in 0..3 {
        journal.append("ns", 2, 0, &put("a", &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.release_below("ns", 0, 1);
    journal.close().await;
    let path = dir.path().join("released.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"ns:0\":1"), "{text}");
    std::fs::write(&path, text.replace("\"ns:0\":1", "\"ns:0\":3")).unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(journal.pending().await.unwrap(), vec![Pending { ns: "ns".into(), partition: 0, start: 0, end: 3 }]);
}

/// Marks an older build wrote (a plain map, no checksum) are read as they are.
#[tokio::test]
async fn released_marks_of_an_older_build_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    for i in 0..3 {
        journal.append("ns", 2, 0, &put("a", &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.close_unpersisted().await;
    std::fs::write(dir.path().join("released.json"), "{\"ns:0\":2}").unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_eq!(journal.pending().await.unwrap(), vec![Pending { ns: "ns".into(), partition: 0, start: 2, end: 3 }]);
}

/// Review of issue 37: both copies of the metadata missing (not damaged)
/// while the id and released marks remain made a fresh log under the old
/// lanes (offsets from 0 again, below what stores applied of those lanes:
/// dropped as repeats). Now the lanes start again, as for lost copies.
#[tokio::test]
async fn a_journal_whose_metadata_files_are_gone_starts_its_lanes_again() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    let id = journal.id().to_string();
    journal.close().await;
    for name in ["log-meta.json", "log-meta.copy.json"] {
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_ne!(journal.id(), id, "a new id, so new lanes");
}

/// A journal that drained and closed leaves no segment behind, so losing
/// both copies of its metadata costs nothing: it starts again. Before: its
/// newest segment kept the released entries, and the start was refused.
#[tokio::test]
async fn a_drained_journal_whose_metadata_is_lost_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    let id = journal.id().to_string();
    for i in 0..3 {
        journal.append("ns", 2, 0, &put("a", &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.release_below("ns", 0, 3);
    journal.close().await;
    for name in ["log-meta.json", "log-meta.copy.json"] {
        cut(&dir.path().join(name), 9);
    }
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    assert_ne!(journal.id(), id, "started again under a new id");
    assert!(journal.pending().await.unwrap().is_empty());
    // A drained journal that was not lost continues its offsets.
    journal.append("ns", 2, 0, &put("a", "x", "w9")).await.unwrap();
    journal.release_below("ns", 0, 1);
    journal.close().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    let offset = journal.append("ns", 2, 0, &put("a", "y", "w10")).await.unwrap();
    assert_eq!(offset, 1, "offsets never start over");
}

/// Review of issue 37: the marks on disk were not told to the log at open,
/// so after a restart a lane with nothing new to release held every
/// segment, and a drained journal's close removed none.
#[tokio::test]
async fn a_restarted_drained_journal_still_leaves_no_segment_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    for i in 0..3 {
        journal.append("ns", 2, 0, &put("a", &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.release_below("ns", 0, 3);
    // Marks on disk, segments kept (a crash: no close).
    journal.persist_released().await.unwrap();
    journal.close_unpersisted().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    journal.close().await;
    let held: u64 = std::fs::read_dir(dir.path().join("wal")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert_eq!(held, 0, "the restarted journal's close removed its segments");
}

/// A bit flipped in a journaled write not yet sequenced, in the middle of
/// the journal's segment. Before, the journal's log took it for a torn tail
/// and cut it with every entry after it: acknowledged writes dropped without
/// a word. Now the journal refuses to open, naming the lane and offset lost,
/// and cuts nothing.
#[tokio::test]
async fn a_damaged_journaled_write_is_named_and_nothing_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    // All in partition 0 of "ns", so the damaged entry has entries after it.
    let pks: Vec<String> = (0..100).map(|i| format!("k{i}")).filter(|pk| partition_of(pk) == 0).take(5).collect();
    {
        let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
        for (i, pk) in pks.iter().enumerate() {
            journal.append("ns", 2, 0, &put(pk, &i.to_string(), &format!("w{i}"))).await.unwrap();
        }
        journal.close().await;
    }
    let segment = std::fs::read_dir(dir.path().join("wal")).unwrap().next().unwrap().unwrap().path();
    let mut bytes = std::fs::read(&segment).unwrap();
    // The third frame: past two frames, read by their length fields.
    let mut at = 0;
    for _ in 0..2 {
        at += crate::log::embedded::frame::HEADER_BYTES + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    bytes[at + crate::log::embedded::frame::HEADER_BYTES + 3] ^= 0x08;
    std::fs::write(&segment, &bytes).unwrap();
    let refused = Journal::open(dir.path(), ROOMY, None).await.err().expect("refused").to_string();
    assert!(refused.contains("lanes and offsets ns/0@2..3") && refused.contains("--accept-journal-loss ns/0@2..3"), "{refused}");
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), bytes.len() as u64, "nothing was cut");
}

/// Flips a bit in byte `byte` of frame `index` of the journal's only segment.
fn flip_frame(dir: &std::path::Path, index: usize, byte: usize) {
    let segment = std::fs::read_dir(dir.join("wal")).unwrap().next().unwrap().unwrap().path();
    let mut bytes = std::fs::read(&segment).unwrap();
    let mut at = 0;
    for _ in 0..index {
        at += crate::log::embedded::frame::HEADER_BYTES + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    bytes[at + byte] ^= 0x08;
    std::fs::write(&segment, &bytes).unwrap();
}

/// A byte of a frame's payload (its header still names the entry).
const IN_PAYLOAD: usize = crate::log::embedded::frame::HEADER_BYTES + 3;
/// The top byte of a frame's offset (its header no longer names the entry).
const IN_HEADER: usize = 23;

/// Issue 37: the refusal names the flag that accepts exactly the lost
/// entries; with it the journal opens, its reader goes past exactly them,
/// the gap is known to the sequencer (`gap_accepted`), and the acceptance
/// is remembered, so a later start without the flag opens too.
#[tokio::test]
async fn a_lost_journaled_write_is_accepted_exactly_by_the_flag_its_refusal_names() {
    let dir = tempfile::tempdir().unwrap();
    let pks: Vec<String> = (0..100).map(|i| format!("k{i}")).filter(|pk| partition_of(pk) == 0).take(5).collect();
    {
        let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
        for (i, pk) in pks.iter().enumerate() {
            journal.append("ns", 2, 0, &put(pk, &i.to_string(), &format!("w{i}"))).await.unwrap();
        }
        journal.close().await;
    }
    flip_frame(dir.path(), 2, IN_PAYLOAD);
    let refused = Journal::open(dir.path(), ROOMY, None).await.err().expect("refused").to_string();
    assert!(refused.contains("restart with --accept-journal-loss ns/0@2..3:"), "{refused}");
    // Another range than the one lost accepts nothing.
    let other = crate::log::embedded::AcceptLost::parse_flag("--accept-journal-loss", "ns/0@2..4").unwrap();
    let refused = Journal::open_accepting(dir.path(), ROOMY, None, vec![other]).await.err().expect("refused").to_string();
    assert!(refused.contains("ns/0@2..3"), "{refused}");
    let accept = crate::log::embedded::AcceptLost::parse_flag("--accept-journal-loss", "ns/0@2..3").unwrap();
    for flags in [vec![accept], Vec::new()] {
        let journal = Journal::open_accepting(dir.path(), ROOMY, None, flags).await.unwrap();
        let offsets: Vec<u64> = read_all(&journal, "ns", 0, 0).await.into_iter().map(|(offset, _)| offset).collect();
        assert_eq!(offsets, [0, 1, 3, 4], "exactly the lost entry is gone");
        assert!(journal.gap_accepted("ns", 0, 2, 3));
        assert!(!journal.gap_accepted("ns", 0, 1, 3), "entry 1 is there");
        assert!(!journal.gap_accepted("ns", 0, 2, 4), "entry 3 is there");
        let pending = journal.pending_of("ns", 0).await.unwrap().unwrap();
        assert_eq!((pending.start, pending.end), (0, 5));
        assert_eq!(journal.replayed_at_open(), 4);
        assert!(journal.find(b"w2").is_none() && journal.find(b"w3").is_some());
        journal.close().await;
    }
    // Journal objects cannot hold a lane with a gap (a claim stops at it):
    // refused while the gap is not released (review of issue 37), the
    // flag and the remembered acceptance alike.
    let objects = || {
        let store: std::sync::Arc<dyn object_store::ObjectStore> = std::sync::Arc::new(object_store::memory::InMemory::new());
        let objects = super::objects::JournalObjects::new(store, &object_store::path::Path::from("root"));
        Some(ObjectsConfig { objects, node: "n".into(), lease_renew: Duration::from_secs(3600) })
    };
    let refused = Journal::open(dir.path(), ROOMY, objects()).await.err().expect("refused").to_string();
    assert!(refused.contains("lanes and offsets ns/0@2..3") && refused.contains("journal_objects = false"), "{refused}");
    let flag = vec![crate::log::embedded::AcceptLost::parse_flag("--accept-journal-loss", "ns/0@2..3").unwrap()];
    let refused = Journal::open_accepting(dir.path(), ROOMY, objects(), flag).await.err().expect("refused").to_string();
    assert!(refused.contains("keeps a copy in object storage"), "{refused}");
    // Released up to the gap: what is pending starts past it.
    let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
    journal.release_below("ns", 0, 2);
    journal.persist_released().await.unwrap();
    assert_eq!(journal.pending_of("ns", 0).await.unwrap().unwrap().start, 3, "a lost entry is not pending");
    journal.close().await;
}

/// Three entries in lane `ns/0` and one in `ns/1` after them, then the
/// header of lane 0's last entry damaged: refused, naming lane 0's loss
/// from offset 2 on. Its pks, and the range the refusal names.
async fn a_lane_whose_last_entry_lost_its_header(dir: &std::path::Path) -> (Vec<String>, crate::log::embedded::AcceptLost) {
    let in_0: Vec<String> = (0..100).map(|i| format!("k{i}")).filter(|pk| partition_of(pk) == 0).take(3).collect();
    let in_1 = (0..100).map(|i| format!("k{i}")).find(|pk| partition_of(pk) == 1).unwrap();
    let journal = Journal::open(dir, ROOMY, None).await.unwrap();
    for (i, pk) in in_0.iter().enumerate() {
        journal.append("ns", 2, 0, &put(pk, &i.to_string(), &format!("w{i}"))).await.unwrap();
    }
    journal.append("ns", 2, 1, &put(&in_1, "1", "other")).await.unwrap();
    journal.close().await;
    drop(journal);
    flip_frame(dir, 2, IN_HEADER);
    let refused = Journal::open(dir, ROOMY, None).await.err().expect("refused").to_string();
    let named = refused.split("--accept-journal-loss ").nth(1).and_then(|rest| rest.split(':').next()).expect(&refused).to_string();
    assert!(named.starts_with("ns/0@2.."), "{refused}");
    (in_0, crate::log::embedded::AcceptLost::parse_flag("--accept-journal-loss", &named).unwrap())
}

/// Damaged bytes after a lane's last entry (another lane's entry after
/// them): how many of its entries they held, nothing shows. Accepted, the
/// lane goes on past all of them, so no offset a store may have applied is
/// used again, and the next entry is placed after the gap.
#[tokio::test]
async fn a_loss_after_a_lanes_last_entry_is_accepted_and_the_lane_goes_on_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let (in_0, accept) = a_lane_whose_last_entry_lost_its_header(dir.path()).await;
    let to = accept.to;
    assert!(to > 3, "past every offset the damaged bytes could have held: {accept}");
    let journal = Journal::open_accepting(dir.path(), ROOMY, None, vec![accept]).await.unwrap();
    let offset = journal.append("ns", 2, 0, &put(&in_0[0], "\"new\"", "after")).await.unwrap();
    assert_eq!(offset, to, "the lane goes on past the gap");
    assert!(journal.gap_accepted("ns", 0, 2, to));
    let offsets: Vec<u64> = read_all(&journal, "ns", 0, 0).await.into_iter().map(|(offset, _)| offset).collect();
    assert_eq!(offsets, [0, 1, to]);
    journal.close().await;
    let journal = Journal::open(dir.path(), ROOMY, None).await.expect("remembered");
    assert_eq!(journal.append("ns", 2, 0, &put(&in_0[1], "\"newer\"", "later")).await.unwrap(), to + 1);
    journal.close().await;
}

/// Review of issue 37: once a lane's end was settled past an accepted loss,
/// the journal's log takes damage found later before that end as accepted
/// too (it does so for the shared log, whose stores hold what it applied).
/// New damage to an older pending entry (a header flipped, so no frame
/// names it) was then read past without a word: an acknowledged write
/// lost. Now only the ranges the operator named count.
#[tokio::test]
async fn damage_found_after_a_settled_end_is_refused_not_taken_as_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let (in_0, accept) = a_lane_whose_last_entry_lost_its_header(dir.path()).await;
    let to = accept.to;
    {
        let journal = Journal::open_accepting(dir.path(), ROOMY, None, vec![accept]).await.unwrap();
        journal.append("ns", 2, 0, &put(&in_0[0], "\"after\"", "after")).await.unwrap();
        journal.close().await;
    }
    // Entry 1 of lane 0, pending, now damaged in its header.
    flip_frame(dir.path(), 1, IN_HEADER);
    let refused = Journal::open(dir.path(), ROOMY, None).await.err().expect("new damage is refused").to_string();
    assert!(refused.contains(&format!("--accept-journal-loss ns/0@1..{to}")), "{refused}");
}

/// Review of issue 37: a bit flipped in the journal's very last entry (an
/// acknowledged write not yet sequenced) was taken for a torn write and
/// cut without a word. Now it is named, and its flag accepts it.
#[tokio::test]
async fn the_journals_last_entry_damaged_is_named_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let pks: Vec<String> = (0..100).map(|i| format!("k{i}")).filter(|pk| partition_of(pk) == 0).take(5).collect();
    {
        let journal = Journal::open(dir.path(), ROOMY, None).await.unwrap();
        for (i, pk) in pks.iter().enumerate() {
            journal.append("ns", 2, 0, &put(pk, &i.to_string(), &format!("w{i}"))).await.unwrap();
        }
        journal.close_unpersisted().await;
    }
    flip_frame(dir.path(), 4, IN_PAYLOAD);
    let refused = Journal::open(dir.path(), ROOMY, None).await.err().expect("refused, not cut").to_string();
    assert!(refused.contains("--accept-journal-loss ns/0@4..5"), "{refused}");
}
