//! aggdemo (`examples/aggdemo/`) through the apply engine: a seeded
//! generator with every fault the issue names (missing, duplicate, late,
//! bad date, malformed, late session), and the checks that make it a
//! billing system: every record billed at most once, billed usage equals the
//! usage of the records received minus what was reported, every gap
//! reported, and the same outputs and state hash however the log was
//! batched or the instance reloaded.
//!
//! The records arrive as the namespace's own writes (a put whose value is
//! the CSV line as a JSON string): foreign topics as input come next.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use serde_json::Value;

use super::batch::apply_entries_with;
use crate::codec::{encode_at, encode_tick, Mutation, Op, OpKind};
use crate::log::LogRecord;
use crate::procedure::outbox::OutboxMessage;
use crate::procedure::Procedures;
use crate::store::PartitionStore;

const AGGDEMO: &[u8] = include_bytes!("../../examples/aggdemo/build/aggdemo.wasm");
const T0_MS: u64 = 1_800_000_000_000;
const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;
/// Longer than the stream (~30 s of log time at 1 ms a record), so sessions
/// reach QTY and END before the ticks at the end age the rest out.
const STALENESS_MS: u64 = 60_000;

/// One generated record: the line, and what the generator knows of it.
struct Sent {
    line: String,
    session: u64,
    seqno: u32,
    usage: u64,
    /// First copy of a well-formed, in-date record (duplicates are not).
    counts: bool,
}

struct Generated {
    sent: Vec<Sent>,
    /// Per session: the seqnos never sent (holes).
    never_sent: BTreeMap<u64, BTreeSet<u32>>,
}

/// A seeded stream: 200 sessions of 40 to 240 records (one in eight: 256)
/// interleaved, with
/// duplicates, holes, late arrivals, bad dates, malformed lines and a late
/// session.
fn generate(seed: u64) -> Generated {
    let mut rng = seed | 1;
    let mut next = move |bound: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % bound
    };
    let mut sessions: Vec<(u64, Vec<u32>)> = (0..200u64)
        .map(|id| {
            // One session in eight runs to seqno 255 (END).
            let len = if id % 8 == 0 { 256 } else { 40 + next(200) as u32 };
            (id, (0..len).collect())
        })
        .collect();
    let mut never_sent: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    let mut held_back: Vec<(u64, u32)> = Vec::new();
    for (id, seqnos) in sessions.iter_mut() {
        if *id % 10 == 3 && seqnos.len() > 20 {
            // A hole: this seqno never comes.
            let gone = seqnos.remove(10 + next(5) as usize);
            never_sent.entry(*id).or_default().insert(gone);
        } else if *id % 10 == 7 && seqnos.len() > 20 {
            // Late: comes only after the session was closed around it.
            let late = seqnos.remove(12);
            held_back.push((*id, late));
        }
    }
    let line = |id: u64, seqno: u32, usage: u64, start: u64, record_start: u64| {
        let kind = match seqno {
            0 => "S",
            255 => "E",
            _ => "I",
        };
        format!("{id},{start},{seqno},41555{:05},41566{:05},{kind},{record_start},{usage}", id % 100_000, (id * 7) % 100_000)
    };
    let mut sent = Vec::new();
    let start = T0_MS - 3_600_000;
    let mut cursors: Vec<usize> = vec![0; sessions.len()];
    let mut open: Vec<usize> = (0..sessions.len()).collect();
    while !open.is_empty() {
        let pick = next(open.len() as u64) as usize;
        let s = open[pick];
        let (id, seqnos) = &sessions[s];
        let seqno = seqnos[cursors[s]];
        cursors[s] += 1;
        if cursors[s] == seqnos.len() {
            open.swap_remove(pick);
        }
        let usage = 1_000 + next(20_000);
        let n = sent.len() as u64;
        if n % 199 == 198 {
            sent.push(Sent { line: "garbage,line".into(), session: u64::MAX, seqno: 0, usage: 0, counts: false });
        }
        if n % 211 == 210 {
            // A bad date: recordStartUTC older than 7 days. Counts as not billable.
            sent.push(Sent { line: line(*id, seqno, usage, start, T0_MS - WEEK_MS - 1), session: *id, seqno, usage, counts: false });
            never_sent.entry(*id).or_default().insert(seqno);
            continue;
        }
        sent.push(Sent { line: line(*id, seqno, usage, start, start + u64::from(seqno) * 1000), session: *id, seqno, usage, counts: true });
        if n % 97 == 96 {
            let again = line(*id, seqno, usage, start, start + u64::from(seqno) * 1000);
            sent.push(Sent { line: again, session: *id, seqno, usage, counts: false });
        }
    }
    // A late session: started more than 7 days ago.
    sent.push(Sent { line: line(9_999, 0, 5, T0_MS - WEEK_MS - 10, T0_MS), session: 9_999, seqno: 0, usage: 5, counts: false });
    Generated { sent, never_sent }.with_late(held_back)
}

impl Generated {
    /// The held-back records, sent after every session went stale (they are TOOLATE).
    fn with_late(mut self, late: Vec<(u64, u32)>) -> Generated {
        for (id, seqno) in late {
            let start = T0_MS - 3_600_000;
            let line = format!("{id},{start},{seqno},41555{:05},41566{:05},I,{},777", id % 100_000, (id * 7) % 100_000, start + u64::from(seqno) * 1000);
            self.sent.push(Sent { line, session: id, seqno, usage: 777, counts: true });
            // Until it arrives it is a hole: the stale close reports it missing.
            self.never_sent.entry(id).or_default().insert(seqno);
        }
        self
    }
}

/// The log: a deployment, the records (1 ms of log time apart), a tick past
/// every staleness timer before the late records, then a tick at the end.
fn log_of(generated: &Generated, late_from: usize) -> Vec<LogRecord> {
    let mut entries = Vec::new();
    let mut offset = 0u64;
    let mut push = |payload: Vec<u8>| {
        entries.push(LogRecord { offset, payload: Bytes::from(payload) });
        offset += 1;
    };
    use base64::Engine as _;
    let definition = serde_json::json!({
        "runtime": "wasm",
        "module": base64::engine::general_purpose::STANDARD.encode(AGGDEMO),
        "params": {"qtycount": 100, "usage": 1_000_000, "staleness_ms": STALENESS_MS},
    });
    let deploy = Op { pk: String::new(), sk: "aggdemo".into(), kind: OpKind::Procedure(Bytes::from(definition.to_string())), condition: None };
    push(encode_at(&Mutation { write_id: Bytes::new(), ops: vec![deploy] }, T0_MS));
    let mut time = T0_MS;
    for (i, sent) in generated.sent.iter().enumerate() {
        if i == late_from {
            time += STALENESS_MS * 2;
            push(encode_tick(time));
        }
        time += 1;
        let value = Bytes::from(serde_json::to_string(&sent.line).unwrap());
        let op = Op { pk: "in".into(), sk: String::new(), kind: OpKind::Put(value), condition: None };
        push(encode_at(&Mutation { write_id: Bytes::new(), ops: vec![op] }, time));
    }
    push(encode_tick(time + STALENESS_MS * 2));
    entries
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
        .outbox_from(0, 0, 1_000_000)
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
    let generated = generate(42);
    let late_from = generated.sent.len() - generated.sent.iter().rev().take_while(|s| s.usage == 777).count();
    let entries = log_of(&generated, late_from);
    let (hash, outputs) = run(&entries, 1_000, false);
    assert!(!outputs.iter().any(|(topic, _)| topic == "billing.aggdemo.dead"), "no record failed: {:?}", outputs.iter().find(|(t, _)| t.ends_with(".dead")));

    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut billed: BTreeMap<u64, Vec<(u32, u32, u64)>> = BTreeMap::new();
    let mut reported_seqnos: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    let mut missing_reported: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for (topic, row) in &outputs {
        let reason = row["reason"].as_str().unwrap().to_string();
        *reasons.entry(format!("{topic}:{reason}")).or_default() += 1;
        let session = row["sessionId"].as_u64().unwrap_or(u64::MAX);
        match (topic.as_str(), reason.as_str()) {
            ("billing.aggregated", _) => {
                let (lo, hi) = (row["min_seqno"].as_u64().unwrap() as u32, row["max_seqno"].as_u64().unwrap() as u32);
                billed.entry(session).or_default().push((lo, hi, row["recordUsage"].as_u64().unwrap()));
                assert_eq!(row["count"].as_u64().unwrap(), u64::from(hi - lo + 1), "a row bills a run without holes: {row}");
            }
            ("billing.bad", "LATE") => {
                let (lo, hi) = (row["min_seqno"].as_u64().unwrap() as u32, row["max_seqno"].as_u64().unwrap() as u32);
                let missing: BTreeSet<u32> = row["missing_seqnos"].as_array().unwrap().iter().map(|m| m.as_u64().unwrap() as u32).collect();
                assert!(!missing.is_empty(), "{row}");
                reported_seqnos.entry(session).or_default().extend((lo..=hi).filter(|s| !missing.contains(s)));
                missing_reported.entry(session).or_default().extend(missing);
            }
            ("billing.bad", "TOOLATE" | "LATERECORD" | "LATESESSION") => {
                reported_seqnos.entry(session).or_default().insert(row["seqno"].as_u64().unwrap() as u32);
            }
            ("billing.bad", "DUP" | "BADFORMAT") => {}
            other => panic!("an output no rule makes: {other:?} {row}"),
        }
    }
    for reason in ["billing.aggregated:END", "billing.aggregated:QTY", "billing.aggregated:AGE", "billing.bad:DUP", "billing.bad:BADFORMAT", "billing.bad:LATE", "billing.bad:TOOLATE", "billing.bad:LATERECORD", "billing.bad:LATESESSION"] {
        assert!(reasons.contains_key(reason), "the generator reaches {reason}: {reasons:?}");
    }

    // Nothing billed twice: a session's rows cover disjoint seqno ranges.
    for (session, rows) in &billed {
        let mut covered = BTreeSet::new();
        for &(lo, hi, _) in rows {
            for s in lo..=hi {
                assert!(covered.insert(s), "session {session}: seqno {s} billed twice");
            }
        }
    }
    // Billed usage = the usage of every counted record billed; every counted
    // record is billed or reported, never both.
    let mut expected_billed: BTreeMap<u64, u64> = BTreeMap::new();
    for sent in generated.sent.iter().filter(|s| s.counts) {
        let in_row = billed.get(&sent.session).is_some_and(|rows| rows.iter().any(|&(lo, hi, _)| (lo..=hi).contains(&sent.seqno)));
        let reported = reported_seqnos.get(&sent.session).is_some_and(|r| r.contains(&sent.seqno));
        assert!(in_row != reported, "session {} seqno {}: billed {in_row}, reported {reported}", sent.session, sent.seqno);
        if in_row {
            *expected_billed.entry(sent.session).or_default() += sent.usage;
        }
    }
    let actual_billed: BTreeMap<u64, u64> = billed.iter().map(|(s, rows)| (*s, rows.iter().map(|r| r.2).sum())).collect();
    assert_eq!(actual_billed, expected_billed);
    // Every hole below a seqno the session did receive was reported missing.
    for (session, holes) in &generated.never_sent {
        let reported = missing_reported.get(session).cloned().unwrap_or_default();
        let received_max = generated.sent.iter().filter(|s| s.session == *session && s.counts).map(|s| s.seqno).max();
        for hole in holes.iter().filter(|h| received_max.is_some_and(|m| **h < m)) {
            assert!(reported.contains(hole), "session {session}: hole {hole} never reported: {reported:?}");
        }
    }

    // The same outputs and state whatever the batching, and with a fresh instance every batch.
    assert_eq!(run(&entries, 7, false), (hash, outputs.clone()));
    assert_eq!(run(&entries, 333, true), (hash, outputs));
}
