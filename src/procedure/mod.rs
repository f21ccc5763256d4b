//! Procedures (issue 23, docs/procedures.md): code attached to a namespace
//! that runs inside each partition's apply loop, once per input record, in
//! log order, in the same store transaction as the record.
//!
//! The life of a record through a procedure:
//! 1. The apply loop applies the entry (`apply::batch`); if procedures are
//!    deployed on the partition, the entry's time moves the partition's log
//!    time forward (never back, and never more than a second past the time
//!    the log stamped on the entry: `log_time.rs`), and each procedure, in name order, is
//!    called once per op of the applied mutation (`on_record`).
//! 2. A call reads records through the apply transaction (and its own
//!    writes first), and asks for writes, outputs and timers; nothing of it
//!    touches the store until the call returns (`effects.rs`).
//! 3. A call that returns has its effects applied, in order: record writes
//!    (versioned by the input's offset), timer changes, outputs into the
//!    outbox (`\0\0#o<offset><index>`). A call that fails (an error, fuel or
//!    memory exhausted, a bound passed) leaves nothing but one dead letter
//!    with the reason, in the outbox too. Both are the same on every replica.
//! 4. Timers due at the new log time fire (`on_timer`), earliest first,
//!    a bounded number per entry (the rest at the next entry).
//!
//! Deployment is a log entry (`codec::OpKind::Procedure`) in every partition,
//! so each partition switches at one offset, the same on every replica. Its
//! version is the deploy entry's offset in partition 0; a partition applies
//! a deployment only if it is newer than the one it runs, so concurrent
//! deployments end the same everywhere.
//!
//! Owns: loading definitions into WebAssembly instances (`wasm.rs`), calling them, applying
//! their effects, dead letters, the outbox's message format (`outbox.rs`).
//! Never: decides what an entry's mutation does (apply does, before), reads
//! a clock or anything but the transaction, or publishes (the node does).

pub mod definition;
pub mod effects;
pub mod log_time;
pub mod outbox;
mod procedures;
mod reset;
pub mod wasm;

pub use self::procedures::{
    Procedures, DEAD_LETTER_BYTES_MAX, DEAD_LETTER_KEY_BYTES_MAX, DEAD_LETTER_VALUE_BYTES_MAX, TIMERS_FIRED_PER_ENTRY_MAX, VERSIONS_KEPT,
};
