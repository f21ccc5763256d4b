//! Tenant isolation, generated (issue 35): every operation of every
//! protocol, tried by every kind of principal, against data planted first.
//!
//! The operations come from the node's own tables: every route
//! (`tern::http::routes`, each over HTTP/1.1 and HTTP/2) and every message
//! type of the long-lived protocols (`tern::http::messages`: `/v1/ws`'s
//! client messages, the realtime protocol's actions). `operations_of` says
//! what each needs; a route or message added later without a line there
//! fails this test. The principals: no credential, a malformed key, an
//! expired JWT, a JWT for another audience, a key revoked before, the admin
//! of another namespace, a key for another prefix, an admin with a
//! carve-out inside its grant, a reader, a JWT admin, the root key; a key
//! revoked *during* open connections, and a procedure of another namespace.
//!
//! What is checked, for each (operation, principal): it is refused exactly
//! when the grant model (`Principal::may`, the rules of docs/security.md)
//! says so; no answer (body, error, stream, frame) holds a planted value the
//! principal may not read, or any key's secret; and at the end, every write
//! of an allowed operation is there and no write, token, namespace or
//! record of a refused one is.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::SinkExt;
use reqwest::Method;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::auth::{create_token, drain, jwt, next_text, now_s, secured};
use crate::common::Tern;

/// How long an allowed stream is read for what it sends first (it ends
/// sooner when its first answer is complete).
const STREAM_READ_WAIT: Duration = Duration::from_secs(5);

/// A grant as the model sees it.
#[derive(Clone, Copy)]
struct G {
    ns: &'static str,
    prefix: &'static str,
    verbs: &'static [&'static str],
}

impl G {
    fn json(&self) -> Value {
        json!({"ns": self.ns, "prefix": self.prefix, "verbs": self.verbs})
    }
}

#[derive(Clone)]
enum Who {
    /// No valid credential: refused everything that is not public.
    Unauthenticated,
    Root,
    Grants(Vec<G>),
}

struct Principal {
    name: &'static str,
    token: Option<String>,
    who: Who,
}

/// What an operation needs of its caller.
#[derive(Clone, Debug)]
enum Need {
    Nothing,
    AnyToken,
    /// `verb` on (`ns`, `pk`).
    Key(&'static str, &'static str, &'static str),
    /// `verb` on all of `ns` under `prefix`.
    AllOf(&'static str, &'static str, &'static str),
    /// Some grant in `ns`.
    Visible(&'static str),
    /// `verb` on every namespace (a `*` grant with an empty prefix).
    Everywhere(&'static str),
    /// Each of these.
    Each(Vec<Need>),
}

/// Whether a grant names `ns`, or is `*` (never a system namespace's).
fn names(g: &G, ns: &str) -> bool {
    g.ns == ns || (g.ns == "*" && !ns.starts_with('_'))
}

fn allows(g: &G, verb: &str) -> bool {
    g.verbs.contains(&verb) || g.verbs.contains(&"admin")
}

/// The most specific grant covering (`ns`, `pk`) decides: naming the
/// namespace beats `*`, then the longest prefix (docs/security.md).
fn decide(grants: &[G], ns: &str, pk: &str, verb: &str) -> bool {
    let winner = grants.iter().filter(|g| names(g, ns) && pk.starts_with(g.prefix)).max_by_key(|g| (g.ns != "*", g.prefix.len()));
    winner.is_some_and(|g| allows(g, verb))
}

impl Principal {
    fn may(&self, need: &Need) -> bool {
        let grants = match (&self.who, need) {
            (_, Need::Nothing) => return true,
            (Who::Unauthenticated, _) => return false,
            (Who::Root, _) => return true,
            (Who::Grants(grants), _) => grants,
        };
        match need {
            Need::Nothing | Need::AnyToken => true,
            Need::Key(ns, pk, verb) => decide(grants, ns, pk, verb),
            // Decided where any grant inside the scope begins, and at its start.
            Need::AllOf(ns, prefix, verb) => {
                let inside = grants.iter().filter(|g| names(g, ns) && g.prefix.starts_with(prefix)).map(|g| g.prefix);
                inside.chain([*prefix]).all(|start| decide(grants, ns, start, verb))
            }
            Need::Visible(ns) => grants.iter().any(|g| names(g, ns) && !g.verbs.is_empty()),
            Need::Everywhere(verb) => grants.iter().any(|g| g.ns == "*" && g.prefix.is_empty() && allows(g, verb)),
            Need::Each(needs) => needs.iter().all(|n| self.may(n)),
        }
    }

    /// Whether the value planted at (`ns`, `pk`) may appear in its answers.
    fn may_see(&self, ns: &'static str, pk: &'static str) -> bool {
        self.may(&Need::Key(ns, pk, "read")) || self.may(&Need::Key(ns, pk, "watch"))
    }
}

/// Values planted before the matrix, and where: none may appear in an
/// answer to a principal that may not read it.
const PLANTED: &[(&str, &str, &str)] = &[
    ("SECRET-app-p1", "app", "p1"),
    ("SECRET-app-carved", "app", "secrets/db"),
    ("SECRET-app-zzz", "app", "zzz/x"),
    ("SECRET-app-tree", "app", ".tree"),
    ("SECRET-other", "other", "o1"),
    ("SECRET-other-tree", "other", ".tree"),
];

/// How an operation is sent.
#[derive(Clone, Debug)]
enum How {
    Http {
        method: Method,
        path: String,
        body: Option<Value>,
        stream: bool,
    },
    /// One client message on `/v1/ws`.
    Ws(Value),
    /// One realtime request (`a`, `b`) on `/.ws?ns=NS`.
    Realtime {
        ns: &'static str,
        action: &'static str,
        body: Value,
    },
}

/// One operation: how to send it, what it needs, and what it leaves
/// behind if allowed (a value, a token's description, a namespace).
#[derive(Clone, Debug)]
struct Op {
    label: String,
    how: How,
    need: Need,
    leaves: Leaves,
}

#[derive(Clone, Debug, PartialEq)]
enum Leaves {
    Nothing,
    /// A value holding this marker, found by the final scan.
    Value(String),
    /// A token described by this marker.
    Token(String),
    /// The token with this id is revoked.
    Revoked(String),
}

/// The operations of route (`method`, `path`), each needing what it says.
/// `mark` makes a unique marker for what a write leaves; `target` is a
/// token id to revoke. Every route of the tables must be here.
fn operations_of(method: &str, path: &str, mark: &mut dyn FnMut() -> String, target: &str) -> Vec<Op> {
    use Need::*;
    let http = |m: &str, p: &str, body: Option<Value>, need: Need, leaves: Leaves| Op {
        label: format!("{m} {p}"),
        how: How::Http { method: Method::from_bytes(m.as_bytes()).unwrap(), path: p.to_string(), body, stream: false },
        need,
        leaves,
    };
    let stream = |p: &str, need: Need| Op {
        label: format!("GET {p} (stream)"),
        how: How::Http { method: Method::GET, path: p.to_string(), body: None, stream: true },
        need,
        leaves: Leaves::Nothing,
    };
    match (method, path) {
        ("GET", "/v1/ns") => vec![http("GET", "/v1/ns", None, AnyToken, Leaves::Nothing)],
        ("PUT", "/v1/ns/{ns}") => vec![
            http("PUT", "/v1/ns/app", Some(json!({"partitions": 4})), AllOf("app", "", "admin"), Leaves::Nothing),
            http("PUT", "/v1/ns/made", Some(json!({"partitions": 1})), AllOf("made", "", "admin"), Leaves::Nothing),
        ],
        ("GET", "/v1/ns/{ns}") => vec![http("GET", "/v1/ns/app", None, Visible("app"), Leaves::Nothing)],
        // Nothing is deleted: one without its confirmation (400 when let
        // in), one of a namespace that does not exist (404 when let in).
        ("DELETE", "/v1/ns/{ns}") => vec![
            http("DELETE", "/v1/ns/app", None, AllOf("app", "", "admin"), Leaves::Nothing),
            http("DELETE", "/v1/ns/gone?confirm=gone", None, AllOf("gone", "", "admin"), Leaves::Nothing),
        ],
        ("GET", "/v1/ns/{ns}/kv") => vec![
            // Read on all of the scope listed, carve-outs included: a cursor
            // or a record of what the caller may not read never shows.
            http("GET", "/v1/ns/app/kv", None, AllOf("app", "", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/app/kv?prefix=.", None, AllOf("app", ".", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/app/kv?prefix=secrets%2F", None, AllOf("app", "secrets/", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/app/kv?prefix=zzz%2F&limit=1", None, AllOf("app", "zzz/", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/other/kv", None, AllOf("other", "", "read"), Leaves::Nothing),
        ],
        ("GET", "/v1/ns/{ns}/kv/{*rest}") => vec![
            http("GET", "/v1/ns/app/kv/p1/s", None, Key("app", "p1", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/app/kv/p1", None, Key("app", "p1", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/app/kv/secrets%2Fdb/s", None, Key("app", "secrets/db", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/app/kv/secrets%2Fdb", None, Key("app", "secrets/db", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/other/kv/o1/s", None, Key("other", "o1", "read"), Leaves::Nothing),
        ],
        ("PUT", "/v1/ns/{ns}/kv/{*rest}") => {
            let (a, b, c) = (mark(), mark(), mark());
            vec![
                http("PUT", &format!("/v1/ns/app/kv/p1/{a}"), Some(json!(a)), Key("app", "p1", "write"), Leaves::Value(a.clone())),
                http("PUT", &format!("/v1/ns/app/kv/secrets%2Fdb/{b}"), Some(json!(b)), Key("app", "secrets/db", "write"), Leaves::Value(b.clone())),
                http("PUT", &format!("/v1/ns/other/kv/o1/{c}"), Some(json!(c)), Key("other", "o1", "write"), Leaves::Value(c.clone())),
            ]
        }
        ("DELETE", "/v1/ns/{ns}/kv/{*rest}") => vec![
            http("DELETE", "/v1/ns/app/kv/p1/gone", None, Key("app", "p1", "write"), Leaves::Nothing),
            http("DELETE", "/v1/ns/app/kv/secrets%2Fdb/gone", None, Key("app", "secrets/db", "write"), Leaves::Nothing),
        ],
        ("POST", "/v1/ns/{ns}/get") => vec![
            http("POST", "/v1/ns/app/get", Some(json!({"keys": [{"pk": "p1", "sk": "s"}]})), Key("app", "p1", "read"), Leaves::Nothing),
            http(
                "POST",
                "/v1/ns/app/get",
                Some(json!({"keys": [{"pk": "p1", "sk": "s"}, {"pk": "secrets/db", "sk": "s"}]})),
                Each(vec![Key("app", "p1", "read"), Key("app", "secrets/db", "read")]),
                Leaves::Nothing,
            ),
        ],
        ("POST", "/v1/ns/{ns}/batch") => {
            let (a, b) = (mark(), mark());
            // A pk outside the carve-out in the carve-out's partition: a batch is atomic within one.
            let twin: &'static str = Box::leak(twin_of("secrets/db").into_boxed_str());
            vec![
                http(
                    "POST",
                    "/v1/ns/app/batch",
                    Some(json!({"ops": [{"op": "put", "pk": "p1", "sk": a, "value": a}]})),
                    Key("app", "p1", "write"),
                    Leaves::Value(a.clone()),
                ),
                http(
                    "POST",
                    "/v1/ns/app/batch",
                    Some(json!({"ops": [{"op": "put", "pk": twin, "sk": b, "value": b}, {"op": "put", "pk": "secrets/db", "sk": b, "value": b}]})),
                    Each(vec![Key("app", twin, "write"), Key("app", "secrets/db", "write")]),
                    Leaves::Value(b.clone()),
                ),
            ]
        }
        // History is kept in both namespaces: the planted values are in it.
        ("GET", "/v1/ns/{ns}/history") => vec![
            http("GET", "/v1/ns/app/history?pk=p1&sk=s", None, Key("app", "p1", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/app/history?pk=secrets%2Fdb&sk=s", None, Key("app", "secrets/db", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/app/history?pk=secrets%2Fdb&sk=s&partition=0", None, Key("app", "secrets/db", "read"), Leaves::Nothing),
            http("GET", "/v1/ns/other/history?pk=o1&sk=s", None, Key("other", "o1", "read"), Leaves::Nothing),
        ],
        ("GET", "/v1/ns/{ns}/watch") => vec![
            stream("/v1/ns/app/watch?pk=p1&from=snapshot", Key("app", "p1", "watch")),
            stream("/v1/ns/app/watch?pk=secrets%2Fdb&from=snapshot", Key("app", "secrets/db", "watch")),
            stream("/v1/ns/app/watch?from=snapshot", AllOf("app", "", "watch")),
            stream("/v1/ns/other/watch?from=snapshot", AllOf("other", "", "watch")),
        ],
        ("GET", "/v1/ns/{ns}/procedures") => vec![http("GET", "/v1/ns/app/procedures", None, AllOf("app", "", "read"), Leaves::Nothing)],
        ("GET", "/v1/ns/{ns}/procedures/{name}") => {
            vec![http("GET", "/v1/ns/app/procedures/agg", None, AllOf("app", "", "read"), Leaves::Nothing)]
        }
        ("PUT", "/v1/ns/{ns}/procedures/{name}") => vec![http(
            "PUT",
            "/v1/ns/app/procedures/agg",
            Some(json!({"runtime": "wasm", "module": "AA=="})),
            AllOf("app", "", "admin"),
            Leaves::Nothing,
        )],
        ("DELETE", "/v1/ns/{ns}/procedures/{name}") => {
            vec![http("DELETE", "/v1/ns/app/procedures/agg", None, AllOf("app", "", "admin"), Leaves::Nothing)]
        }
        ("GET", "/v1/ns/{ns}/outbox") => vec![http("GET", "/v1/ns/app/outbox?partition=0", None, AllOf("app", "", "read"), Leaves::Nothing)],
        ("DELETE", "/v1/ns/{ns}/outbox") => {
            vec![http("DELETE", "/v1/ns/app/outbox?partition=0&below=1", None, AllOf("app", "", "write"), Leaves::Nothing)]
        }
        // The upgrade; its messages are `messages_of`'s.
        ("GET", "/v1/ws") => vec![http("GET", "/v1/ws", None, AnyToken, Leaves::Nothing)],
        ("GET", "/v1/writes/{id}") => vec![http("GET", "/v1/writes/planted", None, AnyToken, Leaves::Nothing)],
        ("POST", "/v1/tokens") => {
            let a = mark();
            vec![http(
                "POST",
                "/v1/tokens",
                Some(json!({"ns": "app", "prefix": "p", "verbs": ["read"], "description": a})),
                AllOf("app", "p", "admin"),
                Leaves::Token(a.clone()),
            )]
        }
        ("GET", "/v1/tokens") => vec![http("GET", "/v1/tokens", None, AnyToken, Leaves::Nothing)],
        ("DELETE", "/v1/tokens/{id}") => {
            vec![http("DELETE", &format!("/v1/tokens/{target}"), None, AllOf("app", "p", "admin"), Leaves::Revoked(target.to_string()))]
        }
        ("GET", "/v1/cluster") => vec![http("GET", "/v1/cluster", None, Everywhere("admin"), Leaves::Nothing)],
        ("POST", "/v1/admin/snapshots") => vec![http("POST", "/v1/admin/snapshots", Some(json!({})), Everywhere("admin"), Leaves::Nothing)],
        ("GET", "/v1/admin/snapshots") => vec![http("GET", "/v1/admin/snapshots", None, Everywhere("admin"), Leaves::Nothing)],
        ("GET", "/") => vec![http("GET", "/", None, Nothing, Leaves::Nothing)],
        ("GET", "/console") => vec![http("GET", "/console", None, Nothing, Leaves::Nothing)],
        ("GET", "/console/{file}") => vec![http("GET", "/console/records.js", None, Nothing, Leaves::Nothing)],
        ("GET", "/demo") => vec![http("GET", "/demo", None, Nothing, Leaves::Nothing)],
        ("GET", "/demo/client/{file}") => vec![http("GET", "/demo/client/tern.js", None, Nothing, Leaves::Nothing)],
        ("GET", "/demo/firebase") => vec![http("GET", "/demo/firebase", None, Nothing, Leaves::Nothing)],
        ("GET", "/demo/firebase/sdk/{file}") => vec![http("GET", "/demo/firebase/sdk/firebase-app.js", None, Nothing, Leaves::Nothing)],
        ("GET", "/metrics") => vec![http("GET", "/metrics", None, Everywhere("read"), Leaves::Nothing)],
        ("GET", "/healthz") => vec![http("GET", "/healthz", None, Nothing, Leaves::Nothing)],
        ("GET", "/v1/openapi.json") => vec![http("GET", "/v1/openapi.json", None, Nothing, Leaves::Nothing)],
        ("GET", "/readyz") => vec![http("GET", "/readyz", None, Nothing, Leaves::Nothing)],
        ("GET", "/{path}.json") => vec![
            http("GET", "/fb.json?ns=app", None, Key("app", ".tree", "read"), Leaves::Nothing),
            http("GET", "/.json?ns=app&format=export", None, Key("app", ".tree", "read"), Leaves::Nothing),
            http("GET", "/fb.json?ns=other", None, Key("other", ".tree", "read"), Leaves::Nothing),
            stream("/fb.json?ns=app", Key("app", ".tree", "watch")),
            stream("/fb.json?ns=other", Key("other", ".tree", "watch")),
        ],
        ("PUT" | "POST" | "PATCH", "/{path}.json") => {
            let (a, b) = (mark(), mark());
            let body = |m: &str| match method {
                "PATCH" => object(m),
                _ => json!(m),
            };
            let location = |m: &str| match method {
                "PUT" => format!("/w/{m}"),
                _ => "/w".to_string(),
            };
            vec![
                http(method, &format!("{}.json?ns=app", location(&a)), Some(body(&a)), Key("app", ".tree", "write"), Leaves::Value(a.clone())),
                http(method, &format!("{}.json?ns=other", location(&b)), Some(body(&b)), Key("other", ".tree", "write"), Leaves::Value(b.clone())),
            ]
        }
        ("DELETE", "/{path}.json") => vec![
            http("DELETE", "/gone.json?ns=app", None, Key("app", ".tree", "write"), Leaves::Nothing),
            http("DELETE", "/gone.json?ns=other", None, Key("other", ".tree", "write"), Leaves::Nothing),
        ],
        ("GET", "/.settings/rules.json") => vec![http("GET", "/.settings/rules.json?ns=app", None, Key("app", ".tree", "admin"), Leaves::Nothing)],
        ("PUT", "/.settings/rules.json") => vec![http(
            "PUT",
            "/.settings/rules.json?ns=app",
            Some(json!({"rules": {".read": false, ".write": false}})),
            Key("app", ".tree", "admin"),
            Leaves::Nothing,
        )],
        other => panic!("route {other:?} is not classified in tests/it/isolation.rs (operations_of): say what it needs"),
    }
}

/// The operations of one message type of a long-lived protocol. Every
/// message of `tern::http::messages` must be here.
fn messages_of(endpoint: &str, kind: &'static str, mark: &mut dyn FnMut() -> String) -> Vec<Op> {
    use Need::*;
    let ws = |label: &str, message: Value, need: Need| Op { label: format!("/v1/ws {label}"), how: How::Ws(message), need, leaves: Leaves::Nothing };
    let rt = |ns: &'static str, body: Value, need: Need, leaves: Leaves| Op {
        label: format!("/.ws?ns={ns} {kind} {body}"),
        how: How::Realtime { ns, action: kind, body },
        need,
        leaves,
    };
    match (endpoint, kind) {
        ("/v1/ws", "sub") => vec![
            ws("sub pk=p1", json!({"type": "sub", "id": "w", "ns": "app", "pk": "p1", "from": "snapshot"}), Key("app", "p1", "watch")),
            ws(
                "sub pk=secrets/db",
                json!({"type": "sub", "id": "w", "ns": "app", "pk": "secrets/db", "from": "snapshot"}),
                Key("app", "secrets/db", "watch"),
            ),
            ws("sub ns=app", json!({"type": "sub", "id": "w", "ns": "app", "from": "snapshot"}), AllOf("app", "", "watch")),
            ws("sub ns=other", json!({"type": "sub", "id": "w", "ns": "other", "from": "snapshot"}), AllOf("other", "", "watch")),
        ],
        ("/v1/ws", "unsub") => vec![ws("unsub", json!({"type": "unsub", "id": "w"}), AnyToken)],
        ("/.ws", "s" | "appcheck" | "unappeck" | "unauth" | "n") => vec![rt("app", json!({"p": "/fb"}), Nothing, Leaves::Nothing)],
        ("/.ws", "echo") => vec![rt("app", json!({"d": "hello"}), Nothing, Leaves::Nothing)],
        // The credential is the message: a valid one passes.
        ("/.ws", "auth" | "gauth") => vec![rt("app", json!({}), AnyToken, Leaves::Nothing)],
        ("/.ws", "q") => vec![
            rt("app", json!({"p": "/fb", "h": ""}), Key("app", ".tree", "watch"), Leaves::Nothing),
            rt("other", json!({"p": "/fb", "h": ""}), Key("other", ".tree", "watch"), Leaves::Nothing),
        ],
        ("/.ws", "g") => vec![
            rt("app", json!({"p": "/fb"}), Key("app", ".tree", "read"), Leaves::Nothing),
            rt("other", json!({"p": "/fb"}), Key("other", ".tree", "read"), Leaves::Nothing),
        ],
        ("/.ws", "p" | "o") => {
            let (a, b) = (mark(), mark());
            vec![
                rt("app", json!({"p": format!("/w/{a}"), "d": a}), Key("app", ".tree", "write"), Leaves::Value(a.clone())),
                rt("other", json!({"p": format!("/w/{b}"), "d": b}), Key("other", ".tree", "write"), Leaves::Value(b.clone())),
            ]
        }
        ("/.ws", "m" | "om") => {
            let a = mark();
            vec![rt("app", json!({"p": "/w", "d": object(&a)}), Key("app", ".tree", "write"), Leaves::Value(a.clone()))]
        }
        ("/.ws", "oc") => vec![rt("app", json!({"p": "/w"}), Key("app", ".tree", "write"), Leaves::Nothing)],
        other => panic!("message {other:?} is not classified in tests/it/isolation.rs (messages_of): say what it needs"),
    }
}

/// What a principal got from one operation.
struct Answer {
    refused: bool,
    /// Done as asked (2xx; `ok`; no error).
    succeeded: bool,
    /// Everything it was sent (status line, body, frames).
    text: String,
}

/// Reads `response`'s body until `done` says its first answer is whole,
/// or `STREAM_READ_WAIT` passes.
async fn read_stream(mut response: reqwest::Response, done: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + STREAM_READ_WAIT;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if done(&text) {
            break;
        }
    }
    text
}

/// Whether a stream's first answer is whole: a v1 watch's `synced`, a
/// Firebase stream's first `put`.
fn first_answer_whole(text: &str) -> bool {
    text.contains("event: synced") || text.find("event: put").is_some_and(|at| text[at..].contains("\n\n"))
}

async fn send_http(node: &Tern, client: &reqwest::Client, principal: &Principal, how: &How) -> Answer {
    let How::Http { method, path, body, stream } = how else { unreachable!() };
    let mut request = client.request(method.clone(), format!("{}{path}", node.url)).timeout(Duration::from_secs(60));
    if let Some(token) = &principal.token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    if *stream {
        request = request.header("accept", "text/event-stream");
    }
    let response = request.send().await.expect("answered");
    let status = response.status().as_u16();
    let refused = status == 401 || status == 403;
    let body = match *stream && !refused {
        true => read_stream(response, first_answer_whole).await,
        false => response.text().await.unwrap_or_default(),
    };
    Answer { refused, succeeded: (200..300).contains(&status), text: format!("{status} {body}") }
}

async fn send_ws(node: &Tern, principal: &Principal, message: &Value) -> Answer {
    let mut url = format!("{}/v1/ws", node.url.replacen("http", "ws", 1));
    if let Some(token) = &principal.token {
        url = format!("{url}?access_token={token}");
    }
    let mut ws = match tokio_tungstenite::connect_async(url).await {
        Ok((ws, _)) => ws,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status().as_u16();
            return Answer { refused: status == 401 || status == 403, succeeded: false, text: format!("{status} {:?}", response.body()) };
        }
        Err(e) => panic!("/v1/ws: {e}"),
    };
    ws.send(Message::text(message.to_string())).await.unwrap();
    let mut text = String::new();
    let mut refused = false;
    let mut succeeded = true;
    while let Some(frame) = next_text(&mut ws, STREAM_READ_WAIT).await {
        text.push_str(&frame);
        let frame: Value = serde_json::from_str(&frame).unwrap();
        match frame["type"].as_str() {
            Some("error") => {
                refused = matches!(frame["error"]["code"].as_str(), Some("permission_denied" | "unauthenticated"));
                succeeded = false;
                break;
            }
            Some("synced" | "unsubscribed") => break,
            _ => continue,
        }
    }
    Answer { refused, succeeded, text }
}

/// A realtime request from `principal`: authenticated first (`auth`) when
/// it has a credential and the request needs one; the answer is refused
/// unless its reply is `ok`.
async fn send_realtime(node: &Tern, principal: &Principal, ns: &str, action: &str, body: &Value, need: &Need) -> Answer {
    let url = format!("{}/.ws?v=5&ns={ns}", node.url.replacen("http", "ws", 1));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.expect("an existing database upgrades");
    let _hello = next_text(&mut ws, Duration::from_secs(10)).await.expect("hello");
    let request = |r: u64, a: &str, b: Value| Message::text(json!({"t": "d", "d": {"r": r, "a": a, "b": b}}).to_string());
    let mut text = String::new();
    let credential = principal.token.clone().map(|t| json!({"cred": t}));
    let mut body = body.clone();
    // The credential was refused (`invalid_token`): what follows is refused too.
    let mut auth_refused = false;
    match (action, &credential) {
        ("auth" | "gauth", Some(credential)) => body = credential.clone(),
        ("auth" | "gauth", None) => body = json!({"cred": ""}),
        (_, Some(credential)) if !matches!(need, Need::Nothing) => {
            ws.send(request(1, "auth", credential.clone())).await.unwrap();
            while let Some(frame) = next_text(&mut ws, Duration::from_secs(10)).await {
                text.push_str(&frame);
                let frame: Value = serde_json::from_str(&frame).unwrap_or(Value::Null);
                if frame["d"]["r"] == 1 {
                    auth_refused = frame["d"]["b"]["s"] == "invalid_token";
                    break;
                }
            }
        }
        _ => {}
    }
    let _ = ws.send(request(2, action, body)).await;
    // The reply's status; None when the connection closed first.
    let mut status = None;
    while let Some(frame) = next_text(&mut ws, STREAM_READ_WAIT).await {
        text.push_str(&frame);
        let frame: Value = serde_json::from_str(&frame).unwrap_or(Value::Null);
        if frame["d"]["r"] == 2 {
            status = frame["d"]["b"]["s"].as_str().map(str::to_string);
            break;
        }
    }
    // Closing fires the onDisconnect writes the connection registered.
    let _ = ws.close(None).await;
    // Refused is said so: `permission_denied`, or `invalid_token` for a
    // credential (then nothing else is done); any other failure is not a refusal.
    let refused = match status.as_deref() {
        Some("permission_denied") => true,
        Some("invalid_token") => true,
        None => auth_refused,
        Some(_) => false,
    };
    Answer { refused, succeeded: status.as_deref() == Some("ok"), text }
}

async fn send(node: &Tern, h2: &reqwest::Client, principal: &Principal, op: &Op) -> Answer {
    match &op.how {
        How::Http { .. } if op.label.ends_with("(h2)") => send_http(node, h2, principal, &op.how).await,
        How::Http { .. } => send_http(node, &node.client, principal, &op.how).await,
        How::Ws(message) => send_ws(node, principal, message).await,
        How::Realtime { ns, action, body } => send_realtime(node, principal, ns, action, body, &op.need).await,
    }
}

/// Everything in namespaces `app` and `other`, as the root key sees it: a
/// whole-namespace watch's snapshot of each, and each Firebase tree.
async fn everything(node: &Tern, root: &str) -> String {
    let mut all = String::new();
    for ns in ["app", "other"] {
        let response = node.client.get(format!("{}/v1/ns/{ns}/watch?from=snapshot", node.url)).bearer_auth(root).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let text = read_stream(response, |t| t.contains("event: synced")).await;
        assert!(text.contains("event: synced"), "the snapshot of {ns} ended: {text}");
        all.push_str(&text);
        let (status, tree) = node.get_json_as(&format!("/.json?ns={ns}"), root).await;
        assert_eq!(status, 200, "{tree}");
        all.push_str(&tree.to_string());
    }
    all
}

/// The pks of the records in a watch's text (its `put` events).
fn pks_in(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|data| data["pk"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_principal_reaches_past_its_grant_on_any_route_or_message() {
    let dir = tempfile::tempdir().unwrap();
    let (node, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let url = node.url.clone();
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();

    // Every version is kept, so a history answer would show a planted value.
    for ns in ["app", "other"] {
        let (status, answer) = node.send(node.client.put(format!("{url}/v1/ns/{ns}")).bearer_auth(&root).json(&json!({"history_max": 8}))).await;
        assert_eq!(status, 200, "{answer}");
    }
    // Plant the values, and one write the root key made by its idempotency key.
    for (value, ns, pk) in PLANTED {
        let request = match *pk {
            ".tree" => node.client.put(format!("{url}/fb.json?ns={ns}")).json(&json!({"v": value})),
            pk => {
                let pk = pk.replace('/', "%2F");
                node.client.put(format!("{url}/v1/ns/{ns}/kv/{pk}/s?wait=applied")).json(&json!(value))
            }
        };
        // The first by an idempotency key: `GET /v1/writes/planted` is the root's alone.
        let request = match *value == PLANTED[0].0 {
            true => request.header("idempotency-key", "planted"),
            false => request,
        };
        let (status, answer) = node.send(request.bearer_auth(&root)).await;
        assert_eq!(status, 200, "{value}: {answer}");
    }

    // A procedure of another namespace: its admin cannot point it at app's
    // log, and what it runs on writes only its own namespace.
    let carve = [G { ns: "app", prefix: "", verbs: &["admin"] }, G { ns: "app", prefix: "secrets/", verbs: &[] }];
    let other_admin = [G { ns: "other", prefix: "", verbs: &["admin"] }];
    let (_, other_key) = create_token(&node, &root, other_admin[0].json()).await;
    let counter = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(crate::common::checkout().join("examples/procedures/build/counter.wasm")).unwrap())
    };
    for outputs in [json!({"o": "tern.app"}), json!({"o": "app.out"}), json!({"o": "tern._src.app"})] {
        let deploy = json!({"runtime": "wasm", "module": counter, "outputs": outputs});
        let (status, answer) = node.send(node.client.put(format!("{url}/v1/ns/other/procedures/c")).bearer_auth(&other_key).json(&deploy)).await;
        assert_eq!((status, crate::common::error_code(&answer)), (400, "invalid_procedure"), "{outputs}: {answer}");
    }
    let deploy = json!({"runtime": "wasm", "module": counter});
    let (status, answer) = node.send(node.client.put(format!("{url}/v1/ns/other/procedures/c")).bearer_auth(&other_key).json(&deploy)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _) = node.send(node.client.put(format!("{url}/v1/ns/other/kv/o2/s?wait=applied")).bearer_auth(&root).json(&json!(1))).await;
    assert_eq!(status, 200);

    let mut principals = vec![
        Principal { name: "none", token: None, who: Who::Unauthenticated },
        Principal { name: "malformed", token: Some("tern_not-a-key".into()), who: Who::Unauthenticated },
    ];
    let app_admin_claims = |aud: &str, exp: u64| json!({"sub": "a", "aud": aud, "exp": exp, "tern_grants": [carve[0].json()]});
    principals.push(Principal { name: "expired_jwt", token: Some(jwt(app_admin_claims("tern", now_s() - 3600))), who: Who::Unauthenticated });
    principals.push(Principal { name: "wrong_audience", token: Some(jwt(app_admin_claims("other", now_s() + 3600))), who: Who::Unauthenticated });
    let (revoked_id, revoked) = create_token(&node, &root, carve[0].json()).await;
    let (status, _) = node.send(node.client.delete(format!("{url}/v1/tokens/{revoked_id}")).bearer_auth(&root)).await;
    assert_eq!(status, 200);
    principals.push(Principal { name: "revoked", token: Some(revoked), who: Who::Unauthenticated });
    let keyed: Vec<(&'static str, Vec<G>)> = vec![
        ("other_namespace_admin", other_admin.to_vec()),
        ("other_prefix", vec![G { ns: "app", prefix: "zzz/", verbs: &["admin"] }]),
        ("carve_out", carve.to_vec()),
        ("read_only", vec![G { ns: "app", prefix: "", verbs: &["read"] }]),
        ("star_reader", vec![G { ns: "*", prefix: "", verbs: &["read"] }]),
    ];
    for (name, grants) in keyed {
        let (_, token) = create_token(&node, &root, json!({"grants": grants.iter().map(G::json).collect::<Vec<_>>()})).await;
        principals.push(Principal { name, token: Some(token), who: Who::Grants(grants) });
    }
    principals.push(Principal {
        name: "jwt_app_admin",
        token: Some(jwt(app_admin_claims("tern", now_s() + 3600))),
        who: Who::Grants(vec![carve[0]]),
    });
    principals.push(Principal { name: "root", token: Some(root.clone()), who: Who::Root });
    // No answer ever holds a key's secret.
    let secrets: Vec<String> = principals.iter().filter_map(|p| p.token.clone()).filter(|t| t.len() > 20).collect();

    let mut marks = 0;
    let mut mark = move || {
        marks += 1;
        format!("W{marks:04}x")
    };
    let mut left: Vec<(Leaves, bool, String)> = Vec::new();
    let mut checked = 0;
    let mut refusals = 0;
    let routes = tern::http::routes();
    let messages = tern::http::messages();
    assert!(routes.len() >= 30 && messages.len() >= 15, "the tables: {} routes, {} messages", routes.len(), messages.len());
    for principal in &principals {
        let mut ops = Vec::new();
        for route in &routes {
            // A token to revoke, for the one route that revokes.
            let target = match route.path {
                "/v1/tokens/{id}" => create_token(&node, &root, json!({"ns": "app", "prefix": "p", "verbs": ["read"]})).await.0,
                _ => String::new(),
            };
            for op in operations_of(route.method.as_str(), route.path, &mut mark, &target) {
                // Every HTTP operation over HTTP/1.1 and HTTP/2 (a second write leaves a second marker).
                let mut again = op.clone();
                again.label.push_str(" (h2)");
                if let (Leaves::Value(_), How::Http { path, body, .. }) = (&op.leaves, &mut again.how) {
                    let (old, new) = (op_marker(&op.leaves), mark());
                    *path = path.replace(&old, &new);
                    *body = body.as_ref().map(|b| serde_json::from_str(&b.to_string().replace(&old, &new)).unwrap());
                    again.leaves = Leaves::Value(new);
                }
                if let Leaves::Revoked(_) = &op.leaves {
                    let target = create_token(&node, &root, json!({"ns": "app", "prefix": "p", "verbs": ["read"]})).await.0;
                    if let How::Http { path, .. } = &mut again.how {
                        *path = format!("/v1/tokens/{target}");
                    }
                    again.leaves = Leaves::Revoked(target);
                }
                if let Leaves::Token(_) = &op.leaves {
                    let new = mark();
                    if let How::Http { body: Some(body), .. } = &mut again.how {
                        body["description"] = json!(new);
                    }
                    again.leaves = Leaves::Token(new);
                }
                ops.push(op);
                ops.push(again);
            }
        }
        for (endpoint, kind) in &messages {
            ops.extend(messages_of(endpoint, kind, &mut mark));
        }
        if principal.name == "root" {
            // Only the root key may make a namespace, and it has not yet.
            let (status, _) = node.get_json_as("/v1/ns/made", &root).await;
            assert_eq!(status, 404, "namespace made was made before the root key's turn");
        }
        for op in &ops {
            // A delete's target is there before it, and gone after exactly when it was allowed.
            let deletes = match &op.how {
                How::Http { method, path, .. } if method == Method::DELETE && (path.contains("/kv/") || path.contains(".json")) => Some(path.clone()),
                _ => None,
            };
            if let Some(path) = &deletes {
                let plant = match path.contains(".json") {
                    true => format!("{url}{path}"),
                    false => format!("{url}{path}?wait=applied"),
                };
                let (status, _) = node.send(node.client.put(plant).bearer_auth(&root).json(&json!("keep"))).await;
                assert_eq!(status, 200, "{path} planted");
            }
            let answer = send(&node, &h2, principal, op).await;
            if let Some(path) = &deletes {
                let (status, value) = node.get_json_as(&present_query(path), &root).await;
                let present = status == 200 && value != Value::Null;
                assert_eq!(
                    present,
                    !principal.may(&op.need),
                    "{} by {}: the target is gone exactly when allowed ({status} {value})",
                    op.label,
                    principal.name
                );
            }
            let may = principal.may(&op.need);
            assert_eq!(!answer.refused, may, "{} by {}: {}", op.label, principal.name, answer.text);
            for (value, ns, pk) in PLANTED {
                assert!(
                    !answer.text.contains(value) || principal.may_see(ns, pk),
                    "{} by {} leaked {value}: {}",
                    op.label,
                    principal.name,
                    answer.text
                );
            }
            for secret in &secrets {
                assert!(!answer.text.contains(secret.as_str()), "{} by {} holds a key's secret: {}", op.label, principal.name, answer.text);
            }
            if op.label.starts_with("GET /v1/writes/") && principal.name != "root" {
                assert!(!answer.text.contains("applied"), "another's write is not shown: {}", answer.text);
            }
            refusals += usize::from(answer.refused);
            if may && op.leaves != Leaves::Nothing {
                assert!(answer.succeeded, "{} by {} is allowed and leaves something: {}", op.label, principal.name, answer.text);
            }
            left.push((op.leaves.clone(), may, format!("{} by {}", op.label, principal.name)));
            checked += 1;
        }
    }
    eprintln!("isolation: {checked} operations tried, {refusals} refused, by {} principals", principals.len());

    // What the allowed operations left is there; nothing of the refused ones is.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let data = loop {
        let data = everything(&node, &root).await;
        let missing = left.iter().any(|(leaves, may, _)| *may && matches!(leaves, Leaves::Value(m) if !data.contains(m.as_str())));
        if !missing || tokio::time::Instant::now() > deadline {
            break data;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (_, tokens) = node.get_json_as("/v1/tokens", &root).await;
    let tokens = tokens.to_string();
    for (leaves, may, what) in &left {
        match leaves {
            Leaves::Nothing => {}
            Leaves::Value(m) => assert_eq!(data.contains(m.as_str()), *may, "{what}: its write {m} is there exactly when allowed"),
            Leaves::Token(m) => assert_eq!(tokens.contains(m.as_str()), *may, "{what}: its token {m} exists exactly when allowed"),
            Leaves::Revoked(id) => assert_eq!(!tokens.contains(id.as_str()), *may, "{what}: token {id} is revoked exactly when allowed"),
        }
    }
    // No other namespace was made, and app holds no record but the planted
    // ones and the allowed writes' (the other namespace's procedure wrote
    // only there).
    let (_, namespaces) = node.get_json_as("/v1/ns", &root).await;
    let names: BTreeSet<&str> = namespaces["namespaces"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert!(names.iter().all(|n| ["default", "_tern", "app", "other", "made"].contains(n)), "{names:?}");
    let app_data = everything(&node, &root).await;
    let app_data = app_data.split("event: synced").next().unwrap();
    let pks = pks_in(app_data);
    let twin = twin_of("secrets/db");
    let known = ["p1", "secrets/db", "zzz/x", ".tree", ".settings", ".ondisconnect", &twin];
    assert!(pks.iter().all(|pk| known.contains(&pk.as_str())), "app's pks: {pks:?}");
    assert!(PLANTED.iter().all(|(value, _, _)| data.contains(value)), "every planted value is still there");
}

/// A pk of `app` (4 partitions) outside `secrets/` in the partition of `pk`.
fn twin_of(pk: &str) -> String {
    let partition = tern::partitioner::partition_of(pk, 4);
    (0..).map(|n| format!("t{n}")).find(|t| tern::partitioner::partition_of(t, 4) == partition).unwrap()
}

/// The URL that reads what a delete at `path` targets, read as the root key
/// sees it now.
fn present_query(path: &str) -> String {
    match path.contains(".json") {
        true => path.to_string(),
        false => format!("{path}?consistency=strong"),
    }
}

/// `{marker: marker}`.
fn object(marker: &str) -> Value {
    Value::Object([(marker.to_string(), json!(marker))].into_iter().collect())
}

/// The marker a `Leaves::Value` holds.
fn op_marker(leaves: &Leaves) -> String {
    match leaves {
        Leaves::Value(m) | Leaves::Token(m) => m.clone(),
        _ => String::new(),
    }
}

/// A key revoked while its connections are open, on every long-lived
/// protocol and transport: each connection ends within seconds, and none
/// delivers a value written after the revocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_during_its_connections_sees_nothing_after() {
    let dir = tempfile::tempdir().unwrap();
    let (node, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let url = node.url.clone();
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let (status, _) = node.send(node.client.put(format!("{url}/fb.json?ns=app")).bearer_auth(&root).json(&json!({"v": 1}))).await;
    assert_eq!(status, 200);
    let (id, key) = create_token(&node, &root, json!({"ns": "app", "verbs": ["admin"]})).await;
    let mut streams = Vec::new();
    for client in [&node.client, &h2] {
        for path in ["/v1/ns/app/watch?pk=p1", "/v1/ns/app/watch", "/fb.json?ns=app"] {
            let response = client.get(format!("{url}{path}")).bearer_auth(&key).header("accept", "text/event-stream").send().await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
            streams.push((path, response));
        }
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}/v1/ws?access_token={key}", url.replacen("http", "ws", 1))).await.unwrap();
    ws.send(Message::text(json!({"type": "sub", "id": "a", "ns": "app", "pk": "p1"}).to_string())).await.unwrap();
    assert!(next_text(&mut ws, Duration::from_secs(10)).await.unwrap().contains("subscribed"));
    let (mut rt, _) = tokio_tungstenite::connect_async(format!("{}/.ws?v=5&ns=app", url.replacen("http", "ws", 1))).await.unwrap();
    let _hello = next_text(&mut rt, Duration::from_secs(10)).await.unwrap();
    let request = |r: u64, a: &str, b: Value| Message::text(json!({"t": "d", "d": {"r": r, "a": a, "b": b}}).to_string());
    rt.send(request(1, "auth", json!({"cred": key}))).await.unwrap();
    assert!(next_text(&mut rt, Duration::from_secs(10)).await.unwrap().contains("\"s\":\"ok\""));
    rt.send(request(2, "q", json!({"p": "/", "h": ""}))).await.unwrap();

    let (status, _) = node.send(node.client.delete(format!("{url}/v1/tokens/{id}")).bearer_auth(&root)).await;
    assert_eq!(status, 200);
    let after = "SECRET-after-revocation";
    let (status, _) = node.send(node.client.put(format!("{url}/v1/ns/app/kv/p1/s?wait=applied")).bearer_auth(&root).json(&json!(after))).await;
    assert_eq!(status, 200);
    let (status, _) = node.send(node.client.put(format!("{url}/later.json?ns=app")).bearer_auth(&root).json(&json!(after))).await;
    assert_eq!(status, 200);

    // Every stream ends (read to its end, within seconds), and none sent the later value.
    for (path, mut response) in streams {
        let mut text = String::new();
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while let Ok(Some(chunk)) = response.chunk().await {
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await;
        assert!(ended.is_ok(), "{path} is still open after the revocation: {text}");
        assert!(!text.contains(after), "{path} delivered a value written after the revocation: {text}");
    }
    for (name, said) in [("/v1/ws", drain(&mut ws, Duration::from_secs(5)).await), ("/.ws", drain(&mut rt, Duration::from_secs(5)).await)] {
        assert!(!said.iter().any(|t| t.contains(after)), "{name} delivered a value written after the revocation: {said:?}");
        assert!(said.iter().any(|t| t.contains("unauthenticated") || t.contains("\"a\":\"ac\"")), "{name} says why it closes: {said:?}");
    }
    // A new request with the key is refused on either transport.
    for client in [&node.client, &h2] {
        let response = client.get(format!("{url}/v1/ns/app/watch")).bearer_auth(&key).send().await.unwrap();
        assert_eq!(response.status(), 401);
    }
}

/// An onDisconnect write is made at the close only if the credential that
/// registered it is still valid then, whatever the connection authenticated
/// as since. Before the fix, a key that registered a write and was revoked
/// after the connection moved to another key (or `unauth`) still had its
/// write made at the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ondisconnect_write_is_made_only_if_its_registrant_is_still_valid() {
    let dir = tempfile::tempdir().unwrap();
    let (node, root) = secured(dir.path(), &["--auth-failures-per-minute", "0"]).await;
    let url = node.url.clone();
    let request = |r: u64, a: &str, b: Value| Message::text(json!({"t": "d", "d": {"r": r, "a": a, "b": b}}).to_string());
    // Registers a write at `at` with key `a`, then authenticates as `then` (or `unauth`), revokes `a` if asked, closes.
    let run = |at: &'static str, revoke: bool, then: Option<&'static str>| {
        let (node, root, url) = (&node, root.clone(), url.clone());
        async move {
            let (a_id, a) = create_token(node, &root, json!({"ns": "app", "verbs": ["write"]})).await;
            let (_, b) = create_token(node, &root, json!({"ns": "app", "prefix": "elsewhere/", "verbs": ["read"]})).await;
            let (mut rt, _) = tokio_tungstenite::connect_async(format!("{}/.ws?v=5&ns=app", url.replacen("http", "ws", 1))).await.unwrap();
            let _hello = next_text(&mut rt, Duration::from_secs(10)).await.unwrap();
            rt.send(request(1, "auth", json!({"cred": a}))).await.unwrap();
            assert!(next_text(&mut rt, Duration::from_secs(10)).await.unwrap_or_default().contains("\"s\":\"ok\""));
            rt.send(request(2, "o", json!({"p": at, "d": "made"}))).await.unwrap();
            assert!(next_text(&mut rt, Duration::from_secs(10)).await.unwrap_or_default().contains("\"s\":\"ok\""));
            match then {
                Some("b") => rt.send(request(3, "auth", json!({"cred": b}))).await.unwrap(),
                _ => rt.send(request(3, "unauth", json!({}))).await.unwrap(),
            }
            assert!(next_text(&mut rt, Duration::from_secs(10)).await.unwrap_or_default().contains("\"s\":\"ok\""));
            if revoke {
                let (status, _) = node.send(node.client.delete(format!("{url}/v1/tokens/{a_id}")).bearer_auth(&root)).await;
                assert_eq!(status, 200);
            }
            rt.close(None).await.unwrap();
            drop(rt);
        }
    };
    run("/kept_b", false, Some("b")).await;
    run("/revoked_b", true, Some("b")).await;
    run("/revoked_unauth", true, None).await;
    // Written or not, once the closes are handled.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, kept) = node.get_json_as("/kept_b.json?ns=app", &root).await;
        if kept == json!("made") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the write of a key still valid was made: {kept}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for at in ["/revoked_b", "/revoked_unauth"] {
        let (status, value) = node.get_json_as(&format!("{at}.json?ns=app"), &root).await;
        assert_eq!((status, value), (200, Value::Null), "{at}: a revoked key's onDisconnect write is not made");
    }
}
