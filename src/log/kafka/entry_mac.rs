//! Tern's own entries in a source topic, told from other producers' records
//! by a MAC only the cluster can make.
//!
//! A source topic (`sources.rs`) is written by other producers by design;
//! Tern writes its own entries there too (deployments, ticks, writes to the
//! namespace). A record is Tern's only if its `tern.entry` header holds
//! `BLAKE3-keyed(key, "tern.entry v1" | topic length (u32 LE) | topic |
//! partition (u32 LE) | payload)`, the key derived from the cluster's
//! shared secret (`cluster_key_file`). Anything else — no header, a header
//! that does not verify, a node without the key — is a foreign record: an
//! input to procedures, never decoded as an entry. So a producer of the
//! topic cannot act as Tern (put records, deploy procedures, trim outboxes).
//!
//! The MAC binds the record to its topic and partition, not its offset
//! (unknown before the broker assigns it): a producer that can also read
//! the topic can copy one of Tern's entries to a later offset of the same
//! partition. The copy applies as the original did; its write id makes it a
//! duplicate while the original is in the partition's dedup window.
//!
//! Owns: the key and the MAC. Never: reads or writes records.

/// Bytes of a MAC (the `tern.entry` header's value).
pub(super) const MAC_BYTES: usize = 32;
/// Shortest shared secret (as for gossip, `cluster::sealed`).
const SECRET_CHARS_MIN: usize = 32;
const DOMAIN: &[u8] = b"tern.entry v1";

/// The key that signs Tern's entries in source topics.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EntryKey([u8; 32]);

impl EntryKey {
    /// Derives the key from the cluster's shared secret (at least 32
    /// characters; the same file on every node).
    pub fn from_secret(secret: &str) -> Result<EntryKey, String> {
        let secret = secret.trim();
        if secret.chars().count() < SECRET_CHARS_MIN {
            return Err(format!("the cluster key is shorter than {SECRET_CHARS_MIN} characters"));
        }
        Ok(EntryKey(blake3::derive_key("tern source-topic entry key v1", secret.as_bytes())))
    }

    /// The MAC of `payload` as an entry of `topic`'s `partition`.
    pub(super) fn mac(&self, topic: &str, partition: u32, payload: &[u8]) -> [u8; MAC_BYTES] {
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        hasher.update(DOMAIN);
        hasher.update(&(topic.len() as u32).to_le_bytes());
        hasher.update(topic.as_bytes());
        hasher.update(&partition.to_le_bytes());
        hasher.update(payload);
        *hasher.finalize().as_bytes()
    }

    /// Whether `mac` is this key's MAC of `payload` (compared in constant time).
    pub(super) fn verifies(&self, topic: &str, partition: u32, payload: &[u8], mac: &[u8]) -> bool {
        let Ok(mac) = <[u8; MAC_BYTES]>::try_from(mac) else { return false };
        blake3::Hash::from(self.mac(topic, partition, payload)) == blake3::Hash::from(mac)
    }
}

impl std::fmt::Debug for EntryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EntryKey(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mac_verifies_for_its_key_topic_partition_and_payload_only() {
        let key = EntryKey::from_secret(&"s".repeat(32)).unwrap();
        let other = EntryKey::from_secret(&"t".repeat(32)).unwrap();
        let mac = key.mac("events", 3, b"entry");
        assert!(key.verifies("events", 3, b"entry", &mac));
        assert!(!other.verifies("events", 3, b"entry", &mac), "another cluster's key");
        assert!(!key.verifies("events", 4, b"entry", &mac), "another partition");
        assert!(!key.verifies("events2", 3, b"entry", &mac), "another topic");
        assert!(!key.verifies("event", 3, b"sentry", &mac), "the topic's bytes moved into the payload");
        assert!(!key.verifies("events", 3, b"entrx", &mac), "another payload");
        assert!(!key.verifies("events", 3, b"entry", b"1"), "the old header value");
        assert!(!key.verifies("events", 3, b"entry", &[]), "empty");
        assert!(EntryKey::from_secret("short").unwrap_err().contains("shorter than 32"));
    }
}
