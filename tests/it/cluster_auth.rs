//! Cluster traffic (issue 20): gossip sealed with the cluster key. Nodes
//! with the key see each other; a node with another key, and datagrams
//! forged by anyone, are dropped and counted, so they never enter the
//! cluster view (and no request is ever forwarded to them).

use std::time::{Duration, Instant};

use crate::common::Tern;

async fn node(dir: &std::path::Path, id: &str, gossip: u16, seed: u16, key_file: &std::path::Path) -> Tern {
    let data = dir.join(id);
    let (gossip, seed) = (format!("127.0.0.1:{gossip}"), format!("127.0.0.1:{seed}"));
    Tern::spawn(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
            "--node-id",
            id,
            "--gossip",
            &gossip,
            "--seeds",
            &seed,
            "--gossip-interval-ms",
            "50",
            "--cluster-key-file",
            key_file.to_str().unwrap(),
        ],
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
    let ports: Vec<u16> = (0..3).map(|_| crate::common::free_udp_port()).collect();
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

/// Two nodes of one replica group on Kafka, everything on: sealed gossip,
/// TLS with client certificates required, authentication. Each holds some
/// partitions; every read through either node answers, the other node's
/// partitions forwarded over mTLS with the caller's token checked again
/// there; a token made on one node works on the other (its keys are read
/// from the holder of the system partition, over TLS, with the root token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secured_cluster_forwards_over_mutual_tls_and_checks_the_caller_again() {
    let bootstrap = crate::common::kafka_bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::tls::Pki::new(dir.path(), "ca");
    let (cert, key) = pki.issue("node");
    let (client_cert, client_key) = pki.issue("client");
    let key_file = dir.path().join("cluster.key");
    std::fs::write(&key_file, "a cluster secret of more than 32 chars").unwrap();
    let token_file = dir.path().join("admin.token");
    let prefix = format!("sec{}.", rand::random::<u32>());
    let log = format!("kafka://{bootstrap}");
    let ports = [crate::common::free_udp_port(), crate::common::free_udp_port()];
    let seed = format!("127.0.0.1:{}", ports[0]);
    let ca = pki.ca();
    let mut nodes = Vec::new();
    for (i, id) in ["a", "b"].into_iter().enumerate() {
        let data = dir.path().join(id);
        let gossip = format!("127.0.0.1:{}", ports[i]);
        let args = [
            "serve",
            "--node-id",
            id,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
            "--log",
            &log,
            "--kafka-topic-prefix",
            &prefix,
            "--namespace",
            "app:4",
            "--gossip",
            &gossip,
            "--seeds",
            &seed,
            "--gossip-interval-ms",
            "50",
            "--kafka-membership",
            "group",
            "--cluster-key-file",
            key_file.to_str().unwrap(),
            "--auth",
            "--admin-token-file",
            token_file.to_str().unwrap(),
            "--auth-failures-per-minute",
            "0",
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
            "--tls-client-ca-file",
            ca.to_str().unwrap(),
            "--cluster-ca-file",
            ca.to_str().unwrap(),
        ];
        nodes.push(Tern::spawn_listening(&args, &[], dir.path()));
        // b joins once a made the admin token and the topics.
        let client = crate::tls::client(&pki.ca(), Some((&client_cert, &client_key))).build().unwrap();
        crate::tls::wait_ready(&client, &nodes[i].url).await;
    }
    let client = crate::tls::client(&pki.ca(), Some((&client_cert, &client_key))).build().unwrap();
    let root = std::fs::read_to_string(&token_file).unwrap().trim().to_string();
    // Wait until the group split the partitions between a and b.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let view: serde_json::Value =
            client.get(format!("{}/v1/cluster", nodes[0].url)).bearer_auth(&root).send().await.unwrap().json().await.unwrap();
        let holders: Vec<usize> = ["a", "b"]
            .iter()
            .map(|id| {
                view["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|n| n["id"] == *id && n["state"] == "live")
                    .flat_map(|n| n["partitions"].as_array().unwrap().iter().filter(|p| p["ns"] == "app"))
                    .count()
            })
            .collect();
        if holders[0] > 0 && holders[1] > 0 && holders[0] + holders[1] == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "the group never split app's partitions: {view}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let created: serde_json::Value = client
        .post(format!("{}/v1/tokens", nodes[0].url))
        .bearer_auth(&root)
        .json(&serde_json::json!({"ns": "app", "prefix": "k", "verbs": ["read", "write"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = created["token"].as_str().unwrap().to_string();
    let mut served_by = std::collections::BTreeSet::new();
    for i in 0..16 {
        let put = client.put(format!("{}/v1/ns/app/kv/k{i}/s?wait=applied", nodes[0].url)).bearer_auth(&root).json(&i).send().await.unwrap();
        assert_eq!(put.status(), 200);
        // Read through b with the new token: b learns it within seconds, and forwards what a holds.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let response = client.get(format!("{}/v1/ns/app/kv/k{i}/s?consistency=strong", nodes[1].url)).bearer_auth(&token).send().await.unwrap();
            if response.status() == 200 {
                served_by.insert(response.headers().get("x-tern-served-by").map(|v| v.to_str().unwrap().to_string()).unwrap_or_else(|| "b".into()));
                assert_eq!(response.json::<serde_json::Value>().await.unwrap()["value"], serde_json::json!(i));
                break;
            }
            assert!(Instant::now() < deadline, "k{i} never readable through b: {}", response.status());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The holder checks the caller again: a token without a grant for this key is refused there too.
        let outside = client.get(format!("{}/v1/ns/app/kv/other{i}/s", nodes[1].url)).bearer_auth(&token).send().await.unwrap();
        assert_eq!(outside.status(), 403);
    }
    assert!(served_by.contains("a"), "some reads were forwarded from b to a over TLS: {served_by:?}");
    // A client without a certificate is refused by both nodes.
    let anonymous = crate::tls::client(&pki.ca(), None).build().unwrap();
    assert!(anonymous.get(format!("{}/healthz", nodes[1].url)).send().await.is_err());
}
