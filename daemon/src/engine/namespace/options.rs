//! A box record translated into bubblewrap's command line.
//!
//! Pure functions over validated input ([`crate::validate`] has run), so
//! that the translation can be fuzzed (`fuzz/fuzz_targets/bwrap_args.rs`).
//! Invariants:
//! - every namespace is new, the network one included: a box reaches
//!   other hosts only through its egress proxy, never a route of its own;
//! - capabilities are dropped and the seccomp programs are installed in
//!   every box;
//! - a mount's guest path is resolved inside the box's root
//!   ([`resolve_in_root`]): a symlink the box made (its root is writable
//!   and persistent) can redirect a mount only to another place inside the
//!   box, never outside it.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::registry::BoxSpec;

/// Where the init's memfd, bwrap's info pipe and the seccomp programs sit
/// in the bwrap process.
pub const INIT_FD: i32 = 10;
pub const INFO_FD: i32 = 11;
pub const SECCOMP_FDS: [i32; 2] = [12, 13];

/// How many symlinks [`resolve_in_root`] follows before giving up (as the
/// kernel's `ELOOP`).
const MAX_LINKS: usize = 40;

/// A bind mount with its guest path resolved inside the box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxMount {
    pub host_path: PathBuf,
    pub guest_path: String,
    pub read_only: bool,
}

/// The arguments of `bwrap` for a box named `name` with root `rootfs`.
pub fn bwrap_args(name: &str, rootfs: &Path, mounts: &[BoxMount]) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |words: &[&str]| a.extend(words.iter().map(OsString::from));
    push(&["--unshare-user", "--uid", "0", "--gid", "0"]);
    push(&[
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
    ]);
    push(&["--cap-drop", "ALL"]);
    for fd in SECCOMP_FDS {
        push(&["--add-seccomp-fd", &fd.to_string()]);
    }
    push(&["--die-with-parent", "--bind"]);
    a.push(rootfs.into());
    a.push("/".into());
    a.extend(["--proc", "/proc", "--dev", "/dev", "--hostname", name].map(OsString::from));
    for m in mounts {
        a.push(if m.read_only { "--ro-bind" } else { "--bind" }.into());
        a.push(m.host_path.clone().into());
        a.push(m.guest_path.clone().into());
    }
    a.extend(
        [
            "--info-fd".to_owned(),
            INFO_FD.to_string(),
            "--".to_owned(),
            format!("/proc/self/fd/{INIT_FD}"),
        ]
        .map(OsString::from),
    );
    a
}

/// The spec's mounts with each guest path resolved inside `rootfs`, and
/// `hosts` (the box's own `/etc/hosts`, for a box with egress) bound
/// read-only over the image's.
pub fn resolve_mounts(
    rootfs: &Path,
    spec: &BoxSpec,
    hosts: Option<&Path>,
) -> Result<Vec<BoxMount>> {
    let mut mounts: Vec<BoxMount> = spec
        .mounts
        .iter()
        .map(|m| {
            let guest_path = resolve_in_root(rootfs, &m.guest_path)?;
            crate::validate::mount_target(&guest_path).map_err(|_| {
                Error::FailedPrecondition(format!(
                    "mount {}: inside the box it leads to {guest_path}, where nothing may be mounted",
                    m.guest_path
                ))
            })?;
            Ok(BoxMount {
                host_path: m.host_path.clone(),
                guest_path,
                read_only: m.read_only,
            })
        })
        .collect::<Result<_>>()?;
    if let Some(hosts) = hosts {
        mounts.push(BoxMount {
            host_path: hosts.to_path_buf(),
            guest_path: resolve_in_root(rootfs, "/etc/hosts")?,
            read_only: true,
        });
    }
    Ok(mounts)
}

/// Resolves the symlinks of `guest` (an absolute, normalized path inside
/// the box) as the box itself would see them, with `root` as `/`: an
/// absolute target starts again at the box's root and `..` never climbs
/// above it. Components that do not exist yet are kept as they are
/// (bubblewrap creates them). Returns the resolved absolute guest path.
pub fn resolve_in_root(root: &Path, guest: &str) -> Result<String> {
    let mut done: Vec<OsString> = Vec::new();
    let mut todo: Vec<OsString> = components(Path::new(guest));
    todo.reverse();
    let mut links = 0;
    while let Some(part) = todo.pop() {
        if part == ".." {
            done.pop();
            continue;
        }
        let mut here = root.to_path_buf();
        here.extend(&done);
        here.push(&part);
        match std::fs::symlink_metadata(&here) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Error::FailedPrecondition(format!(
                        "mount {guest}: too many symbolic links inside the box"
                    )));
                }
                let target = std::fs::read_link(&here)
                    .map_err(|e| Error::io(format!("read link {}", here.display()), e))?;
                if target.is_absolute() {
                    done.clear();
                }
                let mut rest = components(&target);
                rest.reverse();
                todo.extend(rest);
            }
            _ => done.push(part),
        }
    }
    let mut out = PathBuf::from("/");
    out.extend(&done);
    Ok(out.to_string_lossy().into_owned())
}

/// The normal components of a path and its `..`s, in order.
fn components(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn symlinks_resolve_inside_the_box() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("data/real")).unwrap();
        symlink("/etc", r.join("abs")).unwrap();
        symlink("../../../../../etc", r.join("climb")).unwrap();
        symlink("data/real", r.join("rel")).unwrap();
        symlink("loop2", r.join("loop1")).unwrap();
        symlink("loop1", r.join("loop2")).unwrap();
        symlink("/proc/self", r.join("proc-link")).unwrap();
        let res = |g: &str| resolve_in_root(r, g);
        assert_eq!(res("/abs/x").unwrap(), "/etc/x");
        assert_eq!(res("/climb/shadow").unwrap(), "/etc/shadow");
        assert_eq!(res("/rel/w").unwrap(), "/data/real/w");
        assert_eq!(res("/new/dir").unwrap(), "/new/dir");
        assert!(res("/loop1").is_err());
        // Where a link leads to a reserved place, the mount is refused.
        let spec = BoxSpec {
            mounts: vec![crate::registry::Mount {
                host_path: "/tmp".into(),
                guest_path: "/proc-link".into(),
                read_only: true,
            }],
            ..Default::default()
        };
        let err = resolve_mounts(r, &spec, None).unwrap_err().to_string();
        assert!(err.contains("/proc/self"), "{err}");
    }

    #[test]
    fn args_keep_their_invariants() {
        let mounts = [BoxMount {
            host_path: "/srv/p".into(),
            guest_path: "/workspace".into(),
            read_only: true,
        }];
        let a = bwrap_args("b1", Path::new("/h/rootfs"), &mounts);
        let words: Vec<&str> = a.iter().map(|s| s.to_str().unwrap()).collect();
        assert!(words.contains(&"--unshare-net"));
        assert!(words.windows(2).any(|w| w == ["--cap-drop", "ALL"]));
        assert!(
            words
                .windows(3)
                .any(|w| w == ["--ro-bind", "/srv/p", "/workspace"])
        );
        assert_eq!(words.last(), Some(&"/proc/self/fd/10"));
    }
}
