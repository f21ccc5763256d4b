//! The write ids of one request's attempts.
//!
//! A writer that may append one request several times — a Firebase write
//! whose rules' reads changed before it applied (`firebase/commit.rs`) —
//! gives each attempt a write id of its own: the request's for the first,
//! one derived from it for each later one. A retry of the whole request
//! derives the same ids, so it finds each attempt's remembered outcome
//! (`GET /v1/writes/{id}` follows them too), and at most one attempt
//! applies.

use bytes::Bytes;

/// Most attempts one request's write ids name (the first and the derived
/// ones); a writer never makes more.
pub const ATTEMPT_IDS_MAX: u32 = 100;

/// The write id of attempt `attempt` (0-based) of a request whose write id
/// is `write_id`; none stays none.
pub fn attempt_write_id(write_id: &Bytes, attempt: u32) -> Bytes {
    assert!(attempt < ATTEMPT_IDS_MAX, "attempt ids are bounded");
    if write_id.is_empty() || attempt == 0 {
        return write_id.clone();
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"tern.write.attempt");
    hasher.update(&(write_id.len() as u64).to_le_bytes());
    hasher.update(write_id);
    hasher.update(&attempt.to_le_bytes());
    let derived = Bytes::copy_from_slice(&hasher.finalize().as_bytes()[..32]);
    assert!(derived.len() <= crate::limits::WRITE_ID_BYTES_MAX);
    derived
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_has_its_own_write_id_and_a_retry_derives_the_same() {
        let id = Bytes::from_static(b"client-key");
        assert_eq!(attempt_write_id(&id, 0), id);
        assert_ne!(attempt_write_id(&id, 1), attempt_write_id(&id, 2));
        assert_ne!(attempt_write_id(&id, 1), attempt_write_id(&Bytes::from_static(b"client-kez"), 1));
        assert_eq!(attempt_write_id(&id, 3), attempt_write_id(&Bytes::from_static(b"client-key"), 3));
        assert!(attempt_write_id(&Bytes::new(), 5).is_empty(), "no id stays no id");
    }
}
