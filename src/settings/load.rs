//! Reading the settings: defaults, overridden by the config file
//! (`--config`), overridden by `TERN_*` variables and flags (`Overrides`:
//! clap merges those two, flags winning; `tern serve --help` lists them all).

use std::path::Path;

use super::setting::Setting;
use super::table::{Settings, SETTINGS};

impl Settings {
    /// Defaults, overridden by the config file at `file` (if any), overridden
    /// by `overrides` (flags and `TERN_*` variables).
    pub fn load(file: Option<&Path>, overrides: Overrides) -> anyhow::Result<Settings> {
        let mut settings = match file {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        for (name, values) in overrides.0 {
            let setting = SETTINGS.iter().find(|s| s.name == name).expect("overrides name settings");
            settings.set(name, values).map_err(|e| anyhow::anyhow!("--{} / {}: {e}", setting.flag(), setting.env()))?;
        }
        Ok(settings)
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
    }
}

/// The settings given as flags or `TERN_*` environment variables (clap reads
/// both; a flag wins over its variable): `(name, values)` in table order.
/// `tern serve` flattens it into its arguments.
#[derive(Debug, Clone, Default)]
pub struct Overrides(pub(super) Vec<(&'static str, Vec<String>)>);

impl clap::FromArgMatches for Overrides {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let given = SETTINGS.iter().filter_map(|s| matches.get_many::<String>(s.name).map(|values| (s.name, values.cloned().collect()))).collect();
        Ok(Overrides(given))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Overrides::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for Overrides {
    fn augment_args(command: clap::Command) -> clap::Command {
        SETTINGS.iter().fold(command, |command, s| command.arg(argument(s)))
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Overrides::augment_args(command)
    }
}

/// The flag of one setting, with its variable, doc, default and bound in `--help`.
fn argument(s: &Setting) -> clap::Arg {
    let default = s.default_text();
    let bound = s.bound.describe();
    let mut long_help = format!("{}\n[default: {default}]", s.doc());
    if !bound.is_empty() {
        long_help.push_str(&format!(" [bound: {bound}]"));
    }
    let arg =
        clap::Arg::new(s.name).long(s.flag()).env(s.env()).value_name("VALUE").help(format!("{} [default: {default}]", s.doc())).long_help(long_help);
    match (s.list, s.switch) {
        (true, _) => arg.action(clap::ArgAction::Append).value_delimiter(','),
        (false, true) => arg.action(clap::ArgAction::Set).num_args(0..=1).default_missing_value("true"),
        (false, false) => arg.action(clap::ArgAction::Set),
    }
}
