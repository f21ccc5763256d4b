//! TLS on the listener, by rustls: HTTP/1.1 and HTTP/2 chosen by ALPN (`h2`,
//! `http/1.1`), SSE and WebSocket over either as without TLS.
//!
//! - **Certificate reload without a restart**: the certificate and key are
//!   read again when either file's modification time changes (looked at
//!   every `tls_reload_ms`); new handshakes get the new pair, connections
//!   open keep theirs. A pair that does not load (half-written, key not
//!   matching) is refused with a log line and the old one stays in force.
//! - **Client certificates (mTLS)**: with `tls_client_ca_file`, a client
//!   must present a certificate that CA signed, or the handshake fails.
//! - A client that speaks plaintext to the TLS port fails the handshake and
//!   is closed; nothing is served without TLS on it.
//!
//! Handshakes are bounded (`HANDSHAKE_WAIT_MAX`), like the idle wait before
//! a plaintext connection's first byte.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_WAIT_MAX: Duration = Duration::from_secs(10);

/// The listener's TLS settings.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Require client certificates signed by this CA (PEM).
    pub client_ca_file: Option<PathBuf>,
    /// How often the certificate files are looked at for a change.
    pub reload_interval: Duration,
}

/// The listener's TLS: the acceptor and the certificate it presents now.
pub struct Tls {
    pub acceptor: TlsAcceptor,
    current: Arc<CurrentCertificate>,
    config: TlsConfig,
}

/// The certificate new handshakes get (replaced on reload).
#[derive(Debug)]
struct CurrentCertificate {
    key: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for CurrentCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.key.read().clone())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl Tls {
    /// Loads the certificate, key and client CA; fails with a message naming the file.
    pub fn load(config: TlsConfig) -> anyhow::Result<Tls> {
        let current = Arc::new(CurrentCertificate { key: RwLock::new(Arc::new(load_pair(&config.cert_file, &config.key_file)?)) });
        let builder = ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
        let builder = match &config.client_ca_file {
            Some(path) => {
                let roots = Arc::new(load_roots(path)?);
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|e| anyhow::anyhow!("tls_client_ca_file {}: {e}", path.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut server = builder.with_cert_resolver(current.clone());
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls { acceptor: TlsAcceptor::from(Arc::new(server)), current, config })
    }

    /// Reloads the certificate whenever its files change, until dropped (the task is aborted).
    pub async fn reload_forever(self: Arc<Self>) {
        let mut seen = modified(&self.config);
        // The files as they were when they last failed to load: said once, tried again when they change.
        let mut failed = None;
        loop {
            tokio::time::sleep(self.config.reload_interval).await;
            let now = modified(&self.config);
            if now == seen || Some(now) == failed {
                continue;
            }
            match load_pair(&self.config.cert_file, &self.config.key_file) {
                Ok(pair) => {
                    *self.current.key.write() = Arc::new(pair);
                    (seen, failed) = (now, None);
                    tracing::info!(cert = %self.config.cert_file.display(), "TLS certificate reloaded");
                }
                Err(e) => {
                    failed = Some(now);
                    tracing::warn!(error = %e, "the TLS certificate changed but does not load; the previous one stays in force");
                }
            }
        }
    }
}

fn modified(config: &TlsConfig) -> (Option<SystemTime>, Option<SystemTime>) {
    let at = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (at(&config.cert_file), at(&config.key_file))
}

/// A certificate chain and its private key, checked to match.
fn load_pair(cert_file: &Path, key_file: &Path) -> anyhow::Result<CertifiedKey> {
    let certs = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("tls_cert_file {}: {e}", cert_file.display()))?;
    anyhow::ensure!(!certs.is_empty(), "tls_cert_file {} holds no certificate", cert_file.display());
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| anyhow::anyhow!("tls_key_file {}: {e}", key_file.display()))?;
    CertifiedKey::from_der(certs, key, &provider())
        .map_err(|e| anyhow::anyhow!("tls_cert_file {} and tls_key_file {}: {e}", cert_file.display(), key_file.display()))
}

/// The CA certificates in a PEM file.
pub fn load_roots(path: &Path) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("CA file {}: {e}", path.display()))?;
    for cert in certs {
        roots.add(cert).map_err(|e| anyhow::anyhow!("CA file {}: {e}", path.display()))?;
    }
    anyhow::ensure!(!roots.is_empty(), "CA file {} holds no certificate", path.display());
    Ok(roots)
}
