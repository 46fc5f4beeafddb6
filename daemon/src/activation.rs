//! Running under a service manager: a listening socket handed over at start
//! (systemd's `LISTEN_FDS`/`LISTEN_PID`, launchd's `launch_activate_socket`)
//! and readiness reported back (`sd_notify`'s `READY=1`).
//!
//! An inherited socket belongs to the service manager: boxd neither creates
//! nor removes it, and may exit when idle, to be started again on the next
//! connection.

use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixListener;

/// The first fd systemd passes.
const SD_LISTEN_FDS_START: RawFd = 3;

/// The listening socket the service manager passed, if any.
pub fn inherited() -> Result<Option<UnixListener>, String> {
    #[cfg(target_os = "macos")]
    if let Some(l) = launchd::activate("Listeners")? {
        return Ok(Some(l));
    }
    systemd()
}

/// systemd style: `LISTEN_PID` is this process and `LISTEN_FDS` ≥ 1; fd 3
/// is the socket. The variables are removed so that children do not see
/// them.
fn systemd() -> Result<Option<UnixListener>, String> {
    let pid_ok = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    let fds = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<i32>().ok())
        .unwrap_or(0);
    if !pid_ok || fds < 1 {
        return Ok(None);
    }
    if fds > 1 {
        return Err(format!(
            "{fds} sockets were passed (LISTEN_FDS); boxd takes exactly one"
        ));
    }
    // SAFETY: called before any thread is started; nothing else reads these.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    let fd = SD_LISTEN_FDS_START;
    let mut kind: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt on an fd we were given, into a c_int-sized buffer.
    let ok = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut kind as *mut libc::c_int).cast(),
            &mut len,
        )
    } == 0;
    if !ok || kind != libc::SOCK_STREAM {
        return Err("the passed fd 3 is not a stream socket".into());
    }
    // Not inherited by the processes boxd starts.
    // SAFETY: fcntl on an fd we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: fd 3 is a listening socket handed to us and used nowhere else.
    let listener = unsafe { UnixListener::from_raw_fd(fd) };
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("the passed socket: {e}"))?;
    Ok(Some(listener))
}

/// Tells systemd (when it asked, through `NOTIFY_SOCKET`) how things stand:
/// `READY=1` once serving, `STOPPING=1` when shutting down.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = name;
            Ok(0)
        }
    } else {
        sock.send_to(state.as_bytes(), std::path::Path::new(&path))
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "cannot notify the service manager");
    }
}

#[cfg(target_os = "macos")]
mod launchd {
    //! launchd style: the plist's `Sockets` entry, fetched by name.
    //! Unverified on these Linux machines; see docs/service.md.
    use std::os::fd::FromRawFd;
    use std::os::unix::net::UnixListener;

    unsafe extern "C" {
        fn launch_activate_socket(
            name: *const libc::c_char,
            fds: *mut *mut libc::c_int,
            cnt: *mut libc::size_t,
        ) -> libc::c_int;
    }

    pub fn activate(name: &str) -> Result<Option<UnixListener>, String> {
        let cname = std::ffi::CString::new(name).expect("no NUL");
        let mut fds: *mut libc::c_int = std::ptr::null_mut();
        let mut cnt: libc::size_t = 0;
        // SAFETY: launchd fills `fds` (malloc'd) and `cnt`; we free `fds`.
        let rc = unsafe { launch_activate_socket(cname.as_ptr(), &mut fds, &mut cnt) };
        if rc == libc::ESRCH || rc == libc::ENOENT {
            return Ok(None); // not started by launchd, or no such socket
        }
        if rc != 0 {
            return Err(format!("launch_activate_socket({name}): error {rc}"));
        }
        // SAFETY: `cnt` fds were returned; we take the first and close the rest.
        let listener = unsafe {
            let first = *fds;
            for i in 1..cnt {
                libc::close(*fds.add(i));
            }
            libc::free(fds.cast());
            UnixListener::from_raw_fd(first)
        };
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("the launchd socket: {e}"))?;
        Ok(Some(listener))
    }
}
