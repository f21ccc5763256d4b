//! JSON values in a tree: checked before they are logged, split into leaves
//! when applied, assembled again when read.
//!
//! Every primitive (number, string, boolean) is one leaf record at its path;
//! objects exist only through their leaves (an empty object is null, as in
//! Firebase); arrays are objects keyed "0", "1", ... and are read back as
//! arrays when Firebase would (`into_arrays`). A node's priority is the leaf
//! `<path>/.priority`. `{".value": v, ".priority": p}` writes both.

use serde_json::{Map, Value};

use super::path::{self, DEPTH_MAX, PRIORITY_KEY};
use crate::limits::SK_BYTES_MAX;

/// Checks a tree op as the codec decodes it (a pure function: every replica
/// reaches the same verdict): the path, every key, the depth, every leaf's
/// sort key length, the server values, and for a merge the update's paths.
pub fn validate_write(sk: &str, value: &[u8], merge: bool) -> Result<(), String> {
    let keys: Vec<String> = path::keys_of(sk).into_iter().map(str::to_string).collect();
    for key in &keys {
        path::check_key(key)?;
    }
    path::check_path_len(&keys)?;
    let value: Value = serde_json::from_slice(value).map_err(|e| format!("Invalid data; couldn't parse JSON object, array, or value: {e}"))?;
    if !merge {
        return check_value(sk, keys.len(), &value);
    }
    let Value::Object(update) = &value else {
        return Err("Invalid data; an update must be a JSON object of paths to values".into());
    };
    let mut paths: Vec<String> = Vec::with_capacity(update.len());
    for (relative, child) in update {
        let child_keys = path::parse_relative(relative).map_err(|e| format!("Invalid update path {relative:?}: {e}"))?;
        if child_keys.is_empty() {
            return Err("Invalid update: a path must name a child (got an empty path)".into());
        }
        let child_sk = path::join(sk, &path::sk_of(&child_keys));
        let all_keys: Vec<String> = keys.iter().cloned().chain(child_keys).collect();
        path::check_path_len(&all_keys)?;
        check_value(&child_sk, all_keys.len(), child)?;
        paths.push(child_sk);
    }
    paths.sort();
    for pair in paths.windows(2) {
        if pair[0] == pair[1] || path::is_under(&pair[1], &pair[0]) {
            return Err(format!("Invalid update: path {} is an ancestor of {} (or the same)", path::display(&pair[0]), path::display(&pair[1])));
        }
    }
    Ok(())
}

/// Checks one value written at `sk` (`depth` keys from the root).
fn check_value(sk: &str, depth: usize, value: &Value) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            if let Some(sv) = map.get(".sv") {
                if map.len() != 1 {
                    return Err(format!("Invalid data at {}: .sv must be alone in its object", path::display(sk)));
                }
                return check_server_value(sk, sv);
            }
            if let Some(inner) = map.get(".value") {
                if map.keys().any(|k| k != ".value" && k != PRIORITY_KEY) {
                    return Err(format!("Invalid data at {}: an object with .value may only also have .priority", path::display(sk)));
                }
                if inner.is_object() || inner.is_array() {
                    check_value(sk, depth, inner)?;
                } else {
                    check_leaf(sk, inner)?;
                }
            }
            if let Some(priority) = map.get(PRIORITY_KEY) {
                check_priority(sk, priority)?;
            }
            for (key, child) in map {
                if key == ".value" || key == PRIORITY_KEY {
                    continue;
                }
                path::check_key(key).map_err(|e| format!("{e} (at {})", path::display(sk)))?;
                check_child(sk, depth, key, child)?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                check_child(sk, depth, itoa::Buffer::new().format(i), child)?;
            }
            Ok(())
        }
        other => check_leaf(sk, other),
    }
}

fn check_child(sk: &str, depth: usize, key: &str, child: &Value) -> Result<(), String> {
    if depth + 1 > DEPTH_MAX {
        return Err(format!("Invalid data: deeper than {DEPTH_MAX} levels (at {})", path::display(sk)));
    }
    let child_sk = path::join(sk, key);
    if child_sk.len() > SK_BYTES_MAX {
        return Err(format!(
            "Invalid data: the path {}... is longer than {SK_BYTES_MAX} bytes, Tern's bound on a path",
            path::display(&child_sk.chars().take(60).collect::<String>())
        ));
    }
    check_value(&child_sk, depth + 1, child)
}

fn check_leaf(sk: &str, value: &Value) -> Result<(), String> {
    match value {
        Value::Number(n) if n.as_f64().is_none_or(|f| !f.is_finite()) => {
            Err(format!("Invalid data at {}: numbers must be finite", path::display(sk)))
        }
        _ => Ok(()),
    }
}

fn check_priority(sk: &str, priority: &Value) -> Result<(), String> {
    match priority {
        Value::Null | Value::String(_) | Value::Number(_) => Ok(()),
        _ => Err(format!("Invalid data at {}: .priority must be a string, a number or null", path::display(sk))),
    }
}

fn check_server_value(sk: &str, sv: &Value) -> Result<(), String> {
    match sv {
        Value::String(s) if s == "timestamp" => Ok(()),
        Value::Object(m) if m.len() == 1 && m.get("increment").is_some_and(Value::is_number) => Ok(()),
        _ => Err(format!(
            "Invalid data at {}: unknown server value {sv}; Tern knows {{\".sv\": \"timestamp\"}} and {{\".sv\": {{\"increment\": <number>}}}}",
            path::display(sk)
        )),
    }
}

/// Replaces every server value in `value` (written at `sk`): timestamps by
/// `time_ms`, increments by the current number at their path plus the
/// increment (Firebase: a current value that is not a number counts as
/// absent; an integer sum that overflows 64 bits becomes a double).
pub fn resolve_server_values(sk: &str, value: &mut Value, time_ms: u64, current: &mut dyn FnMut(&str) -> Option<Value>) {
    if let Value::Object(map) = value {
        if let Some(sv) = map.get(".sv") {
            *value = match sv {
                Value::String(_) => Value::from(time_ms),
                other => {
                    let by = other.get("increment").cloned().unwrap_or(Value::from(0));
                    match current(sk) {
                        Some(Value::Number(now)) => add(&now, &by),
                        _ => by,
                    }
                }
            };
            return;
        }
        for (key, child) in map.iter_mut() {
            let child_sk = if key == ".value" { sk.to_string() } else { path::join(sk, key) };
            resolve_server_values(&child_sk, child, time_ms, current);
        }
    } else if let Value::Array(items) = value {
        for (i, child) in items.iter_mut().enumerate() {
            resolve_server_values(&path::join(sk, itoa::Buffer::new().format(i)), child, time_ms, current);
        }
    }
}

/// Whether `value` holds a server value anywhere.
pub fn has_server_values(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key(".sv") || map.values().any(has_server_values),
        Value::Array(items) => items.iter().any(has_server_values),
        _ => false,
    }
}

fn add(a: &serde_json::Number, b: &Value) -> Value {
    let Value::Number(b) = b else { return Value::Number(a.clone()) };
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        if let Some(sum) = x.checked_add(y) {
            return Value::from(sum);
        }
    }
    let sum = a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0);
    serde_json::Number::from_f64(sum).map_or(Value::Null, Value::Number)
}

/// The leaves of `value` written at `sk`, as `(sort key, JSON text)`, in
/// no particular order. Nulls and empty objects make none.
pub fn leaves(sk: &str, value: &Value, out: &mut Vec<(String, Vec<u8>)>) {
    match value {
        Value::Null => {}
        Value::Object(map) => {
            if let Some(priority) = map.get(PRIORITY_KEY) {
                if !priority.is_null() && (map.len() > 1) {
                    out.push((path::join(sk, PRIORITY_KEY), priority.to_string().into_bytes()));
                }
            }
            for (key, child) in map {
                match key.as_str() {
                    PRIORITY_KEY => {}
                    ".value" => leaves(sk, child, out),
                    _ => leaves(&path::join(sk, key), child, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                leaves(&path::join(sk, itoa::Buffer::new().format(i)), child, out);
            }
        }
        primitive => out.push((sk.to_string(), primitive.to_string().into_bytes())),
    }
}

/// Assembles a value from leaves given relative to it, in sort-key order.
/// `export` keeps priorities (`.priority`, and `.value` beside it on a
/// primitive); otherwise they are dropped. A priority with no value beside
/// it is nothing. Objects whose keys are array indexes are not turned into
/// arrays here (`into_arrays`).
#[derive(Default)]
pub struct Builder {
    root: Option<Value>,
    pub bytes: usize,
}

impl Builder {
    pub fn add(&mut self, relative_sk: &str, json: &[u8]) {
        self.bytes += relative_sk.len() + json.len() + 16;
        let Ok(leaf) = serde_json::from_slice::<Value>(json) else { return };
        let keys = path::keys_of(relative_sk);
        let mut node = self.root.get_or_insert(Value::Null);
        for key in keys {
            if !node.is_object() {
                // A primitive with children below it: the children win
                // (the tree's writes never leave both; foreign writes might).
                let keep = std::mem::take(node);
                let mut map = Map::new();
                if !keep.is_null() {
                    map.insert(".value".into(), keep);
                }
                *node = Value::Object(map);
            }
            node = node.as_object_mut().expect("made an object above").entry(key.to_string()).or_insert(Value::Null);
        }
        if node.is_object() {
            node.as_object_mut().expect("checked").insert(".value".into(), leaf);
        } else {
            *node = leaf;
        }
    }

    /// The value, with or without priorities.
    pub fn finish(self, export: bool) -> Value {
        let mut value = self.root.unwrap_or(Value::Null);
        normalize(&mut value, export);
        value
    }
}

/// Folds `.value` beside children and drops priorities (unless `export`);
/// nodes with nothing but a priority become null.
fn normalize(value: &mut Value, export: bool) {
    let Value::Object(map) = value else { return };
    for child in map.values_mut() {
        normalize(child, export);
    }
    map.retain(|k, v| k == PRIORITY_KEY || k == ".value" || !v.is_null());
    let has_children = map.keys().any(|k| k != PRIORITY_KEY && k != ".value");
    if has_children {
        map.remove(".value");
    }
    if !export {
        map.remove(PRIORITY_KEY);
    }
    let only_meta = !map.keys().any(|k| k != PRIORITY_KEY && k != ".value");
    if map.is_empty() || (only_meta && !map.contains_key(".value")) {
        *value = Value::Null;
    } else if only_meta && !map.contains_key(PRIORITY_KEY) {
        *value = map.remove(".value").expect("checked");
    }
}

/// The part of `value` at `relative` (keys joined by `/`; "" is all of it),
/// null where it has none.
pub fn at_path(value: &Value, relative: &str) -> Value {
    let mut at = value;
    for key in path::keys_of(relative) {
        match at.get(key) {
            Some(next) => at = next,
            None => return Value::Null,
        }
    }
    at.clone()
}

/// Sets the part of `base` at `relative` to `value`, making objects on the
/// way (a primitive in the way becomes one, as a tree write does).
pub fn set_at_path(base: &mut Value, relative: &str, value: Value) {
    let mut at = base;
    for key in path::keys_of(relative) {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        at = at.as_object_mut().expect("made an object").entry(key.to_string()).or_insert(Value::Null);
    }
    *at = value;
}

/// A value read with priorities (`export`) as it reads without them.
pub fn strip_priorities(value: &mut Value) {
    normalize(value, false);
    into_arrays(value);
}

/// Turns objects into arrays where Firebase does: every key an array index
/// (digits, no leading zero) and more than half of `0..=max` present.
pub fn into_arrays(value: &mut Value) {
    let Value::Object(map) = value else { return };
    for child in map.values_mut() {
        into_arrays(child);
    }
    let mut max = 0usize;
    for key in map.keys() {
        match index_of(key) {
            Some(i) => max = max.max(i),
            None => return,
        }
    }
    if map.is_empty() || map.len() * 2 <= max + 1 {
        return;
    }
    let mut items = vec![Value::Null; max + 1];
    for (key, child) in std::mem::take(map) {
        items[index_of(&key).expect("checked above")] = child;
    }
    *value = Value::Array(items);
}

fn index_of(key: &str) -> Option<usize> {
    let canonical = !key.is_empty() && key.len() <= 9 && key.bytes().all(|b| b.is_ascii_digit()) && (key == "0" || !key.starts_with('0'));
    canonical.then(|| key.parse().ok()).flatten()
}

/// The value's hash: BLAKE3 of its JSON as read (keys sorted, priorities
/// dropped, arrays as read). The ETag of the REST API and the
/// `if_tree_hash` condition: equal values have equal tags.
pub fn etag(value: &Value) -> [u8; 32] {
    etag_and_bytes(value).0
}

/// `etag`, and the bytes of the JSON it hashed.
pub fn etag_and_bytes(value: &Value) -> ([u8; 32], usize) {
    let text = serde_json::to_vec(value).expect("a Value always serializes");
    (*blake3::hash(&text).as_bytes(), text.len())
}

/// The ETag as the REST API shows it.
pub fn etag_text(hash: &[u8; 32]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash)
}

pub fn parse_etag(text: &str) -> Option<[u8; 32]> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text.trim().trim_matches('"')).ok()?;
    bytes.try_into().ok()
}

/// Puts each selected child's priority back (`.priority`, or `.value`
/// beside it for a primitive), read from `value` (read with priorities).
pub fn with_priorities(rows: &mut [(String, Value)], value: &Value) {
    for (key, child) in rows.iter_mut() {
        let Some(priority) = value.get(key.as_str()).and_then(|c| c.get(super::path::PRIORITY_KEY)).filter(|p| !p.is_null()) else { continue };
        match child {
            Value::Object(map) => {
                map.insert(super::path::PRIORITY_KEY.to_string(), priority.clone());
            }
            primitive => *primitive = serde_json::json!({".value": primitive.take(), ".priority": priority}),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn round_trip(value: Value, export: bool) -> Value {
        let mut out = Vec::new();
        leaves("base", &value, &mut out);
        out.sort();
        let mut builder = Builder::default();
        for (sk, json) in &out {
            builder.add(path::relative("base", sk), json);
        }
        let mut v = builder.finish(export);
        into_arrays(&mut v);
        v
    }

    #[test]
    fn values_survive_leaves_and_back() {
        let v = json!({"a": {"b": 1, "c": "x"}, "d": true, "e": {}, "f": null, "g": [1, 2, 3]});
        assert_eq!(round_trip(v, false), json!({"a": {"b": 1, "c": "x"}, "d": true, "g": [1, 2, 3]}));
        assert_eq!(round_trip(json!({}), false), Value::Null);
        assert_eq!(round_trip(json!(5), false), json!(5));
        let with_priority = json!({"x": {".value": 3, ".priority": 1}, "y": {"z": 1, ".priority": "p"}});
        assert_eq!(round_trip(with_priority.clone(), true), with_priority);
        assert_eq!(round_trip(with_priority, false), json!({"x": 3, "y": {"z": 1}}));
        // Sparse index keys stay an object; dense ones become an array.
        assert_eq!(round_trip(json!({"0": "a", "5": "b"}), false), json!({"0": "a", "5": "b"}));
        assert_eq!(round_trip(json!({"0": "a", "2": "b"}), false), json!(["a", null, "b"]));
        assert_eq!(round_trip(json!({"01": "a"}), false), json!({"01": "a"}));
    }

    #[test]
    fn writes_are_checked_like_firebase() {
        assert!(validate_write("a", br#"{"b": {".sv": "timestamp"}}"#, false).is_ok());
        assert!(validate_write("a", br#"{".sv": "nope"}"#, false).unwrap_err().contains("unknown server value"));
        assert!(validate_write("a", br#"{"b.c": 1}"#, false).unwrap_err().contains("Invalid key"));
        assert!(validate_write("", br#"{"a/b": 1, "a": 2}"#, true).unwrap_err().contains("ancestor"));
        assert!(validate_write("", br#"{"a/b": 1, "a/c": null}"#, true).is_ok());
        assert!(validate_write("", br#"[1]"#, true).is_err());
        let mut deep = json!(1);
        for _ in 0..32 {
            deep = json!({ "k": deep });
        }
        assert!(validate_write("", deep.to_string().as_bytes(), false).is_ok(), "32 keys deep is allowed");
        deep = json!({ "k": deep });
        assert!(validate_write("", deep.to_string().as_bytes(), false).unwrap_err().contains("deeper"));
        assert!(validate_write("", br#"{"a": {".value": 1, "b": 2}}"#, false).is_err());
        assert!(validate_write("", b"{not json", false).unwrap_err().contains("parse"));
    }

    #[test]
    fn server_values_resolve_from_the_entry_and_the_state() {
        let mut v =
            json!({"t": {".sv": "timestamp"}, "n": {".sv": {"increment": 2}}, "m": {".sv": {"increment": 1.5}}, "o": {".sv": {"increment": 1}}});
        let mut current = |sk: &str| match sk {
            "a/n" => Some(json!(40)),
            "a/m" => Some(json!(i64::MAX)),
            "a/o" => Some(json!("text")),
            _ => None,
        };
        resolve_server_values("a", &mut v, 1234, &mut current);
        assert_eq!(v, json!({"t": 1234, "n": 42, "m": (i64::MAX as f64) + 1.5, "o": 1}));
        let mut overflow = json!({".sv": {"increment": 1}});
        resolve_server_values("x", &mut overflow, 0, &mut |_| Some(json!(i64::MAX)));
        assert!(overflow.is_f64(), "integer overflow becomes a double");
    }

    #[test]
    fn parts_of_a_value_are_read_and_set_by_path() {
        let mut v = json!({"a": {"b": 1}, "p": 5});
        assert_eq!(at_path(&v, "a/b"), json!(1));
        assert_eq!(at_path(&v, ""), v);
        assert_eq!(at_path(&v, "a/x"), Value::Null);
        set_at_path(&mut v, "p/q", json!(2));
        set_at_path(&mut v, "a/b", Value::Null);
        assert_eq!(v, json!({"a": {"b": null}, "p": {"q": 2}}));
    }

    #[test]
    fn etags_depend_on_the_value_only() {
        assert_eq!(etag(&json!({"a": 1, "b": 2})), etag(&serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap()));
        assert_ne!(etag(&json!(null)), etag(&json!(0)));
        let tag = etag(&json!(1));
        assert_eq!(parse_etag(&etag_text(&tag)), Some(tag));
        assert_eq!(parse_etag("\"nope\""), None);
    }
}
