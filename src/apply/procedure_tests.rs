//! Procedures over a real partition store, through the apply engine's own
//! entry point (`apply::batch::apply_entries_with`): deployment as a log
//! entry, calls in log order with their effects in the same transaction,
//! dead letters, fuel, memory, the sandbox, private state, timers in log time, and the
//! determinism every replica relies on (equal state hashes however the
//! entries were batched and however often the VM was reloaded).

use bytes::Bytes;

use super::batch::apply_entries_with;
use crate::codec::{encode_at, Mutation, Op, OpKind};
use crate::log::LogRecord;
use crate::partition::Outcome;
use crate::procedure::outbox::OutboxMessage;
use crate::procedure::Procedures;
use crate::store::{PartitionStore, StoreReader};

const NS: &str = "t";

fn store() -> (tempfile::TempDir, PartitionStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(&dir.path().join("p"), 1, 1 << 20).unwrap();
    (dir, store)
}

fn entry(offset: u64, time_ms: u64, ops: Vec<Op>) -> LogRecord {
    LogRecord::entry(offset, Bytes::from(encode_at(&Mutation { ops, ..Default::default() }, time_ms)))
}

fn put(pk: &str, value: &str) -> Op {
    Op { pk: pk.into(), sk: String::new(), kind: OpKind::Put(Bytes::from(value.to_string())), condition: None }
}

fn deploy_op(name: &str, definition: serde_json::Value) -> Op {
    Op { pk: String::new(), sk: name.into(), kind: OpKind::Procedure(Bytes::from(definition.to_string())), condition: None }
}

/// A definition of `module` (a .wasm file's bytes, or WebAssembly text).
fn wasm(module: &[u8]) -> serde_json::Value {
    use base64::Engine as _;
    serde_json::json!({"runtime": "wasm", "module": base64::engine::general_purpose::STANDARD.encode(module)})
}

/// The test guests, built from `examples/procedures/assembly/` by its
/// `build.sh` (scripts/test.sh checks they match a fresh build).
const COUNTER: &[u8] = include_bytes!("../../examples/procedures/build/counter.wasm");
const TIMERS: &[u8] = include_bytes!("../../examples/procedures/build/timers.wasm");

/// A module that misbehaves on request: the input key's first byte says how.
const SANDBOX: &str = r#"(module
  (import "tern" "put" (func $put (param i32 i32 i32 i32 i32 i32)))
  (import "tern" "get" (func $get (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "tern" "emit" (func $emit (param i32 i32 i32 i32 i32 i32)))
  (import "tern" "partition" (func $partition (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "ok1.settingsnot jsonbad topic")
  (func (export "input") (param i32) (result i32) (i32.const 1024))
  (func $recurse (call $recurse))
  (func (export "on_record") (param $kl i32) (param $sl i32) (param $vl i32) (param $op i32) (param $ts i64) (param $off i64)
    (local $c i32)
    (local.set $c (i32.load8_u (i32.const 1024)))
    (if (i32.eq (local.get $c) (i32.const 108)) (then (loop $l (br $l))))
    (if (i32.eq (local.get $c) (i32.const 109)) (then (drop (memory.grow (i32.const 1000)))))
    (if (i32.eq (local.get $c) (i32.const 114)) (then (call $recurse)))
    (if (i32.eq (local.get $c) (i32.const 117)) (then (unreachable)))
    (if (i32.eq (local.get $c) (i32.const 106)) (then (call $put (i32.const 0) (i32.const 2) (i32.const 0) (i32.const 0) (i32.const 12) (i32.const 8))))
    (if (i32.eq (local.get $c) (i32.const 115)) (then (call $put (i32.const 3) (i32.const 9) (i32.const 0) (i32.const 0) (i32.const 2) (i32.const 1))))
    (if (i32.eq (local.get $c) (i32.const 111)) (then (drop (call $get (i32.const 70000) (i32.const 2) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)))))
    (if (i32.eq (local.get $c) (i32.const 116)) (then (call $emit (i32.const 20) (i32.const 9) (i32.const 2) (i32.const 1) (i32.const 0) (i32.const -1))))
    (if (i32.eq (local.get $c) (i32.const 102)) (then (call $put (i32.const 0) (i32.const 2) (i32.const 0) (i32.const 0) (i32.const 2) (i32.const 1))))
  )
)"#;

/// Applies `entries` in batches of the given sizes with one `Procedures`
/// (as one apply loop would), returning the outcomes.
fn apply(store: &PartitionStore, procedures: &mut Procedures, entries: &[LogRecord]) -> Vec<(u64, Outcome)> {
    let outcomes = store.apply(false, |tx| apply_entries_with(tx, entries, 0, 1, procedures, &mut |_, _| {})).unwrap();
    procedures.in_step(store.read().unwrap().state().unwrap().applied_next);
    outcomes
}

fn value(reader: &StoreReader, pk: &str) -> Option<serde_json::Value> {
    reader.get(pk, "").unwrap().map(|r| serde_json::from_slice(&r.value).unwrap())
}

fn outbox(reader: &StoreReader) -> Vec<(u64, u32, OutboxMessage)> {
    reader
        .outbox_from(0, 0, 10_000, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.offset, e.index, OutboxMessage::decode(&e.message).unwrap()))
        .collect()
}

#[test]
fn a_deployed_procedure_runs_on_each_write_in_the_same_transaction() {
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let entries = vec![
        entry(0, 1_000, vec![put("in/before", "1")]),
        entry(1, 2_000, vec![deploy_op("counter", wasm(COUNTER))]),
        entry(2, 3_000, vec![put("in/a", "\"x\""), put("in/b", "2")]),
        entry(3, 2_500, vec![put("other", "3")]),
        entry(4, 4_000, vec![put("in/c", "\"boom\"")]),
    ];
    let outcomes = apply(&store, &mut procedures, &entries);
    assert!(outcomes.iter().all(|(_, o)| *o == Outcome::Applied), "{outcomes:?}");
    let reader = store.read().unwrap();
    // Not the write before the deployment; both ops of offset 2; not the failed call's.
    assert_eq!(value(&reader, "count"), Some(serde_json::json!(2)));
    assert_eq!(reader.procedure_state("counter", b"seen").unwrap(), Some(2i32.to_le_bytes().to_vec()), "private state, bytes");
    assert_eq!(reader.get("count", "").unwrap().unwrap().version, 2, "written at the input's offset");
    // Log time never goes back (offset 3 carried 2,500 after 3,000).
    assert_eq!(reader.log_time_ms().unwrap(), 4_000);
    let out = outbox(&reader);
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!((out[0].0, out[0].1, out[1].0, out[1].1), (2, 0, 2, 1), "ids are (offset, index)");
    assert_eq!(out[0].2.topic, "t.seen");
    assert_eq!(out[0].2.key.as_deref(), Some(&b"in/a"[..]));
    let first: serde_json::Value = serde_json::from_slice(&out[0].2.value).unwrap();
    assert_eq!(first, serde_json::json!({"key": "in/a", "v": "x", "n": 1, "now": 3000}));
    // The failed call: its put and emit are gone; one dead letter with the reason.
    let dead: serde_json::Value = serde_json::from_slice(&out[2].2.value).unwrap();
    assert_eq!(out[2].2.topic, "t.counter.dead");
    assert_eq!((dead["offset"].as_u64(), dead["key"].as_str(), dead["value"].as_str()), (Some(4), Some("in/c"), Some("\"boom\"")));
    assert!(dead["reason"].as_str().unwrap().starts_with("aborted: asked to fail"), "{dead}");
    assert_eq!(dead["version"], 1, "the version is the deploy entry's offset in partition 0");
}

/// A source topic can carry records far larger than Tern's own writes. A
/// dead letter that embedded one whole (JSON escapes a control byte as six)
/// was larger than any message the publisher sends: it could never be
/// published, and held every output of its partition behind it. (Failed
/// before the bound: a dead letter of 56,852,681 bytes.)
#[test]
fn a_dead_letter_of_a_huge_input_is_cut_to_its_bound_and_says_so() {
    use crate::procedure::{DEAD_LETTER_BYTES_MAX, DEAD_LETTER_KEY_BYTES_MAX, DEAD_LETTER_VALUE_BYTES_MAX};
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    // 'u': the sandbox traps (or the input does not fit its memory): a dead letter either way.
    let key = format!("u{}", "\u{1}".repeat(DEAD_LETTER_KEY_BYTES_MAX * 2));
    let value = "\u{1}".repeat(DEAD_LETTER_VALUE_BYTES_MAX * 9);
    let foreign = |offset: u64, key: &str, value: &str| LogRecord {
        offset,
        payload: Bytes::from(value.to_string()),
        foreign: Some(Box::new(crate::log::ForeignRecord { key: Some(Bytes::from(key.to_string())), headers: Vec::new(), timestamp_ms: 2_000 })),
        appended_ms: None,
    };
    let entries =
        vec![entry(0, 1_000, vec![deploy_op("q", wasm(SANDBOX.as_bytes()))]), foreign(1, &key, &value), foreign(2, "u-small", r#""\u0001""#)];
    let outcomes = apply(&store, &mut procedures, &entries);
    assert!(outcomes.iter().all(|(_, o)| *o == Outcome::Applied), "{outcomes:?}");
    let out = outbox(&store.read().unwrap());
    assert_eq!(out.len(), 2, "{:?}", out.iter().map(|o| o.2.value.len()).collect::<Vec<_>>());
    let (cut, whole) = (&out[0].2, &out[1].2);
    assert_eq!(cut.topic, "t.q.dead");
    let bytes = cut.value.len() + cut.key.as_ref().map_or(0, Vec::len);
    assert!(bytes <= DEAD_LETTER_BYTES_MAX, "a dead letter of {bytes} bytes");
    assert_eq!(cut.key.as_deref(), Some(&key.as_bytes()[..DEAD_LETTER_KEY_BYTES_MAX]), "the message key: the input's, cut");
    let dead: serde_json::Value = serde_json::from_slice(&cut.value).unwrap();
    assert_eq!(dead["value"].as_str(), Some(&value[..DEAD_LETTER_VALUE_BYTES_MAX]));
    assert_eq!((dead["value_bytes"].as_u64(), dead["value_truncated"].as_bool()), (Some(value.len() as u64), Some(true)));
    assert_eq!(dead["key"].as_str(), Some(&key[..DEAD_LETTER_KEY_BYTES_MAX]));
    assert_eq!((dead["key_bytes"].as_u64(), dead["key_truncated"].as_bool()), (Some(key.len() as u64), Some(true)));
    // One within the bounds is whole and says nothing of cutting.
    let dead: serde_json::Value = serde_json::from_slice(&whole.value).unwrap();
    assert_eq!((dead["key"].as_str(), dead["value"].as_str()), (Some("u-small"), Some(r#""\u0001""#)));
    for field in ["key_bytes", "key_truncated", "value_bytes", "value_truncated"] {
        assert!(dead.get(field).is_none(), "{field} in {dead}");
    }
}

/// With dead letters of up to 7 MiB, a count of outbox messages bounds no
/// memory: a read stops at its bytes too (the first message always comes,
/// so a read never stalls), and counting copies nothing.
#[test]
fn outbox_reads_stop_at_their_bytes_and_counts_copy_no_message() {
    let (_dir, store) = store();
    store
        .apply(false, |tx| {
            for index in 0..5u32 {
                tx.put_outbox(7, index, &vec![b'x'; 1_000])?;
            }
            tx.put_outbox(8, 0, &vec![b'y'; 5_000])
        })
        .unwrap();
    let reader = store.read().unwrap();
    let ids = |entries: Vec<crate::store::OutboxEntry>| entries.iter().map(|e| (e.offset, e.index)).collect::<Vec<_>>();
    assert_eq!(ids(reader.outbox_from(7, 0, 100, 2_999).unwrap()), [(7, 0), (7, 1)], "what fits 2,999 bytes");
    assert_eq!(ids(reader.outbox_from(7, 0, 100, 3_000).unwrap()), [(7, 0), (7, 1), (7, 2)], "exactly 3,000");
    assert_eq!(ids(reader.outbox_from(7, 0, 2, usize::MAX).unwrap()), [(7, 0), (7, 1)], "the count bounds too");
    assert_eq!(ids(reader.outbox_from(7, 4, 100, 0).unwrap()), [(7, 4)], "the first always comes");
    assert_eq!(ids(reader.outbox_from(8, 0, 100, 10).unwrap()), [(8, 0)], "one larger than the bound alone");
    assert_eq!(ids(reader.outbox_from(8, 1, 100, usize::MAX).unwrap()), [], "nothing past the end");
    assert_eq!(reader.outbox_count_from(7, 3, 100).unwrap(), 3);
    assert_eq!(reader.outbox_count_from(7, 0, 4).unwrap(), 4, "counted up to its bound");
    assert_eq!((reader.outbox_len(100).unwrap(), reader.outbox_count_from(9, 0, 100).unwrap()), (6, 0));
    assert_eq!(reader.outbox_oldest_offset().unwrap(), Some(7));
    let (_empty_dir, empty) = self::store();
    assert_eq!(empty.read().unwrap().outbox_oldest_offset().unwrap(), None);
}

#[test]
fn equal_state_hashes_however_batched_and_however_often_the_vm_is_reloaded() {
    equal_state_hashes_with(wasm(COUNTER));
    // Issue 36, defect 1: with fuel near what a call takes, a reused
    // instance (its collector's state grown by earlier calls) ran out where
    // a fresh one did not, so a replica that restarted mid-way dead-lettered
    // other offsets. Failed before calls got fresh instances.
    let mut tight = wasm(COUNTER);
    tight["fuel_per_record"] = serde_json::json!(30_000);
    equal_state_hashes_with(tight);
}

fn equal_state_hashes_with(definition: serde_json::Value) {
    let mut entries = vec![entry(0, 10, vec![deploy_op("counter", definition)])];
    entries.extend((1..60).map(|i| entry(i, 10 + i, vec![put(&format!("in/{}", i % 7), if i % 13 == 0 { "\"boom\"" } else { "1" })])));
    let run = |chunks: &[usize], reload_every_batch: bool| {
        let (_dir, store) = store();
        let mut procedures = Procedures::new(NS, 0);
        let mut start = 0;
        for &len in chunks {
            if reload_every_batch {
                // A replica that restarted: a fresh VM, loaded from the store.
                procedures = Procedures::new(NS, 0);
            }
            apply(&store, &mut procedures, &entries[start..start + len]);
            start += len;
        }
        let reader = store.read().unwrap();
        (reader.state().unwrap().state_hash, outbox(&reader))
    };
    let one = run(&[60], false);
    assert_eq!(one.1.len(), 59);
    assert_eq!(run(&[1, 1, 20, 38], false), one);
    assert_eq!(run(&[3, 17, 40], true), one);
}

#[test]
fn bad_deployments_are_skipped_alike_and_older_versions_do_not_replace_newer() {
    let (_dir, store) = store();
    // Partition 1: its deployments carry partition 0's version.
    let mut procedures = Procedures::new(NS, 1);
    let entries = vec![
        entry(0, 1, vec![deploy_op("bad name", wasm(COUNTER))]),
        entry(1, 1, vec![deploy_op("p", wasm(b"\0asm garbage"))]),
        entry(
            2,
            1,
            vec![deploy_op("p", wasm(br#"(module (memory (export "memory") 1) (func (export "input") (param i32) (result i32) (i32.const 0)))"#))],
        ),
        entry(
            3,
            1,
            vec![deploy_op("p", wasm(br#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))"#))],
        ),
        entry(4, 1, vec![deploy_op("p", serde_json::json!({"runtime": "wasm"}))]),
        entry(5, 1, vec![deploy_op("p", wasm(SANDBOX.as_bytes()))]),
        // An entry without a version is versioned by its offset; one that names a version (older than 5 here) keeps it.
        entry(6, 1, vec![deploy_op("p", serde_json::json!({"runtime": "wasm", "module": wasm(COUNTER)["module"], "version": 3}))]),
        entry(7, 1, vec![put("f", "1")]),
    ];
    let outcomes = apply(&store, &mut procedures, &entries);
    for (offset, expected) in [
        (0, "letters, digits"),
        (1, "not a valid WebAssembly module"),
        (2, "does not export \"on_record\""),
        (3, "wasi_snapshot_preview1.fd_write"),
        (4, "module is empty"),
    ] {
        match &outcomes[offset].1 {
            Outcome::Skipped(e) => assert!(e.to_string().contains(expected), "{offset}: {e}"),
            other => panic!("{offset}: {other:?}"),
        }
    }
    let reader = store.read().unwrap();
    assert_eq!(value(&reader, "ok"), Some(serde_json::json!(1)), "the sandbox module (version 5) runs, not the counter (3)");
    assert_eq!(reader.procedure_versions("p").unwrap().iter().map(|(v, _)| *v).collect::<Vec<_>>(), vec![5]);
}

#[test]
fn partition_zero_versions_a_deployment_by_its_offset_whatever_it_carries() {
    // Before the fix, a deploy entry carrying u64::MAX pinned its procedure
    // in partition 0 for good: no later deployment was newer.
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let pinned = serde_json::json!({"runtime": "wasm", "module": wasm(SANDBOX.as_bytes())["module"], "version": u64::MAX});
    let entries = vec![entry(0, 1, vec![deploy_op("p", pinned)]), entry(1, 1, vec![deploy_op("p", wasm(COUNTER))])];
    apply(&store, &mut procedures, &entries);
    let reader = store.read().unwrap();
    assert_eq!(
        reader.procedure_versions("p").unwrap().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        vec![0, 1],
        "the later deployment replaced the pinned one"
    );
}

#[test]
fn a_deployment_naming_another_namespaces_topics_is_skipped_alike() {
    // A definition with an output or dead-letter topic outside `<ns>.` (a
    // foreign producer's entry, or one written before the API checked it)
    // is refused by every replica: no procedure runs, nothing is published there.
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let module = wasm(COUNTER)["module"].clone();
    let entries = vec![
        entry(0, 1, vec![deploy_op("p", serde_json::json!({"runtime": "wasm", "module": module, "outputs": {"o": "tern.victim"}}))]),
        entry(1, 1, vec![deploy_op("q", serde_json::json!({"runtime": "wasm", "module": module, "dead_letter_topic": "tern._src.victim.t"}))]),
    ];
    let outcomes = apply(&store, &mut procedures, &entries);
    for (offset, outcome) in outcomes {
        match outcome {
            Outcome::Skipped(e) => assert!(e.to_string().contains("is not namespace"), "{offset}: {e}"),
            other => panic!("{offset}: {other:?}"),
        }
    }
    assert!(store.read().unwrap().procedure_versions("p").unwrap().is_empty());
}

#[test]
fn fuel_memory_and_the_sandbox_bound_a_call_alike_on_every_replica() {
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let mut definition = wasm(SANDBOX.as_bytes());
    definition["fuel_per_record"] = serde_json::json!(1_000_000);
    definition["memory_bytes"] = serde_json::json!(4 << 20);
    let cases = ["loop", "memory", "recurse", "unreachable", "json", "settings", "outside", "topic", "fine"];
    let mut entries = vec![entry(0, 1, vec![deploy_op("s", definition)])];
    entries.extend(cases.iter().enumerate().map(|(i, key)| entry(i as u64 + 1, 1, vec![put(key, "1")])));
    apply(&store, &mut procedures, &entries);
    let reader = store.read().unwrap();
    let reasons: Vec<(String, String)> = outbox(&reader)
        .into_iter()
        .map(|(_, _, m)| {
            let v: serde_json::Value = serde_json::from_slice(&m.value).unwrap();
            (v["key"].as_str().unwrap().to_string(), v["reason"].as_str().unwrap().to_string())
        })
        .collect();
    let expect = [
        ("loop", "fuel exhausted"),
        ("memory", "memory exhausted: growing memory to 65601536 bytes, past memory_bytes"),
        ("recurse", "stack exhausted"),
        ("unreachable", "wasm `unreachable` instruction executed"),
        ("json", "not JSON text"),
        ("settings", "Tern's own"),
        ("outside", "pk is outside the module's memory"),
        ("topic", "output name"),
    ];
    assert_eq!(reasons.len(), expect.len(), "{reasons:#?}");
    for ((key, reason), (want_key, want)) in reasons.iter().zip(expect) {
        assert_eq!(key, want_key);
        assert!(reason.contains(want), "{key}: {reason}");
    }
    assert_eq!(value(&reader, "ok"), Some(serde_json::json!(1)));
}

#[test]
fn timers_fire_in_log_time_in_order_and_can_be_moved_or_cancelled() {
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let entries = vec![
        entry(0, 1_000, vec![deploy_op("t", wasm(TIMERS))]),
        entry(1, 1_000, vec![put("set", "1")]),
        entry(2, 4_999, vec![put("x", "1")]),
        entry(3, 5_500, vec![put("move", "1")]),
        entry(4, 8_000, vec![put("x", "1")]),
    ];
    apply(&store, &mut procedures, &entries);
    let reader = store.read().unwrap();
    let fired: Vec<(u64, String)> = outbox(&reader).into_iter().map(|(o, _, m)| (o, String::from_utf8(m.value).unwrap())).collect();
    assert_eq!(
        fired,
        vec![(3, "a@5000 now 5500".into()), (3, "b@5000 now 5500".into()), (3, "again@5001 now 5500".into()), (4, "late@7000 now 8000".into()),]
    );
}

#[test]
fn a_tick_moves_log_time_and_fires_timers_without_a_record() {
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let tick = |offset: u64, time_ms: u64| LogRecord::entry(offset, Bytes::from(crate::codec::encode_tick(time_ms)));
    let entries = vec![
        entry(0, 1_000, vec![deploy_op("t", wasm(TIMERS))]),
        entry(1, 1_000, vec![put("set", "1")]),
        tick(2, 4_000),
        tick(3, 5_000),
        // A tick from a writer whose clock is behind: the log time stays.
        tick(4, 10),
        tick(5, 5_001),
    ];
    let outcomes = apply(&store, &mut procedures, &entries);
    assert!(outcomes.iter().all(|(_, o)| *o == Outcome::Applied), "{outcomes:?}");
    let reader = store.read().unwrap();
    let fired: Vec<(u64, String)> = outbox(&reader).into_iter().map(|(o, _, m)| (o, String::from_utf8(m.value).unwrap())).collect();
    assert_eq!(fired, vec![(3, "a@5000 now 5000".into()), (3, "b@5000 now 5000".into()), (5, "again@5001 now 5001".into())]);
    assert_eq!(reader.log_time_ms().unwrap(), 5_001);
}

/// Defect 10 of issue 36: one writer whose clock was stepped a day ahead
/// (or one source record with a future timestamp) moved the log time a day
/// ahead for good and fired every pending timer at once. A record the log
/// stamped (Kafka's `LogAppendTime`) moves it at most a second past the stamp.
#[test]
fn a_writer_clock_a_day_ahead_fires_no_timer_before_the_logs_time() {
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let day_ms = 86_400_000;
    let stamped = |record: LogRecord, appended_ms: u64| record.stamped(Some(appended_ms));
    let tick = |offset: u64, time_ms: u64| LogRecord::entry(offset, Bytes::from(crate::codec::encode_tick(time_ms)));
    let foreign = |offset: u64, timestamp_ms: u64| LogRecord {
        offset,
        payload: Bytes::from_static(b"{}"),
        foreign: Some(Box::new(crate::log::ForeignRecord { key: None, headers: Vec::new(), timestamp_ms })),
        appended_ms: None,
    };
    let entries = vec![
        stamped(entry(0, 1_000, vec![deploy_op("t", wasm(TIMERS))]), 1_000),
        stamped(entry(1, 1_000, vec![put("set", "1")]), 1_000),
        // The writer's clock is a day ahead; the broker stamped it at 2 s.
        stamped(entry(2, day_ms, vec![put("x", "1")]), 2_000),
        // A tick from the same writer, and a source record that says it is
        // from tomorrow, both stamped by the broker.
        stamped(tick(3, day_ms), 3_000),
        stamped(foreign(4, day_ms), 3_500),
        // The broker's clock reaches the timers.
        stamped(tick(5, 5_000), 5_000),
        stamped(tick(6, day_ms), 5_001),
    ];
    let outcomes = apply(&store, &mut procedures, &entries);
    assert!(outcomes.iter().all(|(_, o)| *o == Outcome::Applied), "{outcomes:?}");
    let reader = store.read().unwrap();
    let fired: Vec<(u64, String)> = outbox(&reader).into_iter().map(|(o, _, m)| (o, String::from_utf8(m.value).unwrap())).collect();
    let expected = [(5, "a@5000 now 5000"), (5, "b@5000 now 5000"), (6, "again@5001 now 6001"), (6, "gone@6000 now 6001")];
    assert_eq!(fired, expected.map(|(offset, what)| (offset, what.to_string())));
    assert_eq!(reader.log_time_ms().unwrap(), 6_001, "a second past the broker's last stamp, not tomorrow");

    // A record the log did not stamp (the embedded log; a source topic with
    // CreateTime) is taken at its word, as before.
    let (_unstamped_dir, unstamped) = self::store();
    let mut procedures = Procedures::new(NS, 0);
    let entries = vec![entry(0, 1_000, vec![deploy_op("t", wasm(TIMERS))]), foreign(1, day_ms)];
    apply(&unstamped, &mut procedures, &entries);
    assert_eq!(unstamped.read().unwrap().log_time_ms().unwrap(), day_ms);
}

#[test]
fn a_removed_procedure_stops_at_its_offset() {
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let entries = vec![
        entry(0, 1, vec![deploy_op("counter", wasm(COUNTER))]),
        entry(1, 1, vec![put("in/a", "1")]),
        entry(2, 1, vec![deploy_op("counter", serde_json::json!({"runtime": "wasm", "removed": true}))]),
        entry(3, 1, vec![put("in/b", "1")]),
    ];
    apply(&store, &mut procedures, &entries);
    let reader = store.read().unwrap();
    assert_eq!(value(&reader, "count"), Some(serde_json::json!(1)));
    assert!(procedures.is_empty());
    assert_eq!(reader.procedures().unwrap().len(), 1, "the removal is kept as the active definition");
}

/// What watches are told per entry: its own ops, then its procedures'
/// record writes, as one mutation at its offset; nothing of a failed call.
#[test]
fn watches_see_each_entrys_ops_then_its_procedures_writes_at_its_offset() {
    let (_dir, store) = store();
    let mut procedures = Procedures::new(NS, 0);
    let entries = vec![
        entry(0, 1_000, vec![deploy_op("counter", wasm(COUNTER))]),
        entry(1, 2_000, vec![put("in/a", "\"x\""), put("in/b", "2")]),
        entry(2, 3_000, vec![put("other", "3")]),
        entry(3, 4_000, vec![put("in/c", "\"boom\"")]),
    ];
    let mut seen: Vec<(u64, Vec<(String, String)>)> = Vec::new();
    store
        .apply(false, |tx| {
            apply_entries_with(tx, &entries, 0, 1, &mut procedures, &mut |offset, mutation| {
                let ops = mutation
                    .ops
                    .iter()
                    .map(|op| match &op.kind {
                        OpKind::Put(v) => (op.pk.clone(), String::from_utf8(v.to_vec()).unwrap()),
                        other => panic!("only puts here: {other:?}"),
                    })
                    .collect();
                seen.push((offset, ops));
            })
        })
        .unwrap();
    let pair = |pk: &str, v: &str| (pk.to_string(), v.to_string());
    assert_eq!(
        seen,
        vec![
            // Each of the two inputs counted, the count written twice: both changes reach a watcher.
            (1, vec![pair("in/a", "\"x\""), pair("in/b", "2"), pair("count", "1"), pair("count", "2")]),
            (2, vec![pair("other", "3")]),
            // The failed call's write was dropped: only the entry's own op.
            (3, vec![pair("in/c", "\"boom\"")]),
        ]
    );
    assert!(procedures.take_written().is_empty(), "nothing left over for the next entry");
}

/// Issue 36, defect 1: a call's outcome is a function of (module, state,
/// input, log time) only. AssemblyScript's incremental collector keeps its
/// state in linear memory and globals, so an instance reused from call to
/// call burns fuel (and grows memory) by its history: replicas that loaded
/// the module at different offsets (a restart, a hand-off) then disagree on
/// which call runs out of fuel. Identical calls must cost identical fuel
/// whether the instance is old or fresh.
#[test]
fn identical_calls_cost_identical_fuel_whatever_the_instances_history() {
    use crate::procedure::definition::Definition;
    use crate::procedure::wasm::{Input, StateRead, Vm, OP_PUT};
    use std::collections::HashMap;
    #[derive(Default)]
    struct Map(HashMap<(String, String), Vec<u8>>, HashMap<Vec<u8>, Vec<u8>>);
    impl StateRead for Map {
        fn get(&mut self, pk: &str, sk: &str) -> Result<Option<Vec<u8>>, String> {
            Ok(self.0.get(&(pk.to_string(), sk.to_string())).cloned())
        }
        fn state_get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
            Ok(self.1.get(key).cloned())
        }
    }
    let definition = Definition::parse(wasm(COUNTER).to_string().as_bytes()).unwrap();
    let call = |vm: &Vm, i: u64| {
        let value = if i.is_multiple_of(13) { "\"boom\"" } else { "1" };
        let input = Input { key: Some(b"in/a"), sk: Some(""), value: Some(value.as_bytes()), op: OP_PUT, timestamp_ms: 7, offset: i, headers: &[] };
        // The same state before every call: only the instance's history differs.
        match vm.on_record(&input, 7, &mut Map::default()).expect("the host makes an instance") {
            Ok(returned) => (returned.fuel_used, None),
            Err(failed) => (failed.fuel_used, Some(failed.reason)),
        }
    };
    let old = Vm::load(&definition, 0).unwrap();
    for i in 0..200 {
        let fresh = call(&Vm::load(&definition, 0).unwrap(), i);
        assert_eq!(call(&old, i), fresh, "call {i}: an instance used 0..{i} times must behave as a fresh one");
    }
    // The module is resettable: its calls ran on a kept instance, reset.
    assert!(old.calls_on_kept() >= 100, "the reset path was taken: {} calls", old.calls_on_kept());
}

/// Not a test: prints a call's cost (`--ignored --nocapture`), for the
/// benchmark notes.
#[test]
#[ignore]
fn print_the_cost_of_a_call() {
    use crate::procedure::definition::Definition;
    use crate::procedure::wasm::{Input, StateRead, Vm, OP_PUT};
    struct Empty;
    impl StateRead for Empty {
        fn get(&mut self, _: &str, _: &str) -> Result<Option<Vec<u8>>, String> {
            Ok(Some(b"41".to_vec()))
        }
        fn state_get(&mut self, _: &[u8]) -> Result<Option<Vec<u8>>, String> {
            Ok(Some(vec![1, 0, 0, 0]))
        }
    }
    let definition = Definition::parse(wasm(COUNTER).to_string().as_bytes()).unwrap();
    let vm = Vm::load(&definition, 0).unwrap();
    let input = Input { key: Some(b"in/a"), sk: Some(""), value: Some(b"1"), op: OP_PUT, timestamp_ms: 7, offset: 1, headers: &[] };
    for round in 0..3 {
        let started = std::time::Instant::now();
        let calls = 100_000;
        let mut fuel = 0;
        for _ in 0..calls {
            fuel += vm.on_record(&input, 7, &mut Empty).unwrap().unwrap().fuel_used;
        }
        println!("round {round}: {:.2} µs a call, {} fuel a call", started.elapsed().as_secs_f64() * 1e6 / calls as f64, fuel / calls);
    }
}
