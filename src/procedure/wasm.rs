//! One procedure's WebAssembly instance (wasmtime): loading its module into
//! a sandbox, and calling `on_record` and `on_timer` with fuel.
//!
//! WebAssembly was chosen by measurement (ARCHITECTURE.md, "Procedures";
//! `bench/procedure-runtimes`): aggdemo's per-record decision took 0.92 µs
//! here, 17 µs in QuickJS and 31 µs in Luau. Its bounds are deterministic
//! by construction, which is what lets every replica compute the same state
//! and outputs from the same log:
//! - nothing but Tern's imports (`tern.*`, and `env.abort` for
//!   AssemblyScript): no clock, no randomness, no I/O, no WASI. Time is the
//!   log's (`now()`, the record's timestamp);
//! - fuel: wasmtime counts instructions; a call past `fuel_per_record` traps,
//!   after the same instruction on every replica;
//! - memory: linear memory grows only by the module's own `memory.grow`,
//!   bounded by `memory_bytes` (a grow past it traps): the same everywhere;
//! - floats: NaNs canonicalized, relaxed SIMD off; no threads (wasmtime is
//!   built without them).
//!
//! Rule for procedure authors (docs/procedures.md): keep no state in the
//! module's memory or globals from one call to the next. A replica that
//! restarts instantiates the module afresh; only records and state survive.
//!
//! The guest ABI (`examples/procedures/tern.ts` wraps it for AssemblyScript):
//! exports `memory`, `input(capacity: i32) -> i32` (a buffer of at least
//! `capacity` bytes the host writes the input into), `on_record(key_len,
//! sk_len, value_len: i32, op: i32, timestamp_ms: i64, offset: i64)` (key,
//! sk, value consecutive in that buffer; value_len -1: none), and
//! optionally `on_timer(name_len: i32, at_ms: i64)` (the name in the buffer).
//! Imports, module `tern` (pointers and lengths into guest memory; every
//! error traps with its reason, so the call fails whole):
//! `get(pk, pk_len, sk, sk_len, out, out_cap) -> i32` (the value's length,
//! -1 absent; copied only if it fits), `put(pk, pk_len, sk, sk_len, v,
//! v_len)` (JSON text), `delete(pk, pk_len, sk, sk_len)`, `state_get(k,
//! k_len, out, out_cap) -> i32`, `state_put(k, k_len, v, v_len)`,
//! `state_delete(k, k_len)` (bytes private to the procedure),
//! `emit(output, output_len, v, v_len, key, key_len)` (key_len -1: none),
//! `timer(name, name_len, at_ms: i64)`, `cancel(name, name_len)`,
//! `now() -> i64`, `params(out, out_cap) -> i32`, `partition() -> i32`,
//! `header(name, name_len, out, out_cap) -> i32` (the input record's first
//! header of that name: its value's length, -1 absent; source topics only).

use std::collections::HashMap;
use std::sync::LazyLock;

use parking_lot::Mutex;
use wasmtime::{Caller, Config, Engine, Extern, Linker, Memory, Module, Store, StoreLimits, StoreLimitsBuilder, Trap, TypedFunc};

use super::definition::Definition;
use super::effects::{Effects, TimerChange};

/// Fuel for instantiation (a module's start function and data).
const INSTANTIATE_FUEL: u64 = 10_000_000;
/// Compiled modules kept, by content hash (compiling takes milliseconds;
/// every partition of a namespace loads the same module).
const MODULES_CACHED_MAX: usize = 64;
/// The wasm stack's bound: deep recursion traps instead of overflowing.
const WASM_STACK_BYTES_MAX: usize = 512 * 1024;
/// Input kinds as the guest sees them (`on_record`'s `op`).
pub const OP_PUT: i32 = 0;
pub const OP_DELETE: i32 = 1;
pub const OP_TREE_SET: i32 = 2;
pub const OP_TREE_MERGE: i32 = 3;
pub const OP_RECORD: i32 = 4;

/// Reads state as of the call (the apply transaction): a record's JSON
/// text, or a procedure's private state bytes.
pub trait StateRead {
    fn get(&mut self, pk: &str, sk: &str) -> Result<Option<Vec<u8>>, String>;
    fn state_get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
}

/// One input record, as the procedure sees it.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The record's key: the pk for a namespace's own writes.
    pub key: Option<&'a [u8]>,
    /// The sort key, for a namespace's own writes.
    pub sk: Option<&'a str>,
    /// The value's bytes: JSON text for own writes; None for a delete.
    pub value: Option<&'a [u8]>,
    pub op: i32,
    pub timestamp_ms: u64,
    pub offset: u64,
    /// A source topic record's headers (empty for a namespace's own writes).
    pub headers: &'a [(String, bytes::Bytes)],
}

impl Input<'_> {
    /// The op's name, for dead letters.
    pub fn op_name(&self) -> &'static str {
        match self.op {
            OP_PUT => "put",
            OP_DELETE => "delete",
            OP_TREE_SET => "tree_set",
            OP_TREE_MERGE => "tree_merge",
            OP_RECORD => "record",
            _ => "timer",
        }
    }
}

/// A call that did not return: why (the dead letter's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub reason: String,
    pub fuel_used: u64,
}

/// A call that returned: what it asked for, and the fuel it used.
#[derive(Debug)]
pub struct Returned {
    pub effects: Effects,
    pub fuel_used: u64,
}

/// The store's data: the bounds, and the current call.
struct Host {
    limits: StoreLimits,
    params: Vec<u8>,
    partition: u32,
    call: Option<Call>,
    /// The instance's exported memory, found once after instantiation
    /// (an import then needs no lookup by name).
    memory: Option<Memory>,
}

/// What the imports act on during one call.
struct Call {
    effects: Effects,
    /// The apply transaction's reader for this call. Its lifetime is the
    /// call's: set just before the instance is entered and taken just
    /// after, so an import only ever dereferences it inside the call.
    read: ReadPtr,
    now_ms: u64,
    /// The input record's headers, lifetime erased like `read` (the same rule).
    headers: HeadersPtr,
}

/// `*const [(String, Bytes)]` with its lifetime erased; see `Call::headers`.
struct HeadersPtr(*const [(String, bytes::Bytes)]);
// SAFETY: as `ReadPtr`: read only during the call that set it, on its thread.
unsafe impl Send for HeadersPtr {}

/// `*mut dyn StateRead` with its lifetime erased; see `Call::read`.
struct ReadPtr(*mut (dyn StateRead + 'static));
// SAFETY: dereferenced only during the call that set it, on the thread
// running that call (an instance is never shared while a call runs).
unsafe impl Send for ReadPtr {}

pub struct Vm {
    store: Store<Host>,
    memory: Memory,
    input: TypedFunc<i32, i32>,
    on_record: TypedFunc<(i32, i32, i32, i32, i64, i64), ()>,
    on_timer: Option<TypedFunc<(i32, i64), ()>>,
    fuel_per_record: u64,
}

/// One engine for every procedure: the settings that make runs deterministic.
static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
    let mut config = Config::new();
    config.consume_fuel(true);
    config.cranelift_nan_canonicalization(true);
    config.wasm_relaxed_simd(false);
    config.relaxed_simd_deterministic(true);
    config.max_wasm_stack(WASM_STACK_BYTES_MAX);
    Engine::new(&config).expect("the procedure engine's settings are valid")
});

static MODULES: LazyLock<Mutex<HashMap<blake3::Hash, Module>>> = LazyLock::new(Default::default);

/// The compiled module of `bytes` (cached by content).
fn module_of(bytes: &[u8]) -> Result<Module, String> {
    let hash = blake3::hash(bytes);
    if let Some(module) = MODULES.lock().get(&hash) {
        return Ok(module.clone());
    }
    let module = Module::new(&ENGINE, bytes).map_err(|e| format!("not a valid WebAssembly module: {}", reason_of(&e)))?;
    let mut modules = MODULES.lock();
    if modules.len() >= MODULES_CACHED_MAX {
        modules.clear();
    }
    modules.insert(hash, module.clone());
    Ok(module)
}

/// Checks that `bytes` is a module Tern can run: valid, importing only
/// Tern's functions, exporting what the ABI needs.
pub fn check_module(bytes: &[u8]) -> Result<(), String> {
    let module = module_of(bytes)?;
    for import in module.imports() {
        let known = matches!(import.module(), "tern") || (import.module() == "env" && import.name() == "abort");
        if !known {
            return Err(format!("the module imports {}.{}, which Tern does not provide (no WASI, no I/O)", import.module(), import.name()));
        }
    }
    for export in ["memory", "input", "on_record"] {
        if module.get_export(export).is_none() {
            return Err(format!("the module does not export {export:?}"));
        }
    }
    Ok(())
}

fn fail(message: impl Into<String>) -> wasmtime::Error {
    wasmtime::Error::msg(message.into())
}

fn memory_of(caller: &mut Caller<'_, Host>) -> wasmtime::Result<Memory> {
    if let Some(memory) = caller.data().memory {
        return Ok(memory);
    }
    // During instantiation (a start function): looked up by name.
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => Err(fail("the module exports no memory")),
    }
}

/// Guest bytes at `[ptr, ptr + len)`, or a trap naming what was out of bounds.
fn slice(data: &[u8], ptr: i32, len: i32, what: &str) -> wasmtime::Result<Vec<u8>> {
    let (ptr, len) = (ptr as u32 as usize, len as u32 as usize);
    data.get(ptr..ptr.saturating_add(len)).map(<[u8]>::to_vec).ok_or_else(|| fail(format!("{what} is outside the module's memory")))
}

fn text(data: &[u8], ptr: i32, len: i32, what: &str) -> wasmtime::Result<String> {
    String::from_utf8(slice(data, ptr, len, what)?).map_err(|_| fail(format!("{what} is not UTF-8")))
}

/// Copies `bytes` to guest `[out, out + cap)` if they fit; returns their length.
fn copy_out(data: &mut [u8], out: i32, cap: i32, bytes: &[u8]) -> wasmtime::Result<i32> {
    if bytes.len() <= cap as u32 as usize {
        let out = out as u32 as usize;
        data.get_mut(out..out + bytes.len()).ok_or_else(|| fail("an output buffer is outside the module's memory"))?.copy_from_slice(bytes);
    }
    Ok(i32::try_from(bytes.len()).expect("values are bounded by 1 MiB"))
}

fn call_of<'a>(host: &'a mut Host, import: &str) -> wasmtime::Result<&'a mut Call> {
    host.call.as_mut().ok_or_else(|| fail(format!("tern.{import} is only for on_record and on_timer")))
}

fn linker() -> Result<Linker<Host>, wasmtime::Error> {
    let mut linker: Linker<Host> = Linker::new(&ENGINE);
    linker.func_wrap(
        "tern",
        "get",
        |mut caller: Caller<'_, Host>, pk: i32, pk_len: i32, sk: i32, sk_len: i32, out: i32, cap: i32| -> wasmtime::Result<i32> {
            let memory = memory_of(&mut caller)?;
            let (data, host) = memory.data_and_store_mut(&mut caller);
            let (pk, sk) = (text(data, pk, pk_len, "pk")?, text(data, sk, sk_len, "sk")?);
            let call = call_of(host, "get")?;
            let value = match call.effects.written(&pk, &sk) {
                Some(written) => written.map(<[u8]>::to_vec),
                // SAFETY: see `Call::read`: set for this call, which is running.
                None => unsafe { &mut *call.read.0 }.get(&pk, &sk).map_err(fail)?,
            };
            match value {
                Some(v) => copy_out(data, out, cap, &v),
                None => Ok(-1),
            }
        },
    )?;
    linker.func_wrap(
        "tern",
        "put",
        |mut caller: Caller<'_, Host>, pk: i32, pk_len: i32, sk: i32, sk_len: i32, v: i32, v_len: i32| -> wasmtime::Result<()> {
            let memory = memory_of(&mut caller)?;
            let (data, host) = memory.data_and_store_mut(&mut caller);
            let (pk, sk, value) = (text(data, pk, pk_len, "pk")?, text(data, sk, sk_len, "sk")?, slice(data, v, v_len, "value")?);
            if !crate::codec::is_json_text(&value) {
                return Err(fail(format!("tern.put({pk:?}, {sk:?}): the value is not JSON text")));
            }
            call_of(host, "put")?.effects.write(&pk, &sk, Some(value)).map_err(fail)
        },
    )?;
    linker.func_wrap("tern", "delete", |mut caller: Caller<'_, Host>, pk: i32, pk_len: i32, sk: i32, sk_len: i32| -> wasmtime::Result<()> {
        let memory = memory_of(&mut caller)?;
        let (data, host) = memory.data_and_store_mut(&mut caller);
        let (pk, sk) = (text(data, pk, pk_len, "pk")?, text(data, sk, sk_len, "sk")?);
        call_of(host, "delete")?.effects.write(&pk, &sk, None).map_err(fail)
    })?;
    linker.func_wrap("tern", "state_get", |mut caller: Caller<'_, Host>, k: i32, k_len: i32, out: i32, cap: i32| -> wasmtime::Result<i32> {
        let memory = memory_of(&mut caller)?;
        let (data, host) = memory.data_and_store_mut(&mut caller);
        let key = slice(data, k, k_len, "state key")?;
        let call = call_of(host, "state_get")?;
        let value = match call.effects.state_written(&key) {
            Some(written) => written.map(<[u8]>::to_vec),
            // SAFETY: see `Call::read`.
            None => unsafe { &mut *call.read.0 }.state_get(&key).map_err(fail)?,
        };
        match value {
            Some(v) => copy_out(data, out, cap, &v),
            None => Ok(-1),
        }
    })?;
    linker.func_wrap("tern", "state_put", |mut caller: Caller<'_, Host>, k: i32, k_len: i32, v: i32, v_len: i32| -> wasmtime::Result<()> {
        let memory = memory_of(&mut caller)?;
        let (data, host) = memory.data_and_store_mut(&mut caller);
        let (key, value) = (slice(data, k, k_len, "state key")?, slice(data, v, v_len, "state value")?);
        call_of(host, "state_put")?.effects.state_write(key, Some(value)).map_err(fail)
    })?;
    linker.func_wrap("tern", "state_delete", |mut caller: Caller<'_, Host>, k: i32, k_len: i32| -> wasmtime::Result<()> {
        let memory = memory_of(&mut caller)?;
        let (data, host) = memory.data_and_store_mut(&mut caller);
        let key = slice(data, k, k_len, "state key")?;
        call_of(host, "state_delete")?.effects.state_write(key, None).map_err(fail)
    })?;
    linker.func_wrap(
        "tern",
        "emit",
        |mut caller: Caller<'_, Host>, o: i32, o_len: i32, v: i32, v_len: i32, k: i32, k_len: i32| -> wasmtime::Result<()> {
            let memory = memory_of(&mut caller)?;
            let (data, host) = memory.data_and_store_mut(&mut caller);
            let output = text(data, o, o_len, "output name")?;
            let value = slice(data, v, v_len, "output value")?;
            let key = if k_len < 0 { None } else { Some(slice(data, k, k_len, "output key")?) };
            call_of(host, "emit")?.effects.emit(&output, key, value).map_err(fail)
        },
    )?;
    linker.func_wrap("tern", "timer", |mut caller: Caller<'_, Host>, n: i32, n_len: i32, at_ms: i64| -> wasmtime::Result<()> {
        let memory = memory_of(&mut caller)?;
        let (data, host) = memory.data_and_store_mut(&mut caller);
        let name = text(data, n, n_len, "timer name")?;
        let at_ms = u64::try_from(at_ms).map_err(|_| fail(format!("a timer's time is ms since the epoch, got {at_ms}")))?;
        call_of(host, "timer")?.effects.timer(TimerChange::Set { name, at_ms }).map_err(fail)
    })?;
    linker.func_wrap("tern", "cancel", |mut caller: Caller<'_, Host>, n: i32, n_len: i32| -> wasmtime::Result<()> {
        let memory = memory_of(&mut caller)?;
        let (data, host) = memory.data_and_store_mut(&mut caller);
        let name = text(data, n, n_len, "timer name")?;
        call_of(host, "cancel")?.effects.timer(TimerChange::Cancel { name }).map_err(fail)
    })?;
    linker
        .func_wrap("tern", "now", |mut caller: Caller<'_, Host>| -> wasmtime::Result<i64> { Ok(call_of(caller.data_mut(), "now")?.now_ms as i64) })?;
    linker.func_wrap("tern", "params", |mut caller: Caller<'_, Host>, out: i32, cap: i32| -> wasmtime::Result<i32> {
        let memory = memory_of(&mut caller)?;
        let (data, host) = memory.data_and_store_mut(&mut caller);
        copy_out(data, out, cap, &host.params)
    })?;
    linker.func_wrap("tern", "header", |mut caller: Caller<'_, Host>, n: i32, n_len: i32, out: i32, cap: i32| -> wasmtime::Result<i32> {
        let memory = memory_of(&mut caller)?;
        let (data, host) = memory.data_and_store_mut(&mut caller);
        let name = slice(data, n, n_len, "header name")?;
        let call = call_of(host, "header")?;
        // SAFETY: see `Call::headers`: set for this call, which is running.
        let headers = unsafe { &*call.headers.0 };
        match headers.iter().find(|(key, _)| key.as_bytes() == name.as_slice()) {
            Some((_, value)) => copy_out(data, out, cap, value),
            None => Ok(-1),
        }
    })?;
    linker.func_wrap("tern", "partition", |caller: Caller<'_, Host>| -> i32 { caller.data().partition as i32 })?;
    // AssemblyScript's abort(message, file, line, column): the message is a
    // string of UTF-16 code units whose byte length sits just before it.
    linker.func_wrap("env", "abort", |mut caller: Caller<'_, Host>, message: i32, file: i32, line: i32, column: i32| -> wasmtime::Result<()> {
        let memory = memory_of(&mut caller)?;
        let data = memory.data(&caller);
        let string = |ptr: i32| -> String {
            let ptr = ptr as u32 as usize;
            let Some(len) = ptr.checked_sub(4).and_then(|at| data.get(at..ptr)).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize) else {
                return String::new();
            };
            let units: Vec<u16> =
                data.get(ptr..ptr + len.min(2048)).unwrap_or_default().chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
            String::from_utf16_lossy(&units)
        };
        let file = string(file);
        let place = if file.is_empty() { String::new() } else { format!(" ({file}:{line}:{column})") };
        Err(fail(format!("aborted: {}{place}", string(message))))
    })?;
    Ok(linker)
}

static LINKER: LazyLock<Linker<Host>> = LazyLock::new(|| linker().expect("Tern's imports link"));

impl Vm {
    /// Instantiates `definition`'s module with its bounds.
    pub fn load(definition: &Definition, partition: u32) -> Result<Vm, String> {
        let bytes = definition.module_bytes()?;
        check_module(&bytes)?;
        let module = module_of(&bytes)?;
        let limits =
            StoreLimitsBuilder::new().memory_size(definition.memory_bytes).instances(1).tables(4).memories(1).trap_on_grow_failure(true).build();
        let host = Host { limits, params: definition.params.to_string().into_bytes(), partition, call: None, memory: None };
        let mut store = Store::new(&ENGINE, host);
        store.limiter(|host| &mut host.limits);
        store.set_fuel(INSTANTIATE_FUEL).map_err(|e| e.to_string())?;
        let instance = LINKER.instantiate(&mut store, &module).map_err(|e| format!("instantiating the module failed: {}", reason_of(&e)))?;
        let memory = instance.get_memory(&mut store, "memory").ok_or("the module exports no memory")?;
        store.data_mut().memory = Some(memory);
        let input = instance.get_typed_func::<i32, i32>(&mut store, "input").map_err(|e| format!("export input: {e}"))?;
        let on_record = instance
            .get_typed_func::<(i32, i32, i32, i32, i64, i64), ()>(&mut store, "on_record")
            .map_err(|e| format!("export on_record(key_len: i32, sk_len: i32, value_len: i32, op: i32, timestamp_ms: i64, offset: i64): {e}"))?;
        let on_timer = match instance.get_func(&mut store, "on_timer") {
            None => None,
            Some(f) => Some(f.typed::<(i32, i64), ()>(&store).map_err(|e| format!("export on_timer(name_len: i32, at_ms: i64): {e}"))?),
        };
        Ok(Vm { store, memory, input, on_record, on_timer, fuel_per_record: definition.fuel_per_record })
    }

    /// Calls `on_record`.
    pub fn on_record(&mut self, input: &Input, now_ms: u64, read: &mut dyn StateRead) -> Result<Returned, Failed> {
        let parts: [&[u8]; 3] = [input.key.unwrap_or_default(), input.sk.unwrap_or_default().as_bytes(), input.value.unwrap_or_default()];
        let lengths = parts.map(|p| p.len() as i32);
        let value_len = if input.value.is_some() { lengths[2] } else { -1 };
        let f = self.on_record.clone();
        let (op, timestamp_ms, offset) = (input.op, input.timestamp_ms as i64, input.offset as i64);
        self.call(now_ms, read, &parts, input.headers, move |store| f.call(store, (lengths[0], lengths[1], value_len, op, timestamp_ms, offset)))
    }

    /// Calls `on_timer`; a module without one ignores timers.
    pub fn on_timer(&mut self, name: &str, at_ms: u64, now_ms: u64, read: &mut dyn StateRead) -> Result<Returned, Failed> {
        let Some(f) = self.on_timer.clone() else {
            return Ok(Returned { effects: Effects::default(), fuel_used: 0 });
        };
        let len = name.len() as i32;
        self.call(now_ms, read, &[name.as_bytes()], &[], move |store| f.call(store, (len, at_ms as i64)))
    }

    /// Runs one call: the input written into the guest's buffer, a fresh
    /// fuel budget, empty effects.
    fn call(
        &mut self,
        now_ms: u64,
        read: &mut dyn StateRead,
        input: &[&[u8]],
        headers: &[(String, bytes::Bytes)],
        run: impl FnOnce(&mut Store<Host>) -> wasmtime::Result<()>,
    ) -> Result<Returned, Failed> {
        let fuel = self.fuel_per_record;
        let failed = |reason: String, fuel_used: u64| Failed { reason, fuel_used };
        self.store.set_fuel(fuel).map_err(|e| failed(e.to_string(), 0))?;
        let total: usize = input.iter().map(|p| p.len()).sum();
        let at = self.input.call(&mut self.store, total as i32).map_err(|e| failed(reason_of(&e), 0))? as u32 as usize;
        let data = self.memory.data_mut(&mut self.store);
        let buffer = data.get_mut(at..at + total).ok_or_else(|| failed("input() returned a buffer outside the module's memory".into(), 0))?;
        let mut written = 0;
        for part in input {
            buffer[written..written + part.len()].copy_from_slice(part);
            written += part.len();
        }
        let read: *mut (dyn StateRead + '_) = read;
        // SAFETY: the lifetime is erased only while this call runs; the
        // pointer is taken out of the store below, before `read` goes.
        let read = ReadPtr(unsafe { std::mem::transmute::<*mut (dyn StateRead + '_), *mut (dyn StateRead + 'static)>(read) });
        let headers = HeadersPtr(headers as *const [(String, bytes::Bytes)]);
        self.store.data_mut().call = Some(Call { effects: Effects::default(), read, now_ms, headers });
        let result = run(&mut self.store);
        let call = self.store.data_mut().call.take().expect("the call is set while it runs");
        let fuel_used = fuel - self.store.get_fuel().unwrap_or(0);
        match result {
            Ok(()) => Ok(Returned { effects: call.effects, fuel_used }),
            Err(e) => Err(failed(reason_of(&e), fuel_used)),
        }
    }
}

/// A failed call's reason: what trapped, without the backtrace's addresses.
fn reason_of(e: &wasmtime::Error) -> String {
    if let Some(trap) = e.downcast_ref::<Trap>() {
        return match trap {
            Trap::OutOfFuel => "fuel exhausted: the call ran past fuel_per_record".to_string(),
            Trap::StackOverflow => "stack exhausted: the call recursed too deep".to_string(),
            other => other.to_string(),
        };
    }
    let root = e.root_cause().to_string();
    let first = root.lines().next().unwrap_or("");
    // wasmtime's words for a grow refused by `trap_on_grow_failure`.
    if first.starts_with("forcing trap when growing memory") {
        return format!("memory exhausted: {}, past memory_bytes", first.trim_start_matches("forcing trap when "));
    }
    first.to_string()
}
