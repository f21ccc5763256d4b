//! The transport and the front: accepting connections, telling HTTP/1.1
//! from h2c, TLS, idle and shutdown bounds (`listener.rs`, `tls.rs`),
//! HTTP/2 connections served with the `h2` crate, which run their own
//! watch streams (`h2c/`), request targets with the raw bytes curl sends
//! (`"`) made acceptable to hyper (`lenient_target.rs`), and the front every request goes through
//! (`front.rs`), which sends `/v1/…` to the native API and Firebase's
//! paths to Firebase.
//!
//! This room sits above both protocols (it hands them requests); neither
//! imports it (what it knows of a connection travels as one request
//! extension, `edge::Transport`).

mod front;
mod h2c;
mod lenient_target;
mod listener;
pub mod tls;

pub use self::front::{app, app_with, messages, routes, service, Protocols};
pub use self::listener::{serve, ConnectionLimits};
