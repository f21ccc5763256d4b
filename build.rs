//! Generates the Rust types of the log entry format from `proto/`.
//! Needs `protoc` (Debian's `protobuf-compiler`, installed by `scripts/setup.sh`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/tern/log/v1/mutation.proto");
    prost_build::Config::new()
        // Values decode as `Bytes` slices of the log entry: no copy per op.
        .bytes(["."])
        .compile_protos(&["proto/tern/log/v1/mutation.proto"], &["proto"])?;
    Ok(())
}
