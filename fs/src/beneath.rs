//! Resolving a relative path inside a directory one component at a time,
//! never following a symlink and never leaving the directory.
//!
//! Invariants: a path with anything but plain names (a root, `.`, `..`,
//! nothing at all) is refused before any system call; every component,
//! the last one included, is resolved without following a symlink (a
//! symlink anywhere is `ELOOP` or `EXDEV`, never followed); the walk used
//! where `openat2` is missing refuses exactly what `openat2` refuses.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

/// Whether `rel` is only plain names (no root, no `.`, no `..`) and not empty.
pub fn is_plain_relative(rel: &Path) -> bool {
    !rel.as_os_str().is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Opens `rel` inside `dir` with `flags` (which should hold `O_NOFOLLOW`
/// for the walk's sake; `O_PATH` works too), following no symlink in any
/// component: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS`, or, where the kernel has no `openat2` (before
/// 5.6, or a seccomp filter hiding it), a walk of `O_NOFOLLOW |
/// O_DIRECTORY` opens. `EINVAL` for a `rel` that is not plain
/// ([`is_plain_relative`]).
pub fn open(dir: BorrowedFd<'_>, rel: &Path, flags: OFlag) -> Result<OwnedFd, Errno> {
    if !is_plain_relative(rel) {
        return Err(Errno::EINVAL);
    }
    #[cfg(target_os = "linux")]
    {
        use nix::fcntl::{OpenHow, ResolveFlag, openat2};
        let how = OpenHow::new().flags(flags).resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
        match openat2(dir, rel, how) {
            // Kernels before 5.6, or a seccomp filter that hides the call.
            Err(Errno::ENOSYS | Errno::EPERM) => {}
            other => return other,
        }
    }
    walk(dir, rel, flags | OFlag::O_NOFOLLOW)
}

/// Opens each directory component with `O_NOFOLLOW | O_DIRECTORY` from `dir`
/// down, then the last component with `flags` (which hold `O_NOFOLLOW`).
/// `rel` has only plain components (checked by [`open`]).
pub fn walk(dir: BorrowedFd<'_>, rel: &Path, flags: OFlag) -> Result<OwnedFd, Errno> {
    if !is_plain_relative(rel) {
        return Err(Errno::EINVAL);
    }
    let mut parts: Vec<_> = rel.components().collect();
    let last = parts.pop().ok_or(Errno::EINVAL)?;
    let mut current: Option<OwnedFd> = None;
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    for part in parts {
        let next = match &current {
            Some(fd) => openat(fd, part.as_os_str(), dir_flags, Mode::empty())?,
            None => openat(dir, part.as_os_str(), dir_flags, Mode::empty())?,
        };
        current = Some(next);
    }
    match &current {
        Some(fd) => openat(fd.as_fd(), last.as_os_str(), flags, Mode::empty()),
        None => openat(dir, last.as_os_str(), flags, Mode::empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File};
    use std::os::unix::fs::symlink;

    #[test]
    fn no_symlink_no_escape_in_either_way() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "host").unwrap();
        fs::create_dir_all(d.join("root/real")).unwrap();
        fs::write(d.join("root/real/f"), "ok").unwrap();
        symlink(outside.path(), d.join("root/out")).unwrap();
        symlink("real", d.join("root/rel")).unwrap();
        symlink("real/f", d.join("root/flink")).unwrap();
        let root = File::open(d.join("root")).unwrap();
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        assert!(open(root.as_fd(), Path::new("real/f"), flags).is_ok());
        assert!(walk(root.as_fd(), Path::new("real/f"), flags).is_ok());
        for rel in ["out/secret", "rel/f", "flink"] {
            assert!(open(root.as_fd(), Path::new(rel), flags).is_err(), "{rel}");
            assert!(walk(root.as_fd(), Path::new(rel), flags).is_err(), "{rel}");
        }
        for rel in ["../root/real/f", "/etc/passwd", "./real/f", ""] {
            assert_eq!(
                open(root.as_fd(), Path::new(rel), flags).unwrap_err(),
                Errno::EINVAL,
                "{rel}"
            );
        }
        // O_PATH without O_NOFOLLOW: a symlink at the end is still refused.
        assert!(
            open(
                root.as_fd(),
                Path::new("flink"),
                OFlag::O_PATH | OFlag::O_CLOEXEC
            )
            .is_err()
        );
    }
}
