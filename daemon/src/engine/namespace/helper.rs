//! The one way the namespace engine starts its helpers: executions of
//! the helper binary (`boxd-box __MODE …`, `daemon/src/bin/boxd-box.rs`,
//! dispatched before any thread exists), each single-threaded so that it
//! may join or create namespaces. The daemon opens `boxd-box` beside its
//! own executable once and runs every helper from that descriptor, so an
//! upgrade on disk never mixes versions under one daemon; without it (a
//! `boxd` copied alone), the daemon re-executes itself, which dispatches
//! the same modes. A helper that starts helpers (a supervisor) runs its
//! own binary again.
//!
//! Invariants, for every helper (and so for bubblewrap, every box's init
//! and every command in a box, which they become or start):
//! - an empty environment unless the caller adds variables: nothing of
//!   the daemon's environment (tokens of whoever started boxd, secret
//!   values) reaches a box;
//! - no descriptor but stdio, the channel (fd 3) and the ones the caller
//!   passes at fixed numbers: whatever boxd inherited or opened is closed
//!   between fork and exec;
//! - it dies with the daemon (`PR_SET_PDEATHSIG`), with umask 022 and the
//!   daemon's original open-file limit.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The helper's end of its channel with the daemon.
pub const CHANNEL_FD: RawFd = 3;

/// The helper binary's name, beside `boxd`.
pub const HELPER_BINARY: &str = "boxd-box";
/// Where a starting helper finds its own executable (close-on-exec, so
/// gone once it runs): above every number a caller passes.
const EXE_FD: RawFd = 20;

/// The helper binary, opened once; `None`: this process's own executable.
static EXE: OnceLock<Option<OwnedFd>> = OnceLock::new();

/// Whether this process runs the helper binary.
static IN_HELPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called first by `boxd-box`: its helpers run `/proc/self/exe`, itself.
pub fn this_is_the_helper_binary() {
    IN_HELPER.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = EXE.set(None);
}

/// The helper binary this process starts helpers from, if not itself:
/// `boxd-box` beside the executable, a regular file that only its owner
/// (root or this user) may write.
fn exe() -> Option<&'static OwnedFd> {
    EXE.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        let path = std::env::current_exe().ok()?.with_file_name(HELPER_BINARY);
        let file = std::fs::File::open(&path).ok()?;
        let meta = file.metadata().ok()?;
        let owner_ok = meta.uid() == 0 || meta.uid() == nix::unistd::geteuid().as_raw();
        if !meta.is_file() || !owner_ok || meta.mode() & 0o022 != 0 || meta.mode() & 0o100 == 0 {
            tracing::warn!(path = %path.display(), "not using the helper binary (not a regular executable only its owner may write); boxd runs its helpers itself");
            return None;
        }
        Some(OwnedFd::from(file))
    })
    .as_ref()
}

/// What `ps` shows a helper as: the name of the binary it runs (even
/// once an upgrade replaced that binary on disk).
fn arg0() -> &'static str {
    match exe().is_some() || IN_HELPER.load(std::sync::atomic::Ordering::Relaxed) {
        true => HELPER_BINARY,
        false => "boxd",
    }
}

/// Which executable helpers run from (for `doctor` and logs).
pub fn describe() -> String {
    match exe() {
        Some(fd) => std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| HELPER_BINARY.into()),
        None => std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
    }
}

/// A helper about to start: its command (add arguments, environment and
/// stdio), descriptors to pass, and the daemon's end of the channel.
pub struct Helper {
    pub cmd: tokio::process::Command,
    ours: std::os::unix::net::UnixStream,
    theirs: std::os::unix::net::UnixStream,
    /// (descriptor here, number in the helper). The caller keeps each
    /// descriptor open until [`Helper::spawn`].
    pass: Vec<(RawFd, RawFd)>,
}

impl Helper {
    pub fn new(mode: &str) -> Result<Helper> {
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(|e| Error::io("socketpair", e))?;
        let (mut cmd, pass) = match exe() {
            Some(fd) => (
                tokio::process::Command::new(format!("/proc/self/fd/{EXE_FD}")),
                vec![(fd.as_raw_fd(), EXE_FD)],
            ),
            None => (tokio::process::Command::new("/proc/self/exe"), Vec::new()),
        };
        cmd.arg0(arg0()).arg(mode).env_clear();
        Ok(Helper {
            cmd,
            ours,
            theirs,
            pass,
        })
    }

    /// Passes `fd` to the helper as descriptor `at` (above 3).
    pub fn pass(&mut self, fd: RawFd, at: RawFd) {
        debug_assert!(at > CHANNEL_FD && at < EXE_FD);
        self.pass.push((fd, at));
    }

    /// Starts the helper; returns it and the daemon's end of the channel.
    /// The helper's end, and whatever the caller handed to the command
    /// (a pty's slave ends), are closed here once the child has its copies.
    pub fn spawn(
        self,
        what: &str,
    ) -> Result<(tokio::process::Child, std::os::unix::net::UnixStream)> {
        let Helper {
            mut cmd,
            ours,
            theirs,
            mut pass,
        } = self;
        pass.push((theirs.as_raw_fd(), CHANNEL_FD));
        pass.sort_by_key(|&(_, at)| at);
        let moves: Vec<(RawFd, RawFd)> = pass;
        // SAFETY: only async-signal-safe calls between fork and exec, and
        // no allocation (`moves` is read, not changed).
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::umask(0o022);
                place_fds(&moves)?;
                // The executable is opened by its /proc path before the
                // exec closes it: the helper never holds it.
                if libc::fcntl(EXE_FD, libc::F_SETFD, libc::FD_CLOEXEC) < 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EBADF)
                {
                    return Err(std::io::Error::last_os_error());
                }
                crate::limits::restore_in_child();
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("start {what}"), e))?;
        drop((cmd, theirs));
        Ok((child, ours))
    }
}

/// Returns the free parts of this process's heap to the system: a
/// long-lived helper (a supervisor, a zygote) calls it once it is set up,
/// so what it needed only to start costs nothing per box afterwards.
pub fn give_back_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Between fork and exec: puts each descriptor at its number and closes
/// every other one above stderr. Sources are first copied above every
/// target, so that placing one never overwrites another's source.
fn place_fds(moves: &[(RawFd, RawFd)]) -> std::io::Result<()> {
    let top = moves.iter().map(|&(_, at)| at).max().unwrap_or(CHANNEL_FD);
    let mut copies = [0 as RawFd; 16];
    if moves.len() > copies.len() {
        return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
    }
    for (i, &(from, _)) in moves.iter().enumerate() {
        // SAFETY: fcntl on a descriptor this process holds.
        let copy = unsafe { libc::fcntl(from, libc::F_DUPFD_CLOEXEC, top + 1) };
        if copy < 0 {
            return Err(std::io::Error::last_os_error());
        }
        copies[i] = copy;
    }
    for (i, &(_, at)) in moves.iter().enumerate() {
        // SAFETY: dup2 onto a fixed number; clears close-on-exec there.
        if unsafe { libc::dup2(copies[i], at) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // Close the gaps between the targets (sorted), and everything above.
    let mut next = 3;
    for &(_, at) in moves {
        if at > next {
            close_range(next as u32, (at - 1) as u32);
        }
        next = next.max(at + 1);
    }
    close_range(next as u32, u32::MAX);
    Ok(())
}

/// Closes descriptors `first..=last`; async-signal-safe.
pub fn close_range(first: u32, last: u32) {
    // SAFETY: close_range has no memory-safety preconditions.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if rc == 0 {
        return;
    }
    // Before Linux 5.9: one by one, up to the descriptor limit.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer; close on plain integers.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        let end = (last as u64).min(lim.rlim_cur.min(1 << 20));
        let mut fd = first as u64;
        while fd <= end {
            libc::close(fd as i32);
            fd += 1;
        }
    }
}
