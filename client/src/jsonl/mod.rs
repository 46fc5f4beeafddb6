//! The JSONL envelope (`+jsonl-v1`, see `docs/api.md` and the envelope
//! spec): the pieces that do not depend on stdio, shared by `boxctl jsonl`
//! and any other front end that speaks the envelope.
//!
//! - [`driver`]: the dispatcher: frames to gRPC calls, replies and events
//!   back through one bounded queue;
//! - [`methods`]: the methods as one serde-tagged enum with typed params,
//!   and the method list `host.describe` reports;
//! - [`replies`]: typed replies and events;
//! - [`frame`]: request parsing and the error codes (one to one with gRPC);
//! - [`lines`]: bounded request lines (4 MiB), overlong lines skipped;
//! - [`output`]: exec output as `data`/`dataBase64` payloads, never
//!   splitting a UTF-8 sequence, each within the 16 MiB frame bound.

pub mod driver;
pub mod frame;
pub mod lines;
pub mod methods;
pub mod output;
pub mod replies;
