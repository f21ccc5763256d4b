//! `Procedures`: a partition's loaded procedures, run after each applied
//! entry in the apply transaction, their effects applied whole or not at all
//! (a dead letter), and their due timers fired in log time.

use super::definition::Definition;
use super::effects::{Effects, TimerChange, Write};
use super::log_time::EntryTime;
use super::outbox::OutboxMessage;
use super::wasm::{Failed, Input, Returned, StateRead, Vm};
use super::{definition, wasm};
use crate::codec::{Mutation, OpKind};
use crate::log::ForeignRecord;
use crate::metrics;
use crate::store::{ApplyTxn, StoreError};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Versions of each procedure a partition keeps (the newest; older ones are forgotten).
pub const VERSIONS_KEPT: usize = 16;

/// Most timers fired after one entry; the rest fire after the next ones.
pub const TIMERS_FIRED_PER_ENTRY_MAX: usize = 1_000;

/// A procedure as a partition runs it.
pub(super) struct Loaded {
    pub(super) definition: Definition,
    pub(super) version: u64,
    /// None when the code did not load (then every record is a dead letter
    /// with `load_error`: the same on every replica of this build).
    pub(super) vm: Option<Vm>,
    pub(super) load_error: String,
    pub(super) metrics: Meters,
}

/// One procedure's metrics, resolved once at load: a call looks up no labels.
pub(super) struct Meters {
    pub(super) records: prometheus::IntCounter,
    pub(super) outputs: prometheus::IntCounter,
    pub(super) dead_letters: prometheus::IntCounter,
    pub(super) fuel: prometheus::IntCounter,
    pub(super) timers_fired: prometheus::IntCounter,
    pub(super) call_seconds: prometheus::Histogram,
}

impl Meters {
    pub(super) fn of(ns: &str, name: &str) -> Meters {
        let labels = [ns, name];
        Meters {
            records: metrics::PROCEDURE_RECORDS.with_label_values(&labels),
            outputs: metrics::PROCEDURE_OUTPUTS.with_label_values(&labels),
            dead_letters: metrics::PROCEDURE_DEAD_LETTERS.with_label_values(&labels),
            fuel: metrics::PROCEDURE_FUEL.with_label_values(&labels),
            timers_fired: metrics::PROCEDURE_TIMERS_FIRED.with_label_values(&labels),
            call_seconds: metrics::PROCEDURE_CALL_SECONDS.with_label_values(&labels),
        }
    }

    pub(super) fn observe(&self, started: Instant, result: &Result<Returned, Failed>) {
        self.fuel.inc_by(match result {
            Ok(r) => r.fuel_used,
            Err(f) => f.fuel_used,
        });
        self.call_seconds.observe(started.elapsed().as_secs_f64());
    }
}

/// The procedures of one partition, kept in step with its store by the
/// partition's apply loop (their only user).
pub struct Procedures {
    pub(super) namespace: Arc<str>,
    pub(super) partition: u32,
    pub(super) loaded: BTreeMap<String, Loaded>,
    /// The store's `applied_next` when `loaded` last matched it; a store
    /// that moved otherwise (a restore) is read again.
    pub(super) in_step_at: Option<u64>,
    /// What the store says, kept here so a record costs no store read for
    /// it (pure caches: cleared whenever `loaded` is read again, `sync`).
    pub(super) cache: Cache,
    /// The record writes applied for the current entry, for its watchers
    /// (`take_written`): bounded by the calls' bounds (`effects.rs`).
    pub(super) written: Vec<Write>,
}

/// Caches of store reads the apply path makes per record.
#[derive(Default)]
pub(super) struct Cache {
    /// The partition's log time (`\0\0#c`).
    pub(super) log_time_ms: Option<u64>,
    /// No timer is due before this log time: the earliest timer when it was
    /// last looked up, lowered by every timer set since (a cancel only makes
    /// the earliest later, so it stays a lower bound). None: unknown.
    pub(super) timers_not_before: Option<u64>,
    /// The loaded procedures' names, in order (no list made per record).
    pub(super) order: Vec<String>,
}

/// Reads through the apply transaction (a call's view of state).
pub(super) struct TxnRead<'a, 't, 'x> {
    pub(super) tx: &'x ApplyTxn<'a, 't>,
    pub(super) procedure: &'x str,
}

impl StateRead for TxnRead<'_, '_, '_> {
    fn get(&mut self, pk: &str, sk: &str) -> Result<Option<Vec<u8>>, String> {
        self.tx.value_of(pk, sk).map_err(|e| e.to_string())
    }

    fn state_get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.tx.procedure_state(self.procedure, key).map_err(|e| e.to_string())
    }
}

impl Procedures {
    pub fn new(namespace: &str, partition: u32) -> Procedures {
        Procedures { namespace: namespace.into(), partition, loaded: BTreeMap::new(), in_step_at: None, cache: Cache::default(), written: Vec::new() }
    }

    /// The record writes the procedures applied since the last call, in
    /// order (the apply loop takes them after each entry, for watchers).
    pub fn take_written(&mut self) -> Vec<Write> {
        std::mem::take(&mut self.written)
    }

    /// Brings the loaded procedures in step with the store, if it moved
    /// since the last batch without them (first use, a restore).
    pub fn sync(&mut self, tx: &ApplyTxn) -> Result<(), StoreError> {
        // Writes of a batch that failed were never applied.
        self.written.clear();
        if self.in_step_at == Some(tx.state().applied_next) {
            return Ok(());
        }
        self.loaded.clear();
        self.cache = Cache::default();
        for (name, bytes) in tx.procedures()? {
            match Definition::parse(&bytes) {
                Ok(definition) if !definition.removed => {
                    let version = definition.version.unwrap_or(0);
                    let loaded = self.load(&name, definition, version);
                    self.loaded.insert(name, loaded);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(ns = %self.namespace, partition = self.partition, procedure = %name, error = %e, "a stored procedure definition does not parse")
                }
            }
        }
        self.in_step_at = Some(tx.state().applied_next);
        self.cache.order = self.loaded.keys().cloned().collect();
        Ok(())
    }

    /// The store did not take the last batch (its transaction failed): read
    /// everything again before the next one.
    pub fn out_of_step(&mut self) {
        self.in_step_at = None;
    }

    /// Moves the log time to `time_ms` if later; returns it.
    pub(super) fn advance_log_time(&mut self, tx: &mut ApplyTxn, time_ms: u64) -> Result<u64, StoreError> {
        let now = match self.cache.log_time_ms {
            Some(now) => now,
            None => tx.log_time_ms()?,
        };
        let now = if time_ms > now { tx.advance_log_time(time_ms)? } else { now };
        debug_assert_eq!(Some(now), tx.log_time_ms().ok(), "the cached log time is the store's");
        self.cache.log_time_ms = Some(now);
        Ok(now)
    }

    /// Notes that the store is at `applied_next` with these procedures.
    pub fn in_step(&mut self, applied_next: u64) {
        self.in_step_at = Some(applied_next);
    }

    /// Whether any procedure runs on this partition.
    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty()
    }

    pub(super) fn load(&self, name: &str, definition: Definition, version: u64) -> Loaded {
        let vm = Vm::load(&definition, self.partition);
        self.loaded_with(name, definition, version, vm)
    }

    /// A procedure as run, with the outcome of loading its module.
    pub(super) fn loaded_with(&self, name: &str, definition: Definition, version: u64, vm: Result<Vm, String>) -> Loaded {
        let (vm, load_error) = match vm {
            Ok(vm) => (Some(vm), String::new()),
            Err(e) => (None, format!("the procedure did not load: {e}")),
        };
        Loaded { definition, version, vm, load_error, metrics: Meters::of(&self.namespace, name) }
    }

    /// Applies a deploy entry at `offset` for procedure `name`. Ok(Err) is a
    /// definition that is refused (the entry is skipped, alike everywhere).
    pub fn deploy(&mut self, tx: &mut ApplyTxn, offset: u64, time: EntryTime, name: &str, bytes: &[u8]) -> Result<Result<(), String>, StoreError> {
        if let Err(e) = definition::check_name(name) {
            return Ok(Err(e));
        }
        let mut definition = match Definition::parse(bytes) {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        // A foreign or old entry may name another namespace's topics: refused alike everywhere.
        if let Err(e) = definition.check_confined(&self.namespace) {
            return Ok(Err(e));
        }
        // Partition 0's entry is the version, whatever it carries (a version
        // beyond what Tern assigned would pin the procedure for good); the
        // others carry it.
        let version = match self.partition {
            0 => offset,
            _ => definition.version.unwrap_or(offset),
        };
        definition.version = Some(version);
        let active = tx.procedure(name)?.and_then(|b| Definition::parse(&b).ok()).and_then(|d| d.version);
        if active.is_some_and(|a| a >= version) {
            tracing::info!(ns = %self.namespace, partition = self.partition, procedure = name, version, ?active, "a deployment older than the active one is not applied");
            return Ok(Ok(()));
        }
        // Checked here too (the API did): a definition that does not load is
        // refused. The instance that loaded is the one that runs.
        let vm = match definition.removed {
            true => None,
            false => match Vm::load(&definition, self.partition) {
                Ok(vm) => Some(vm),
                Err(e) => return Ok(Err(format!("the code does not load: {e}"))),
            },
        };
        tx.deploy_procedure(name, version, &definition.to_json(), VERSIONS_KEPT)?;
        self.advance_log_time(tx, time.moves_to_ms)?;
        match vm {
            None => {
                self.loaded.remove(name);
            }
            Some(vm) => {
                let loaded = self.loaded_with(name, definition, version, Ok(vm));
                self.loaded.insert(name.to_string(), loaded);
            }
        }
        self.cache.order = self.loaded.keys().cloned().collect();
        tracing::info!(ns = %self.namespace, partition = self.partition, procedure = name, version, offset, "procedure deployed");
        Ok(Ok(()))
    }

    /// Runs every procedure on the ops of `mutation`, applied at `offset`,
    /// then fires the timers due at the new log time.
    pub fn on_applied(&mut self, tx: &mut ApplyTxn, offset: u64, time: EntryTime, mutation: &Mutation) -> Result<(), StoreError> {
        if self.loaded.is_empty() {
            return Ok(());
        }
        let now_ms = self.advance_log_time(tx, time.moves_to_ms)?;
        let mut index = 0u32;
        let names = std::mem::take(&mut self.cache.order);
        for name in &names {
            for op in &mutation.ops {
                let (value, kind) = match &op.kind {
                    OpKind::Put(v) => (Some(&v[..]), wasm::OP_PUT),
                    OpKind::Delete => (None, wasm::OP_DELETE),
                    OpKind::Tree(t) if t.merge => (Some(&t.value[..]), wasm::OP_TREE_MERGE),
                    OpKind::Tree(t) => (Some(&t.value[..]), wasm::OP_TREE_SET),
                    OpKind::Procedure(_) => continue,
                };
                // The entry's own time (0: its writer did not say); `now()` is the log time.
                let input = Input { key: Some(op.pk.as_bytes()), sk: Some(&op.sk), value, op: kind, timestamp_ms: time.own_ms, offset, headers: &[] };
                if let Err(e) = self.run_record(tx, name, &input, now_ms, &mut index) {
                    self.cache.order = names;
                    return Err(e);
                }
            }
        }
        self.cache.order = names;
        self.fire_timers(tx, offset, now_ms, &mut index)
    }

    /// Runs every procedure on a source topic's record at `offset` (not a
    /// Tern entry: `OP_RECORD`, its key, value, headers and timestamp), then
    /// fires the timers due at the new log time (the record's timestamp as
    /// bounded by the log's stamp, `time`, if later than the log time).
    pub fn on_foreign(&mut self, tx: &mut ApplyTxn, offset: u64, value: &[u8], record: &ForeignRecord, time: EntryTime) -> Result<(), StoreError> {
        if self.loaded.is_empty() {
            return Ok(());
        }
        debug_assert_eq!(time.own_ms, record.timestamp_ms, "a source record's own time is its timestamp");
        let now_ms = self.advance_log_time(tx, time.moves_to_ms)?;
        let input = Input {
            key: record.key.as_deref(),
            sk: None,
            value: Some(value),
            op: wasm::OP_RECORD,
            timestamp_ms: record.timestamp_ms,
            offset,
            headers: &record.headers,
        };
        let mut index = 0u32;
        let names = std::mem::take(&mut self.cache.order);
        let ran = names.iter().try_for_each(|name| self.run_record(tx, name, &input, now_ms, &mut index));
        self.cache.order = names;
        ran?;
        self.fire_timers(tx, offset, now_ms, &mut index)
    }

    /// A tick at `offset`: the log time moves to `time_ms` (never back) and
    /// the timers due then fire.
    pub fn on_tick(&mut self, tx: &mut ApplyTxn, offset: u64, time: EntryTime) -> Result<(), StoreError> {
        if self.loaded.is_empty() {
            return Ok(());
        }
        let now_ms = self.advance_log_time(tx, time.moves_to_ms)?;
        self.fire_timers(tx, offset, now_ms, &mut 0)
    }

    pub(super) fn run_record(&mut self, tx: &mut ApplyTxn, name: &str, input: &Input, now_ms: u64, index: &mut u32) -> Result<(), StoreError> {
        let ns = self.namespace.clone();
        let loaded = self.loaded.get_mut(name).expect("running a loaded procedure");
        let started = Instant::now();
        let result = match loaded.vm.as_ref() {
            Some(vm) => vm.on_record(input, now_ms, &mut TxnRead { tx, procedure: name }).map_err(unavailable)?,
            None => Err(Failed { reason: loaded.load_error.clone(), fuel_used: 0 }),
        };
        loaded.metrics.observe(started, &result);
        loaded.metrics.records.inc();
        match result {
            Ok(returned) => {
                apply_effects(tx, &ns, name, loaded, input.offset, returned.effects, index, &mut self.cache.timers_not_before, &mut self.written)
            }
            Err(failed) => {
                let dead = dead_letter(&ns, self.partition, name, loaded, input, &failed.reason);
                put_outbox(tx, input.offset, index, &dead)?;
                loaded.metrics.dead_letters.inc();
                Ok(())
            }
        }
    }

    pub(super) fn fire_timers(&mut self, tx: &mut ApplyTxn, offset: u64, now_ms: u64, index: &mut u32) -> Result<(), StoreError> {
        let ns = self.namespace.clone();
        for _ in 0..TIMERS_FIRED_PER_ENTRY_MAX {
            if self.cache.timers_not_before.is_some_and(|at| at > now_ms) {
                return Ok(());
            }
            let Some(due) = tx.next_due_timer(now_ms)? else {
                self.cache.timers_not_before = Some(tx.earliest_timer_ms()?.unwrap_or(u64::MAX));
                return Ok(());
            };
            tx.cancel_timer(&due.procedure, &due.timer)?;
            // A timer of a procedure removed since is dropped.
            let Some(loaded) = self.loaded.get_mut(&due.procedure) else { continue };
            let started = Instant::now();
            let result = match loaded.vm.as_ref() {
                Some(vm) => vm.on_timer(&due.timer, due.at_ms, now_ms, &mut TxnRead { tx, procedure: &due.procedure }).map_err(unavailable)?,
                None => Err(Failed { reason: loaded.load_error.clone(), fuel_used: 0 }),
            };
            loaded.metrics.observe(started, &result);
            loaded.metrics.timers_fired.inc();
            match result {
                Ok(returned) => apply_effects(
                    tx,
                    &ns,
                    &due.procedure,
                    loaded,
                    offset,
                    returned.effects,
                    index,
                    &mut self.cache.timers_not_before,
                    &mut self.written,
                )?,
                Err(failed) => {
                    let input = Input { key: None, sk: Some(&due.timer), value: None, op: -1, timestamp_ms: due.at_ms, offset, headers: &[] };
                    let dead = dead_letter(&ns, self.partition, &due.procedure, loaded, &input, &failed.reason);
                    put_outbox(tx, offset, index, &dead)?;
                    loaded.metrics.dead_letters.inc();
                }
            }
        }
        Ok(())
    }
}

/// A call the host could not run (no instance could be made): the batch
/// fails like a store that cannot write, and nothing of it is applied;
/// never a dead letter, which would differ from a replica that ran it.
fn unavailable(e: wasm::Unavailable) -> StoreError {
    StoreError { path: "procedure runtime".into(), message: e.0, unavailable: false, damaged: false }
}

/// Applies a returned call's effects, in the order asked: record writes
/// (then kept in `written` for watchers), state writes, timers (lowering
/// `timers_not_before` to any set earlier), outputs.
#[allow(clippy::too_many_arguments)]
pub(super) fn apply_effects(
    tx: &mut ApplyTxn,
    ns: &str,
    name: &str,
    loaded: &Loaded,
    offset: u64,
    effects: Effects,
    index: &mut u32,
    timers_not_before: &mut Option<u64>,
    written: &mut Vec<Write>,
) -> Result<(), StoreError> {
    let definition = &loaded.definition;
    for write in &effects.writes {
        match &write.value {
            Some(value) => tx.put(&write.pk, &write.sk, offset, value)?,
            None => tx.delete(&write.pk, &write.sk)?,
        }
    }
    written.extend(effects.writes);
    for (key, value) in effects.state {
        tx.set_procedure_state(name, &key, value.as_deref())?;
    }
    for change in effects.timers {
        match change {
            TimerChange::Set { name: timer, at_ms } => {
                tx.set_timer(name, &timer, at_ms)?;
                *timers_not_before = timers_not_before.map(|earliest| earliest.min(at_ms));
            }
            TimerChange::Cancel { name: timer } => {
                tx.cancel_timer(name, &timer)?;
            }
        }
    }
    let outputs = effects.outputs.len() as u64;
    for output in effects.outputs {
        let message =
            OutboxMessage { procedure: name.to_string(), topic: definition.topic_of(ns, &output.output), key: output.key, value: output.value };
        put_outbox(tx, offset, index, &message)?;
    }
    loaded.metrics.outputs.inc_by(outputs);
    Ok(())
}

pub(super) fn put_outbox(tx: &mut ApplyTxn, offset: u64, index: &mut u32, message: &OutboxMessage) -> Result<(), StoreError> {
    tx.put_outbox(offset, *index, &message.encode())?;
    *index += 1;
    Ok(())
}

/// The most of an input's value a dead letter carries (bytes of the input).
pub const DEAD_LETTER_VALUE_BYTES_MAX: usize = 1 << 20;
/// The most of an input's key a dead letter carries, in its JSON and as its
/// message key (bytes of the input); of its sort key and of the reason, in its JSON.
pub const DEAD_LETTER_KEY_BYTES_MAX: usize = 16 << 10;
/// The largest dead letter: its message key and value together. With the
/// bounds above, JSON's escapes (at most 6 bytes of text a byte) and the
/// other fields, one never passes it; it is under the largest message the
/// Kafka publisher sends (asserted below), so a dead letter is
/// always published, never held with every output behind it.
pub const DEAD_LETTER_BYTES_MAX: usize = 7 << 20;
/// The arithmetic behind it: the value, key, sort key and reason as JSON
/// text (at most 6 bytes a byte: `\u00XX`), the key again as the message
/// key, and 4 KiB for the names and numbers (a namespace and a procedure
/// name are short words).
const _: () = assert!(6 * (DEAD_LETTER_VALUE_BYTES_MAX + 3 * DEAD_LETTER_KEY_BYTES_MAX) + DEAD_LETTER_KEY_BYTES_MAX + 4096 <= DEAD_LETTER_BYTES_MAX);
/// And it fits the largest message the Kafka publisher sends (a log entry's
/// bound and 64 KiB of framing), with room for the `tern.id` header.
const _: () = assert!(DEAD_LETTER_BYTES_MAX + (64 << 10) <= crate::log::kafka::ENTRY_BYTES_MAX);

/// The dead letter of an input a procedure failed on: JSON with the reason
/// and the input, keyed like the input. A source topic can carry records
/// far larger than Tern's own writes: past the bounds above, the key and
/// value are cut (at a byte, then read as UTF-8 lossily, the same on every
/// replica) and the JSON says so (`value_bytes` and `value_truncated`,
/// `key_bytes` and `key_truncated`, only when cut: every other dead letter
/// is as before).
pub(super) fn dead_letter(ns: &str, partition: u32, name: &str, loaded: &Loaded, input: &Input, reason: &str) -> OutboxMessage {
    let key = input.key.map(|k| &k[..k.len().min(DEAD_LETTER_KEY_BYTES_MAX)]);
    let text = |b: &[u8], max: usize| String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned();
    let mut value = serde_json::json!({
        "procedure": name,
        "version": loaded.version,
        "reason": text(reason.as_bytes(), DEAD_LETTER_KEY_BYTES_MAX),
        "namespace": ns,
        "partition": partition,
        "offset": input.offset,
        "op": input.op_name(),
        "key": key.map(|k| text(k, DEAD_LETTER_KEY_BYTES_MAX)),
        "sk": input.sk.map(|sk| text(sk.as_bytes(), DEAD_LETTER_KEY_BYTES_MAX)),
        "value": input.value.map(|v| text(v, DEAD_LETTER_VALUE_BYTES_MAX)),
        "timestamp_ms": input.timestamp_ms,
    });
    if let Some(whole) = input.key.filter(|k| k.len() > DEAD_LETTER_KEY_BYTES_MAX) {
        value["key_bytes"] = whole.len().into();
        value["key_truncated"] = true.into();
    }
    if let Some(whole) = input.value.filter(|v| v.len() > DEAD_LETTER_VALUE_BYTES_MAX) {
        value["value_bytes"] = whole.len().into();
        value["value_truncated"] = true.into();
    }
    let message = OutboxMessage {
        procedure: name.to_string(),
        topic: loaded.definition.dead_letter_topic(ns, name),
        key: key.map(<[u8]>::to_vec),
        value: value.to_string().into_bytes(),
    };
    // Checked in tests only: the bound holds by the arithmetic above, and a
    // panic here would refuse the partition on every replica alike.
    let bytes = message.value.len() + message.key.as_ref().map_or(0, Vec::len);
    debug_assert!(bytes <= DEAD_LETTER_BYTES_MAX, "a dead letter of {bytes} bytes, over its bound {DEAD_LETTER_BYTES_MAX}");
    message
}

// Tests: `apply/procedure_tests.rs` (through the apply engine's entry point).
