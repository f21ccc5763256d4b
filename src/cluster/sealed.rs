//! Gossip sealed with the cluster key: every datagram carries a keyed
//! BLAKE3 MAC over its time and payload, and a datagram whose MAC does not
//! verify (forged, or from a node with another key), or whose time is more
//! than `SKEW_MAX` away from this node's clock (replayed), is dropped and
//! counted (`tern_gossip_rejected_total{reason}`) — it never reaches
//! chitchat, so no one without the key can join the cluster view, advertise
//! partitions, or name an address requests would be forwarded to.
//!
//! Wire format: `MAGIC (4) | at_ms (8, LE) | payload | mac (32)`, mac =
//! BLAKE3 keyed with the cluster key over everything before it.
//!
//! chitchat's envelope encoding is private to it, so this transport uses
//! chitchat's own UDP sockets as the codec, over loopback: an envelope to
//! send is sent by a chitchat socket to a socket of ours, which reads the
//! bytes; a verified payload is sent to another chitchat socket, which
//! decodes it. Receiving runs in a task of its own that hands decoded
//! envelopes over a bounded channel, so chitchat may cancel `recv` at any
//! point without a datagram being misattributed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport, UdpSocket as CodecSocket};
use chitchat::ChitchatEnvelope;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

const MAGIC: [u8; 4] = *b"TGS1";
const HEADER_BYTES: usize = MAGIC.len() + 8;
const MAC_BYTES: usize = 32;
/// Largest datagram (UDP's payload bound).
const DATAGRAM_BYTES_MAX: usize = 65_507;
/// How far a datagram's time may be from this node's clock.
pub const SKEW_MAX: Duration = Duration::from_secs(30);
/// Decoded envelopes waiting for chitchat.
const RECEIVED_PENDING_MAX: usize = 64;
/// Bound on a loopback codec round trip (it is immediate in practice).
const CODEC_WAIT: Duration = Duration::from_secs(1);

/// The key, derived from the cluster key file's secret.
#[derive(Clone)]
pub struct ClusterKey([u8; 32]);

impl ClusterKey {
    /// Derives the MAC key from a shared secret (at least 32 characters).
    pub fn from_secret(secret: &str) -> anyhow::Result<ClusterKey> {
        let secret = secret.trim();
        anyhow::ensure!(secret.chars().count() >= 32, "the cluster key is shorter than 32 characters");
        Ok(ClusterKey(blake3::derive_key("tern gossip v1 cluster key", secret.as_bytes())))
    }

    fn mac(&self, framed: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(&self.0, framed)
    }
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(…)")
    }
}

/// `payload` framed and sealed at `at_ms`.
pub fn seal(key: &ClusterKey, at_ms: u64, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_BYTES + payload.len() + MAC_BYTES);
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&at_ms.to_le_bytes());
    frame.extend_from_slice(payload);
    let mac = key.mac(&frame);
    frame.extend_from_slice(mac.as_bytes());
    frame
}

/// Why a datagram was dropped.
#[derive(Debug, PartialEq, Eq)]
pub enum Rejected {
    Malformed,
    Forged,
    Stale,
}

impl Rejected {
    fn reason(&self) -> &'static str {
        match self {
            Rejected::Malformed => "malformed",
            Rejected::Forged => "forged",
            Rejected::Stale => "stale",
        }
    }
}

/// The payload of a sealed `frame`, if its MAC verifies (constant-time) and
/// its time is within `SKEW_MAX` of `now_ms`.
pub fn open<'a>(key: &ClusterKey, now_ms: u64, frame: &'a [u8]) -> Result<&'a [u8], Rejected> {
    if frame.len() < HEADER_BYTES + MAC_BYTES || frame[..MAGIC.len()] != MAGIC {
        return Err(Rejected::Malformed);
    }
    let (sealed, mac) = frame.split_at(frame.len() - MAC_BYTES);
    let mac: [u8; MAC_BYTES] = mac.try_into().expect("split at the MAC's length");
    if key.mac(sealed) != blake3::Hash::from(mac) {
        return Err(Rejected::Forged);
    }
    let at_ms = u64::from_le_bytes(sealed[MAGIC.len()..HEADER_BYTES].try_into().expect("8 bytes"));
    if now_ms.abs_diff(at_ms) > SKEW_MAX.as_millis() as u64 {
        return Err(Rejected::Stale);
    }
    Ok(&sealed[HEADER_BYTES..])
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// chitchat's transport, sealed with `key`.
pub struct SealedTransport {
    pub key: ClusterKey,
}

#[async_trait]
impl Transport for SealedTransport {
    async fn open(&self, listen: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let wire = Arc::new(UdpSocket::bind(listen).await.map_err(|e| anyhow::anyhow!("cannot bind gossip to {listen}/UDP: {e}"))?);
        let loopback: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        let encoder = CodecSocket::open(loopback).await?;
        let encoded = UdpSocket::bind(loopback).await?;
        let (received_tx, received) = mpsc::channel(RECEIVED_PENDING_MAX);
        let decoder = CodecSocket::open(loopback).await?;
        let to_decoder = UdpSocket::bind(loopback).await?;
        let receiver = tokio::spawn(receive(wire.clone(), self.key.clone(), decoder, to_decoder, received_tx));
        let buf = vec![0u8; DATAGRAM_BYTES_MAX];
        Ok(Box::new(SealedSocket { key: self.key.clone(), wire, encoder, encoded, buf, received, receiver }))
    }
}

struct SealedSocket {
    key: ClusterKey,
    wire: Arc<UdpSocket>,
    /// chitchat's encoder, and the socket that reads what it encodes.
    encoder: CodecSocket,
    encoded: UdpSocket,
    /// What `encoded` reads into (one datagram at most), kept across sends.
    buf: Vec<u8>,
    received: mpsc::Receiver<RecvOutcome>,
    receiver: tokio::task::JoinHandle<()>,
}

impl Drop for SealedSocket {
    fn drop(&mut self) {
        self.receiver.abort();
    }
}

#[async_trait]
impl Socket for SealedSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.wire.local_addr()?)
    }

    async fn send(&mut self, to: SocketAddr, envelope: ChitchatEnvelope) -> anyhow::Result<SendOutcome> {
        let encoded_addr = self.encoded.local_addr()?;
        let encoder_addr = self.encoder.local_addr()?;
        // Whatever a cancelled send left behind is not this envelope.
        while self.encoded.try_recv_from(&mut self.buf).is_ok() {}
        self.encoder.send(encoded_addr, envelope).await?;
        let payload = loop {
            let (n, from) = tokio::time::timeout(CODEC_WAIT, self.encoded.recv_from(&mut self.buf))
                .await
                .map_err(|_| anyhow::anyhow!("the gossip encoder did not answer"))??;
            if from == encoder_addr {
                break &self.buf[..n];
            }
        };
        let frame = seal(&self.key, now_ms(), payload);
        let num_bytes_sent = self.wire.send_to(&frame, to).await?;
        Ok(SendOutcome { num_bytes_sent })
    }

    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        self.received.recv().await.ok_or_else(|| anyhow::anyhow!("the gossip receiver stopped"))
    }
}

/// Receives, verifies and decodes datagrams, forever (until aborted or chitchat stops listening).
async fn receive(wire: Arc<UdpSocket>, key: ClusterKey, mut decoder: CodecSocket, to_decoder: UdpSocket, received: mpsc::Sender<RecvOutcome>) {
    let mut buf = vec![0u8; DATAGRAM_BYTES_MAX];
    let (Ok(decoder_addr), Ok(from_us)) = (decoder.local_addr(), to_decoder.local_addr()) else { return };
    loop {
        let (n, peer) = match wire.recv_from(&mut buf).await {
            Ok(got) => got,
            Err(e) => {
                tracing::debug!(error = %e, "gossip receive error");
                continue;
            }
        };
        let payload = match open(&key, now_ms(), &buf[..n]) {
            Ok(payload) => payload,
            Err(rejected) => {
                crate::metrics::GOSSIP_REJECTED.with_label_values(&[rejected.reason()]).inc();
                tracing::debug!(%peer, reason = rejected.reason(), "gossip datagram dropped");
                continue;
            }
        };
        if to_decoder.send_to(payload, decoder_addr).await.is_err() {
            continue;
        }
        let decoded = tokio::time::timeout(CODEC_WAIT, decoder.recv()).await;
        let Ok(Ok(outcome)) = decoded else { continue };
        // Only what we handed it: a local process could write to the decoder too.
        if outcome.from_addr != from_us {
            continue;
        }
        let outcome = RecvOutcome { from_addr: peer, envelope: outcome.envelope, num_bytes_received: n };
        if received.send(outcome).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_frame_opens_with_its_key_only_and_only_while_fresh() {
        let key = ClusterKey::from_secret(&"k".repeat(32)).unwrap();
        let other = ClusterKey::from_secret(&"o".repeat(32)).unwrap();
        let frame = seal(&key, 1_000_000, b"hello");
        assert_eq!(open(&key, 1_000_000, &frame), Ok(&b"hello"[..]));
        assert_eq!(open(&other, 1_000_000, &frame), Err(Rejected::Forged));
        let skew = SKEW_MAX.as_millis() as u64;
        assert_eq!(open(&key, 1_000_000 + skew + 1, &frame), Err(Rejected::Stale));
        assert!(open(&key, 1_000_000 - skew, &frame).is_ok());
        let mut tampered = frame.clone();
        tampered[HEADER_BYTES] ^= 1;
        assert_eq!(open(&key, 1_000_000, &tampered), Err(Rejected::Forged));
        let mut retimed = frame.clone();
        retimed[MAGIC.len()] ^= 1;
        assert_eq!(open(&key, 1_000_000, &retimed), Err(Rejected::Forged), "the time is sealed too");
        assert_eq!(open(&key, 1_000_000, b"short"), Err(Rejected::Malformed));
        assert_eq!(open(&key, 1_000_000, &[0u8; 64]), Err(Rejected::Malformed));
        assert!(ClusterKey::from_secret("short").is_err());
    }
}
