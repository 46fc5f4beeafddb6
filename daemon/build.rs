//! Builds the namespace engine's box init (`src/engine/namespace/init.c`)
//! as a static executable that the daemon embeds.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/engine/namespace/init.c");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("boxd-init");
    // The compiler only, without CFLAGS: sanitizer flags (cargo fuzz) and
    // `-static` do not mix, and the init needs none of them.
    let compiler = cc::Build::new().get_compiler();
    let status = std::process::Command::new(compiler.path())
        .args(["-O2", "-static", "-s", "-o"])
        .arg(&out)
        .arg("src/engine/namespace/init.c")
        .status()
        .expect("run the C compiler");
    assert!(
        status.success(),
        "building the static box init failed; install a C compiler and static libc (Debian: apt-get install gcc libc6-dev)"
    );
}
