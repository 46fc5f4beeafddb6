//! Descriptors: the open-file limit, and closing what boxd inherited.
//!
//! The open-file limit. A daemon that holds a thousand client connections
//! and several descriptors per exec needs more than the usual soft limit of
//! 1024, so `boxd` raises its soft limit to the hard one at start-up, as
//! Go and systemd-spawned servers do; the processes it starts (bubblewrap,
//! the exec helper and so the commands in boxes) get the original back,
//! since some programs still misbehave above 1024 (`select`).

use std::sync::atomic::{AtomicU64, Ordering};

/// The soft limit before [`raise`], for children; 0 until then.
static ORIGINAL_SOFT: AtomicU64 = AtomicU64::new(0);

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. Returns the new soft
/// limit.
pub fn raise() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        ORIGINAL_SOFT.store(lim.rlim_cur, Ordering::Relaxed);
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return lim.rlim_max;
        }
    }
    lim.rlim_cur
}

/// Puts the original soft limit back, in a child between fork and exec
/// (async-signal-safe: one system call).
pub fn restore_in_child() {
    let soft = ORIGINAL_SOFT.load(Ordering::Relaxed);
    if soft == 0 {
        return;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = soft.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Closes every descriptor above stderr but `keep` (the socket a service
/// manager passed): a daemon holds nothing of whoever started it, and so
/// nothing of it reaches a box. Call before any thread or file exists.
pub fn close_inherited(keep: Option<std::os::fd::RawFd>) {
    #[cfg(target_os = "linux")]
    {
        let close = |first: u32, last: u32| {
            if first <= last {
                // SAFETY: close_range has no memory-safety preconditions.
                unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
            }
        };
        match keep {
            Some(fd) if fd >= 3 => {
                close(3, fd as u32 - 1);
                close(fd as u32 + 1, u32::MAX);
            }
            _ => close(3, u32::MAX),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        // Elsewhere, keep them out of children at least.
        for fd in 3..1024 {
            if Some(fd) != keep {
                // SAFETY: fcntl on an integer; a closed descriptor fails.
                unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            }
        }
    }
}
