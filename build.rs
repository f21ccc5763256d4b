//! Generates the Rust types of the log entry format from `proto/`.
//! Needs `protoc` (Debian's `protobuf-compiler`, installed by `scripts/setup.sh`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/tern/log/v1/mutation.proto");
    // The commit this binary is built from (`tern_build_info`), or
    // `unknown` outside a git checkout.
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TERN_GIT_COMMIT={commit}");
    // Built again when the commit moves: HEAD, the branch refs, packed refs
    // (wherever the git directory is: a worktree's `.git` is a file).
    let git_dir = std::process::Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| std::path::PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(git_dir) = git_dir {
        for watched in ["HEAD", "refs/heads", "packed-refs"] {
            let path = git_dir.join(watched);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    prost_build::Config::new()
        // Values decode as `Bytes` slices of the log entry: no copy per op.
        .bytes(["."])
        .compile_protos(&["proto/tern/log/v1/mutation.proto"], &["proto"])?;
    Ok(())
}
