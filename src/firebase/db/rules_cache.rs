//! Each database's rules as this node has applied them: a record written
//! through the log (`PUT /.settings/rules.json`, pk `.settings` sk `rules`:
//! `node/reserved.rs`), so every replica enforces the same rules.
//!
//! Parsed once per version of their record, and read from the store only
//! when the rules' partition applied something since the last read: the
//! partition's applied position is taken *before* the record is read, so
//! a cached entry is never older than the position it is kept under.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Databases;
use crate::firebase::rules::{Rules, LOCKED, OPEN};
use crate::partition::Namespace;
use crate::store::StoreError;

/// The pk and sk of a database's rules.
pub const RULES_PK: &str = crate::node::reserved::OPTIONS_PK;
pub const RULES_SK: &str = crate::node::reserved::RULES_SK;

/// Per namespace, its parsed rules. Bounded by the namespaces this node knows.
#[derive(Default)]
pub(super) struct RulesCache {
    entries: Mutex<HashMap<String, CachedRules>>,
}

/// A database's parsed rules, as of a position of their partition.
struct CachedRules {
    /// The partition's applied position when the record was read (or
    /// later seen unchanged).
    applied_next: u64,
    /// Which open of the namespace it was read from (`Namespace::opening`).
    opening: u64,
    /// The record's version (`u64::MAX`: no record, the default rules).
    version: u64,
    rules: Arc<Rules>,
}

impl Databases {
    /// The rules of `namespace` as this node has applied them (see the module doc).
    pub fn rules_of(&self, namespace: &Namespace) -> Result<Arc<Rules>, StoreError> {
        let handle = namespace.handle(namespace.partition_of(RULES_PK));
        let applied_next = handle.applied_next();
        if let Some(cached) = self.rules.entries.lock().get(&*namespace.name) {
            if cached.applied_next == applied_next && cached.opening == namespace.opening {
                return Ok(cached.rules.clone());
            }
        }
        let record = handle.read_store()?.get(RULES_PK, RULES_SK)?;
        let version = record.as_ref().map_or(u64::MAX, |r| r.version);
        let mut cache = self.rules.entries.lock();
        if let Some(cached) = cache.get_mut(&*namespace.name) {
            if cached.version == version && cached.opening == namespace.opening {
                cached.applied_next = cached.applied_next.max(applied_next);
                return Ok(cached.rules.clone());
            }
        }
        let text = self.rules_text(record.as_ref().map(|r| &r.value[..]));
        // Saved rules were checked when saved; a record a foreign writer broke locks the database.
        let rules = Arc::new(Rules::parse(&text).unwrap_or_else(|_| Rules::parse(LOCKED).expect("fixed rules parse")));
        cache.insert(namespace.name.to_string(), CachedRules { applied_next, opening: namespace.opening, version, rules: rules.clone() });
        Ok(rules)
    }

    /// The rules' text as saved (comments kept), or the default rules when
    /// none were saved (`stored`: the record's value, a JSON string).
    pub fn rules_text(&self, stored: Option<&[u8]>) -> String {
        match stored {
            Some(value) => serde_json::from_slice::<String>(value).unwrap_or_default(),
            None if self.open_without_rules => OPEN.to_string(),
            None => LOCKED.to_string(),
        }
    }
}
