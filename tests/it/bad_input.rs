//! Bad input gets a precise error with the right status and writes nothing.

use crate::common;

use common::{error_code, Tern};
use serde_json::{json, Value};

const MIB: usize = 1024 * 1024;

#[tokio::test]
async fn every_limit_and_malformed_request_is_refused_precisely() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let before = t.partition_states("default").await;
    let kv = |pk: &str, sk: &str| t.kv_url("default", pk, Some(sk));
    let base = t.url.clone();
    let big_value = format!("\"{}\"", "x".repeat(MIB));
    let max_value = format!("\"{}\"", "x".repeat(MIB - 2));
    let thousand_one: Vec<Value> = (0..1001).map(|_| json!({"op": "put", "pk": "p", "value": 1})).collect();
    let huge_ops: Vec<Value> = (0..5).map(|i| json!({"op": "put", "pk": "p", "sk": i.to_string(), "value": "x".repeat(MIB - 100)})).collect();
    let many_keys: Vec<Value> = (0..1001).map(|i| json!({"pk": format!("k{i}")})).collect();

    // (what, request, status, code)
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
        ("pk over 1 KiB", t.client.put(kv(&"p".repeat(1025), "s")).body("1"), 413, "key_too_large"),
        ("sk over 1 KiB", t.client.put(kv("p", &"s".repeat(1025))).body("1"), 413, "key_too_large"),
        ("get with pk over 1 KiB", t.client.get(kv(&"p".repeat(1025), "s")), 413, "key_too_large"),
        ("value over 1 MiB", t.client.put(kv("p", "s")).body(big_value.clone()), 413, "value_too_large"),
        ("invalid JSON value", t.client.put(kv("p", "s")).body("{\"a\":"), 400, "invalid_json"),
        ("empty value", t.client.put(kv("p", "s")).body(""), 400, "invalid_json"),
        ("two JSON values", t.client.put(kv("p", "s")).body("1 2"), 400, "invalid_json"),
        ("invalid UTF-8 pk", t.client.put(format!("{base}/v1/ns/default/kv/%FF%FE/s")).body("1"), 400, "invalid_key"),
        ("invalid UTF-8 sk", t.client.get(format!("{base}/v1/ns/default/kv/p/%C3%28")), 400, "invalid_key"),
        ("three key segments", t.client.put(format!("{base}/v1/ns/default/kv/a/b/c")).body("1"), 400, "invalid_key"),
        ("empty pk", t.client.put(format!("{base}/v1/ns/default/kv//s")).body("1"), 400, "invalid_key"),
        ("unknown namespace put", t.client.put(t.kv_url("nope", "p", Some("s"))).body("1"), 404, "namespace_not_found"),
        ("unknown namespace get", t.client.get(t.kv_url("nope", "p", Some("s"))), 404, "namespace_not_found"),
        ("unknown namespace describe", t.client.get(format!("{base}/v1/ns/nope")), 404, "namespace_not_found"),
        (
            "Idempotency-Key over 64 bytes",
            t.client.put(kv("p", "s")).header("Idempotency-Key", "k".repeat(65)).body("1"),
            400,
            "invalid_idempotency_key",
        ),
        ("Idempotency-Key with a space", t.client.put(kv("p", "s")).header("Idempotency-Key", "a b").body("1"), 400, "invalid_idempotency_key"),
        ("empty Idempotency-Key", t.client.put(kv("p", "s")).header("Idempotency-Key", "").body("1"), 400, "invalid_idempotency_key"),
        ("unknown parameter", t.client.put(format!("{}?if_verison=3", kv("p", "s"))).body("1"), 400, "invalid_parameter"),
        ("repeated parameter", t.client.get(format!("{}?limit=1&limit=2", t.kv_url("default", "p", None))), 400, "invalid_parameter"),
        ("if_version not a number", t.client.put(format!("{}?if_version=abc", kv("p", "s"))).body("1"), 400, "invalid_parameter"),
        ("negative if_version", t.client.put(format!("{}?if_version=-1", kv("p", "s"))).body("1"), 400, "invalid_parameter"),
        ("both conditions", t.client.put(format!("{}?if_version=1&if_absent=true", kv("p", "s"))).body("1"), 400, "invalid_parameter"),
        ("if_absent not a bool", t.client.put(format!("{}?if_absent=yes", kv("p", "s"))).body("1"), 400, "invalid_parameter"),
        ("bad wait", t.client.put(format!("{}?wait=forever", kv("p", "s"))).body("1"), 400, "invalid_parameter"),
        ("timeout too long", t.client.get(format!("{}?timeout_ms=999999", kv("p", "s"))), 400, "invalid_parameter"),
        ("bad consistency", t.client.get(format!("{}?consistency=eventual", kv("p", "s"))), 400, "invalid_parameter"),
        ("strong and after", t.client.get(format!("{}?consistency=strong&after=default:0:1", kv("p", "s"))), 400, "invalid_parameter"),
        ("garbage position", t.client.get(format!("{}?after=not-a-position", kv("p", "s"))), 400, "invalid_position"),
        ("position of another ns", t.client.get(format!("{}?after=other:0:1", kv("p", "s"))), 400, "invalid_position"),
        ("position of a partition past the namespace's", t.client.get(format!("{}?after=default:16:1", kv("p", "s"))), 400, "invalid_position"),
        (
            "position of another partition",
            t.client.get(format!("{}?after=default:{}:1", kv("p", "s"), (tern::partitioner::partition_of("p", 16) + 1) % 16)),
            400,
            "invalid_position",
        ),
        (
            "list with a position of another partition",
            t.client.get(format!("{}?after=default:{}:1", t.kv_url("default", "p", None), (tern::partitioner::partition_of("p", 16) + 1) % 16)),
            400,
            "invalid_position",
        ),
        (
            "multi-get with a position of none of its partitions",
            t.client
                .post(format!("{base}/v1/ns/default/get?after=default:{}:1", (tern::partitioner::partition_of("p", 16) + 1) % 16))
                .json(&json!({"keys": [{"pk": "p", "sk": "s"}]})),
            400,
            "invalid_position",
        ),
        ("limit 0", t.client.get(format!("{}?limit=0", t.kv_url("default", "p", None))), 400, "invalid_parameter"),
        ("limit over 1000", t.client.get(format!("{}?limit=1001", t.kv_url("default", "p", None))), 400, "invalid_parameter"),
        ("bad cursor", t.client.get(format!("{}?cursor=%%%", t.kv_url("default", "p", None))), 400, "invalid_cursor"),
        ("bad reverse", t.client.get(format!("{}?reverse=maybe", t.kv_url("default", "p", None))), 400, "invalid_parameter"),
        ("prefix over 1 KiB", t.client.get(format!("{}?prefix={}", t.kv_url("default", "p", None), "x".repeat(1025))), 413, "key_too_large"),
        ("batch not JSON", t.client.post(format!("{base}/v1/ns/default/batch")).body("[oops"), 400, "invalid_json"),
        ("batch wrong shape", t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": 3})), 400, "invalid_request"),
        ("batch unknown field", t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": [], "x": 1})), 400, "invalid_request"),
        ("empty batch", t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": []})), 400, "invalid_batch"),
        ("1001 ops", t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": thousand_one})), 413, "batch_too_large"),
        ("batch over 4 MiB", t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": huge_ops})), 413, "batch_too_large"),
        (
            "unknown op",
            t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": [{"op": "upsert", "pk": "p", "value": 1}]})),
            400,
            "invalid_op",
        ),
        (
            "put without value",
            t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": [{"op": "put", "pk": "p"}]})),
            400,
            "invalid_op",
        ),
        (
            "delete with value",
            t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": [{"op": "delete", "pk": "p", "value": 1}]})),
            400,
            "invalid_op",
        ),
        (
            "batch op pk too long",
            t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": [{"op": "delete", "pk": "p".repeat(1025)}]})),
            413,
            "key_too_large",
        ),
        ("multi-get 1001 keys", t.client.post(format!("{base}/v1/ns/default/get")).json(&json!({"keys": many_keys})), 413, "too_many_keys"),
        ("multi-get bad JSON", t.client.post(format!("{base}/v1/ns/default/get")).body("{"), 400, "invalid_json"),
        ("multi-get missing keys", t.client.post(format!("{base}/v1/ns/default/get")).json(&json!({})), 400, "invalid_request"),
        ("namespace bad name", t.client.put(format!("{base}/v1/ns/bad.name")).json(&json!({"partitions": 1})), 400, "invalid_namespace"),
        ("namespace 0 partitions", t.client.put(format!("{base}/v1/ns/zero")).json(&json!({"partitions": 0})), 400, "invalid_partitions"),
        ("namespace too many partitions", t.client.put(format!("{base}/v1/ns/many")).json(&json!({"partitions": 5000})), 400, "invalid_partitions"),
        ("namespace no body", t.client.put(format!("{base}/v1/ns/nobody")), 400, "invalid_json"),
        ("namespace negative partitions", t.client.put(format!("{base}/v1/ns/neg")).json(&json!({"partitions": -1})), 400, "invalid_request"),
        // Tern's own keys (node/reserved.rs): only the routes that own them write them.
        ("put of the namespace settings", t.client.put(kv(".settings", "namespace")).json(&json!({"write_mode": "journaled"})), 400, "reserved_key"),
        ("put of the Firebase rules", t.client.put(kv(".settings", "rules")).json(&json!("{\"rules\": {\".read\": true}}")), 400, "reserved_key"),
        ("put of a Firebase tree leaf", t.client.put(kv(".tree", "a")).body("1"), 400, "reserved_key"),
        ("delete of a Firebase tree leaf", t.client.delete(kv(".tree", "a")), 400, "reserved_key"),
        ("an onDisconnect registration", t.client.put(kv(".ondisconnect", "s")).json(&json!({"ops": []})), 400, "reserved_key"),
        ("any pk starting with a dot", t.client.put(kv(".anything", "s")).body("1"), 400, "reserved_key"),
        (
            "journaled put of a reserved pk",
            t.client.put(format!("{}?durability=journaled", kv(".settings", "namespace"))).body("1"),
            400,
            "reserved_key",
        ),
        (
            "batch reaching a reserved pk",
            t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": [{"op": "put", "pk": ".settings", "sk": "rules", "value": 1}]})),
            400,
            "reserved_key",
        ),
        ("unknown route", t.client.get(format!("{base}/v2/whatever")), 404, "not_found"),
        ("wrong method", t.client.post(format!("{base}/v1/ns")), 405, "method_not_allowed"),
    ];
    for (what, request, status, code) in cases {
        let response = request.send().await.unwrap();
        let got_status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{what}: not JSON: {text}"));
        assert_eq!(got_status, status, "{what}: {body}");
        assert_eq!(error_code(&body), code, "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.len() > 10, "{what}: message says what was wrong: {message}");
    }
    // Nothing above reached the log.
    assert_eq!(t.partition_states("default").await, before);
    let (_, list) = t.get_json("/v1/ns").await;
    assert_eq!(list["namespaces"].as_array().unwrap().len(), 1, "no namespace was created");

    // The exact limits themselves are accepted.
    let (status, body) = t.send(t.client.put(kv(&"p".repeat(1024), &"s".repeat(1024))).body(max_value)).await;
    assert_eq!(status, 200, "{body}");
    let ops: Vec<Value> = (0..1000).map(|i| json!({"op": "put", "pk": "p", "sk": i.to_string(), "value": i})).collect();
    let (status, body) = t.send(t.client.post(format!("{base}/v1/ns/default/batch")).json(&json!({"ops": ops}))).await;
    assert_eq!(status, 200, "{body}");
    // And the node is still healthy.
    let (status, _) = t.get_json("/readyz").await;
    assert_eq!(status, 200);
}
