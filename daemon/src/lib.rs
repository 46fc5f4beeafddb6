//! `boxd`, the per-user box daemon, as a library: everything but the
//! process's start-up (`main.rs`). A library so that the fuzz targets
//! (`fuzz/`) reach request validation and the namespace engine's option
//! translation. See docs/ARCHITECTURE.md for the map.

pub mod activation;
pub mod config;
pub mod doctor;
pub mod egress;
pub mod engine;
pub mod error;
pub mod exec_log;
pub mod execs;
pub mod host_programs;
pub mod image;
pub mod limits;
pub mod listener;
pub mod lock;
pub mod logging;
pub mod model;
pub mod registry;
pub mod service;
pub mod validate;
