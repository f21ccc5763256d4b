//! `Setting`: one setting as the docs, the flags and the checks see it.

use super::table::Settings;
use super::value::Bound;

/// One setting as the docs, the flags and the checks see it.
pub struct Setting {
    /// The config-file key.
    pub name: &'static str,
    /// The flag without its dashes, when it is not the name with dashes.
    pub(super) flag: Option<&'static str>,
    /// The doc comment, one line per source line.
    pub(super) doc: &'static str,
    pub bound: Bound,
    /// Whether the flag takes several values.
    pub(super) list: bool,
    /// Whether the flag may stand alone (a bool: `--auth` is `--auth true`).
    pub(super) switch: bool,
}

impl Setting {
    /// `--flag-name`, without the dashes.
    pub fn flag(&self) -> String {
        self.flag.map_or_else(|| self.name.replace('_', "-"), str::to_string)
    }

    /// `TERN_NAME`.
    pub fn env(&self) -> String {
        format!("TERN_{}", self.name.to_ascii_uppercase())
    }

    /// The doc as one paragraph.
    pub fn doc(&self) -> String {
        self.doc.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
    }

    /// The default, as shown.
    pub fn default_text(&self) -> String {
        Settings::default().show(self.name)
    }
}
