//! How a record's `(pk, sk)` becomes a redb key.
//!
//! `[pk length: u16 big-endian][pk bytes][sk bytes]`. All records of one pk
//! share a prefix and sort by sk bytes within it, so listing a pk (with sk
//! prefix, range, page token, either direction) is one B-tree range scan.

use std::ops::Bound;

use crate::limits::PK_BYTES_MAX;

pub fn encode(pk: &str, sk: &str) -> Vec<u8> {
    let mut key = pk_prefix(pk);
    key.extend_from_slice(sk.as_bytes());
    key
}

pub fn pk_prefix(pk: &str) -> Vec<u8> {
    assert!(pk.len() <= PK_BYTES_MAX, "pk length is checked before it reaches the store");
    let mut key = Vec::with_capacity(2 + pk.len() + 16);
    key.extend_from_slice(&(pk.len() as u16).to_be_bytes());
    key.extend_from_slice(pk.as_bytes());
    key
}

/// Splits a stored key back into `(pk, sk)`.
pub fn decode(key: &[u8]) -> (String, String) {
    let pk_len = u16::from_be_bytes([key[0], key[1]]) as usize;
    let pk = std::str::from_utf8(&key[2..2 + pk_len]).expect("stored keys are UTF-8");
    let sk = std::str::from_utf8(&key[2 + pk_len..]).expect("stored keys are UTF-8");
    (pk.to_string(), sk.to_string())
}

/// A stored key for a message, whatever its bytes (a damaged one too):
/// `pk/sk` as lossy UTF-8, or its hex when it is too short to be a key.
pub fn describe(key: &[u8]) -> String {
    let pk_len = key.get(..2).map(|l| u16::from_be_bytes([l[0], l[1]]) as usize);
    match pk_len {
        Some(pk_len) if key.len() >= 2 + pk_len => {
            format!("{:?}/{:?}", String::from_utf8_lossy(&key[2..2 + pk_len]), String::from_utf8_lossy(&key[2 + pk_len..]))
        }
        _ => format!("with key bytes {}", key.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    }
}

/// The smallest byte string greater than every string starting with `prefix`
/// (`None` when no such string exists: the prefix is all 0xff).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The key bounds of `pk`'s records whose sk starts with `prefix`, from sk
/// `from` (inclusive) when it is past the prefix.
pub fn prefix_bounds(pk: &str, prefix: &str, from: Option<&str>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let start = encode(pk, prefix);
    let upper = match prefix_successor(&start) {
        Some(end) => Bound::Excluded(end),
        None => Bound::Unbounded,
    };
    let lower = match from {
        Some(from) if from > prefix => Bound::Included(encode(pk, from)),
        _ => Bound::Included(start),
    };
    (lower, upper)
}

/// Which sort keys of one pk a list call covers.
#[derive(Debug, Clone, Default)]
pub struct SkRange {
    pub prefix: Option<String>,
    /// Inclusive lower bound on sk.
    pub start: Option<String>,
    /// Exclusive upper bound on sk.
    pub end: Option<String>,
    /// The page token: resume strictly after (forward) or strictly before
    /// (reverse) this sk (`cursor` / `next_cursor` on the wire).
    pub page_after: Option<String>,
    pub reverse: bool,
}

/// The redb key bounds of `range` within `pk`.
pub fn bounds(pk: &str, range: &SkRange) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let base = pk_prefix(pk);
    let with = |sk: &str| {
        let mut k = base.clone();
        k.extend_from_slice(sk.as_bytes());
        k
    };
    let mut lower = Bound::Included(base.clone());
    let mut upper = match prefix_successor(&base) {
        Some(end) => Bound::Excluded(end),
        None => Bound::Unbounded,
    };
    let mut raise = |candidate: Bound<Vec<u8>>| lower = max_lower(std::mem::replace(&mut lower, Bound::Unbounded), candidate);
    if let Some(prefix) = &range.prefix {
        raise(Bound::Included(with(prefix)));
    }
    if let Some(start) = &range.start {
        raise(Bound::Included(with(start)));
    }
    if let (Some(after), false) = (&range.page_after, range.reverse) {
        raise(Bound::Excluded(with(after)));
    }
    let mut lower_upper = |candidate: Bound<Vec<u8>>| upper = min_upper(std::mem::replace(&mut upper, Bound::Unbounded), candidate);
    if let Some(prefix) = &range.prefix {
        if let Some(end) = prefix_successor(&with(prefix)) {
            lower_upper(Bound::Excluded(end));
        }
    }
    if let Some(end) = &range.end {
        lower_upper(Bound::Excluded(with(end)));
    }
    if let (Some(after), true) = (&range.page_after, range.reverse) {
        lower_upper(Bound::Excluded(with(after)));
    }
    (lower, upper)
}

fn max_lower(a: Bound<Vec<u8>>, b: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    use Bound::*;
    match (&a, &b) {
        (Unbounded, _) => b,
        (_, Unbounded) => a,
        (Included(x) | Excluded(x), Included(y) | Excluded(y)) if x != y => {
            if x > y {
                a
            } else {
                b
            }
        }
        (Excluded(_), _) => a,
        _ => b,
    }
}

fn min_upper(a: Bound<Vec<u8>>, b: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    use Bound::*;
    match (&a, &b) {
        (Unbounded, _) => b,
        (_, Unbounded) => a,
        (Included(x) | Excluded(x), Included(y) | Excluded(y)) if x != y => {
            if x < y {
                a
            } else {
                b
            }
        }
        (Excluded(_), _) => a,
        _ => b,
    }
}

/// True when the bounds describe an empty range (redb panics on inverted ranges).
pub fn is_empty(lower: &Bound<Vec<u8>>, upper: &Bound<Vec<u8>>) -> bool {
    use Bound::*;
    match (lower, upper) {
        (Included(l), Included(u)) => l > u,
        (Included(l) | Excluded(l), Included(u) | Excluded(u)) => l >= u,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_grouping() {
        let k = encode("user", "a/b");
        assert_eq!(decode(&k), ("user".to_string(), "a/b".to_string()));
        // A longer pk that extends a shorter one never interleaves with it.
        assert!(!encode("us", "er-x").starts_with(&pk_prefix("user")));
    }

    #[test]
    fn successor() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[0x61, 0xff]), Some(vec![0x62]));
        assert_eq!(prefix_successor(&[0xff, 0xff]), None);
    }

    #[test]
    fn bounds_combine_prefix_range_and_page_token() {
        let r = SkRange { prefix: Some("b".into()), start: Some("a".into()), page_after: Some("b1".into()), ..Default::default() };
        let (lo, hi) = bounds("p", &r);
        assert_eq!(lo, Bound::Excluded(encode("p", "b1")));
        assert_eq!(hi, Bound::Excluded(encode("p", "c")));
        let r = SkRange { end: Some("m".into()), page_after: Some("k".into()), reverse: true, ..Default::default() };
        let (lo, hi) = bounds("p", &r);
        assert_eq!(lo, Bound::Included(pk_prefix("p")));
        assert_eq!(hi, Bound::Excluded(encode("p", "k")));
        let r = SkRange { start: Some("z".into()), end: Some("a".into()), ..Default::default() };
        let (lo, hi) = bounds("p", &r);
        assert!(is_empty(&lo, &hi));
    }
}
