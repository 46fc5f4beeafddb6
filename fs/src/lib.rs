//! How boxd's host side opens paths that something less trusted may
//! control: a box (which plants symlinks in the directories it shares with
//! the host), an image, an archive.
//!
//! - [`beneath`]: resolving a relative path inside a directory with no
//!   symlink, no `..` and no absolute component anywhere on the way
//!   (`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or a walk of
//!   `O_NOFOLLOW` opens where the kernel lacks it).
//!
//! The daemon (image store, box archives) and the clients (the ACP proxy's
//! mapping of an agent's paths to the host) share these, so a fix lands in
//! every place that needs it.

pub mod beneath;
