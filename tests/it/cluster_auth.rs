//! Cluster traffic (issue 20): gossip sealed with the cluster key. Nodes
//! with the key see each other; a node with another key, and datagrams
//! forged by anyone, are dropped and counted, so they never enter the
//! cluster view (and no request is ever forwarded to them).

use std::time::{Duration, Instant};

use crate::common::Tern;

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn node(dir: &std::path::Path, id: &str, gossip: u16, seed: u16, key_file: &std::path::Path) -> Tern {
    let data = dir.join(id);
    let (gossip, seed) = (format!("127.0.0.1:{gossip}"), format!("127.0.0.1:{seed}"));
    Tern::spawn(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap(), "--node-id", id, "--gossip", &gossip,
          "--seeds", &seed, "--gossip-interval-ms", "50", "--cluster-key-file", key_file.to_str().unwrap()],
        dir,
    )
    .await
}

async fn members(tern: &Tern) -> Vec<String> {
    let (_, body) = tern.get_json("/v1/cluster").await;
    body["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap().to_string()).collect()
}

async fn rejected(tern: &Tern, reason: &str) -> u64 {
    let text = tern.client.get(format!("{}/metrics", tern.url)).send().await.unwrap().text().await.unwrap();
    let needle = format!("tern_gossip_rejected_total{{reason=\"{reason}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(needle.as_str())).map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_nodes_with_the_cluster_key_join_and_forged_gossip_is_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    let other_key = dir.path().join("other.key");
    std::fs::write(&key, "the cluster's shared secret, 32+ chars").unwrap();
    std::fs::write(&other_key, "another cluster's secret, 32+ chars!!").unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_udp_port()).collect();
    let a = node(dir.path(), "a", ports[0], ports[0], &key).await;
    let b = node(dir.path(), "b", ports[1], ports[0], &key).await;
    let intruder = node(dir.path(), "intruder", ports[2], ports[0], &other_key).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !members(&a).await.contains(&"b".to_string()) || !members(&b).await.contains(&"a".to_string()) {
        assert!(Instant::now() < deadline, "a and b never saw each other: {:?} {:?}", members(&a).await, members(&b).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Forged datagrams: garbage, a frame sealed with no key, chitchat's own plain format.
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let target = format!("127.0.0.1:{}", ports[0]);
    let mut frame = b"TGS1".to_vec();
    frame.extend_from_slice(&[0u8; 8]);
    frame.extend_from_slice(b"{\"api\":\"127.0.0.1:1\"}");
    frame.extend_from_slice(&[7u8; 32]);
    for datagram in [frame.as_slice(), b"\x00\x00hello", &[0x4eu8, 0x5d, 0, 0, 1, 2, 3]] {
        socket.send_to(datagram, &target).await.unwrap();
    }
    // The intruder has been gossiping to a all along: never let in.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for view in [members(&a).await, members(&b).await] {
        assert!(!view.contains(&"intruder".to_string()), "{view:?}");
    }
    assert!(!members(&intruder).await.contains(&"a".to_string()));
    let forged = rejected(&a, "forged").await;
    let malformed = rejected(&a, "malformed").await;
    assert!(forged >= 2, "the intruder's datagrams and the forged frame are counted: {forged}");
    assert!(malformed >= 1, "{malformed}");
}
