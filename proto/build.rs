//! Compiles `proto/boxd/v1/boxd.proto` with protox (pure Rust), so building
//! needs no system `protoc`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["boxd/v1/boxd.proto"], ["proto"])?;
    // `bytes` fields become `bytes::Bytes`: exec output is fanned out to
    // several attached clients without copying.
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
