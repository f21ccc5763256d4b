//! Paths in a JSON tree, and how they become sort keys.
//!
//! A path is a list of keys from the root. Its sort key is the keys joined
//! by `/` (the root is the empty sort key): keys never contain `/`, so the
//! descendants of `a/b` are exactly the sort keys that start with `a/b/`,
//! one contiguous range of the tree's pk, and `a/bc` is not among them.
//!
//! Keys follow Firebase: 1 to 768 UTF-8 bytes, none of `. $ # [ ] /` and no
//! ASCII control character. A node's priority is stored under the one key
//! that starts with a dot, `.priority`, which no user key can be.

use crate::limits::SK_BYTES_MAX;

/// The pk that holds a namespace's tree (a `.` starts no Firebase key and
/// no pk Tern's own tools make, so it cannot be met by accident).
pub const TREE_PK: &str = ".tree";

/// Firebase's bound on a key.
pub const KEY_BYTES_MAX: usize = 768;
/// Firebase's bound on the depth of a tree (keys from the root to a leaf).
pub const DEPTH_MAX: usize = 32;
/// The reserved child key under which a node's priority is stored.
pub const PRIORITY_KEY: &str = ".priority";

/// Why a key or path is not allowed (Firebase's wording where it has one).
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("Invalid key: keys must not be empty".into());
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(format!("Invalid key: keys are at most {KEY_BYTES_MAX} UTF-8 bytes, got {}", key.len()));
    }
    if let Some(c) = key.chars().find(|c| matches!(c, '.' | '$' | '#' | '[' | ']' | '/') || (*c as u32) < 0x20 || *c as u32 == 0x7f) {
        return Err(format!(
            "Invalid key {}: keys must not contain '.', '$', '#', '[', ']', '/' or ASCII control characters (found {c:?})",
            shorten(key)
        ));
    }
    Ok(())
}

/// The sort key of a path given as keys.
pub fn sk_of(keys: &[impl AsRef<str>]) -> String {
    let mut sk = String::new();
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            sk.push('/');
        }
        sk.push_str(key.as_ref());
    }
    sk
}

/// Parses a URL path (`/a/b%20c`; the `.json` suffix already cut off) into
/// keys, percent-decoded and checked.
pub fn parse_url_path(path: &str) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    for raw in path.split('/').filter(|s| !s.is_empty()) {
        let key = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| format!("Invalid path: {} is not UTF-8 once percent-decoded", shorten(raw)))?;
        check_key(&key)?;
        keys.push(key.into_owned());
    }
    check_path_len(&keys)?;
    Ok(keys)
}

/// Parses a relative path inside a request body (an update's keys, a
/// query's `orderBy` child): keys joined by `/`, each checked.
pub fn parse_relative(path: &str) -> Result<Vec<String>, String> {
    let keys: Vec<String> = path.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
    for key in &keys {
        check_key(key)?;
    }
    Ok(keys)
}

/// Depth and sort-key length of a path.
pub fn check_path_len(keys: &[String]) -> Result<(), String> {
    if keys.len() > DEPTH_MAX {
        return Err(format!("Invalid path: deeper than {DEPTH_MAX} keys"));
    }
    let bytes = keys.iter().map(|k| k.len() + 1).sum::<usize>().saturating_sub(1);
    if bytes > SK_BYTES_MAX {
        return Err(format!("Invalid path: a path is at most {SK_BYTES_MAX} bytes in Tern (keys joined by '/'), got {bytes}"));
    }
    Ok(())
}

/// The keys of a sort key ("" is the root: no keys).
pub fn keys_of(sk: &str) -> Vec<&str> {
    if sk.is_empty() {
        Vec::new()
    } else {
        sk.split('/').collect()
    }
}

/// The sort-key prefix of every descendant of `sk`.
pub fn descendants_prefix(sk: &str) -> String {
    if sk.is_empty() {
        String::new()
    } else {
        format!("{sk}/")
    }
}

/// `child` joined under `parent` (sort keys).
pub fn join(parent: &str, child: &str) -> String {
    match (parent.is_empty(), child.is_empty()) {
        (true, _) => child.to_string(),
        (_, true) => parent.to_string(),
        _ => format!("{parent}/{child}"),
    }
}

/// How `other` stands to `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Same,
    /// `other` is above `base`.
    Ancestor,
    /// `other` is below `base`.
    Descendant,
    Unrelated,
}

pub fn relation(base: &str, other: &str) -> Relation {
    if base == other {
        Relation::Same
    } else if is_under(other, base) {
        Relation::Descendant
    } else if is_under(base, other) {
        Relation::Ancestor
    } else {
        Relation::Unrelated
    }
}

/// Whether `sk` is strictly below `ancestor`.
pub fn is_under(sk: &str, ancestor: &str) -> bool {
    if ancestor.is_empty() {
        return !sk.is_empty();
    }
    sk.len() > ancestor.len() && sk.starts_with(ancestor) && sk.as_bytes()[ancestor.len()] == b'/'
}

/// `sk` relative to its ancestor-or-self `base` ("" when equal).
pub fn relative<'a>(base: &str, sk: &'a str) -> &'a str {
    if base.is_empty() {
        sk
    } else if sk.len() == base.len() {
        ""
    } else {
        &sk[base.len() + 1..]
    }
}

/// A path as Firebase shows it: `/a/b`, or `/` for the root.
pub fn display(sk: &str) -> String {
    format!("/{sk}")
}

fn shorten(key: &str) -> String {
    let cut: String = key.chars().take(40).collect();
    if cut.len() < key.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_firebase() {
        for bad in ["", "a.b", "$x", "a#", "[", "]", "a/b", "\u{7f}", "\n"] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
        assert!(check_key(&"é".repeat(384)).is_ok());
        assert!(check_key(&"é".repeat(385)).is_err());
        assert!(check_key("ünïcödé 🚀 -_:,").is_ok());
    }

    #[test]
    fn descendants_are_one_contiguous_prefix() {
        assert_eq!(relation("a/b", "a/b/c"), Relation::Descendant);
        assert_eq!(relation("a/b", "a"), Relation::Ancestor);
        assert_eq!(relation("a/b", "a/bc"), Relation::Unrelated);
        assert_eq!(relation("", "x"), Relation::Descendant);
        assert_eq!(relation("x", ""), Relation::Ancestor);
        assert_eq!(relative("a", "a/b/c"), "b/c");
        assert_eq!(relative("", "a"), "a");
        assert_eq!(relative("a", "a"), "");
        assert_eq!(parse_url_path("/a/b%20c//d").unwrap(), vec!["a", "b c", "d"]);
        assert!(parse_url_path("/a/b.c").is_err());
        assert!(parse_url_path(&"/a".repeat(33)).is_err());
    }
}
