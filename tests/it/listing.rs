//! Listing a whole namespace (`GET /v1/ns/{ns}/kv`): every record of every
//! partition, in `(pk, sk)` order, page by page, on a real node.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::{self, Tern};

/// Every page of a listing from `query` on (`&cursor=` added), with `limit`.
async fn pages(t: &Tern, ns: &str, query: &str, limit: usize) -> Vec<(String, String, Value)> {
    let (mut all, mut cursor) = (Vec::new(), None::<String>);
    for _ in 0..10_000 {
        let mut url = format!("{}/v1/ns/{ns}/kv?limit={limit}{query}", t.url);
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let (status, body) = t.get_json(&url[t.url.len()..]).await;
        assert_eq!(status, 200, "{url}: {body}");
        let items = body["items"].as_array().unwrap();
        assert!(items.len() <= limit, "{body}");
        assert!(body["position"].as_str().is_some_and(|p| p.starts_with(&format!("{ns}:"))), "{body}");
        for item in items {
            all.push((item["pk"].as_str().unwrap().to_string(), item["sk"].as_str().unwrap().to_string(), item["value"].clone()));
        }
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return all,
        }
    }
    panic!("the pages never ended");
}

/// Keys of many lengths and characters, route words among them: each
/// listing, whatever its page size, is exactly the records written, in
/// `(pk, sk)` order, once; a prefix and a partition narrow it; Tern's own
/// records (a Firebase tree's) appear only when asked for by their prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_lists_every_record_once_in_pk_sk_order() {
    let data = tempfile::tempdir().unwrap();
    let t = Tern::dev(data.path()).await;
    let mut written = BTreeSet::new();
    let pks = ["kv", "watch", "get", "a", "ab", "b", "user/1", "user/10", "user/2", "é", "日本", "z z", "%2F", "a".repeat(1024).leak()];
    for (i, pk) in pks.iter().enumerate() {
        for sk in ["", "s", "s/1", "zz"].iter().take(1 + i % 4) {
            let (status, body) = t.put(pk, sk, &json!({ "pk": pk, "sk": sk })).await;
            assert_eq!(status, 200, "{body}");
            written.insert((pk.to_string(), sk.to_string()));
        }
    }
    // A Firebase write: records of Tern's own (pk `.tree`) in the namespace.
    let (status, _) = t.send(t.client.put(format!("{}/fb/x.json?ns=default", t.url)).json(&json!(1))).await;
    assert_eq!(status, 200);
    t.wait_caught_up("default").await;
    let expected: Vec<(String, String)> = written.iter().cloned().collect();
    for limit in [1, 7, 1000] {
        let listed = pages(&t, "default", "", limit).await;
        let keys: Vec<(String, String)> = listed.iter().map(|(pk, sk, _)| (pk.clone(), sk.clone())).collect();
        assert_eq!(keys, expected, "limit {limit}");
        for (pk, sk, value) in &listed {
            assert_eq!(value, &json!({ "pk": pk, "sk": sk }), "each record's own value");
        }
    }
    let users: Vec<(String, String)> = pages(&t, "default", "&prefix=user%2F", 2).await.into_iter().map(|(pk, sk, _)| (pk, sk)).collect();
    assert_eq!(users, expected.iter().filter(|(pk, _)| pk.starts_with("user/")).cloned().collect::<Vec<_>>());
    let own = pages(&t, "default", "&prefix=.", 100).await;
    assert!(!own.is_empty() && own.iter().all(|(pk, _, _)| pk.starts_with('.')), "{own:?}");
    for partition in [0u32, 3] {
        let listed: Vec<(String, String)> =
            pages(&t, "default", &format!("&partition={partition}"), 3).await.into_iter().map(|(pk, sk, _)| (pk, sk)).collect();
        let of_partition: Vec<(String, String)> =
            expected.iter().filter(|(pk, _)| tern::partitioner::partition_of(pk, 16) == partition).cloned().collect();
        assert_eq!(listed, of_partition, "partition {partition}");
    }
    // The CLI pages the same way: --limit and --cursor, --partition.
    let keys_of = |out: &str| -> (Vec<(String, String)>, Option<String>) {
        let page: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let keys = page["items"].as_array().unwrap().iter().map(|i| (i["pk"].as_str().unwrap().into(), i["sk"].as_str().unwrap().into())).collect();
        (keys, page["next_cursor"].as_str().map(String::from))
    };
    let (ok, out, err) = common::cli(&t.url, &["ls", "--limit", "3", "--json"]);
    assert!(ok, "{err}");
    let (first, cursor) = keys_of(&out);
    assert_eq!(first, expected[..3]);
    let (ok, out, err) = common::cli(&t.url, &["ls", "--limit", "3", "--cursor", &cursor.expect("more pages"), "--json"]);
    assert!(ok, "{err}");
    assert_eq!(keys_of(&out).0, expected[3..6]);
    let (ok, out, err) = common::cli(&t.url, &["ls", "--partition", "3", "--limit", "1000", "--json"]);
    assert!(ok, "{err}");
    let of_3: Vec<(String, String)> = expected.iter().filter(|(pk, _)| tern::partitioner::partition_of(pk, 16) == 3).cloned().collect();
    assert_eq!(keys_of(&out), (of_3, None));
}

/// Bad input gets a precise 400 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_listing_request_is_refused_precisely() {
    let data = tempfile::tempdir().unwrap();
    let t = Tern::dev(data.path()).await;
    let long_prefix = "p".repeat(1025);
    let cases = [
        ("limit=0", "invalid_parameter", "limit must be between 1 and 1000"),
        ("limit=1001", "invalid_parameter", "limit must be between 1 and 1000"),
        ("cursor=not-a-cursor", "invalid_cursor", "pass next_cursor exactly"),
        ("partition=16", "invalid_request", "partition is 0 to 15"),
        ("partition=-1", "invalid_request", "partition is 0 to 15"),
        (&*format!("prefix={long_prefix}"), "key_too_large", "prefix is 1025 bytes"),
        ("after=default:16:1", "invalid_position", "has 16 (0 to 15)"),
        ("after=other:0:1", "invalid_position", "not \"default\""),
        ("sk=x", "invalid_parameter", "sk"),
    ];
    for (query, code, message) in cases {
        let (status, body) = t.get_json(&format!("/v1/ns/default/kv?{query}")).await;
        let expected = if code == "key_too_large" { 413 } else { 400 };
        assert_eq!((status, common::error_code(&body)), (expected, code), "{query}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(message), "{query}: {body}");
    }
    let (status, body) = t.get_json("/v1/ns/nothing-here/kv").await;
    assert_eq!((status, common::error_code(&body)), (404, "namespace_not_found"), "{body}");
    let (status, body) = t.get_json("/v1/ns/default/kv").await;
    assert_eq!((status, &body["items"], &body["next_cursor"]), (200, &json!([]), &Value::Null), "an empty namespace: {body}");
}
