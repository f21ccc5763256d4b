//! Firebase Realtime Database compatibility, on the same listener as
//! `/v1`: the REST API (`/{path}.json`), its streaming form (`Accept:
//! text/event-stream`), the rules file (`/.settings/rules.json`) and the
//! realtime protocol at `/.ws` that the official SDKs speak
//! (`docs/firebase.md`).
//!
//! The database is the namespace named by the `ns` query parameter (the
//! emulator's convention; `default` without one), its tree the pk
//! `tree::TREE_PK`. Errors are Firebase's: `{"error": "<message>"}` with
//! its statuses.
//!
//! The protocols (`dispatch.rs` → `rest.rs`, `stream.rs`, `rules_file.rs`;
//! `realtime/`) sit on the edge (`edge/`) and never import the native API;
//! what a node keeps for its databases (rules, indexes, onDisconnect
//! registrations and their sweeper, push ids) is `db/`, below the edge;
//! the rules language is `rules/`; a write judged by the rules and
//! committed as one step (what the rules read, checked at apply) is
//! `commit.rs`.

mod caller;
mod commit;
pub mod db;
mod dispatch;
mod error;
mod query;
pub mod realtime;
mod response;
mod rest;
mod routes;
pub mod rules;
mod rules_file;
mod state;
mod stream;

pub use self::dispatch::{handle, is_stream_request, open_h2c_stream};
pub use self::error::{refusal, FbError};
pub use self::routes::{is_firebase_path, routes};
pub use self::state::{Firebase, FirebaseConfig};
