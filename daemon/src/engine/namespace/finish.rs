//! The last steps of a box start, done from inside the box before any
//! command runs: `boxd __nsfinish PID [PORT]` joins the box's user and
//! mount namespaces (as box root) and
//!
//! - binds `/proc/sys`, `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus`
//!   and `/proc/kcore` read-only over themselves, so that nothing in the
//!   box can write kernel settings even where the kernel would let a
//!   process of its ids (the host's settings are not the box's to change,
//!   whatever its ids);
//! - for a box with egress, listens on `127.0.0.1:PORT` in the box's network
//!   namespace and passes the socket back on its channel
//!   ([`super::egress`] serves the proxy on it from the host side).
//!
//! The helper reports `fail MESSAGE` on its channel, or sends the socket,
//! or a lone `ok`.

use std::ffi::OsString;
use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::mount::{MsFlags, mount};
use nix::sched::CloneFlags;
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};

use super::helper::{CHANNEL_FD, Helper};
use crate::error::{Error, Result};

/// The argument that selects [`helper_main`] in `main`.
pub const HELPER_ARG: &str = "__nsfinish";

/// What a box's `/proc` shows read-only.
pub const READ_ONLY_PROC: [&str; 5] = ["sys", "sysrq-trigger", "irq", "bus", "kcore"];

/// Finishes the box whose init is `pid`; with `port`, returns the egress
/// proxy's listening socket inside the box.
pub async fn finish(pid: i32, port: Option<u16>) -> Result<Option<std::net::TcpListener>> {
    let mut helper = Helper::new(HELPER_ARG)?;
    helper
        .cmd
        .arg(pid.to_string())
        .args(port.map(|p| p.to_string()))
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let (mut child, ours) = helper.spawn("the box's finishing helper")?;
    let received = tokio::task::spawn_blocking(move || super::egress::receive(&ours))
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
    let _ = child.wait().await;
    match received {
        Ok(Some(fd)) => Ok(Some(std::net::TcpListener::from(fd))),
        Ok(None) if port.is_none() => Ok(None),
        Ok(None) => Err(Error::Engine(
            "the box's finishing helper sent no socket".into(),
        )),
        Err(why) => Err(Error::Engine(format!("the box could not start: {why}"))),
    }
}

/// `boxd __nsfinish PID [PORT]`. Runs before anything else in `main`,
/// single-threaded.
pub fn helper_main(args: Vec<OsString>) -> ! {
    // SAFETY: fd 3 was set up by the daemon for us.
    let mut channel = unsafe { UnixStream::from_raw_fd(CHANNEL_FD) };
    let code = match run(&args) {
        Ok(None) => i32::from(channel.write_all(b"ok").is_err()),
        Ok(Some(listener)) => {
            let fds = [listener.as_raw_fd()];
            let cmsg = [ControlMessage::ScmRights(&fds)];
            // A stream socket carries ancillary data only with a byte.
            let sent = sendmsg::<()>(
                channel.as_raw_fd(),
                &[IoSlice::new(b"L")],
                &cmsg,
                MsgFlags::empty(),
                None,
            );
            i32::from(sent.is_err())
        }
        Err(why) => {
            let _ = channel.write_all(format!("fail {why}").as_bytes());
            1
        }
    };
    std::process::exit(code)
}

fn run(args: &[OsString]) -> std::result::Result<Option<std::net::TcpListener>, String> {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str());
    let pid: i32 = word(0)
        .and_then(|w| w.parse().ok())
        .ok_or("bad helper arguments")?;
    let port: Option<u16> = match word(1) {
        Some(w) => Some(w.parse().map_err(|_| "bad port")?),
        None => None,
    };
    let open = |what: &str| -> std::result::Result<OwnedFd, String> {
        std::fs::File::open(format!("/proc/{pid}/{what}"))
            .map(OwnedFd::from)
            .map_err(|e| format!("the box is not running ({what}: {e})"))
    };
    let (user, mnt, net, root) = (
        open("ns/user")?,
        open("ns/mnt")?,
        open("ns/net")?,
        open("root")?,
    );
    nix::sched::setns(&user, CloneFlags::CLONE_NEWUSER)
        .map_err(|e| format!("joining the box (user): {e}"))?;
    let _ = nix::unistd::setgroups(&[]);
    super::userns::become_root(false)?;
    nix::sched::setns(&mnt, CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("joining the box (mount): {e}"))?;
    nix::unistd::fchdir(&root).map_err(|e| format!("fchdir: {e}"))?;
    nix::unistd::chroot(".").map_err(|e| format!("chroot: {e}"))?;
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
    nix::sched::setns(&net, CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("joining the box (net): {e}"))?;
    std::net::TcpListener::bind(("127.0.0.1", port))
        .map(Some)
        .map_err(|e| format!("listen on 127.0.0.1:{port} in the box: {e}"))
}
