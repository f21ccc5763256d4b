//! Tern: a replicated, realtime key-value database for read-heavy
//! configuration data. See ARCHITECTURE.md for the map of this crate.

pub mod cluster;
pub mod codec;
pub mod limits;
pub mod log;
pub mod metrics;
pub mod partitioner;
pub mod position;
pub mod prefetch;
pub mod store;
pub mod apply;
pub mod node;
pub mod api;
pub mod bench;
pub mod cli;
pub mod config;
pub mod server;
pub mod snapshot;
pub mod subscriptions;
