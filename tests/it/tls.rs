//! TLS on the listener (issue 20), against a real `tern serve` with a
//! certificate authority each test makes with `openssl`: HTTP/1.1 and
//! HTTP/2 by ALPN, a watch over TLS, plaintext refused, a new certificate
//! served without a restart, client certificates required (mTLS).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::Tern;

/// A test CA and certificates it signed, in a directory.
pub(crate) struct Pki {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

impl Pki {
    /// A CA named `name` in `dir`.
    pub(crate) fn new(dir: &Path, name: &str) -> Pki {
        let subject = format!("/CN={name}");
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
                "-days",
                "2",
                "-subj",
                &subject,
            ],
        );
        Pki { dir: dir.join(name) }
    }

    pub(crate) fn ca(&self) -> PathBuf {
        self.dir.with_extension("pem")
    }

    /// A certificate for 127.0.0.1 (server and client use), signed by this CA: (cert, key).
    pub(crate) fn issue(&self, name: &str) -> (PathBuf, PathBuf) {
        let dir = self.dir.parent().unwrap();
        let ca = self.dir.file_name().unwrap().to_str().unwrap();
        std::fs::write(dir.join(format!("{name}.ext")), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
            .unwrap();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-out",
                &format!("{name}.pem"),
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
        (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")))
    }
}

pub(crate) fn client(ca: &Path, identity: Option<(&Path, &Path)>) -> reqwest::ClientBuilder {
    let pem = std::fs::read(ca).unwrap();
    let mut builder = reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap()).tls_info(true);
    if let Some((cert, key)) = identity {
        let mut pem = std::fs::read(cert).unwrap();
        pem.extend(std::fs::read(key).unwrap());
        builder = builder.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    builder
}

async fn serve(dir: &Path, cert: &Path, key: &Path, extra: &[&str]) -> Tern {
    let data = dir.join("data");
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--namespace",
        "default:2",
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let tern = Tern::spawn_listening(&args, &[], dir);
    assert!(tern.url.starts_with("https://"), "{}", tern.url);
    tern
}

pub(crate) async fn wait_ready(client: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = client.get(format!("{url}/readyz")).send().await {
            if r.status().is_success() {
                return;
            }
        }
        assert!(Instant::now() < deadline, "tern did not become ready over TLS");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_http1_and_h2_by_alpn_and_watches_and_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let (cert, key) = pki.issue("node");
    let tern = serve(dir.path(), &cert, &key, &[]).await;
    let h1 = client(&pki.ca(), None).http1_only().build().unwrap();
    let h2 = client(&pki.ca(), None).build().unwrap();
    wait_ready(&h1, &tern.url).await;
    let put = h1.put(format!("{}/v1/ns/default/kv/k/s", tern.url)).json(&json!({"tls": true})).send().await.unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(put.version(), reqwest::Version::HTTP_11);
    let get = h2.get(format!("{}/v1/ns/default/kv/k/s?consistency=strong", tern.url)).send().await.unwrap();
    assert_eq!(get.version(), reqwest::Version::HTTP_2, "ALPN chose h2");
    assert_eq!(get.json::<serde_json::Value>().await.unwrap()["value"], json!({"tls": true}));
    // A watch over TLS (HTTP/2): the current state comes first.
    let mut watch = h2.get(format!("{}/v1/ns/default/watch?pk=k&from=snapshot", tern.url)).send().await.unwrap();
    assert_eq!(watch.status(), 200);
    let mut seen = String::new();
    while !seen.contains("\"tls\":true") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), watch.chunk()).await.expect("an event").unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // Then a live change, over HTTP/1.1 too.
    let mut h1_watch = h1.get(format!("{}/v1/ns/default/watch?pk=k", tern.url)).send().await.unwrap();
    assert_eq!(h1_watch.version(), reqwest::Version::HTTP_11);
    h1.put(format!("{}/v1/ns/default/kv/k/s", tern.url)).json(&json!({"tls": 2})).send().await.unwrap();
    let mut seen = String::new();
    while !seen.contains("\"tls\":2") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), h1_watch.chunk()).await.expect("an event").unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // The CLI over TLS: --ca trusts the test CA; without it the node is not trusted.
    let (ok, out, err) = crate::common::cli(&tern.url, &["get", "--ca", pki.ca().to_str().unwrap(), "k", "s"]);
    assert!(ok && out.contains("\"tls\": 2"), "{out} {err}");
    let (ok, _, err) = crate::common::cli(&tern.url, &["get", "k", "s"]);
    assert!(!ok && err.contains("cannot reach https://") && err.contains("certificate"), "the cause is said: {err}");
    // Plaintext to the TLS port: the handshake fails and nothing is served.
    let plain = tern.url.replace("https://", "http://");
    assert!(reqwest::get(format!("{plain}/healthz")).await.is_err(), "plaintext HTTP is not served on the TLS port");
    // A client that does not trust the CA refuses the node.
    assert!(reqwest::Client::new().get(format!("{}/healthz", tern.url)).send().await.is_err());
}

fn served_certificate(response: &reqwest::Response) -> Vec<u8> {
    response.extensions().get::<reqwest::tls::TlsInfo>().and_then(|info| info.peer_certificate()).expect("TLS info").to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let (cert, key) = pki.issue("first");
    let live_cert = dir.path().join("live.pem");
    let live_key = dir.path().join("live.key");
    std::fs::copy(&cert, &live_cert).unwrap();
    std::fs::copy(&key, &live_key).unwrap();
    let tern = serve(dir.path(), &live_cert, &live_key, &["--tls-reload-ms", "100"]).await;
    let fresh_client = || client(&pki.ca(), None).pool_max_idle_per_host(0).build().unwrap();
    wait_ready(&fresh_client(), &tern.url).await;
    let first = served_certificate(&fresh_client().get(format!("{}/healthz", tern.url)).send().await.unwrap());
    assert_eq!(first, rustls_pki_types::pem::PemObject::from_pem_file(&cert).map(|c: rustls_pki_types::CertificateDer| c.to_vec()).unwrap());
    // A broken pair is refused; the old certificate stays in force.
    std::fs::write(&live_cert, "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let still = served_certificate(&fresh_client().get(format!("{}/healthz", tern.url)).send().await.unwrap());
    assert_eq!(still, first);
    // The new pair is served to new connections without a restart.
    let (cert2, key2) = pki.issue("second");
    std::fs::copy(&key2, &live_key).unwrap();
    std::fs::copy(&cert2, &live_cert).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = served_certificate(&fresh_client().get(format!("{}/healthz", tern.url)).send().await.unwrap());
        if now != first {
            break;
        }
        assert!(Instant::now() < deadline, "the new certificate was never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_requires_a_client_certificate_from_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let other = Pki::new(dir.path(), "otherca");
    let (cert, key) = pki.issue("node");
    let (good_cert, good_key) = pki.issue("alice");
    let (bad_cert, bad_key) = other.issue("mallory");
    let tern = serve(dir.path(), &cert, &key, &["--tls-client-ca-file", pki.ca().to_str().unwrap()]).await;
    let with = client(&pki.ca(), Some((&good_cert, &good_key))).build().unwrap();
    wait_ready(&with, &tern.url).await;
    assert_eq!(with.get(format!("{}/v1/ns", tern.url)).send().await.unwrap().status(), 200);
    let without = client(&pki.ca(), None).build().unwrap();
    assert!(without.get(format!("{}/v1/ns", tern.url)).send().await.is_err(), "no client certificate: refused");
    let foreign = client(&pki.ca(), Some((&bad_cert, &bad_key))).build().unwrap();
    assert!(foreign.get(format!("{}/v1/ns", tern.url)).send().await.is_err(), "a certificate of another CA: refused");
}

/// A TLS-terminating proxy in front of `upstream` (plaintext), with `cert` and `key`.
async fn tls_proxy(upstream: String, cert: &Path, key: &Path) -> String {
    use rustls_pki_types::pem::PemObject;
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(cert).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut client) = acceptor.accept(client).await else { return };
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_reach_s3_over_https_behind_a_private_ca() {
    let endpoint = crate::snapshots::s3_endpoint();
    let bucket = format!("tern-tls-{}", rand::random::<u32>());
    assert!(reqwest::Client::new().put(format!("{endpoint}/{bucket}")).send().await.unwrap().status().is_success());
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let (cert, key) = pki.issue("s3");
    let proxy = tls_proxy(endpoint.trim_start_matches("http://").to_string(), &cert, &key).await;
    let options = |ca: Option<&Path>| -> Vec<(String, String)> {
        let mut options = crate::snapshots::s3_options(format!("https://{proxy}"));
        if let Some(ca) = ca {
            options.push(("ca_file".into(), ca.display().to_string()));
        }
        options
    };
    let store = tern::store::PartitionStore::open(&dir.path().join("p.redb"), 1, 8 << 20).unwrap();
    let url = format!("s3://{bucket}/over-tls");
    // Without the CA, the endpoint's certificate is not trusted: nothing is written.
    let untrusted = tern::snapshot::Snapshots::open_with(&url, &options(None)).unwrap();
    assert!(untrusted.create("ns", 0, 1, store.read().unwrap(), "log").await.is_err());
    let trusted = tern::snapshot::Snapshots::open_with(&url, &options(Some(&pki.ca()))).unwrap();
    trusted.create("ns", 0, 1, store.read().unwrap(), "log").await.unwrap();
    assert_eq!(trusted.list("ns", 0).await.unwrap().len(), 1);
    let missing = tern::snapshot::Snapshots::open_with(&url, &options(Some(&dir.path().join("nope.pem"))));
    assert!(missing.unwrap_err().to_string().contains("ca_file"), "a missing CA file is named");
}
