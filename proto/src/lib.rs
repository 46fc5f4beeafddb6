//! The boxd API, generated from `proto/boxd/v1/boxd.proto`.
//!
//! `tonic` and `prost` are re-exported so that every client and the daemon
//! use exactly the versions the code was generated for.

pub use bytes;
pub use prost;
pub use tonic;

/// Package `boxd.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("boxd.v1");

    /// The API version string reported by `Describe`.
    pub const PROTOCOL: &str = "boxd.v1";
}

impl v1::BoxState {
    /// The lower-case name used by the CLI and the JSONL envelope.
    pub fn label(self) -> &'static str {
        match self {
            v1::BoxState::Unspecified => "unknown",
            v1::BoxState::Created => "created",
            v1::BoxState::Starting => "starting",
            v1::BoxState::Running => "running",
            v1::BoxState::Stopping => "stopping",
            v1::BoxState::Stopped => "stopped",
            v1::BoxState::Removed => "removed",
            v1::BoxState::Failed => "failed",
        }
    }
}
