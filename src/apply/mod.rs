//! The apply loop: one task per partition, the only writer of its store.
//!
//! It reads the partition's log from the store's `applied_next`, applies
//! entries in batches (one store transaction per batch, the offset committed
//! with the data), makes the new offset and outcomes visible
//! (`PartitionHandle::advance`), and every
//! `fsync_interval` makes the store durable and tells the log that entries
//! below the durable offset are no longer needed locally.
//!
//! A batch's own commit is never durable: the log is the write-ahead log,
//! so the store's fsync is only a checkpoint. It runs after the batch was
//! made visible and its events dispatched, so no write's answer
//! (`wait=applied`) and no watch's event waits for it (it takes
//! milliseconds; at 10 writes a second it used to delay one write in ten).
//!
//! It never skips: where it starts (and what it recovers first: a restore
//! from a snapshot, `--restore` into a new log) is `open.rs`; if the log no
//! longer holds the offset it needs and no snapshot covers it, or the store
//! is ahead of the log, the partition is refused, loudly.

/// The aggdemo procedure (`examples/aggdemo/`) against a generator with every fault.
#[cfg(test)]
mod aggdemo_tests;
pub(crate) mod batch;
pub(crate) mod open;
/// Procedures run by the apply engine (`crate::procedure`), over a real store.
#[cfg(test)]
mod procedure_tests;
/// Tree ops (the Firebase model) applied as leaf records.
pub(crate) mod tree;

pub(crate) use self::open::Recovery;
mod apply_loop;
/// A store found damaged while it runs, rebuilt in place.
mod rebuild;
mod stuck_reader;

/// The apply engine's own functions, which the simulation and the apply
/// tests drive step by step.
#[cfg(test)]
pub(crate) use self::apply_loop::{apply, flush, partition_procedures, skip_to, PartitionProcedures};
pub(crate) use self::apply_loop::{run, ApplyConfig};
use self::apply_loop::{RETRY_DELAY_MAX, RETRY_DELAY_MIN};
