//! Three regions on one Kafka cluster, through `scripts/regions.sh` (the
//! test bed anyone can start): a broker and two Tern nodes per region,
//! every link between regions through Toxiproxy with a one-way delay.
//!
//! One test, one bed (it takes ~20 s to start): placement (RF 3,
//! `min.insync.replicas` 2), reads served in their own region and partitions
//! read from the region's own replica (KIP-392), then a region cut off under
//! writes from every region: the others keep writing, no acknowledged write
//! is lost, the cut region serves visibly stale reads and fails writes fast,
//! and after the heal every replica converges to equal state hashes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bin, checkout};

const NS: &str = "geo";
const PARTITIONS: u32 = 6;
const CUT: &str = "ap-south";

struct Bed {
    dir: PathBuf,
    json: Value,
}

impl Bed {
    fn up() -> Bed {
        let dir = tempfile::tempdir().unwrap().keep();
        let out = Command::new(checkout().join("scripts/regions.sh"))
            .args(["up", "--delay-ms", "15", "--nodes-per-region", "2", "--dir"])
            .arg(&dir)
            .args(["--", "--namespace", &format!("{NS}:{PARTITIONS}")])
            .env("TERN_BIN", bin())
            .output()
            .unwrap();
        assert!(out.status.success(), "regions.sh up failed: {}", String::from_utf8_lossy(&out.stderr));
        let lines = String::from_utf8_lossy(&out.stdout).lines().count();
        assert_eq!(lines, 6, "one line per node: {}", String::from_utf8_lossy(&out.stdout));
        let json = serde_json::from_str(&std::fs::read_to_string(dir.join("bed.json")).unwrap()).unwrap();
        Bed { dir, json }
    }

    fn run(&self, args: &[&str]) {
        let out = Command::new(checkout().join("scripts/regions.sh")).args(args).arg("--dir").arg(&self.dir).output().unwrap();
        assert!(out.status.success(), "regions.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// (region, id, url) of every node.
    fn nodes(&self) -> Vec<(String, String, String)> {
        self.json["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (n["region"].as_str().unwrap().into(), n["id"].as_str().unwrap().into(), n["url"].as_str().unwrap().into()))
            .collect()
    }

    fn broker_region(&self, id: i64) -> String {
        self.json["brokers"][id.to_string()].as_str().unwrap().to_string()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = Command::new(checkout().join("scripts/regions.sh")).args(["down", "--dir"]).arg(&self.dir).output();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap()
}

async fn json(client: &reqwest::Client, url: &str) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// `tern_forwards_total{to="other_region"}` of a node.
async fn forwards_to_other_regions(client: &reqwest::Client, url: &str) -> u64 {
    let text = client.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with("tern_forwards_total{to=\"other_region\"}"))
        .map_or(0, |l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
}

/// Waits (bounded) until every node serves `PARTITIONS` partitions in its region and sees all nodes live.
async fn wait_settled(client: &reqwest::Client, bed: &Bed) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut settled = true;
        for (region, _, url) in bed.nodes() {
            let cluster = json(client, &format!("{url}/v1/cluster")).await;
            let live = cluster["nodes"].as_array().unwrap().iter().filter(|n| n["state"] == "live").count();
            let probed = cluster["nodes"].as_array().unwrap().iter().filter(|n| n["self"] != true && n["rtt_ms"].is_number()).count();
            let routes = cluster["routes"].as_array().unwrap();
            let in_region = routes.iter().filter(|r| r["region"] == region.as_str()).count();
            settled &= live == 6 && probed == 5 && in_region == PARTITIONS as usize;
        }
        if settled {
            return;
        }
        assert!(Instant::now() < deadline, "the bed did not settle (every partition held in every region, every peer probed)");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn regions_read_locally_and_survive_losing_one() {
    let bed = Bed::up();
    let client = client();
    wait_settled(&client, &bed).await;
    let nodes = bed.nodes();

    // Placement: replication factor 3 and min.insync.replicas 2, from the defaults for 3 brokers.
    let describe = Command::new(checkout().join("scripts/kafka.sh"))
        .args(["run", "org.apache.kafka.tools.TopicCommand", "--bootstrap-server"])
        .arg(bed.json["bootstrap"]["us-east"].as_str().unwrap())
        .args(["--describe", "--topic", &format!("tern.{NS}")])
        .output()
        .unwrap();
    let described = String::from_utf8_lossy(&describe.stdout);
    assert!(described.contains("ReplicationFactor: 3"), "{described}");
    assert!(described.contains("min.insync.replicas=2"), "{described}");
    let racks: BTreeSet<String> = (1..=3).map(|b| bed.broker_region(b)).collect();
    assert_eq!(racks.len(), 3, "one broker per region");

    // Writes from every region, then reads of every key from every node.
    let mut key_of_partition: BTreeMap<String, String> = BTreeMap::new();
    for (i, (_, _, url)) in nodes.iter().enumerate() {
        for k in 0..8 {
            let response = client.put(format!("{url}/v1/ns/{NS}/kv/seed-{i}-{k}/v")).body(format!("{k}")).send().await.unwrap();
            assert_eq!(response.status(), 200);
            let ack: Value = response.json().await.unwrap();
            let partition = ack["position"].as_str().unwrap().split(':').nth(1).unwrap().to_string();
            key_of_partition.insert(partition, format!("seed-{i}-{k}"));
        }
    }
    let before: Vec<u64> = futures::future::join_all(nodes.iter().map(|(_, _, url)| forwards_to_other_regions(&client, url))).await;
    for (_, _, url) in &nodes {
        for i in 0..nodes.len() {
            for k in 0..8 {
                let key = format!("{url}/v1/ns/{NS}/kv/seed-{i}-{k}/v?consistency=strong");
                let response = client.get(key).send().await.unwrap();
                assert_eq!(response.status(), 200);
            }
        }
    }
    let after: Vec<u64> = futures::future::join_all(nodes.iter().map(|(_, _, url)| forwards_to_other_regions(&client, url))).await;
    assert_eq!(before, after, "a read was forwarded to another region although its own region holds every partition");

    // KIP-392: a node reads each partition from its own region's broker, also where the leader is elsewhere.
    let deadline = Instant::now() + Duration::from_secs(30);
    'fetch: loop {
        let mut remote_leaders = 0;
        let mut all_local = true;
        for (region, id, url) in &nodes {
            let ns = json(&client, &format!("{url}/v1/ns/{NS}")).await;
            for p in ns["state"].as_array().unwrap().iter().filter(|p| p["held"] == true) {
                let (Some(leader), Some(from)) = (p["log_leader"].as_i64(), p["fetching_from"].as_i64()) else {
                    all_local = false;
                    continue;
                };
                if bed.broker_region(leader) != *region {
                    remote_leaders += 1;
                }
                if bed.broker_region(from) != *region {
                    all_local = false;
                    if Instant::now() > deadline {
                        panic!(
                            "{id} ({region}) reads partition {} from broker {from} ({}), leader {leader}",
                            p["partition"],
                            bed.broker_region(from)
                        );
                    }
                }
            }
        }
        if all_local {
            assert!(remote_leaders > 0, "some partition must have its leader in another region to show anything");
            break 'fetch;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Cut one region under writes from all of them.
    let acknowledged: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let refusals: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cut_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let resumed_after_cut: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let mut writers = Vec::new();
    for (region, id, url) in nodes.clone() {
        let (client, acknowledged, refusals, stop, cut_at, resumed) =
            (client.clone(), acknowledged.clone(), refusals.clone(), stop.clone(), cut_at.clone(), resumed_after_cut.clone());
        writers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let (pk, value) = (format!("load-{id}-{}", i % 16), format!("{i}"));
                let answer = client.put(format!("{url}/v1/ns/{NS}/kv/{pk}/{i}")).body(value.clone()).send().await;
                match answer {
                    Ok(r) if r.status() == 200 => {
                        acknowledged.lock().unwrap().push((url.clone(), format!("{pk}/{i}")));
                        if cut_at.lock().unwrap().is_some() {
                            *resumed.lock().unwrap().entry(region.clone()).or_default() += 1;
                        }
                    }
                    Ok(r) => {
                        let (status, body) = (r.status(), r.text().await.unwrap_or_default());
                        assert_eq!(status, 503, "{body}");
                        refusals.lock().unwrap().push(format!("{id}: {body}"));
                    }
                    Err(e) => refusals.lock().unwrap().push(format!("{id}: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, cut_id, cut_node) = nodes.iter().find(|(r, _, _)| r == CUT).unwrap().clone();
    let staleness_before = staleness_ms(&client, &cut_node).await;
    bed.run(&["cut", CUT]);
    *cut_at.lock().unwrap() = Some(Instant::now());
    // Local reads in the surviving regions never fail meanwhile.
    let survivors: Vec<String> = nodes.iter().filter(|(r, _, _)| r != CUT).map(|(_, _, u)| u.clone()).collect();
    let watch_until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < watch_until {
        for url in &survivors {
            let response = client.get(format!("{url}/v1/ns/{NS}/kv/seed-0-0/v")).send().await.unwrap();
            assert_eq!(response.status(), 200, "a local read failed in a surviving region during the cut");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The cut region serves local reads, visibly stale, and fails writes fast.
    let staleness_cut = staleness_ms(&client, &cut_node).await;
    assert!(staleness_cut > staleness_before + 5_000, "staleness must grow while cut off: {staleness_before} -> {staleness_cut} ms");
    // Its writer's writes failed (one at a time, each the probe); concurrent
    // ones fail at once. The breaker is the node's own: the partition must be
    // one this node's writes failed on (its neighbour's failures it never saw).
    let failed = refusals.lock().unwrap().iter().filter(|r| r.starts_with(&format!("{cut_id}: "))).find_map(|r| {
        let partition = r.split(&format!("tern.{NS}/")).nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.to_string();
        key_of_partition.get(&partition).cloned()
    });
    let pk = failed.expect("writes in the cut region fail, and say which partition");
    let burst = (0..4).map(|i| client.put(format!("{cut_node}/v1/ns/{NS}/kv/{pk}/burst-{i}")).body("1").send());
    let mut bodies = Vec::new();
    for answer in futures::future::join_all(burst).await {
        let answer = answer.unwrap();
        assert_eq!(answer.status(), 503, "a write in the cut region must fail");
        bodies.push(answer.text().await.unwrap());
    }
    let fast = bodies.iter().filter(|b| b.contains("failing at once")).count();
    assert!(fast >= 3, "while one write probes the partition's leader, the others fail at once ({fast} of 4 did): {bodies:?}");
    // A strong read in the cut region is refused at once, for every
    // partition: the log's end the node can reach is its own region's
    // broker's, which may be a leader the others replaced (Kafka has no
    // leader lease). In a surviving region it sees a write made after the cut.
    let survivor = &survivors[0];
    for pk in key_of_partition.values() {
        let key = format!("{NS}/kv/{pk}/after-cut");
        let response = client.put(format!("{survivor}/v1/ns/{key}")).body("1").send().await.unwrap();
        assert_eq!(response.status(), 200, "a write in a surviving region: {}", response.text().await.unwrap());
        let response = client.get(format!("{survivor}/v1/ns/{key}?consistency=strong")).send().await.unwrap();
        assert_eq!(response.status(), 200, "a strong read in a surviving region sees the write");
        let response = client.get(format!("{cut_node}/v1/ns/{key}?consistency=strong")).send().await.unwrap();
        let (status, body) = (response.status(), response.text().await.unwrap());
        assert_eq!(status, 503, "a strong read in the cut region must be refused, not answered stale: {body}");
        // Refused as isolated, not timed out asking the log (whose answer could not be trusted).
        assert!(body.contains("\"isolated\"") && body.contains("cut off"), "{body}");
    }
    // With durability=journaled the cut region still takes a write: durable
    // in the node's journal now (202), sequenced once the log is back.
    let journaled = format!("{cut_node}/v1/ns/{NS}/kv/journaled-while-cut/v?durability=journaled");
    let response = client.put(journaled).body("\"kept\"").send().await.unwrap();
    let (status, body) = (response.status(), response.text().await.unwrap());
    assert_eq!(status, 202, "a journaled write in the cut region is answered at once: {body}");
    let resumed = resumed_after_cut.lock().unwrap().clone();
    for region in ["us-east", "eu-west"] {
        assert!(resumed.get(region).copied().unwrap_or(0) > 20, "{region} kept writing after the cut: {resumed:?}");
    }
    // Not one write failed in a surviving region: one in flight to a
    // partition led from the cut region waits for the new leader (seconds,
    // within the producer's delivery bound) instead of timing out there.
    let survivor_ids: Vec<String> = nodes.iter().filter(|(r, _, _)| r != CUT).map(|(_, id, _)| format!("{id}: ")).collect();
    let failed_in_survivors: Vec<String> =
        refusals.lock().unwrap().iter().filter(|r| survivor_ids.iter().any(|id| r.starts_with(id))).cloned().collect();
    assert!(failed_in_survivors.is_empty(), "writes failed in surviving regions during the cut: {failed_in_survivors:#?}");

    // Heal: the region catches up by itself; every replica converges.
    bed.run(&["heal", CUT]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut states = BTreeMap::new();
        for (_, _, url) in &nodes {
            let ns = json(&client, &format!("{url}/v1/ns/{NS}")).await;
            for p in ns["state"].as_array().unwrap().iter().filter(|p| p["held"] == true) {
                states
                    .entry(p["partition"].as_u64().unwrap())
                    .or_insert_with(BTreeSet::new)
                    .insert((p["applied_offset"].as_i64().unwrap(), p["state_hash"].as_str().unwrap().to_string()));
            }
        }
        // Each partition is held once per region: three replicas, one state.
        if states.len() == PARTITIONS as usize && states.values().all(|s| s.len() == 1) {
            break;
        }
        assert!(Instant::now() < deadline, "replicas did not converge after the heal: {states:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The write journaled while cut off is sequenced after the heal and read everywhere.
    let deadline = Instant::now() + Duration::from_secs(60);
    for (_, _, url) in &nodes {
        loop {
            let response = client.get(format!("{url}/v1/ns/{NS}/kv/journaled-while-cut/v")).send().await.unwrap();
            if response.status() == 200 {
                let record: Value = response.json().await.unwrap();
                assert_eq!(record["value"], "kept");
                break;
            }
            assert!(Instant::now() < deadline, "the write journaled during the cut never reached {url}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    // No acknowledged write lost: each is read back on every node.
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() > 100, "too few writes to say anything: {}", acknowledged.len());
    for (_, _, url) in &nodes {
        for (_, key) in &acknowledged {
            let response = client.get(format!("{url}/v1/ns/{NS}/kv/{key}")).send().await.unwrap();
            assert_eq!(response.status(), 200, "acknowledged write {key} missing on {url}");
        }
    }
}

/// The cut node's `x-tern-staleness-ms` on a local read of a seeded key.
async fn staleness_ms(client: &reqwest::Client, url: &str) -> u64 {
    let response = client.get(format!("{url}/v1/ns/{NS}/kv/seed-0-0/v")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.headers().get("x-tern-staleness-ms").expect("a local read says how stale it may be").to_str().unwrap().parse().unwrap()
}
