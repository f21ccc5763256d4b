//! The table of every setting in `docs/settings.md`, generated from
//! `SETTINGS` (a test fails when that file is stale).

use super::table::{Settings, SETTINGS};

impl Settings {
    /// The settings as a Markdown table (`docs/settings.md` is this, generated).
    pub fn markdown_table() -> String {
        let mut out = String::from("| key (file) | flag | environment | default | bound | meaning |\n|---|---|---|---|---|---|\n");
        for s in SETTINGS {
            let cell = |text: String| text.replace('|', "\\|");
            let flag = if s.list { format!("`--{} V[,V]`", s.flag()) } else { format!("`--{}`", s.flag()) };
            out.push_str(&format!(
                "| `{}` | {flag} | `{}` | `{}` | {} | {} |\n",
                s.name,
                s.env(),
                cell(s.default_text()),
                cell(s.bound.describe()),
                cell(s.doc())
            ));
        }
        out
    }
}
