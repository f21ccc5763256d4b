//! A database's rules, parsed: the tree of `.read`, `.write`, `.validate`
//! and `.indexOn` per location, and the cascade (see the room's doc).

use std::collections::BTreeMap;

use serde_json::Value;

use super::eval::{allows, Data, Env, Pending, Scope};
use super::expr::Expr;
use crate::tree::path;

/// Firebase's bound on a rules file.
pub const RULES_BYTES_MAX: usize = 256 * 1024;

/// One location of the rules tree.
#[derive(Debug, Clone, Default)]
struct Node {
    read: Option<Expr>,
    write: Option<Expr>,
    validate: Option<Expr>,
    index_on: Vec<String>,
    children: BTreeMap<String, Node>,
    wildcard: Option<(String, Box<Node>)>,
}

/// A database's rules, parsed.
#[derive(Debug, Clone)]
pub struct Rules {
    root: Node,
}

/// The rules `tern dev` starts with (the emulator's): everything open.
pub const OPEN: &str = r#"{"rules": {".read": true, ".write": true}}"#;
/// The rules `tern serve` starts with: only the admin reads or writes.
pub const LOCKED: &str = r#"{"rules": {".read": false, ".write": false}}"#;

impl Rules {
    /// Parses a rules file (JSON, with `//` and `/* */` comments allowed).
    pub fn parse(text: &str) -> Result<Rules, String> {
        if text.len() > RULES_BYTES_MAX {
            return Err(format!("rules are at most {RULES_BYTES_MAX} bytes, got {}", text.len()));
        }
        let json: Value = serde_json::from_str(&strip_comments(text)).map_err(|e| format!("Invalid JSON in rules: {e}"))?;
        let Value::Object(top) = json else { return Err("rules must be a JSON object with a \"rules\" key".into()) };
        if let Some(other) = top.keys().find(|k| *k != "rules") {
            return Err(format!("unknown top-level key {other:?}: a rules file has only \"rules\""));
        }
        let rules = top.get("rules").ok_or("rules must have a \"rules\" key")?;
        Ok(Rules { root: node("/rules", rules, 0)? })
    }

    /// The rules as strict JSON (comments removed): `?format=strict`.
    pub fn strict_text(text: &str) -> String {
        strip_comments(text)
    }

    /// Whether `auth` may read the location `sk`.
    pub fn can_read(&self, sk: &str, auth: &Value, now_ms: u64, data: &dyn Data) -> bool {
        let env = Env::new(auth, now_ms, data, None);
        let mut allowed = false;
        self.walk(sk, |node, at, vars| {
            if let Some(rule) = &node.read {
                allowed = allows(rule, &env, &Scope { sk: at, vars });
            }
            !allowed
        });
        allowed
    }

    /// Whether `auth` may make `writes` (sets at sort keys, server values
    /// not yet resolved count as present): each must be allowed by a
    /// `.write` at or above its path, and every `.validate` it touches must hold.
    /// Whether the rules allow `writes` (`(sk, value)` sets, values as
    /// written: with `.priority` and `.value` where they have them).
    pub fn can_write(&self, writes: &[(String, Value)], auth: &Value, now_ms: u64, data: &dyn Data) -> bool {
        self.can_write_reading(writes, auth, now_ms, data).0
    }

    /// As `can_write`, also returning the locations whose new data (the
    /// tree as the writes would leave it) the rules read.
    pub fn can_write_reading(&self, writes: &[(String, Value)], auth: &Value, now_ms: u64, data: &dyn Data) -> (bool, Vec<String>) {
        let plain: Vec<(String, Value)> = writes
            .iter()
            .map(|(sk, value)| {
                let mut value = value.clone();
                crate::tree::value::strip_priorities(&mut value);
                (sk.clone(), value)
            })
            .collect();
        let env = Env::new(auth, now_ms, data, Some(Pending { writes: &plain, with_priorities: writes }));
        for (sk, value) in &plain {
            let mut allowed = false;
            self.walk(sk, |node, at, vars| {
                if let Some(rule) = &node.write {
                    allowed = allows(rule, &env, &Scope { sk: at, vars });
                }
                !allowed
            });
            if !allowed || !self.validates(sk, value, &env) {
                return (false, env.new_read());
            }
        }
        (!env.budget_spent(), env.new_read())
    }

    /// The `.indexOn` entries at location `sk`.
    pub fn index_on(&self, sk: &str) -> Vec<String> {
        let keys = path::keys_of(sk);
        let mut node = &self.root;
        for key in keys {
            match node.children.get(key).or(node.wildcard.as_ref().map(|(_, n)| &**n)) {
                Some(next) => node = next,
                None => return Vec::new(),
            }
        }
        node.index_on.clone()
    }

    /// Visits the rule nodes on the way from the root to `sk` (each with its
    /// location and the `$` variables bound so far) while `visit` says go on.
    fn walk(&self, sk: &str, mut visit: impl FnMut(&Node, &str, &[(String, String)]) -> bool) {
        let keys = path::keys_of(sk);
        let mut node = &self.root;
        let mut vars: Vec<(String, String)> = Vec::new();
        if !visit(node, "", &vars) {
            return;
        }
        for (depth, key) in keys.iter().enumerate() {
            node = match step(node, key, &mut vars) {
                Some(next) => next,
                None => return,
            };
            if !visit(node, &path::sk_of(&keys[..=depth]), &vars) {
                return;
            }
        }
    }

    /// `.validate` above the write (where the new data is not null) and at
    /// and below it, following the new value.
    fn validates(&self, sk: &str, value: &Value, env: &Env) -> bool {
        let keys = path::keys_of(sk);
        let mut node = &self.root;
        let mut vars: Vec<(String, String)> = Vec::new();
        for depth in 0..keys.len() {
            let at = path::sk_of(&keys[..depth]);
            if !validate_here(node, &at, &vars, env) {
                return false;
            }
            node = match step(node, keys[depth], &mut vars) {
                Some(next) => next,
                None => return true,
            };
        }
        validate_below(node, sk, value, &mut vars, env)
    }
}

fn step<'n>(node: &'n Node, key: &str, vars: &mut Vec<(String, String)>) -> Option<&'n Node> {
    if let Some(child) = node.children.get(key) {
        return Some(child);
    }
    let (name, child) = node.wildcard.as_ref()?;
    vars.push((name.clone(), key.to_string()));
    Some(child)
}

fn validate_here(node: &Node, at: &str, vars: &[(String, String)], env: &Env) -> bool {
    let Some(rule) = &node.validate else { return true };
    // `.validate` is not evaluated where the new data is null (a delete).
    let new_is_null = env.pending.is_some() && !env.new_exists(at);
    new_is_null || allows(rule, env, &Scope { sk: at, vars })
}

fn validate_below(node: &Node, sk: &str, value: &Value, vars: &mut Vec<(String, String)>, env: &Env) -> bool {
    if value.is_null() {
        return true;
    }
    if !validate_here(node, sk, vars, env) {
        return false;
    }
    let Value::Object(children) = value else { return true };
    for (key, child) in children {
        if key.starts_with('.') {
            continue;
        }
        let depth = vars.len();
        let ok = match step(node, key, vars) {
            Some(next) => validate_below(next, &path::join(sk, key), child, vars, env),
            None => true,
        };
        vars.truncate(depth);
        if !ok {
            return false;
        }
    }
    true
}

/// The deepest rules tree followed (Firebase's data depth).
const DEPTH_MAX: usize = path::DEPTH_MAX + 1;

fn node(at: &str, json: &Value, depth: usize) -> Result<Node, String> {
    if depth > DEPTH_MAX {
        return Err(format!("rules nested deeper than {DEPTH_MAX} at {at}"));
    }
    let Value::Object(map) = json else { return Err(format!("{at} must be an object of rules")) };
    let mut node = Node::default();
    for (key, value) in map {
        let here = format!("{at}/{key}");
        match key.as_str() {
            ".read" => node.read = Some(rule(&here, value)?),
            ".write" => node.write = Some(rule(&here, value)?),
            ".validate" => node.validate = Some(rule(&here, value)?),
            ".indexOn" => {
                node.index_on = match value {
                    Value::String(s) => vec![s.clone()],
                    Value::Array(items) => items
                        .iter()
                        .map(|i| i.as_str().map(str::to_string).ok_or_else(|| format!("{here} must list strings")))
                        .collect::<Result<_, _>>()?,
                    _ => return Err(format!("{here} must be a string or a list of strings")),
                }
            }
            dotted if dotted.starts_with('.') => return Err(format!("unknown rule {here}: rules are .read, .write, .validate and .indexOn")),
            wildcard if wildcard.starts_with('$') => {
                if let Some((other, _)) = &node.wildcard {
                    return Err(format!("{at} has two wildcards, {other} and {wildcard}: a location has at most one"));
                }
                node.wildcard = Some((wildcard.to_string(), Box::new(node_of(&here, value, depth)?)));
            }
            child => {
                path::check_key(child).map_err(|e| format!("{here}: {e}"))?;
                node.children.insert(child.to_string(), node_of(&here, value, depth)?);
            }
        }
    }
    Ok(node)
}

fn node_of(at: &str, json: &Value, depth: usize) -> Result<Node, String> {
    node(at, json, depth + 1)
}

fn rule(at: &str, value: &Value) -> Result<Expr, String> {
    match value {
        Value::Bool(b) => Ok(Expr::Bool(*b)),
        Value::String(text) => super::expr::parse(text).map_err(|e| format!("Error parsing rule {at}: {e} (in {text:?})")),
        _ => Err(format!("{at} must be true, false or an expression string")),
    }
}

/// JSON with `//` and `/* */` comments (outside strings) removed.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for next in chars.by_ref() {
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Fixed(Value);
    impl Data for Fixed {
        fn current(&self, sk: &str) -> Value {
            let mut at = &self.0;
            for key in path::keys_of(sk) {
                match at.get(key) {
                    Some(next) => at = next,
                    None => return Value::Null,
                }
            }
            at.clone()
        }
        fn priority(&self, sk: &str) -> Value {
            self.current(&path::join(sk, path::PRIORITY_KEY))
        }
    }

    const RULES: &str = r#"{
      // comments are allowed
      "rules": {
        "public": { ".read": true },
        "users": {
          "$uid": {
            ".read": "auth != null && auth.uid == $uid",
            ".write": "auth != null && auth.uid == $uid",
            "name": { ".validate": "newData.isString() && newData.val().length <= 10" },
            "age": { ".validate": "newData.isNumber() && newData.val() >= 0" },
            "$other": { ".validate": false }
          },
          ".indexOn": ["age", "name"]
        },
        "counter": { ".write": "newData.isNumber() && (!data.exists() || newData.val() == data.val() + 1)" },
        "admins": { ".read": "root.child('roles/' + auth.uid).val() == 'admin'" }
      }
    }"#;

    #[test]
    fn read_and_write_cascade_and_validate_follows_the_new_data() {
        let rules = Rules::parse(RULES).unwrap();
        let data = Fixed(json!({"counter": 5, "roles": {"boss": "admin"}, "users": {"alice": {"name": "A"}}}));
        let alice = json!({"uid": "alice"});
        let none = Value::Null;
        assert!(rules.can_read("public/x/y", &none, 0, &data), "read cascades down");
        assert!(!rules.can_read("", &none, 0, &data), "rules are not filters");
        assert!(rules.can_read("users/alice/name", &alice, 0, &data));
        assert!(!rules.can_read("users/bob", &alice, 0, &data));
        assert!(rules.can_read("admins", &json!({"uid": "boss"}), 0, &data));
        assert!(!rules.can_read("admins", &alice, 0, &data));
        let write = |sk: &str, v: Value, auth: &Value| rules.can_write(&[(sk.to_string(), v)], auth, 0, &data);
        assert!(write("users/alice", json!({"name": "Alice", "age": 3}), &alice));
        assert!(!write("users/alice", json!({"name": "A very long name"}), &alice), ".validate on a child");
        assert!(!write("users/alice", json!({"nickname": "x"}), &alice), "$other rejects unknown children");
        assert!(!write("users/alice/age", json!(-1), &alice));
        assert!(write("users/alice/age", Value::Null, &alice), ".validate is not evaluated on deletes");
        assert!(!write("users/bob/age", json!(1), &alice));
        assert!(write("counter", json!(6), &none));
        assert!(!write("counter", json!(7), &none));
        assert_eq!(rules.index_on("users"), vec!["age", "name"]);
        assert!(rules.index_on("users/x").is_empty());
    }

    #[test]
    fn get_priority_sees_the_current_and_the_written_priority() {
        let rules = r#"{"rules": {
          "ranked": { "$item": {
            ".read": "data.getPriority() == 1",
            ".write": "newData.getPriority() != null && (!data.exists() || newData.getPriority() > data.getPriority())"
          } }
        }}"#;
        let rules = Rules::parse(rules).unwrap();
        let data = Fixed(json!({"ranked": {"a": {"v": 1, ".priority": 1}, "b": {"v": 2, ".priority": 5}}}));
        let none = Value::Null;
        assert!(rules.can_read("ranked/a", &none, 0, &data));
        assert!(!rules.can_read("ranked/b", &none, 0, &data));
        let write = |sk: &str, v: Value| rules.can_write(&[(sk.to_string(), v)], &none, 0, &data);
        assert!(write("ranked/a", json!({"v": 3, ".priority": 2})), "a higher priority than now");
        assert!(!write("ranked/b", json!({"v": 3, ".priority": 2})), "lower than now");
        assert!(!write("ranked/c", json!({"v": 3})), "no priority written");
        assert!(write("ranked/c", json!({".value": 3, ".priority": "p"})), "a primitive with a priority");
        let update = |writes: &[(&str, Value)]| {
            let writes: Vec<(String, Value)> = writes.iter().map(|(sk, v)| (sk.to_string(), v.clone())).collect();
            rules.can_write(&writes, &none, 0, &data)
        };
        assert!(update(&[("ranked/d", json!({"v": 1, ".priority": 9})), ("ranked/a", json!({"v": 1, ".priority": 2}))]));
        assert!(!update(&[("ranked/d", json!({"v": 1, ".priority": 9})), ("ranked/e", json!(1))]), "each path of an update is checked");
    }

    #[test]
    fn bad_rules_are_refused_with_where_and_why() {
        assert!(Rules::parse(r#"{"rules": {".read": "auth ==="}}"#).unwrap_err().contains("/rules/.read"));
        assert!(Rules::parse(r#"{"rules": {".reed": true}}"#).unwrap_err().contains("unknown rule"));
        assert!(Rules::parse(r#"{"rules": {"$a": {}, "$b": {}}}"#).unwrap_err().contains("two wildcards"));
        assert!(Rules::parse(r#"{"rulez": {}}"#).is_err());
        assert!(Rules::parse(r#"{"rules": {".read": 1}}"#).is_err());
        assert!(Rules::parse(r#"{"rules": {"a": {".indexOn": 3}}}"#).is_err());
        assert!(Rules::parse(&" ".repeat(RULES_BYTES_MAX + 1)).unwrap_err().contains("at most"));
        assert!(Rules::parse(OPEN).is_ok() && Rules::parse(LOCKED).is_ok());
    }

    #[test]
    fn a_costly_request_is_cut_off_and_denied() {
        let costly = "newData.val() + 1 > 0 && ".repeat(100);
        let rules = format!("{{\"rules\": {{\".write\": true, \"$k\": {{\".validate\": \"{costly}true\"}}}}}}");
        let rules = Rules::parse(&rules).unwrap();
        let many = |n: usize| Value::Object((0..n).map(|i| (format!("k{i}"), json!(i))).collect());
        let data = Fixed(json!({}));
        let write = |value: Value| rules.can_write(&[(String::new(), value)], &Value::Null, 0, &data);
        assert!(write(many(10)));
        assert!(!write(many(1000)), "more than STEPS_MAX steps: denied");
    }
}
