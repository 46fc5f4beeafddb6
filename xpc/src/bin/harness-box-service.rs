//! The XPC service `com.qoder.harness-studio.box`: one JSONL driver per
//! XPC connection, speaking gRPC to boxd. macOS only.

#[cfg(target_os = "macos")]
fn main() {
    harness_box_xpc::macos::service_main()
}

#[cfg(not(target_os = "macos"))]
fn main() {
    eprintln!(
        "harness-box-service is an XPC service: it runs on macOS only (use `boxctl jsonl` here)"
    );
    std::process::exit(2);
}
