//! The procedure runtime candidates of issue 23, measured on one workload:
//! aggdemo's per-record decision (parse a CSV record, validate it, read the
//! session's state, update it, decide a cut, emit, write the state back),
//! written idiomatically for each runtime and run the way Tern would run it
//! (sandboxed, with a CPU bound and a memory bound switched on):
//!
//! - Luau through mlua (`guests/aggdemo_step.luau`): state as Lua tables,
//!   converted from and to JSON by the host; an interrupt callback counts fuel.
//! - QuickJS through rquickjs (`guests/aggdemo_step.js`): state as JSON text,
//!   JSON.parse/stringify in the guest; an interrupt handler counts fuel.
//! - WebAssembly through wasmtime (`guests/assembly/index.ts`, AssemblyScript):
//!   state as a fixed binary layout; wasmtime's fuel.
//!
//! Every runtime sees the same records and must produce the same outputs
//! (counted by topic and reason, and the usage billed): the comparison is
//! only valid if they computed the same thing, so the run fails otherwise.
//!
//! Usage: procedure-runtimes [RECORDS] [GUESTS_DIR]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// Records per measured run (after a warm-up run of the same size).
const RECORDS_DEFAULT: usize = 300_000;
/// Sessions open at once in the generated stream.
const SESSIONS_OPEN: usize = 2_000;
/// The log time of every record ("now"): fixed, so every run decides alike.
const NOW_MS: i64 = 1_764_000_000_000;

/// A deterministic record stream: sessions of 256 records (seqno 0..=255)
/// interleaved, with a duplicate every 97 records and a malformed line every 211.
fn generate(count: usize) -> Vec<String> {
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut sessions: Vec<(i64, i64, u32)> = (0..SESSIONS_OPEN as i64).map(|i| (i, NOW_MS - 3_600_000, 0)).collect();
    let mut next_session = SESSIONS_OPEN as i64;
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let n = out.len();
        if n % 211 == 210 {
            out.push("not,a,record".to_string());
            continue;
        }
        if n % 97 == 96 {
            let again = out[n - 1].clone();
            out.push(again);
            continue;
        }
        let slot = (next() % SESSIONS_OPEN as u64) as usize;
        let (id, start, seq) = sessions[slot];
        let kind = match seq { 0 => "S", 255 => "E", _ => "I" };
        let usage = 1_000 + next() % 20_000;
        out.push(format!("{id},{start},{seq},4155550{:04},4155551{:04},{kind},{},{usage}", id % 10_000, (id + 7) % 10_000, start + seq as i64 * 1000));
        sessions[slot] = if seq == 255 { (next_session, NOW_MS - 3_600_000, 0) } else { (id, start, seq + 1) };
        if seq == 255 {
            next_session += 1;
        }
    }
    out
}

/// What a run emitted, summarized so runtimes can be compared.
#[derive(Default, Debug, PartialEq)]
struct Summary {
    by_reason: BTreeMap<String, u64>,
    billed_usage: i64,
}

fn summarize(outputs: &[(u8, String)]) -> Result<Summary> {
    let mut s = Summary::default();
    for (topic, text) in outputs {
        let v: serde_json::Value = serde_json::from_str(text).with_context(|| format!("output is not JSON: {text}"))?;
        let reason = v["reason"].as_str().context("no reason")?;
        *s.by_reason.entry(format!("{}:{reason}", if *topic == 0 { "aggregated" } else { "bad" })).or_default() += 1;
        if *topic == 0 {
            s.billed_usage += v["recordUsage"].as_i64().context("no recordUsage")?;
        }
    }
    Ok(s)
}

struct Measured {
    name: &'static str,
    ns_per_record: f64,
    summary: Summary,
}

mod luau {
    use super::*;
    use mlua::{Lua, LuaSerdeExt, Value, VmState};
    use std::sync::{Arc, Mutex};

    pub fn run(code: &str, records: &[String]) -> Result<(f64, Vec<(u8, String)>)> {
        let lua = Lua::new();
        lua.set_memory_limit(64 << 20)?;
        let state: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>> = Default::default();
        let outputs: Arc<Mutex<Vec<(u8, String)>>> = Default::default();
        let fuel = Arc::new(Mutex::new(0u64));
        let tern = lua.create_table()?;
        let st = state.clone();
        tern.set("get", lua.create_function(move |lua, key: mlua::LuaString| {
            match st.lock().unwrap().get(&*key.as_bytes()) {
                Some(bytes) => lua.to_value(&serde_json::from_slice::<serde_json::Value>(bytes).map_err(mlua::Error::external)?),
                None => Ok(Value::Nil),
            }
        })?)?;
        let st = state.clone();
        tern.set("put", lua.create_function(move |lua, (key, value): (mlua::LuaString, Value)| {
            let json: serde_json::Value = lua.from_value(value)?;
            st.lock().unwrap().insert(key.as_bytes().to_vec(), serde_json::to_vec(&json).map_err(mlua::Error::external)?);
            Ok(())
        })?)?;
        let out = outputs.clone();
        tern.set("emit", lua.create_function(move |lua, (topic, value): (String, Value)| {
            let json: serde_json::Value = lua.from_value(value)?;
            out.lock().unwrap().push((if topic == "aggregated" { 0 } else { 1 }, json.to_string()));
            Ok(())
        })?)?;
        lua.globals().set("tern", tern)?;
        let f = fuel.clone();
        if std::env::var("NO_INTERRUPT").is_err() { lua.set_interrupt(move |_| {
            let mut f = f.lock().unwrap();
            *f += 1;
            if *f > 1 << 40 { Err(mlua::Error::runtime("fuel exhausted")) } else { Ok(VmState::Continue) }
        }); }
        lua.sandbox(true)?;
        lua.load(code).set_name("aggdemo_step").exec()?;
        let on_record: mlua::Function = lua.globals().get("on_record")?;
        let started = Instant::now();
        for line in records {
            on_record.call::<()>((line.as_str(), NOW_MS))?;
        }
        let ns = started.elapsed().as_nanos() as f64 / records.len() as f64;
        let outputs = std::mem::take(&mut *outputs.lock().unwrap());
        Ok((ns, outputs))
    }
}

mod quickjs {
    use super::*;
    use rquickjs::{Context as JsContext, Function, Runtime};
    use std::cell::RefCell;
    use std::rc::Rc;

    pub fn run(code: &str, records: &[String]) -> Result<(f64, Vec<(u8, String)>)> {
        let runtime = Runtime::new()?;
        runtime.set_memory_limit(64 << 20);
        let fuel = Rc::new(RefCell::new(0u64));
        let f = fuel.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || {
            let mut f = f.borrow_mut();
            *f += 1;
            *f > 1 << 40
        })));
        let context = JsContext::full(&runtime)?;
        let state: Rc<RefCell<HashMap<String, String>>> = Default::default();
        let outputs: Rc<RefCell<Vec<(u8, String)>>> = Default::default();
        let ns = context.with(|ctx| -> Result<f64> {
            let tern = rquickjs::Object::new(ctx.clone())?;
            let st = state.clone();
            tern.set("get", Function::new(ctx.clone(), move |key: String| st.borrow().get(&key).cloned())?)?;
            let st = state.clone();
            tern.set("put", Function::new(ctx.clone(), move |key: String, value: String| {
                st.borrow_mut().insert(key, value);
            })?)?;
            let out = outputs.clone();
            tern.set("emit", Function::new(ctx.clone(), move |topic: String, value: String| {
                out.borrow_mut().push((if topic == "aggregated" { 0 } else { 1 }, value));
            })?)?;
            ctx.globals().set("tern", tern)?;
            // No clock and no randomness: what a deterministic sandbox removes.
            ctx.eval::<(), _>("delete globalThis.Date; Math.random = undefined;")?;
            ctx.eval::<(), _>(code).map_err(|e| anyhow::anyhow!("{e}: {:?}", ctx.catch()))?;
            let on_record: Function = ctx.globals().get("on_record")?;
            let started = Instant::now();
            for line in records {
                on_record.call::<_, ()>((line.as_str(), NOW_MS as f64)).map_err(|e| anyhow::anyhow!("{e}: {:?}", ctx.catch()))?;
            }
            Ok(started.elapsed().as_nanos() as f64 / records.len() as f64)
        })?;
        let outputs = std::mem::take(&mut *outputs.borrow_mut());
        Ok((ns, outputs))
    }
}

mod wasm {
    use super::*;
    use wasmtime::{Caller, Config, Engine, Extern, Linker, Memory, Module, Store, StoreLimits, StoreLimitsBuilder};

    struct Host {
        state: HashMap<Vec<u8>, Vec<u8>>,
        outputs: Vec<(u8, String)>,
        limits: StoreLimits,
    }

    fn memory(caller: &mut Caller<'_, Host>) -> Memory {
        match caller.get_export("memory") {
            Some(Extern::Memory(m)) => m,
            _ => panic!("the guest exports no memory"),
        }
    }

    pub fn run(wasm: &[u8], records: &[String]) -> Result<(f64, Vec<(u8, String)>)> {
        let mut config = Config::new();
        config.consume_fuel(true);
        // Determinism: NaNs canonicalized, so every replica computes the same bits.
        config.cranelift_nan_canonicalization(true);
        let engine = Engine::new(&config)?;
        let module = Module::new(&engine, wasm)?;
        let mut linker: Linker<Host> = Linker::new(&engine);
        linker.func_wrap("tern", "get", |mut caller: Caller<'_, Host>, key: i32, key_len: i32, out: i32, cap: i32| -> i32 {
            let mem = memory(&mut caller);
            let (data, host) = mem.data_and_store_mut(&mut caller);
            let key = &data[key as usize..(key + key_len) as usize];
            match host.state.get(key) {
                Some(v) if v.len() <= cap as usize => {
                    data[out as usize..out as usize + v.len()].copy_from_slice(v);
                    v.len() as i32
                }
                _ => -1,
            }
        })?;
        linker.func_wrap("tern", "put", |mut caller: Caller<'_, Host>, key: i32, key_len: i32, val: i32, val_len: i32| {
            let mem = memory(&mut caller);
            let (data, host) = mem.data_and_store_mut(&mut caller);
            let key = data[key as usize..(key + key_len) as usize].to_vec();
            let val = data[val as usize..(val + val_len) as usize].to_vec();
            host.state.insert(key, val);
        })?;
        linker.func_wrap("tern", "emit", |mut caller: Caller<'_, Host>, topic: i32, val: i32, val_len: i32| {
            let mem = memory(&mut caller);
            let (data, host) = mem.data_and_store_mut(&mut caller);
            let text = String::from_utf8_lossy(&data[val as usize..(val + val_len) as usize]).into_owned();
            host.outputs.push((topic as u8, text));
        })?;
        linker.func_wrap("env", "abort", |_: i32, _: i32, _: i32, _: i32| -> wasmtime::Result<()> { Err(wasmtime::Error::msg("the guest aborted")) })?;
        let limits = StoreLimitsBuilder::new().memory_size(64 << 20).build();
        let mut store = Store::new(&engine, Host { state: HashMap::new(), outputs: Vec::new(), limits });
        store.limiter(|h| &mut h.limits);
        store.set_fuel(u64::MAX)?;
        let instance = linker.instantiate(&mut store, &module)?;
        let input_ptr = instance.get_typed_func::<(), i32>(&mut store, "input_ptr")?.call(&mut store, ())? as usize;
        let on_record = instance.get_typed_func::<(i32, i64), ()>(&mut store, "on_record")?;
        let mem = instance.get_memory(&mut store, "memory").context("no memory")?;
        let started = Instant::now();
        for line in records {
            mem.data_mut(&mut store)[input_ptr..input_ptr + line.len()].copy_from_slice(line.as_bytes());
            on_record.call(&mut store, (line.len() as i32, NOW_MS))?;
        }
        let ns = started.elapsed().as_nanos() as f64 / records.len() as f64;
        Ok((ns, std::mem::take(&mut store.data_mut().outputs)))
    }
}

fn measure(name: &'static str, runs: usize, mut run: impl FnMut() -> Result<(f64, Vec<(u8, String)>)>) -> Result<Measured> {
    let mut best = f64::MAX;
    let mut summary = None;
    for _ in 0..runs {
        let (ns, outputs) = run()?;
        best = best.min(ns);
        summary = Some(summarize(&outputs)?);
    }
    Ok(Measured { name, ns_per_record: best, summary: summary.unwrap() })
}

fn main() -> Result<()> {
    let records_count = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(RECORDS_DEFAULT);
    let guests = PathBuf::from(std::env::args().nth(2).unwrap_or_else(|| "guests".into()));
    let records = generate(records_count);
    let lua_code = std::fs::read_to_string(guests.join("aggdemo_step.luau"))?;
    let js_code = std::fs::read_to_string(guests.join("aggdemo_step.js"))?;
    let wasm = std::fs::read(guests.join("aggdemo_step.wasm")).context("build the guest first: run.sh does")?;
    // Each run starts from empty state (a fresh runtime); 3 runs, the best kept.
    let results = [
        measure("Luau (mlua 0.12, interpreter)", 3, || luau::run(&lua_code, &records))?,
        measure("QuickJS (rquickjs 0.14)", 3, || quickjs::run(&js_code, &records))?,
        measure("WebAssembly (wasmtime 48, AssemblyScript 0.28)", 3, || wasm::run(&wasm, &records))?,
    ];
    println!("records per run: {records_count}, sessions open: {SESSIONS_OPEN}");
    println!("{:<50} {:>12}", "runtime", "µs/record");
    for m in &results {
        println!("{:<50} {:>12.2}", m.name, m.ns_per_record / 1000.0);
    }
    println!("outputs: {:?}", results[0].summary);
    for m in &results[1..] {
        if m.summary != results[0].summary {
            bail!("{} computed different outputs: {:?}", m.name, m.summary);
        }
    }
    println!("all runtimes produced the same outputs");
    Ok(())
}
