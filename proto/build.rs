//! Compiles `proto/boxd/v1/boxd.proto` with protox (pure Rust), so building
//! needs no system `protoc`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["boxd/v1/boxd.proto"], ["proto"])?;
    // The descriptors themselves, for the daemon's server reflection.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("boxd_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    // `bytes` fields become `bytes::Bytes`: exec output is fanned out to
    // several attached clients without copying.
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
