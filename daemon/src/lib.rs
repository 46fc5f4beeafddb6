//! `boxd`, the per-user box daemon, as a library: everything but the
//! process's start-up (`main.rs`). A library so that the fuzz targets
//! (`fuzz/`) reach request validation and the namespace engine's option
//! translation. See docs/ARCHITECTURE.md for the map.

pub mod activation;
pub mod authority;
pub mod config;
pub mod discovery;
pub mod doctor;
pub use boxd_egress as egress;
pub mod engine;
pub mod error;
pub mod exec_log;
pub mod execs;
pub mod host_programs;
pub mod image;
pub mod intake;
pub mod limits;
pub mod listener;
pub mod lock;
pub mod logging;
pub mod model;
pub mod registry;
pub mod service;
pub mod validate;

/// Runs the helper mode `argv[1]` names, if it names one, and never
/// returns then: the namespace engine's helpers and the image store's
/// unpack as box root. Both `boxd` and `boxd-box` start here, before any
/// thread exists (a helper joins a user namespace), so the two binaries
/// always know the same modes.
pub fn run_helper_mode() {
    let Some(mode) = std::env::args_os().nth(1) else {
        return;
    };
    let Some(mode) = mode.to_str() else {
        return;
    };
    let rest = || std::env::args_os().skip(2).collect();
    engine::namespace::helper_main(mode, rest);
    if mode == image::UNPACK_HELPER_ARG {
        image::unpack_helper_main(rest());
    }
}
