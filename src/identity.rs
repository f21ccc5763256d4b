//! A log's names for its topics (`Log::identity`:
//! `<log>/<topic>#<id>`), and what two of them say about each other:
//! the same topic, another log, or a topic deleted and created again under
//! its name. Pure string rules, shared by the log, the stores' check at
//! open and snapshot restores.

/// Whether two identities name the same topic name of the same log,
/// whatever its id: equal, or a topic deleted and created again under the
/// name (then the ids differ).
pub(crate) fn same_topic(a: &str, b: &str) -> bool {
    let topic_of = |identity: &str| identity.rsplit_once('#').map(|(topic, _)| topic.to_string());
    topic_of(a).is_some() && topic_of(a) == topic_of(b)
}

/// Whether identity `now` names a topic deleted and created again since
/// `was` (the same name of the same log, another id). A zero id (a Kafka
/// cluster older than topic ids answers `AAAAAAAAAAAAAAAAAAAAAA`) is no
/// id: a cluster that starts giving ids has not made its topics again.
pub(crate) fn recreated(was: &str, now: &str) -> bool {
    let id_of = |identity: &str| identity.rsplit_once('#').map(|(_, id)| id.to_string()).unwrap_or_default();
    let zero = |id: &str| id.trim_end_matches('=').bytes().all(|b| b == b'A');
    was != now && same_topic(was, now) && !zero(&id_of(was)) && !zero(&id_of(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_made_again_is_told_from_another_log_and_from_itself() {
        let was = "kafka:Cluster1/tern.orders#Q2xcW5cPTzGl0pAbRCP6Tg";
        assert!(recreated(was, "kafka:Cluster1/tern.orders#S4s4Q7DwTDWCYDqx3Cq7Tw"), "another id of the name: made again");
        assert!(!recreated(was, was), "itself");
        assert!(!recreated(was, "kafka:Cluster2/tern.orders#S4s4Q7DwTDWCYDqx3Cq7Tw"), "another cluster");
        assert!(!recreated(was, "kafka:Cluster1/other.orders#S4s4Q7DwTDWCYDqx3Cq7Tw"), "another prefix");
        assert!(!recreated("kafka:Cluster1/tern.orders#AAAAAAAAAAAAAAAAAAAAAA", "kafka:Cluster1/tern.orders#S4s4Q7DwTDWCYDqx3Cq7Tw"), "ids came");
        assert!(recreated("embedded:log1/orders#u1", "embedded:log1/orders#u2"));
        assert!(!recreated("test-log", "test-log2"), "no ids: nothing to tell");
        assert!(
            same_topic("embedded:log1/orders#u1", "embedded:log1/orders#u2") && !same_topic("embedded:log1/orders#u1", "embedded:log2/orders#u1")
        );
    }
}
