//! The settings' table, layering, checks and docs.

use super::*;

#[test]
fn every_bound_and_cross_check_is_enforced() {
    let bad = |change: fn(&mut Settings), needle: &str| {
        let mut s = Settings::default();
        change(&mut s);
        let error = s.validate().unwrap_err().to_string();
        assert!(error.contains(needle), "{error}");
    };
    bad(|s| s.kafka_membership = "sometimes".into(), "kafka_membership must be");
    bad(|s| s.kafka_membership = "group".into(), "needs gossip");
    bad(|s| s.kafka_session_timeout_ms = 10, "kafka_session_timeout_ms");
    bad(|s| s.kafka_linger_ms = 5_000, "kafka_linger_ms");
    bad(|s| s.kafka_fetch_wait_max_ms = 0, "kafka_fetch_wait_max_ms");
    bad(|s| s.kafka_fetch_min_bytes = 0, "kafka_fetch_min_bytes");
    bad(
        |s| (s.kafka_replication_factor, s.kafka_min_insync_replicas) = (Some(1), Some(2)),
        "kafka_min_insync_replicas must be at most kafka_replication_factor",
    );
    bad(|s| s.gossip_interval_ms = 1, "gossip_interval_ms");
    bad(|s| s.gossip_advertise = Some("127.0.0.1:7946".into()), "needs gossip set");
    bad(|s| (s.gossip, s.gossip_advertise) = (Some("127.0.0.1:7946".into()), Some("relay:7946".into())), "gossip_advertise must be IP:PORT");
    bad(|s| (s.gossip, s.gossip_advertise) = (Some("127.0.0.1:7946".into()), Some("127.0.0.1:0".into())), "gossip_advertise needs a port");
    for (region, address) in [("eu", ""), ("eu", "127.0.0.1"), ("eu", ":80"), ("eu", "h:0"), ("eu", "h:65536"), ("eu", "h:x"), ("", "h:80")] {
        let s = Settings { advertise_api_for: [(region.to_string(), address.to_string())].into(), ..Default::default() };
        let error = s.validate().unwrap_err().to_string();
        assert!(error.contains("advertise_api_for takes REGION=HOST:PORT"), "{region:?}={address:?}: {error}");
    }
    let s = Settings {
        advertise_api_for: [("ap-south".to_string(), "[::1]:7070".to_string()), ("eu".to_string(), "eu.example:443".to_string())].into(),
        ..Default::default()
    };
    s.validate().expect("HOST:PORT addresses, IPv6 in brackets, are accepted");
    bad(|s| s.group = String::new(), "group must not be empty");
    bad(|s| s.node_id = String::new(), "node_id must not be empty");
    bad(|s| s.snapshot_interval_ms = 10, "snapshot_interval_ms");
    bad(|s| s.snapshot_entries = 0, "snapshot_entries");
    bad(|s| s.snapshot_retain = 0, "snapshot_retain");
    bad(|s| s.log_retention_check_ms = 1, "log_retention_check_ms");
    bad(|s| s.log_segment_bytes = 1, "log_segment_bytes");
    bad(|s| s.store_cache_bytes = 1, "store_cache_bytes");
    bad(|s| s.apply_batch_max = 0, "apply_batch_max");
    bad(|s| s.apply_linger_ms = 101, "apply_linger_ms");
    bad(|s| s.log_format = "xml".into(), "log_format");
    bad(|s| s.log = "zookeeper://x".into(), "log must be");
    bad(|s| s.namespaces = vec!["nocount".into()], "NAME:PARTITIONS");
    bad(|s| s.watch_queue_events_max = 0, "watch_queue_events_max");
    bad(|s| s.watch_queue_bytes_max = 10, "watch_queue_bytes_max");
    bad(|s| s.watch_progress_ms = 0, "watch_progress_ms");
    bad(|s| s.watch_keep_alive_ms = 1, "watch_keep_alive_ms");
    bad(|s| s.watch_subscribers_max = 0, "watch_subscribers_max");
    bad(|s| s.watch_ring_events_max = 0, "watch_ring_events_max");
    bad(|s| s.watch_ring_bytes_max = 0, "watch_ring_bytes_max");
    bad(|s| s.http_idle_ms = 0, "http_idle_ms must be 1000..=3600000");
    bad(|s| s.listen = "0.0.0.0:7070".into(), "refusing to listen on 0.0.0.0:7070 without authentication");
    bad(|s| s.listen = "[::]:7070".into(), "without authentication");
    bad(|s| s.listen = "example.com:7070".into(), "without authentication");
    bad(|s| s.auth_failures_per_minute = 2_000_000, "auth_failures_per_minute");
    bad(|s| s.jwt_grants_claim = String::new(), "jwt_grants_claim must not be empty");
    bad(|s| (s.auth, s.gossip) = (true, Some("127.0.0.1:7946".into())), "auth with gossip needs cluster_key_file");
    bad(|s| s.tls_cert_file = Some("c.pem".into()), "tls_cert_file and tls_key_file go together");
    bad(|s| s.tls_client_ca_file = Some("ca.pem".into()), "tls_client_ca_file (mTLS) needs TLS");
    for exposed in [
        Settings { listen: "0.0.0.0:7070".into(), auth: true, ..Default::default() },
        Settings { listen: "0.0.0.0:7070".into(), insecure: true, ..Default::default() },
    ] {
        exposed.validate().unwrap();
    }
    for loopback in ["127.0.0.1:0", "127.0.0.2:7070", "[::1]:7070", "localhost:7070"] {
        Settings { listen: loopback.into(), ..Default::default() }.validate().unwrap();
    }
    Settings::default().validate().unwrap();
    let mut s = Settings::default();
    assert!(!s.kafka_group_membership(), "auto without gossip: hold every partition");
    s.gossip = Some("127.0.0.1:7946".into());
    assert!(s.kafka_group_membership(), "auto with gossip: join the replica group");
    s.kafka_membership = "group".into();
    s.validate().unwrap();
}

#[test]
fn file_then_flags_override_defaults_and_unknown_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.toml");
    std::fs::write(&path, "node_id = \"n7\"\nstore_fsync_interval_ms = 250\nnamespaces = [\"a:2\"]\n").unwrap();
    let s = Settings::load(Some(&path), Overrides::default()).unwrap();
    assert_eq!(s.node_id, "n7");
    assert_eq!(s.store_fsync_interval_ms, 250);
    assert_eq!(s.listen, "127.0.0.1:7070");
    assert_eq!(s.namespaces_to_create().unwrap(), [("a".to_string(), 2)]);
    s.validate().unwrap();
    let flags = Overrides(vec![("node_id", vec!["n8".into()]), ("seeds", vec!["a:1".into(), "b:2".into()])]);
    let s = Settings::load(Some(&path), flags).unwrap();
    assert_eq!((s.node_id.as_str(), s.seeds.len(), s.store_fsync_interval_ms), ("n8", 2, 250), "flags win, the file stays below");
    let flags = Overrides(vec![("apply_batch_max", vec!["many".into()])]);
    let error = Settings::load(None, flags).unwrap_err().to_string();
    assert!(error.contains("--apply-batch-max / TERN_APPLY_BATCH_MAX") && error.contains("not a number"), "{error}");
    std::fs::write(&path, "node_idd = \"x\"\n").unwrap();
    assert!(Settings::from_file(&path).unwrap_err().to_string().contains("node_idd"));
}

#[test]
fn flags_and_variables_come_from_the_table() {
    use clap::{Args, FromArgMatches};
    let command = Overrides::augment_args(clap::Command::new("t"));
    let matches =
        command.try_get_matches_from(["t", "--snapshot-option", "aws_region=x", "--snapshot-option", "aws_endpoint=y", "--seeds", "a,b"]).unwrap();
    let overrides = Overrides::from_arg_matches(&matches).unwrap();
    let s = Settings::load(None, overrides).unwrap();
    assert_eq!(s.snapshot_options.len(), 2);
    assert_eq!(s.seeds, ["a", "b"]);
    for setting in SETTINGS {
        assert!(!setting.doc().is_empty(), "{} has a doc", setting.name);
        assert_eq!(setting.env(), format!("TERN_{}", setting.name.to_uppercase()));
    }
}

/// `docs/settings.md` is generated from the table; set
/// `TERN_UPDATE_DOCS=1` to rewrite it.
#[test]
fn the_settings_doc_is_generated_from_the_table() {
    // The checkout the test runs in (cargo runs tests from the package root), not the one
    // that built the binary: a shared target directory serves several checkouts.
    let path = std::env::current_dir().expect("a working directory").join("docs/settings.md");
    let expected = format!(
        "# Settings\n\n<!-- Generated from src/settings/mod.rs by its tests: TERN_UPDATE_DOCS=1 cargo test --release settings. Do not edit. -->\n\n\
         Every setting of `tern serve` is a config-file key (TOML, `--config FILE`), a flag and a `TERN_*`\n\
         environment variable. Flags win over the environment, which wins over the file. List settings take\n\
         several values: repeat the flag, or separate them with commas (in the flag or the variable).\n\
         `tern dev` takes `--listen`, `--data-dir`, `--snapshots`, `--restore`, `--accept-loss`, `--accept-journal-loss`\n\
         and `--auth`.\n\n{}",
        Settings::markdown_table()
    );
    if std::env::var_os("TERN_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(actual == expected, "docs/settings.md is stale: run TERN_UPDATE_DOCS=1 cargo test --release settings");
}
