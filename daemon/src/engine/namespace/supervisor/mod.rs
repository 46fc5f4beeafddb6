//! A box's supervisor: the process that owns a running namespace box and
//! its execs' stdio, so that both outlive the daemon. `serve.rs` is the
//! supervisor process, `client.rs` the daemon's side, `wire.rs` what they
//! say to each other, `ports.rs` the box's published ports.

pub mod client;
pub mod ports;
pub mod serve;
pub mod wire;

pub use client::Supervisor;
