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
//! - history: every call runs on an instance as it was fresh from the
//!   module's image: a new one (the pooling allocator makes that about ten
//!   microseconds), or one whose memory and mutable globals were written
//!   back to what they were then (`reset.rs`), so nothing in memory or
//!   globals survives from one call to the next, and a replica that loaded
//!   the module at another offset computes the same. Only records and
//!   procedure state (`state_put`) carry over.
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
use wasmtime::{
    Caller, Config, Engine, Extern, InstanceAllocationStrategy, InstancePre, Linker, Memory, Module, ModuleExport, PoolingAllocationConfig, Store,
    StoreLimits, StoreLimitsBuilder, Trap, TypedFunc,
};

use super::definition::Definition;
use super::effects::{Effects, TimerChange};
use super::reset::{Image, Resettable};

/// Fuel for instantiation (a module's start function and data).
const INSTANTIATE_FUEL: u64 = 10_000_000;
/// Instances alive at once, node-wide: one per call running (each apply
/// loop runs one call at a time). The pool reserves their address space
/// up front (4 GiB and a guard each: virtual, not resident).
const INSTANCES_LIVE_MAX: u32 = 64;
/// Pool slots beyond `INSTANCES_LIVE_MAX`: wasmtime's pool hands out slots
/// from shards probed one after another, so a full-looking shard can send
/// a call away while another has a slot; the slack (a slot per shard) and
/// a bounded retry (`INSTANTIATE_TRIES_MAX`) keep that from failing a call.
const POOL_SLACK: u32 = 16;
/// Instances kept between calls (`Vm::idle`), node-wide: at most half the
/// pool, so calls that need a new instance always find slots. Each holds
/// at most `reset::IMAGE_BYTES_MAX` of memory and as much of image.
const INSTANCES_KEPT_MAX: u32 = INSTANCES_LIVE_MAX / 2;
/// Tries to make a call's instance before the host is taken as unable.
const INSTANTIATE_TRIES_MAX: u32 = 50;
/// Tables a module may have (AssemblyScript's have one).
const TABLES_PER_INSTANCE_MAX: u32 = 4;
/// Bytes of a freed instance's memory reset with memset rather than
/// returned to the kernel: a call's memory is reused without page faults.
const MEMORY_KEPT_RESIDENT_BYTES: usize = 1 << 20;
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
    params: std::sync::Arc<[u8]>,
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

/// A procedure's module, ready to run: every call gets an instance fresh
/// from the module's image (`InstancePre`), or the last call's, written
/// back to that image (`reset.rs`); nothing else is ever reused.
///
/// Why fresh (issue 36): an instance reused from call to call carries its
/// history in linear memory and globals (AssemblyScript's incremental
/// collector keeps its state there), so the fuel a call burns and when
/// memory grows depended on how many calls the instance had served since
/// it was loaded: replicas that loaded the module at different offsets (a
/// restart, a hand-off, a restore) disagreed on which call ran out of fuel,
/// and their states diverged. With a fresh instance per call, a call's
/// outcome is a function of (module, params, state, input, log time) only.
pub struct Vm {
    pre: InstancePre<Host>,
    /// What a reset writes back, when the module's instances can be reset
    /// (`reset::resettable`; `pre` is then of the rewritten module).
    reset: Option<Resettable>,
    /// The instance the last call used, reset, for the next call.
    idle: Mutex<Option<Fresh>>,
    /// Set once a call grew its memory: instances are not kept any more.
    grows: std::sync::atomic::AtomicBool,
    #[cfg(test)]
    calls_on_kept: std::sync::atomic::AtomicU64,
    exports: Exports,
    params: std::sync::Arc<[u8]>,
    partition: u32,
    memory_bytes: usize,
    fuel_per_record: u64,
}

/// Where the ABI's exports are in the module (found once, at load).
struct Exports {
    memory: ModuleExport,
    input: ModuleExport,
    on_record: ModuleExport,
    on_timer: Option<ModuleExport>,
}

/// One call's instance: its store (bounds, the call's context) and the
/// exports the call uses.
struct Fresh {
    store: Store<Host>,
    memory: Memory,
    input: TypedFunc<i32, i32>,
    on_record: TypedFunc<(i32, i32, i32, i32, i64, i64), ()>,
    on_timer: Option<TypedFunc<(i32, i64), ()>>,
    /// Its memory and mutable globals as instantiation left them, when the
    /// module is resettable: written back after each call.
    image: Option<Image>,
    /// Held while the instance may be kept between calls
    /// (`INSTANCES_KEPT_MAX`); given back when it is dropped.
    _kept: Option<KeptPermit>,
    /// Dropped after `store` (fields drop in order): the pool's slot is
    /// free once the instance is gone.
    _slot: Slot,
}

/// Instances kept between calls now, at most `INSTANCES_KEPT_MAX`.
static INSTANCES_KEPT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// One of the `INSTANCES_KEPT_MAX` places for an instance kept between calls.
struct KeptPermit;

impl KeptPermit {
    /// A place, if one is free (else the instance is dropped after its call).
    fn try_take() -> Option<KeptPermit> {
        use std::sync::atomic::Ordering;
        INSTANCES_KEPT
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |kept| (kept < INSTANCES_KEPT_MAX).then_some(kept + 1))
            .ok()
            .map(|_| KeptPermit)
    }
}

impl Drop for KeptPermit {
    fn drop(&mut self) {
        let before = INSTANCES_KEPT.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        assert!(before > 0, "a kept place is given back once");
    }
}

/// Instances alive now, at most `INSTANCES_LIVE_MAX` (the pool's size):
/// a call waits for a slot rather than fail for want of one, which would
/// make its outcome depend on the node's load.
static INSTANCES_LIVE: (Mutex<u32>, parking_lot::Condvar) = (Mutex::new(0), parking_lot::Condvar::new());

/// A slot of the instance pool, held while one call's instance lives.
struct Slot;

impl Slot {
    /// Waits for a slot: slots are held for one call each, which fuel bounds.
    fn take() -> Slot {
        let (live, freed) = &INSTANCES_LIVE;
        let mut live = live.lock();
        while *live >= INSTANCES_LIVE_MAX {
            freed.wait(&mut live);
        }
        *live += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (live, freed) = &INSTANCES_LIVE;
        let mut live = live.lock();
        assert!(*live > 0, "a slot is given back once");
        *live -= 1;
        freed.notify_one();
    }
}

/// One engine for every procedure: the settings that make runs deterministic.
static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
    let mut config = Config::new();
    config.consume_fuel(true);
    config.cranelift_nan_canonicalization(true);
    config.wasm_relaxed_simd(false);
    config.relaxed_simd_deterministic(true);
    config.max_wasm_stack(WASM_STACK_BYTES_MAX);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(INSTANCES_LIVE_MAX + POOL_SLACK)
        .total_memories(INSTANCES_LIVE_MAX + POOL_SLACK)
        .total_tables((INSTANCES_LIVE_MAX + POOL_SLACK) * TABLES_PER_INSTANCE_MAX)
        .max_tables_per_module(TABLES_PER_INSTANCE_MAX)
        .max_memory_size(super::definition::MEMORY_BYTES_MAX)
        .linear_memory_keep_resident(MEMORY_KEPT_RESIDENT_BYTES)
        .table_keep_resident(MEMORY_KEPT_RESIDENT_BYTES);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
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

/// Why a call could not run at all: not the module's doing (the host
/// could not make an instance, `INSTANTIATE_TRIES_MAX` times), so not a
/// dead letter; the batch fails as a store write that fails does (the
/// partition is refused on this node, nothing of the batch applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

/// A call's result: Ok(Ok) returned, Ok(Err) failed (a dead letter, the
/// same on every replica), Err the host could not run it.
pub type Outcome = Result<Result<Returned, Failed>, Unavailable>;

impl Vm {
    /// Prepares `definition`'s module with its bounds, and instantiates it
    /// once to check that it can be (a start function that traps, or a
    /// memory larger than `memory_bytes`, refuse the module here).
    pub fn load(definition: &Definition, partition: u32) -> Result<Vm, String> {
        let bytes = definition.module_bytes()?;
        check_module(&bytes)?;
        // Instances of a resettable module are of its rewritten copy (the
        // same code, more exports).
        // Any problem rewriting it leaves it not resettable, never refused:
        // whether a module loads must not depend on the rewrite.
        let reset = super::reset::resettable(&bytes).ok().flatten();
        let module = module_of(reset.as_ref().map_or(&bytes[..], |reset| &reset.bytes))?;
        let export = |name: &str| module.get_export_index(name);
        let exports = Exports {
            memory: export("memory").ok_or("the module exports no memory")?,
            input: export("input").ok_or("the module does not export \"input\"")?,
            on_record: export("on_record").ok_or("the module does not export \"on_record\"")?,
            on_timer: export("on_timer"),
        };
        let pre = LINKER.instantiate_pre(&module).map_err(|e| format!("linking the module failed: {}", reason_of(&e)))?;
        let vm = Vm {
            pre,
            reset,
            idle: Mutex::new(None),
            grows: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            calls_on_kept: std::sync::atomic::AtomicU64::new(0),
            exports,
            params: definition.params.to_string().into_bytes().into(),
            partition,
            memory_bytes: definition.memory_bytes,
            fuel_per_record: definition.fuel_per_record,
        };
        // A module that cannot be instantiated fresh is refused here; one
        // that could be always can (instantiation is deterministic), so a
        // call's failure to instantiate is the host's (`Unavailable`).
        // (Dropped: kept places go to instances that serve calls.)
        drop(vm.instantiate()?);
        Ok(vm)
    }

    /// A fresh instance for a call: the module instantiated before (at
    /// load), so a failure now is the host's; tried again a bounded number
    /// of times (a millisecond apart) before the call is `Unavailable`.
    fn instantiate_retrying(&self) -> Result<Fresh, Unavailable> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.instantiate() {
                Ok(fresh) => return Ok(fresh),
                Err(reason) if tries >= INSTANTIATE_TRIES_MAX => return Err(Unavailable(reason)),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
    }

    /// A fresh instance of the module.
    fn instantiate(&self) -> Result<Fresh, String> {
        let slot = Slot::take();
        let limits = StoreLimitsBuilder::new().memory_size(self.memory_bytes).instances(1).tables(4).memories(1).trap_on_grow_failure(true).build();
        let host = Host { limits, params: self.params.clone(), partition: self.partition, call: None, memory: None };
        let mut store = Store::new(&ENGINE, host);
        store.limiter(|host| &mut host.limits);
        store.set_fuel(INSTANTIATE_FUEL).map_err(|e| e.to_string())?;
        let instance = self.pre.instantiate(&mut store).map_err(|e| format!("instantiating the module failed: {}", reason_of(&e)))?;
        let mut export = |at: &ModuleExport| instance.get_module_export(&mut store, at);
        let Some(Extern::Memory(memory)) = export(&self.exports.memory) else {
            return Err("the module's \"memory\" is not a memory".into());
        };
        let func = |e: Option<Extern>, name: &str| e.and_then(Extern::into_func).ok_or_else(|| format!("the module's {name:?} is not a function"));
        let (input, on_record) = (export(&self.exports.input), export(&self.exports.on_record));
        let on_timer = self.exports.on_timer.as_ref().map(|at| instance.get_module_export(&mut store, at));
        let input = func(input, "input")?.typed::<i32, i32>(&store).map_err(|e| format!("export input(capacity: i32) -> i32: {e}"))?;
        let on_record = func(on_record, "on_record")?
            .typed::<(i32, i32, i32, i32, i64, i64), ()>(&store)
            .map_err(|e| format!("export on_record(key_len: i32, sk_len: i32, value_len: i32, op: i32, timestamp_ms: i64, offset: i64): {e}"))?;
        let on_timer = match on_timer {
            None => None,
            Some(f) => {
                Some(func(f, "on_timer")?.typed::<(i32, i64), ()>(&store).map_err(|e| format!("export on_timer(name_len: i32, at_ms: i64): {e}"))?)
            }
        };
        store.data_mut().memory = Some(memory);
        // An instance that will be kept takes its image now (a copy of its
        // memory); one that will not (no place free, or this module's calls
        // grow its memory) is dropped after its call and takes none.
        let keep = self.reset.as_ref().filter(|_| !self.grows.load(std::sync::atomic::Ordering::Relaxed));
        let kept = keep.and_then(|_| KeptPermit::try_take());
        let image = keep.filter(|_| kept.is_some()).and_then(|reset| Image::of(&mut store, &instance, reset));
        Ok(Fresh { store, memory, input, on_record, on_timer, image, _kept: kept, _slot: slot })
    }

    /// An instance as fresh for a call: the one kept from the last call
    /// (reset), else a new one.
    fn ready(&self) -> Result<Fresh, Unavailable> {
        // Taken out first: the lock is not held while an instance is made.
        let kept = self.idle.lock().take();
        match kept {
            Some(kept) => {
                #[cfg(test)]
                self.calls_on_kept.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(kept)
            }
            None => self.instantiate_retrying(),
        }
    }

    /// Keeps a call's instance for the next call if it has an image (a
    /// kept place) and can be written back to it; else it is dropped. A
    /// call that grew its memory left one that cannot: this module's
    /// calls then get new instances only (its calls grow memory from the
    /// fresh image, so keeping would only add the image's copy).
    fn put_back(&self, mut used: Fresh) {
        let Some(image) = &used.image else { return };
        if !image.write_back(&mut used.store) {
            self.grows.store(true, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        *self.idle.lock() = Some(used);
    }

    /// Calls that ran on a kept instance (tests: the reset path is taken).
    #[cfg(test)]
    pub(crate) fn calls_on_kept(&self) -> u64 {
        self.calls_on_kept.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Calls `on_record` on a fresh instance.
    pub fn on_record(&self, input: &Input, now_ms: u64, read: &mut dyn StateRead) -> Outcome {
        let parts: [&[u8]; 3] = [input.key.unwrap_or_default(), input.sk.unwrap_or_default().as_bytes(), input.value.unwrap_or_default()];
        let lengths = parts.map(|p| p.len() as i32);
        let value_len = if input.value.is_some() { lengths[2] } else { -1 };
        let (op, timestamp_ms, offset) = (input.op, input.timestamp_ms as i64, input.offset as i64);
        self.call(now_ms, read, &parts, input.headers, move |fresh| {
            fresh.on_record.clone().call(&mut fresh.store, (lengths[0], lengths[1], value_len, op, timestamp_ms, offset))
        })
    }

    /// Calls `on_timer` on a fresh instance; a module without one ignores timers.
    pub fn on_timer(&self, name: &str, at_ms: u64, now_ms: u64, read: &mut dyn StateRead) -> Outcome {
        if self.exports.on_timer.is_none() {
            return Ok(Ok(Returned { effects: Effects::default(), fuel_used: 0 }));
        }
        let len = name.len() as i32;
        self.call(now_ms, read, &[name.as_bytes()], &[], move |fresh| match fresh.on_timer.clone() {
            Some(f) => f.call(&mut fresh.store, (len, at_ms as i64)),
            None => Ok(()),
        })
    }

    /// Runs one call on a fresh instance: the input written into the
    /// guest's buffer, a fresh fuel budget, empty effects.
    fn call(
        &self,
        now_ms: u64,
        read: &mut dyn StateRead,
        input: &[&[u8]],
        headers: &[(String, bytes::Bytes)],
        run: impl FnOnce(&mut Fresh) -> wasmtime::Result<()>,
    ) -> Outcome {
        let mut fresh = self.ready()?;
        let outcome = self.call_on(&mut fresh, now_ms, read, input, headers, run);
        self.put_back(fresh);
        outcome
    }

    /// `call` on the instance `fresh`.
    fn call_on(
        &self,
        fresh: &mut Fresh,
        now_ms: u64,
        read: &mut dyn StateRead,
        input: &[&[u8]],
        headers: &[(String, bytes::Bytes)],
        run: impl FnOnce(&mut Fresh) -> wasmtime::Result<()>,
    ) -> Outcome {
        let fuel = self.fuel_per_record;
        let failed = |reason: String, fuel_used: u64| Ok(Err(Failed { reason, fuel_used }));
        if let Err(e) = fresh.store.set_fuel(fuel) {
            return Err(Unavailable(e.to_string()));
        }
        let total: usize = input.iter().map(|p| p.len()).sum();
        let at = match fresh.input.call(&mut fresh.store, total as i32) {
            Ok(at) => at as u32 as usize,
            Err(e) => return failed(reason_of(&e), fuel - fresh.store.get_fuel().unwrap_or(0)),
        };
        let data = fresh.memory.data_mut(&mut fresh.store);
        let Some(buffer) = data.get_mut(at..at.saturating_add(total)) else {
            return failed("input() returned a buffer outside the module's memory".into(), 0);
        };
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
        fresh.store.data_mut().call = Some(Call { effects: Effects::default(), read, now_ms, headers });
        let result = run(fresh);
        let call = fresh.store.data_mut().call.take().expect("the call is set while it runs");
        let fuel_used = fuel - fresh.store.get_fuel().unwrap_or(0);
        match result {
            Ok(()) => Ok(Ok(Returned { effects: call.effects, fuel_used })),
            Err(e) => failed(reason_of(&e), fuel_used),
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
