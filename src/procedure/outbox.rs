//! An outbox message as the store keeps it (`\0\0#o<offset><index>`, see
//! `store/procedures.rs`): which procedure emitted it, the topic it goes
//! to, its key and value. Its id is where it sits: `(namespace, partition,
//! input offset, index)`, the same on every replica, which is what makes
//! publishing it exactly once checkable in the output topic.
//!
//! Layout (all lengths big-endian): `[1: format = 1]`
//! `[2: procedure length][procedure]` `[2: topic length][topic]`
//! `[1: has key][4: key length][key]` `[4: value length][value]`.

/// The only layout written and read.
const FORMAT: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxMessage {
    pub procedure: String,
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
}

impl OutboxMessage {
    pub fn encode(&self) -> Vec<u8> {
        let key = self.key.as_deref().unwrap_or_default();
        let mut out = Vec::with_capacity(14 + self.procedure.len() + self.topic.len() + key.len() + self.value.len());
        out.push(FORMAT);
        for text in [&self.procedure, &self.topic] {
            out.extend_from_slice(&u16::try_from(text.len()).expect("names are bounded well below 64 KiB").to_be_bytes());
            out.extend_from_slice(text.as_bytes());
        }
        out.push(u8::from(self.key.is_some()));
        out.extend_from_slice(&u32::try_from(key.len()).expect("keys are bounded").to_be_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&u32::try_from(self.value.len()).expect("values are bounded").to_be_bytes());
        out.extend_from_slice(&self.value);
        out
    }

    /// Reads back what `encode` wrote; None for anything else.
    pub fn decode(bytes: &[u8]) -> Option<OutboxMessage> {
        let mut rest = bytes;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
            rest = tail;
            Some(head)
        };
        if take(1)? != [FORMAT] {
            return None;
        }
        let procedure_len = u16::from_be_bytes(take(2)?.try_into().ok()?) as usize;
        let procedure = String::from_utf8(take(procedure_len)?.to_vec()).ok()?;
        let topic_len = u16::from_be_bytes(take(2)?.try_into().ok()?) as usize;
        let topic = String::from_utf8(take(topic_len)?.to_vec()).ok()?;
        let has_key = take(1)?[0] == 1;
        let key_len = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
        let key = take(key_len)?.to_vec();
        let value_len = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
        let value = take(value_len)?.to_vec();
        if !rest.is_empty() {
            return None;
        }
        Some(OutboxMessage { procedure, topic, key: has_key.then_some(key), value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_anything_else_is_refused() {
        for key in [None, Some(vec![]), Some(vec![0, 1, 2, 255])] {
            let m = OutboxMessage { procedure: "agg".into(), topic: "ns.bad".into(), key, value: b"{\"a\":1}".to_vec() };
            let bytes = m.encode();
            assert_eq!(OutboxMessage::decode(&bytes), Some(m));
            for cut in 0..bytes.len() {
                assert_eq!(OutboxMessage::decode(&bytes[..cut]), None, "cut at {cut}");
            }
            assert_eq!(OutboxMessage::decode(&[bytes.as_slice(), b"x"].concat()), None);
        }
        assert_eq!(OutboxMessage::decode(&[2]), None);
    }
}
