//! aggdemo's model, shared by its tests (`src/apply/aggdemo_tests.rs`,
//! through the apply engine; `tests/it/aggdemo.rs`, through Kafka) and the
//! benchmark: a seeded generator with every fault the issue names
//! (missing, duplicate, late, bad date, malformed, late session), and the
//! checks that make the outputs a billing system. Included with `#[path]`.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;
/// The usage of held-back records (how they are found again).
const LATE_USAGE: u64 = 777;

/// One generated record: the line, and what the generator knows of it.
pub(super) struct Sent {
    pub line: String,
    pub session: u64,
    pub seqno: u32,
    pub usage: u64,
    /// First copy of a well-formed, in-date record (duplicates are not).
    pub counts: bool,
}

pub(super) struct Generated {
    pub sent: Vec<Sent>,
    /// Per session: the seqnos never sent (holes).
    pub never_sent: BTreeMap<u64, BTreeSet<u32>>,
}

/// A seeded stream: 200 sessions of 40 to 240 records (one in eight: 256)
/// interleaved, with
/// duplicates, holes, late arrivals, bad dates, malformed lines and a late
/// session.
pub(super) fn generate(seed: u64, t0_ms: u64) -> Generated {
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
    let start = t0_ms - 3_600_000;
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
        // One session in eight uses little: it reaches QTY (100 records)
        // long before USAGE (1,000,000), which the others reach at about 90.
        let usage = if *id % 8 == 4 { 1 + next(1_000) } else { 1_000 + next(20_000) };
        let n = sent.len() as u64;
        if n % 199 == 198 {
            sent.push(Sent { line: "garbage,line".into(), session: u64::MAX, seqno: 0, usage: 0, counts: false });
        }
        if n % 211 == 210 {
            // A bad date: recordStartUTC older than 7 days. Counts as not billable.
            sent.push(Sent { line: line(*id, seqno, usage, start, t0_ms - WEEK_MS - 1), session: *id, seqno, usage, counts: false });
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
    sent.push(Sent { line: line(9_999, 0, 5, t0_ms - WEEK_MS - 10, t0_ms), session: 9_999, seqno: 0, usage: 5, counts: false });
    Generated { sent, never_sent }.with_late(held_back, t0_ms)
}

impl Generated {
    /// Where the held-back (late) records start in `sent`: send them after
    /// every session went stale.
    pub(super) fn late_from(&self) -> usize {
        self.sent.len() - self.sent.iter().rev().take_while(|s| s.usage == LATE_USAGE).count()
    }

    /// The held-back records, sent after every session went stale (they are TOOLATE).
    fn with_late(mut self, late: Vec<(u64, u32)>, t0_ms: u64) -> Generated {
        for (id, seqno) in late {
            let start = t0_ms - 3_600_000;
            let line = format!(
                "{id},{start},{seqno},41555{:05},41566{:05},I,{},{LATE_USAGE}",
                id % 100_000,
                (id * 7) % 100_000,
                start + u64::from(seqno) * 1000
            );
            self.sent.push(Sent { line, session: id, seqno, usage: LATE_USAGE, counts: true });
            // Until it arrives it is a hole: the stale close reports it missing.
            self.never_sent.entry(id).or_default().insert(seqno);
        }
        self
    }
}

/// Checks outputs `(topic, row)` (topics end in `.aggregated` or `.bad`)
/// against what was generated: every output is one a rule makes, nothing
/// billed twice, every counted record billed or reported (never both),
/// billed usage = the usage of the records billed, every hole below a
/// received seqno reported missing. Returns how many rows of each
/// `kind:reason` there were.
pub(super) fn check(generated: &Generated, outputs: &[(String, Value)]) -> BTreeMap<String, usize> {
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut billed: BTreeMap<u64, Vec<(u32, u32, u64)>> = BTreeMap::new();
    let mut reported_seqnos: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    let mut missing_reported: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for (topic, row) in outputs {
        let reason = row["reason"].as_str().unwrap().to_string();
        let kind = topic.rsplit('.').next().unwrap();
        *reasons.entry(format!("{kind}:{reason}")).or_default() += 1;
        let session = row["sessionId"].as_u64().unwrap_or(u64::MAX);
        match (kind, reason.as_str()) {
            ("aggregated", _) => {
                let (lo, hi) = (row["min_seqno"].as_u64().unwrap() as u32, row["max_seqno"].as_u64().unwrap() as u32);
                billed.entry(session).or_default().push((lo, hi, row["recordUsage"].as_u64().unwrap()));
                assert_eq!(row["count"].as_u64().unwrap(), u64::from(hi - lo + 1), "a row bills a run without holes: {row}");
            }
            ("bad", "LATE") => {
                let (lo, hi) = (row["min_seqno"].as_u64().unwrap() as u32, row["max_seqno"].as_u64().unwrap() as u32);
                let missing: BTreeSet<u32> = row["missing_seqnos"].as_array().unwrap().iter().map(|m| m.as_u64().unwrap() as u32).collect();
                assert!(!missing.is_empty(), "{row}");
                reported_seqnos.entry(session).or_default().extend((lo..=hi).filter(|s| !missing.contains(s)));
                missing_reported.entry(session).or_default().extend(missing);
            }
            ("bad", "TOOLATE" | "LATERECORD" | "LATESESSION") => {
                reported_seqnos.entry(session).or_default().insert(row["seqno"].as_u64().unwrap() as u32);
            }
            ("bad", "DUP" | "BADFORMAT") => {}
            other => panic!("an output no rule makes: {other:?} {row}"),
        }
    }
    for reason in [
        "aggregated:END",
        "aggregated:QTY",
        "aggregated:AGE",
        "bad:DUP",
        "bad:BADFORMAT",
        "bad:LATE",
        "bad:TOOLATE",
        "bad:LATERECORD",
        "bad:LATESESSION",
    ] {
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

    reasons
}
