//! The boxd API, generated from `proto/boxd/v1/boxd.proto`, with what the
//! daemon and its clients must agree on beside it: where the socket is
//! ([`paths`], and [`lockfile`]: which daemon holds a home and where it
//! serves) and the transport's limits ([`wire`]).
//!
//! `tonic` and `prost` are re-exported so that every client and the daemon
//! use exactly the versions the code was generated for.

pub mod lockfile;
pub mod paths;

pub use bytes;
pub use prost;
pub use tonic;

/// Package `boxd.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("boxd.v1");

    /// The API version string reported by `Describe`.
    pub const PROTOCOL: &str = "boxd.v1";

    /// `boxd.proto` as an encoded `FileDescriptorSet`, served by the
    /// daemon's server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/boxd_descriptor.bin"));

    /// The service's full name, as health checks name it.
    pub const SERVICE: &str = "boxd.v1.Boxd";
}

/// Transport settings the daemon and every client must agree on.
pub mod wire {
    /// HTTP/2 flow-control windows. The 64 KiB default caps a local stream
    /// at a fraction of what a pipe carries; these keep backpressure
    /// (bounded bytes in flight) while letting bulk output run.
    pub const STREAM_WINDOW: u32 = 4 << 20;
    pub const CONNECTION_WINDOW: u32 = 16 << 20;
    /// The largest HTTP/2 frame each side takes. At the 16 KiB default an
    /// exec's output crosses in a frame (and a system call on each side)
    /// per 16 KiB; at this size one chunk of output is one frame.
    pub const MAX_FRAME: u32 = 1 << 20;
    /// The largest gRPC message either side accepts. Requests are small
    /// (the largest legitimate ones carry up to 2 MiB of environment and
    /// command line); bulk data moves as a stream of chunks.
    pub const MAX_MESSAGE: usize = 16 << 20;
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
