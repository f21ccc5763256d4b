//! The API's transport: accepting connections, telling HTTP/1.1 from h2c,
//! idle and shutdown bounds (`listener.rs`), and HTTP/2 connections served
//! with the `h2` crate, which run their own watch streams (`h2c/`).
//!
//! Handlers never import this module: it sits above them and hands them
//! requests (`ConnectionId` travels as a request extension).

pub(crate) mod h2c;
pub(crate) mod listener;
pub mod tls;

pub use self::listener::serve;
