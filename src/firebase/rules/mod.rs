//! Firebase security rules: parsed when they are saved, evaluated for every
//! Firebase request that is not the admin's.
//!
//! Semantics (Firebase's): `.read` and `.write` cascade — a rule that
//! allows at a location allows everything below it, and nothing deeper
//! takes that back; `.validate` does not cascade and must hold at every
//! location the write changes (where the new data is not null), including
//! the locations above the write; rules are not filters — a read is
//! allowed or denied as a whole. A `$name` key matches any child and binds
//! `$name`. An expression that fails counts as false; evaluating a
//! request's rules is bounded (`eval::STEPS_MAX`, `eval::READS_MAX`).
//!
//! Rules are checked on the node that takes the request, against its
//! applied state, before the write is logged (as Firebase checks them on its
//! server before it commits); conditions that must agree on every replica
//! (ETags, server values) are decided at apply time instead.
//!
//! Owns: the rules language and its evaluation. Never: reads a store
//! itself (it sees data through `eval::Data`), or answers HTTP.
//!
//! `ruleset.rs` holds the parsed rules and the cascade; `expr.rs` the
//! expression language; `eval.rs` evaluation with its bounds.

pub mod eval;
pub mod expr;
mod ruleset;

pub use self::ruleset::{Rules, LOCKED, OPEN, RULES_BYTES_MAX};
