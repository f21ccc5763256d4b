//! The hash of a value as the Firebase SDKs compute it (`LeafNode.hash`,
//! `ChildrenNode.hash`): a transaction sends the hash of the value it
//! started from (`"h"` in its put), and the server applies the put only if
//! the current value hashes the same (else `datastale`, and the SDK runs
//! the transaction again on the newer value).
//!
//! - null: `""`.
//! - a leaf: base64(SHA-1(`[priority:<type>:<p>:]<type>:<value>`)), where a
//!   number is the 16 hex digits of its IEEE-754 bits, a boolean `true` or
//!   `false`, a string itself.
//! - an object: base64(SHA-1(`[priority:…:]` then `:<key>:<child hash>` for
//!   each child whose hash is not empty, in priority order: no priority
//!   first, then numbers, then strings, ties by key)), or `""` when nothing
//!   is hashed.

use base64::Engine;
use serde_json::Value;
use sha1::{Digest, Sha1};

use crate::tree::path::PRIORITY_KEY;
use crate::tree::query::{compare_keys, compare_priorities};

/// The SDK's hash of `value` (read with priorities: `.priority`, `.value`).
pub(super) fn hash(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::Object(map) if map.contains_key(".value") => leaf(map.get(".value").expect("checked"), map.get(PRIORITY_KEY).unwrap_or(&Value::Null)),
        Value::Object(map) => {
            let mut children: Vec<(&str, &Value)> =
                map.iter().filter(|(k, v)| *k != PRIORITY_KEY && !v.is_null()).map(|(k, v)| (k.as_str(), v)).collect();
            children.sort_by(|a, b| compare_priorities(priority_of(a.1), priority_of(b.1)).then_with(|| compare_keys(a.0, b.0)));
            let mut text = priority_prefix(map.get(PRIORITY_KEY).unwrap_or(&Value::Null));
            for (key, child) in children {
                let child_hash = hash(child);
                if !child_hash.is_empty() {
                    text.push(':');
                    text.push_str(key);
                    text.push(':');
                    text.push_str(&child_hash);
                }
            }
            if text.is_empty() {
                String::new()
            } else {
                sha1_base64(&text)
            }
        }
        Value::Array(items) => {
            let map: serde_json::Map<String, Value> = items.iter().enumerate().map(|(i, v)| (i.to_string(), v.clone())).collect();
            hash(&Value::Object(map))
        }
        primitive => leaf(primitive, &Value::Null),
    }
}

fn priority_of(child: &Value) -> &Value {
    child.get(PRIORITY_KEY).unwrap_or(&Value::Null)
}

fn leaf(value: &Value, priority: &Value) -> String {
    let mut text = priority_prefix(priority);
    match value {
        Value::Bool(b) => {
            text.push_str("boolean:");
            text.push_str(if *b { "true" } else { "false" });
        }
        Value::Number(n) => {
            text.push_str("number:");
            text.push_str(&ieee754(n.as_f64().unwrap_or(0.0)));
        }
        Value::String(s) => {
            text.push_str("string:");
            text.push_str(s);
        }
        // A leaf is a primitive; anything else hashes as nothing.
        _ => return String::new(),
    }
    sha1_base64(&text)
}

fn priority_prefix(priority: &Value) -> String {
    match priority {
        Value::Number(n) => format!("priority:number:{}:", ieee754(n.as_f64().unwrap_or(0.0))),
        Value::String(s) => format!("priority:string:{s}:"),
        _ => String::new(),
    }
}

/// The SDK's `doubleToIEEE754String`: the bits, big-endian, in lowercase hex.
fn ieee754(v: f64) -> String {
    format!("{:016x}", v.to_bits())
}

fn sha1_base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha1::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The hashes the `firebase` package (12.19.0) itself sent in its
    /// transactions' puts (`"h"`, read from its debug log) for these values,
    /// stored through REST and read by the SDK over this protocol.
    #[test]
    fn hashes_equal_the_sdks() {
        assert_eq!(hash(&Value::Null), "");
        assert_eq!(hash(&json!({})), "");
        assert_eq!(hash(&json!(1)), "YPVfR2bXt/lcDjiQZ8pOkAd3qkQ=");
        assert_eq!(hash(&json!(-0.5)), "/r6we9NY8SVfOWrAH6omHfBJtYA=");
        assert_eq!(hash(&json!(true)), "E5z61QM0lN/U2WsOnusszCTkR8M=");
        assert_eq!(hash(&json!("héllo")), "efk23CQ3RaejCSSm7FPChxRZw0k=");
        assert_eq!(
            hash(&json!({"b": 1, "a": "x", "10": false, "2": null})),
            "7wfRtUTDiWEKumFJZhZfVpGo4No=",
            "integer keys first, null children skipped"
        );
        assert_eq!(hash(&json!({"a": {".value": 1, ".priority": 2}, "b": 1})), "H1jeUJqNDaUp47a1kwiwwypGtcc=", "no priority sorts first");
        // The same texts, spelled out: what the SDK hashes.
        assert_eq!(hash(&json!(1)), sha1_base64("number:3ff0000000000000"));
        let a = sha1_base64("priority:number:4000000000000000:number:3ff0000000000000");
        assert_eq!(hash(&json!({"a": {".value": 1, ".priority": 2}, "b": 1})), sha1_base64(&format!(":b:{}:a:{a}", hash(&json!(1)))));
    }
}
