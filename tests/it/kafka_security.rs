//! The Kafka client's security settings (issue 20) against a real broker
//! that listens SASL_SSL (`scripts/kafka.sh start --sasl-ssl`: SASL PLAIN
//! over TLS, a CA the script makes): a node writes and reads through it end
//! to end; a wrong password or an untrusted CA is a clear refusal at start
//! that never prints the password.

use std::process::Command;

use serde_json::json;

use crate::common::brokers::Brokers;
use crate::common::Tern;

fn args<'a>(data: &'a str, log: &'a str, ca: &'a str, password_file: &'a str, prefix: &'a str) -> Vec<&'a str> {
    vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data,
        "--log",
        log,
        "--kafka-topic-prefix",
        prefix,
        "--kafka-security-protocol",
        "sasl_ssl",
        "--kafka-ssl-ca-file",
        ca,
        "--kafka-sasl-mechanism",
        "PLAIN",
        "--kafka-sasl-username",
        "tern",
        "--kafka-sasl-password-file",
        password_file,
        "--namespace",
        "app:2",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_writes_and_reads_through_a_sasl_ssl_broker() {
    let brokers = Brokers::start_with(1, &["--sasl-ssl"]);
    let sasl = std::fs::read_to_string(brokers.dir.path().join("sasl_ssl_bootstrap")).unwrap().trim().to_string();
    let ca = brokers.dir.path().join("tls/ca.pem");
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("password");
    std::fs::write(&good, "tern-secret\n").unwrap();
    let log = format!("kafka://{sasl}");
    let data = dir.path().join("data");
    let tern = Tern::spawn(&args(data.to_str().unwrap(), &log, ca.to_str().unwrap(), good.to_str().unwrap(), "sec."), dir.path()).await;
    let (status, put) = tern.send(tern.client.put(tern.kv_url("app", "k", Some("s"))).json(&json!({"over": "sasl_ssl"}))).await;
    assert_eq!(status, 200, "{put}");
    let position = put["position"].as_str().unwrap().to_string();
    let (status, got) = tern.get_json(&format!("/v1/ns/app/kv/k/s?after={position}")).await;
    assert_eq!((status, &got["value"]), (200, &json!({"over": "sasl_ssl"})), "{got}");
    drop(tern);

    // A wrong password: refused at start with the broker's word, the password never printed.
    let bad = dir.path().join("bad-password");
    std::fs::write(&bad, "not-the-secret-xyzzy").unwrap();
    let data2 = dir.path().join("data2");
    let output = Command::new(crate::common::bin())
        .args(args(data2.to_str().unwrap(), &log, ca.to_str().unwrap(), bad.to_str().unwrap(), "sec2."))
        .env("TERN_LOG_LEVEL", "debug")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(printed.contains("cannot reach Kafka"), "{printed}");
    assert!(!printed.contains("not-the-secret-xyzzy"), "the password was printed");
    assert!(!printed.contains("tern-secret"));

    // A CA that did not sign the broker's certificate: refused too.
    let other_ca = dir.path().join("other-ca.pem");
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout"])
        .arg(dir.path().join("other-ca.key"))
        .arg("-out")
        .arg(&other_ca)
        .args(["-days", "1", "-subj", "/CN=other"])
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    let data3 = dir.path().join("data3");
    let output = Command::new(crate::common::bin())
        .args(args(data3.to_str().unwrap(), &log, other_ca.to_str().unwrap(), good.to_str().unwrap(), "sec3."))
        .output()
        .unwrap();
    assert!(!output.status.success(), "an untrusted broker certificate must refuse the start");
}
