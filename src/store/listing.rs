//! Listing a partition's records in `(pk, sk)` order, across pks: one page
//! of a namespace-wide listing (`GET /v1/ns/{ns}/kv`), merged with the
//! other partitions' pages by the caller.
//!
//! Stored keys sort by pk length first (`key.rs`: `[pk length][pk][sk]`),
//! so `(pk, sk)` order is a merge of one key range per pk length present:
//! each range is in `(pk, sk)` order within itself. The lengths present are
//! found by seeking (a seek that lands on a longer length jumps to it), so a
//! page costs one seek per length present plus the records it reads.

use std::collections::BinaryHeap;
use std::ops::Bound;

use super::key::{self, prefix_successor};
use super::layout::slice_bound;
use super::{Record, StoreError, StoreReader};
use crate::limits::PK_BYTES_MAX;

/// A range of stored keys: (lower, upper).
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// One page of a partition, in `(pk, sk)` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingPage {
    pub records: Vec<Record>,
    /// Every key up to this one (inclusive) was read: the next page goes on
    /// after it. None: the partition holds nothing more past the page.
    pub read_to: Option<(String, String)>,
}

/// A stream's head: the next record of one pk length, by `(pk, sk)`; its
/// value is read when it is taken (up to 2,048 streams wait as keys).
struct Head {
    pk: String,
    sk: String,
    key: Vec<u8>,
    stream: usize,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        (&self.pk, &self.sk) == (&other.pk, &other.sk)
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    /// Reversed: `BinaryHeap` pops the greatest, the merge wants the least.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&other.pk, &other.sk).cmp(&(&self.pk, &self.sk))
    }
}

impl StoreReader {
    /// Up to `limit` records whose pk starts with `prefix`, after `after`
    /// (`(pk, sk)`, exclusive), in `(pk, sk)` order; `keep` drops records
    /// the caller may not see (they still count as read). Tern's own pks
    /// (starting with `.`) are left out unless `prefix` starts with `.`.
    /// A page ends early once `scanned_max` records were read, or before a
    /// record that would take their bytes past `bytes_max` (at least one
    /// record either way).
    pub fn list_across_pks(
        &self,
        prefix: &str,
        after: Option<(&str, &str)>,
        limit: usize,
        scanned_max: usize,
        bytes_max: usize,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<ListingPage, StoreError> {
        assert!(limit > 0 && scanned_max >= limit, "a page reads at least what it returns");
        let ranges = self.ranges(prefix, after)?;
        let mut streams = Vec::with_capacity(ranges.len());
        for (lower, upper) in &ranges {
            streams.push(self.table.range::<&[u8]>((slice_bound(lower), slice_bound(upper))).map_err(|e| self.error(e))?);
        }
        let mut heads = BinaryHeap::with_capacity(streams.len());
        for stream in 0..streams.len() {
            self.advance(&mut streams, stream, &mut heads)?;
        }
        let (mut records, mut read_to, mut scanned, mut bytes) = (Vec::with_capacity(limit.min(1024)), None, 0usize, 0usize);
        while let Some(head) = heads.pop() {
            let Some(guard) = self.table.get(head.key.as_slice()).map_err(|e| self.error(e))? else {
                unreachable!("a key this read transaction listed is in it")
            };
            let (version, value) = self.decoded(&head.key, guard.value())?;
            let size = head.pk.len() + head.sk.len() + value.len();
            if !records.is_empty() && bytes + size > bytes_max {
                // Not taken: the next page starts with it.
                heads.push(head);
                break;
            }
            (scanned, bytes) = (scanned + 1, bytes + size);
            if keep(&head.pk) {
                records.push(Record { pk: head.pk.clone(), sk: head.sk.clone(), version, value: value.to_vec() });
            }
            drop(guard);
            read_to = Some((head.pk, head.sk));
            self.advance(&mut streams, head.stream, &mut heads)?;
            if records.len() == limit || scanned == scanned_max {
                break;
            }
        }
        // Nothing left past the page: no cursor.
        if heads.is_empty() {
            read_to = None;
        }
        Ok(ListingPage { records, read_to })
    }

    /// Moves `stream` to its next record, its head into `heads`.
    fn advance(
        &self,
        streams: &mut [redb::Range<'_, &'static [u8], &'static [u8]>],
        stream: usize,
        heads: &mut BinaryHeap<Head>,
    ) -> Result<(), StoreError> {
        let Some(entry) = streams[stream].next() else { return Ok(()) };
        let (k, _) = entry.map_err(|e| self.error(e))?;
        // Not verified yet (its checksum is, when taken): read without trust.
        let (pk, sk) = decode_unverified(k.value());
        heads.push(Head { pk, sk, key: k.value().to_vec(), stream });
        Ok(())
    }

    /// The key ranges to merge: one per pk length holding a pk that starts
    /// with `prefix` (two when Tern's own pks are cut out of it), each
    /// starting past `after`.
    fn ranges(&self, prefix: &str, after: Option<(&str, &str)>) -> Result<Vec<KeyRange>, StoreError> {
        let mut ranges = Vec::new();
        let mut length = prefix.len().max(1);
        while length <= PK_BYTES_MAX {
            let start = encoded_pk(length, prefix.as_bytes());
            let first = self.table.range::<&[u8]>(start.as_slice()..).map_err(|e| self.error(e))?.next();
            let Some(first) = first else { break };
            let (first, _) = first.map_err(|e| self.error(e))?;
            let found = u16::from_be_bytes([first.value()[0], first.value()[1]]) as usize;
            if found > length {
                length = found;
                continue;
            }
            if first.value()[2..].starts_with(prefix.as_bytes()) {
                let upper = prefix_successor(&start).map_or(Bound::Unbounded, Bound::Excluded);
                let mut pieces = vec![(Bound::Included(start), upper)];
                // (A prefix of Tern's own asks for them; any other prefix excludes them.)
                if prefix.is_empty() {
                    // Tern's own pks (`.settings`, `.tree`, ...) are the range [L]'.' .. [L]'/'.
                    let own = encoded_pk(length, b".");
                    let past_own = encoded_pk(length, b"/");
                    let (lower, upper) = pieces.pop().expect("one piece");
                    pieces = vec![(lower, Bound::Excluded(own)), (Bound::Included(past_own), upper)];
                }
                for (lower, upper) in pieces {
                    let Some(past) = after_bound(length, after) else { continue };
                    let lower = later(lower, past);
                    if !key::is_empty(&lower, &upper) {
                        ranges.push((lower, upper));
                    }
                }
            }
            length += 1;
        }
        Ok(ranges)
    }
}

/// `(pk, sk)` of a stored key not verified yet: a damaged one never panics
/// here (its record's checksum fails when it is taken).
fn decode_unverified(stored: &[u8]) -> (String, String) {
    let pk_len = (u16::from_be_bytes([stored[0], stored[1]]) as usize).min(stored.len() - 2);
    let (pk, sk) = stored[2..].split_at(pk_len);
    (String::from_utf8_lossy(pk).into_owned(), String::from_utf8_lossy(sk).into_owned())
}

/// `[length][pk bytes]`: where keys of pks of `length` bytes starting with `pk` begin.
fn encoded_pk(length: usize, pk: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + pk.len());
    key.extend_from_slice(&(length as u16).to_be_bytes());
    key.extend_from_slice(pk);
    key
}

/// The lower bound, among keys of pks of `length` bytes, of those past
/// `after` in `(pk, sk)` order; None when none of that length is.
fn after_bound(length: usize, after: Option<(&str, &str)>) -> Option<Bound<Vec<u8>>> {
    let Some((pk, sk)) = after else { return Some(Bound::Unbounded) };
    match length.cmp(&pk.len()) {
        std::cmp::Ordering::Equal => Some(Bound::Excluded(key::encode(pk, sk))),
        // A longer pk is past `pk` when it is at or above it (equal: `pk` is its prefix).
        std::cmp::Ordering::Greater => Some(Bound::Included(encoded_pk(length, pk.as_bytes()))),
        // A shorter one is past `pk` only when above `pk`'s first `length` bytes.
        std::cmp::Ordering::Less => prefix_successor(&encoded_pk(length, &pk.as_bytes()[..length])).map(Bound::Included),
    }
}

/// The later (higher) of two lower bounds.
fn later(a: Bound<Vec<u8>>, b: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match (&a, &b) {
        (Bound::Unbounded, _) => b,
        (_, Bound::Unbounded) => a,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => match x.cmp(y) {
            std::cmp::Ordering::Less => b,
            std::cmp::Ordering::Greater => a,
            std::cmp::Ordering::Equal if matches!(a, Bound::Excluded(_)) => a,
            std::cmp::Ordering::Equal => b,
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::store::PartitionStore;

    /// Keys of many lengths (unicode, Tern's own `.` pks, pks that are
    /// prefixes of others, empty sks), in a store.
    fn store_with(dir: &std::path::Path, keys: &[(String, String)]) -> PartitionStore {
        let store = PartitionStore::open(&dir.join("p.redb"), 1, 1 << 20).unwrap();
        store
            .apply(false, |tx| {
                for (i, (pk, sk)) in keys.iter().enumerate() {
                    tx.put(pk, sk, i as u64, format!("\"{pk}/{sk}\"").as_bytes())?;
                    tx.mark_applied(i as u64, false);
                }
                Ok(())
            })
            .unwrap();
        store
    }

    fn keys() -> Vec<(String, String)> {
        let mut keys = Vec::new();
        let mut seed = 7u64;
        let alphabet = ["a", "b", "z", "/", "é", "ab", "0", "~"];
        for i in 0..400 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = 1 + (seed >> 33) as usize % 6;
            let pk: String = (0..len).map(|j| alphabet[((seed >> (j * 5)) as usize + i) % alphabet.len()]).collect();
            let sk = if i % 3 == 0 { String::new() } else { format!("s{}", (seed >> 40) % 5) };
            keys.push((pk, sk));
        }
        for own in [".settings", ".tree", ".ondisconnect"] {
            keys.push((own.to_string(), "x".to_string()));
        }
        keys.push(("a".repeat(crate::limits::PK_BYTES_MAX), "last".into()));
        keys
    }

    /// Every page, whatever its size, continues exactly where the last one
    /// read to: the pages together are the keys in `(pk, sk)` order, once.
    fn pages(store: &PartitionStore, prefix: &str, limit: usize, scanned_max: usize, keep: &dyn Fn(&str) -> bool) -> Vec<(String, String)> {
        let reader = store.read().unwrap();
        let mut all: Vec<(String, String)> = Vec::new();
        let mut after: Option<(String, String)> = None;
        for _ in 0..10_000 {
            let page =
                reader.list_across_pks(prefix, after.as_ref().map(|(p, s)| (p.as_str(), s.as_str())), limit, scanned_max, usize::MAX, keep).unwrap();
            assert!(page.records.len() <= limit);
            all.extend(page.records.into_iter().map(|r| (r.pk, r.sk)));
            match page.read_to {
                Some(to) => after = Some(to),
                None => return all,
            }
        }
        panic!("the pages never ended");
    }

    #[test]
    fn pages_list_every_record_once_in_pk_sk_order() {
        let dir = tempfile::tempdir().unwrap();
        let keys = keys();
        let store = store_with(dir.path(), &keys);
        let expected = |prefix: &str| -> Vec<(String, String)> {
            let set: std::collections::BTreeSet<(String, String)> =
                keys.iter().filter(|(pk, _)| pk.starts_with(prefix) && (prefix.starts_with('.') || !pk.starts_with('.'))).cloned().collect();
            set.into_iter().collect()
        };
        for prefix in ["", "a", "ab", "é", "/", ".", ".t", "zz", "nothing"] {
            for limit in [1, 3, 1000] {
                assert_eq!(pages(&store, prefix, limit, limit.max(2), &|_| true), expected(prefix), "prefix {prefix:?} limit {limit}");
            }
        }
        // A filter drops records, never the pages' progress.
        let only_b = pages(&store, "", 5, 7, &|pk| pk.starts_with('b'));
        assert_eq!(only_b, expected("b"));
    }
}
