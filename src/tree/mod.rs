//! The JSON tree: the Firebase Realtime Database model on Tern's records.
//!
//! A tree lives in one pk of a namespace (`TREE_PK`), so it is one
//! partition: a write at any path (and a multi-path update) is one mutation,
//! atomic like every other. Each primitive is a record whose sk is its path
//! (`path.rs`), so a subtree is one range of sort keys (`store/tree.rs`). Writes
//! are logged as tree ops, path and JSON, and expanded into leaves at apply
//! time (`apply/tree.rs`): replacing a large subtree is one small log entry and a
//! bounded number of keys in memory, and everything Firebase evaluates on
//! the server (server values, ETag conditions) is evaluated there,
//! deterministically, on every replica.
//!
//! This module is the model alone (pure functions on paths and JSON); the
//! store reads trees (`store/tree.rs`) and the apply loop writes them
//! (`apply/tree.rs`).
//!
//! Owns: paths, the leaf encoding, checks of tree writes, server values,
//! ETags, queries. Never: touches a store, decides who may read or write
//! (`rules`), or talks HTTP.

pub mod index;
pub mod path;
pub mod query;
pub mod value;

pub use path::TREE_PK;
pub use value::validate_write;
