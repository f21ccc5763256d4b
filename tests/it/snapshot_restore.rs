//! Snapshots end to end on a real Kafka broker (`TERN_TEST_KAFKA`) and a
//! `file://` object store: a node whose data directory is wiped restores
//! every partition from its snapshot, catches up from the log and ends with
//! identical state hashes; a new node with an empty disk does the same.

use crate::common;

use std::time::Duration;

use common::{cli, Tern};
use serde_json::json;

async fn serve(id: &str, data: &std::path::Path, prefix: &str, snapshots: &str) -> Tern {
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
        // Only on demand in this test.
        "--snapshot-interval-ms",
        "86400000",
        "--snapshot-entries",
        "1000000000",
    ];
    Tern::spawn(&args, data).await
}

async fn restores(t: &Tern) -> u64 {
    let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    let line = metrics.lines().find(|l| l.starts_with("tern_snapshot_restores_total")).unwrap_or("x 0").to_string();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_and_a_new_node_restore_from_snapshots_and_catch_up() {
    let (data, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let snapshots = format!("file://{}", objects.path().display());
    let prefix = format!("s{}.", rand::random::<u32>());
    let mut t = serve("snap-a", data.path(), &prefix, &snapshots).await;
    for i in 0..400 {
        let (status, _) = t.put(&format!("k{i}"), "", &json!({ "i": i, "phase": 1 })).await;
        assert_eq!(status, 200);
    }
    t.wait_caught_up("default").await;
    let (status, taken) = t.send(t.client.post(format!("{}/v1/admin/snapshots", t.url)).json(&json!({}))).await;
    assert_eq!(status, 200, "{taken}");
    assert_eq!(taken["snapshots"].as_array().unwrap().len(), 4, "one snapshot per partition: {taken}");
    let (ok, listed, stderr) = cli(&t.url, &["snapshot", "ls"]);
    assert!(ok && listed.lines().count() == 5, "{listed}{stderr}");
    // More writes after the snapshot: the restored node must catch up on them from the log.
    for i in 0..100 {
        let (status, _) = t.put(&format!("k{i}"), "", &json!({ "i": i, "phase": 2 })).await;
        assert_eq!(status, 200);
    }
    t.wait_caught_up("default").await;
    let before = t.partition_states("default").await;
    assert!(t.terminate().success());

    // Wipe the data directory; restart with the same snapshot store.
    std::fs::remove_dir_all(data.path()).unwrap();
    std::fs::create_dir_all(data.path()).unwrap();
    let t = serve("snap-a", data.path(), &prefix, &snapshots).await;
    t.wait_caught_up("default").await;
    assert_eq!(restores(&t).await, 4, "every partition came from its snapshot");
    assert_eq!(t.partition_states("default").await, before, "identical offsets and state hashes after restore + catch-up");
    let (_, got) = t.get("k7", "").await;
    assert_eq!(got["value"]["phase"], 2, "writes after the snapshot were replayed from the log");

    // A new node, empty disk, joins and serves after restore + catch-up.
    let fresh = tempfile::tempdir().unwrap();
    let b = serve("snap-b", fresh.path(), &prefix, &snapshots).await;
    b.wait_caught_up("default").await;
    assert_eq!(restores(&b).await, 4);
    assert_eq!(b.partition_states("default").await, before);
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_retention_shorter_than_the_snapshot_interval_is_reported() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let prefix = format!("r{}.", rand::random::<u32>());
    let admin: AdminClient<DefaultClientContext> =
        rdkafka::config::ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).create().unwrap();
    let topic = format!("{prefix}short");
    let short = NewTopic::new(&topic, 1, TopicReplication::Fixed(1)).set("retention.ms", "60000");
    admin.create_topics([&short], &AdminOptions::new()).await.unwrap().remove(0).unwrap();
    let (data, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let snapshots = format!("file://{}", objects.path().display());
    let args = [
        "serve",
        "--node-id",
        "retention",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--log",
        &log,
        "--kafka-topic-prefix",
        &prefix,
        "--namespace",
        "short:1",
        "--namespace",
        "long:1",
        "--snapshots",
        &snapshots,
        "--snapshot-interval-ms",
        "3600000",
    ];
    let t = Tern::spawn(&args, data.path()).await;
    let metrics = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tern_kafka_retention_shorter_than_snapshots{ns=\"short\"} 1"), "{metrics}");
    assert!(metrics.contains("tern_kafka_retention_shorter_than_snapshots{ns=\"long\"} 0"), "default retention (7 days) is longer");
}

/// Bug 10 on Kafka: a topic deleted and created again under its name is
/// another log (a new topic id). A wiped node must not restore the old
/// topic's snapshot (it would skip the new topic's first offsets and hold
/// the old data); it replays the new topic. Before the fix snapshots named
/// no log, and the old snapshot (at offset 30) was restored over the new
/// topic's 40 entries: offsets 0..30 of the new topic skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_topic_never_restores_the_old_topics_snapshot() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let (data, objects) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let snapshots = format!("file://{}", objects.path().display());
    let prefix = format!("c{}.", rand::random::<u32>());
    let mut t = serve("recreate", data.path(), &prefix, &snapshots).await;
    for i in 0..30 {
        assert_eq!(t.put(&format!("old{i}"), "", &json!(i)).await.0, 200);
    }
    t.wait_caught_up("default").await;
    let (status, taken) = t.send(t.client.post(format!("{}/v1/admin/snapshots", t.url)).json(&json!({}))).await;
    assert_eq!(status, 200, "{taken}");
    assert!(t.terminate().success());

    // The topic is deleted and created again (same name, same partitions), and written anew.
    let admin: AdminClient<DefaultClientContext> =
        rdkafka::config::ClientConfig::new().set("bootstrap.servers", common::kafka_bootstrap()).create().unwrap();
    let topic = format!("{prefix}default");
    admin.delete_topics(&[&topic], &AdminOptions::new()).await.unwrap().remove(0).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::remove_dir_all(data.path()).unwrap();
    std::fs::create_dir_all(data.path()).unwrap();
    let other = tempfile::tempdir().unwrap();
    // A node without snapshots creates the new topic and writes 40 entries to it.
    let log = format!("kafka://{}", common::kafka_bootstrap());
    let args = [
        "serve",
        "--node-id",
        "writer",
        "--group",
        "writer",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        other.path().to_str().unwrap(),
        "--log",
        &log,
        "--kafka-topic-prefix",
        &prefix,
        "--namespace",
        "default:4",
    ];
    let mut writer = Tern::spawn(&args, other.path()).await;
    for i in 0..40 {
        assert_eq!(writer.put(&format!("new{i}"), "", &json!(i)).await.0, 200);
    }
    writer.wait_caught_up("default").await;
    let expected = writer.partition_states("default").await;
    assert!(writer.terminate().success());

    // The wiped node, same snapshot store: it replays the new topic.
    let t = serve("recreate", data.path(), &prefix, &snapshots).await;
    t.wait_caught_up("default").await;
    assert_eq!(restores(&t).await, 0, "the old topic's snapshots are not this topic's");
    assert_eq!(t.partition_states("default").await, expected, "exactly the new topic's state");
    let (status, _) = t.get("old0", "").await;
    assert_eq!(status, 404, "nothing of the old topic");
}
