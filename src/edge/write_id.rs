//! A request's write id: its `Idempotency-Key` header, checked and scoped
//! to the caller.
//!
//! A retry with the same key within the write-id window is applied once
//! (`apply::batch`). Keys are chosen by clients, so two callers may pick
//! the same one: unscoped, one tenant's write would be dropped as a
//! "duplicate" of another's, or a Firebase write answered with someone
//! else's outcome. So the id written to the log is the key scoped to who
//! sent it: `~` and 40 hex digits of BLAKE3(principal, key), where the
//! principal is the identity's name (`key:<id>`, `jwt:<sub>`, `root`) or,
//! for Firebase without Tern's authentication, the owner or the user's
//! uid. Without a principal (authentication off, an anonymous Firebase
//! caller) every caller is the same one, and the key is the id as sent.
//! A forwarded request carries the caller's credential, so the holder
//! scopes it alike. The same key with a different payload is refused when
//! applied (`Outcome::KeyReused`), never silently dropped.
//!
//! Owns: the key's bounds and the scoping. Never: decides duplicates.

use bytes::Bytes;

use crate::limits::WRITE_ID_BYTES_MAX;

/// Hex digits of a scoped id's hash (160 bits).
const SCOPED_HEX_DIGITS: usize = 40;

/// The write id of a request with `key` (its `Idempotency-Key`, unchecked)
/// from `principal`, or an error that says what is wrong with the key.
pub fn scoped_write_id(principal: Option<&str>, key: Option<&[u8]>) -> Result<Bytes, String> {
    let Some(key) = key else { return Ok(Bytes::new()) };
    if key.is_empty() || key.len() > WRITE_ID_BYTES_MAX || !key.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(format!("Idempotency-Key must be 1 to {WRITE_ID_BYTES_MAX} visible ASCII characters (no spaces), got {} bytes", key.len()));
    }
    let Some(principal) = principal else { return Ok(Bytes::copy_from_slice(key)) };
    let mut hasher = blake3::Hasher::new_derive_key("tern idempotency key scope v1");
    hasher.update(&(principal.len() as u64).to_le_bytes());
    hasher.update(principal.as_bytes());
    hasher.update(key);
    let hex = hasher.finalize().to_hex();
    Ok(Bytes::from(format!("~{}", &hex[..SCOPED_HEX_DIGITS])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_scoped_to_its_principal_and_bounded() {
        let alice = scoped_write_id(Some("key:alice"), Some(b"k1")).unwrap();
        assert_eq!(alice, scoped_write_id(Some("key:alice"), Some(b"k1")).unwrap(), "deterministic: a retry, or a forwarded copy");
        assert_ne!(alice, scoped_write_id(Some("key:bob"), Some(b"k1")).unwrap());
        assert_ne!(alice, scoped_write_id(Some("key:alice"), Some(b"k2")).unwrap());
        assert_ne!(scoped_write_id(Some("ab"), Some(b"c")).unwrap(), scoped_write_id(Some("a"), Some(b"bc")).unwrap());
        assert!(alice.len() <= WRITE_ID_BYTES_MAX && alice.starts_with(b"~"));
        assert_eq!(scoped_write_id(None, Some(b"k1")).unwrap(), Bytes::from_static(b"k1"));
        assert_eq!(scoped_write_id(Some("x"), None).unwrap(), Bytes::new());
        let longest = "k".repeat(WRITE_ID_BYTES_MAX);
        assert!(scoped_write_id(None, Some(longest.as_bytes())).is_ok());
        for bad in [&b""[..], b"a b", "é".as_bytes(), "k".repeat(WRITE_ID_BYTES_MAX + 1).as_bytes()] {
            assert!(scoped_write_id(Some("x"), Some(bad)).unwrap_err().contains("Idempotency-Key"), "{bad:?}");
        }
    }
}
