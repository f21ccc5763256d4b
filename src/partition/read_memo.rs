//! A read view's memo: the answers readers already made from the view,
//! by key, so the next read of the same key in the same view is a hash
//! lookup instead of a walk down the store's b-tree, a checksum and a
//! render.
//!
//! It is correct by construction, not by invalidation: a `ReadView` is a
//! fixed snapshot (one MVCC read transaction at one applied offset), and an
//! answer a reader renders from it depends on the snapshot and the key
//! only. When anything new is applied the partition hands out a new view,
//! with an empty memo; the old memo goes with the last request holding the
//! old view. Nothing here ever has to be told about a write.
//!
//! What an answer is belongs to whoever reads (the native API keeps a
//! single record's rendered JSON): the memo keeps opaque bytes.
//!
//! Bounded: at most `READ_MEMO_BYTES_MAX` (keys, answers and a per-entry
//! overhead counted) per view, so per partition held; past it, answers are no longer kept (reads
//! go to the store as before). A view lives until the next apply, so a
//! memo never needs evicting: a workload with writes starts over with each
//! view, and a read-only one keeps its first `READ_MEMO_BYTES_MAX` of keys.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use hashbrown::{Equivalent, HashMap};
use parking_lot::RwLock;

/// The most a view's memo holds, keys, answers and per-entry overhead
/// counted (`entry_bytes`): 2 MiB per partition (16 partitions: 32 MiB at
/// most per namespace, against 32 MiB of store cache per partition).
pub(crate) const READ_MEMO_BYTES_MAX: usize = 2 * 1024 * 1024;

/// What an entry costs beyond its key's and answer's bytes, counted so
/// that many tiny entries are bounded too: the table's slot (64 bytes) and
/// its share of spare slots (the table grows by doubling: up to as many
/// again), and the allocator's rounding of the three allocations (key
/// halves and answer).
const ENTRY_OVERHEAD_BYTES: usize = 192;

/// The answers made from one read view (see the module doc).
#[derive(Default)]
pub struct ReadMemo {
    answers: RwLock<HashMap<Key, Bytes>>,
    /// Bytes held (`entry_bytes` of every entry); never above `READ_MEMO_BYTES_MAX`.
    bytes: AtomicUsize,
}

impl ReadMemo {
    /// The answer kept for `(pk, sk)`, if one was.
    pub(crate) fn get(&self, pk: &str, sk: &str) -> Option<Bytes> {
        let answers = self.answers.read();
        if answers.is_empty() {
            return None;
        }
        answers.get(&Lookup { pk, sk }).cloned()
    }

    /// Keeps `answer` for `(pk, sk)` unless the memo is full (or another
    /// reader kept it first: the same view gives the same answer).
    pub(crate) fn keep(&self, pk: &str, sk: &str, answer: Bytes) {
        let cost = entry_bytes(pk, sk, &answer);
        if self.bytes.load(Ordering::Relaxed) + cost > READ_MEMO_BYTES_MAX {
            return;
        }
        let mut answers = self.answers.write();
        // Checked again under the lock: two keepers may race past the first check.
        if self.bytes.load(Ordering::Relaxed) + cost > READ_MEMO_BYTES_MAX || answers.contains_key(&Lookup { pk, sk }) {
            return;
        }
        answers.insert(Key { pk: pk.into(), sk: sk.into() }, answer);
        let held = self.bytes.fetch_add(cost, Ordering::Relaxed) + cost;
        assert!(held <= READ_MEMO_BYTES_MAX, "a read memo holds {held} bytes, over its bound {READ_MEMO_BYTES_MAX}");
    }

    /// Bytes held (keys, answers and overhead).
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.answers.read().len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What keeping `answer` for `(pk, sk)` counts against the bound.
fn entry_bytes(pk: &str, sk: &str, answer: &Bytes) -> usize {
    pk.len() + sk.len() + answer.len() + ENTRY_OVERHEAD_BYTES
}

/// A kept key. Hashed as `Lookup` is (pk's then sk's bytes, each ended as
/// `str` ends them), so a lookup needs no owned key.
#[derive(PartialEq, Eq)]
struct Key {
    pk: Box<str>,
    sk: Box<str>,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Lookup { pk: &self.pk, sk: &self.sk }.hash(state);
    }
}

/// A key as a reader has it (borrowed).
#[derive(Hash)]
struct Lookup<'a> {
    pk: &'a str,
    sk: &'a str,
}

impl Equivalent<Key> for Lookup<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        *self.pk == *key.pk && *self.sk == *key.sk
    }
}

/// The key and its lookup hash alike (what `HashMap` relies on).
#[cfg(test)]
fn hashes_agree(pk: &str, sk: &str) -> bool {
    use std::hash::BuildHasher;
    let build = hashbrown::DefaultHashBuilder::default();
    build.hash_one(Key { pk: pk.into(), sk: sk.into() }) == build.hash_one(Lookup { pk, sk })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_kept_is_found_by_its_key_and_only_by_it() {
        let memo = ReadMemo::default();
        assert_eq!(memo.get("a", "b"), None);
        memo.keep("a", "b", Bytes::from_static(b"ab"));
        assert_eq!(memo.get("a", "b"), Some(Bytes::from_static(b"ab")));
        // The same bytes split elsewhere are another key.
        assert_eq!(memo.get("ab", ""), None);
        assert_eq!(memo.get("", "ab"), None);
        assert_eq!(memo.get("a", "bc"), None);
        memo.keep("ab", "", Bytes::from_static(b"ab|"));
        assert_eq!(memo.get("ab", ""), Some(Bytes::from_static(b"ab|")));
        assert_eq!(memo.get("a", "b"), Some(Bytes::from_static(b"ab")));
        assert_eq!(memo.len(), 2);
    }

    #[test]
    fn the_first_answer_kept_stays() {
        let memo = ReadMemo::default();
        memo.keep("pk", "sk", Bytes::from_static(b"one"));
        memo.keep("pk", "sk", Bytes::from_static(b"two"));
        assert_eq!(memo.get("pk", "sk"), Some(Bytes::from_static(b"one")));
        assert_eq!(memo.bytes(), entry_bytes("pk", "sk", &Bytes::from_static(b"one")));
    }

    #[test]
    fn keys_and_lookups_hash_alike() {
        for (pk, sk) in [("", ""), ("a", ""), ("", "a"), ("user/1", "profile"), ("ключ", "名前"), ("a\u{0}b", "\u{ff}")] {
            assert!(hashes_agree(pk, sk), "{pk:?} {sk:?}");
        }
    }

    #[test]
    fn a_full_memo_keeps_nothing_more_and_never_passes_its_bound() {
        let memo = ReadMemo::default();
        let answer = Bytes::from(vec![b'x'; 10_000]);
        let mut kept = 0;
        for i in 0..1_000 {
            memo.keep(&format!("pk{i}"), "sk", answer.clone());
            assert!(memo.bytes() <= READ_MEMO_BYTES_MAX);
            if memo.get(&format!("pk{i}"), "sk").is_some() {
                kept += 1;
            }
        }
        let each = entry_bytes("pk100", "sk", &answer);
        assert!(kept >= READ_MEMO_BYTES_MAX / each - 1 && kept <= READ_MEMO_BYTES_MAX / each, "kept {kept}");
        assert_eq!(memo.len(), kept);
        // An answer larger than the whole bound is never kept.
        let memo = ReadMemo::default();
        memo.keep("big", "", Bytes::from(vec![0u8; READ_MEMO_BYTES_MAX]));
        assert!(memo.is_empty());
        assert_eq!(memo.bytes(), 0);
    }
}
