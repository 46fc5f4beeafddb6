//! How boxd's host side opens paths that something less trusted may
//! control: a box (which plants symlinks in the directories it shares with
//! the host), an image, an archive.
//!
//! - [`beneath`]: resolving a relative path inside a directory with no
//!   symlink, no `..` and no absolute component anywhere on the way
//!   (`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or a walk of
//!   `O_NOFOLLOW` opens where the kernel lacks it);
//! - [`archive`]: `docker cp`'s tar archives, packed (in a box) and
//!   unpacked (on the host, and in a box) by descriptor;
//! - [`roots`]: host paths a box, an agent or a client can influence,
//!   used beneath a directory held open since its policy was set (the MCP
//!   server's allowed directories, the ACP proxy's mounts, `boxctl cp`'s
//!   destination): finding, reading, writing, packing and unpacking as one
//!   descriptor walk each, never following a symlink;
//! - [`trust`]: whether a socket, and the process answering on it, may be
//!   trusted with a user's requests.
//!
//! The daemon (image store, box archives, the copies a box's zygote runs,
//! its listener and doctor) and the clients (`boxctl cp`, every connection,
//! the ACP proxy's mapping of an agent's paths to the host) share these, so
//! a fix lands in every place that needs it, and the daemon depends on no
//! client.

pub mod archive;
pub mod beneath;
pub mod roots;
pub mod trust;
