//! Source topics: namespaces whose log is an existing Kafka topic
//! (`PUT /v1/ns/{ns}` with `"source_topic"`, issue 23).
//!
//! The binding is a topic name of its own, so it is created atomically,
//! found by every node's namespace discovery with the other topics, and
//! never changes: an empty one-partition *marker* topic
//! `<prefix>_src.<namespace>.<source topic>`. A namespace name has no dot
//! and cannot start with `_`, so a marker parses one way and is never a
//! namespace's own topic. The namespace's partitions are the source
//! topic's, read from the same metadata.
//!
//! Owns: the marker's name and the namespace ↔ topic map every part of the
//! Kafka log reads (the reader, the writer, the replica group).
//! Never: reads or writes records.

use std::collections::HashMap;

use parking_lot::RwLock;

/// What follows the topic prefix in a marker's name.
const MARKER_INFIX: &str = "_src.";
/// Kafka's longest topic name.
pub(super) const TOPIC_NAME_BYTES_MAX: usize = 249;

/// The marker topic binding `namespace` to `source`.
pub(super) fn marker_name(prefix: &str, namespace: &str, source: &str) -> String {
    format!("{prefix}{MARKER_INFIX}{namespace}.{source}")
}

/// `(namespace, source topic)` of a marker topic's name, or None for any other topic.
pub(super) fn parse_marker<'a>(prefix: &str, topic: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = topic.strip_prefix(prefix)?.strip_prefix(MARKER_INFIX)?;
    let (namespace, source) = rest.split_once('.')?;
    crate::limits::check_namespace_name(namespace).ok()?;
    (!source.is_empty()).then_some((namespace, source))
}

/// Why `source` cannot be a namespace's source topic (its name alone), if it cannot.
pub(super) fn check_source_name(prefix: &str, namespace: &str, source: &str) -> Result<(), String> {
    let legal = source.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if source.is_empty() || !legal || source == "." || source == ".." {
        return Err(format!("source_topic {source:?} is not a Kafka topic name: use [A-Za-z0-9._-]"));
    }
    if source.starts_with(prefix) || source.starts_with("__") {
        return Err(format!(
            "source_topic {source:?} is a Tern or Kafka internal topic (it starts with {prefix:?} or \"__\"); name a topic other producers write"
        ));
    }
    let marker = marker_name(prefix, namespace, source);
    if marker.len() > TOPIC_NAME_BYTES_MAX {
        return Err(format!(
            "namespace {namespace:?} with source_topic {source:?} is too long: their names together may have at most {} bytes",
            TOPIC_NAME_BYTES_MAX - prefix.len() - MARKER_INFIX.len() - 1
        ));
    }
    Ok(())
}

/// Which namespaces read which source topics, as this node has learned
/// (from discovery or its own creations). Bounded by the namespaces.
#[derive(Default)]
pub(super) struct Sources {
    by_namespace: RwLock<HashMap<String, String>>,
    by_topic: RwLock<HashMap<String, String>>,
}

impl Sources {
    pub(super) fn bind(&self, namespace: &str, source: &str) {
        self.by_namespace.write().insert(namespace.to_string(), source.to_string());
        self.by_topic.write().insert(source.to_string(), namespace.to_string());
    }

    /// The source topic `namespace` reads, if it has one.
    pub(super) fn topic_of(&self, namespace: &str) -> Option<String> {
        self.by_namespace.read().get(namespace).cloned()
    }

    /// The namespace reading `topic`, if it is a source topic.
    pub(super) fn namespace_of(&self, topic: &str) -> Option<String> {
        self.by_topic.read().get(topic).cloned()
    }

    pub(super) fn is_sourced(&self, namespace: &str) -> bool {
        self.by_namespace.read().contains_key(namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_parses_back_into_its_namespace_and_topic_even_with_dots() {
        let marker = marker_name("tern.", "calls", "usage.v2.in");
        assert_eq!(marker, "tern._src.calls.usage.v2.in");
        assert_eq!(parse_marker("tern.", &marker), Some(("calls", "usage.v2.in")));
    }

    #[test]
    fn other_topics_are_not_markers() {
        assert_eq!(parse_marker("tern.", "tern.calls"), None);
        assert_eq!(parse_marker("tern.", "tern._src.calls"), None, "no source");
        assert_eq!(parse_marker("tern.", "tern._src.calls."), None, "an empty source");
        assert_eq!(parse_marker("tern.", "tern._src._x.in"), None, "not a namespace name");
        assert_eq!(parse_marker("tern.", "other._src.calls.in"), None, "another prefix");
    }

    #[test]
    fn source_names_are_checked() {
        assert!(check_source_name("tern.", "ns", "usage-in_1.x").is_ok());
        for bad in ["", ".", "..", "a b", "ünï", "a/b", "tern.ns", "__consumer_offsets"] {
            assert!(check_source_name("tern.", "ns", bad).is_err(), "{bad:?} was accepted");
        }
        let longest = "a".repeat(TOPIC_NAME_BYTES_MAX - "tern._src.ns.".len());
        assert!(check_source_name("tern.", "ns", &longest).is_ok());
        let error = check_source_name("tern.", "ns", &format!("{longest}a")).unwrap_err();
        assert!(error.contains("too long"), "{error}");
    }
}
