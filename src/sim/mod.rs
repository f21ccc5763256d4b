//! A deterministic simulation of a replica set: the way FoundationDB and
//! TigerBeetle find bugs before users do.
//!
//! One seed drives one run: writers append mutations (with write ids,
//! retries, conditions) to an in-memory log that fails appends before or
//! after they land, fails reads, moves retention under readers, and leaves
//! offsets without entries (transaction markers); several replicas, each a
//! real `PartitionHandle` and redb store, open, restore, apply and flush
//! through the apply engine's own functions (`apply::open::try_open`,
//! `apply::apply`, `apply::flush`, `apply::skip_to`); snapshots are taken
//! and restored at random points (a real `Snapshots` on `memory://`, with a
//! snapshot of another log beside them); replicas crash (losing what was not
//! flushed), are wiped, are let go and taken back. Procedures run as the
//! apply loop runs them: deployed by log entries (the counter with fuel
//! near a call's need, the timers, a removal, a module that does not load),
//! called on writes (some trap), timers fired by entries and ticks whose
//! writers' clocks may be a day ahead or far behind, with the log stamping
//! its entries (Kafka's `LogAppendTime`) in some runs and not in others,
//! and each replica loading its procedures again at offsets of its own
//! (crashes, reloads). Everything runs on one
//! current-thread runtime and every choice comes from a random stream named
//! for its purpose and seeded from the seed (`menu.rs`: a weighted action
//! table, a rate per fault drawn per seed), so a seed replays its run
//! exactly, and adding a fault or an action shifts no other fault's draws.
//!
//! Checked during the run: replicas at equal applied offsets have equal state
//! hashes (records, procedures' writes, state, timers, outbox and dead
//! letters, log time: all are in the hash); nothing panics. Checked at the end (faults healed, every replica
//! taken back and run to quiescence): every replica reached the log's end
//! (none silently stuck, none refused: retention never passes the newest
//! snapshot, so every gap is restorable), and its records are exactly those
//! of a reference model that applies the whole log with the documented
//! semantics (so no acknowledged write is lost, none applied twice, every
//! condition and write id decided alike); and after every apply step,
//! where the log stamps, no replica's log time is more than the bound past
//! the log's latest stamp.
//!
//! `cargo test --release --lib sim::` runs the fixed seeds of CI;
//! `scripts/sim.sh --seeds N [--first S]` runs more; a failure prints
//! `TERN_SIM_SEED=<seed> cargo test --release --lib sim::tests::replay -- --nocapture`.

mod journals;
mod log;
mod menu;
mod model;
mod objects;
mod streams;
#[cfg(test)]
mod tests;
mod world;

use self::world::NAMESPACE;
