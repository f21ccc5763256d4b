//! `/metrics` as operators alert on it: every family of `src/metrics.rs`
//! present on a fresh node (at 0, not absent), the process's own metrics
//! and the build's, one label name per concept, no sentinel values; and
//! the alert rules and dashboard in `deploy/` name only metrics that exist.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{checkout, Tern};

/// Families a fresh `tern dev` has no series of, and why: each is keyed by
/// something a fresh node does not have yet.
const ABSENT_ON_A_FRESH_NODE: [(&str, &str); 12] = [
    ("tern_peer_rtt_seconds", "one series per peer: a node alone has none"),
    ("tern_peer_reachable", "one series per peer"),
    ("tern_kafka_retention_shorter_than_snapshots", "one series per namespace on Kafka"),
    ("tern_procedure_records_total", "one series per procedure"),
    ("tern_procedure_outputs_total", "one series per procedure"),
    ("tern_procedure_dead_letters_total", "one series per procedure"),
    ("tern_procedure_fuel_used_total", "one series per procedure"),
    ("tern_procedure_timers_fired_total", "one series per procedure"),
    ("tern_procedure_call_seconds", "one series per procedure"),
    ("tern_procedure_outputs_refused_total", "one series per namespace publishing procedure outputs"),
    ("tern_outbox_published_total", "one series per namespace publishing procedure outputs"),
    ("tern_outbox_publish_errors_total", "one series per namespace publishing procedure outputs"),
];

/// Families whose every series is made by a publisher (outbox), listed
/// apart: the same reason, and the array above stays readable.
const ABSENT_TOO: [&str; 3] = ["tern_outbox_unpublished_messages", "tern_outbox_publish_seconds", "tern_outbox_transaction_step_seconds"];

/// Every label name `/metrics` may use: one per concept.
const LABEL_NAMES: [&str; 17] = [
    "ns",
    "partition",
    "method",
    "route",
    "status",
    "reason",
    "outcome",
    "by",
    "to",
    "protocol",
    "peer",
    "region",
    "procedure",
    "version",
    "commit",
    "le",
    "quantile",
];

/// The metric families `src/metrics.rs` registers, by name.
fn families_in_source() -> BTreeSet<String> {
    let source = std::fs::read_to_string(checkout().join("src/metrics.rs")).expect("src/metrics.rs");
    let mut names = BTreeSet::new();
    for piece in source.split('"').skip(1).step_by(2) {
        if piece.starts_with("tern_") && piece.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            names.insert(piece.to_string());
        }
    }
    names
}

/// (family, labels, value) of every sample line, and the families with a HELP line.
fn parse(text: &str) -> (Vec<(String, BTreeMap<String, String>, String)>, BTreeSet<String>) {
    let mut samples = Vec::new();
    let mut described = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            described.insert(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample is SERIES VALUE");
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut parsed = BTreeMap::new();
        // Label values here hold no `",` (routes, reasons, names).
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once("=\"").expect("label=\"value\"");
            parsed.insert(key.to_string(), value.trim_end_matches('"').to_string());
        }
        samples.push((name.to_string(), parsed, value.to_string()));
    }
    (samples, described)
}

#[tokio::test]
async fn every_family_is_present_from_the_start_with_one_label_per_concept() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let text = t.client.get(format!("{}/metrics", t.url)).send().await.unwrap().text().await.unwrap();
    let (samples, described) = parse(&text);

    let absent: BTreeSet<&str> = ABSENT_ON_A_FRESH_NODE.iter().map(|(name, _)| *name).chain(ABSENT_TOO).collect();
    let source = families_in_source();
    for name in &absent {
        assert!(source.contains(*name), "{name} is listed as absent but src/metrics.rs has no such family");
    }
    let missing: Vec<&String> = source.iter().filter(|name| !absent.contains(name.as_str()) && !described.contains(name.as_str())).collect();
    assert!(missing.is_empty(), "families absent from a fresh node's /metrics (make them exist at 0): {missing:?}");

    // The closed sets exist at 0 from the start: an alert on rate() sees 0.
    let has = |name: &str, label: &str, value: &str| {
        samples.iter().any(|(n, l, v)| n == name && l.get(label).map(String::as_str) == Some(value) && v == "0")
    };
    assert!(has("tern_auth_failures_total", "reason", "rate_limited"));
    assert!(has("tern_scrub_passes_total", "outcome", "damaged"));
    assert!(has("tern_apply_skipped_entries_total", "reason", "undecodable"));
    assert!(has("tern_apply_duplicate_writes_total", "ns", "default"));

    for process in ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds"] {
        assert!(described.contains(process) || !cfg!(target_os = "linux"), "{process} missing");
    }
    let build = samples.iter().find(|(n, _, _)| n == "tern_build_info").expect("tern_build_info");
    assert_eq!(build.1.get("version").map(String::as_str), Some(env!("CARGO_PKG_VERSION")));
    assert!(build.1.get("commit").is_some_and(|c| !c.is_empty()), "{build:?}");
    assert_eq!(build.2, "1");

    let names: BTreeSet<&str> = samples.iter().flat_map(|(_, labels, _)| labels.keys().map(String::as_str)).collect();
    let unknown: Vec<&&str> = names.iter().filter(|n| !LABEL_NAMES.contains(n)).collect();
    assert!(unknown.is_empty(), "label names beyond one per concept: {unknown:?}");
    let sentinels: Vec<String> =
        samples.iter().filter(|(n, _, v)| n.starts_with("tern_") && v.starts_with('-')).map(|(n, l, v)| format!("{n}{l:?} {v}")).collect();
    assert!(sentinels.is_empty(), "negative values (sentinels?): {sentinels:?}");
    let routes = samples.iter().filter(|(n, _, _)| n == "tern_http_request_duration_seconds_count");
    for (_, labels, _) in routes {
        assert!(labels["route"].starts_with('/'), "the route is a path pattern, its method a label of its own: {labels:?}");
        assert!(["GET", "PUT", "POST", "PATCH", "DELETE", "OTHER"].contains(&labels["method"].as_str()), "{labels:?}");
    }
    let position = samples.iter().find(|(n, l, _)| n == "tern_partition_applied_next_offset" && l["partition"] == "0").expect("positions");
    assert_eq!(position.2, "0", "nothing applied: position 0");
}

/// `promtool`, which `scripts/setup.sh` installs (Debian's `prometheus`).
fn promtool(args: &[&str]) -> String {
    let output = std::process::Command::new("promtool")
        .args(args)
        .current_dir(checkout().join("deploy/prometheus"))
        .output()
        .expect("promtool runs (scripts/setup.sh installs it: Debian's prometheus package)");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", "tern-alerts.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "tern-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a unit test.
    let rules = std::fs::read_to_string(checkout().join("deploy/prometheus/tern-alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(checkout().join("deploy/prometheus/tern-alerts.test.yml")).unwrap();
    for alert in rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
        assert!(tests.contains(&format!("alertname: {alert}")), "{alert} has no test in tern-alerts.test.yml");
    }
}

/// The metric names an expression uses: `tern_…` and `process_…` words.
fn metric_names(expression: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expression.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &expression[at..];
        let starts = (rest.starts_with("tern_") || rest.starts_with("process_"))
            && (at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_'));
        if starts {
            let length = rest.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
            names.push(rest[..length].to_string());
            at += length;
        } else {
            at += 1;
        }
    }
    names
}

#[test]
fn the_dashboard_and_the_rules_name_only_metrics_that_exist() {
    let families = families_in_source();
    let process = ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds"];
    let exists = |name: &str| {
        let base = ["_bucket", "_count", "_sum"].iter().find_map(|s| name.strip_suffix(s)).filter(|b| families.contains(*b));
        families.contains(name) || base.is_some() || process.contains(&name)
    };
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(checkout().join("deploy/grafana/tern.json")).unwrap()).expect("the dashboard is JSON");
    let mut expressions: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("a target's expr").to_string())
        .collect();
    assert!(expressions.len() >= 10, "the dashboard shows the node");
    let rules = std::fs::read_to_string(checkout().join("deploy/prometheus/tern-alerts.yml")).unwrap();
    expressions.extend(rules.lines().filter_map(|l| l.trim().strip_prefix("expr: ")).map(str::to_string));
    let mut used = BTreeSet::new();
    for expression in &expressions {
        for name in metric_names(expression) {
            assert!(exists(&name), "{name} (in `{expression}`) is no metric Tern exports");
            used.insert(name);
        }
    }
    for wanted in
        ["tern_partition_lag", "tern_partition_staleness_seconds", "tern_journal_oldest_age_seconds", "tern_ready", "tern_auth_failures_total"]
    {
        assert!(used.contains(wanted), "{wanted} is watched");
    }
}
