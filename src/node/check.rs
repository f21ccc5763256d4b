//! `tern check DATA_DIR`: a node's data directory verified offline, each
//! file by the room that owns it (`store::check`, `log::embedded::check`,
//! `journal::check`), nothing changed. Run it on a stopped node: a store
//! open by a running node says so.

use std::path::Path;

use crate::log::embedded::check::Finding;
use crate::store::check::StoreVerdict;

/// What a check of a data directory found, in the order looked at.
pub struct DataDirCheck {
    pub findings: Vec<Finding>,
}

impl DataDirCheck {
    pub fn damaged(&self) -> usize {
        self.findings.iter().filter(|f| f.damaged).count()
    }
}

/// Checks every store, the embedded log and the journal under `data_dir`,
/// and lists what was set aside before.
pub fn check_data_dir(data_dir: &Path) -> std::io::Result<DataDirCheck> {
    if !data_dir.is_dir() {
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("{} is not a directory", data_dir.display())));
    }
    let mut findings = Vec::new();
    for path in files_under(&data_dir.join("stores"), "redb")? {
        findings.push(store_finding(&path));
    }
    for path in files_under(&data_dir.join("stores"), "rebuilding")? {
        let why = std::fs::read_to_string(&path).unwrap_or_else(|e| format!("unreadable: {e}"));
        findings.push(Finding::ok(path, format!("a rebuild cut short by a stop ({why}): the next start finishes it before the partition serves")));
    }
    for path in files_under(&data_dir.join("stores"), "restoring")? {
        findings.push(Finding::ok(path, "an unfinished restore, removed by the next one".to_string()));
    }
    if data_dir.join("log").is_dir() {
        findings.extend(crate::log::embedded::check::verify(&data_dir.join("log")));
    }
    if data_dir.join("journal").is_dir() {
        findings.extend(crate::journal::check::verify(&data_dir.join("journal")));
    }
    for path in files_under(&data_dir.join("damaged"), "redb")? {
        findings.push(Finding::ok(path, "a damaged store set aside earlier, kept for inspection".to_string()));
    }
    Ok(DataDirCheck { findings })
}

fn store_finding(path: &Path) -> Finding {
    let path_buf = path.to_path_buf();
    match crate::store::check::verify(path) {
        StoreVerdict::Intact { applied_next, records } => {
            Finding::ok(path_buf, format!("{records} records, applied below offset {applied_next}, state hash verifies"))
        }
        StoreVerdict::InUse => Finding::ok(path_buf, "open by a running node: stop it to check this store".to_string()),
        StoreVerdict::Damaged(why) => Finding::damaged(path_buf, format!("{why}: set aside and rebuilt at the next start (docs/damage.md)")),
    }
}

/// Files ending in `.extension` in `dir`'s subdirectories (one level:
/// `stores/<ns>/`, `damaged/<ns>/`), sorted.
fn files_under(dir: &Path, extension: &str) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    let Ok(subdirs) = std::fs::read_dir(dir) else { return Ok(files) };
    for subdir in subdirs {
        let subdir = subdir?;
        if !subdir.file_type()?.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(subdir.path())? {
            let path = file?.path();
            if path.extension().is_some_and(|e| e == extension) {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}
