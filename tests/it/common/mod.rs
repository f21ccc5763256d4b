//! Test harness: a real `tern` process on a free loopback port, driven over HTTP.
#![allow(dead_code)]

pub(crate) mod brokers;
pub(crate) mod kafka_proxy;
pub(crate) mod steered_log;
pub(crate) mod watch;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The Kafka broker `scripts/test.sh` started (`TERN_TEST_KAFKA`).
pub(crate) fn kafka_bootstrap() -> String {
    std::env::var("TERN_TEST_KAFKA").expect("TERN_TEST_KAFKA must name a Kafka broker: run scripts/test.sh, or scripts/kafka.sh start and export it")
}

/// A free UDP port on loopback for gossip (bound, read, released).
pub(crate) fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The `tern` under test: this build's, or `TERN_TEST_BIN` (to show that a
/// regression test fails on an older build).
pub(crate) fn bin() -> String {
    std::env::var("TERN_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tern").to_string())
}

pub(crate) struct Tern {
    pub child: Option<Child>,
    pub url: String,
    pub data_dir: PathBuf,
    pub client: reqwest::Client,
    /// What it printed on stdout, line by line (at most `PRINTED_LINES_MAX`).
    pub printed: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// Lines of a node's stdout a test keeps (the rest are read and dropped).
const PRINTED_LINES_MAX: usize = 10_000;

/// How long a node may take to start and report ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest one of these helpers' requests may take, answer included:
/// a request that hangs fails its test saying so instead of hanging the
/// suite. Far above any wait a test asks for (`timeout_ms` up to 60 s).
/// Only on whole requests: a watch's stream may rightly sit unread longer.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

impl Tern {
    /// `tern dev` on a free port with `data_dir`.
    pub(crate) async fn dev(data_dir: &Path) -> Tern {
        Tern::spawn(&["dev", "--listen", "127.0.0.1:0", "--data-dir", data_dir.to_str().unwrap()], data_dir).await
    }

    pub(crate) async fn spawn(args: &[&str], data_dir: &Path) -> Tern {
        Tern::spawn_with_env(args, &[], data_dir).await
    }

    /// Like `spawn`, with extra environment variables for the child only.
    pub(crate) async fn spawn_with_env(args: &[&str], env: &[(&str, &str)], data_dir: &Path) -> Tern {
        let tern = Tern::spawn_listening(args, env, data_dir);
        tern.wait_ready().await;
        tern
    }

    /// Starts `tern` and returns once it listens, ready or not.
    pub(crate) fn spawn_listening(args: &[&str], env: &[(&str, &str)], data_dir: &Path) -> Tern {
        Tern::spawn_listening_in(None, args, env, data_dir)
    }

    /// `spawn`, in network namespace `netns` (`Brokers::add_host`): it
    /// listens there, and the test reaches it through the brokers' bridge.
    pub(crate) async fn spawn_in_netns(netns: &str, args: &[&str], data_dir: &Path) -> Tern {
        let tern = Tern::spawn_listening_in(Some(netns), args, &[], data_dir);
        tern.wait_ready().await;
        tern
    }

    fn spawn_listening_in(netns: Option<&str>, args: &[&str], env: &[(&str, &str)], data_dir: &Path) -> Tern {
        // `ip netns exec` execs the command: the child's pid is tern's.
        let mut command = match netns {
            Some(netns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns, &bin()]);
                command
            }
            None => Command::new(bin()),
        };
        let mut child = command
            .args(args)
            .envs(env.iter().copied())
            .env("TERN_LOG_LEVEL", std::env::var("TERN_TEST_LOG_LEVEL").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tern starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let printed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = printed.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut kept = keep.lock().unwrap();
                if kept.len() < PRINTED_LINES_MAX {
                    kept.push(line.clone());
                }
                drop(kept);
                if !sent {
                    if let Some((_, addr)) = line.split_once("listening on ") {
                        let _ = tx.send(addr.trim().to_string());
                        sent = true;
                    }
                }
            }
        });
        let url = rx.recv_timeout(START_TIMEOUT).expect("tern prints its address");
        Tern { child: Some(child), url, data_dir: data_dir.to_path_buf(), client: reqwest::Client::new(), printed }
    }

    /// Waits, at most `wait`, until the node printed a line containing `text`; returns it.
    pub(crate) async fn wait_printed(&self, text: &str, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(line) = self.printed.lock().unwrap().iter().find(|l| l.contains(text)) {
                return line.clone();
            }
            assert!(Instant::now() < deadline, "never printed {text:?}: {:?}", self.printed.lock().unwrap());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `/readyz` names a problem containing `text`; returns the answer.
    pub(crate) async fn wait_unready_with(&self, text: &str) -> Value {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let (status, body) = self.get_json("/readyz").await;
            if status == 503 && body.to_string().contains(text) {
                return body;
            }
            assert!(Instant::now() < deadline, "readyz never said {text:?}: {status} {body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn wait_ready(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(r) = self.client.get(format!("{}/readyz", self.url)).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "tern did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL");
            child.wait().unwrap();
        }
    }

    /// SIGTERM, then wait for a clean exit.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "tern did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn kv_url(&self, ns: &str, pk: &str, sk: Option<&str>) -> String {
        let enc = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
        match sk {
            Some(sk) => format!("{}/v1/ns/{ns}/kv/{}/{}", self.url, enc(pk), enc(sk)),
            None => format!("{}/v1/ns/{ns}/kv/{}", self.url, enc(pk)),
        }
    }

    pub(crate) async fn put(&self, pk: &str, sk: &str, value: &Value) -> (u16, Value) {
        let r = self.client.put(self.kv_url("default", pk, Some(sk))).json(value).timeout(REQUEST_TIMEOUT).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    pub(crate) async fn get(&self, pk: &str, sk: &str) -> (u16, Value) {
        let r = self.client.get(self.kv_url("default", pk, Some(sk))).timeout(REQUEST_TIMEOUT).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    /// A metric's value on `/metrics` (the first sample of `name`: a bare
    /// name or one with its labels), if it is exported.
    pub(crate) async fn exported_metric(&self, name: &str) -> Option<f64> {
        let text = self.client.get(format!("{}/metrics", self.url)).send().await.unwrap().text().await.unwrap();
        let line = text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']));
        line.and_then(|l| l.rsplit(' ').next()).map(|v| v.parse().unwrap())
    }

    pub(crate) async fn get_json(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(format!("{}{path}", self.url)).timeout(REQUEST_TIMEOUT).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    /// `GET path` with `Authorization: Bearer token`.
    pub(crate) async fn get_json_as(&self, path: &str, token: &str) -> (u16, Value) {
        self.send(self.client.get(format!("{}{path}", self.url)).bearer_auth(token)).await
    }

    pub(crate) async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let r = request.timeout(REQUEST_TIMEOUT).send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("response is JSON: {text}")))
    }

    /// (applied_offset, state_hash, applied_entries) per partition of `ns`.
    pub(crate) async fn partition_states(&self, ns: &str) -> Vec<(i64, String, u64)> {
        let (status, body) = self.get_json(&format!("/v1/ns/{ns}")).await;
        assert_eq!(status, 200, "{body}");
        body["state"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["applied_offset"].as_i64().unwrap(), p["state_hash"].as_str().unwrap().to_string(), p["applied_entries"].as_u64().unwrap()))
            .collect()
    }

    /// Waits until every partition of `ns` has applied its whole log.
    pub(crate) async fn wait_caught_up(&self, ns: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, body) = self.get_json(&format!("/v1/ns/{ns}")).await;
            if body["state"].as_array().unwrap().iter().all(|p| p["lag"] == 0) {
                return;
            }
            assert!(Instant::now() < deadline, "not caught up: {body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Tern {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub(crate) fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_else(|| panic!("an error body: {body}"))
}

/// The wall clock in ms since the epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Runs the CLI; returns (success, stdout, stderr).
pub(crate) fn cli(url: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(bin()).args(args).env("TERN_URL", url).output().unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into(), String::from_utf8_lossy(&output.stderr).into())
}

/// Every `.rs` file under the crate's `src/`, as (path relative to `src/`,
/// text), in path order: what the source checks (`layers.rs`, `bounds.rs`) read.
/// The checkout under test: cargo runs tests from the package root. Not
/// `CARGO_MANIFEST_DIR`, which names the checkout that built the binary —
/// another one when several share a target directory.
pub(crate) fn checkout() -> PathBuf {
    std::env::current_dir().expect("a working directory")
}

pub(crate) fn rust_sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = checkout().join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            (file.strip_prefix(&src).expect("under src/").to_path_buf(), text)
        })
        .collect()
}
