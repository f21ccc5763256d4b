//! The API over HTTP/2 with prior knowledge (h2c), served with the `h2`
//! crate: one task per connection, which also runs the connection's watches.
//!
//! Why not hyper's HTTP/2 server: it runs every stream in a task of its own
//! and pipes each response body through generic layers, two polls per
//! chunk. At 10,000 SSE watches on 100 connections a put then woke
//! 10,000 tasks and wrote each event with a system call of its own (22,000
//! `writev`/s for 1,000 connection-puts/s); put → event read 28–34 ms p50.
//! Here (BENCHMARKS.md has the numbers after):
//!
//! - The watches (`GET /v1/ns/{ns}/watch`) are run by the connection's task
//!   (`watches.rs`): a put wakes that task once, it polls just the woken
//!   sessions, hands each stream its events, then the connection writes
//!   them all, a system call per 16 KiB of events.
//! - Firebase's streams (`GET /{path}.json`, `Accept: text/event-stream`)
//!   run there too, their messages translated by their `sse::Encoder`.
//! - Every other request is handed to the router in a task of its own (a
//!   slow one never holds up the connection), its body streamed from h2 and
//!   its response streamed back with h2's flow control.
//!
//! Bounds: `STREAMS_PER_CONNECTION_MAX` concurrent streams; per watch
//! stream, what `watches.rs` says (a stream whose window shuts holds its
//! session back; its queue conflates or cancels as its mode says).

mod connection;
mod watches;

pub(super) use self::connection::serve;
