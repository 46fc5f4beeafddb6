//! The macOS XPC shim, as thin as it can be: an XPC service
//! (`com.qoder.harness-studio.box`, binary `harness-box-service`) and its
//! stdio bridge (`harness-box-client`). Frames travel as XPC messages, one
//! JSONL frame per message under [`FRAME_KEY`]; the service runs the JSONL
//! driver (`boxd_client::jsonl`) per connection, which speaks gRPC to
//! `boxd`, and sends every reply and event back, the `transport` frame
//! first.
//!
//! Everything but the XPC calls is in [`relay`], compiled and tested on
//! Linux. The XPC calls (`macos`) compile on macOS only and are not
//! verified on the Linux machines this is developed on; `docs/service.md`
//! says how to verify them on a Mac.

pub mod relay;

#[cfg(target_os = "macos")]
pub mod macos;

/// The XPC service's name (its bundle identifier in `XPCServices/`).
pub const SERVICE_NAME: &str = "com.qoder.harness-studio.box";

/// The one field of every XPC message: a JSONL frame, without its newline.
pub const FRAME_KEY: &str = "frame";
