//! An ordered index of one location's children under one query order
//! (`.indexOn` a child or `.value`, or `$key`, `$priority`): what a query
//! walks instead of reading and sorting every child.
//!
//! The index holds, per child, its key and what it sorts by
//! (`query::sort_value`), ordered exactly as `query::run` orders rows
//! (`query::compare_entries`: the sort value in Firebase's order, ties by
//! key), so a query's bounds are a range of it and its limit the first or
//! last entries of that range. It says which children a query selects; the
//! caller reads their values. Keeping it current (which children changed
//! since it was built) is the caller's: `api/firebase/indexes.rs`.
//!
//! Memory: one entry per child (its key twice and its sort value; an
//! object's sort value is kept as an empty object, since objects compare
//! equal). The caller bounds the entries of all indexes together.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use serde_json::{Map, Value};

use super::query::{children, compare_keys, sort_value, OrderBy, Query};

/// A child's place in the index, or a probe before or after every key of
/// one sort value (for a query's bounds).
#[derive(Debug, Clone)]
enum KeyBound {
    Min,
    Key(String),
    Max,
}

#[derive(Debug, Clone)]
struct Entry {
    /// Only `OrderBy::Key` is told apart: it compares keys alone.
    by_key: bool,
    order_by_priority: bool,
    sort: Value,
    key: KeyBound,
}

impl Entry {
    fn compare_keys(&self, other: &Entry) -> Ordering {
        match (&self.key, &other.key) {
            (KeyBound::Key(a), KeyBound::Key(b)) => compare_keys(a, b),
            (KeyBound::Min, KeyBound::Min) | (KeyBound::Max, KeyBound::Max) => Ordering::Equal,
            (KeyBound::Min, _) | (_, KeyBound::Max) => Ordering::Less,
            (_, KeyBound::Min) | (KeyBound::Max, _) => Ordering::Greater,
        }
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Entry) -> Ordering {
        if self.by_key {
            return self.compare_keys(other);
        }
        let sorts = if self.order_by_priority {
            super::query::compare_priorities(&self.sort, &other.sort)
        } else {
            super::query::compare_values(&self.sort, &other.sort)
        };
        sorts.then_with(|| self.compare_keys(other))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

/// The children of one location in one query order.
#[derive(Debug)]
pub struct Index {
    order_by: OrderBy,
    entries: BTreeSet<Entry>,
    /// Each child's sort value, to find its entry when it changes.
    sorts: HashMap<String, Value>,
}

impl Index {
    pub fn new(order_by: OrderBy) -> Index {
        Index { order_by, entries: BTreeSet::new(), sorts: HashMap::new() }
    }

    /// The index of `location` (its value read with priorities).
    pub fn build(order_by: OrderBy, location: Value) -> Index {
        let mut index = Index::new(order_by);
        for (key, child) in children(location) {
            index.set(&key, Some(&child));
        }
        index
    }

    pub fn order_by(&self) -> &OrderBy {
        &self.order_by
    }

    /// Children indexed.
    pub fn len(&self) -> usize {
        self.sorts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorts.is_empty()
    }

    /// Child `key` is now `child` (read with priorities), or gone (`None`,
    /// or null: a null child does not exist).
    pub fn set(&mut self, key: &str, child: Option<&Value>) {
        if let Some(old) = self.sorts.remove(key) {
            let removed = self.entries.remove(&self.entry(old, KeyBound::Key(key.to_string())));
            debug_assert!(removed, "every child in `sorts` has its entry");
        }
        let Some(child) = child.filter(|c| !c.is_null()) else { return };
        let sort = reduced(sort_value(&self.order_by, key, child));
        self.sorts.insert(key.to_string(), sort.clone());
        let inserted = self.entries.insert(self.entry(sort, KeyBound::Key(key.to_string())));
        debug_assert!(inserted, "a child has one entry");
        debug_assert_eq!(self.entries.len(), self.sorts.len());
    }

    /// The keys `query` selects (same order as the index's), in query order.
    pub fn select(&self, query: &Query) -> Vec<String> {
        assert_eq!(query.order_by, self.order_by, "a query walks the index of its own order");
        assert!(
            query.start_name.is_none() && query.end_name.is_none(),
            "a query with key tie-breaks runs on the location's value (tree::query::run)"
        );
        let lower = match &query.start {
            None => Bound::Unbounded,
            Some((value, true)) => Bound::Included(self.probe(value, true)),
            Some((value, false)) => Bound::Excluded(self.probe(value, false)),
        };
        let upper = match &query.end {
            None => Bound::Unbounded,
            Some((value, true)) => Bound::Included(self.probe(value, false)),
            Some((value, false)) => Bound::Excluded(self.probe(value, true)),
        };
        if empty_range(&lower, &upper) {
            return Vec::new();
        }
        let range = self.entries.range((lower, upper));
        let key_of = |e: &Entry| match &e.key {
            KeyBound::Key(key) => key.clone(),
            _ => unreachable!("only probes have no key"),
        };
        match (query.limit_first, query.limit_last) {
            (Some(n), _) => range.take(n).map(key_of).collect(),
            (_, Some(n)) => {
                let mut last: Vec<String> = range.rev().take(n).map(key_of).collect();
                last.reverse();
                last
            }
            _ => range.map(key_of).collect(),
        }
    }

    fn entry(&self, sort: Value, key: KeyBound) -> Entry {
        let by_key = self.order_by == OrderBy::Key;
        Entry { by_key, order_by_priority: self.order_by == OrderBy::Priority, sort: if by_key { Value::Null } else { sort }, key }
    }

    /// The place just before (`before`) or just after every child that a
    /// bound `value` equals: by key, the key itself.
    fn probe(&self, value: &Value, before: bool) -> Entry {
        if self.order_by == OrderBy::Key {
            return self.entry(Value::Null, KeyBound::Key(value.as_str().unwrap_or_default().to_string()));
        }
        self.entry(reduced(value.clone()), if before { KeyBound::Min } else { KeyBound::Max })
    }
}

/// A range `BTreeSet::range` would refuse (start after end, or one point
/// excluded at both ends) selects nothing.
fn empty_range(lower: &Bound<Entry>, upper: &Bound<Entry>) -> bool {
    match (lower, upper) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b)) | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
        (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

/// A sort value as the index keeps it: objects and arrays compare equal to
/// each other, so their contents are dropped.
fn reduced(sort: Value) -> Value {
    match sort {
        Value::Object(_) | Value::Array(_) => Value::Object(Map::new()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use serde_json::json;

    use super::*;
    use crate::tree::query::{parse, run, QueryParams};

    fn random_primitive(rng: &mut SmallRng) -> Value {
        match rng.random_range(0..9) {
            0 => Value::Null,
            1 => json!(rng.random_bool(0.5)),
            2 => json!(rng.random_range(-3..4)),
            3 => json!(rng.random_range(-3..4) as f64 + 0.5),
            4 => json!(["a", "b", "B", "", "é", "a\u{0}b"][rng.random_range(0..6)]),
            5 => json!({"x": rng.random_range(0..3)}),
            6 => json!({".value": rng.random_range(0..3), ".priority": rng.random_range(0..3)}),
            7 => {
                let priority = ["a", "b"][rng.random_range(0..2)];
                json!({".value": "p", ".priority": priority})
            }
            _ => json!(rng.random_range(0..3)),
        }
    }

    fn random_key(rng: &mut SmallRng) -> String {
        ["0", "1", "2", "9", "10", "-1", "01", "a", "b", "ab", "Z", "é", "2147483648", "-2147483648"][rng.random_range(0..14)].to_string()
    }

    /// A location of up to 12 children, each a primitive or an object with
    /// a child `v` (sometimes missing, sometimes deeper), maybe a priority.
    fn random_location(rng: &mut SmallRng) -> Value {
        let mut map = Map::new();
        for _ in 0..rng.random_range(0..12) {
            let child = match rng.random_range(0..4) {
                0 => random_primitive(rng),
                1 => json!({"v": random_primitive(rng), "w": 1}),
                2 => json!({"v": {"deep": random_primitive(rng)}, ".priority": rng.random_range(0..3)}),
                _ => json!({"w": random_primitive(rng)}),
            };
            map.insert(random_key(rng), child);
        }
        Value::Object(map)
    }

    fn random_bound(rng: &mut SmallRng, order: &str) -> String {
        if order == "\"$key\"" {
            return format!("\"{}\"", random_key(rng));
        }
        if order == "\"$priority\"" {
            return ["null", "0", "1", "2", "\"a\"", "\"b\""][rng.random_range(0..6)].to_string();
        }
        let v = random_primitive(rng);
        if v.is_object() {
            "1".to_string()
        } else {
            v.to_string()
        }
    }

    #[test]
    fn an_index_selects_exactly_what_a_full_read_and_sort_selects() {
        let mut rng = SmallRng::seed_from_u64(18);
        let orders = ["\"$key\"", "\"$value\"", "\"$priority\"", "\"v\"", "\"v/deep\""];
        for round in 0..3_000 {
            let location = random_location(&mut rng);
            let order = orders[round % orders.len()];
            let (mut start, mut end, mut equal) = (None, None, None);
            let (mut first, mut last) = (None, None);
            match rng.random_range(0..6) {
                0 => start = Some(random_bound(&mut rng, order)),
                1 => end = Some(random_bound(&mut rng, order)),
                2 => equal = Some(random_bound(&mut rng, order)),
                3 => {
                    start = Some(random_bound(&mut rng, order));
                    end = Some(random_bound(&mut rng, order));
                }
                _ => {}
            }
            match rng.random_range(0..3) {
                0 => first = Some(rng.random_range(1..5).to_string()),
                1 => last = Some(rng.random_range(1..5).to_string()),
                _ => {}
            }
            let after = rng.random_bool(0.3);
            let before = rng.random_bool(0.3);
            let params = QueryParams {
                order_by: Some(order),
                start_at: start.as_deref().filter(|_| !after),
                start_after: start.as_deref().filter(|_| after),
                end_at: end.as_deref().filter(|_| !before),
                end_before: end.as_deref().filter(|_| before),
                equal_to: equal.as_deref(),
                limit_to_first: first.as_deref(),
                limit_to_last: last.as_deref(),
            };
            let query = parse(&params).unwrap().unwrap();
            let expected: Vec<String> = run(&query, location.clone()).into_iter().map(|(k, _)| k).collect();
            let index = Index::build(query.order_by.clone(), location.clone());
            assert_eq!(index.select(&query), expected, "round {round}: {params:?} on {location}");
        }
    }

    #[test]
    fn children_change_in_place_and_the_order_follows() {
        let order_by = OrderBy::Child(vec!["score".into()]);
        let mut index = Index::build(order_by.clone(), json!({"a": {"score": 3}, "b": {"score": 1}, "c": {"score": 2}}));
        let all = Query { order_by: order_by.clone(), start: None, end: None, limit_first: None, limit_last: None, start_name: None, end_name: None };
        assert_eq!(index.select(&all), ["b", "c", "a"]);
        index.set("b", Some(&json!({"score": 9})));
        index.set("c", None);
        index.set("d", Some(&json!({"other": 1})));
        index.set("e", Some(&Value::Null));
        assert_eq!(index.select(&all), ["d", "a", "b"], "a child without the path sorts first (null)");
        assert_eq!(index.len(), 3);
        let top = Query { limit_last: Some(1), ..all };
        assert_eq!(index.select(&top), ["b"]);
        let mut sorted = [("x", json!(1)), ("y", json!(1))];
        sorted.sort_by(|a, b| crate::tree::query::compare_entries(&order_by, (a.0, &a.1), (b.0, &b.1)));
        assert_eq!(sorted[0].0, "x", "ties go by key");
    }

    #[test]
    fn an_array_like_location_is_queried_by_its_indexes() {
        let query = parse(&QueryParams { order_by: Some("\"$value\""), limit_to_first: Some("2"), ..Default::default() }).unwrap().unwrap();
        let location = json!({"0": 5, "1": 3, "2": 4});
        let mut array = location.clone();
        crate::tree::value::into_arrays(&mut array);
        assert!(array.is_array());
        let expected = vec![("1".to_string(), json!(3)), ("2".to_string(), json!(4))];
        assert_eq!(run(&query, array.clone()), expected, "the children of an array are its items");
        assert_eq!(Index::build(query.order_by.clone(), array).select(&query), ["1", "2"]);
    }
}
