//! What browsers and hand-typed requests need of the HTTP front: CORS for
//! pages on other origins (preflights answered before authentication, on
//! both protocols), and request targets with the raw bytes curl sends
//! (Firebase's documented `orderBy="$key"`), served as their sender meant.

use std::process::{Command, Stdio};

use crate::common::Tern;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const APP: &str = "http://app.test:5173";

/// The node's admin token (`tern dev --auth`).
fn admin_token(t: &Tern) -> String {
    std::fs::read_to_string(t.data_dir.join("admin.token")).unwrap().trim().to_string()
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

async fn preflight(t: &Tern, path: &str, origin: &str, method: &str) -> reqwest::Response {
    t.client
        .request(reqwest::Method::OPTIONS, format!("{}{path}", t.url))
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header("access-control-request-headers", "authorization, content-type, if-match")
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn pages_of_a_configured_origin_may_call_both_protocols_and_no_other_may() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let t = Tern::spawn(&["dev", "--listen", "127.0.0.1:0", "--data-dir", d, "--auth", "--cors-origin", APP], dir.path()).await;
    let token = admin_token(&t);

    // Preflights carry no credentials: answered before authentication.
    for (path, method) in [("/v1/ns/default/kv/svc%2Fapi/config", "PUT"), ("/v1/ns/default/kv", "GET"), ("/app.json", "PATCH")] {
        let answer = preflight(&t, path, APP, method).await;
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
        assert_eq!(header(&answer, "access-control-allow-origin"), Some(APP), "{path}");
        assert!(header(&answer, "access-control-allow-methods").unwrap().contains(method), "{path}");
        assert_eq!(header(&answer, "access-control-allow-headers"), Some("authorization, content-type, if-match"), "{path}");
        assert_eq!(header(&answer, "access-control-max-age"), Some("600"));
    }
    let refused = preflight(&t, "/v1/ns/default/kv/a", "http://evil.test", "PUT").await;
    assert_eq!(header(&refused, "access-control-allow-origin"), None, "an origin not configured is not allowed");

    // Real requests: the answer names the origin and exposes Tern's headers.
    let put = t
        .client
        .put(t.kv_url("default", "svc/api", Some("config")))
        .header("origin", APP)
        .bearer_auth(&token)
        .body(r#"{"replicas": 3}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(header(&put, "access-control-allow-origin"), Some(APP));
    assert!(header(&put, "vary").unwrap().to_ascii_lowercase().contains("origin"));
    let get = t.client.get(t.kv_url("default", "svc/api", Some("config"))).header("origin", APP).bearer_auth(&token).send().await.unwrap();
    assert_eq!(header(&get, "access-control-allow-origin"), Some(APP));
    assert!(header(&get, "access-control-expose-headers").unwrap().contains("x-tern-served-by"));
    // A refusal carries them too: the page can read why.
    let unauthenticated = t.client.get(t.kv_url("default", "svc/api", Some("config"))).header("origin", APP).send().await.unwrap();
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(header(&unauthenticated, "access-control-allow-origin"), Some(APP));
    let firebase = t.client.get(format!("{}/app.json?auth=owner", t.url)).header("origin", APP).send().await.unwrap();
    assert_eq!(header(&firebase, "access-control-allow-origin"), Some(APP), "Firebase's paths: {}", firebase.status());
    // Watches an HTTP/2 connection answers itself carry them too.
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let watch = h2.get(format!("{}/v1/ns/default/watch?pk=svc%2Fapi", t.url)).header("origin", APP).bearer_auth(&token).send().await.unwrap();
    assert_eq!((watch.version(), watch.status().as_u16()), (reqwest::Version::HTTP_2, 200));
    assert_eq!(header(&watch, "access-control-allow-origin"), Some(APP));
    assert!(header(&watch, "access-control-expose-headers").unwrap().contains("x-tern-error-code"));
    let refused = h2.get(format!("{}/v1/ns/default/watch", t.url)).header("origin", APP).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(header(&refused, "access-control-allow-origin"), Some(APP), "an HTTP/2 watch's refusal too");
    // Another origin gets nothing that lets its page read the answer.
    let other =
        t.client.get(t.kv_url("default", "svc/api", Some("config"))).header("origin", "http://evil.test").bearer_auth(&token).send().await.unwrap();
    assert_eq!(header(&other, "access-control-allow-origin"), None);
}

#[tokio::test]
async fn without_configured_origins_no_answer_allows_another_origin() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let answer = preflight(&t, "/v1/ns/default/kv/a", APP, "PUT").await;
    assert_eq!(header(&answer, "access-control-allow-origin"), None);
    let get = t.client.get(format!("{}/v1/ns/default", t.url)).header("origin", APP).send().await.unwrap();
    assert_eq!(get.status(), 200);
    assert_eq!(header(&get, "access-control-allow-origin"), None);
}

#[test]
fn an_origin_that_browsers_never_send_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for origin in ["http://app.test/", "app.test", "http://App.test", "ftp://app.test", "https://app.test:443", "*"] {
        let mut args = vec!["dev", "--listen", "127.0.0.1:0", "--data-dir", d, "--cors-origin", origin];
        if origin == "*" {
            // `*` is valid alone; with another origin it is not.
            args.extend(["--cors-origin", APP]);
        }
        // Bounded: a node that started anyway would never exit by itself.
        let mut child = Command::new(crate::common::bin()).args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{origin}: tern dev started with an origin it should refuse");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(!status.success(), "{origin}");
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(stderr.contains("cors_origins"), "{origin}: {stderr}");
    }
}

/// Sends `request` as raw bytes on one connection; returns what came back
/// until the server closed it.
async fn raw(t: &Tern, request: &[u8]) -> String {
    let address = t.url.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    socket.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(30), socket.read_to_end(&mut answer)).await.expect("the server closes").unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn firebases_documented_curl_with_raw_quotes_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let dinosaurs = json!({"stegosaurus": {"height": 4}, "lambeosaurus": {"height": 2.1}, "bruhathkayosaurus": {"height": 25}});
    let put = t.client.put(format!("{}/dinosaurs.json?ns=dinos", t.url)).body(dinosaurs.to_string()).send().await.unwrap();
    assert_eq!(put.status(), 200);

    // curl sends the query as typed: `"` raw on the request line.
    let url = format!("{}/dinosaurs.json?ns=dinos&orderBy=\"$key\"&startAt=\"l\"&print=pretty", t.url);
    let output = Command::new("curl").args(["-s", "-w", "\n%{http_code}", &url]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let (body, status) = text.rsplit_once('\n').unwrap();
    assert_eq!(status, "200", "{body}");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body, json!({"lambeosaurus": {"height": 2.1}, "stegosaurus": {"height": 4}}));

    // Tern's own API likewise: a raw quote in a prefix is a quote.
    let put = t.client.put(t.kv_url("default", "\"quoted\"", Some("s"))).body("1").send().await.unwrap();
    assert_eq!(put.status(), 200);
    let answer = raw(&t, b"GET /v1/ns/default/kv?prefix=\"quo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""pk":"\"quoted\"""#), "{answer}");

    // Several requests on one connection: a body's quotes are left as they
    // are, and the next request's target is still read right.
    let body = r#"{"note": "GET /x?\"y\" HTTP/1.1"}"#;
    let pipelined = format!(
        "PUT /v1/ns/default/kv/p/s?if_absent=true HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}\
         GET /v1/ns/default/kv?prefix=\"quo&limit=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let answer = raw(&t, pipelined.as_bytes()).await;
    assert_eq!(answer.matches("HTTP/1.1 200").count(), 2, "{answer}");
    let stored: Value = t.client.get(t.kv_url("default", "p", Some("s"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(stored["value"], json!({"note": "GET /x?\"y\" HTTP/1.1"}), "the body was stored as sent");
}

#[tokio::test]
async fn head_is_answered_where_allow_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tern::dev(dir.path()).await;
    let put = t.client.put(t.kv_url("default", "svc/api", Some("config"))).body(r#"{"replicas": 3}"#).send().await.unwrap();
    assert_eq!(put.status(), 200);
    // Every route whose 405 names HEAD in `Allow` answers HEAD as GET, without a body.
    let not_allowed = t.client.patch(t.kv_url("default", "svc/api", Some("config"))).send().await.unwrap();
    assert_eq!(not_allowed.status(), 405);
    assert!(header(&not_allowed, "allow").unwrap().contains("HEAD"), "{:?}", not_allowed.headers());
    // (url, whether two reads are the same bytes: a namespace's description
    // carries staleness in ms, which may gain a digit between two reads, as
    // a CI run found)
    for (url, same_bytes) in [
        (t.kv_url("default", "svc/api", Some("config")), true),
        (t.kv_url("default", "svc/api", None), true),
        (format!("{}/v1/ns/default/kv?prefix=svc", t.url), true),
        (format!("{}/v1/ns/default", t.url), false),
    ] {
        let get = t.client.get(&url).send().await.unwrap();
        let (get_status, get_length) = (get.status(), get.bytes().await.unwrap().len());
        let head = t.client.head(&url).send().await.unwrap();
        assert_eq!(head.status(), get_status, "{url}");
        let head_length: usize = header(&head, "content-length").expect("a HEAD says the length").parse().unwrap();
        match same_bytes {
            true => assert_eq!(head_length, get_length, "{url}"),
            false => assert!(head_length.abs_diff(get_length) <= 64 && head_length > 0, "{url}: {head_length} vs {get_length}"),
        }
        assert!(head.bytes().await.unwrap().is_empty(), "{url}");
    }
    // Firebase's paths take no HEAD; their 405 says which methods they take.
    let firebase = t.client.head(format!("{}/app.json", t.url)).send().await.unwrap();
    assert_eq!(firebase.status(), 405);
    assert_eq!(header(&firebase, "allow"), Some("GET, PUT, PATCH, POST, DELETE"));
}
