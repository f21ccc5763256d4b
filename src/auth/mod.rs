//! Who is asking, and what they may do (issue 20).
//!
//! A request carries `Authorization: Bearer TOKEN`. A token is one of:
//! - the **root token**, read from the admin token file (`tern dev --auth`:
//!   `<data-dir>/admin.token`, made at first start with mode 0600): every
//!   verb everywhere, system namespaces included; the nodes of a cluster
//!   share it (they also use it to read the API keys from each other);
//! - an **API key** (`keys.rs`): `tern_<id>_<secret>`, stored hashed in the
//!   system namespace through the log, made and revoked with
//!   `tern token create|ls|revoke`; its grants are stored with it;
//! - a **JWT** (`jwt.rs`) verified against configured keys; its grants are
//!   a claim, and its claims are Firebase rules' `auth`.
//!
//! What an identity may do is decided by its grants (`grant.rs`: deny by
//! default, the most specific grant wins). Failed authentications are
//! rate-limited per source address (`limiter.rs`).
//!
//! Owns: token formats, verification, grants and the decision, and keeping
//! each node's key ring current (`key_refresh.rs`). Never: answering HTTP
//! (`edge/access.rs` turns this into 401 and 403), writing keys (the API
//! writes their records through the log).

pub mod grant;
pub mod jwt;
pub mod key_refresh;
pub mod keys;
pub mod limiter;

pub use self::grant::{Denied, Grant, Verb, Verbs};

/// The system namespace that holds the API keys (pk `KEYS_PK`, sk = key id).
/// Its name cannot be a user's (names start with a letter or digit), and
/// no grant's `*` covers it.
pub use crate::node::reserved::{KEYS_PK, SYSTEM_NAMESPACE};
mod authenticator;
mod identity;
mod root_token;

pub use self::authenticator::{AuthConfig, Authenticator};
pub use self::identity::{AuthError, Identity};
pub use self::root_token::load_or_create_root_token;
