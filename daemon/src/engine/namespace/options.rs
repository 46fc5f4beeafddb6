//! A box record translated into bubblewrap's command line and the boot
//! helper's mounts.
//!
//! Pure functions over validated input ([`crate::validate`] has run), so
//! that the translation can be fuzzed (`fuzz/fuzz_targets/bwrap_args.rs`).
//! Invariants:
//! - every namespace is new, the network one included: a box reaches
//!   other hosts only through its egress proxy, never a route of its own;
//! - capabilities are dropped and the seccomp programs are installed in
//!   every box;
//! - a mount's guest path is resolved inside the box's root
//!   ([`resolve_target`]): a symlink the box made (its root is writable
//!   and persistent) can redirect a mount only to another place inside the
//!   box, never outside it, and never onto `/`, `/proc` or `/dev`.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use super::boot::PlannedMount;
use crate::error::{Error, Result};
use crate::model::BoxSpec;

/// Where the init's memfd, bwrap's info pipe, the seccomp programs and
/// the init's ready pipe (`init.c`'s `READY_FD`) sit in the bwrap process.
pub const INIT_FD: i32 = 10;
pub const INFO_FD: i32 = 11;
pub const SECCOMP_FDS: [i32; 2] = [12, 13];
pub const READY_FD: i32 = 14;

/// How many symlinks [`resolve_in_root`] follows before giving up (as the
/// kernel's `ELOOP`).
const MAX_LINKS: usize = 40;

/// The arguments of `bwrap` for a box named `name` whose root (with its
/// mounts) the boot helper assembled at `stage`. bwrap runs as root of the
/// box's user namespace, which the boot helper made: it makes none itself.
pub fn bwrap_args(name: &str, stage: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |words: &[&str]| a.extend(words.iter().map(OsString::from));
    push(&[
        "--unshare-pid",
        // The box's init is its pid 1 (and reaps its orphans): no
        // bubblewrap reaper process beside it.
        "--as-pid-1",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        // Its cgroups as `/`: no host cgroup path shows in /proc/self/cgroup.
        "--unshare-cgroup-try",
    ]);
    push(&["--cap-drop", "ALL"]);
    for fd in SECCOMP_FDS {
        push(&["--add-seccomp-fd", &fd.to_string()]);
    }
    push(&["--die-with-parent", "--bind"]);
    a.push(stage.into());
    a.push("/".into());
    a.extend(["--proc", "/proc", "--dev", "/dev", "--hostname", name].map(OsString::from));
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

/// The spec's mounts, and `hosts` (the box's own `/etc/hosts`, for a box
/// with egress) bound read-only over the image's; `owner` says whose files
/// a source shows as box root's (boxd as root: see [`super::boot`]).
pub fn plan_mounts(
    spec: &BoxSpec,
    hosts: Option<&Path>,
    owner: impl Fn(&Path) -> Option<super::boot::MountOwner>,
) -> Vec<PlannedMount> {
    let mut mounts: Vec<PlannedMount> = spec
        .mounts
        .iter()
        .map(|m| PlannedMount {
            host_path: m.host_path.clone(),
            guest_path: m.guest_path.clone(),
            read_only: m.read_only,
            owner: owner(&m.host_path),
        })
        .collect();
    if let Some(hosts) = hosts {
        mounts.push(PlannedMount {
            host_path: hosts.to_path_buf(),
            guest_path: "/etc/hosts".into(),
            read_only: true,
            owner: None,
        });
    }
    mounts
}

/// Where a mount at `guest` lands in the box whose root is `root`: its
/// symlinks resolved inside the box ([`resolve_in_root`]), and refused
/// where the engine itself mounts (`/`, `/proc`, `/dev`).
pub fn resolve_target(root: &Path, guest: &str) -> Result<String> {
    let resolved = resolve_in_root(root, guest)?;
    crate::validate::mount_target(&resolved).map_err(|_| {
        Error::FailedPrecondition(format!(
            "mount {guest}: inside the box it leads to {resolved}, where nothing may be mounted"
        ))
    })?;
    Ok(resolved)
}

/// Resolves the symlinks of `guest` (an absolute, normalized path inside
/// the box) as the box itself would see them, with `root` as `/`: an
/// absolute target starts again at the box's root and `..` never climbs
/// above it. Components that do not exist yet are kept as they are
/// (the boot helper creates them). Returns the resolved absolute guest path.
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
        let err = resolve_target(r, "/proc-link").unwrap_err().to_string();
        assert!(err.contains("/proc/self"), "{err}");
        assert_eq!(resolve_target(r, "/rel").unwrap(), "/data/real");
    }

    #[test]
    fn args_keep_their_invariants() {
        let a = bwrap_args("b1", Path::new("/tmp"));
        let words: Vec<&str> = a.iter().map(|s| s.to_str().unwrap()).collect();
        assert!(words.contains(&"--unshare-net"));
        assert!(
            !words.contains(&"--unshare-user"),
            "the boot helper made it"
        );
        assert!(words.windows(2).any(|w| w == ["--cap-drop", "ALL"]));
        assert!(words.windows(3).any(|w| w == ["--bind", "/tmp", "/"]));
        assert_eq!(words.last(), Some(&"/proc/self/fd/10"));
    }

    #[test]
    fn plans_add_the_hosts_file_read_only() {
        let spec = BoxSpec {
            mounts: vec![crate::model::Mount {
                host_path: "/srv/p".into(),
                guest_path: "/workspace".into(),
                read_only: false,
            }],
            ..Default::default()
        };
        let owner = crate::engine::namespace::boot::MountOwner {
            host: (1000, 1000),
            as_box: (0, 0),
        };
        let plan = plan_mounts(&spec, Some(Path::new("/h/hosts")), |_| Some(owner));
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].owner, Some(owner));
        assert_eq!(
            (
                plan[1].guest_path.as_str(),
                plan[1].read_only,
                plan[1].owner
            ),
            ("/etc/hosts", true, None)
        );
    }
}
