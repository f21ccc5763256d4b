//! The `tern` command line: `dev` and `serve` run a node; the client commands
//! (`put`, `get`, `del`, `ls`, `history`, `mget`, `batch`, `watch`, `ns`, `cluster`, `snapshot`, ...)
//! talk to one over HTTP.
//! (The benchmark harness is a program of its own: `tern-bench`, in `bench/`.)

mod args;
mod batch;
mod client;
mod exit;
mod procedure;
mod run;
mod table;
mod token;
mod watch;

pub use self::args::{Cli, Command, DevArgs, ServeArgs};
pub use self::exit::status_of as exit_status_of;
pub use self::run::main;
