//! What a watch watches, and the index that finds the queues an
//! event concerns without looking at the others.

use std::collections::HashMap;
use std::sync::Arc;

use super::queue::WatchQueue;
use crate::partitioner::partition_of;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Every record of the namespace (every partition).
    Namespace,
    /// Every record of one pk.
    Pk { pk: String },
    /// The records of one pk whose sk starts with `prefix`.
    Prefix { pk: String, prefix: String },
    /// One record.
    Record { pk: String, sk: String },
    /// A location in the JSON tree of `pk` (`crate::tree`): tree ops at the
    /// path, above it or below it, and the leaves below it.
    Tree { pk: String, path: String },
}

impl Filter {
    pub fn pk(&self) -> Option<&str> {
        match self {
            Filter::Namespace => None,
            Filter::Pk { pk } | Filter::Prefix { pk, .. } | Filter::Record { pk, .. } | Filter::Tree { pk, .. } => Some(pk),
        }
    }

    pub fn matches(&self, pk: &str, sk: &str) -> bool {
        match self {
            Filter::Namespace => true,
            Filter::Pk { pk: want } => want == pk,
            Filter::Prefix { pk: want, prefix } => want == pk && sk.starts_with(prefix.as_str()),
            Filter::Record { pk: want, sk: want_sk } => want == pk && want_sk == sk,
            Filter::Tree { pk: want, path } => want == pk && crate::tree::path::relation(path, sk) != crate::tree::path::Relation::Unrelated,
        }
    }

    /// The partitions this filter can see events of.
    pub fn partitions(&self, partitions: u32) -> Vec<u32> {
        match self.pk() {
            None => (0..partitions).collect(),
            Some(pk) => vec![partition_of(pk, partitions)],
        }
    }
}

/// The queues of one partition: those that watch everything, and the
/// others by the pk they watch. An event costs one hash lookup plus one
/// check per queue of its own pk, whatever the number of queues.
#[derive(Default)]
pub(crate) struct Index {
    pub everything: Vec<Arc<WatchQueue>>,
    pub by_pk: HashMap<Box<str>, Vec<Arc<WatchQueue>>>,
    count: usize,
}

impl Index {
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Lists stay sorted by (connection, id): a dispatch round wakes one
    /// connection's queues one after the other, so its task runs once
    /// for all of them instead of once each while the round goes on.
    pub(crate) fn insert(&mut self, queue: Arc<WatchQueue>) {
        let list = match queue.filter.pk() {
            None => &mut self.everything,
            Some(pk) => self.by_pk.entry(pk.into()).or_default(),
        };
        let at = list.partition_point(|s| order(s) < order(&queue));
        assert!(list.get(at).is_none_or(|s| s.id != queue.id), "queue {} indexed twice", queue.id);
        list.insert(at, queue);
        self.count += 1;
    }

    /// Removes the queue with this id; returns whether it was there.
    pub(crate) fn remove(&mut self, queue: &WatchQueue) -> bool {
        let list = match queue.filter.pk() {
            None => &mut self.everything,
            Some(pk) => match self.by_pk.get_mut(pk) {
                Some(list) => list,
                None => return false,
            },
        };
        let Ok(i) = list.binary_search_by_key(&order(queue), |s| order(s)) else { return false };
        list.remove(i);
        if list.is_empty() {
            if let Some(pk) = queue.filter.pk() {
                self.by_pk.remove(pk);
            }
        }
        self.count -= 1;
        true
    }
}

/// Where a queue sits in its index list.
fn order(queue: &WatchQueue) -> (u64, u64) {
    (queue.group, queue.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_what_they_name() {
        let prefix = Filter::Prefix { pk: "dns".into(), prefix: "www.".into() };
        assert!(prefix.matches("dns", "www.example"));
        assert!(!prefix.matches("dns", "mail.example"));
        assert!(!prefix.matches("dnsx", "www.example"));
        let record = Filter::Record { pk: "a".into(), sk: "".into() };
        assert!(record.matches("a", "") && !record.matches("a", "b"));
        assert!(Filter::Pk { pk: "a".into() }.matches("a", "anything"));
        assert_eq!(Filter::Namespace.partitions(4), vec![0, 1, 2, 3]);
        assert_eq!(Filter::Pk { pk: "a".into() }.partitions(4).len(), 1);
    }

    #[test]
    fn the_index_keeps_each_connections_queues_together() {
        use crate::fanout::queue::{Mode, QueueLimits};
        let limits = QueueLimits { events_max: 10, bytes_max: 1 << 20 };
        let queue = |id: u64, group: u64, filter: Filter| Arc::new(WatchQueue::new(id, group, filter, Mode::Log, limits));
        let mut index = Index::default();
        // Subscriptions of connections 1, 2 and 3 opened interleaved.
        for (id, group) in [(1, 3), (2, 1), (3, 2), (4, 3), (5, 1), (6, 2)] {
            index.insert(queue(id, group, Filter::Pk { pk: "a".into() }));
            index.insert(queue(100 + id, group, Filter::Namespace));
        }
        let order = |list: &[Arc<WatchQueue>]| list.iter().map(|s| (s.group, s.id % 100)).collect::<Vec<_>>();
        let grouped = vec![(1, 2), (1, 5), (2, 3), (2, 6), (3, 1), (3, 4)];
        assert_eq!(order(&index.by_pk["a"]), grouped);
        assert_eq!(order(&index.everything), grouped);
        assert_eq!(index.len(), 12);
        assert!(index.remove(&queue(5, 1, Filter::Pk { pk: "a".into() })));
        assert!(!index.remove(&queue(5, 1, Filter::Pk { pk: "a".into() })), "removed once");
        assert!(!index.remove(&queue(6, 1, Filter::Pk { pk: "a".into() })), "not in that connection");
        assert_eq!(order(&index.by_pk["a"]), vec![(1, 2), (2, 3), (2, 6), (3, 1), (3, 4)]);
        assert_eq!(index.len(), 11);
    }
}
