//! The last steps of a box start, done by the box's zygote
//! ([`super::nsexec`]) once it has entered the box (as box root, in the
//! box's user, mount and network namespaces) and before it confines
//! itself or forks any command:
//!
//! - binds `/proc/sys`, `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus`
//!   and `/proc/kcore` read-only over themselves, so that nothing in the
//!   box can write kernel settings even where the kernel would let a
//!   process of its ids (the host's settings are not the box's to change,
//!   whatever its ids);
//! - for a box with egress, listens on `127.0.0.1:PORT` in the box's network
//!   namespace; the zygote passes the socket to its supervisor with its
//!   first reply ([`super::nsexec::Reply::Ready`]), and [`super::egress`]
//!   serves the proxy on it from the host side.
//!
//! Doing this in the zygote, not in a helper of its own, saves a start one
//! process (its spawn, its entry into the box and its exit).

use nix::mount::{MsFlags, mount};

/// What a box's `/proc` shows read-only.
pub const READ_ONLY_PROC: [&str; 5] = ["sys", "sysrq-trigger", "irq", "bus", "kcore"];

/// Finishes the box this process has entered (its root is `/`); with
/// `port`, returns the egress proxy's listening socket inside the box.
pub fn in_the_box(port: Option<u16>) -> Result<Option<std::net::TcpListener>, String> {
    for name in READ_ONLY_PROC {
        let path = format!("/proc/{name}");
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        mount(
            Some(path.as_str()),
            path.as_str(),
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| format!("bind {path}: {e}"))?;
        mount(
            None::<&str>,
            path.as_str(),
            None::<&str>,
            MsFlags::MS_BIND
                | MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV
                | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(|e| format!("make {path} read-only: {e}"))?;
    }
    let Some(port) = port else {
        return Ok(None);
    };
    std::net::TcpListener::bind(("127.0.0.1", port))
        .map(Some)
        .map_err(|e| format!("listen on 127.0.0.1:{port} in the box: {e}"))
}
