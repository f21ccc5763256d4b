//! Network faults, not process faults: links cut between processes that
//! keep running (issue 36). The brokers run in network namespaces of the
//! test's own (`scripts/kafka.sh start --netns`), so that a broker can be
//! cut from the other brokers while clients still reach it — a fault that
//! killing or pausing a process cannot make. Tern nodes run in namespaces
//! of their own too (`kafka.sh add-host`) when their links are cut.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{brokers::Brokers, Tern};

/// A Tern node on `brokers`, alone in replica group `group` (it holds every partition).
async fn node(brokers: &Brokers, id: &str, dir: &std::path::Path) -> Tern {
    node_with(brokers, id, dir, None, &[]).await
}

/// `node`, in a network namespace of its own (`Brokers::add_host`: its
/// name and address) when given, with `extra` arguments.
async fn node_with(brokers: &Brokers, id: &str, dir: &std::path::Path, host: Option<&(String, String)>, extra: &[&str]) -> Tern {
    let log = format!("kafka://{}", brokers.bootstrap);
    let listen = format!("{}:0", host.map_or("127.0.0.1", |(_, address)| address.as_str()));
    let mut args = vec!["serve", "--node-id", id, "--listen", &listen, "--data-dir", dir.to_str().unwrap(), "--log", &log];
    // Defaults the extra arguments may override: alone in a replica group, one partition.
    if !extra.contains(&"--group") {
        args.extend(["--group", id]);
    }
    if !extra.contains(&"--namespace") {
        args.extend(["--namespace", "default:1"]);
    }
    if host.is_some() {
        // Not loopback, but a namespace of the test's own that only this host reaches.
        args.push("--insecure");
    }
    args.extend_from_slice(extra);
    match host {
        Some((netns, _)) => Tern::spawn_in_netns(netns, &args, dir).await,
        None => Tern::spawn(&args, dir).await,
    }
}

/// The broker that leads `topic`/0 now, as the brokers' metadata says.
fn leader_of(bootstrap: &str, topic: &str) -> i32 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    metadata.topics()[0].partitions()[0].leader()
}

/// What one strong read after an acknowledged write saw.
#[derive(Debug, Default)]
struct Reads {
    /// Answered with the write just acknowledged.
    fresh: u64,
    /// Refused (503: the barrier could not pass, or not caught up in time).
    refused: u64,
    /// Answered without the write acknowledged before the read began.
    stale: Vec<String>,
}

/// Issue 36, defect 12: with three brokers (replication 3, min.insync 2),
/// the leader of a namespace's partition is cut from the other brokers;
/// clients still reach it. The controller moves the leadership away within
/// seconds while the deposed leader keeps answering with its old high
/// watermark (Kafka has no leader lease). A strong read that took its
/// target from there missed writes acknowledged before it began (the
/// defect: 404 for writes acknowledged 7–39 ms earlier). Now each strong
/// read passes a barrier through the partition's current leader: every
/// strong read — on the writing node and on another — sees the write
/// acknowledged just before it, or is refused; none answers stale. After
/// the link heals, both nodes converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strong_reads_see_every_acknowledged_write_when_the_leader_is_cut_from_the_other_brokers() {
    const BEFORE: Duration = Duration::from_secs(3);
    // The controller moves the leadership within seconds (broker session
    // timeout); bounded, so a cluster that never moves it fails the test.
    const MOVE_WAIT_MAX: Duration = Duration::from_secs(60);
    const AFTER_MOVE: Duration = Duration::from_secs(40);
    // By then every replica reads from the new leader: a reader stuck on
    // the deposed one is opened elsewhere after `READER_STUCK` (5 s).
    const SETTLED_AFTER_MOVE: Duration = Duration::from_secs(25);
    let brokers = Brokers::start_with(3, &["--netns"]);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = node(&brokers, "a", dir_a.path()).await;
    let b = node(&brokers, "b", dir_b.path()).await;
    let leader = leader_of(&brokers.bootstrap, "tern.default");
    assert!(leader > 0, "partition 0 has a leader");
    // The brokers not cut: where the move is seen.
    let others: Vec<&str> = brokers.bootstrap.split(',').enumerate().filter(|(at, _)| *at as i32 + 1 != leader).map(|(_, b)| b).collect();
    let others = others.join(",");
    let started = Instant::now();
    let mut cut = false;
    let mut moved_at: Option<Instant> = None;
    let mut reads = Reads::default();
    let (mut acked, mut acked_after_move, mut fresh_after_move) = (0u64, 0u64, 0u64);
    // Per node, the strong reads once settled: (fresh, not fresh).
    let mut settled = [(0u64, 0u64); 2];
    let mut i = 0u64;
    loop {
        if !cut && started.elapsed() >= BEFORE {
            brokers.kafka(&["cut-node", &leader.to_string()]);
            cut = true;
        }
        if cut && moved_at.is_none() {
            let now = leader_of(&others, "tern.default");
            if now > 0 && now != leader {
                moved_at = Some(Instant::now());
            } else {
                assert!(started.elapsed() < BEFORE + MOVE_WAIT_MAX, "the leadership of tern.default/0 never moved off the cut broker");
            }
        }
        if moved_at.is_some_and(|at| at.elapsed() >= AFTER_MOVE) {
            break;
        }
        i += 1;
        let put = a.client.put(a.kv_url("default", "k", Some(""))).json(&json!(i)).timeout(Duration::from_secs(15)).send().await;
        let Ok(put) = put else { continue };
        if put.status() != 200 {
            continue; // not acknowledged (the leader unreachable, or journaled: 202): nothing to check
        }
        acked += 1;
        if moved_at.is_some() {
            acked_after_move += 1;
        }
        let settling_done = moved_at.is_some_and(|at| at.elapsed() >= SETTLED_AFTER_MOVE);
        for (at, (name, reader)) in [("a", &a), ("b", &b)].into_iter().enumerate() {
            let url = format!("{}?consistency=strong&timeout_ms=2000", reader.kv_url("default", "k", Some("")));
            let (status, body) = reader.send(reader.client.get(url)).await;
            let fresh = status == 200 && body["value"] == json!(i);
            if settling_done {
                if fresh {
                    settled[at].0 += 1;
                } else {
                    settled[at].1 += 1;
                }
            }
            match status {
                _ if fresh => {
                    reads.fresh += 1;
                    fresh_after_move += u64::from(moved_at.is_some());
                }
                503 => reads.refused += 1,
                _ => reads.stale.push(format!("write {i} acknowledged, then a strong read on {name}: {status} {body}")),
            }
        }
    }
    // Before the cut heals: each node's lag and staleness as it reports them.
    let (_, state_b) = b.get_json("/v1/ns/default").await;
    brokers.kafka(&["heal-node", &leader.to_string()]);
    eprintln!(
        "{acked} writes acknowledged ({acked_after_move} after the leadership moved); strong reads: {reads:?}, {fresh_after_move} fresh \
         after the move; once settled (fresh, not) a {:?} b {:?}; b before the heal: {state_b}",
        settled[0], settled[1]
    );
    assert_eq!(reads.stale, Vec::<String>::new(), "no strong read misses a write acknowledged before it ({reads:?})");
    assert!(acked_after_move > 0, "writes were acknowledged by the new leader ({acked} in all)");
    assert!(reads.fresh > 0, "{reads:?}");
    // Found by this test: each node's reader went on fetching from the
    // deposed leader until the cut healed, applying nothing (strong reads
    // refused, local reads stale, lag 0). Now a stuck reader is opened on
    // the other brokers: with the cut still there, every node reads on.
    // (A strong read may still be refused now and then: its barrier waits
    // at most its timeout.)
    for (name, (fresh, not)) in ["a", "b"].iter().zip(settled) {
        assert!(fresh >= 3 && not * 10 <= fresh, "node {name} reads on from the new leader while the cut lasts: {fresh} fresh, {not} not");
    }
    // Healed: both nodes converge on the last acknowledged write.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let strong = |t: &Tern| t.client.get(format!("{}?consistency=strong&timeout_ms=5000", t.kv_url("default", "k", Some(""))));
        let (sa, va) = a.send(strong(&a)).await;
        let (sb, vb) = b.send(strong(&b)).await;
        if sa == 200 && sb == 200 && va["value"] == vb["value"] {
            break;
        }
        if Instant::now() > deadline {
            let (_, state_a) = a.get_json("/v1/ns/default").await;
            let (_, state_b) = b.get_json("/v1/ns/default").await;
            panic!("the nodes did not converge after the link healed: {sa} {va} / {sb} {vb}; {} / {}", state_a["state"], state_b["state"]);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a client saw of the writes to one key through the cut node: values
/// rise with each write, so an order is a comparison.
#[derive(Debug, Default, Clone)]
struct KeyWrites {
    /// Every value sent (answered or not: one answered 503 may have landed).
    sent: Vec<u64>,
    /// The last value answered 200 (in the log) or 202 (journaled).
    acked: Option<u64>,
    /// The last value answered 200.
    sequenced: Option<u64>,
}

/// Issue 36: a Tern node cut from the brokers while its clients (and its
/// peers) still reach it — a fault a killed process cannot make. The node
/// runs in a network namespace of its own (`kafka.sh add-host`), with
/// ripcord on; another node (its own replica group) stays connected.
/// While the cut lasts, the cut node's writes are journaled (202) once its
/// log refuses them, its local reads answer only values that were written
/// and say how stale they may be, and a strong read there is refused,
/// never stale; the other node takes writes as usual. After the link
/// heals, both nodes hold the same state, in which every acknowledged
/// write through the cut node is applied in the order it was answered
/// (each key ends at or after its last acknowledged value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_from_the_brokers_journals_and_converges_with_every_acknowledged_write() {
    const KEYS: u64 = 4;
    const BEFORE: Duration = Duration::from_secs(2);
    const CUT_FOR: Duration = Duration::from_secs(25);
    const CONVERGE_MAX: Duration = Duration::from_secs(120);
    let brokers = Brokers::start_with(1, &["--netns"]);
    let host = brokers.add_host(1);
    let (dir_t, dir_u) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = node_with(&brokers, "t", dir_t.path(), Some(&host), &["--ripcord"]).await;
    let u = node(&brokers, "u", dir_u.path()).await;
    let mut keys: Vec<KeyWrites> = vec![KeyWrites::default(); KEYS as usize];
    let (mut journaled, mut refused, mut strong_refused, mut staleness_ms_max) = (0u64, 0u64, 0u64, 0u64);
    let mut u_writes = Vec::new();
    let started = Instant::now();
    let mut cut_at: Option<Instant> = None;
    let mut i = 0u64;
    while cut_at.is_none_or(|at| at.elapsed() < CUT_FOR) {
        if cut_at.is_none() && started.elapsed() >= BEFORE {
            for n in 1..=brokers.count() {
                brokers.kafka(&["cut-link", "h1", &format!("n{n}")]);
            }
            cut_at = Some(Instant::now());
        }
        i += 1;
        let key = (i % KEYS) as usize;
        let pk = format!("k{key}");
        keys[key].sent.push(i);
        let (status, body) = t.send(t.client.put(t.kv_url("default", &pk, Some(""))).json(&json!(i))).await;
        match status {
            200 => {
                keys[key].acked = Some(i);
                keys[key].sequenced = Some(i);
            }
            202 => {
                keys[key].acked = Some(i);
                journaled += 1;
            }
            // The log refused it, or its outcome is unknown (it may land).
            503 => refused += 1,
            _ => panic!("write {i} through the cut node: {status} {body}"),
        }
        // A local read answers a value that was written, and says how stale it may be.
        let read = t.client.get(t.kv_url("default", &pk, Some(""))).send().await.unwrap();
        let staleness_ms = read.headers().get("x-tern-staleness-ms").and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let (status, body) = (read.status().as_u16(), read.json::<serde_json::Value>().await.unwrap());
        match status {
            200 => assert!(keys[key].sent.contains(&body["value"].as_u64().unwrap()), "a local read answers a value written: {body}"),
            404 => {}
            _ => panic!("a local read on the cut node: {status} {body}"),
        }
        if cut_at.is_some() {
            staleness_ms_max = staleness_ms_max.max(staleness_ms.unwrap_or(0));
        }
        // A strong read is refused or sees the last write the log took; never stale.
        let url = format!("{}?consistency=strong&timeout_ms=1000", t.kv_url("default", &pk, Some("")));
        let (status, body) = t.send(t.client.get(url)).await;
        match status {
            503 => strong_refused += 1,
            200 => assert!(body["value"].as_u64() >= keys[key].sequenced, "a strong read on the cut node is not stale: {body} ({:?})", keys[key]),
            404 => assert_eq!(keys[key].sequenced, None, "a strong read on the cut node is not stale: {body}"),
            _ => panic!("a strong read on the cut node: {status} {body}"),
        }
        // The other node is not cut: it takes writes as usual.
        let (status, body) = u.send(u.client.put(u.kv_url("default", &format!("u{i}"), Some(""))).json(&json!(i))).await;
        assert_eq!(status, 200, "a write through the node not cut: {body}");
        u_writes.push(i);
    }
    for n in 1..=brokers.count() {
        brokers.kafka(&["heal-link", "h1", &format!("n{n}")]);
    }
    eprintln!(
        "{i} writes through the cut node: {journaled} journaled, {refused} refused; {strong_refused} strong reads refused; local \
         staleness up to {staleness_ms_max} ms; {keys:?}"
    );
    assert!(journaled > 0, "ripcord journaled writes while the log was cut off");
    assert!(strong_refused > 0, "strong reads were refused while cut off");
    assert!(staleness_ms_max >= 5_000, "local reads said they may be stale: {staleness_ms_max} ms");

    // Healed: both nodes converge on the same state, holding every
    // acknowledged write in the order answered, and every write of the other.
    let deadline = Instant::now() + CONVERGE_MAX;
    loop {
        let mut values: Vec<(Option<u64>, Option<u64>)> = Vec::new();
        for key in 0..KEYS {
            let strong = |n: &Tern| n.client.get(format!("{}?consistency=strong&timeout_ms=5000", n.kv_url("default", &format!("k{key}"), Some(""))));
            let (_, at_t) = t.send(strong(&t)).await;
            let (_, at_u) = u.send(strong(&u)).await;
            values.push((at_t["value"].as_u64(), at_u["value"].as_u64()));
        }
        let (_, journal) = t.get_json("/v1/ns/default").await;
        let settled = values.iter().zip(&keys).all(|((at_t, at_u), k)| at_t == at_u && *at_t >= k.acked);
        if settled && t.partition_states("default").await == u.partition_states("default").await {
            for ((at_t, _), k) in values.iter().zip(&keys) {
                assert!(at_t.is_none_or(|v| k.sent.contains(&v)), "a value that was written: {at_t:?} of {k:?}");
            }
            break;
        }
        assert!(Instant::now() < deadline, "no convergence after the heal: {values:?} for {keys:?}; {journal}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for j in u_writes.iter().step_by(7) {
        let (status, body) = t.send(t.client.get(t.kv_url("default", &format!("u{j}"), Some("")))).await;
        assert_eq!((status, body["value"].as_u64()), (200, Some(*j)), "the other node's write u{j} on the healed node");
    }
}

/// Writes `i` to `pk` through `node` (with `query`): whether it was
/// acknowledged (200); a 503's code goes into `codes`.
async fn put_key(node: &Tern, writes: &mut KeyWrites, pk: &str, query: &str, i: u64, codes: &mut std::collections::BTreeSet<String>) -> bool {
    writes.sent.push(i);
    let url = format!("{}{query}", node.kv_url("default", pk, Some("")));
    let (status, body) = node.send(node.client.put(url).json(&json!(i)).timeout(Duration::from_secs(30))).await;
    match status {
        200 => {
            writes.acked = Some(i);
            true
        }
        // Refused, or (502) sent to the holder on a connection the cut
        // broke mid-request: its outcome unknown, said so (it may land).
        503 => {
            codes.insert(crate::common::error_code(&body).to_string());
            false
        }
        502 if crate::common::error_code(&body) == "outcome_unknown" => {
            codes.insert("outcome_unknown".to_string());
            false
        }
        _ => panic!("write {i} of {pk} through {}{query}: {status} {body}", node.url),
    }
}

/// The members of `default`'s partitions as `node`'s `/v1/cluster` shows
/// them: live node ids, and how many partitions each live node holds.
async fn members(node: &Tern) -> (Vec<String>, Vec<usize>) {
    let (_, view) = node.get_json("/v1/cluster").await;
    let live: Vec<&Value> = view["nodes"].as_array().unwrap().iter().filter(|n| n["state"] == "live").collect();
    let held = live.iter().map(|n| n["partitions"].as_array().unwrap().iter().filter(|p| p["ns"] == "default").count()).collect();
    (live.iter().map(|n| n["id"].as_str().unwrap().to_string()).collect(), held)
}

/// Waits until both `nodes` see both live, each holding some of the 4
/// partitions of `default` and together all; at most `wait_max`.
async fn wait_both_members(nodes: &[Tern], wait_max: Duration, what: &str) {
    let deadline = Instant::now() + wait_max;
    loop {
        let views = [members(&nodes[0]).await, members(&nodes[1]).await];
        if views.iter().all(|(live, held)| live.len() == 2 && held.iter().all(|h| *h > 0) && held.iter().sum::<usize>() == 4) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {views:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Issue 36: two members of one replica group, each in a network namespace
/// of its own, cut from each other while both still reach the brokers
/// (the consumer group, kept by the brokers, still splits the partitions
/// between them; gossip says the other is gone). While the cut lasts, each
/// takes the writes of the partitions it holds; a write or read it must
/// forward to the other is refused (503), never answered with a value that
/// was not written or a write that was not made. After the heal, both
/// forward again and hold the same values, each key at or after its last
/// acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_cut_from_each_other_answer_only_what_was_written_and_forward_again_after_the_heal() {
    const PARTITIONS: u32 = 4;
    /// Keys per partition: each member holds some and forwards others.
    const KEYS_PER_PARTITION: usize = 3;
    const KEYS: usize = PARTITIONS as usize * KEYS_PER_PARTITION;
    const CUT_FOR: Duration = Duration::from_secs(20);
    const SETTLE_MAX: Duration = Duration::from_secs(90);
    const GOSSIP_PORT: u16 = 7946;
    let brokers = Brokers::start_with(1, &["--netns"]);
    let hosts = [brokers.add_host(1), brokers.add_host(2)];
    let seed = format!("{}:{GOSSIP_PORT}", hosts[0].1);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut nodes = Vec::new();
    for (at, id) in ["b1", "b2"].into_iter().enumerate() {
        let gossip = format!("{}:{GOSSIP_PORT}", hosts[at].1);
        let extra = ["--group", "b", "--gossip", &gossip, "--seeds", &seed, "--namespace", "default:4"];
        nodes.push(node_with(&brokers, id, dirs[at].path(), Some(&hosts[at]), &extra).await);
    }
    wait_both_members(&nodes, SETTLE_MAX, "the group never split the partitions between both members").await;
    let mut keys: Vec<KeyWrites> = vec![KeyWrites::default(); KEYS];
    let names: Vec<String> = (0..PARTITIONS)
        .flat_map(|p| (0..).map(|i| format!("k{i}")).filter(move |pk| tern::partitioner::partition_of(pk, PARTITIONS) == p).take(KEYS_PER_PARTITION))
        .collect();
    let url = |node: &Tern, key: usize| node.kv_url("default", &names[key], Some(""));
    let mut i = 0u64;
    for (key, writes) in keys.iter_mut().enumerate() {
        i += 1;
        writes.sent.push(i);
        let (status, body) = nodes[0].send(nodes[0].client.put(url(&nodes[0], key)).json(&json!(i))).await;
        assert_eq!(status, 200, "before the cut, b1 writes (or forwards) every key: {body}");
        writes.acked = Some(i);
    }

    brokers.kafka(&["cut-link", "h1", "h2"]);
    let cut_at = Instant::now();
    // Per node: plain writes taken (any node appends those), writes that
    // wait to be applied taken and refused (those go to a holder), reads refused.
    let (mut plain, mut waited, mut waits_refused, mut reads_refused) = ([0u64; 2], [0u64; 2], [0u64; 2], [0u64; 2]);
    let mut codes = std::collections::BTreeSet::new();
    while cut_at.elapsed() < CUT_FOR {
        for key in 0..KEYS {
            let at = key % 2;
            i += 1;
            plain[at] += u64::from(put_key(&nodes[at], &mut keys[key], &names[key], "", i, &mut codes).await);
            // Through both: one holds the key's partition, the other must forward.
            for (through, node) in nodes.iter().enumerate() {
                i += 1;
                match put_key(node, &mut keys[key], &names[key], "?wait=applied&timeout_ms=2000", i, &mut codes).await {
                    true => waited[through] += 1,
                    false => waits_refused[through] += 1,
                }
                // A read: a value that was written, or refused.
                let (status, body) = node.send(node.client.get(url(node, key))).await;
                match status {
                    200 => assert!(keys[key].sent.contains(&body["value"].as_u64().unwrap()), "{}: a value that was written: {body}", names[key]),
                    503 => {
                        reads_refused[through] += 1;
                        codes.insert(crate::common::error_code(&body).to_string());
                    }
                    _ => panic!("a read of {} through b{}: {status} {body}", names[key], through + 1),
                }
            }
        }
    }
    brokers.kafka(&["heal-link", "h1", "h2"]);
    eprintln!(
        "while cut: plain writes taken {plain:?}; writes waiting to be applied taken {waited:?}, refused {waits_refused:?}; \
         reads refused {reads_refused:?}; refusals {codes:?}"
    );
    assert!(plain.iter().all(|n| *n > 0), "each member took plain writes: {plain:?}");
    assert!(waited.iter().all(|n| *n > 0), "each member took the waiting writes of its own partitions: {waited:?}");
    assert!(waits_refused.iter().all(|n| *n > 0), "each member refused the waiting writes it had to forward: {waits_refused:?}");
    assert!(reads_refused.iter().all(|n| *n > 0), "each member refused the reads it had to forward: {reads_refused:?}");

    // Healed: both forward again and agree, each key at or after its last acknowledged write.
    let deadline = Instant::now() + SETTLE_MAX;
    loop {
        let mut agreed = true;
        let mut seen = Vec::new();
        for (key, writes) in keys.iter().enumerate() {
            let strong = |node: &Tern| node.client.get(format!("{}?consistency=strong&timeout_ms=5000", url(node, key)));
            let (s1, v1) = nodes[0].send(strong(&nodes[0])).await;
            let (s2, v2) = nodes[1].send(strong(&nodes[1])).await;
            let (v1, v2) = (v1["value"].as_u64(), v2["value"].as_u64());
            agreed &= s1 == 200 && s2 == 200 && v1 == v2 && v1 >= writes.acked;
            if let Some(v) = v1 {
                assert!(writes.sent.contains(&v), "{}: a value that was written: {v}", names[key]);
            }
            seen.push((s1, v1, s2, v2));
        }
        if agreed {
            break;
        }
        assert!(Instant::now() < deadline, "no agreement after the heal: {seen:?} for {keys:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Back to full membership, and forwarding again: writes that wait to
    // be applied go to the holder of each key, through either member.
    wait_both_members(&nodes, SETTLE_MAX, "the group is not back to both members after the heal").await;
    for (at, node) in nodes.iter().enumerate() {
        for (key, name) in names.iter().enumerate() {
            let (status, body) = node.send(node.client.put(format!("{}?wait=applied", url(node, key))).json(&json!(0))).await;
            assert_eq!(status, 200, "after the heal b{} writes (or forwards) {name}: {body}", at + 1);
        }
    }
}
