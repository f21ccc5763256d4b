//! What a subscription watches, and the index that finds the subscribers an
//! event concerns without looking at the others.

use std::collections::HashMap;
use std::sync::Arc;

use super::queue::Subscriber;
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
}

impl Filter {
    pub fn pk(&self) -> Option<&str> {
        match self {
            Filter::Namespace => None,
            Filter::Pk { pk } | Filter::Prefix { pk, .. } | Filter::Record { pk, .. } => Some(pk),
        }
    }

    pub fn matches(&self, pk: &str, sk: &str) -> bool {
        match self {
            Filter::Namespace => true,
            Filter::Pk { pk: want } => want == pk,
            Filter::Prefix { pk: want, prefix } => want == pk && sk.starts_with(prefix.as_str()),
            Filter::Record { pk: want, sk: want_sk } => want == pk && want_sk == sk,
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

/// The subscribers of one partition: those that watch everything, and the
/// others by the pk they watch. An event costs one hash lookup plus one
/// check per subscriber of its own pk, whatever the number of subscribers.
#[derive(Default)]
pub struct Index {
    pub everything: Vec<Arc<Subscriber>>,
    pub by_pk: HashMap<Box<str>, Vec<Arc<Subscriber>>>,
    count: usize,
}

impl Index {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn insert(&mut self, subscriber: Arc<Subscriber>) {
        match subscriber.filter.pk() {
            None => self.everything.push(subscriber),
            Some(pk) => self.by_pk.entry(pk.into()).or_default().push(subscriber),
        }
        self.count += 1;
    }

    /// Removes the subscriber with this id; returns whether it was there.
    pub fn remove(&mut self, subscriber: &Subscriber) -> bool {
        let list = match subscriber.filter.pk() {
            None => &mut self.everything,
            Some(pk) => match self.by_pk.get_mut(pk) {
                Some(list) => list,
                None => return false,
            },
        };
        let Some(i) = list.iter().position(|s| s.id == subscriber.id) else { return false };
        list.swap_remove(i);
        if list.is_empty() {
            if let Some(pk) = subscriber.filter.pk() {
                self.by_pk.remove(pk);
            }
        }
        self.count -= 1;
        true
    }
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
}
