//! aggdemo (`examples/aggdemo/`) through the apply engine: a seeded
//! generator with every fault the issue names (missing, duplicate, late,
//! bad date, malformed, late session), and the checks that make it a
//! billing system: every record billed at most once, billed usage equals the
//! usage of the records received minus what was reported, every gap
//! reported, and the same outputs and state hash however the log was
//! batched or the instance reloaded.
//!
//! The records arrive as the namespace's own writes (a put whose value is
//! the CSV line as a JSON string), or as a source topic's records (the line
//! as the value, the session id as the key, a `gen_ns` header): the same
//! decisions either way.

use bytes::Bytes;
use serde_json::Value;

#[path = "../../examples/aggdemo/model.rs"]
mod model;

use super::batch::apply_entries_with;
use crate::codec::{encode_at, encode_tick, Mutation, Op, OpKind};
use crate::log::LogRecord;
use crate::procedure::outbox::OutboxMessage;
use crate::procedure::Procedures;
use crate::store::PartitionStore;
use model::{generate, Generated};

const AGGDEMO: &[u8] = include_bytes!("../../examples/aggdemo/build/aggdemo.wasm");
const T0_MS: u64 = 1_800_000_000_000;
/// Longer than the stream (~30 s of log time at 1 ms a record), so sessions
/// reach QTY and END before the ticks at the end age the rest out.
const STALENESS_MS: u64 = 60_000;

/// The log: a deployment, the records (1 ms of log time apart), a tick past
/// every staleness timer before the late records, then a tick at the end.
fn log_of(generated: &Generated, late_from: usize) -> Vec<LogRecord> {
    let mut entries = Vec::new();
    let mut offset = 0u64;
    let mut push = |payload: Vec<u8>| {
        entries.push(LogRecord::entry(offset, Bytes::from(payload)));
        offset += 1;
    };
    use base64::Engine as _;
    let definition = serde_json::json!({
        "runtime": "wasm",
        "module": base64::engine::general_purpose::STANDARD.encode(AGGDEMO),
        "params": {"qtycount": 100, "usage": 1_000_000, "staleness_ms": STALENESS_MS},
    });
    let deploy = Op { pk: String::new(), sk: "aggdemo".into(), kind: OpKind::Procedure(Bytes::from(definition.to_string())), condition: None };
    push(encode_at(&Mutation { ops: vec![deploy], ..Default::default() }, T0_MS));
    let mut time = T0_MS;
    for (i, sent) in generated.sent.iter().enumerate() {
        if i == late_from {
            time += STALENESS_MS * 2;
            push(encode_tick(time));
        }
        time += 1;
        let value = Bytes::from(serde_json::to_string(&sent.line).unwrap());
        let op = Op { pk: "in".into(), sk: String::new(), kind: OpKind::Put(value), condition: None };
        push(encode_at(&Mutation { ops: vec![op], ..Default::default() }, time));
    }
    push(encode_tick(time + STALENESS_MS * 2));
    entries
}

/// The same log with the records as a source topic's: the line as the
/// value, the session id as an 8-byte big-endian key, the record's index as
/// its `gen_ns` header, the time as the record's timestamp.
fn foreign_log_of(generated: &Generated, late_from: usize) -> Vec<LogRecord> {
    let own = log_of(generated, late_from);
    let mut time = T0_MS;
    let mut next = 0;
    own.into_iter()
        .map(|entry| {
            let (mutation, time_ms) = crate::codec::decode_timed(entry.payload.clone(), 0, 1).unwrap();
            let Some(OpKind::Put(_)) = mutation.ops.first().map(|op| &op.kind) else { return entry };
            time = time.max(time_ms);
            let sent = &generated.sent[next];
            next += 1;
            let headers = vec![("gen_ns".to_string(), Bytes::from((next - 1).to_string()))];
            let foreign =
                crate::log::ForeignRecord { key: Some(Bytes::copy_from_slice(&sent.session.to_be_bytes())), headers, timestamp_ms: time_ms };
            LogRecord { offset: entry.offset, payload: Bytes::from(sent.line.clone()), foreign: Some(Box::new(foreign)), appended_ms: None }
        })
        .collect()
}

/// Applies `entries` in batches of `batch` (a fresh instance every batch when `reload`).
fn run(entries: &[LogRecord], batch: usize, reload: bool) -> (crate::store::hash::StateHash, Vec<(String, Value)>) {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(&dir.path().join("p"), 1, 8 << 20).unwrap();
    let mut procedures = Procedures::new("billing", 0);
    for chunk in entries.chunks(batch) {
        if reload {
            procedures = Procedures::new("billing", 0);
        }
        store.apply(false, |tx| apply_entries_with(tx, chunk, 0, 1, &mut procedures, &mut |_, _| {})).unwrap();
        procedures.in_step(store.read().unwrap().state().unwrap().applied_next);
    }
    let reader = store.read().unwrap();
    let outputs = reader
        .outbox_from(0, 0, 1_000_000, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| {
            let m = OutboxMessage::decode(&e.message).unwrap();
            (m.topic, serde_json::from_slice(&m.value).unwrap_or_else(|_| panic!("JSON: {}", String::from_utf8_lossy(&m.value))))
        })
        .collect();
    (reader.state().unwrap().state_hash, outputs)
}

#[test]
fn aggdemo_bills_every_record_once_reports_the_rest_and_is_the_same_on_every_replica() {
    let generated = generate(42, T0_MS);
    let late_from = generated.late_from();
    let entries = log_of(&generated, late_from);
    let (hash, outputs) = run(&entries, 1_000, false);
    assert!(
        !outputs.iter().any(|(topic, _)| topic == "billing.aggdemo.dead"),
        "no record failed: {:?}",
        outputs.iter().find(|(t, _)| t.ends_with(".dead"))
    );

    model::check(&generated, &outputs);
    // The same outputs and state whatever the batching, and with a fresh instance every batch.
    assert_eq!(run(&entries, 7, false), (hash, outputs.clone()));
    assert_eq!(run(&entries, 333, true), (hash, outputs));
}

#[test]
fn aggdemo_on_a_source_topic_decides_alike_and_carries_gen_ns_into_its_rows() {
    let generated = generate(7, T0_MS);
    let late_from = generated.late_from();
    let (_, own) = run(&log_of(&generated, late_from), 1_000, false);
    let foreign_log = foreign_log_of(&generated, late_from);
    assert!(foreign_log.iter().filter(|e| e.foreign.is_some()).count() == generated.sent.len());
    let (hash, foreign) = run(&foreign_log, 1_000, false);
    assert_eq!(own.len(), foreign.len(), "the same rows");
    let mut carried = 0;
    for ((own_topic, own_row), (topic, row)) in own.iter().zip(&foreign) {
        assert_eq!(own_topic, topic);
        let mut row = row.clone();
        let trigger = row.as_object_mut().unwrap().remove("trigger_gen_ns");
        assert_eq!(&row, own_row, "the same row but for trigger_gen_ns");
        match (row["reason"].as_str().unwrap(), trigger) {
            // Rows of a timer have no triggering record.
            ("AGE" | "LATE", trigger) => assert_eq!(trigger, None, "{row}"),
            (_, Some(Value::Number(n))) => {
                let sent = &generated.sent[n.as_u64().unwrap() as usize];
                if row["reason"] == "BADFORMAT" {
                    assert_eq!(row["raw"].as_str().unwrap(), sent.line, "the row of the record whose gen_ns it carries");
                } else {
                    assert_eq!(row["sessionId"].as_u64().unwrap(), sent.session, "{row}");
                }
                carried += 1;
            }
            (_, other) => panic!("a record's row carries its gen_ns: {other:?} in {row}"),
        }
    }
    assert!(carried > 500, "the rows of records carry their gen_ns: {carried}");
    assert_eq!(run(&foreign_log, 13, true), (hash, foreign), "the same whatever the batching");
}

/// Rule 5's boundary: a session is stale once its oldest pending record is
/// *older than* staleness_ms. A tick at exactly staleness_ms of log time
/// after it leaves it open; 1 ms later it closes (AGE). Failed before at
/// exactly staleness_ms: the timer was due then, and closed the session.
/// Rows are keyed by their session id (one output partition per session).
#[test]
fn a_session_is_stale_only_once_older_than_staleness_and_its_rows_are_keyed_by_it() {
    const STALENESS: u64 = 1_000;
    let rows_after = |delta: u64| {
        use base64::Engine as _;
        let definition = serde_json::json!({
            "runtime": "wasm",
            "module": base64::engine::general_purpose::STANDARD.encode(AGGDEMO),
            "params": {"qtycount": 100, "usage": 1_000_000, "staleness_ms": STALENESS},
        });
        let deploy = Op { pk: String::new(), sk: "aggdemo".into(), kind: OpKind::Procedure(Bytes::from(definition.to_string())), condition: None };
        let line = format!("77,{T0_MS},0,4155500001,4156600001,S,{T0_MS},10");
        let put = Op { pk: "in".into(), sk: String::new(), kind: OpKind::Put(Bytes::from(serde_json::to_string(&line).unwrap())), condition: None };
        let payloads = [
            encode_at(&Mutation { ops: vec![deploy], ..Default::default() }, T0_MS),
            encode_at(&Mutation { ops: vec![put], ..Default::default() }, T0_MS),
            encode_tick(T0_MS + delta),
        ];
        let entries: Vec<LogRecord> = payloads.into_iter().enumerate().map(|(i, p)| LogRecord::entry(i as u64, Bytes::from(p))).collect();
        let dir = tempfile::tempdir().unwrap();
        let store = PartitionStore::open(&dir.path().join("p"), 1, 8 << 20).unwrap();
        let mut procedures = Procedures::new("billing", 0);
        store.apply(false, |tx| apply_entries_with(tx, &entries, 0, 1, &mut procedures, &mut |_, _| {})).unwrap();
        let reader = store.read().unwrap();
        reader.outbox_from(0, 0, 1_000, usize::MAX).unwrap().into_iter().map(|e| OutboxMessage::decode(&e.message).unwrap()).collect::<Vec<_>>()
    };
    assert!(rows_after(STALENESS - 1).is_empty(), "younger than staleness_ms: open");
    assert!(rows_after(STALENESS).is_empty(), "exactly staleness_ms old: not older, still open");
    let rows = rows_after(STALENESS + 1);
    assert_eq!(rows.len(), 1, "older than staleness_ms: closed");
    let row: Value = serde_json::from_slice(&rows[0].value).unwrap();
    assert_eq!((rows[0].topic.as_str(), row["reason"].as_str()), ("billing.aggregated", Some("AGE")), "{row}");
    assert_eq!(rows[0].key.as_deref(), Some(&b"77"[..]), "keyed by its session id");
}
