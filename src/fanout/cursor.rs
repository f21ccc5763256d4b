//! A queue's cursor: where it stands in each partition it watches.
//!
//! On the wire a cursor is a position (`ns:partition:offset,...`, see
//! `position.rs`), so any position a write or read returned can start a
//! watch. One extension: a queue that stopped inside a
//! multi-op mutation stands at `offset.ops_done` (`default:3:41.2` = ops 0
//! and 1 of the mutation at offset 41 delivered, the rest not). A cursor
//! whose marks are all whole offsets is an ordinary position.

use std::collections::BTreeMap;
use std::fmt;

use smallvec::SmallVec;

use super::event::{Event, Mark};
use crate::position::{Position, PositionParseError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub namespace: String,
    pub marks: Marks,
}

/// A cursor's mark in each partition it watches, in partition order.
///
/// Kept inline for one partition (a pk, prefix or record watch: nearly
/// every watch), so a delivery finds its mark in the session itself.
/// In a map of its own each of 10,000 sessions would touch one more cache
/// line per event; that lookup was half of the time spent delivering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks(SmallVec<[(u32, Mark); 1]>);

impl Marks {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn get(&self, partition: u32) -> Option<Mark> {
        self.find(partition).ok().map(|i| self.0[i].1)
    }

    pub fn get_mut(&mut self, partition: u32) -> Option<&mut Mark> {
        self.find(partition).ok().map(|i| &mut self.0[i].1)
    }

    /// Sets the mark of `partition`, adding the partition if it is new.
    pub fn insert(&mut self, partition: u32, mark: Mark) {
        match self.find(partition) {
            Ok(i) => self.0[i].1 = mark,
            Err(i) => self.0.insert(i, (partition, mark)),
        }
    }

    /// Adds `partition` at `mark` unless it has a mark already.
    pub fn insert_if_absent(&mut self, partition: u32, mark: Mark) {
        if let Err(i) = self.find(partition) {
            self.0.insert(i, (partition, mark));
        }
    }

    pub fn partitions(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().map(|&(p, _)| p)
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, Mark)> + '_ {
        self.0.iter().copied()
    }

    /// Becomes a copy of `other`, in the room it already has.
    pub fn copy_from(&mut self, other: &Marks) {
        self.0.clear();
        self.0.extend_from_slice(&other.0);
    }

    fn find(&self, partition: u32) -> Result<usize, usize> {
        // One partition: one compare, no search.
        match &self.0[..] {
            [(only, _)] if *only == partition => Ok(0),
            marks => marks.binary_search_by_key(&partition, |&(p, _)| p),
        }
    }
}

impl std::ops::Index<u32> for Marks {
    type Output = Mark;

    fn index(&self, partition: u32) -> &Mark {
        let i = self.find(partition).unwrap_or_else(|_| panic!("no mark for partition {partition}"));
        &self.0[i].1
    }
}

impl FromIterator<(u32, Mark)> for Marks {
    fn from_iter<I: IntoIterator<Item = (u32, Mark)>>(iter: I) -> Marks {
        let mut marks = Marks::default();
        for (partition, mark) in iter {
            marks.insert(partition, mark);
        }
        marks
    }
}

impl Cursor {
    pub fn parse(text: &str) -> Result<Cursor, PositionParseError> {
        let err = || PositionParseError(text.chars().take(200).collect());
        // Validate the shape with the position parser after taking the op
        // counts out, so both accept exactly the same namespaces and numbers.
        let mut ops_done: BTreeMap<u32, u32> = BTreeMap::new();
        let mut plain = String::with_capacity(text.len());
        let (namespace, rest) = text.split_once(':').ok_or_else(err)?;
        plain.push_str(namespace);
        plain.push(':');
        for (i, part) in rest.split(',').enumerate() {
            if i > 0 {
                plain.push(',');
            }
            let (partition, mark) = part.split_once(':').ok_or_else(err)?;
            let offset = match mark.split_once('.') {
                Some((offset, done)) => {
                    let done: u32 = done.parse().map_err(|_| err())?;
                    if done == 0 || done > crate::limits::OPS_PER_MUTATION_MAX as u32 {
                        return Err(err());
                    }
                    ops_done.insert(partition.parse().map_err(|_| err())?, done);
                    offset
                }
                None => mark,
            };
            plain.push_str(partition);
            plain.push(':');
            plain.push_str(offset);
        }
        let position = Position::parse(&plain).map_err(|_| err())?;
        let marks = position.offsets.into_iter().map(|(p, offset)| (p, Mark { offset, ops_done: ops_done.get(&p).copied().unwrap_or(0) })).collect();
        Ok(Cursor { namespace: position.namespace, marks })
    }

    pub fn advance(&mut self, event: &Event) {
        let mark = self.marks.get_mut(event.partition).expect("events come only from watched partitions");
        let after = event.mark_after();
        assert!(after > *mark, "a queue never receives an event it already has");
        *mark = after;
    }

    /// Whether the queue already has `event`.
    pub fn covers(&self, event: &Event) -> bool {
        self.marks.get(event.partition).is_some_and(|m| m.covers(event))
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.namespace)?;
        for (i, (p, mark)) in self.marks.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}:{}", mark.offset)?;
            if mark.ops_done > 0 {
                write!(f, ".{}", mark.ops_done)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_cursors_and_marks_inside_mutations_round_trip() {
        let c = Cursor::parse("default:3:42").unwrap();
        assert_eq!(c.marks[3], Mark::at(42));
        let c = Cursor::parse("ns:7:9.2,3:42").unwrap();
        assert_eq!(c.marks[7], Mark { offset: 9, ops_done: 2 });
        assert_eq!(c.marks.partitions().collect::<Vec<_>>(), vec![3, 7], "in partition order");
        assert_eq!(c.to_string(), "ns:3:42,7:9.2");
        for bad in ["", "ns", "ns:1:2.0", "ns:1:2.x", "ns:1:2.", "ns:1:.3", "ns:1:2,1:3", "ns:1:2.1001", "a/b:1:2"] {
            assert!(Cursor::parse(bad).is_err(), "{bad}");
        }
    }
}
