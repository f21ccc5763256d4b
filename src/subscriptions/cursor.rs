//! A subscriber's cursor: where it stands in each partition it watches.
//!
//! On the wire a cursor is a position (`ns:partition:offset,...`, see
//! `position.rs`), so any position a write or read returned can start a
//! subscription. One extension: a subscriber that stopped inside a
//! multi-op mutation stands at `offset.ops_done` (`default:3:41.2` = ops 0
//! and 1 of the mutation at offset 41 delivered, the rest not). A cursor
//! whose marks are all whole offsets is an ordinary position.

use std::collections::BTreeMap;
use std::fmt;

use super::event::{Event, Mark};
use crate::position::{Position, PositionParseError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub namespace: String,
    pub marks: BTreeMap<u32, Mark>,
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
        let marks = position
            .offsets
            .into_iter()
            .map(|(p, offset)| (p, Mark { offset, ops_done: ops_done.get(&p).copied().unwrap_or(0) }))
            .collect();
        Ok(Cursor { namespace: position.namespace, marks })
    }

    pub fn advance(&mut self, event: &Event) {
        let mark = self.marks.get_mut(&event.partition).expect("events come only from watched partitions");
        let after = event.mark_after();
        assert!(after > *mark, "a subscriber never receives an event it already has");
        *mark = after;
    }

    /// Whether the subscriber already has `event`.
    pub fn covers(&self, event: &Event) -> bool {
        self.marks.get(&event.partition).is_some_and(|m| m.covers(event))
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
        assert_eq!(c.marks[&3], Mark::at(42));
        let c = Cursor::parse("ns:7:9.2,3:42").unwrap();
        assert_eq!(c.marks[&7], Mark { offset: 9, ops_done: 2 });
        assert_eq!(c.to_string(), "ns:3:42,7:9.2");
        for bad in ["", "ns", "ns:1:2.0", "ns:1:2.x", "ns:1:2.", "ns:1:.3", "ns:1:2,1:3", "ns:1:2.1001", "a/b:1:2"] {
            assert!(Cursor::parse(bad).is_err(), "{bad}");
        }
    }
}
