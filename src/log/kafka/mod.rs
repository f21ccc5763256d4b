//! The Kafka log: Tern's `Log` on Apache Kafka or Redpanda, via librdkafka.
//!
//! - One topic per namespace, `<prefix><namespace>` (prefix `tern.` by
//!   default), created through the admin API with the namespace's partition
//!   count, a replication factor and `min.insync.replicas`.
//! - Writes: one idempotent producer, `acks=all`, each record sent to an
//!   explicit partition (Tern computed it from the pk exactly as Kafka's
//!   default partitioner would). An offset is returned only after the broker
//!   acknowledged the record. Each topic's largest entry (its
//!   `max.message.bytes`) is learned and told to the write path
//!   (`topic_limits.rs`).
//! - Reads: one assign-mode consumer per node (no group management, offsets
//!   only ever come from the stores; `auto.offset.reset=error`, so a missing
//!   offset is an error, never a silent jump), split into one queue per
//!   partition so each apply loop reads only its own partition.
//! - Ownership: with `Membership::Group` the node is a member of its replica
//!   group's Kafka consumer group, which decides the partitions it holds
//!   (`group.rs`); with `Membership::AssignAll` it holds every partition.
//! - Offsets: `end_offset` is the high watermark, `start_offset` the low
//!   one; `known_end` is one past this node's own acknowledged appends
//!   (`acked_ends.rs`), for lag and staleness. A reader stuck behind acknowledged entries is opened
//!   again on a consumer bootstrapped from other brokers
//!   (`Log::reader_elsewhere`).
//!   After each durable store flush the applied offset is committed to the
//!   consumer group (`tern.group.<group>`, or `tern.node.<node id>` in assign-all mode),
//!   for lag monitoring only.

mod acked_ends;
mod breaker;
mod entry_mac;
mod fetch_source;
mod group;
mod outputs;
mod producer;
mod publisher;
mod reader;
mod rebootstrap;
mod sources;
mod topic_id;
mod topic_limits;

pub use group::{group_id, Membership};
pub use publisher::ID_HEADER;
mod config;
mod kafka_log;

pub use self::config::{KafkaLogConfig, KafkaSecurity};
pub use self::entry_mac::EntryKey;
pub use self::kafka_log::{KafkaLog, ENTRY_BYTES_MAX};
