//! Builds the namespace engine's box init (`src/engine/namespace/init.c`)
//! as a static executable that the daemon embeds.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/engine/namespace/init.c");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("boxd-init");
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    let status = compiler
        .to_command()
        .args(["-static", "-s", "-o"])
        .arg(&out)
        .arg("src/engine/namespace/init.c")
        .status()
        .expect("run the C compiler");
    assert!(
        status.success(),
        "building the static box init failed; install a C compiler and static libc (Debian: apt-get install gcc libc6-dev)"
    );
}
