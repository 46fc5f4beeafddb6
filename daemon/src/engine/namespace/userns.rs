//! Entering a box's user namespace, mapped by [`super::idmap`], from one
//! of the daemon's single-threaded helpers.
//!
//! A process cannot write the ranged maps of its own new user namespace
//! (only a process with `CAP_SETUID` in the parent namespace, or
//! `newuidmap`, may), so the helper and the daemon take turns on the
//! helper's channel (fd 3):
//!
//! 1. the helper `unshare(CLONE_NEWUSER)`s and writes `map\n`;
//! 2. the daemon writes `/proc/PID/uid_map` and `gid_map` ([`IdMap::apply`])
//!    and answers `go\n` (or closes the channel);
//! 3. the helper becomes box root ([`become_root`]).
//!
//! Also here: `boxd __userns -- COMMAND…`, which runs a command as box root
//! in a fresh namespace of the same map, for the file work an unprivileged
//! daemon cannot do on files owned by its subordinate ids (unpacking
//! images with their owners, removing a box's files, measuring them).

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::idmap::IdMap;
use crate::error::{Error, Result};

/// The argument that selects [`helper_main`] in `main`.
pub const HELPER_ARG: &str = "__userns";
const CHANNEL_FD: i32 = 3;

/// Helper side: a new user namespace, mapped by the daemon, then box root.
/// `range` says whether the map has more than one id (`setgroups` is
/// allowed only then). `owner`: host ids to become first (a root-run
/// boxd's box root), so that the namespace belongs to them: the kernel
/// charges what the box's processes take of per-user resources (inotify
/// instances and watches, …) to its namespace's owner in the host's
/// accounting, which would otherwise be host root's.
pub fn enter(
    channel: &mut UnixStream,
    range: bool,
    owner: Option<(u32, u32)>,
) -> std::result::Result<(), String> {
    // Where the kernel lets only privileged processes make user
    // namespaces (Debian's `unprivileged_userns_clone = 0`), the
    // namespace stays the creator's.
    let allowed = std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone")
        .map_or(true, |v| v.trim() != "0");
    if let Some((uid, gid)) = owner.filter(|_| allowed) {
        let (uid, gid) = (
            nix::unistd::Uid::from_raw(uid),
            nix::unistd::Gid::from_raw(gid),
        );
        nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
        nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
        nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(|e| format!("cannot create a user namespace: {e}"))?;
    channel
        .write_all(b"map\n")
        .map_err(|e| format!("channel: {e}"))?;
    let mut answer = [0u8; 3];
    channel
        .read_exact(&mut answer)
        .map_err(|_| "boxd did not map the user namespace".to_owned())?;
    if &answer != b"go\n" {
        return Err("boxd did not map the user namespace".into());
    }
    become_root(range)
}

/// Switches to uid and gid 0 of the current user namespace with no
/// supplementary groups, keeping the capabilities a namespace's creator
/// (or joiner) holds. The parent-death signal, which the kernel clears on
/// a uid change, is set again.
pub fn become_root(range: bool) -> std::result::Result<(), String> {
    let parent = nix::unistd::getppid();
    if range {
        nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    }
    let (uid, gid) = (nix::unistd::Uid::from_raw(0), nix::unistd::Gid::from_raw(0));
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setresgid(0): {e}"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setresuid(0): {e}"))?;
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if nix::unistd::getppid() != parent {
        return Err("boxd went away".into());
    }
    Ok(())
}

/// Daemon side of steps 1–2: waits for the helper's `map`, runs `before`
/// (with the helper's pid: for instance, to put it in the box's cgroup),
/// writes the maps and answers `go`. Anything else the helper says first is
/// its error.
pub async fn map_helper<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    writer: &mut tokio::net::unix::OwnedWriteHalf,
    pid: i32,
    idmap: &IdMap,
    before: impl FnOnce(i32) -> Result<()>,
) -> Result<()> {
    let first = lines.next_line().await.ok().flatten().unwrap_or_default();
    if first != "map" {
        let why = first
            .strip_prefix("fail ")
            .map(str::to_owned)
            .unwrap_or_else(|| "the helper ended before its user namespace existed".into());
        return Err(Error::Engine(why));
    }
    before(pid)?;
    idmap.apply(pid)?;
    writer
        .write_all(b"go\n")
        .await
        .map_err(|e| Error::io("helper channel", e))
}

/// Runs `argv` as box root in a fresh user namespace of `idmap`, waits
/// for it and returns its stdout; a non-zero exit is an error quoting its
/// stderr.
pub async fn run_as_box_root(idmap: &IdMap, argv: &[OsString]) -> Result<Vec<u8>> {
    let mut helper = super::helper::Helper::new(HELPER_ARG)?;
    helper
        .cmd
        .arg(if idmap.is_range() { "range" } else { "single" })
        .arg("--")
        .args(argv)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let (child, ours) = helper.spawn("the user-namespace helper")?;
    let pid = child.id().unwrap_or(0) as i32;
    ours.set_nonblocking(true)
        .map_err(|e| Error::io("helper channel", e))?;
    let (read, mut write) = tokio::net::UnixStream::from_std(ours)
        .map_err(|e| Error::io("helper channel", e))?
        .into_split();
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mapped = map_helper(&mut lines, &mut write, pid, idmap, |_| Ok(())).await;
    // Unmapped, the helper waits for `go`: the channel's end is its answer.
    drop((lines, write));
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| Error::io("wait for the user-namespace helper", e))?;
    mapped?;
    let what = argv
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No space left") || err.contains("Disk quota exceeded") {
            return Err(Error::no_space(&format!("running {what} as box root")));
        }
        let from = err.char_indices().rev().nth(2000).map_or(0, |(i, _)| i);
        let tail = &err[from..];
        return Err(Error::Engine(format!(
            "{what} as box root failed ({}): {}",
            out.status,
            tail.trim()
        )));
    }
    Ok(out.stdout)
}

/// `boxd __userns range|single -- COMMAND ARGS…`: enters a user namespace
/// the daemon maps, becomes its root and executes COMMAND. Runs before
/// anything else in `main`, single-threaded.
pub fn helper_main(args: Vec<OsString>) -> ! {
    // SAFETY: fd 3 was set up by the daemon for us.
    let mut channel = unsafe { UnixStream::from_raw_fd(CHANNEL_FD) };
    let fail = |channel: &mut UnixStream, why: String| -> ! {
        let _ = writeln!(channel, "fail {why}");
        eprintln!("boxd {HELPER_ARG}: {why}");
        std::process::exit(125)
    };
    let range = match args.first().and_then(|a| a.to_str()) {
        Some("range") => true,
        Some("single") => false,
        _ => fail(&mut channel, "bad helper arguments".into()),
    };
    if args.get(1).map(|a| a.as_bytes()) != Some(b"--") || args.len() < 3 {
        fail(&mut channel, "bad helper arguments".into());
    }
    if let Err(why) = enter(&mut channel, range, None) {
        fail(&mut channel, why);
    }
    drop(channel);
    let argv: Vec<CString> = match args[2..]
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect()
    {
        Ok(v) => v,
        Err(_) => {
            eprintln!("boxd {HELPER_ARG}: a NUL byte in the command");
            std::process::exit(125)
        }
    };
    let err = nix::unistd::execvp(&argv[0], &argv).unwrap_err();
    eprintln!("boxd {HELPER_ARG}: cannot run {:?}: {err}", args[2]);
    std::process::exit(127)
}
