//! Queries on a location's children, with Firebase's ordering:
//! `orderBy="$key" | "$value" | "$priority" | "<child path>"`, then
//! `startAt`/`startAfter`/`endAt`/`endBefore`/`equalTo`, then
//! `limitToFirst`/`limitToLast`.
//!
//! Firebase's order of values: missing/null, false, true, numbers
//! (ascending), strings (by UTF-8... code units), objects; ties by key.
//! Keys order: keys that are 32-bit integers first, numerically, then the
//! others as strings. Priorities: none, numbers, strings.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::path;
use super::value::strip_priorities;

/// The realtime protocol's names that sort before and after every key.
pub const MIN_NAME: &str = "[MIN_NAME]";
pub const MAX_NAME: &str = "[MAX_NAME]";

#[derive(Debug, Clone, PartialEq)]
pub enum OrderBy {
    Key,
    Value,
    Priority,
    /// A child path, as keys.
    Child(Vec<String>),
}

/// A query as the REST API's parameters give it.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub order_by: OrderBy,
    pub start: Option<(Value, bool)>,
    pub end: Option<(Value, bool)>,
    pub limit_first: Option<usize>,
    pub limit_last: Option<usize>,
    /// The key that breaks a tie with `start`'s value (the realtime
    /// protocol's `startAt(value, key)`; `[MIN_NAME]` and `[MAX_NAME]` sort
    /// before and after every key). None: every key ties.
    pub start_name: Option<String>,
    pub end_name: Option<String>,
}

/// The query parameters, as raw strings (URL-decoded).
#[derive(Debug, Default, Clone)]
pub struct QueryParams<'a> {
    pub order_by: Option<&'a str>,
    pub start_at: Option<&'a str>,
    pub start_after: Option<&'a str>,
    pub end_at: Option<&'a str>,
    pub end_before: Option<&'a str>,
    pub equal_to: Option<&'a str>,
    pub limit_to_first: Option<&'a str>,
    pub limit_to_last: Option<&'a str>,
}

impl QueryParams<'_> {
    fn any_filter(&self) -> bool {
        [self.start_at, self.start_after, self.end_at, self.end_before, self.equal_to, self.limit_to_first, self.limit_to_last]
            .iter()
            .any(Option::is_some)
    }
}

/// Parses the parameters: `None` when there is no query at all.
pub fn parse(params: &QueryParams) -> Result<Option<Query>, String> {
    let Some(order_by) = params.order_by else {
        if params.any_filter() {
            return Err("orderBy must be defined when other query parameters are defined".into());
        }
        return Ok(None);
    };
    let order_by = match serde_json::from_str::<Value>(order_by) {
        Ok(Value::String(s)) => match s.as_str() {
            "$key" => OrderBy::Key,
            "$value" => OrderBy::Value,
            "$priority" => OrderBy::Priority,
            child => OrderBy::Child(path::parse_relative(child).map_err(|e| format!("orderBy must be a valid JSON encoded path: {e}"))?),
        },
        _ => return Err("orderBy must be a valid JSON encoded path".into()),
    };
    let json = |name: &str, raw: Option<&str>| -> Result<Option<Value>, String> {
        raw.map(|raw| serde_json::from_str::<Value>(raw).map_err(|_| format!("{name} must be a valid JSON value (strings are quoted)"))).transpose()
    };
    let limit = |name: &str, raw: Option<&str>| -> Result<Option<usize>, String> {
        raw.map(|raw| match raw.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{name} must be a positive integer")),
        })
        .transpose()
    };
    let equal_to = json("equalTo", params.equal_to)?;
    let mut start = json("startAt", params.start_at)?.map(|v| (v, true));
    let mut end = json("endAt", params.end_at)?.map(|v| (v, true));
    if let Some(after) = json("startAfter", params.start_after)? {
        if start.is_some() {
            return Err("startAt and startAfter cannot both be defined".into());
        }
        start = Some((after, false));
    }
    if let Some(before) = json("endBefore", params.end_before)? {
        if end.is_some() {
            return Err("endAt and endBefore cannot both be defined".into());
        }
        end = Some((before, false));
    }
    if let Some(equal) = equal_to {
        if start.is_some() || end.is_some() {
            return Err("equalTo cannot be defined in addition to startAt, startAfter, endAt or endBefore".into());
        }
        start = Some((equal.clone(), true));
        end = Some((equal, true));
    }
    let limit_first = limit("limitToFirst", params.limit_to_first)?;
    let limit_last = limit("limitToLast", params.limit_to_last)?;
    if limit_first.is_some() && limit_last.is_some() {
        return Err("limitToFirst and limitToLast cannot both be defined".into());
    }
    for bound in [&start, &end].into_iter().flatten() {
        match (&order_by, &bound.0) {
            (OrderBy::Key, Value::String(_)) => {}
            (OrderBy::Key, _) => return Err("When ordering by key, startAt, endAt and equalTo must be strings".into()),
            (OrderBy::Priority, Value::Null | Value::Number(_) | Value::String(_)) => {}
            (OrderBy::Priority, _) => return Err("When ordering by priority, startAt, endAt and equalTo must be null, a number or a string".into()),
            (_, Value::Object(_) | Value::Array(_)) => {
                return Err("startAt, endAt and equalTo must be a primitive: null, a boolean, a number or a string".into())
            }
            _ => {}
        }
    }
    Ok(Some(Query { order_by, start, end, limit_first, limit_last, start_name: None, end_name: None }))
}

/// The child `.indexOn` must name for this query, if any: `.value` for
/// `$value`, the child path for a child; `$key` and `$priority` need none.
pub fn index_needed(query: &Query) -> Option<String> {
    match &query.order_by {
        OrderBy::Value => Some(".value".into()),
        OrderBy::Child(keys) => Some(path::sk_of(keys)),
        OrderBy::Key | OrderBy::Priority => None,
    }
}

/// Runs `query` on `value` read with priorities (`export`): the children it
/// selects, in query order, without priorities.
pub fn run(query: &Query, value: Value) -> Vec<(String, Value)> {
    let mut rows: Vec<(String, Value, Value)> = children(value)
        .into_iter()
        .map(|(key, child)| {
            let sort = sort_value(&query.order_by, &key, &child);
            let mut plain = child;
            strip_priorities(&mut plain);
            (key, plain, sort)
        })
        .collect();
    rows.sort_by(|a, b| compare_rows(query, (&a.0, &a.2), (&b.0, &b.2)));
    rows.retain(|(key, _, sort)| within(query, key, sort));
    let rows: Vec<(String, Value)> = rows.into_iter().map(|(k, v, _)| (k, v)).collect();
    match (query.limit_first, query.limit_last) {
        (Some(n), _) => rows.into_iter().take(n).collect(),
        (_, Some(n)) => {
            let skip = rows.len().saturating_sub(n);
            rows.into_iter().skip(skip).collect()
        }
        _ => rows,
    }
}

/// The selected children as the REST API answers them: an object (JSON
/// objects are unordered; the SDKs order the result themselves).
pub fn as_object(rows: Vec<(String, Value)>) -> Value {
    if rows.is_empty() {
        return Value::Null;
    }
    Value::Object(rows.into_iter().collect::<Map<String, Value>>())
}

/// A location's children as read (with priorities): an object's entries,
/// or an array's items under their index (a location whose keys are
/// 0, 1, 2… reads as an array; its children are still those keys). A null
/// is no child (a tree read never makes one; a hand-made value might).
pub fn children(value: Value) -> Vec<(String, Value)> {
    match value {
        Value::Object(map) => map.into_iter().filter(|(key, v)| key != path::PRIORITY_KEY && key != ".value" && !v.is_null()).collect(),
        Value::Array(items) => items.into_iter().enumerate().filter(|(_, v)| !v.is_null()).map(|(i, v)| (i.to_string(), v)).collect(),
        _ => Vec::new(),
    }
}

/// How many children `children` finds in `value`, without taking it apart.
pub fn children_count(value: &Value) -> usize {
    match value {
        Value::Object(map) => map.iter().filter(|(key, v)| *key != path::PRIORITY_KEY && *key != ".value" && !v.is_null()).count(),
        Value::Array(items) => items.iter().filter(|v| !v.is_null()).count(),
        _ => 0,
    }
}

/// What `child` (read with priorities) sorts by under `order_by`.
pub fn sort_value(order_by: &OrderBy, key: &str, child: &Value) -> Value {
    match order_by {
        OrderBy::Key => Value::String(key.to_string()),
        OrderBy::Priority => child.get(path::PRIORITY_KEY).cloned().unwrap_or(Value::Null),
        OrderBy::Value => plain(child.clone()),
        OrderBy::Child(keys) => {
            let mut at = child;
            for key in keys {
                let next = match at {
                    // A child path through an array-like object: its index.
                    Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
                    other => other.get(key.as_str()),
                };
                match next {
                    Some(next) => at = next,
                    None => return Value::Null,
                }
            }
            plain(at.clone())
        }
    }
}

fn plain(mut value: Value) -> Value {
    strip_priorities(&mut value);
    value
}

fn compare_rows(query: &Query, a: (&str, &Value), b: (&str, &Value)) -> Ordering {
    compare_entries(&query.order_by, a, b)
}

/// The order of two children, `(key, sort value)`, under `order_by`.
pub fn compare_entries(order_by: &OrderBy, a: (&str, &Value), b: (&str, &Value)) -> Ordering {
    match order_by {
        OrderBy::Key => compare_keys(a.0, b.0),
        OrderBy::Priority => compare_priorities(a.1, b.1).then_with(|| compare_keys(a.0, b.0)),
        _ => compare_values(a.1, b.1).then_with(|| compare_keys(a.0, b.0)),
    }
}

fn within(query: &Query, key: &str, sort: &Value) -> bool {
    let compare = |bound: &Value| match query.order_by {
        OrderBy::Key => compare_keys(key, bound.as_str().unwrap_or_default()),
        OrderBy::Priority => compare_priorities(sort, bound),
        _ => compare_values(sort, bound),
    };
    let compare_name = |name: &Option<String>| match name.as_deref() {
        None => Ordering::Equal,
        Some(MIN_NAME) => Ordering::Greater,
        Some(MAX_NAME) => Ordering::Less,
        Some(name) => compare_keys(key, name),
    };
    let after_start = query.start.as_ref().is_none_or(|(bound, inclusive)| match compare(bound).then_with(|| compare_name(&query.start_name)) {
        Ordering::Greater => true,
        Ordering::Equal => *inclusive,
        Ordering::Less => false,
    });
    let before_end = query.end.as_ref().is_none_or(|(bound, inclusive)| match compare(bound).then_with(|| compare_name(&query.end_name)) {
        Ordering::Less => true,
        Ordering::Equal => *inclusive,
        Ordering::Greater => false,
    });
    after_start && before_end
}

/// Firebase's key order: 32-bit integer keys first, numerically; then strings.
pub fn compare_keys(a: &str, b: &str) -> Ordering {
    match (int_key(a), int_key(b)) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.len().cmp(&b.len())),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

fn int_key(key: &str) -> Option<i32> {
    let canonical = key == "0" || (!key.starts_with('0') && !key.starts_with("-0") && !key.is_empty());
    canonical.then(|| key.parse::<i32>().ok()).flatten()
}

fn rank(value: &Value) -> u8 {
    match value {
        Value::Null => 0,
        Value::Bool(false) => 1,
        Value::Bool(true) => 2,
        Value::Number(_) => 3,
        Value::String(_) => 4,
        Value::Object(_) | Value::Array(_) => 5,
    }
}

/// Firebase's value order (objects compare equal to each other: ties go by key).
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    rank(a).cmp(&rank(b)).then_with(|| match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64().unwrap_or(0.0).total_cmp(&y.as_f64().unwrap_or(0.0)),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ => Ordering::Equal,
    })
}

pub fn compare_priorities(a: &Value, b: &Value) -> Ordering {
    let rank = |v: &Value| match v {
        Value::Number(_) => 1,
        Value::String(_) => 2,
        _ => 0,
    };
    rank(a).cmp(&rank(b)).then_with(|| compare_values(a, b))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn query(order_by: &str, extra: &[(&str, &str)]) -> Result<Option<Query>, String> {
        let mut p = QueryParams { order_by: Some(order_by), ..Default::default() };
        for (k, v) in extra {
            match *k {
                "startAt" => p.start_at = Some(v),
                "endAt" => p.end_at = Some(v),
                "equalTo" => p.equal_to = Some(v),
                "limitToFirst" => p.limit_to_first = Some(v),
                "limitToLast" => p.limit_to_last = Some(v),
                _ => unreachable!(),
            }
        }
        parse(&p)
    }

    #[test]
    fn mixed_types_order_like_firebase() {
        let data = json!({"a": {"v": "s"}, "b": {"v": 2}, "c": {"v": true}, "d": {"w": 1}, "e": {"v": false}, "f": {"v": {"x": 1}}, "g": {"v": 1}});
        let q = query("\"v\"", &[]).unwrap().unwrap();
        let keys: Vec<String> = run(&q, data.clone()).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["d", "e", "c", "g", "b", "a", "f"], "d has no v: null sorts first");
        let q = query("\"v\"", &[("startAt", "1"), ("endAt", "2")]).unwrap().unwrap();
        assert_eq!(as_object(run(&q, data.clone())), json!({"b": {"v": 2}, "g": {"v": 1}}));
        let q = query("\"$key\"", &[("limitToLast", "2")]).unwrap().unwrap();
        assert_eq!(as_object(run(&q, data)), json!({"f": {"v": {"x": 1}}, "g": {"v": 1}}));
        let keys = ["b", "10", "9", "-1", "a", "01"];
        let mut sorted = keys.to_vec();
        sorted.sort_by(|a, b| compare_keys(a, b));
        assert_eq!(sorted, ["-1", "9", "10", "01", "a", "b"]);
    }

    #[test]
    fn bad_queries_get_firebases_errors() {
        let p = QueryParams { limit_to_first: Some("1"), ..Default::default() };
        assert_eq!(parse(&p).unwrap_err(), "orderBy must be defined when other query parameters are defined");
        assert!(query("$key", &[]).unwrap_err().contains("valid JSON encoded path"));
        assert!(query("\"$key\"", &[("startAt", "1")]).unwrap_err().contains("must be strings"));
        assert!(query("\"a\"", &[("limitToFirst", "0")]).unwrap_err().contains("positive"));
        assert!(query("\"a\"", &[("limitToFirst", "1"), ("limitToLast", "1")]).is_err());
        assert!(query("\"a\"", &[("equalTo", "1"), ("startAt", "1")]).is_err());
        assert_eq!(index_needed(&query("\"a/b\"", &[]).unwrap().unwrap()), Some("a/b".into()));
        assert_eq!(index_needed(&query("\"$priority\"", &[]).unwrap().unwrap()), None);
    }
}
