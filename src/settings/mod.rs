//! Node settings, from one source: the `settings!` table below. Each entry
//! is one setting: its doc, its name (the config-file key; the flag is
//! `--name-with-dashes`, the environment variable `TERN_NAME`), its type,
//! its default and its bound. From the table come the `Settings` struct (read
//! from a TOML file by serde), its defaults, the checks of every bound, the
//! `tern serve` flags and environment variables (`Overrides`, so
//! `tern serve --help` lists them all), and the table in `docs/settings.md`
//! (a test fails when that file is stale). No default is written anywhere
//! else: the subsystems' configs are built from `Settings` here.
//!
//! Layering: defaults, overridden by the config file (`--config`), overridden
//! by `TERN_*` variables and flags (clap merges those two, flags winning).

mod configs;
mod docs;
mod load;
mod setting;
mod table;
#[cfg(test)]
mod tests;
mod validate;
mod value;

pub use self::load::Overrides;
pub use self::setting::Setting;
pub use self::table::{Settings, SETTINGS};
pub use self::value::{Bound, Value};
