//! A change event: one applied op of one mutation, decoded and encoded once
//! by the apply loop and then shared (`Arc`) by every subscriber it reaches.

use std::sync::Arc;

use bytes::Bytes;

use crate::codec::{Mutation, OpKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Put,
    Delete,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Put => "put",
            Kind::Delete => "delete",
        }
    }
}

/// One op of an applied mutation (or one record of a snapshot).
#[derive(Debug)]
pub struct Event {
    pub partition: u32,
    /// The mutation's log offset: the record's version.
    pub offset: u64,
    /// This op's place in its mutation, and how many ops the mutation has:
    /// a subscriber that stops after op `i` of `n < i + 1` resumes inside it.
    pub op_index: u32,
    pub op_count: u32,
    pub kind: Kind,
    pub pk: Box<str>,
    pub sk: Box<str>,
    /// `{"pk","sk","value","version"}` on one line (the value's JSON
    /// whitespace newlines became spaces): the payload of every wire form.
    pub data: Bytes,
}

impl Event {
    /// Bytes this event holds, for queue and ring accounting.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Event>() + self.pk.len() + self.sk.len() + self.data.len()
    }

    /// Where a subscriber stands once it has this event.
    pub fn mark_after(&self) -> Mark {
        if self.op_index + 1 >= self.op_count {
            Mark { offset: self.offset + 1, ops_done: 0 }
        } else {
            Mark { offset: self.offset, ops_done: self.op_index + 1 }
        }
    }

    /// The events of one applied mutation, in op order.
    pub fn of_mutation(partition: u32, offset: u64, mutation: &Mutation) -> Vec<Arc<Event>> {
        let op_count = u32::try_from(mutation.ops.len()).expect("ops per mutation are limited to 1,000");
        mutation
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let (kind, value) = match &op.kind {
                    OpKind::Put(value) => (Kind::Put, &value[..]),
                    OpKind::Delete => (Kind::Delete, &b"null"[..]),
                };
                Arc::new(Event {
                    partition,
                    offset,
                    op_index: i as u32,
                    op_count,
                    kind,
                    data: encode_data(&op.pk, &op.sk, value, offset),
                    pk: op.pk.as_str().into(),
                    sk: op.sk.as_str().into(),
                })
            })
            .collect()
    }

    /// A record of a snapshot, as a put at its version.
    pub fn of_record(partition: u32, record: &crate::store::Record) -> Arc<Event> {
        Arc::new(Event {
            partition,
            offset: record.version,
            op_index: 0,
            op_count: 1,
            kind: Kind::Put,
            data: encode_data(&record.pk, &record.sk, &record.value, record.version),
            pk: record.pk.as_str().into(),
            sk: record.sk.as_str().into(),
        })
    }
}

/// A subscriber's place in one partition: every event of offsets below
/// `offset` delivered, and the first `ops_done` ops of `offset` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark {
    pub offset: u64,
    pub ops_done: u32,
}

impl Mark {
    pub fn at(offset: u64) -> Mark {
        Mark { offset, ops_done: 0 }
    }

    /// Whether a subscriber at this mark already has `event`.
    pub fn covers(&self, event: &Event) -> bool {
        event.offset < self.offset || (event.offset == self.offset && event.op_index < self.ops_done)
    }
}

fn encode_data(pk: &str, sk: &str, value: &[u8], version: u64) -> Bytes {
    let mut out = Vec::with_capacity(48 + pk.len() + sk.len() + value.len());
    out.extend_from_slice(b"{\"pk\":");
    serde_json::to_writer(&mut out, pk).expect("writing to a Vec cannot fail");
    out.extend_from_slice(b",\"sk\":");
    serde_json::to_writer(&mut out, sk).expect("writing to a Vec cannot fail");
    out.extend_from_slice(b",\"value\":");
    // Valid JSON has newlines only as whitespace (never inside strings), so
    // they can become spaces: an SSE data line must not contain one.
    out.extend(value.iter().map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }));
    out.extend_from_slice(b",\"version\":");
    out.extend_from_slice(itoa::Buffer::new().format(version).as_bytes());
    out.push(b'}');
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Op;

    #[test]
    fn events_carry_one_line_json_and_marks_inside_a_mutation() {
        let mutation = Mutation {
            write_id: Bytes::new(),
            ops: vec![
                Op { pk: "a\"".into(), sk: "x".into(), kind: OpKind::Put(Bytes::from_static(b"{\n \"k\": [1,\r\n2]}")), condition: None },
                Op { pk: "a\"".into(), sk: "y".into(), kind: OpKind::Delete, condition: None },
            ],
        };
        let events = Event::of_mutation(3, 41, &mutation);
        assert_eq!(events.len(), 2);
        assert!(!events[0].data.contains(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&events[0].data).unwrap();
        assert_eq!(v, serde_json::json!({"pk": "a\"", "sk": "x", "value": {"k": [1, 2]}, "version": 41}));
        let v: serde_json::Value = serde_json::from_slice(&events[1].data).unwrap();
        assert_eq!(v["value"], serde_json::Value::Null);
        assert_eq!(events[0].mark_after(), Mark { offset: 41, ops_done: 1 });
        assert_eq!(events[1].mark_after(), Mark::at(42));
        assert!(events[0].mark_after().covers(&events[0]));
        assert!(!events[0].mark_after().covers(&events[1]));
        assert!(Mark::at(42).covers(&events[1]));
    }
}
