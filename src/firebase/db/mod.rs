//! Firebase's database beneath its protocols: what a node keeps and does
//! for the JSON trees it serves, with no HTTP and nothing of the edge
//! (this room sits below `edge/` in the floors: `tests/it/layers.rs`).
//!
//! - `databases.rs`: `Databases`, this node's state for every database;
//! - `rules_cache.rs`: each database's parsed rules, as applied here;
//! - `indexes.rs`: the query indexes a query walks, kept current from the
//!   fan-out ring;
//! - `tree_view.rs`: the tree as applied here, as rules read it;
//! - `ondisconnect.rs`: onDisconnect registrations, their firing (exactly
//!   once, by one conditional log entry) and the sweeper of orphans;
//! - `push_id.rs`: Firebase's ordered push ids.
//!
//! The protocols (`rest.rs`, `stream.rs`, `realtime/`) call it and turn
//! its errors into their own answers.

mod databases;
pub mod indexes;
pub mod ondisconnect;
mod push_id;
mod rules_cache;
mod tree_view;

pub use self::databases::Databases;
pub use self::rules_cache::{RULES_PK, RULES_SK};
pub use self::tree_view::{event_value, tree_view, TreeData};
