//! Positions (tokens): where in the log a response stands.
//!
//! A position names, per partition, the *next* offset to be applied: a replica
//! whose partition is at position `o` has applied every entry below `o` and
//! nothing at or above it. A write at offset `v` (its version) therefore
//! returns position `v + 1`, and a reader waiting for `after=v+1` sees the
//! write. An empty partition is at position 0.
//!
//! On the wire a position is an opaque string. Its current form is
//! `ns:partition:offset[,partition:offset...]`, e.g. `default:3:42` or, for a
//! multi-partition response, `default:3:42,7:9`. Clients must not parse it.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub namespace: String,
    /// partition → next offset to apply. Never empty.
    pub offsets: BTreeMap<u32, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid position {0:?}: pass a position string exactly as a Tern response returned it")]
pub struct PositionParseError(pub String);

impl Position {
    pub fn single(namespace: &str, partition: u32, next_offset: u64) -> Position {
        Position { namespace: namespace.to_string(), offsets: BTreeMap::from([(partition, next_offset)]) }
    }

    /// The wire form of a one-partition position, without building a `Position` (read hot path).
    pub fn single_string(namespace: &str, partition: u32, next_offset: u64) -> String {
        let mut out = String::with_capacity(namespace.len() + 24);
        out.push_str(namespace);
        out.push(':');
        out.push_str(itoa::Buffer::new().format(partition));
        out.push(':');
        out.push_str(itoa::Buffer::new().format(next_offset));
        out
    }

    pub fn parse(text: &str) -> Result<Position, PositionParseError> {
        let err = || PositionParseError(text.chars().take(200).collect());
        let (namespace, rest) = text.split_once(':').ok_or_else(err)?;
        crate::limits::check_namespace_name(namespace).map_err(|_| err())?;
        let mut offsets = BTreeMap::new();
        for part in rest.split(',') {
            let (p, o) = part.split_once(':').ok_or_else(err)?;
            let partition: u32 = p.parse().map_err(|_| err())?;
            let offset: u64 = o.parse().map_err(|_| err())?;
            if offsets.insert(partition, offset).is_some() {
                return Err(err());
            }
        }
        if offsets.is_empty() {
            return Err(err());
        }
        Ok(Position { namespace: namespace.to_string(), offsets })
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.namespace)?;
        for (i, (p, o)) in self.offsets.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}:{o}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let p = Position::single("default", 3, 42);
        assert_eq!(p.to_string(), "default:3:42");
        assert_eq!(Position::single_string("default", 3, 42), "default:3:42");
        assert_eq!(Position::parse("default:3:42").unwrap(), p);
        let multi = Position::parse("ns-1:7:9,3:42").unwrap();
        assert_eq!(multi.to_string(), "ns-1:3:42,7:9");
        assert_eq!(multi.offsets.len(), 2);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "default", "default:", "default:x:1", "default:1:-1", "default:1:2,1:3", "a/b:1:2", "d:1:2,"] {
            assert!(Position::parse(bad).is_err(), "{bad}");
        }
    }
}
