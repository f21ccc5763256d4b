//! The integration tests, in one binary (each test file of old was a binary
//! of its own that linked the whole crate: build time in CI). Most drive
//! real `tern` processes over HTTP, SSE and WebSocket (`common/`), against
//! a real Kafka broker and a real S3 server where they need one
//! (`scripts/test.sh` starts both); a few run nodes in this process.
//!
//! Only a test that needs a process of its own lives beside this folder:
//! `tests/kafka_log_drop.rs` counts this process's librdkafka threads.

// Tests spell out the tuples they compare; naming each would hide them.
#![allow(clippy::type_complexity)]

mod common;

mod aggdemo;
mod api;
mod auth;
mod bad_input;
mod bounds;
mod cluster;
mod cluster_auth;
mod crash;
mod deletion;
mod disk_faults;
mod firebase;
mod firebase_realtime;
mod firebase_rules;
mod forwarding;
mod fuzz;
mod handoff;
mod history;
mod hostile;
mod isolation;
mod journal;
mod kafka;
mod kafka_brokers;
mod kafka_outage;
mod kafka_security;
mod layers;
mod listing;
mod metrics;
mod net_faults;
mod once;
mod openapi;
mod procedures;
mod readme;
mod recovery;
mod regions;
mod replicas;
mod retention;
mod serve;
mod snapshot_restore;
mod snapshots;
mod tls;
mod waits;
mod watches;
mod web_clients;
mod words;
