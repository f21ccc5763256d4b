//! Where the harness finds what it runs, resolved once at start from its
//! flags: the `tern` binary under test, this harness (it serves the hello
//! server and the fan-out floor itself), and the repository's scripts.
//! Nothing is baked in at build time, so a built harness runs from any
//! checkout and can measure any `tern` binary (`--tern`), e.g. two builds
//! in alternating runs.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub(crate) struct Paths {
    /// The `tern` binary under test.
    pub tern: PathBuf,
    /// This harness (`tern-bench`), for the peers it serves itself.
    pub harness: PathBuf,
    /// The repository root: `scripts/` and `bench/chart.py` live there.
    pub repo: PathBuf,
}

static PATHS: OnceLock<Paths> = OnceLock::new();

/// Resolves and checks the paths: `tern` defaults to the `tern` binary
/// beside this one (both build into the same target directory), `repo` to
/// the current directory (`scripts/bench.sh` runs from the repository root).
pub(crate) fn init(tern: Option<PathBuf>, repo: Option<PathBuf>) -> anyhow::Result<()> {
    let harness = std::env::current_exe()?;
    let tern = match tern {
        Some(path) => path,
        None => harness.with_file_name("tern"),
    };
    anyhow::ensure!(tern.is_file(), "no tern binary at {} (build it, or pass --tern PATH)", tern.display());
    let repo = match repo {
        Some(path) => path,
        None => std::env::current_dir()?,
    };
    anyhow::ensure!(
        repo.join("scripts/kafka.sh").is_file(),
        "{} is not the Tern repository (no scripts/kafka.sh): run from its root or pass --repo DIR",
        repo.display()
    );
    let paths = Paths { tern, harness, repo };
    assert!(PATHS.set(paths).is_ok(), "paths are resolved once");
    Ok(())
}

fn get() -> &'static Paths {
    PATHS.get().expect("paths::init runs before any benchmark")
}

pub(crate) fn tern() -> &'static Path {
    &get().tern
}

pub(crate) fn harness() -> &'static Path {
    &get().harness
}

/// `scripts/<name>` of the repository.
pub(crate) fn script(name: &str) -> PathBuf {
    get().repo.join("scripts").join(name)
}

/// A file of the repository's `bench/` folder.
pub(crate) fn bench_file(name: &str) -> PathBuf {
    get().repo.join("bench").join(name)
}

/// A file of the repository, by its path from the root.
pub(crate) fn repo_file(path: &str) -> PathBuf {
    get().repo.join(path)
}
