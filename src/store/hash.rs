//! The partition state hash: a digest of every record, kept incrementally.
//!
//! Each record `(pk, sk, version, value)` hashes (BLAKE3) to 256 bits, read as
//! four u64 lanes; the state hash is the lane-wise wrapping sum over all
//! records. A put subtracts the old record's hash and adds the new one, so the
//! hash is maintained in O(1) per op inside the same transaction as the data,
//! and it depends only on the set of records, never on the order they were
//! written: two replicas holding the same records have the same hash.
//!
//! It also covers the outcome metadata (remembered write ids and the
//! not-applied record, `of_meta`): everything that decides how a later
//! entry applies. Equal hashes at equal offsets mean equal futures.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateHash([u64; 4]);

impl StateHash {
    pub fn from_bytes(bytes: &[u8]) -> StateHash {
        assert_eq!(bytes.len(), 32, "a stored state hash is 32 bytes");
        let lane = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        StateHash([lane(0), lane(1), lane(2), lane(3)])
    }

    pub fn to_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, lane) in self.0.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&lane.to_le_bytes());
        }
        out
    }

    pub fn to_hex(self) -> String {
        self.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn add(&mut self, record: &StateHash) {
        for (lane, x) in self.0.iter_mut().zip(record.0) {
            *lane = lane.wrapping_add(x);
        }
    }

    pub fn remove(&mut self, record: &StateHash) {
        for (lane, x) in self.0.iter_mut().zip(record.0) {
            *lane = lane.wrapping_sub(x);
        }
    }

    /// The hash of one entry of outcome metadata (a remembered write id, a
    /// not-applied mark): what decides future outcomes is state too, so two
    /// replicas that would decide a retry differently never hash alike.
    /// Domain-separated from records (whose keys never start with `\0\0`).
    pub fn of_meta(key: &[u8], value: &[u8]) -> StateHash {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"tern outcome meta\0");
        hasher.update(&(key.len() as u32).to_le_bytes());
        hasher.update(key);
        hasher.update(value);
        StateHash::from_bytes(hasher.finalize().as_bytes())
    }

    /// The hash of one record, given its stored key encoding.
    pub fn of_record(key: &[u8], version: u64, value: &[u8]) -> StateHash {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&(key.len() as u32).to_le_bytes());
        hasher.update(key);
        hasher.update(&version.to_le_bytes());
        hasher.update(value);
        StateHash::from_bytes(hasher.finalize().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_independent_and_reversible() {
        let a = StateHash::of_record(b"k1", 1, b"1");
        let b = StateHash::of_record(b"k2", 2, b"2");
        let mut x = StateHash::default();
        x.add(&a);
        x.add(&b);
        let mut y = StateHash::default();
        y.add(&b);
        y.add(&a);
        assert_eq!(x, y);
        x.remove(&a);
        x.remove(&b);
        assert_eq!(x, StateHash::default());
        assert_eq!(StateHash::from_bytes(&y.to_bytes()), y);
        assert_ne!(StateHash::of_record(b"k1", 1, b"1"), StateHash::of_record(b"k1", 2, b"1"));
    }
}
