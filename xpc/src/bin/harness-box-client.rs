//! The bridge: JSONL frames on stdin/stdout, carried over XPC to the
//! service `com.qoder.harness-studio.box`. macOS only.

#[cfg(target_os = "macos")]
fn main() {
    harness_box_xpc::macos::client_main()
}

#[cfg(not(target_os = "macos"))]
fn main() {
    eprintln!("harness-box-client talks XPC: it runs on macOS only (use `boxctl jsonl` here)");
    std::process::exit(2);
}
