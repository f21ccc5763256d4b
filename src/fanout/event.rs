//! A change event: one applied op of one mutation, decoded and encoded once
//! by the apply loop and then shared (`Arc`) by every queue it reaches.
//!
//! What is the same for all of them is also encoded once, lazily, by the
//! first queue that needs it: the position after the event (every
//! queue of one partition stands there once it has the event) and the
//! SSE frame that carries it.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::codec::{Mutation, OpKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Put,
    Delete,
    /// A JSON-tree set at path `sk` (`value`: what was written, resolved).
    TreeSet,
    /// A JSON-tree update at path `sk` (`value`: relative paths to values).
    TreeMerge,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Put => "put",
            Kind::Delete => "delete",
            Kind::TreeSet => "tree_set",
            Kind::TreeMerge => "tree_merge",
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
    /// a queue that stops after op `i` of `n < i + 1` resumes inside it.
    pub op_index: u32,
    pub op_count: u32,
    pub kind: Kind,
    pub pk: Box<str>,
    pub sk: Box<str>,
    /// `{"pk","sk","value","version"}` on one line (the value's JSON
    /// whitespace newlines became spaces): the payload of every wire form.
    pub data: Bytes,
    /// `ns:partition:offset[.ops_done]` after this event (`position_after`).
    position_after: OnceLock<Box<str>>,
    /// The event as an SSE frame with `id:` = `position_after`, built by the
    /// SSE transport for its first queue (`sse_frame`).
    sse_frame: OnceLock<Bytes>,
    /// The event as another protocol's frame for queues that share a
    /// key (a Firebase listener's location), built for the first of them
    /// (`keyed_frame`). Boxed: most events never need one.
    keyed_frame: OnceLock<Box<(Box<str>, Bytes)>>,
}

impl Event {
    /// Bytes this event holds, for queue and ring accounting.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Event>() + self.pk.len() + self.sk.len() + self.data.len()
    }

    /// Where a queue stands once it has this event.
    pub fn mark_after(&self) -> Mark {
        if self.op_index + 1 >= self.op_count {
            Mark { offset: self.offset + 1, ops_done: 0 }
        } else {
            Mark { offset: self.offset, ops_done: self.op_index + 1 }
        }
    }

    /// The position after this event of a queue that watches only its
    /// partition: `namespace:partition:mark` (the cursor's wire form, see
    /// `cursor.rs`). Formatted once; every such queue shares it.
    pub fn position_after(&self, namespace: &str) -> &str {
        let text = self.position_after.get_or_init(|| {
            // The one-partition cursor's own wire form, not a second copy of it.
            let cursor =
                super::cursor::Cursor { namespace: namespace.to_string(), marks: [(self.partition, self.mark_after())].into_iter().collect() };
            cursor.to_string().into()
        });
        // An event belongs to one namespace: every caller names the same.
        assert!(
            text.len() > namespace.len() && text.starts_with(namespace) && text.as_bytes()[namespace.len()] == b':',
            "position {text:?} asked for as of namespace {namespace:?}"
        );
        text
    }

    /// `position_after`, once a queue had it formatted (a change sent
    /// with `ChangeId::Event` was).
    pub fn formatted_position_after(&self) -> Option<&str> {
        self.position_after.get().map(|text| &**text)
    }

    /// The event as an SSE frame whose `id` is `position_after`: `encode`
    /// runs for the first queue only, the others share its bytes.
    pub fn sse_frame(&self, encode: impl FnOnce() -> Bytes) -> Bytes {
        self.sse_frame.get_or_init(encode).clone()
    }

    /// The event encoded for queues that share `key`: `encode` runs
    /// for the first queue of the first key asked for, the others of
    /// that key share its bytes; a queue with another key encodes its
    /// own (one slot: the common case is many queues at one key).
    pub fn keyed_frame(&self, key: &str, encode: impl FnOnce() -> Bytes) -> Bytes {
        let mut encode = Some(encode);
        let slot = self.keyed_frame.get_or_init(|| Box::new((key.into(), (encode.take().expect("not run yet"))())));
        if &*slot.0 == key {
            return slot.1.clone();
        }
        match encode {
            Some(encode) => encode(),
            None => unreachable!("the slot was just filled with this key"),
        }
    }

    /// The events of one applied mutation, in op order.
    /// A procedure's deployment changes no record: it has none.
    pub fn of_mutation(partition: u32, offset: u64, mutation: &Mutation) -> Vec<Arc<Event>> {
        if mutation.ops.iter().any(|op| matches!(op.kind, OpKind::Procedure(_))) {
            return Vec::new();
        }
        let op_count = u32::try_from(mutation.ops.len()).expect("ops per mutation are limited to 1,000");
        mutation
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let (kind, value) = match &op.kind {
                    OpKind::Put(value) => (Kind::Put, &value[..]),
                    OpKind::Delete => (Kind::Delete, &b"null"[..]),
                    OpKind::Tree(t) if t.merge => (Kind::TreeMerge, &t.value[..]),
                    OpKind::Tree(t) => (Kind::TreeSet, &t.value[..]),
                    OpKind::Procedure(_) => unreachable!("mutations with a procedure op have no events"),
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
                    position_after: OnceLock::new(),
                    sse_frame: OnceLock::new(),
                    keyed_frame: OnceLock::new(),
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
            position_after: OnceLock::new(),
            sse_frame: OnceLock::new(),
            keyed_frame: OnceLock::new(),
        })
    }
}

/// A queue's place in one partition: every event of offsets below
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

    /// Whether a queue at this mark already has `event`.
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
    fn a_keyed_frame_is_encoded_once_per_event_for_its_key_and_never_given_to_another_key() {
        let mutation = Mutation {
            write_id: Bytes::new(),
            ops: vec![Op { pk: "p".into(), sk: "s".into(), kind: OpKind::Put(Bytes::from_static(b"1")), condition: None }],
            ..Default::default()
        };
        let event = &Event::of_mutation(0, 7, &mutation)[0];
        let mut encoded = 0;
        let mut encode = |text: &'static str| {
            encoded += 1;
            Bytes::from_static(text.as_bytes())
        };
        let first = event.keyed_frame("room", || encode("at room"));
        let again = event.keyed_frame("room", || encode("at room, again"));
        assert_eq!((&first[..], &again[..]), (&b"at room"[..], &b"at room"[..]));
        assert_eq!(first.as_ptr(), again.as_ptr(), "shared, not copied");
        let other = event.keyed_frame("room/b", || encode("at room/b"));
        assert_eq!(&other[..], b"at room/b", "another key encodes its own");
        assert_eq!(encoded, 2);
    }

    #[test]
    fn events_carry_one_line_json_and_marks_inside_a_mutation() {
        let mutation = Mutation {
            write_id: Bytes::new(),
            ops: vec![
                Op { pk: "a\"".into(), sk: "x".into(), kind: OpKind::Put(Bytes::from_static(b"{\n \"k\": [1,\r\n2]}")), condition: None },
                Op { pk: "a\"".into(), sk: "y".into(), kind: OpKind::Delete, condition: None },
            ],
            ..Default::default()
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
        assert_eq!(events[0].position_after("ns"), "ns:3:41.1");
        assert_eq!(events[1].position_after("ns"), "ns:3:42");
        let cursor = crate::fanout::Cursor::parse(events[0].position_after("ns")).unwrap();
        assert_eq!(cursor.marks[3], events[0].mark_after(), "the shared position is the cursor's wire form");
        assert_eq!(cursor.to_string(), events[0].position_after("ns"));
    }

    #[test]
    #[should_panic(expected = "asked for as of namespace")]
    fn an_events_position_belongs_to_one_namespace() {
        let record = crate::store::Record { pk: "p".into(), sk: "s".into(), value: b"1".to_vec(), version: 7 };
        let event = Event::of_record(0, &record);
        assert_eq!(event.position_after("ns"), "ns:0:8");
        event.position_after("n");
    }
}
