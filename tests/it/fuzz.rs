//! Runs every fuzz target (`tern::fuzz`) for a few seconds on stable: the
//! corpus (`fuzz/corpus/<target>/`, where crashes found are kept, and a few
//! seeds made here), then mutations of it drawn from a fixed seed, so a run
//! is repeatable. `TERN_FUZZ_SECONDS` sets the time per target (default 2).
//! The long, coverage-guided runs are `scripts/fuzz.sh` (cargo fuzz).

use std::time::{Duration, Instant};

use rand::{Rng, RngCore, SeedableRng};

use crate::common::checkout;

/// Longest input tried (the decoders' own bounds are far above; this keeps a run fast).
const INPUT_BYTES_MAX: usize = 16 * 1024;
/// Fragments the mutations insert: what the decoders split and escape on.
const TOKENS: &[&str] = &[
    "\n",
    "/",
    "%",
    "%2F",
    "%00",
    ".",
    ":",
    ",",
    "\"",
    "{",
    "}",
    "[",
    "]",
    "\\",
    "0",
    "-1",
    "18446744073709551615",
    "tern_",
    "~",
    "$",
    "é",
    "\u{0}",
    "null",
    "true",
    "==",
    "&&",
    "(",
    ")",
    "eyJ",
    "=",
];

fn seconds() -> f64 {
    std::env::var("TERN_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0)
}

/// The corpus of `name`, and seeds only a running build can make.
fn corpus(name: &str) -> Vec<Vec<u8>> {
    let mut inputs = vec![Vec::new()];
    if let Ok(entries) = std::fs::read_dir(checkout().join("fuzz/corpus").join(name)) {
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        paths.sort();
        inputs.extend(paths.iter().map(|p| std::fs::read(p).unwrap()));
    }
    if name == "entry" {
        use tern::codec::{encode_at, Condition, Mutation, Op, OpKind, TreeOp};
        let put = Op {
            pk: "k".into(),
            sk: "s".into(),
            kind: OpKind::Put(bytes::Bytes::from_static(b"{\"a\":1}")),
            condition: Some(Condition::IfVersion(3)),
        };
        let tree = Op {
            pk: ".tree".into(),
            sk: "a/b".into(),
            kind: OpKind::Tree(TreeOp { merge: true, value: bytes::Bytes::from_static(b"{\"x\":null}"), time_ms: 5 }),
            condition: None,
        };
        let delete = Op { pk: "k2".into(), sk: String::new(), kind: OpKind::Delete, condition: Some(Condition::IfAbsent) };
        inputs.push(encode_at(&Mutation { write_id: bytes::Bytes::from_static(b"id-1"), ops: vec![put, tree, delete], ..Default::default() }, 42));
        inputs.push(tern::codec::encode_tick(7));
        inputs.push(tern::codec::encode_trim(7, 3));
    }
    inputs
}

/// One mutation of `input`, drawn from `rng` (sometimes spliced with `other`).
fn mutate(rng: &mut rand_chacha::ChaCha12Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let at = if out.is_empty() { 0 } else { rng.random_range(0..=out.len()) };
        match rng.random_range(0..7) {
            0 if !out.is_empty() => {
                let i = rng.random_range(0..out.len());
                out[i] ^= 1 << rng.random_range(0..8);
            }
            1 if !out.is_empty() => {
                let i = rng.random_range(0..out.len());
                out[i] = rng.random();
            }
            2 => {
                let mut bytes = vec![0; rng.random_range(1..=8)];
                rng.fill_bytes(&mut bytes);
                out.splice(at..at, bytes);
            }
            3 if !out.is_empty() => {
                let end = (at + rng.random_range(1..=16)).min(out.len());
                out.drain(at.min(end)..end);
            }
            4 => {
                let token = TOKENS[rng.random_range(0..TOKENS.len())].as_bytes();
                out.splice(at..at, token.iter().copied());
            }
            5 if !other.is_empty() => {
                let from = rng.random_range(0..other.len());
                let end = (from + rng.random_range(1..=64)).min(other.len());
                out.splice(at..at, other[from..end].iter().copied());
            }
            _ if !out.is_empty() => {
                let end = (at + rng.random_range(1..=32)).min(out.len());
                let piece = out[at.min(end)..end].to_vec();
                out.splice(at..at, piece);
            }
            _ => out.push(rng.random()),
        }
    }
    out.truncate(INPUT_BYTES_MAX);
    out
}

/// Runs `target` on `input`; the panic message when it panicked.
fn run(target: fn(&[u8]), input: &[u8]) -> Option<String> {
    std::panic::catch_unwind(|| target(input))
        .err()
        .map(|panic| panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default())
}

#[test]
fn every_fuzz_target_survives_its_corpus_and_mutations_of_it() {
    let per_target = Duration::from_secs_f64(seconds());
    let mut crashes = Vec::new();
    for (index, (name, target)) in tern::fuzz::TARGETS.iter().enumerate() {
        let inputs = corpus(name);
        let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(0x7e27_0000 + index as u64);
        let started = Instant::now();
        let mut executions = 0u64;
        let mut crashed = None;
        for input in &inputs {
            executions += 1;
            if let Some(message) = run(*target, input) {
                crashed = Some((input.clone(), message));
                break;
            }
        }
        while crashed.is_none() && started.elapsed() < per_target {
            let input = &inputs[rng.random_range(0..inputs.len())];
            let other = &inputs[rng.random_range(0..inputs.len())];
            let mutated = mutate(&mut rng, input, other);
            executions += 1;
            if let Some(message) = run(*target, &mutated) {
                crashed = Some((mutated, message));
            }
        }
        eprintln!("fuzz {name}: {executions} executions in {:.1} s, {} crash", started.elapsed().as_secs_f64(), crashed.is_some() as u8);
        if let Some((input, message)) = crashed {
            crashes.push(format!("{name}: {message}\n  input (hex): {}", input.iter().map(|b| format!("{b:02x}")).collect::<String>()));
        }
    }
    assert!(crashes.is_empty(), "crashes (keep each input in fuzz/corpus/<target>/ once fixed):\n{}", crashes.join("\n"));
}
