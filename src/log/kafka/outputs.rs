//! Which Kafka topics a namespace's procedures may publish to.
//!
//! A procedure's outputs and dead letters are produced with Tern's own
//! credentials, so the topic is the only thing keeping one namespace's
//! admin out of everything else Tern can write. A namespace `ns` publishes
//! only to `ns.<something>` (`limits::is_namespace_output_topic`), and
//! never to a topic that is Tern's or Kafka's own: nothing that starts
//! with the topic prefix (namespaces' logs, source markers, publisher
//! groups), nothing that starts with `__`, no topic bound as a namespace's
//! source. The API checks a definition's topics before it deploys
//! (`check_namespace`, `check_topic`); the publisher checks every message
//! again before it sends it, and drops (with an error and a count) what a
//! forged or old definition would have sent.
//!
//! Owns: the rule. Never: produces anything.

use super::sources::Sources;
use crate::limits::is_namespace_output_topic;

/// Why namespace `namespace`'s procedures may emit to no topic at all on
/// this cluster, if they may not: its own prefix `namespace.` and Tern's
/// topic prefix overlap, so `namespace.<output>` could name Tern's topics.
pub(super) fn check_namespace(prefix: &str, namespace: &str) -> Result<(), String> {
    let own = format!("{namespace}.");
    if !prefix.is_empty() && (own.starts_with(prefix) || prefix.starts_with(&own)) {
        return Err(format!(
            "namespace {namespace:?}'s output topics ({own}…) would overlap Tern's own topics (kafka_topic_prefix {prefix:?}): \
             procedures with outputs need a namespace named otherwise"
        ));
    }
    Ok(())
}

/// Why a procedure of `namespace` may not publish to `topic`, if it may not.
pub(super) fn check_topic(prefix: &str, sources: &Sources, namespace: &str, topic: &str) -> Result<(), String> {
    if !is_namespace_output_topic(namespace, topic) {
        return Err(format!("topic {topic:?} is not namespace {namespace:?}'s: a procedure's topics start with \"{namespace}.\""));
    }
    if topic.starts_with("__") || (!prefix.is_empty() && topic.starts_with(prefix)) {
        return Err(format!("topic {topic:?} is a Tern or Kafka internal topic (it starts with {prefix:?} or \"__\")"));
    }
    if let Some(reader) = sources.namespace_of(topic) {
        return Err(format!("topic {topic:?} is namespace {reader:?}'s source topic: its log, not an output"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_publishes_only_to_its_own_topics() {
        let sources = Sources::default();
        sources.bind("victim", "feed.events");
        for (prefix, ns, topic, refused) in [
            ("tern.", "billing", "billing.out", None),
            ("tern.", "billing", "tern.victim", Some("not namespace")),
            ("tern.", "billing", "billingx.out", Some("not namespace")),
            ("tern.", "tern", "tern.victim", Some("internal topic")),
            ("billing.x", "billing", "billing.xy", Some("internal topic")),
            ("tern.", "feed", "feed.events", Some("source topic")),
            ("", "billing", "billing.out", None),
        ] {
            let got = check_topic(prefix, &sources, ns, topic);
            match refused {
                None => assert_eq!(got, Ok(()), "{prefix} {ns} {topic}"),
                Some(why) => assert!(got.as_ref().unwrap_err().contains(why), "{prefix} {ns} {topic}: {got:?}"),
            }
        }
        assert!(check_namespace("tern.", "billing").is_ok());
        assert!(check_namespace("", "billing").is_ok());
        assert!(check_namespace("tern.", "tern").is_err());
        assert!(check_namespace("tern.v", "tern").is_err());
        assert!(check_namespace("t", "tern").is_err());
    }
}
