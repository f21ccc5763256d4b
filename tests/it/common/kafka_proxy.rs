//! A TCP proxy in front of one Kafka broker that can answer Metadata as a
//! broker shutting down does: the cluster's topics, and no live broker.
//!
//! Kafka itself gives that answer for a moment while a broker is in
//! controlled shutdown or starting (fenced), and librdkafka forgets every
//! broker on it (confluentinc/librdkafka#5301): a test of what a node does
//! then cannot wait for the moment to come by chance. Everything passes
//! through unchanged, but every Metadata answer's broker list is rewritten
//! to name the proxy (so clients keep coming through it), or, while
//! `poisoned`, emptied.
//!
//! The Kafka wire format (kafka.apache.org/protocol): every request and
//! answer is a 4-byte big-endian size and that many bytes. A request
//! starts with its API key (2 bytes), API version (2) and correlation id
//! (4); its answer starts with the same correlation id, by which the proxy
//! knows what it answers (a produce with `acks=0` has no answer).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// Metadata's API key.
const METADATA: i16 = 3;
/// The first Metadata version in Kafka's "flexible" encoding (compact
/// arrays and strings as unsigned varints, tagged fields).
const METADATA_FLEXIBLE_MIN: i16 = 9;
/// The largest frame passed (Kafka's default `socket.request.max.bytes`).
const FRAME_BYTES_MAX: usize = 100 * 1024 * 1024;
/// The first Metadata version with ThrottleTimeMs (librdkafka asks for 4 or later).
const METADATA_THROTTLE_MIN: i16 = 3;
/// Most unanswered requests noted per connection (librdkafka keeps at most
/// `max.in.flight` = 5 produces and a few others out per connection).
const ASKED_MAX: usize = 1_000;

pub(crate) struct KafkaProxy {
    /// `127.0.0.1:port`, to bootstrap from.
    pub address: String,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

struct Shared {
    upstream: String,
    port: u16,
    poisoned: AtomicBool,
    /// Metadata answers sent with no broker.
    poisoned_answers: AtomicUsize,
    /// Metadata answers the proxy could not read (sent on as they were).
    unreadable_answers: AtomicUsize,
    /// Each connection's two copying tasks.
    connections: Mutex<Vec<AbortHandle>>,
}

impl KafkaProxy {
    /// A proxy on a free loopback port in front of the broker at `upstream`.
    pub(crate) async fn start(upstream: &str) -> KafkaProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream: upstream.to_string(),
            port,
            poisoned: AtomicBool::new(false),
            poisoned_answers: AtomicUsize::new(0),
            unreadable_answers: AtomicUsize::new(0),
            connections: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = TcpStream::connect(&accepting.upstream).await else { continue };
                let _ = client.set_nodelay(true);
                let _ = broker.set_nodelay(true);
                connect(&accepting, client, broker);
            }
        })
        .abort_handle();
        KafkaProxy { address: format!("127.0.0.1:{port}"), shared, accept }
    }

    /// From now on Metadata answers name no broker, as a broker's in
    /// controlled shutdown do; every open connection is cut, as the
    /// broker's going away cuts them.
    pub(crate) fn poison(&self) {
        self.shared.poisoned.store(true, Ordering::SeqCst);
        for connection in self.shared.connections.lock().drain(..) {
            connection.abort();
        }
    }

    /// Metadata answers name the broker (through the proxy) again.
    pub(crate) fn heal(&self) {
        self.shared.poisoned.store(false, Ordering::SeqCst);
    }

    /// How many Metadata answers named no broker.
    pub(crate) fn poisoned_answers(&self) -> usize {
        self.shared.poisoned_answers.load(Ordering::SeqCst)
    }

    /// How many Metadata answers the proxy could not read (a test's bug, or a
    /// version it does not know: such an answer names the broker itself).
    pub(crate) fn unreadable_answers(&self) -> usize {
        self.shared.unreadable_answers.load(Ordering::SeqCst)
    }
}

impl Drop for KafkaProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for connection in self.shared.connections.lock().drain(..) {
            connection.abort();
        }
    }
}

/// Copies requests one way and (rewritten) answers the other.
fn connect(shared: &Arc<Shared>, client: TcpStream, broker: TcpStream) {
    let (client_read, client_write) = client.into_split();
    let (broker_read, broker_write) = broker.into_split();
    let asked = Arc::new(Mutex::new(HashMap::new()));
    let requests = tokio::spawn(copy_requests(client_read, broker_write, asked.clone())).abort_handle();
    let answers = tokio::spawn(copy_answers(broker_read, client_write, asked, shared.clone())).abort_handle();
    let mut connections = shared.connections.lock();
    connections.retain(|task| !task.is_finished());
    connections.extend([requests, answers]);
}

async fn read_frame(from: &mut OwnedReadHalf) -> Option<Vec<u8>> {
    let size = from.read_i32().await.ok()?;
    let size = usize::try_from(size).ok().filter(|size| *size <= FRAME_BYTES_MAX)?;
    let mut frame = vec![0; size];
    from.read_exact(&mut frame).await.ok()?;
    Some(frame)
}

async fn write_frame(to: &mut OwnedWriteHalf, frame: &[u8]) -> Option<()> {
    to.write_i32(frame.len() as i32).await.ok()?;
    to.write_all(frame).await.ok()
}

/// Each unanswered request's API key and version, by correlation id.
type Asked = Arc<Mutex<HashMap<i32, (i16, i16)>>>;

/// Client to broker: notes each request's API key and version.
async fn copy_requests(mut client: OwnedReadHalf, mut broker: OwnedWriteHalf, asked: Asked) {
    while let Some(frame) = read_frame(&mut client).await {
        let Some(h) = frame.get(..8) else { return };
        let (key, version, id) = (i16::from_be_bytes([h[0], h[1]]), i16::from_be_bytes([h[2], h[3]]), i32::from_be_bytes([h[4], h[5], h[6], h[7]]));
        // Only Metadata answers are read; the others need no note.
        if key == METADATA {
            let mut asked = asked.lock();
            if asked.len() >= ASKED_MAX {
                return;
            }
            asked.insert(id, (key, version));
        }
        if write_frame(&mut broker, &frame).await.is_none() {
            return;
        }
    }
}

/// Broker to client: every Metadata answer's brokers rewritten.
async fn copy_answers(mut broker: OwnedReadHalf, mut client: OwnedWriteHalf, asked: Asked, shared: Arc<Shared>) {
    while let Some(frame) = read_frame(&mut broker).await {
        let Some(h) = frame.get(..4) else { return };
        let noted = asked.lock().remove(&i32::from_be_bytes([h[0], h[1], h[2], h[3]]));
        let frame = match noted {
            Some((_, version)) => {
                let poisoned = shared.poisoned.load(Ordering::SeqCst);
                match rewrite_brokers(&frame, version, poisoned, shared.port) {
                    Some(rewritten) => {
                        if poisoned {
                            shared.poisoned_answers.fetch_add(1, Ordering::SeqCst);
                        }
                        rewritten
                    }
                    None => {
                        shared.unreadable_answers.fetch_add(1, Ordering::SeqCst);
                        frame
                    }
                }
            }
            None => frame,
        };
        if write_frame(&mut client, &frame).await.is_none() {
            return;
        }
    }
}

/// A Metadata answer with its brokers at the proxy's `port` (or none at
/// all when `poisoned`); everything else as it was.
fn rewrite_brokers(frame: &[u8], version: i16, poisoned: bool, port: u16) -> Option<Vec<u8>> {
    if version < METADATA_THROTTLE_MIN {
        return None;
    }
    let flexible = version >= METADATA_FLEXIBLE_MIN;
    let mut r = Reader { bytes: frame, at: 0 };
    // Header: the correlation id, then (flexible) tagged fields.
    r.take(4)?;
    if flexible {
        r.tagged_fields()?;
    }
    // ThrottleTimeMs.
    r.take(4)?;
    let brokers_at = r.at;
    let count = if flexible { r.uvarint()?.checked_sub(1)? } else { u32::from_be_bytes(r.take(4)?.try_into().ok()?) as u64 };
    let mut brokers = Vec::new();
    for _ in 0..count {
        let node_id = r.take(4)?;
        r.string(flexible)?;
        r.take(4)?;
        let rack_at = r.at;
        r.nullable_string(flexible)?;
        if flexible {
            r.tagged_fields()?;
        }
        let rest = &frame[rack_at..r.at];
        brokers.push((node_id.to_vec(), rest.to_vec()));
    }
    let after = r.at;
    let mut out = frame[..brokers_at].to_vec();
    let kept: &[(Vec<u8>, Vec<u8>)] = if poisoned { &[] } else { &brokers };
    if flexible {
        put_uvarint(&mut out, kept.len() as u64 + 1);
    } else {
        out.extend_from_slice(&(kept.len() as u32).to_be_bytes());
    }
    let host = b"127.0.0.1";
    for (node_id, rest) in kept {
        out.extend_from_slice(node_id);
        if flexible {
            put_uvarint(&mut out, host.len() as u64 + 1);
        } else {
            out.extend_from_slice(&(host.len() as i16).to_be_bytes());
        }
        out.extend_from_slice(host);
        out.extend_from_slice(&i32::from(port).to_be_bytes());
        out.extend_from_slice(rest);
    }
    out.extend_from_slice(&frame[after..]);
    Some(out)
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads Kafka's primitive types from a frame; None past its end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let taken = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(taken)
    }

    fn uvarint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.take(1)?.first()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn string(&mut self, flexible: bool) -> Option<()> {
        let len = if flexible {
            self.uvarint()?.checked_sub(1)? as usize
        } else {
            usize::try_from(i16::from_be_bytes(self.take(2)?.try_into().ok()?)).ok()?
        };
        self.take(len).map(|_| ())
    }

    fn nullable_string(&mut self, flexible: bool) -> Option<()> {
        if flexible {
            match self.uvarint()? {
                0 => Some(()),
                len => self.take(len as usize - 1).map(|_| ()),
            }
        } else {
            match i16::from_be_bytes(self.take(2)?.try_into().ok()?) {
                -1 => Some(()),
                len => self.take(usize::try_from(len).ok()?).map(|_| ()),
            }
        }
    }

    fn tagged_fields(&mut self) -> Option<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Some(())
    }
}
