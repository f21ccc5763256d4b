//! Authentication and authorization (issue 20), against a real `tern serve`.
//!
//! The table test walks `tern::http::routes()` — the tables the routers are
//! built from — so a route added later is covered or this test fails: each
//! route must say here what it needs, and then meets every kind of bad
//! credential.

use std::path::Path;
use std::time::{Duration, Instant};

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use reqwest::Method;
use serde_json::{json, Value};
use tern::edge::{Route, RouteAccess};
use tern::http::routes;

use crate::common::{cli, Tern};

pub(crate) const HS_SECRET: &str = "a test secret of at least thirty-two bytes";

/// A node with authentication on, JWTs by `HS_SECRET` for audience `tern`,
/// namespaces `app` and `other`, and `extra` flags.
pub(crate) async fn secured(dir: &Path, extra: &[&str]) -> (Tern, String) {
    std::fs::write(dir.join("hs.key"), HS_SECRET).unwrap();
    let data = dir.join("data");
    let token_file = dir.join("admin.token");
    let jwt_key = format!("HS256:{}", dir.join("hs.key").display());
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--auth",
        "--admin-token-file",
        token_file.to_str().unwrap(),
        "--jwt-key",
        &jwt_key,
        "--jwt-audience",
        "tern",
        "--namespace",
        "app:4",
        "--namespace",
        "other:2",
        "--firebase-emulator",
    ];
    args.extend_from_slice(extra);
    let tern = Tern::spawn(&args, dir).await;
    let root = std::fs::read_to_string(&token_file).unwrap().trim().to_string();
    (tern, root)
}

pub(crate) fn jwt(claims: Value) -> String {
    encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(HS_SECRET.as_bytes())).unwrap()
}

pub(crate) fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

pub(crate) async fn create_token(tern: &Tern, by: &str, body: Value) -> (String, String) {
    let response = tern.client.post(format!("{}/v1/tokens", tern.url)).bearer_auth(by).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 201, "{body}");
    let answer: Value = response.json().await.unwrap();
    (answer["id"].as_str().unwrap().to_string(), answer["token"].as_str().unwrap().to_string())
}

/// What a route needs of the caller, for the expectations below.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Need {
    Nothing,
    AnyToken,
    /// `verb` on pk `p1` of `app`.
    Key(&'static str),
    /// `verb` on all of `app`.
    Namespace(&'static str),
    /// Some grant in `app`.
    Visible,
    /// `verb` on every namespace.
    Everywhere(&'static str),
}

/// A request for `route` and what it needs. Every route of the table must be
/// here: a new one fails this test until it is.
fn request_for(route: &Route, revoke_id: &str) -> (String, Option<Value>, Need) {
    let m = route.method.as_str();
    let (path, body, need): (String, Option<Value>, Need) = match (m, route.path) {
        ("GET", "/v1/ns") => ("/v1/ns".into(), None, Need::AnyToken),
        ("PUT", "/v1/ns/{ns}") => ("/v1/ns/app".into(), Some(json!({"partitions": 4})), Need::Namespace("admin")),
        ("GET", "/v1/ns/{ns}") => ("/v1/ns/app".into(), None, Need::Visible),
        // Without its confirmation: a caller let in gets 400 and deletes nothing.
        ("DELETE", "/v1/ns/{ns}") => ("/v1/ns/app".into(), None, Need::Namespace("admin")),
        // Read on all of app (no prefix): nothing listed is hidden, so no cursor names a hidden key.
        ("GET", "/v1/ns/{ns}/kv") => ("/v1/ns/app/kv".into(), None, Need::Namespace("read")),
        ("GET", "/v1/ns/{ns}/kv/{*rest}") => ("/v1/ns/app/kv/p1/s".into(), None, Need::Key("read")),
        ("PUT", "/v1/ns/{ns}/kv/{*rest}") => ("/v1/ns/app/kv/p1/s".into(), Some(json!(1)), Need::Key("write")),
        ("DELETE", "/v1/ns/{ns}/kv/{*rest}") => ("/v1/ns/app/kv/p1/s".into(), None, Need::Key("write")),
        ("POST", "/v1/ns/{ns}/get") => ("/v1/ns/app/get".into(), Some(json!({"keys": [{"pk": "p1", "sk": "s"}]})), Need::Key("read")),
        ("POST", "/v1/ns/{ns}/batch") => {
            ("/v1/ns/app/batch".into(), Some(json!({"ops": [{"op": "put", "pk": "p1", "sk": "s", "value": 2}]})), Need::Key("write"))
        }
        ("GET", "/v1/ns/{ns}/watch") => ("/v1/ns/app/watch?pk=p1".into(), None, Need::Key("watch")),
        ("GET", "/v1/ns/{ns}/history") => ("/v1/ns/app/history?pk=p1&sk=s".into(), None, Need::Key("read")),
        ("GET", "/v1/ns/{ns}/procedures") => ("/v1/ns/app/procedures".into(), None, Need::Namespace("read")),
        ("GET", "/v1/ns/{ns}/procedures/{name}") => ("/v1/ns/app/procedures/agg".into(), None, Need::Namespace("read")),
        ("PUT", "/v1/ns/{ns}/procedures/{name}") => {
            ("/v1/ns/app/procedures/agg".into(), Some(json!({"runtime": "wasm", "module": "AA=="})), Need::Namespace("admin"))
        }
        ("DELETE", "/v1/ns/{ns}/procedures/{name}") => ("/v1/ns/app/procedures/agg".into(), None, Need::Namespace("admin")),
        ("GET", "/v1/ns/{ns}/outbox") => ("/v1/ns/app/outbox?partition=0".into(), None, Need::Namespace("read")),
        ("DELETE", "/v1/ns/{ns}/outbox") => ("/v1/ns/app/outbox?partition=0&below=1".into(), None, Need::Namespace("write")),
        ("GET", "/v1/ws") => ("/v1/ws".into(), None, Need::AnyToken),
        ("GET", "/v1/writes/{id}") => ("/v1/writes/some-write".into(), None, Need::AnyToken),
        ("POST", "/v1/tokens") => ("/v1/tokens".into(), Some(json!({"ns": "app", "prefix": "p", "verbs": ["read"]})), Need::Namespace("admin")),
        ("GET", "/v1/tokens") => ("/v1/tokens".into(), None, Need::AnyToken),
        ("DELETE", "/v1/tokens/{id}") => (format!("/v1/tokens/{revoke_id}"), None, Need::Namespace("admin")),
        ("GET", "/v1/cluster") => ("/v1/cluster".into(), None, Need::Everywhere("admin")),
        ("POST", "/v1/admin/snapshots") => ("/v1/admin/snapshots".into(), Some(json!({})), Need::Everywhere("admin")),
        ("GET", "/v1/admin/snapshots") => ("/v1/admin/snapshots".into(), None, Need::Everywhere("admin")),
        ("GET", "/") => ("/".into(), None, Need::Nothing),
        ("GET", "/console") => ("/console".into(), None, Need::Nothing),
        ("GET", "/console/{file}") => ("/console/app.js".into(), None, Need::Nothing),
        ("GET", "/demo") => ("/demo".into(), None, Need::Nothing),
        ("GET", "/demo/client/{file}") => ("/demo/client/tern.js".into(), None, Need::Nothing),
        ("GET", "/demo/firebase") => ("/demo/firebase".into(), None, Need::Nothing),
        ("GET", "/demo/firebase/sdk/{file}") => ("/demo/firebase/sdk/firebase-app.js".into(), None, Need::Nothing),
        ("GET", "/metrics") => ("/metrics".into(), None, Need::Everywhere("read")),
        ("GET", "/healthz") => ("/healthz".into(), None, Need::Nothing),
        ("GET", "/v1/openapi.json") => ("/v1/openapi.json".into(), None, Need::Nothing),
        ("GET", "/readyz") => ("/readyz".into(), None, Need::Nothing),
        ("GET", "/{path}.json") => ("/p1.json?ns=app".into(), None, Need::Namespace("read")),
        ("PUT" | "POST" | "PATCH", "/{path}.json") => ("/p1.json?ns=app".into(), Some(json!({"a": 1})), Need::Namespace("write")),
        ("DELETE", "/{path}.json") => ("/p1.json?ns=app".into(), None, Need::Namespace("write")),
        ("GET", "/.settings/rules.json") => ("/.settings/rules.json?ns=app".into(), None, Need::Namespace("admin")),
        ("PUT", "/.settings/rules.json") => {
            ("/.settings/rules.json?ns=app".into(), Some(json!({"rules": {".read": false, ".write": false}})), Need::Namespace("admin"))
        }
        other => panic!("route {other:?} is not in the authorization table of tests/it/auth.rs: say what it needs"),
    };
    // The table's own word must agree with what the test expects.
    let access = match need {
        Need::Nothing => RouteAccess::Public,
        Need::AnyToken => RouteAccess::Authenticated,
        _ => RouteAccess::Scoped,
    };
    assert_eq!(route.access, access, "{} {}", route.method, route.path);
    (path, body, need)
}

/// The credentials tried on every route, and whether each may pass `need`.
fn may_pass(credential: &str, need: Need) -> bool {
    match (credential, need) {
        (_, Need::Nothing) => true,
        ("none" | "malformed" | "expired_jwt" | "wrong_audience" | "revoked", _) => false,
        ("root", _) => true,
        (_, Need::AnyToken) => true,
        // Every verb, but on namespace `other` only.
        ("other_namespace", _) => false,
        // Every verb on app, but only pks under `zzz/`.
        ("other_prefix", Need::Visible) => true,
        ("other_prefix", _) => false,
        // read on all of app.
        ("read_only", Need::Visible) => true,
        ("read_only", Need::Key(verb) | Need::Namespace(verb)) => verb == "read",
        ("read_only", Need::Everywhere(_)) => false,
        // A JWT whose grants give every verb on all of app.
        ("jwt_app_admin", Need::Everywhere(_)) => false,
        ("jwt_app_admin", Need::Key(_) | Need::Namespace(_)) => true,
        ("jwt_app_admin", Need::Visible) => true,
        other => panic!("no expectation for {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_every_bad_credential() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let app_grant = |prefix: &str, verbs: Value| json!({"ns": "app", "prefix": prefix, "verbs": verbs});
    let (_, other_namespace) = create_token(&tern, &root, json!({"ns": "other", "verbs": ["admin"]})).await;
    let (_, other_prefix) = create_token(&tern, &root, app_grant("zzz/", json!(["admin"]))).await;
    let (_, read_only) = create_token(&tern, &root, app_grant("", json!(["read"]))).await;
    let (revoked_id, revoked) = create_token(&tern, &root, app_grant("", json!(["admin"]))).await;
    let (status, _) = tern.send(tern.client.delete(format!("{}/v1/tokens/{revoked_id}", tern.url)).bearer_auth(&root)).await;
    assert_eq!(status, 200);
    let exp = now_s() + 600;
    let credentials: Vec<(&str, Option<String>)> = vec![
        ("none", None),
        ("malformed", Some("tern_not-a-key".into())),
        ("expired_jwt", Some(jwt(json!({"sub": "a", "aud": "tern", "exp": now_s() - 3600, "tern_grants": [app_grant("", json!(["admin"]))]})))),
        ("wrong_audience", Some(jwt(json!({"sub": "a", "aud": "other", "exp": exp, "tern_grants": [app_grant("", json!(["admin"]))]})))),
        ("revoked", Some(revoked)),
        ("other_namespace", Some(other_namespace)),
        ("other_prefix", Some(other_prefix)),
        ("read_only", Some(read_only)),
        ("jwt_app_admin", Some(jwt(json!({"sub": "a", "aud": "tern", "exp": exp, "tern_grants": [app_grant("", json!(["admin"]))]})))),
        ("root", Some(root.clone())),
    ];
    let all = routes();
    assert!(all.len() >= 25, "the table lists every route: {}", all.len());
    let mut checked = 0;
    for route in &all {
        for (name, token) in &credentials {
            // A token to revoke, for the one route that revokes.
            let target_id = match route.path {
                "/v1/tokens/{id}" => create_token(&tern, &root, app_grant("p", json!(["read"]))).await.0,
                _ => String::new(),
            };
            let (path, body, need) = request_for(route, &target_id);
            let mut request = tern.client.request(Method::from_bytes(route.method.as_str().as_bytes()).unwrap(), format!("{}{path}", tern.url));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = &body {
                request = request.json(body);
            }
            let response = tokio::time::timeout(Duration::from_secs(30), request.send()).await.expect("answered").unwrap();
            let status = response.status().as_u16();
            let www = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_string());
            // A watch that was let in streams forever: its body is not read.
            let text = if path.contains("watch") && status == 200 { String::new() } else { response.text().await.unwrap_or_default() };
            let pass = may_pass(name, need);
            let refused = status == 401 || status == 403;
            assert_eq!(!refused, pass, "{} {path} with {name}: {status} {text}", route.method);
            if !pass {
                let unauthenticated = matches!(*name, "none" | "malformed" | "expired_jwt" | "wrong_audience" | "revoked");
                let expected = if unauthenticated { 401 } else { 403 };
                assert_eq!(status, expected, "{} {path} with {name}: {text}", route.method);
                let code = if unauthenticated { "unauthenticated" } else { "permission_denied" };
                assert!(text.contains(code), "{} {path} with {name}: {text}", route.method);
                if unauthenticated {
                    let expected = if *name == "none" { "Bearer realm=\"tern\"" } else { "Bearer realm=\"tern\", error=\"invalid_token\"" };
                    assert_eq!(www.as_deref(), Some(expected), "{} {path}: WWW-Authenticate", route.method);
                }
                if let Some(token) = token {
                    assert!(!text.contains(token.as_str()), "the answer repeats the token: {text}");
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, all.len() * credentials.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_token_touches_its_prefix_only_in_batches_multi_gets_and_watches() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let (_, token) = create_token(&tern, &root, json!({"ns": "app", "prefix": "users/", "verbs": ["read", "write", "watch"]})).await;
    let url = &tern.url;
    let put = |pk: &str| tern.client.put(format!("{url}/v1/ns/app/kv/{pk}/s")).bearer_auth(&token).json(&json!(1));
    assert_eq!(tern.send(put("users%2Fann")).await.0, 200);
    let (status, body) = tern.send(put("admins")).await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("missing grant: write on ns=app pk=\"admins\""), "{body}");
    // A batch with one op outside the prefix is refused whole, and nothing of it is applied.
    let batch = json!({"ops": [{"op": "put", "pk": "users/bob", "sk": "s", "value": 1}, {"op": "put", "pk": "admins", "sk": "s", "value": 1}]});
    let (status, _) = tern.send(tern.client.post(format!("{url}/v1/ns/app/batch")).bearer_auth(&token).json(&batch)).await;
    assert_eq!(status, 403);
    let (status, _) = tern.send(tern.client.get(format!("{url}/v1/ns/app/kv/users%2Fbob/s")).bearer_auth(&root)).await;
    assert_eq!(status, 404, "the refused batch wrote nothing");
    let keys = json!({"keys": [{"pk": "users/ann", "sk": "s"}, {"pk": "admins", "sk": "s"}]});
    let (status, _) = tern.send(tern.client.post(format!("{url}/v1/ns/app/get")).bearer_auth(&token).json(&keys)).await;
    assert_eq!(status, 403, "a multi-get with one key outside is refused");
    // Watches: its prefix yes, the whole namespace no (refused, not filtered).
    let response = tern.client.get(format!("{url}/v1/ns/app/watch?pk=users%2Fann")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    let (status, body) = tern.send(tern.client.get(format!("{url}/v1/ns/app/watch")).bearer_auth(&token)).await;
    assert_eq!(status, 403, "{body}");
    // The same over a WebSocket, per subscription; the token as a query parameter (browsers).
    let ws_url = format!("{}/v1/ws?access_token={token}", url.replace("http://", "ws://"));
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    ws.send(Message::text(json!({"type": "sub", "id": "all", "ns": "app"}).to_string())).await.unwrap();
    let reply: Value = loop {
        if let Some(Ok(Message::Text(text))) = ws.next().await {
            break serde_json::from_str(&text).unwrap();
        }
    };
    assert_eq!((reply["type"].as_str(), reply["error"]["code"].as_str()), (Some("error"), Some("permission_denied")), "{reply}");
    ws.send(Message::text(json!({"type": "sub", "id": "mine", "ns": "app", "pk": "users/ann"}).to_string())).await.unwrap();
    let reply: Value = loop {
        if let Some(Ok(Message::Text(text))) = ws.next().await {
            break serde_json::from_str(&text).unwrap();
        }
    };
    assert_eq!(reply["type"], "subscribed", "{reply}");
    // A WebSocket without a token is refused before the upgrade.
    let bare = format!("{}/v1/ws", url.replace("http://", "ws://"));
    assert!(tokio_tungstenite::connect_async(bare).await.is_err());
    // The namespace list shows what the token has grants in.
    let (_, body) = tern.send(tern.client.get(format!("{url}/v1/ns")).bearer_auth(&token)).await;
    assert_eq!(body["namespaces"], json!([{"name": "app", "partitions": 4}]), "{body}");
}

/// Issue 35, defect 3: a scoped admin mints only what it could reach
/// itself. Before the fix, a key with `admin` on `app` and `[]` on
/// `app`/`secrets/` minted a key with `admin` on all of `app` that read and
/// overwrote `secrets/db`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_admin_cannot_mint_a_key_past_its_own_carve_outs() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let url = &tern.url;
    let (status, _) = tern.send(tern.client.put(format!("{url}/v1/ns/app/kv/secrets%2Fdb/s")).bearer_auth(&root).json(&json!("pw"))).await;
    assert_eq!(status, 200);
    let carved = json!({"grants": [{"ns": "app", "prefix": "", "verbs": ["admin"]}, {"ns": "app", "prefix": "secrets/", "verbs": []}]});
    let (_, admin) = create_token(&tern, &root, carved).await;
    let mint = |body: Value| tern.client.post(format!("{url}/v1/tokens")).bearer_auth(&admin).json(&body);
    for (body, refused_at) in [
        (json!({"ns": "app", "prefix": "", "verbs": ["admin"]}), "pk=\"secrets/\""),
        (json!({"ns": "app", "prefix": "", "verbs": ["read"]}), "pk=\"secrets/\""),
        (json!({"ns": "app", "prefix": "secrets/db", "verbs": ["read"]}), "pk=\"secrets/db\""),
        (json!({"ns": "*", "prefix": "", "verbs": ["read"]}), "ns=*"),
        (json!({"ns": "other", "prefix": "", "verbs": ["read"]}), "ns=other"),
    ] {
        let (status, answer) = tern.send(mint(body.clone())).await;
        assert_eq!((status, crate::common::error_code(&answer)), (403, "permission_denied"), "{body}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(refused_at), "{body}: {answer}");
    }
    // Beside the carve-out it may mint, and what it mints cannot reach the carve-out either.
    let (status, answer) = tern.send(mint(json!({"ns": "app", "prefix": "public/", "verbs": ["admin"]}))).await;
    assert_eq!(status, 201, "{answer}");
    let minted = answer["token"].as_str().unwrap().to_string();
    let (status, _) = tern.send(tern.client.get(format!("{url}/v1/ns/app/kv/secrets%2Fdb/s")).bearer_auth(&minted)).await;
    assert_eq!(status, 403);
    // `*` with a named namespace it only reads: it cannot mint for `*`.
    let star = json!({"grants": [{"ns": "*", "prefix": "", "verbs": ["admin"]}, {"ns": "other", "prefix": "", "verbs": ["read"]}]});
    let (_, star_admin) = create_token(&tern, &root, star).await;
    let (status, answer) =
        tern.send(tern.client.post(format!("{url}/v1/tokens")).bearer_auth(&star_admin).json(&json!({"ns": "*", "verbs": ["admin"]}))).await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) =
        tern.send(tern.client.post(format!("{url}/v1/tokens")).bearer_auth(&star_admin).json(&json!({"ns": "app", "verbs": ["admin"]}))).await;
    assert_eq!(status, 201, "{answer}");
}

/// Issue 35, defect 7: with authentication on (here with the emulator's
/// create-on-first-use), an anonymous realtime upgrade creates nothing; a
/// caller with admin on the namespace does. Before the fix, `/.ws?ns=fresh`
/// with no credential created namespace `fresh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_authenticated_admin_creates_a_database_on_first_use() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let ws_url = format!("{}/.ws?v=5&ns=fresh", tern.url.replacen("http", "ws", 1));
    match tokio_tungstenite::connect_async(&ws_url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 404),
        other => panic!("an anonymous upgrade to a database that does not exist: {:?}", other.map(|(_, r)| r.status())),
    }
    let (status, _) = tern.send(tern.client.get(format!("{}/v1/ns/fresh", tern.url)).bearer_auth(&root)).await;
    assert_eq!(status, 404, "nothing was created");
    // A reader of it is refused creation too; its admin creates it.
    let (_, reader) = create_token(&tern, &root, json!({"ns": "fresh", "verbs": ["read"]})).await;
    let (status, _) = tern.send(tern.client.get(format!("{}/x.json?ns=fresh", tern.url)).bearer_auth(&reader)).await;
    assert_eq!(status, 404);
    let (status, _) = tern.send(tern.client.get(format!("{}/v1/ns/fresh", tern.url)).bearer_auth(&root)).await;
    assert_eq!(status, 404, "nothing was created");
    let mut request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(ws_url.as_str()).unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {root}").parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async(request).await.expect("the root token creates it");
    drop(ws);
    let (status, _) = tern.send(tern.client.get(format!("{}/v1/ns/fresh", tern.url)).bearer_auth(&root)).await;
    assert_eq!(status, 200);
}

/// Issue 35, defect 8: an `Idempotency-Key` is the caller's own. Before the
/// fix, bob's PUT of `acct/bob` with the key alice used for `acct/alice`
/// answered `duplicate: true` and was never applied, and a key reused for
/// another payload was silently dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_are_scoped_to_the_caller_and_a_reused_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let url = &tern.url;
    let (_, alice) = create_token(&tern, &root, json!({"ns": "app", "prefix": "acct/", "verbs": ["read", "write"]})).await;
    let (_, bob) = create_token(&tern, &root, json!({"ns": "app", "prefix": "acct/", "verbs": ["read", "write"]})).await;
    let put = |token: &str, pk: &str, value: Value| {
        tern.client.put(format!("{url}/v1/ns/app/kv/{pk}/s")).bearer_auth(token).header("idempotency-key", "k-1").json(&value)
    };
    let (status, first) = tern.send(put(&alice, "acct%2Falice", json!(1))).await;
    assert_eq!((status, first.get("duplicate")), (200, None), "{first}");
    let (status, again) = tern.send(put(&alice, "acct%2Falice", json!(1))).await;
    assert_eq!((status, again["duplicate"].as_bool(), &again["version"]), (200, Some(true), &first["version"]), "a retry: {again}");
    let (status, other) = tern.send(put(&bob, "acct%2Fbob", json!(2))).await;
    assert_eq!((status, other.get("duplicate")), (200, None), "another caller's key is not alice's: {other}");
    let (status, got) = tern.send(tern.client.get(format!("{url}/v1/ns/app/kv/acct%2Fbob/s")).bearer_auth(&bob)).await;
    assert_eq!((status, &got["value"]), (200, &json!(2)), "{got}");
    let (status, reused) = tern.send(put(&alice, "acct%2Falice", json!(3))).await;
    assert_eq!((status, crate::common::error_code(&reused)), (409, "idempotency_key_reused"), "{reused}");
    let (_, got) = tern.send(tern.client.get(format!("{url}/v1/ns/app/kv/acct%2Falice/s")).bearer_auth(&alice)).await;
    assert_eq!(got["value"], json!(1), "nothing of the reused key applied: {got}");
    // Each sees its own write by its key, and not the other's.
    let (_, seen) = tern.get_json_as("/v1/writes/k-1", &alice).await;
    assert_eq!((seen["state"].as_str(), &seen["version"]), (Some("applied"), &first["version"]), "{seen}");
    let (_, seen) = tern.get_json_as("/v1/writes/k-1", &bob).await;
    assert_eq!((seen["state"].as_str(), &seen["version"]), (Some("applied"), &other["version"]), "{seen}");
    let (_, outsider) = create_token(&tern, &root, json!({"ns": "other", "verbs": ["read", "write"]})).await;
    let (_, seen) = tern.get_json_as("/v1/writes/k-1", &outsider).await;
    assert_eq!(seen["state"].as_str(), Some("unknown"), "{seen}");
    // Firebase REST: a reused key for another value is refused too.
    let fb = |value: Value| tern.client.put(format!("{url}/acct/x.json?ns=app")).bearer_auth(&root).header("idempotency-key", "f-1").json(&value);
    assert_eq!(tern.send(fb(json!(1))).await.0, 200);
    assert_eq!(tern.send(fb(json!(1))).await.0, 200, "a retry");
    let (status, answer) = tern.send(fb(json!(2))).await;
    assert_eq!(status, 409, "{answer}");
}

/// Reads an SSE body until it ends; false when it is still open after `wait`.
pub(crate) async fn ends_within(mut response: reqwest::Response, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Err(_) => return false,
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None) | Err(_)) => return true,
        }
    }
}

/// The next text frame of a WebSocket, or None when it closed (or after `wait`).
pub(crate) async fn next_text<S>(ws: &mut S, wait: Duration) -> Option<String>
where
    S: futures::Stream<Item = Result<tokio_tungstenite::tungstenite::Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    use futures::StreamExt;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text)))) => return Some(text.to_string()),
            Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | Some(Err(_)) | None) | Err(_) => return None,
            Ok(Some(Ok(_))) => continue,
        }
    }
}

/// Every text frame a WebSocket sends until it closes (or is silent for `wait`).
pub(crate) async fn drain<S>(ws: &mut S, wait: Duration) -> Vec<String>
where
    S: futures::Stream<Item = Result<tokio_tungstenite::tungstenite::Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut said = Vec::new();
    while let Some(text) = next_text(ws, wait).await {
        said.push(text);
    }
    said
}

/// Issue 35, defect 5: a key revoked while its connections are open stops
/// reading and writing on every one of them within seconds. Before the fix
/// the realtime connection kept its identity from its `auth` message and
/// still wrote 2.5 s after the revocation, `/v1/ws` decided later `sub`s
/// with the identity of the upgrade, and SSE and Firebase streams never
/// looked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_during_open_connections_stops_on_every_protocol() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let url = &tern.url;
    let ws_base = url.replacen("http", "ws", 1);
    let (id, key) = create_token(&tern, &root, json!({"ns": "app", "verbs": ["admin"]})).await;
    // Open everything with the key.
    let sse = tern.client.get(format!("{url}/v1/ns/app/watch")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(sse.status(), 200);
    let fb_stream = tern.client.get(format!("{url}/s.json?ns=app")).bearer_auth(&key).header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(fb_stream.status(), 200);
    let (mut v1_ws, _) = tokio_tungstenite::connect_async(format!("{ws_base}/v1/ws?access_token={key}")).await.unwrap();
    v1_ws.send(Message::text(json!({"type": "sub", "id": "a", "ns": "app", "pk": "p"}).to_string())).await.unwrap();
    let subscribed = next_text(&mut v1_ws, Duration::from_secs(10)).await.unwrap();
    assert!(subscribed.contains("subscribed"), "{subscribed}");
    let (mut rt, _) = tokio_tungstenite::connect_async(format!("{ws_base}/.ws?v=5&ns=app")).await.unwrap();
    let _hello = next_text(&mut rt, Duration::from_secs(10)).await.unwrap();
    let request = |r: u64, action: &str, body: Value| Message::text(json!({"t": "d", "d": {"r": r, "a": action, "b": body}}).to_string());
    rt.send(request(1, "auth", json!({"cred": key}))).await.unwrap();
    let authed = next_text(&mut rt, Duration::from_secs(10)).await.unwrap();
    assert!(authed.contains("\"s\":\"ok\""), "{authed}");
    rt.send(request(2, "p", json!({"p": "/before", "d": 1}))).await.unwrap();
    let wrote = next_text(&mut rt, Duration::from_secs(10)).await.unwrap();
    assert!(wrote.contains("\"s\":\"ok\""), "a write before the revocation: {wrote}");
    // An onDisconnect write registered with the key: a revoked key writes nothing, not even at the close.
    rt.send(request(4, "o", json!({"p": "/on_close", "d": 1}))).await.unwrap();
    let registered = next_text(&mut rt, Duration::from_secs(10)).await.unwrap();
    assert!(registered.contains("\"s\":\"ok\""), "{registered}");
    // A second connection authenticated by `gauth` (the SDKs' other auth
    // action), listening: before the fix its listen outlived the revocation.
    let (mut rt2, _) = tokio_tungstenite::connect_async(format!("{ws_base}/.ws?v=5&ns=app")).await.unwrap();
    let _hello = next_text(&mut rt2, Duration::from_secs(10)).await.unwrap();
    rt2.send(request(1, "gauth", json!({"cred": key}))).await.unwrap();
    let authed = next_text(&mut rt2, Duration::from_secs(10)).await.unwrap();
    assert!(authed.contains("\"s\":\"ok\""), "{authed}");
    rt2.send(request(2, "q", json!({"p": "/before", "h": ""}))).await.unwrap();

    let (status, _) = tern.send(tern.client.delete(format!("{url}/v1/tokens/{id}")).bearer_auth(&root)).await;
    assert_eq!(status, 200);
    let revoked_at = Instant::now();

    // The realtime connection says so and closes; a write sent now is not applied.
    let _ = rt.send(request(3, "p", json!({"p": "/after", "d": 1}))).await;
    let said = drain(&mut rt, Duration::from_secs(5)).await;
    assert!(said.iter().any(|t| t.contains("\"a\":\"ac\"") || t.contains("permission_denied")), "realtime after revocation: {said:?}");
    assert!(!said.iter().any(|t| t.contains("\"r\":3") && t.contains("\"s\":\"ok\"")), "the write after the revocation was refused: {said:?}");
    let (status, after) = tern.send(tern.client.get(format!("{url}/after.json?ns=app")).bearer_auth(&root)).await;
    assert_eq!((status, after), (200, Value::Null), "nothing was written after the revocation");
    let said = drain(&mut rt2, Duration::from_secs(5)).await;
    assert!(said.iter().any(|t| t.contains("\"a\":\"ac\"")), "the gauth connection is told and closed: {said:?}");
    let (status, on_close) = tern.send(tern.client.get(format!("{url}/on_close.json?ns=app")).bearer_auth(&root)).await;
    assert_eq!((status, on_close), (200, Value::Null), "the revoked key's onDisconnect write was not made");
    // /v1/ws: an error, then the close.
    let said = drain(&mut v1_ws, Duration::from_secs(5)).await;
    assert!(said.last().is_some_and(|t| t.contains("unauthenticated")), "an error, then closed: {said:?}");
    // The streams end.
    assert!(ends_within(sse, Duration::from_secs(5)).await, "the SSE watch ended");
    assert!(ends_within(fb_stream, Duration::from_secs(5)).await, "the Firebase stream ended");
    assert!(revoked_at.elapsed() < Duration::from_secs(15), "all within seconds: {:?}", revoked_at.elapsed());
}

/// Issue 35, defects 5 and 9: an open stream of a JWT ends when the JWT
/// expires (with verification's 30 s of tolerated skew), whatever its `iat`
/// says; before the fix `iat: 0` exempted it, and an owner never expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_ends_when_its_jwt_expires() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, _root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    // Expired 27 s ago: still inside the skew for 3 s more.
    let token = jwt(json!({"sub": "ann", "aud": "tern", "iat": 0, "exp": now_s() - 27,
        "tern_grants": [{"ns": "app", "prefix": "", "verbs": ["read", "watch"]}]}));
    let sse = tern.client.get(format!("{}/v1/ns/app/watch", tern.url)).bearer_auth(&token).send().await.unwrap();
    assert_eq!(sse.status(), 200);
    let fb = tern.client.get(format!("{}/s.json?ns=app", tern.url)).bearer_auth(&token).header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(fb.status(), 200);
    assert!(ends_within(sse, Duration::from_secs(20)).await, "the SSE watch ended at exp");
    assert!(ends_within(fb, Duration::from_secs(5)).await, "the Firebase stream (the token is its owner) ended at exp");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwt_is_firebase_rules_auth() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let url = &tern.url;
    let rules = json!({"rules": {"users": {"$uid": {".read": "auth.uid === $uid", ".write": "auth.uid === $uid"}}}});
    let (status, _) = tern.send(tern.client.put(format!("{url}/.settings/rules.json?ns=app")).bearer_auth(&root).json(&rules)).await;
    assert_eq!(status, 200);
    let alice = jwt(json!({"sub": "alice", "aud": "tern", "exp": now_s() + 600}));
    let (status, _) = tern.send(tern.client.put(format!("{url}/users/alice.json?ns=app")).bearer_auth(&alice).json(&json!({"n": 1}))).await;
    assert_eq!(status, 200);
    let (status, body) = tern.send(tern.client.get(format!("{url}/users/alice.json?ns=app&auth={alice}"))).await;
    assert_eq!((status, body), (200, json!({"n": 1})));
    let (status, _) = tern.send(tern.client.get(format!("{url}/users/bob.json?ns=app")).bearer_auth(&alice)).await;
    assert_eq!(status, 401, "rules refuse alice bob's data (Firebase's 401 Permission denied)");
    // Without rules a database is closed when authentication is on (never the emulator's open default).
    let (status, _) = tern.send(tern.client.get(format!("{url}/x.json?ns=other")).bearer_auth(&alice)).await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentications_are_rate_limited_per_address() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "3"]).await;
    let get = |token: &str| tern.client.get(format!("{}/v1/ns", tern.url)).bearer_auth(token.to_string());
    for _ in 0..3 {
        assert_eq!(tern.send(get("tern_0123456789abcdef_guess")).await.0, 401);
    }
    let response = get("tern_0123456789abcdef_guess").send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().get("retry-after").is_some());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_failed_authentications");
    // Bad tokens from the address stay locked out until its budget refills;
    // a good token from it (another client behind the same proxy or
    // forwarding node) is served: before the fix it was answered 429 too
    // (issue 35, defect 9). Health stays public.
    assert_eq!(tern.send(get("tern_0123456789abcdef_guess")).await.0, 429);
    assert_eq!(tern.send(get(&root)).await.0, 200);
    assert_eq!(tern.send(get("tern_0123456789abcdef_guess")).await.0, 429);
    assert_eq!(tern.send(tern.client.get(format!("{}/healthz", tern.url))).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_auth_writes_an_admin_token_and_the_cli_uses_tokens() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tern = Tern::spawn(&["dev", "--auth", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()], dir.path()).await;
    let token_file = data.join("admin.token");
    assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);
    let root = std::fs::read_to_string(&token_file).unwrap().trim().to_string();
    let (ok, _, err) = cli(&tern.url, &["put", "k", "\"v\""]);
    assert!(!ok && err.contains("401 unauthenticated"), "{err}");
    let (ok, out, err) = cli(&tern.url, &["token", "create", "--token", &root, "--ns", "default", "--prefix", "k", "--verbs", "read,write"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "the token alone on one line: {out}");
    let token = lines[0];
    assert!(token.starts_with("tern_"));
    assert!(cli(&tern.url, &["put", "--token", token, "k", "\"v\""]).0);
    let (ok, _, err) = cli(&tern.url, &["put", "--token", token, "other", "\"v\""]);
    assert!(!ok && err.contains("403 permission_denied"), "{err}");
    let (ok, out, _) = cli(&tern.url, &["token", "ls", "--token", &root]);
    let id = &token[5..21];
    assert!(ok && out.contains(id) && !out.contains(token), "ls shows ids, never secrets: {out}");
    assert!(cli(&tern.url, &["token", "revoke", "--token", &root, id]).0);
    let (ok, _, err) = cli(&tern.url, &["get", "--token", token, "k"]);
    assert!(!ok && err.contains("401"), "revoked at once on the node that revoked it: {err}");
    // A restart keeps the admin token (made once) and the keys (replicated through the log).
    drop(tern);
    let tern = Tern::spawn(&["dev", "--auth", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()], dir.path()).await;
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), root);
    assert!(cli(&tern.url, &["get", "--token", &root, "k"]).0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_listen_beyond_loopback_without_auth() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(crate::common::bin())
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("refusing to listen on 0.0.0.0:0 without authentication") && stderr.contains("--insecure"), "{stderr}");
}

/// Two nodes on one Kafka broker, each holding every partition: a key
/// revoked on one is refused by the other within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_on_one_node_is_refused_by_another_within_seconds() {
    let bootstrap = crate::common::kafka_bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("auth{}.", std::process::id());
    let log = format!("kafka://{bootstrap}");
    let token_file = dir.path().join("admin.token");
    let node = |id: &str| {
        let data = dir.path().join(id);
        vec![
            "serve".to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data.display().to_string(),
            "--node-id".into(),
            id.into(),
            "--log".into(),
            log.clone(),
            "--kafka-topic-prefix".into(),
            prefix.clone(),
            "--kafka-membership".into(),
            "assign".into(),
            "--auth".into(),
            "--admin-token-file".into(),
            token_file.display().to_string(),
            "--namespace".into(),
            "app:2".into(),
        ]
    };
    let a_args = node("a");
    let a = Tern::spawn(&a_args.iter().map(String::as_str).collect::<Vec<_>>(), dir.path()).await;
    let b_args = node("b");
    let b = Tern::spawn(&b_args.iter().map(String::as_str).collect::<Vec<_>>(), dir.path()).await;
    let root = std::fs::read_to_string(&token_file).unwrap().trim().to_string();
    let (id, token) = create_token(&a, &root, json!({"ns": "app", "verbs": ["read", "write"]})).await;
    let get_on_b = || b.client.get(format!("{}/v1/ns/app/kv/k/s", b.url)).bearer_auth(&token);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _) = b.send(get_on_b()).await;
        if status == 404 {
            break;
        }
        assert!(Instant::now() < deadline, "node b never learned the new key: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _) = a.send(a.client.delete(format!("{}/v1/tokens/{id}", a.url)).bearer_auth(&root)).await;
    assert_eq!(status, 200);
    let revoked_at = Instant::now();
    loop {
        let (status, body) = b.send(get_on_b()).await;
        if status == 401 {
            assert_eq!(body["error"]["code"], "unauthenticated");
            break;
        }
        assert!(revoked_at.elapsed() < Duration::from_secs(10), "node b still accepts the revoked key: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A key pair made by `openssl` in `dir`: (private PEM, public PEM).
fn key_pair(dir: &Path, name: &str, genpkey: &[&str]) -> (Vec<u8>, std::path::PathBuf) {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub.pem"));
    let run = |args: &[&str]| {
        let output = std::process::Command::new("openssl").args(args).output().unwrap();
        assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    };
    let mut args = vec!["genpkey"];
    args.extend_from_slice(genpkey);
    args.extend_from_slice(&["-out", private.to_str().unwrap()]);
    run(&args);
    run(&["pkey", "-in", private.to_str().unwrap(), "-pubout", "-out", public.to_str().unwrap()]);
    (std::fs::read(&private).unwrap(), public)
}

/// RS256, ES256 and EdDSA keys given as PEM files, and an ES256 key given in
/// a JWKS file (chosen by `kid`): a token signed by each verifies; one signed
/// by a key of the right kind that is not configured does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwts_of_every_algorithm_and_a_jwks_file_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (rsa, rsa_pub) = key_pair(dir.path(), "rsa", &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]);
    let (ec, ec_pub) = key_pair(dir.path(), "ec", &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]);
    let (ed, ed_pub) = key_pair(dir.path(), "ed", &["-algorithm", "ED25519"]);
    let (jwks_ec, _) = key_pair(dir.path(), "jwks", &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]);
    let (stranger, _) = key_pair(dir.path(), "stranger", &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]);
    let jwks_key = EncodingKey::from_ec_pem(&jwks_ec).unwrap();
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&jwks_key, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some("k1".into());
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, serde_json::to_string(&json!({"keys": [jwk]})).unwrap()).unwrap();
    let data = dir.path().join("data");
    let keys = [format!("RS256:{}", rsa_pub.display()), format!("ES256:{}", ec_pub.display()), format!("EdDSA:{}", ed_pub.display())];
    let tern = Tern::spawn(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
            "--auth",
            "--namespace",
            "app:2",
            "--jwt-key",
            &keys[0],
            "--jwt-key",
            &keys[1],
            "--jwt-key",
            &keys[2],
            "--jwt-jwks-file",
            jwks.to_str().unwrap(),
            "--jwt-issuer",
            "https://issuer",
            "--auth-failures-per-minute",
            "0",
        ],
        dir.path(),
    )
    .await;
    let claims = json!({"sub": "svc", "iss": "https://issuer", "exp": now_s() + 600, "tern_grants": [{"ns": "app", "verbs": ["read"]}]});
    let signed = |alg: Algorithm, key: &EncodingKey, kid: Option<&str>| {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_string);
        encode(&header, &claims, key).unwrap()
    };
    let get = |token: String| tern.client.get(format!("{}/v1/ns/app/kv/k/s", tern.url)).bearer_auth(token);
    for (name, token) in [
        ("RS256", signed(Algorithm::RS256, &EncodingKey::from_rsa_pem(&rsa).unwrap(), None)),
        ("ES256", signed(Algorithm::ES256, &EncodingKey::from_ec_pem(&ec).unwrap(), None)),
        ("EdDSA", signed(Algorithm::EdDSA, &EncodingKey::from_ed_pem(&ed).unwrap(), None)),
        ("JWKS ES256 by kid", signed(Algorithm::ES256, &jwks_key, Some("k1"))),
    ] {
        let (status, body) = tern.send(get(token)).await;
        assert_eq!(status, 404, "{name}: verified, allowed, no such record: {body}");
    }
    let (status, body) = tern.send(get(signed(Algorithm::ES256, &EncodingKey::from_ec_pem(&stranger).unwrap(), None))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthenticated")), "{body}");
    let mut wrong_issuer = claims.clone();
    wrong_issuer["iss"] = json!("https://elsewhere");
    let token = encode(&Header::new(Algorithm::EdDSA), &wrong_issuer, &EncodingKey::from_ed_pem(&ed).unwrap()).unwrap();
    let (status, body) = tern.send(get(token)).await;
    assert_eq!(status, 401);
    assert!(body["error"]["message"].as_str().unwrap().contains("iss"), "{body}");
}

/// Every limit of `/v1/tokens` with bad input, each a precise 4xx that
/// makes nothing; hostile tokens and ids; system namespaces out of reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_requests_with_bad_input_get_precise_errors_and_make_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (tern, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let url = &tern.url;
    let create = |body: Value| tern.client.post(format!("{url}/v1/tokens")).bearer_auth(&root).json(&body);
    let grant = json!({"ns": "app", "verbs": ["read"]});
    let too_many: Vec<Value> = (0..65).map(|_| grant.clone()).collect();
    for (body, status, code, needle) in [
        (json!({"grants": too_many}), 400, "invalid_grant", "1 to 64 grants"),
        (json!({"grants": []}), 400, "invalid_grant", "1 to 64 grants"),
        (json!({"ns": "app", "verbs": ["read"], "description": "d".repeat(257)}), 400, "invalid_grant", "at most 256 bytes"),
        (json!({"ns": "app", "verbs": ["read"], "grants": [grant]}), 400, "invalid_grant", "not both"),
        (json!({"ns": "app", "verbs": ["fly"]}), 400, "invalid_grant", "unknown verb"),
        (json!({"ns": "app"}), 400, "invalid_grant", "verbs is required"),
        (json!({"ns": "bad name", "verbs": ["read"]}), 400, "invalid_grant", "invalid"),
        (json!({"ns": "_tern", "verbs": ["read"]}), 400, "invalid_grant", "invalid"),
        (json!({"ns": "app", "prefix": "p".repeat(1025), "verbs": ["read"]}), 400, "invalid_grant", "at most 1024 bytes"),
        (json!({"ns": "app", "verbs": ["read"], "scope": "all"}), 400, "invalid_request", "scope"),
        (json!({}), 400, "invalid_grant", "needs grants"),
    ] {
        let (got, answer) = tern.send(create(body.clone())).await;
        assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{body}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(needle), "{body}: {answer}");
    }
    let huge = tern.client.post(format!("{url}/v1/tokens")).bearer_auth(&root).body(vec![b' '; 65 * 1024]).send().await.unwrap();
    assert_eq!(huge.status(), 413);
    // Unicode and route words are fine as prefixes.
    let (status, _) = tern.send(create(json!({"ns": "app", "prefix": "tokens/ünï/", "verbs": ["read"]}))).await;
    assert_eq!(status, 201);
    let (_, listed) = tern.send(tern.client.get(format!("{url}/v1/tokens")).bearer_auth(&root)).await;
    assert_eq!(listed["tokens"].as_array().unwrap().len(), 1, "nothing else was made: {listed}");
    // Revoking what does not exist, or what is no id.
    for id in ["0123456789abcdef", "..%2F..", "%C3%BC", "tokens"] {
        let (status, body) = tern.send(tern.client.delete(format!("{url}/v1/tokens/{id}")).bearer_auth(&root)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("token_not_found")), "{id}: {body}");
    }
    // Hostile tokens: a JWT past 8 KiB, a header that is not text, a key of another shape.
    let long_jwt = format!("eyJ{}.e30.x", "a".repeat(9000));
    let non_text = reqwest::header::HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap();
    for request in [
        tern.client.get(format!("{url}/v1/ns")).bearer_auth(&long_jwt),
        tern.client.get(format!("{url}/v1/ns")).header("authorization", non_text),
        tern.client.get(format!("{url}/v1/ns")).bearer_auth("tern_0123456789ABCDEF_secret"),
    ] {
        let (status, body) = tern.send(request).await;
        assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthenticated")), "{body}");
        assert!(!body.to_string().contains("aaaaaaaaaa"), "the token is not echoed");
    }
    // No one makes a system namespace, not even root; root alone reads it.
    let (status, body) = tern.send(tern.client.put(format!("{url}/v1/ns/_tern")).bearer_auth(&root).json(&json!({"partitions": 1}))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_namespace")), "{body}");
    let (_, everything) = create_token(&tern, &root, json!({"ns": "*", "verbs": ["admin"]})).await;
    let (status, _) = tern.send(tern.client.get(format!("{url}/v1/ns/_tern/kv/keys")).bearer_auth(&everything)).await;
    assert_eq!(status, 403, "* does not cover the system namespace");
    let (status, keys) = tern.send(tern.client.get(format!("{url}/v1/ns/_tern/kv/keys")).bearer_auth(&root)).await;
    assert_eq!(status, 200);
    // Not even root writes it through /v1: a key planted there would authenticate.
    let forged = json!({"id": "0123456789abcdef", "grants": [{"ns": "*", "prefix": "", "verbs": ["admin"]}]});
    let (status, body) = tern.send(tern.client.put(format!("{url}/v1/ns/_tern/kv/keys/0123456789abcdef")).bearer_auth(&root).json(&forged)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("reserved_key")), "{body}");
    assert!(!keys.to_string().contains(&everything["tern_".len() + 17..]), "stored hashed, never the secret");
}
