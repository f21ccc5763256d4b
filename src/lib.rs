//! Tern: a replicated, realtime key-value database for read-heavy
//! configuration data. Every write is appended to a partitioned log; each
//! partition's apply loop applies it to the partition's store; reads are
//! local; watches get every change pushed, in log order.
//!
//! This file is the map. Modules are listed in floors, top to bottom; a
//! module imports only from floors below its own (never a sibling on its
//! floor, never one above), and `tests/it/layers.rs` fails the build's
//! tests when one does. ARCHITECTURE.md has the bird's-eye view, the path
//! of a PUT from the socket to a watcher ("start reading here") and each
//! floor's invariants.
//!
//! Modules are `pub` only where something outside the crate uses them (the
//! `tern` binary, the integration tests, `tern-bench`); everything else is
//! `pub(crate)`.

// ── The simulation (tests only) ───────────────────────────────────────────
/// A deterministic, seeded simulation of a replica set over the apply
/// engine's own functions, with fault injection (`scripts/sim.sh`).
#[cfg(test)]
mod sim;

// ── The process ───────────────────────────────────────────────────────────
/// The `tern` command: `dev`, `serve` and the client commands.
pub mod cli;
/// A node process: open the log and the node, serve, stop cleanly.
pub(crate) mod server;

// ── Interfaces and settings ───────────────────────────────────────────────
/// The HTTP API: handlers (`api/*.rs`) under the transport (`api/http/`).
pub mod api;
/// Every setting, from one table: flags, variables, file keys, docs.
pub mod settings;

// ── Firebase rules and authorization ────────────────────────────────────────────────────────
/// Firebase security rules: parsed once, evaluated per request.
pub mod rules;
/// Tokens (root, API keys, JWTs), grants and the decision; failed-authentication limits.
pub mod auth;

// ── The cluster ───────────────────────────────────────────────────────────
/// Membership by gossip, the cluster view and routing to holders.
pub mod cluster;

// ── One node ──────────────────────────────────────────────────────────────
/// Namespaces, the partitions' lifecycle, the write and read paths, the snapshot schedule.
pub mod node;

// ── Writes ahead of the log ───────────────────────────────────────────────
/// The node's journal: writes durable here before the log has them (issue 19).
pub mod journal;

// ── Watches ───────────────────────────────────────────────────────────────
/// A watch's session: catch-up, current state, live delivery, outbox.
pub(crate) mod watch;

// ── The apply engine ──────────────────────────────────────────────────────
/// The apply loop: one task per partition, the only writer of its store.
pub(crate) mod apply;
/// Procedures: sandboxed code run by the apply loop per record, timers, the outbox.
pub mod procedure;
/// A held partition's handle (store, applied offset, status, outcomes) and its namespace.
pub(crate) mod partition;

// ── Data planes beside each other ─────────────────────────────────────────
/// Change events, the per-partition feed and dispatcher, watch queues, cursors.
pub(crate) mod fanout;
/// Partition snapshots in object storage: create, verify, restore, prune.
pub mod snapshot;

// ── Storage and the wire format ───────────────────────────────────────────
/// The log: the `Log` trait, the embedded log and Kafka.
pub mod log;
/// One redb database per partition: records, applied offset, state hash.
pub mod store;
/// The versioned protobuf log entry format.
pub mod codec;

// ── Models ────────────────────────────────────────────────────────────────
/// The JSON tree (the Firebase model): paths, leaves, server values, queries.
pub mod tree;

// ── Foundations ───────────────────────────────────────────────────────────
/// Position tokens (`ns:partition:offset`).
pub(crate) mod position;
/// Every size limit and its check.
pub mod limits;
/// pk → partition: Kafka's murmur2 partitioner.
pub mod partitioner;
/// Prometheus metrics.
pub(crate) mod metrics;
/// Software prefetch hints for loops over many watches.
pub(crate) mod prefetch;
