//! The Firebase realtime protocol: the WebSocket at `/.ws?v=5&ns=NAME`
//! that the official client SDKs (web, Node, mobile) and the Admin SDKs
//! speak, so apps move to Tern unchanged. `docs/firebase.md` tells what
//! the SDK sends and expects, in order; the SDK's own source (the
//! `@firebase/database` package) is the reference.
//!
//! - `wire.rs`: envelopes, framing of long messages, the hello;
//! - `connection.rs`: one connection's task (its listens' watches, the
//!   order of answers and events, bounds, keep-alives);
//! - `requests.rs`: what each request does (listen, write, transaction,
//!   get, auth, onDisconnect);
//! - `hash.rs`: the SDK's value hash, which transactions compare;
//! - `upgrade.rs`: the WebSocket upgrade, the connection's first
//!   credential, the redirect to a holder, the close at shutdown.
//!
//! onDisconnect writes (made once a connection goes, exactly once, also
//! when its node dies) are the database's: `db/ondisconnect.rs`.
//!
//! A connection is to one database (the `ns` parameter). A node that does
//! not hold the database's tree partition answers the handshake with a
//! reset to a node that does (the SDK reconnects there), as Firebase
//! redirects a client to its database's server.

mod connection;
mod hash;
mod requests;
mod upgrade;
pub(crate) mod wire;

pub use self::requests::ACTIONS;
pub use self::upgrade::{upgrade, Closing, PATH};
