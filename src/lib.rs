//! Tern: a replicated, realtime key-value database for read-heavy
//! configuration data. Every write is appended to a partitioned log; each
//! partition's apply loop applies it to the partition's store; reads are
//! local; watches get every change pushed, in log order.
//!
//! The rooms below are declared alphabetically. Which room may use which
//! is written once, in `tests/it/layers.rs` (`ROOMS`, a partial order that
//! the build's tests check on every import); ARCHITECTURE.md has the
//! bird's-eye view, the walk of a PUT and of a watch event, and each
//! room's paragraph and invariants.
//!
//! Modules are `pub` only where something outside the crate uses them (the
//! `tern` binary, the integration tests, `tern-bench`); everything else is
//! `pub(crate)`.

/// The edge's HTTP/JSON API under `/v1`: its route table and handlers.
pub(crate) mod api;
/// The apply loop: one task per partition, the only writer of its store.
pub(crate) mod apply;
/// Tokens (root, API keys, JWTs), grants and the decision; failed-authentication
/// limits; each node's key ring kept current.
pub mod auth;
/// The `tern` command: `dev`, `serve` and the client commands.
pub mod cli;
/// Membership by gossip, the cluster view, routing to holders, reaching peers.
pub mod cluster;
/// The versioned protobuf log entry format.
pub mod codec;
/// What the edge's protocols share: state, access, errors, forwarding, the SSE encoder.
pub mod edge;
/// Change events, the per-partition feed and dispatcher, watch queues, cursors.
pub(crate) mod fanout;
/// Firebase's REST, streaming and realtime protocols; its databases' state
/// (`firebase::db`) and rules language (`firebase::rules`) below the edge.
pub mod firebase;
/// Fuzz targets: every decoder of outside bytes, with its invariants.
pub mod fuzz;
/// The transport and the front: connections, HTTP/1.1 and h2c, TLS, and
/// which protocol a request belongs to.
pub mod http;
/// A log's names for its topics and what two of them say (`identity.rs`).
pub(crate) mod identity;
/// The node's journal: writes durable here before the log has them (issue 19).
pub mod journal;
/// Every size limit and its check.
pub mod limits;
/// The log: the `Log` trait, the embedded log and Kafka.
pub mod log;
/// Prometheus metrics.
pub(crate) mod metrics;
/// Namespaces, the partitions' lifecycle, the write and read paths, the snapshot schedule.
pub mod node;
/// A held partition's handle (store, applied offset, status, outcomes) and its namespace.
pub(crate) mod partition;
/// pk → partition: Kafka's murmur2 partitioner.
pub mod partitioner;
/// Position tokens (`ns:partition:offset`).
pub(crate) mod position;
/// Software prefetch hints for loops over many watches.
pub(crate) mod prefetch;
/// Procedures: sandboxed code run by the apply loop per record, timers, the outbox.
pub mod procedure;
/// A node process: open the log and the node, serve, stop cleanly.
pub(crate) mod server;
/// Every setting, from one table: flags, variables, file keys, docs.
pub mod settings;
/// A deterministic, seeded simulation of a replica set over the apply
/// engine's own functions, with fault injection (`scripts/sim.sh`).
#[cfg(test)]
mod sim;
/// Partition snapshots in object storage: create, verify, restore, prune.
pub mod snapshot;
/// One redb database per partition: records, applied offset, state hash.
pub mod store;
/// The JSON tree (the Firebase model): paths, leaves, server values, queries.
pub mod tree;
/// A watch's session: catch-up, current state, live delivery, outbox.
pub(crate) mod watch;
