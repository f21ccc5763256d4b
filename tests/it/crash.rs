//! Crash safety with a real process: `kill -9` mid-stream and SIGTERM under
//! load. Every acknowledged write must be present afterwards, no log entry may
//! be applied twice, and the state hash must be stable across restarts and
//! equal to a replica rebuilt from the log alone.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Tern;
use serde_json::{json, Value};

const WRITERS: usize = 16;

#[derive(Default, Debug)]
struct WriterLog {
    /// sk → version of every acknowledged unique-key put.
    acked: HashMap<String, u64>,
    /// Highest counter value acknowledged, and the highest attempted.
    counter_acked: Option<u64>,
    counter_attempted: Option<u64>,
}

/// Writes until `stop` or the first failure: unique keys, plus a
/// compare-and-set counter whose every step names the previous version.
async fn writer(client: reqwest::Client, t_url: String, w: usize, stop: Arc<AtomicBool>) -> WriterLog {
    let mut log = WriterLog::default();
    let mut counter_version: Option<u64> = None;
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let sk = format!("k{n:06}");
        let url = format!("{t_url}/v1/ns/default/kv/w{w}/{sk}");
        let Ok(response) = client.put(url).json(&json!(n)).send().await else { break };
        if response.status() != 200 {
            break;
        }
        let Ok(body) = response.json::<Value>().await else { break };
        log.acked.insert(sk, body["version"].as_u64().unwrap());
        let condition = match counter_version {
            Some(v) => format!("if_version={v}"),
            None => "if_absent=true".to_string(),
        };
        log.counter_attempted = Some(n);
        let url = format!("{t_url}/v1/ns/default/kv/ctr{w}/?{condition}");
        let Ok(response) = client.put(url).json(&json!(n)).send().await else { break };
        let status = response.status();
        let Ok(body) = response.json::<Value>().await else { break };
        assert_ne!(status, 409, "a single writer's CAS chain never conflicts unless a write applied twice: {body}");
        if status != 200 {
            break;
        }
        counter_version = Some(body["version"].as_u64().unwrap());
        log.counter_acked = Some(n);
        n += 1;
    }
    log
}

async fn run_writers(t: &Tern, stop_after: Duration, interrupt: impl FnOnce()) -> Vec<WriterLog> {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..WRITERS).map(|w| tokio::spawn(writer(reqwest::Client::new(), t.url.clone(), w, stop.clone()))).collect();
    tokio::time::sleep(stop_after).await;
    interrupt();
    stop.store(true, Ordering::Relaxed);
    let mut logs = Vec::new();
    for task in tasks {
        logs.push(task.await.unwrap());
    }
    logs
}

async fn verify(t: &Tern, logs: &[WriterLog]) {
    let mut acked_total = 0;
    for (w, log) in logs.iter().enumerate() {
        for (sk, version) in &log.acked {
            let (status, got) = t.get(&format!("w{w}"), sk).await;
            assert_eq!(status, 200, "acknowledged write w{w}/{sk} is missing");
            assert_eq!(got["version"].as_u64(), Some(*version), "w{w}/{sk} has the acknowledged version");
            acked_total += 1;
        }
        let (status, counter) = t.get(&format!("ctr{w}"), "").await;
        match (log.counter_acked, log.counter_attempted) {
            (None, None) => {}
            (acked, Some(attempted)) => {
                // Acknowledged: it exists. Never acknowledged: its first step
                // may or may not have applied (200 or 404), nothing else.
                match acked {
                    Some(_) => assert_eq!(status, 200, "counter {w}: an acknowledged counter is missing: {counter}"),
                    None => assert!(status == 200 || status == 404, "counter {w}: {status} {counter}"),
                }
                if status == 200 {
                    let value = counter["value"].as_u64().unwrap();
                    assert!(acked.is_none_or(|a| value >= a), "counter {w} lost an acknowledged step: {value} < {acked:?}");
                    assert!(value <= attempted, "counter {w} is ahead of every attempt: {value} > {attempted}");
                }
            }
            (Some(_), None) => unreachable!(),
        }
    }
    assert!(acked_total > 100, "the writers made progress before the interruption ({acked_total} writes)");
    // Offsets are dense in the embedded log: exactly one apply per entry.
    for (partition, (applied_offset, _, applied_entries)) in t.partition_states("default").await.iter().enumerate() {
        assert_eq!(*applied_entries as i64, applied_offset + 1, "partition {partition}: an entry was applied twice or skipped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Tern::dev(dir.path()).await;
    let pid = t.child.as_ref().unwrap().id();
    let logs = run_writers(&t, Duration::from_millis(2500), || {
        std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    })
    .await;
    t.kill9();
    let t = Tern::dev(dir.path()).await;
    t.wait_caught_up("default").await;
    verify(&t, &logs).await;

    // The state hash is stable across a clean restart...
    let states = t.partition_states("default").await;
    let mut t = t;
    assert!(t.terminate().success());
    let t = Tern::dev(dir.path()).await;
    t.wait_caught_up("default").await;
    assert_eq!(t.partition_states("default").await, states, "state is identical after a clean restart");

    // ...and equal to a replica rebuilt from the log alone.
    let rebuilt_dir = tempfile::tempdir().unwrap();
    let copy = std::process::Command::new("cp").arg("-r").arg(dir.path().join("log")).arg(rebuilt_dir.path().join("log")).status().unwrap();
    assert!(copy.success());
    let rebuilt = Tern::dev(rebuilt_dir.path()).await;
    rebuilt.wait_caught_up("default").await;
    assert_eq!(rebuilt.partition_states("default").await, states, "a replay of the log converges to the same state");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_finishes_in_flight_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Tern::dev(dir.path()).await;
    let pid = t.child.as_ref().unwrap().id();
    let logs = run_writers(&t, Duration::from_millis(1500), || {
        std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    })
    .await;
    let status = t.child.take().unwrap().wait().unwrap();
    assert!(status.success(), "a SIGTERM shutdown exits cleanly: {status}");
    let t = Tern::dev(dir.path()).await;
    t.wait_caught_up("default").await;
    verify(&t, &logs).await;
}
