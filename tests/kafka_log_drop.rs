//! A dropped `KafkaLog` lets go of its librdkafka clients: their threads end.
//! (Its own test binary: it counts the process's librdkafka threads, which
//! other tests running beside it would change.)

use std::time::{Duration, Instant};

use tern::log::kafka::{KafkaLog, KafkaLogConfig};
use tern::log::Log;

fn bootstrap() -> String {
    std::env::var("TERN_TEST_KAFKA").expect("TERN_TEST_KAFKA must name a Kafka broker: run scripts/test.sh, or scripts/kafka.sh start and export it")
}

/// Threads of this process that librdkafka started (it names them `rdk:…`).
fn librdkafka_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("procfs")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("rdk:"))
        .count()
}

/// Longest the clients may take to shut down after the drop.
const GONE_WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_kafka_log_stops_its_clients() {
    assert_eq!(librdkafka_threads(), 0, "no client before the test");
    let mut config = KafkaLogConfig::new(&bootstrap());
    config.topic_prefix = format!("t{}.", rand::random::<u32>());
    let log = KafkaLog::connect(config).expect("connect");
    log.create_topic("default", 2).await.expect("create topic");
    assert!(!log.list_topics().await.expect("list").is_empty());
    assert!(librdkafka_threads() > 0, "the log's clients run threads");
    log.close().await;
    drop(log);
    let deadline = Instant::now() + GONE_WAIT;
    while librdkafka_threads() > 0 {
        assert!(Instant::now() < deadline, "{} librdkafka threads still run {GONE_WAIT:?} after the drop", librdkafka_threads());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
