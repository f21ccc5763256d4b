//! What one call of a procedure asked for, held back until the call ends:
//! record writes (an overlay the call's own reads see), outputs and timer
//! changes. A call that fails leaves nothing: its effects are dropped and
//! the record goes to the dead letters instead, alike on every replica.
//! A call that returns has its effects applied in the apply transaction,
//! in the order they were asked for.
//!
//! Every kind of effect is bounded per call, with the same numbers as a
//! mutation (1,000 writes, 4 MiB) so one record cannot make a transaction
//! larger than a client could.

use std::collections::HashMap;

use crate::limits;

/// Most record writes (puts and deletes) of one call.
pub const WRITES_PER_CALL_MAX: usize = limits::OPS_PER_MUTATION_MAX;
/// Most outputs of one call.
pub const OUTPUTS_PER_CALL_MAX: usize = 1_000;
/// Most timer changes of one call.
pub const TIMERS_PER_CALL_MAX: usize = 1_000;
/// Most bytes of keys, values and outputs of one call.
pub const EFFECT_BYTES_PER_CALL_MAX: usize = limits::MUTATION_BYTES_MAX;
/// Longest output key, in bytes.
pub const OUTPUT_KEY_BYTES_MAX: usize = 1024;
/// Longest timer name, in bytes.
pub const TIMER_NAME_BYTES_MAX: usize = 256;
/// Longest private state key, in bytes.
pub const STATE_KEY_BYTES_MAX: usize = 1024;

/// A record write: `value` None deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub pk: String,
    pub sk: String,
    pub value: Option<Vec<u8>>,
}

/// A message for an output (a topic, once published).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub output: String,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerChange {
    Set { name: String, at_ms: u64 },
    Cancel { name: String },
}

#[derive(Debug, Default)]
pub struct Effects {
    pub writes: Vec<Write>,
    /// The procedure's private state: (key, value or None to delete), in order.
    pub state: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// (pk, sk) → index in `writes` of the last write of that key.
    overlay: HashMap<(String, String), usize>,
    pub outputs: Vec<Output>,
    pub timers: Vec<TimerChange>,
    bytes: usize,
}

impl Effects {
    /// What this call wrote at `(pk, sk)`: Some(None) if it deleted it, None if untouched.
    pub fn written(&self, pk: &str, sk: &str) -> Option<Option<&[u8]>> {
        // Most calls write nothing before they read: no key is built then.
        if self.overlay.is_empty() {
            return None;
        }
        self.overlay.get(&(pk.to_string(), sk.to_string())).map(|&i| self.writes[i].value.as_deref())
    }

    fn add_bytes(&mut self, bytes: usize) -> Result<(), String> {
        self.bytes += bytes;
        if self.bytes > EFFECT_BYTES_PER_CALL_MAX {
            return Err(format!("the call's writes and outputs exceed {EFFECT_BYTES_PER_CALL_MAX} bytes"));
        }
        Ok(())
    }

    pub fn write(&mut self, pk: &str, sk: &str, value: Option<Vec<u8>>) -> Result<(), String> {
        limits::check_pk(pk).map_err(|e| e.message)?;
        limits::check_sk(sk).map_err(|e| e.message)?;
        if pk.starts_with('.') {
            return Err(format!("pk {pk:?}: pks starting with '.' are Tern's own (settings, trees)"));
        }
        if let Some(v) = &value {
            limits::check_value_len(v.len()).map_err(|e| e.message)?;
        }
        if self.writes.len() >= WRITES_PER_CALL_MAX {
            return Err(format!("more than {WRITES_PER_CALL_MAX} record writes in one call"));
        }
        self.add_bytes(pk.len() + sk.len() + value.as_ref().map_or(0, Vec::len))?;
        self.overlay.insert((pk.to_string(), sk.to_string()), self.writes.len());
        self.writes.push(Write { pk: pk.to_string(), sk: sk.to_string(), value });
        Ok(())
    }

    /// A write (Some) or delete (None) of the procedure's private state.
    pub fn state_write(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), String> {
        if key.is_empty() || key.len() > STATE_KEY_BYTES_MAX {
            return Err(format!("a state key has 1 to {STATE_KEY_BYTES_MAX} bytes, got {}", key.len()));
        }
        if value.as_ref().is_some_and(|v| v.len() > limits::VALUE_BYTES_MAX) {
            return Err(format!("a state value has at most {} bytes", limits::VALUE_BYTES_MAX));
        }
        if self.state.len() >= WRITES_PER_CALL_MAX {
            return Err(format!("more than {WRITES_PER_CALL_MAX} state writes in one call"));
        }
        self.add_bytes(key.len() + value.as_ref().map_or(0, Vec::len))?;
        self.state.push((key, value));
        Ok(())
    }

    /// What this call wrote to its private state at `key`, as `written` does for records.
    pub fn state_written(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.state.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_deref())
    }

    pub fn emit(&mut self, output: &str, key: Option<Vec<u8>>, value: Vec<u8>) -> Result<(), String> {
        super::definition::check_topic(output).map_err(|e| format!("output name: {e}"))?;
        if key.as_ref().is_some_and(|k| k.len() > OUTPUT_KEY_BYTES_MAX) {
            return Err(format!("an output key has at most {OUTPUT_KEY_BYTES_MAX} bytes"));
        }
        limits::check_value_len(value.len()).map_err(|e| format!("output: {}", e.message))?;
        if self.outputs.len() >= OUTPUTS_PER_CALL_MAX {
            return Err(format!("more than {OUTPUTS_PER_CALL_MAX} outputs in one call"));
        }
        self.add_bytes(output.len() + key.as_ref().map_or(0, Vec::len) + value.len())?;
        self.outputs.push(Output { output: output.to_string(), key, value });
        Ok(())
    }

    pub fn timer(&mut self, change: TimerChange) -> Result<(), String> {
        let name = match &change {
            TimerChange::Set { name, .. } | TimerChange::Cancel { name } => name,
        };
        if name.is_empty() || name.len() > TIMER_NAME_BYTES_MAX || name.contains('\0') {
            return Err(format!("a timer name has 1 to {TIMER_NAME_BYTES_MAX} bytes and no NUL"));
        }
        if self.timers.len() >= TIMERS_PER_CALL_MAX {
            return Err(format!("more than {TIMERS_PER_CALL_MAX} timer changes in one call"));
        }
        self.timers.push(change);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_sees_the_last_write_and_bounds_hold() {
        let mut e = Effects::default();
        assert_eq!(e.written("a", ""), None);
        e.write("a", "", Some(b"1".to_vec())).unwrap();
        e.write("a", "", None).unwrap();
        assert_eq!(e.written("a", ""), Some(None));
        assert!(e.write(".settings", "x", None).unwrap_err().contains("Tern's own"));
        assert!(e.write("", "x", None).is_err());
        assert!(e.write("a", "", Some(vec![b'1'; limits::VALUE_BYTES_MAX + 1])).is_err());
        assert!(e.emit("bad topic", None, b"1".to_vec()).is_err());
        assert!(e.timer(TimerChange::Set { name: "a\0b".into(), at_ms: 1 }).is_err());
        for i in 0..WRITES_PER_CALL_MAX - 2 {
            e.write("k", &i.to_string(), None).unwrap();
        }
        assert!(e.write("k", "one more", None).unwrap_err().contains("record writes"));
    }

    #[test]
    fn outputs_and_timers_are_bounded_per_call() {
        let mut e = Effects::default();
        assert!(e.emit("o", Some(vec![0; OUTPUT_KEY_BYTES_MAX + 1]), b"1".to_vec()).unwrap_err().contains("output key"));
        assert!(e.emit("o", None, vec![b'1'; limits::VALUE_BYTES_MAX + 1]).unwrap_err().starts_with("output:"));
        for _ in 0..OUTPUTS_PER_CALL_MAX {
            e.emit("o", Some(vec![0; OUTPUT_KEY_BYTES_MAX]), b"1".to_vec()).unwrap();
        }
        assert!(e.emit("o", None, b"1".to_vec()).unwrap_err().contains("outputs in one call"));
        assert!(e.timer(TimerChange::Cancel { name: String::new() }).is_err());
        assert!(e.timer(TimerChange::Cancel { name: "t".repeat(TIMER_NAME_BYTES_MAX + 1) }).is_err());
        for _ in 0..TIMERS_PER_CALL_MAX {
            e.timer(TimerChange::Set { name: "t".repeat(TIMER_NAME_BYTES_MAX), at_ms: 1 }).unwrap();
        }
        assert!(e.timer(TimerChange::Cancel { name: "t".into() }).unwrap_err().contains("timer changes"));
    }

    #[test]
    fn private_state_sees_its_last_write_and_every_bound_holds() {
        let mut e = Effects::default();
        assert_eq!(e.state_written(b"s"), None);
        e.state_write(b"s".to_vec(), Some(b"1".to_vec())).unwrap();
        e.state_write(b"s".to_vec(), None).unwrap();
        assert_eq!(e.state_written(b"s"), Some(None));
        assert!(e.state_write(Vec::new(), None).unwrap_err().contains("1 to 1024 bytes, got 0"));
        assert!(e.state_write(vec![b'k'; STATE_KEY_BYTES_MAX + 1], None).unwrap_err().contains("got 1025"));
        assert!(e.state_write(b"k".to_vec(), Some(vec![0; limits::VALUE_BYTES_MAX + 1])).unwrap_err().contains("at most"));
        e.state_write(vec![b'k'; STATE_KEY_BYTES_MAX], Some(vec![0; limits::VALUE_BYTES_MAX])).unwrap();
        for _ in 0..2 {
            e.state_write(b"big".to_vec(), Some(vec![0; limits::VALUE_BYTES_MAX])).unwrap();
        }
        // 3 MiB and a little so far: one more MiB passes the 4 MiB a call may write.
        assert!(e.state_write(b"big".to_vec(), Some(vec![0; limits::VALUE_BYTES_MAX])).unwrap_err().contains("exceed"));
        let mut e = Effects::default();
        for i in 0..WRITES_PER_CALL_MAX {
            e.state_write(i.to_string().into_bytes(), None).unwrap();
        }
        assert!(e.state_write(b"one more".to_vec(), None).unwrap_err().contains("state writes"));
    }
}
