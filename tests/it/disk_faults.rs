//! Disk faults (issue 37): a node's files damaged while it was stopped —
//! bits flipped, files cut short, as disks and filesystems do — and the node
//! started again. It must come back serving every partition it can rebuild,
//! and no read may ever return a value that was not written.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{self, Tern};
use serde_json::{json, Value};

/// Cuts a tenth of `path` off its end.
fn cut_short(path: &Path) {
    let len = std::fs::metadata(path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len - len / 10).unwrap();
}

/// Flips two bits in every 4 KiB page of `path` past its first 8 KiB (the
/// header): whatever pages the store's tree reaches, some are hit.
fn flip_bits(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let mut at = 8192 + 1000;
    while at < bytes.len() {
        bytes[at] ^= 0b0100_0010;
        at += 4096;
    }
    std::fs::write(path, bytes).unwrap();
}

fn cut_bytes(path: &Path, bytes: u64) {
    let len = std::fs::metadata(path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len - bytes).unwrap();
}

/// A metric's value; the metric must be exported.
async fn metric(t: &Tern, name: &str) -> f64 {
    t.exported_metric(name).await.unwrap_or_else(|| panic!("{name} is not exported"))
}

/// Writes `count` records with pks `k0..` (each value names its write) and
/// remembers each one.
async fn write(t: &Tern, written: &mut BTreeMap<String, Value>, phase: u32, count: usize) {
    for i in 0..count {
        let (pk, value) = (format!("k{i}"), json!({ "i": i, "phase": phase }));
        let (status, body) = t.put(&pk, "", &value).await;
        assert_eq!(status, 200, "{body}");
        written.insert(pk, value);
    }
}

/// Every record reads back as last written: never another value.
async fn every_record_reads_back(t: &Tern, written: &BTreeMap<String, Value>) {
    for (pk, value) in written {
        let (status, body) = t.get(pk, "").await;
        assert_eq!(status, 200, "{pk}: {body}");
        assert_eq!(&body["value"], value, "{pk}");
    }
}

fn damaged_kept(data: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for ns in std::fs::read_dir(data.join("damaged")).into_iter().flatten() {
        let ns = ns.unwrap();
        for file in std::fs::read_dir(ns.path()).unwrap() {
            names.push(format!("{}/{}", ns.file_name().to_string_lossy(), file.unwrap().file_name().to_string_lossy()));
        }
    }
    names.sort();
    names
}

/// One node on the embedded log, snapshots on its own disk (`tern dev`):
/// two partition stores damaged (one cut short, one with flipped bits), one
/// copy of the log's metadata and of the journal's cut. Before issue 37 the
/// node never started again ("DB corrupted: …", "the log is corrupt: … EOF
/// while parsing"); now it sets the two stores aside, rebuilds them from
/// the snapshot and the log, and reads the same state as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_damaged_stores_and_metadata_rebuilds_and_reads_the_same() {
    let data = tempfile::tempdir().unwrap();
    let mut t = Tern::dev(data.path()).await;
    let mut written = BTreeMap::new();
    write(&t, &mut written, 1, 300).await;
    let (status, taken) = t.send(t.client.post(format!("{}/v1/admin/snapshots", t.url)).json(&json!({}))).await;
    assert_eq!(status, 200, "{taken}");
    write(&t, &mut written, 2, 150).await;
    t.wait_caught_up("default").await;
    let before = t.partition_states("default").await;
    assert!(t.terminate().success());

    let stores = data.path().join("stores/default");
    cut_short(&stores.join("00001.redb"));
    flip_bits(&stores.join("00002.redb"));
    cut_bytes(&data.path().join("log/log-meta.json"), 9);
    cut_bytes(&data.path().join("journal/log-meta.json"), 9);

    // `tern check` finds each piece of damage offline and changes nothing.
    let (code, report) = tern_check(data.path());
    assert_eq!(code, 1, "{report}");
    for damaged in ["stores/default/00001.redb", "stores/default/00002.redb"] {
        assert!(report.lines().any(|l| l.starts_with("DAMAGED") && l.contains(damaged)), "{damaged}: {report}");
    }
    assert!(report.lines().any(|l| l.starts_with("ok") && l.contains("stores/default/00003.redb") && l.contains("state hash verifies")), "{report}");
    assert!(report.lines().any(|l| l.contains("log/log-meta.json") && l.contains("one copy verifies")), "{report}");
    assert!(report.contains("2 damaged"), "{report}");

    let t = Tern::dev(data.path()).await;
    t.wait_caught_up("default").await;
    assert_eq!(metric(&t, "tern_store_set_aside_total").await, 2.0);
    let kept = damaged_kept(data.path());
    assert!(kept.len() == 2 && kept[0].starts_with("default/00001.") && kept[1].starts_with("default/00002."), "{kept:?}");
    assert_eq!(t.partition_states("default").await, before, "the same offsets and state hashes as before the damage");
    every_record_reads_back(&t, &written).await;
    for partition in [1, 2] {
        assert_eq!(metric(&t, &format!("tern_partition_rebuilding{{ns=\"default\",partition=\"{partition}\"}}")).await, 0.0);
    }
    // Writes go on, and the copies of the metadata were written again.
    write(&t, &mut written, 3, 20).await;
    every_record_reads_back(&t, &written).await;
    for copy in ["log/log-meta.copy.json", "journal/log-meta.copy.json"] {
        assert!(data.path().join(copy).exists(), "{copy}");
    }
    let mut t = t;
    assert!(t.terminate().success());
    let (code, report) = tern_check(data.path());
    assert_eq!(code, 0, "healed: {report}");
    assert!(report.contains(" 0 damaged") && report.matches("kept for inspection").count() == 2, "{report}");
}

/// `tern check DATA_DIR`: (exit code, what it printed).
fn tern_check(data: &Path) -> (i32, String) {
    let output = std::process::Command::new(common::bin()).args(["check", data.to_str().unwrap()]).output().unwrap();
    (output.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

/// A damaged store whose partition cannot be rebuilt whole (no snapshot,
/// and the log's retention deleted its first entries) is refused, naming
/// what was found and what is missing; every other partition serves, and
/// the refused one answers with an error, never an older value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_store_that_cannot_be_rebuilt_is_refused_and_the_others_serve() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir,
        "--namespace",
        "default:2",
        "--log-segment-bytes",
        "1048576",
        "--log-retention-bytes",
        "1",
        "--log-retention-check-ms",
        "100",
    ];
    let mut t = Tern::spawn(&args, data.path()).await;
    let mut written = BTreeMap::new();
    // 3 MB: three segments, the first two deleted once the stores have them.
    let pad = "x".repeat(10_000);
    for i in 0..300 {
        let (pk, value) = (format!("k{i}"), json!({ "i": i, "pad": pad }));
        let (status, body) = t.put(&pk, "", &value).await;
        assert_eq!(status, 200, "{body}");
        written.insert(pk, value);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (_, body) = t.get_json("/v1/ns/default").await;
        if body["state"][0]["log_start_offset"].as_u64().is_some_and(|start| start > 0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "retention never deleted partition 0's first entries: {body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(t.terminate().success());
    cut_short(&data.path().join("stores/default/00000.redb"));

    let t = Tern::spawn_listening(&args, &[], data.path());
    let unready = t.wait_unready_with("default/0: refused").await.to_string();
    assert!(unready.contains("its store was damaged") && unready.contains("needs log offset 0 but the log starts at"), "{unready}");
    assert_eq!(metric(&t, "tern_store_set_aside_total").await, 1.0);
    // The namespace is still described, the refused partition with why
    // (before, the whole answer was 503: its store could not be read).
    let (status, body) = t.get_json("/v1/ns/default").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"][0]["status"], "refused", "{body}");
    assert!(body["state"][0]["reason"].as_str().unwrap().contains("its store was damaged"), "{body}");
    assert_eq!(body["state"][1]["status"], "serving", "{body}");
    for (pk, value) in &written {
        let (status, body) = t.get(pk, "").await;
        match tern::partitioner::partition_of(pk, 2) {
            0 => assert_eq!((status, common::error_code(&body)), (503, "partition_unavailable"), "{pk}: {body}"),
            _ => assert_eq!((status, &body["value"]), (200, value), "{pk}: {body}"),
        }
    }
}

/// A node of its own replica group on Kafka, sharing the snapshot store.
async fn kafka_node(id: &str, data: &Path, prefix: &str, snapshots: &str) -> Tern {
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let args = [
        "serve",
        "--node-id",
        id,
        "--group",
        id,
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--log",
        &log,
        "--kafka-topic-prefix",
        prefix,
        "--namespace",
        "default:4",
        "--snapshots",
        snapshots,
        "--snapshot-interval-ms",
        "86400000",
        "--snapshot-entries",
        "1000000000",
    ];
    Tern::spawn(&args, data).await
}

/// On Kafka: a replica whose stores and journal metadata were damaged while
/// it was down comes back without a person, rebuilds from the snapshot and
/// the topic, and reaches the same state as the replica that served
/// meanwhile (writes went on in between).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_kafka_replica_rebuilds_while_another_serves() {
    let (a_data, b_data, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let snapshots = format!("file://{}", objects.path().display());
    let prefix = format!("d{}.", rand::random::<u32>());
    let a = kafka_node("disk-a", a_data.path(), &prefix, &snapshots).await;
    let mut b = kafka_node("disk-b", b_data.path(), &prefix, &snapshots).await;
    let mut written = BTreeMap::new();
    write(&a, &mut written, 1, 200).await;
    b.wait_caught_up("default").await;
    let (status, taken) = b.send(b.client.post(format!("{}/v1/admin/snapshots", b.url)).json(&json!({}))).await;
    assert_eq!(status, 200, "{taken}");
    write(&a, &mut written, 2, 100).await;
    b.wait_caught_up("default").await;
    assert!(b.terminate().success());

    let stores = b_data.path().join("stores/default");
    cut_short(&stores.join("00001.redb"));
    flip_bits(&stores.join("00002.redb"));
    cut_bytes(&b_data.path().join("journal/log-meta.json"), 9);
    // The other replica serves meanwhile.
    write(&a, &mut written, 3, 100).await;
    every_record_reads_back(&a, &written).await;

    let b = kafka_node("disk-b", b_data.path(), &prefix, &snapshots).await;
    a.wait_caught_up("default").await;
    b.wait_caught_up("default").await;
    assert_eq!(metric(&b, "tern_store_set_aside_total").await, 2.0);
    assert_eq!(b.partition_states("default").await, a.partition_states("default").await, "the rebuilt replica equals the one that served");
    every_record_reads_back(&b, &written).await;
}

/// The frames of an embedded log segment: (byte position, topic id,
/// partition, offset, payload length), read by their length fields.
fn frames(segment: &Path) -> Vec<(usize, u32, u32, u64, usize)> {
    let bytes = std::fs::read(segment).unwrap();
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut found = Vec::new();
    let mut at = 0;
    while at + 24 <= bytes.len() {
        let len = u32_at(at) as usize;
        found.push((at, u32_at(at + 8), u32_at(at + 12), u64::from_le_bytes(bytes[at + 16..at + 24].try_into().unwrap()), len));
        at += 24 + len;
    }
    found
}

/// The embedded log's id of topic `name`, from its metadata.
fn topic_id(data: &Path, name: &str) -> u32 {
    let meta: Value = serde_json::from_slice(&std::fs::read(data.join("log/log-meta.json")).unwrap()).unwrap();
    let topic = meta["topics"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap();
    topic["id"].as_u64().unwrap() as u32
}

fn newest_segment(data: &Path) -> std::path::PathBuf {
    let mut segments: Vec<_> = std::fs::read_dir(data.join("log/wal")).unwrap().map(|e| e.unwrap().path()).collect();
    segments.sort();
    segments.pop().unwrap()
}

/// The arguments of one node on the embedded log, `default` in 2
/// partitions, with its data in `data`.
fn one_node_args(data: &Path) -> Vec<String> {
    let dir = data.to_str().unwrap();
    ["serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--namespace", "default:2"].map(String::from).to_vec()
}

/// Starts `one_node_args`, writes `count` records, waits until every
/// partition applied them, and stops it: what was written, and each
/// partition's state at the stop.
async fn written_and_stopped(data: &Path, count: usize) -> (BTreeMap<String, Value>, Vec<(i64, String, u64)>) {
    let args = one_node_args(data);
    let mut t = Tern::spawn(&args.iter().map(String::as_str).collect::<Vec<_>>(), data).await;
    let mut written = BTreeMap::new();
    write(&t, &mut written, 1, count).await;
    t.wait_caught_up("default").await;
    let states = t.partition_states("default").await;
    assert!(t.terminate().success());
    (written, states)
}

/// Flips one bit in the middle of the payload of the frame at byte `at`
/// (its payload `len` bytes): its header stays intact.
fn flip_payload_bit(segment: &Path, at: usize, len: usize) {
    let mut bytes = std::fs::read(segment).unwrap();
    bytes[at + 24 + len / 2] ^= 0x10;
    std::fs::write(segment, bytes).unwrap();
}

/// One node, no snapshots: a bit flipped in one acknowledged entry of the
/// embedded log, in the middle of its newest segment, and the store of that
/// entry's partition cut short, so the partition must be rebuilt from the
/// log through the damage. Before, the damaged frame was taken for a torn
/// tail and cut with every entry after it — acknowledged writes dropped
/// without a word. Now the node keeps every frame that verifies, refuses
/// that one partition naming the exact offset lost and the flag that
/// accepts it, and serves the other; with the flag, every record reads back
/// as written but the one lost write, which reads as absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_entry_is_named_exactly_and_one_flag_accepts_its_loss() {
    let data = tempfile::tempdir().unwrap();
    let args = one_node_args(data.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut written, _) = written_and_stopped(data.path(), 200).await;

    let segment = newest_segment(data.path());
    let length = std::fs::metadata(&segment).unwrap().len();
    let default = topic_id(data.path(), "default");
    let of_partition_0: Vec<_> = frames(&segment).into_iter().filter(|f| f.1 == default && f.2 == 0).collect();
    let (at, _, _, offset, len) = of_partition_0[of_partition_0.len() / 2];
    flip_payload_bit(&segment, at, len);
    cut_short(&data.path().join("stores/default/00000.redb"));

    let (code, report) = tern_check(data.path());
    assert_eq!(code, 1, "{report}");
    assert!(report.lines().any(|l| l.starts_with("DAMAGED") && l.contains("log/wal/") && l.contains("are lost")), "{report}");

    let mut t = Tern::spawn_listening(&args, &[], data.path());
    let lost = format!("log offsets {offset}..{} of default/0 are lost", offset + 1);
    let accept = format!("--accept-loss default/0@{offset}..{}", offset + 1);
    let unready = t.wait_unready_with("default/0: refused").await.to_string();
    assert!(unready.contains(&lost) && unready.contains(&accept) && unready.contains("its store was damaged"), "{unready}");
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), length, "no acknowledged entry after the damage was cut");
    for (pk, value) in &written {
        let (status, body) = t.get(pk, "").await;
        match tern::partitioner::partition_of(pk, 2) {
            0 => assert_eq!((status, common::error_code(&body)), (503, "partition_unavailable"), "{pk}: {body}"),
            _ => assert_eq!((status, &body["value"]), (200, value), "{pk}: {body}"),
        }
    }
    assert!(t.terminate().success());

    let accepting: Vec<&str> = args.iter().copied().chain(accept.split(' ')).collect();
    let t = Tern::spawn(&accepting, data.path()).await;
    t.wait_caught_up("default").await;
    let mut missing = Vec::new();
    for (pk, value) in &written {
        let (status, body) = t.get(pk, "").await;
        match status {
            404 => missing.push(pk.clone()),
            _ => assert_eq!((status, &body["value"]), (200, value), "{pk}: {body}"),
        }
    }
    assert!(missing.len() == 1 && tern::partitioner::partition_of(&missing[0], 2) == 0, "exactly the lost write: {missing:?}");
    written.remove(&missing[0]);
    write(&t, &mut written, 2, 10).await;
    every_record_reads_back(&t, &written).await;
}

/// One node: the newest log segment cut short (its last acknowledged
/// entries gone, the cut landing inside a frame) and a bit flipped in an
/// entry before the cut, after the stores applied everything. Before, the
/// node refused every partition whose store was ahead of the log ("the log
/// lost entries this replica applied … move this replica's store away"),
/// advice that on one node throws the data away. Now the log continues at
/// what the stores applied, no offset is used twice, and every record reads
/// as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_short_behind_its_stores_continues_after_them() {
    let data = tempfile::tempdir().unwrap();
    let args = one_node_args(data.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut written, before) = written_and_stopped(data.path(), 200).await;

    let segment = newest_segment(data.path());
    let all = frames(&segment);
    let (at, _, _, _, len) = all[all.len() / 3];
    flip_payload_bit(&segment, at, len);
    cut_short(&segment);

    let t = Tern::spawn(&args, data.path()).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, before, "the stores are as they were");
    every_record_reads_back(&t, &written).await;
    // New writes take offsets past every one used before: none is used twice.
    write(&t, &mut written, 2, 20).await;
    t.wait_caught_up("default").await;
    let after = t.partition_states("default").await;
    for (partition, (old, new)) in before.iter().zip(&after).enumerate() {
        assert!(new.0 > old.0, "partition {partition}: applied {} after {}", new.0, old.0);
    }
    every_record_reads_back(&t, &written).await;
    let mut t = t;
    assert!(t.terminate().success());
    let t = Tern::spawn(&args, data.path()).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, after, "the same after another restart");
    every_record_reads_back(&t, &written).await;
}

/// One node: both copies of the embedded log's metadata damaged, so no
/// entry of the log can be read (frames name their topic only through it).
/// The node refuses to start, saying what is lost and the one command that
/// goes on; started with `--restore`, it moves the log aside, continues
/// each partition from its store, and reads every record as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_whose_metadata_is_lost_restarts_with_one_flag_from_its_stores() {
    let data = tempfile::tempdir().unwrap();
    let args = one_node_args(data.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut written, before) = written_and_stopped(data.path(), 100).await;
    for copy in ["log/log-meta.json", "log/log-meta.copy.json"] {
        flip_bits_anywhere(&data.path().join(copy));
    }

    let output = std::process::Command::new(common::bin()).args(&args).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("the embedded log's metadata is lost") && said.contains("start the node with --restore"), "{said}");

    let restoring: Vec<&str> = args.iter().copied().chain(["--restore"]).collect();
    let mut t = Tern::spawn(&restoring, data.path()).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, before, "each partition continues from its store");
    every_record_reads_back(&t, &written).await;
    assert!(std::fs::read_dir(data.path().join("damaged")).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with("log.")));
    write(&t, &mut written, 2, 10).await;
    assert!(t.terminate().success());
    let t = Tern::spawn(&args, data.path()).await;
    t.wait_caught_up("default").await;
    every_record_reads_back(&t, &written).await;
}

/// Flips one bit in every 64 bytes of `path` (a small file: every field is hit).
fn flip_bits_anywhere(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    for at in (10..bytes.len()).step_by(64) {
        bytes[at] ^= 0b0000_0100;
    }
    std::fs::write(path, bytes).unwrap();
}

/// 1,000 records `k0..` of 3 KB, each naming its write (`marker-000321`):
/// each partition's store is larger than a 1 MiB page cache.
async fn write_marked_records(t: &Tern) -> BTreeMap<String, Value> {
    let mut written = BTreeMap::new();
    for i in 0..1_000 {
        let (pk, value) = (format!("k{i}"), json!({ "marker": format!("marker-{i:06}"), "pad": "x".repeat(3_000) }));
        let (status, body) = t.put(&pk, "", &value).await;
        assert_eq!(status, 200, "{body}");
        written.insert(pk, value);
    }
    written
}

/// Flips the last byte of every copy of `needle` in `path`, in place (the
/// node keeps the file open); false if the file holds none. Every copy,
/// because redb writes pages copy-on-write: a freed page may still hold an
/// older copy of the record, and flipping only the first match could hit
/// that dead page and leave the live one intact (a CI run did exactly that:
/// the record read back unharmed for 60 s).
fn flip_in_place(path: &Path, needle: &[u8]) -> bool {
    use std::os::unix::fs::FileExt;
    let bytes = std::fs::read(path).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut flipped = 0_usize;
    for (at, window) in bytes.windows(needle.len()).enumerate() {
        if window == needle {
            let last = at + needle.len() - 1;
            file.write_at(&[bytes[last] ^ 0x01], last as u64).unwrap();
            flipped += 1;
        }
    }
    flipped > 0
}

/// One node, no snapshots: a record's bytes flipped in its store's file
/// while the node runs (redb checks its pages' checksums only at open).
/// Before, a read of it served the damaged bytes as the record's value
/// (`"marker-000321"` read as `"marker-000320"`), and a write over it went
/// on from a state no other replica had. Now each record carries its own
/// checksum, checked on every read: the read answers 503, the partition
/// leaves service, its store is set aside and rebuilt from the log in
/// place, and it serves again with the same offsets and state hash as
/// before; every read meanwhile got either the written value or 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_damaged_while_the_node_runs_is_never_served_and_is_rebuilt() {
    let data = tempfile::tempdir().unwrap();
    let mut args = one_node_args(data.path());
    // A small page cache, so reads go to the file.
    args.extend(["--store-cache-bytes", "1048576", "--store-fsync-interval-ms", "100"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let t = Tern::spawn(&args, data.path()).await;
    let mut written = write_marked_records(&t).await;
    t.wait_caught_up("default").await;
    let before = t.partition_states("default").await;
    // Past the store's fsync, so the file holds every record.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    let stores = data.path().join("stores/default");
    let damaged_partition = (0..2).find(|p| flip_in_place(&stores.join(format!("{p:05}.redb")), b"marker-000321")).expect("a store holds the record");
    // Every other record read first pushes the damaged page out of the cache.
    let mut answered_503 = false;
    for (pk, value) in &written {
        let (status, body) = t.get(pk, "").await;
        match status {
            200 => assert_eq!(&body["value"], value, "{pk}: never a value that was not written"),
            503 => answered_503 = true,
            other => panic!("{pk}: {other} {body}"),
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, body) = t.get("k321", "").await;
        match status {
            200 => {
                assert_eq!(body["value"], written["k321"]);
                if answered_503 || metric(&t, "tern_store_set_aside_total").await == 1.0 {
                    break;
                }
            }
            503 => answered_503 = true,
            other => panic!("{other} {body}"),
        }
        assert!(std::time::Instant::now() < deadline, "not rebuilt: {body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(answered_503, "the damaged record was found and answered 503");
    assert_eq!(metric(&t, "tern_store_set_aside_total").await, 1.0);
    let kept = damaged_kept(data.path());
    assert!(kept.len() == 1 && kept[0].starts_with(&format!("default/{damaged_partition:05}.")), "{kept:?}");
    t.wait_caught_up("default").await;
    assert!(!stores.join(format!("{damaged_partition:05}.rebuilding")).exists(), "the rebuilding mark goes once caught up");
    assert_eq!(metric(&t, &format!("tern_partition_rebuilding{{ns=\"default\",partition=\"{damaged_partition}\"}}")).await, 0.0);
    assert_eq!(t.partition_states("default").await, before, "the same offsets and state hashes as before the damage");
    every_record_reads_back(&t, &written).await;
    // Writes go on from the rebuilt store, and survive a restart.
    write(&t, &mut written, 2, 20).await;
    every_record_reads_back(&t, &written).await;
    let mut t = t;
    assert!(t.terminate().success());
    let t = Tern::spawn(&args, data.path()).await;
    t.wait_caught_up("default").await;
    assert_eq!(damaged_kept(data.path()).len(), 1, "the rebuilt store is intact: nothing more set aside");
    every_record_reads_back(&t, &written).await;
}

/// One node: a record's bytes flipped in its store's file while the node
/// runs, and nothing reads it. Before, it stayed damaged until a reader,
/// a list or a snapshot met it (a damaged key made point reads miss it
/// for good). The scrub reads every record through at its pace, finds the
/// damage, and the partition is rebuilt in place with the same offsets and
/// state hashes as before; every record reads back as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrub_finds_a_record_damaged_while_no_one_reads_it() {
    let data = tempfile::tempdir().unwrap();
    let mut args = one_node_args(data.path());
    args.extend(
        ["--store-cache-bytes", "1048576", "--store-fsync-interval-ms", "100", "--scrub-interval-ms", "1000", "--scrub-entries-per-second", "100000"]
            .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let t = Tern::spawn(&args, data.path()).await;
    let written = write_marked_records(&t).await;
    t.wait_caught_up("default").await;
    let before = t.partition_states("default").await;
    // Both partitions scrubbed whole and intact, twice (and past the store's fsync).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while metric_or_zero(&t, "tern_scrub_passes_total{outcome=\"intact\"}").await < 4.0 {
        assert!(std::time::Instant::now() < deadline, "the scrub never finished a pass");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(metric(&t, "tern_scrub_passes_total{outcome=\"damaged\"}").await, 0.0, "an intact store is never taken for damaged");
    let stores = data.path().join("stores/default");
    let damaged_partition = (0..2).find(|p| flip_in_place(&stores.join(format!("{p:05}.redb")), b"marker-000321")).expect("a store holds the record");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut flipped_at = std::time::Instant::now();
    while metric_or_zero(&t, "tern_store_set_aside_total").await < 1.0 {
        // The live copy may reach the file after the flip (redb writes a
        // page out when it flushes; on a loaded machine that can be after
        // the passes above): damage it again where it is now.
        if flipped_at.elapsed() >= std::time::Duration::from_secs(3) {
            flip_in_place(&stores.join(format!("{damaged_partition:05}.redb")), b"marker-000321");
            flipped_at = std::time::Instant::now();
        }
        if std::time::Instant::now() >= deadline {
            let text = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
            let lines: Vec<&str> =
                text.lines().filter(|l| l.starts_with("tern_scrub") || l.starts_with("tern_partition_held") || l.starts_with("tern_store")).collect();
            panic!("the scrub never found the damaged record (partition {damaged_partition}): {lines:#?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(metric(&t, "tern_scrub_passes_total{outcome=\"damaged\"}").await, 1.0);
    let kept = damaged_kept(data.path());
    assert!(kept.len() == 1 && kept[0].starts_with(&format!("default/{damaged_partition:05}.")), "{kept:?}");
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, before, "the same offsets and state hashes as before the damage");
    every_record_reads_back(&t, &written).await;
    assert!(metric(&t, "tern_scrub_entries_total").await >= 2_000.0);
    assert!(metric(&t, "tern_scrub_last_round_timestamp_seconds").await > 0.0);
}

/// The newest segment of the journal (`journal/wal`).
fn newest_journal_segment(data: &Path) -> std::path::PathBuf {
    let mut segments: Vec<_> = std::fs::read_dir(data.join("journal/wal")).unwrap().map(|e| e.unwrap().path()).collect();
    segments.sort();
    segments.pop().unwrap()
}

/// Waits until every record reads back as written (journaled writes are
/// answered before they are sequenced), within 30 s.
async fn eventually_reads_back(t: &Tern, written: &BTreeMap<String, Value>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for (pk, value) in written {
        loop {
            let (status, body) = t.get(pk, "").await;
            if status == 200 && &body["value"] == value {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{pk} never read back as written: {status} {body}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Each written record's version as read (its log offset): a write applied
/// twice would read with another.
async fn versions(t: &Tern, written: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut versions = BTreeMap::new();
    for pk in written.keys() {
        let (status, body) = t.get(pk, "").await;
        assert_eq!(status, 200, "{pk}: {body}");
        versions.insert(pk.clone(), body["version"].clone());
    }
    versions
}

/// One node (`tern dev`), journaled writes, all sequenced and applied, then
/// a crash (kill -9: the journal keeps its segment). First the journal's
/// released marks are damaged: its entries are sequenced again and each
/// partition applies a lane's entry once (the marks carry a checksum: a
/// flip that still parses is damage too). Then, after another crash, a bit
/// is flipped in one journaled entry below its lane's released mark: it was
/// applied, so nothing is lost; the segment is read around, not cut, and
/// the journal takes writes after it. Each time the node starts, every record
/// reads back as written, at the version it was first applied at: the
/// copies appended again are dropped, never applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_journal_below_its_released_marks_loses_nothing() {
    let data = tempfile::tempdir().unwrap();
    let mut t = Tern::dev(data.path()).await;
    let mut written = BTreeMap::new();
    for i in 0..60 {
        let (pk, value) = (format!("j{i}"), json!({ "i": i }));
        let (status, body) = t.send(t.client.put(t.kv_url("default", &pk, None) + "?durability=journaled").json(&value)).await;
        assert_eq!(status, 202, "{body}");
        written.insert(pk, value);
    }
    eventually_reads_back(&t, &written).await;
    t.wait_caught_up("default").await;
    let applied_at = versions(&t, &written).await;
    assert!(applied_at.values().all(|v| v.is_u64()), "{applied_at:?}");
    // The sequencer writes the released marks every 200 ms.
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    t.kill9();

    flip_bits_anywhere(&data.path().join("journal/released.json"));
    let mut t = Tern::dev(data.path()).await;
    // Every entry the journal holds appended again, and each copy applied (dropped).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while metric_or_zero(&t, "tern_journal_sequenced_total").await < 60.0 || metric_or_zero(&t, "tern_journal_backlog_entries").await > 0.0 {
        assert!(std::time::Instant::now() < deadline, "the journal's entries were not sequenced again");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    t.wait_caught_up("default").await;
    eventually_reads_back(&t, &written).await;
    assert_eq!(versions(&t, &written).await, applied_at, "entries sequenced again are applied once");
    // The sequencer writes the released marks every 200 ms.
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    t.kill9();

    let segment = newest_journal_segment(data.path());
    let frames = frames(&segment);
    assert!(frames.len() >= 60, "the crash kept the journal's entries: {} frames", frames.len());
    let (at, _, _, _, len) = frames[frames.len() / 2];
    flip_payload_bit(&segment, at, len);
    let segment_bytes = std::fs::metadata(&segment).unwrap().len();
    let t = Tern::dev(data.path()).await;
    assert!(std::fs::metadata(&segment).unwrap().len() >= segment_bytes, "read around, not cut at the damage");
    t.wait_caught_up("default").await;
    every_record_reads_back(&t, &written).await;
    assert_eq!(versions(&t, &written).await, applied_at, "a damaged entry below its released mark was applied: nothing lost");
    // The journal goes on taking writes past the damage.
    for i in 60..70 {
        let (pk, value) = (format!("j{i}"), json!({ "i": i }));
        let (status, body) = t.send(t.client.put(t.kv_url("default", &pk, None) + "?durability=journaled").json(&value)).await;
        assert_eq!(status, 202, "{body}");
        written.insert(pk, value);
    }
    eventually_reads_back(&t, &written).await;
}

/// A metric's value, 0 while it is not exported yet (counted nothing).
async fn metric_or_zero(t: &Tern, name: &str) -> f64 {
    t.exported_metric(name).await.unwrap_or(0.0)
}

/// On Kafka with its broker down: twenty journaled writes to one partition
/// are acknowledged (202) and wait in the journal; the node is killed and a
/// bit flipped in the eleventh entry. Its restart is refused, naming exactly
/// that lane offset and the one flag that accepts its loss (before, the
/// only way on was to move the journal aside, losing all twenty). With the
/// flag, the nineteen others are applied — those after the gap too, which
/// every replica held back for ever as ahead of their lane before the gap
/// was carried in the log — the lost one reads as never written, the lane
/// takes new writes, and a start without the flag goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_journaled_write_is_named_and_one_flag_accepts_exactly_it() {
    let broker = crate::common::brokers::Brokers::start(1);
    let data = tempfile::tempdir().unwrap();
    let (log, prefix) = (format!("kafka://{}", broker.bootstrap), format!("jl{}.", rand::random::<u32>()));
    let dir = data.path().to_str().unwrap();
    let args = [
        "serve",
        "--node-id",
        "lost-entry",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir,
        "--log",
        &log,
        "--kafka-topic-prefix",
        &prefix,
        "--namespace",
        "default:1",
        "--ripcord",
        "true",
    ];
    let mut t = Tern::spawn(&args, data.path()).await;
    assert_eq!(t.put("before", "", &json!(0)).await.0, 200);
    broker.kafka(&["stop-node", "1"]);
    let mut written = BTreeMap::new();
    for i in 0..20 {
        let (pk, value) = (format!("j{i:02}"), json!({ "i": i }));
        let (status, body) = t.send(t.client.put(t.kv_url("default", &pk, None) + "?durability=journaled").json(&value)).await;
        assert_eq!(status, 202, "journaled while the log is down: {body}");
        written.insert(pk, value);
    }
    t.kill9();

    let segment = newest_journal_segment(data.path());
    let &(at, _, _, _, len) = frames(&segment).iter().find(|frame| frame.3 == 10).expect("the journal holds its eleventh entry");
    flip_payload_bit(&segment, at, len);
    broker.kafka(&["start-node", "1"]);
    let output = std::process::Command::new(common::bin()).args(args).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("lanes and offsets default/0@10..11") && said.contains("restart with --accept-journal-loss default/0@10..11:"), "{said}");

    let accepting: Vec<&str> = args.iter().copied().chain(["--accept-journal-loss", "default/0@10..11"]).collect();
    let mut t = Tern::spawn(&accepting, data.path()).await;
    let lost = written.remove("j10").unwrap();
    // The first read waits out the client's reconnection to the restarted broker.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while t.get("j19", "").await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "the journal's entries after the gap were never applied");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    eventually_reads_back(&t, &written).await;
    t.wait_caught_up("default").await;
    let (status, body) = t.get("j10", "").await;
    assert_eq!(status, 404, "the lost write ({lost}) reads as never written: {body}");
    for i in 20..25 {
        let (pk, value) = (format!("j{i:02}"), json!({ "i": i }));
        let (status, body) = t.send(t.client.put(t.kv_url("default", &pk, None) + "?durability=journaled").json(&value)).await;
        assert_eq!(status, 202, "{body}");
        written.insert(pk, value);
    }
    eventually_reads_back(&t, &written).await;
    let (_, ns) = t.get_json("/v1/ns/default").await;
    let records: u64 = ns["state"].as_array().unwrap().iter().map(|p| p["records"].as_u64().unwrap()).sum();
    assert_eq!(records, written.len() as u64 + 1, "every other write applied once (and the one before): {ns}");
    assert!(t.terminate().success());

    // Accepted once: a start without the flag goes on.
    let t = Tern::spawn(&args, data.path()).await;
    t.wait_caught_up("default").await;
    every_record_reads_back(&t, &written).await;
    assert_eq!(t.get("j10", "").await.0, 404);
}

/// The segment file of `topic`'s partition `partition` on broker 1 of `broker`.
fn broker_segment(broker: &crate::common::brokers::Brokers, topic: &str, partition: u32) -> std::path::PathBuf {
    let dir = broker.dir.path().join("data-1").join(format!("{topic}-{partition}"));
    let mut logs: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "log")).collect();
    logs.sort();
    logs.pop().unwrap_or_else(|| panic!("a segment in {}", dir.display()))
}

/// A record damaged on a Kafka broker's disk (a digit of its value changed
/// in the partition's segment under the running broker, which checks a
/// batch's CRC when it takes it, not when it serves it). Before, the
/// consumer did not check (librdkafka's `check.crcs` is off by default): a
/// new replica applied the damaged entry and served a value never written
/// (`marker-000091` for a key written `marker-000021`). Now the batch fails
/// its CRC32C check: the replica applies every entry before it, never the
/// damaged one nor any after it (it is fetched again, elsewhere first, never
/// passed), says so in a metric, and the other partition serves all of its.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_batch_damaged_on_a_broker_is_never_applied_or_passed() {
    let broker = crate::common::brokers::Brokers::start(1);
    let (log, prefix) = (format!("kafka://{}", broker.bootstrap), format!("crc{}.", rand::random::<u32>()));
    let node = |id: &'static str, data: &Path| {
        let dir = data.to_str().unwrap().to_string();
        let args: Vec<String> = [
            "serve",
            "--node-id",
            id,
            "--group",
            id,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            &dir,
            "--log",
            &log,
            "--kafka-topic-prefix",
            &prefix,
            "--namespace",
            "default:2",
        ]
        .map(String::from)
        .to_vec();
        args
    };
    let a_data = tempfile::tempdir().unwrap();
    let a_args = node("a", a_data.path());
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Tern::spawn(&a_args, a_data.path()).await;
    let mut written = BTreeMap::new();
    let mut first_position = None;
    for i in 0..40 {
        let (pk, value) = (format!("k{i:03}"), json!({ "marker": format!("marker-{i:06}") }));
        let (status, body) = a.put(&pk, "", &value).await;
        assert_eq!(status, 200, "{body}");
        if tern::partitioner::partition_of(&pk, 2) == 0 {
            first_position.get_or_insert_with(|| body["position"].as_str().unwrap().to_string());
        }
        written.insert(pk, value);
    }
    a.wait_caught_up("default").await;
    assert!(a.terminate().success());

    // The middle record of partition 0, by write order.
    let of_0: Vec<&String> = written.keys().filter(|pk| tern::partitioner::partition_of(pk, 2) == 0).collect();
    let damaged_pk = of_0[of_0.len() / 2].clone();
    let marker = written[&damaged_pk]["marker"].as_str().unwrap().to_string();
    let segment = broker_segment(&broker, &format!("{prefix}default"), 0);
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.windows(marker.len()).position(|w| w == marker.as_bytes()).expect("the value is in the broker's segment");
    bytes[at + marker.len() - 2] = b'9';
    std::fs::write(&segment, &bytes).unwrap();
    let never_written = format!("{}9{}", &marker[..marker.len() - 2], &marker[marker.len() - 1..]);

    let b_data = tempfile::tempdir().unwrap();
    let args = node("b", b_data.path());
    let mut b = Tern::spawn_listening(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[], b_data.path());
    // Until the reader meets the damaged batch (or, as before, goes past it).
    let before_damage = of_0.iter().take_while(|pk| ***pk != damaged_pk).count() as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while metric_or_zero(&b, "tern_kafka_batches_damaged_total").await < 1.0 {
        let (status, body) = b.get_json("/v1/ns/default").await;
        if status == 200 && body["state"][0]["applied_entries"].as_u64().is_some_and(|applied| applied > before_damage) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the reader never reached the damaged batch");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Past a stuck reader's verdict (5 s): opened again, still never passed.
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    for (pk, value) in &written {
        let (status, body) = b.get(pk, "").await;
        assert_ne!(body["value"]["marker"], json!(never_written), "{pk}: a value never written was served");
        match tern::partitioner::partition_of(pk, 2) {
            1 => assert_eq!((status, &body["value"]), (200, value), "{pk}: {body}"),
            _ => assert!(status != 200 || &body["value"] == value, "{pk}: {status} {body}"),
        }
    }
    let states = b.partition_states("default").await;
    assert_eq!(states[0].2, before_damage, "partition 0 applied exactly the entries before the damaged one: {states:?}");
    assert!(metric_or_zero(&b, "tern_kafka_batches_damaged_total").await >= 1.0, "the damaged batch is counted");
    assert!(metric_or_zero(&b, "tern_log_readers_reopened_total").await >= 1.0, "the reader was opened again");
    // Serving its last state, the partition is shown blocked (issue 37:
    // before, `/readyz` said ready and no gauge named it); the other serves.
    let (status, body) = b.get_json("/readyz").await;
    assert_eq!(status, 503, "{body}");
    let problems = body["error"]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{body}");
    let problem = problems[0].as_str().unwrap();
    // (A node that never reached the log's end is catching up, and blocked.)
    assert!(problem.starts_with("default/0: ") && problem.contains("blocked: a Kafka record batch of default/0 at offset"), "{problem}");
    assert!(problem.contains("failed its CRC32C check"), "{problem}");
    assert_eq!(metric(&b, "tern_partition_blocked{ns=\"default\",partition=\"0\"}").await, 1.0);
    assert_eq!(metric(&b, "tern_partition_blocked{ns=\"default\",partition=\"1\"}").await, 0.0);

    // A watch replaying that history from the log (node a restarted: its
    // ring is empty) never gets the damaged value either: the readers that
    // replay history check CRCs too (review of issue 37: they did not).
    let a = Tern::spawn(&a_args, a_data.path()).await;
    let from: String = percent_encoding::utf8_percent_encode(&first_position.unwrap(), percent_encoding::NON_ALPHANUMERIC).to_string();
    let url = format!("{}/v1/ns/default/watch?pk={damaged_pk}&mode=log&from={from}", a.url);
    let mut replay = crate::common::watch::Sse::connect(&a.client, &url, None).await;
    for _ in 0..20 {
        let Some(event) = replay.next_change(std::time::Duration::from_secs(5)).await else { break };
        assert!(!event.data.contains(&never_written), "a watch replayed a value never written: {event:?}");
    }
    drop(replay);

    // No broker holds an intact copy: the operator deletes the records up
    // to past the damaged batch (`kafka-delete-records`). The replica
    // behind it is refused, naming exactly the offset it would skip and the
    // one flag that accepts it (before, it was refused for good: no
    // snapshot reaches past a batch no replica could read, and
    // `--accept-loss` was ignored on Kafka).
    let damaged_offset = states[0].0 as u64 + 1;
    delete_records_below(&broker.bootstrap, &format!("{prefix}default"), 0, damaged_offset + 1).await;
    let flag = format!("default/0@{damaged_offset}..{}", damaged_offset + 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (_, ns) = b.get_json("/v1/ns/default").await;
        let p = &ns["state"][0];
        if p["status"] == "refused" {
            let reason = p["reason"].as_str().unwrap();
            assert!(reason.contains(&format!("restart with --accept-loss {flag}")), "{reason}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the replica behind the deleted records was never refused: {p}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(b.terminate().success());
    // With the flag it goes on past exactly that offset: every other record
    // reads as written, the lost one as never written, new writes apply.
    let mut accepting = args.clone();
    accepting.extend(["--accept-loss".to_string(), flag.clone()]);
    let mut b = Tern::spawn(&accepting.iter().map(String::as_str).collect::<Vec<_>>(), b_data.path()).await;
    b.wait_caught_up("default").await;
    for (pk, value) in &written {
        let (status, body) = b.get(pk, "").await;
        match *pk == damaged_pk {
            true => assert_eq!(status, 404, "{pk}: the lost write reads as never written: {body}"),
            false => assert_eq!((status, &body["value"]), (200, value), "{pk}: {body}"),
        }
    }
    assert_eq!(metric(&b, "tern_log_offsets_accepted_lost_total").await, 1.0);
    assert_eq!(metric(&b, "tern_partition_blocked{ns=\"default\",partition=\"0\"}").await, 0.0);
    let (status, body) = b.put(&damaged_pk, "", &json!("after the loss")).await;
    assert_eq!(status, 200, "{body}");
    assert!(b.terminate().success());
    // A start without the flag goes on: the store is past the gap.
    let b = Tern::spawn(&args.iter().map(String::as_str).collect::<Vec<_>>(), b_data.path()).await;
    b.wait_caught_up("default").await;
    assert_eq!(b.get(&damaged_pk, "").await.1["value"], json!("after the loss"));
}

/// What `kafka-delete-records` does: partition `partition` of `topic` starts at `offset`.
async fn delete_records_below(bootstrap: &str, topic: &str, partition: i32, offset: u64) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let mut below = rdkafka::TopicPartitionList::new();
    below.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset as i64)).unwrap();
    admin.delete_records(&below, &AdminOptions::new()).await.unwrap();
}
