//! Verifying a journal's directory offline (`tern check`): its log (the
//! embedded log's check), its id and its released marks, without changing
//! anything.

use std::path::Path;

use super::local::{is_journal_id, ID_FILE, RELEASED_FILE};
use crate::log::embedded::check::{self, Finding};

/// Checks the journal in `dir`.
pub fn verify(dir: &Path) -> Vec<Finding> {
    let mut findings = check::verify(dir);
    let id = dir.join(ID_FILE);
    findings.push(match std::fs::read(&id) {
        Ok(bytes) if std::str::from_utf8(&bytes).is_ok_and(|text| is_journal_id(text.trim())) => Finding::ok(id, "a valid id".to_string()),
        Ok(_) => Finding::damaged(
            id,
            "not an id (32 hex digits): made again at the next start if the journal holds nothing, refused if it holds entries (docs/damage.md)"
                .to_string(),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Finding::ok(id, "none yet (made at the first start)".to_string()),
        Err(e) => Finding::damaged(id, format!("cannot read: {e}")),
    });
    let released = dir.join(RELEASED_FILE);
    findings.push(match std::fs::read(&released) {
        Ok(bytes) => match super::local::decode_released(&bytes) {
            Ok(marks) => Finding::ok(released, format!("{} partitions' marks", marks.len())),
            // Derivable: not damage that loses anything, but damage all the same.
            Err(e) => {
                Finding::damaged(released, format!("unreadable ({e}): the entries held are sequenced again at the next start, and applied once"))
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Finding::ok(released, "none yet".to_string()),
        Err(e) => Finding::damaged(released, format!("cannot read: {e}")),
    });
    findings
}
