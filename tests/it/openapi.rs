//! `GET /v1/openapi.json` against the route table, both ways: every native
//! route is described, and nothing is described that does not exist. (The
//! test command also validates the document with a standard validator,
//! `openapi-spec-validator`.)

use std::collections::BTreeSet;

use crate::common::Tern;
use serde_json::Value;

/// The (method, path) pairs an OpenAPI path stands for in the route table:
/// a record path is one route with a `{*rest}` tail.
fn route_of(method: &str, path: &str) -> (String, String) {
    let route = match path {
        "/v1/ns/{ns}/kv/{pk}" | "/v1/ns/{ns}/kv/{pk}/{sk}" => "/v1/ns/{ns}/kv/{*rest}",
        other => other,
    };
    (method.to_ascii_uppercase(), route.to_string())
}

#[tokio::test]
async fn the_description_names_every_route_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let answer = t.client.get(format!("{}/v1/openapi.json", t.url)).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["content-type"], "application/json");
    let document: Value = answer.json().await.unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["info"]["version"], env!("CARGO_PKG_VERSION"), "the description is of this version");

    let mut described = BTreeSet::new();
    let mut operation_ids = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().unwrap().iter().filter(|(m, _)| *m != "parameters") {
            described.insert(route_of(method, path));
            let id = operation["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has an operationId"));
            assert!(operation_ids.insert(id.to_string()), "operationId {id} is used once");
            assert!(operation["summary"].is_string() && operation["responses"].is_object(), "{method} {path}");
            // Every `{name}` of the path is a parameter of it.
            let names: Vec<&str> = path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect();
            let parameters: Vec<&Value> =
                item["parameters"].as_array().into_iter().flatten().chain(operation["parameters"].as_array().into_iter().flatten()).collect();
            // A `$ref` is followed to its component: what it names is checked, not its key.
            let resolved: Vec<&Value> = parameters
                .iter()
                .map(|p| match p["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/parameters/")) {
                    Some(key) => &document["components"]["parameters"][key],
                    None => *p,
                })
                .collect();
            for name in names {
                let declared = resolved.iter().any(|p| p["name"] == name && p["in"] == "path" && p["required"] == true);
                assert!(declared, "{method} {path}: path parameter {name} is declared, required");
            }
        }
    }
    // The limits it states are the server's own.
    let parameters = &document["components"]["parameters"];
    assert_eq!(parameters["timeout_ms"]["schema"]["maximum"], tern::limits::WAIT_MS_MAX, "timeout_ms");
    assert_eq!(parameters["idempotency_key"]["schema"]["maxLength"], tern::limits::WRITE_ID_BYTES_MAX, "Idempotency-Key");
    assert_eq!(parameters["idempotency_key"]["name"], "Idempotency-Key");
    let settings = &document["components"]["schemas"]["NamespaceSettings"]["properties"];
    assert_eq!(settings["partitions"]["maximum"], tern::limits::PARTITIONS_MAX, "partitions");
    assert_eq!(settings["history_max"]["maximum"], tern::limits::HISTORY_MAX_MAX, "history_max");
    let history = &document["paths"]["/v1/ns/{ns}/history"]["get"]["parameters"];
    let limit = history.as_array().unwrap().iter().find(|p| p["name"] == "limit").expect("history's limit");
    assert_eq!(limit["schema"]["maximum"], tern::limits::HISTORY_MAX_MAX, "history limit");

    let routes: BTreeSet<(String, String)> =
        tern::http::routes().into_iter().filter(|r| r.path.starts_with("/v1/")).map(|r| (r.method.to_string(), r.path.to_string())).collect();
    let undescribed: Vec<_> = routes.difference(&described).collect();
    assert!(undescribed.is_empty(), "routes src/api/openapi.json does not describe: {undescribed:?}");
    let invented: Vec<_> = described.difference(&routes).collect();
    assert!(invented.is_empty(), "src/api/openapi.json describes what no route serves: {invented:?}");

    // It is public: a node with authentication serves it without a token.
    let auth_dir = tempfile::tempdir().unwrap();
    let d = auth_dir.path().to_str().unwrap();
    let guarded = Tern::spawn(&["dev", "--listen", "127.0.0.1:0", "--data-dir", d, "--auth"], auth_dir.path()).await;
    assert_eq!(guarded.client.get(format!("{}/v1/openapi.json", guarded.url)).send().await.unwrap().status(), 200);
}
