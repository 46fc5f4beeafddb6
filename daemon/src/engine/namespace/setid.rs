//! No set-user-id or set-group-id file on a host mount: a box may not
//! leave one behind in a host directory bound into it (on the host such a
//! file runs as its owner for any local user).
//!
//! **The rule.** Set-id bits (`S_ISUID`, `S_ISGID`) asked for on anything
//! but the box's own root file system (its overlay or its own copy, in
//! boxd's private home) fail with `EPERM` (`EROFS` on a read-only mount);
//! on the box's root they keep working, because package managers need
//! them (dpkg `fchmod`s `/usr/bin/ssh-keysign` 4755).
//!
//! **The mechanism.** One more seccomp program, [`program`], installed
//! with `SECCOMP_FILTER_FLAG_NEW_LISTENER` ([`install`]) by the boot
//! helper before it becomes bubblewrap and by the zygote in
//! [`super::confine::confine`], so that every process of the box runs
//! under it. BPF cannot see paths, so it sorts calls by their arguments:
//! - `chmod`, `fchmod`, `fchmodat` and `fchmodat2` whose mode asks for a
//!   set-id bit go to the listener, which the box's supervisor serves
//!   ([`serve`], one thread per listener);
//! - calls that create a file with a set-id mode (`open`/`openat` with
//!   `O_CREAT` or `O_TMPFILE`, `creat`, `mknod`, `mknodat`) fail with
//!   `EPERM`, everywhere, the box's root included: where the file would
//!   land is known only once it is made, and real tools create a file
//!   and then `fchmod` it (dpkg, GNU tar, boxd's own unpacker); busybox's
//!   `cp` and `tar`, which create with the final mode, cannot copy or
//!   unpack a set-id file at all;
//! - `openat2` fails with `ENOSYS` (its mode is in a structure BPF cannot
//!   read): libc and Rust's std do not use it, and programs that do fall
//!   back to `openat`;
//! - everything else is allowed (the deny-list of `confine.rs` stays;
//!   the kernel takes the strictest answer of all programs). Another
//!   architecture's calls kill the process, as there; on x86_64 the x32
//!   numbers are treated as their x86_64 twins.
//!
//! **No time-of-check/time-of-use gap.** The listener never answers
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE` (the kernel would then resolve the
//! path again, after another thread of the box swapped it for a host
//! mount). The supervisor does the call itself, on an object it holds:
//! - `fchmod`: the process's own file description, taken with
//!   `pidfd_getfd`;
//! - a path: read with `process_vm_readv` (at most `PATH_MAX`, NUL-ended),
//!   then opened `O_PATH` with `openat2(RESOLVE_IN_ROOT)` beneath the
//!   process's root (`/proc/TID/root`): `..` and symlinks, absolute ones
//!   included, resolve as the kernel resolves them for that process and
//!   never above its root. A relative path is made absolute first: the
//!   directory it starts at (the working directory or the `dirfd`,
//!   taken with `pidfd_getfd`) has its path read back (`readlink` of the
//!   descriptor), and that path is used only when it opens, in the root,
//!   the very same directory (device, inode and mount); otherwise (a
//!   directory since moved, or outside the process's root) `EPERM`. No
//!   resolution starts anywhere but the process's root, so none can
//!   leave the box's tree; magic links (`/proc/self/fd/N`) are refused
//!   (`ELOOP`), as they would name the supervisor's descriptors.
//!
//! The target's mount is then compared with the box's root mount
//! (`statx`'s `STATX_MNT_ID` of the target and of the box's init's root,
//! which the supervisor holds open, so the id cannot be reused). The
//! init's root, never the caller's: a box root may `chroot` into a host
//! mount. `SECCOMP_IOCTL_NOTIF_ID_VALID` is checked after the process's
//! memory, descriptors and status were read, before anything is done (a
//! pid reused meanwhile is another process's).
//!
//! **Permissions** are the kernel's for that process, from
//! `/proc/TID/status` ([`decide`]): the mode may change when the
//! caller's fsuid owns the file, or when it holds `CAP_FOWNER` and the
//! file's owner and group are ids of the box; `S_ISGID` is dropped, as
//! the kernel drops it, when the caller is not in the file's group and
//! lacks `CAP_FSETID`. The change itself is made by a child of the
//! supervisor that joined the box's user namespace (so the kernel checks
//! again: a file that is not the box's cannot be changed even then), by
//! `fchmod` of the taken description or `fchmodat2(AT_EMPTY_PATH)` of the
//! `O_PATH` one.
//!
//! **What remains.** Directory search permission on the way to a path is
//! the supervisor's, not the caller's (a root-run boxd's supervisor
//! searches everywhere): a caller may then change a file it owns behind
//! a directory it cannot search, which gives it nothing it did not have.
//! A process that has `chroot`ed and then works with relative paths, or
//! whose directory was moved meanwhile, gets `EPERM` for a set-id
//! `chmod`. A box cannot install a seccomp listener of its own (the
//! kernel allows one per chain). File capabilities (`security.capability`)
//! written in a box are namespaced to the box's root and do not apply on
//! the host.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::idmap::{Extent, maps_host_id};

/// Where the boot helper finds the socket on which it passes its listener
/// to the supervisor (closed before bubblewrap runs).
pub const BOOT_FD: RawFd = 15;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const SETID: u32 = S_ISUID | S_ISGID;

// From <linux/capability.h>.
const CAP_FOWNER: u32 = 3;
const CAP_FSETID: u32 = 4;

/// `fchmodat2` (Linux 6.6), the same number on every architecture.
const SYS_FCHMODAT2: i64 = 452;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;

/// What the filter does with one system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A mode change: to the listener when the mode (argument `mode`)
    /// asks for a set-id bit.
    Chmod { mode: u32 },
    /// A creation: `EPERM` when the flags (argument `flags`, `None`: the
    /// call always creates) say create and the mode asks for a set-id bit.
    Create { flags: Option<u32>, mode: u32 },
    /// `ENOSYS`, always.
    Unsupported,
}

/// The calls the filter looks at, and how.
fn calls() -> Vec<(i64, Kind)> {
    let mut calls = vec![
        (libc::SYS_fchmod, Kind::Chmod { mode: 1 }),
        (libc::SYS_fchmodat, Kind::Chmod { mode: 2 }),
        (SYS_FCHMODAT2, Kind::Chmod { mode: 2 }),
        (
            libc::SYS_openat,
            Kind::Create {
                flags: Some(2),
                mode: 3,
            },
        ),
        (
            libc::SYS_mknodat,
            Kind::Create {
                flags: None,
                mode: 2,
            },
        ),
        (libc::SYS_openat2, Kind::Unsupported),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (libc::SYS_chmod, Kind::Chmod { mode: 1 }),
        (
            libc::SYS_open,
            Kind::Create {
                flags: Some(1),
                mode: 2,
            },
        ),
        (
            libc::SYS_creat,
            Kind::Create {
                flags: None,
                mode: 1,
            },
        ),
        (
            libc::SYS_mknod,
            Kind::Create {
                flags: None,
                mode: 1,
            },
        ),
    ]);
    calls
}

/// The open flags that create a file.
fn creating_flags() -> u32 {
    (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32
}

// Classic BPF, as the kernel's filter/seccomp take it.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;

/// Offsets in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
/// The low 32 bits of argument `i` (little-endian machines only: x86_64
/// and aarch64).
fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
const RET_KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
fn ret_errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | e as u32
}

/// One instruction, its jumps by label until [`assemble`] resolves them.
enum Op {
    Stmt(u16, u32),
    /// Jump if true to the first label, else to the second.
    Jump(u16, u32, Label, Label),
    Label(Label),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Next,
    Allow,
    Notify,
    Eperm,
    Kill,
    Call(usize),
    /// The second step of a creating call's check.
    Mode(usize),
}

/// The filter program: see the module's documentation.
pub fn program() -> Vec<libc::sock_filter> {
    let calls = calls();
    let mut ops = vec![
        // Another architecture's calls kill, as confine.rs's do.
        Op::Stmt(BPF_LD_W_ABS, DATA_ARCH),
        Op::Jump(BPF_JEQ_K, AUDIT_ARCH, Label::Next, Label::Kill),
        Op::Stmt(BPF_LD_W_ABS, DATA_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    ops.push(Op::Stmt(BPF_ALU_AND_K, !X32_BIT));
    for (i, (nr, _)) in calls.iter().enumerate() {
        ops.push(Op::Jump(BPF_JEQ_K, *nr as u32, Label::Call(i), Label::Next));
    }
    ops.push(Op::Stmt(BPF_RET_K, RET_ALLOW));
    for (i, (_, kind)) in calls.iter().enumerate() {
        ops.push(Op::Label(Label::Call(i)));
        match *kind {
            Kind::Chmod { mode } => {
                ops.push(Op::Stmt(BPF_LD_W_ABS, arg_low(mode)));
                ops.push(Op::Jump(BPF_JSET_K, SETID, Label::Notify, Label::Allow));
            }
            Kind::Create { flags, mode } => {
                if let Some(flags) = flags {
                    ops.push(Op::Stmt(BPF_LD_W_ABS, arg_low(flags)));
                    ops.push(Op::Jump(
                        BPF_JSET_K,
                        creating_flags(),
                        Label::Mode(i),
                        Label::Allow,
                    ));
                }
                ops.push(Op::Label(Label::Mode(i)));
                ops.push(Op::Stmt(BPF_LD_W_ABS, arg_low(mode)));
                ops.push(Op::Jump(BPF_JSET_K, SETID, Label::Eperm, Label::Allow));
            }
            Kind::Unsupported => ops.push(Op::Stmt(BPF_RET_K, ret_errno(libc::ENOSYS))),
        }
    }
    for (label, ret) in [
        (Label::Allow, RET_ALLOW),
        (Label::Notify, RET_NOTIFY),
        (Label::Eperm, ret_errno(libc::EPERM)),
        (Label::Kill, RET_KILL),
    ] {
        ops.push(Op::Label(label));
        ops.push(Op::Stmt(BPF_RET_K, ret));
    }
    assemble(&ops)
}

fn assemble(ops: &[Op]) -> Vec<libc::sock_filter> {
    let mut at = std::collections::HashMap::new();
    let mut n = 0usize;
    for op in ops {
        match op {
            Op::Label(l) => {
                at.insert(*l, n);
            }
            _ => n += 1,
        }
    }
    let mut out = Vec::with_capacity(n);
    for op in ops {
        let here = out.len();
        let to = |l: &Label| -> u8 {
            let target = match l {
                Label::Next => here + 1,
                l => *at.get(l).expect("every label is placed"),
            };
            u8::try_from(target - here - 1).expect("jumps fit in 8 bits")
        };
        match op {
            Op::Label(_) => {}
            Op::Stmt(code, k) => out.push(libc::sock_filter {
                code: *code,
                jt: 0,
                jf: 0,
                k: *k,
            }),
            Op::Jump(code, k, t, f) => out.push(libc::sock_filter {
                code: *code,
                jt: to(t),
                jf: to(f),
                k: *k,
            }),
        }
    }
    out
}

impl std::hash::Hash for Label {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        if let Label::Call(i) | Label::Mode(i) = self {
            i.hash(h);
        }
    }
}

/// Installs [`program`] on the calling thread (which must have
/// `no_new_privs` or `CAP_SYS_ADMIN` in its user namespace) and returns
/// its listener (close-on-exec). Only raw system calls: fit for a
/// single-threaded helper.
pub fn install(program: &[libc::sock_filter]) -> Result<OwnedFd, i32> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: seccomp(2) with a valid program that outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog,
        )
    };
    if fd < 0 {
        // SAFETY: reading errno.
        return Err(unsafe { *libc::__errno_location() });
    }
    // SAFETY: the kernel just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// In the boot helper: passes `listener` to the supervisor on
/// [`BOOT_FD`], then closes both.
pub fn pass_boot_listener(listener: OwnedFd) -> Result<(), String> {
    // SAFETY: the supervisor placed the socket at this number for us.
    let sock = unsafe { OwnedFd::from_raw_fd(BOOT_FD) };
    super::fdpass::send(&sock, b"L", &[listener.as_raw_fd()])
        .map_err(|e| format!("pass the set-id listener: {e}"))?;
    Ok(())
}

/// In the supervisor: the listener the boot helper passed on `sock`, if
/// it did.
pub fn take_boot_listener(sock: &OwnedFd) -> Option<OwnedFd> {
    let mut buf = [0u8; 1];
    let (_, fds) =
        super::fdpass::receive(sock, &mut buf, nix::sys::socket::MsgFlags::MSG_DONTWAIT).ok()?;
    fds.into_iter().next()
}

// ---------------------------------------------------------------------------
// The decision.

/// The caller's credentials, host ids (`/proc/TID/status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub fsuid: u32,
    pub fsgid: u32,
    pub groups: Vec<u32>,
    pub cap_eff: u64,
}

impl Caller {
    /// From the text of `/proc/TID/status`.
    pub fn parse(status: &str) -> Option<Caller> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let ids = |name: &str| -> Option<Vec<u32>> {
            field(name)?
                .split_whitespace()
                .map(|w| w.parse().ok())
                .collect()
        };
        let uid = ids("Uid:")?;
        let gid = ids("Gid:")?;
        Some(Caller {
            fsuid: *uid.get(3)?,
            fsgid: *gid.get(3)?,
            groups: ids("Groups:").unwrap_or_default(),
            cap_eff: u64::from_str_radix(field("CapEff:")?, 16).ok()?,
        })
    }

    fn has(&self, cap: u32) -> bool {
        self.cap_eff & (1 << cap) != 0
    }
}

/// The file as the supervisor sees it (host ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct File {
    pub uid: u32,
    pub gid: u32,
    pub symlink: bool,
}

/// The mode to set when `caller` asks for `asked` on `file` (on the box's
/// root), or the errno the kernel would answer: the owner, or
/// `CAP_FOWNER` over a file of the box's ids, may change the mode;
/// `S_ISGID` is dropped for a caller outside the file's group without
/// `CAP_FSETID` (over a file of the box's ids).
pub fn decide(
    caller: &Caller,
    file: &File,
    asked: u32,
    uids: &[Extent],
    gids: &[Extent],
) -> Result<u32, i32> {
    if file.symlink {
        return Err(libc::EOPNOTSUPP);
    }
    let boxed = maps_host_id(uids, file.uid) && maps_host_id(gids, file.gid);
    if caller.fsuid != file.uid && !(caller.has(CAP_FOWNER) && boxed) {
        return Err(libc::EPERM);
    }
    let mut mode = asked & 0o7777;
    let in_group = caller.fsgid == file.gid || caller.groups.contains(&file.gid);
    if mode & S_ISGID != 0 && !in_group && !(caller.has(CAP_FSETID) && boxed) {
        mode &= !S_ISGID;
    }
    Ok(mode)
}

// ---------------------------------------------------------------------------
// Serving a listener.

/// What the listener's thread keeps of the box: its root (the init's,
/// held open so that its mount id stays its own), that mount's id, its
/// user namespace and id maps.
struct TheBox {
    root_mnt: u64,
    userns: OwnedFd,
    userns_ino: u64,
    uids: Vec<Extent>,
    gids: Vec<Extent>,
    _root: OwnedFd,
}

impl TheBox {
    fn new(init: i32) -> std::io::Result<TheBox> {
        let root = open_path(&format!("/proc/{init}/root"), libc::O_DIRECTORY)?;
        let root_mnt = statx(&root)?.stx_mnt_id;
        let userns: OwnedFd = std::fs::File::open(format!("/proc/{init}/ns/user"))?.into();
        let userns_ino = nix::sys::stat::fstat(&userns)?.st_ino;
        Ok(TheBox {
            root_mnt,
            userns,
            userns_ino,
            uids: Extent::parse_map(&std::fs::read_to_string(format!("/proc/{init}/uid_map"))?),
            gids: Extent::parse_map(&std::fs::read_to_string(format!("/proc/{init}/gid_map"))?),
            _root: root,
        })
    }
}

/// Serves `listener` on a thread of its own until the processes of its
/// filter are gone; `init` is the box's init (host pid), whose root is
/// the box's. `what` names the listener in logs.
pub fn serve(listener: OwnedFd, init: i32, what: &'static str) -> std::io::Result<()> {
    let the_box = TheBox::new(init)?;
    std::thread::Builder::new()
        .name(format!("setid-{what}"))
        .spawn(move || {
            run(&listener, &the_box);
            tracing::debug!(what, "set-id listener: its processes are gone");
        })?;
    Ok(())
}

fn run(listener: &OwnedFd, the_box: &TheBox) {
    loop {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if pfd.revents & libc::POLLIN == 0 {
            // POLLHUP: no process uses the filter any more.
            return;
        }
        // SAFETY: an all-zero seccomp_notif is valid (and RECV wants it
        // zeroed).
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: RECV fills a correctly sized structure.
        if unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notif,
            )
        } != 0
        {
            match std::io::Error::last_os_error().raw_os_error() {
                // The caller died before we took it, or a signal.
                Some(libc::ENOENT | libc::EINTR) => continue,
                _ => return,
            }
        }
        let answer = handle(listener, the_box, &notif).err().unwrap_or(0);
        let resp = libc::seccomp_notif_resp {
            id: notif.id,
            val: 0,
            error: -answer,
            flags: 0,
        };
        // SAFETY: SEND reads a correctly sized structure. A caller gone
        // meanwhile (ENOENT) needs no answer.
        unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
    }
}

/// The object a call changes.
enum Target {
    /// The process's own file description (`fchmod`).
    Description(OwnedFd),
    /// An `O_PATH` descriptor of what the path names.
    Path(OwnedFd),
}

impl Target {
    fn fd(&self) -> &OwnedFd {
        match self {
            Target::Description(fd) | Target::Path(fd) => fd,
        }
    }
}

/// One notification: `Ok` when the mode was changed, else the errno.
fn handle(listener: &OwnedFd, the_box: &TheBox, n: &libc::seccomp_notif) -> Result<(), i32> {
    let tid = n.pid as i32;
    let args = n.data.args;
    #[cfg(target_arch = "x86_64")]
    let nr = i64::from(n.data.nr as u32 & !X32_BIT);
    #[cfg(not(target_arch = "x86_64"))]
    let nr = i64::from(n.data.nr);
    // (dirfd, path address, mode, flags) or the fchmod's descriptor.
    let (target, mode) = if nr == libc::SYS_fchmod {
        (Target::Description(take_fd(tid, args[0] as i32)?), args[1])
    } else {
        let (dirfd, path, mode, flags) = match nr {
            #[cfg(target_arch = "x86_64")]
            libc::SYS_chmod => (libc::AT_FDCWD, args[0], args[1], 0),
            libc::SYS_fchmodat => (args[0] as i32, args[1], args[2], 0),
            SYS_FCHMODAT2 => (args[0] as i32, args[1], args[2], args[3] as i32),
            _ => return Err(libc::ENOSYS),
        };
        if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
            return Err(libc::EINVAL);
        }
        let path = read_path(tid, path)?;
        (Target::Path(resolve(tid, dirfd, &path, flags)?), mode)
    };
    let mode = mode as u32 & 0o7777;
    let st = statx(target.fd()).map_err(errno)?;
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).map_err(errno)?;
    let userns = nix::sys::stat::stat(format!("/proc/{tid}/ns/user").as_str())
        .map_err(|e| e as i32)?
        .st_ino;
    // Everything of the process is read: is it still the caller?
    // SAFETY: ID_VALID reads a u64.
    if unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &n.id,
        )
    } != 0
    {
        return Err(libc::ENOENT);
    }
    if st.stx_mask & libc::STATX_MNT_ID == 0 || st.stx_mnt_id != the_box.root_mnt {
        return Err(if read_only(target.fd()) {
            libc::EROFS
        } else {
            libc::EPERM
        });
    }
    if userns != the_box.userns_ino {
        return Err(libc::EPERM);
    }
    let caller = Caller::parse(&status).ok_or(libc::EPERM)?;
    let file = File {
        uid: st.stx_uid,
        gid: st.stx_gid,
        symlink: u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFLNK,
    };
    let mode = decide(&caller, &file, mode, &the_box.uids, &the_box.gids)?;
    change(&the_box.userns, &target, mode)
}

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EPERM)
}

/// The process's descriptor `fd`, taken with `pidfd_getfd`.
fn take_fd(tid: i32, fd: i32) -> Result<OwnedFd, i32> {
    const PIDFD_THREAD: i64 = libc::O_EXCL as i64;
    // SAFETY: pidfd_open with integer arguments.
    let mut pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, PIDFD_THREAD) };
    if pidfd < 0 {
        // Before Linux 6.9: the thread group's leader (descriptors are
        // the process's unless a thread was cloned without CLONE_FILES).
        let tgid = std::fs::read_to_string(format!("/proc/{tid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Tgid:"))
                    .and_then(|v| v.trim().parse::<i32>().ok())
            })
            .ok_or(libc::ESRCH)?;
        // SAFETY: as above.
        pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0) };
    }
    if pidfd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the kernel just returned this descriptor.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: pidfd_getfd with integer arguments.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        return Err(match last_errno() {
            // No such descriptor in the process.
            libc::EBADF => libc::EBADF,
            e => e,
        });
    }
    // SAFETY: the kernel just returned this descriptor (close-on-exec).
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EPERM)
}

/// The NUL-terminated path at `addr` in the process's memory, at most
/// `PATH_MAX` bytes with its NUL. Read with `process_vm_readv` (a ptrace
/// check only: a user-run supervisor may not open `/proc/TID/mem` of a
/// box user's process, whose mode is 0600 for that user), one page at a
/// time so that the string may end just before an unmapped page.
fn read_path(tid: i32, addr: u64) -> Result<Vec<u8>, i32> {
    const PAGE: u64 = 4096;
    let max = libc::PATH_MAX as usize;
    let mut buf = vec![0u8; max];
    let mut have = 0usize;
    while have < max {
        let at = addr.checked_add(have as u64).ok_or(libc::EFAULT)?;
        let len = ((PAGE - at % PAGE) as usize).min(max - have);
        let local = libc::iovec {
            iov_base: buf[have..].as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: reads into our own buffer, `len` bytes within it.
        let n = unsafe { libc::process_vm_readv(tid, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(if n == 0 {
                libc::EFAULT
            } else {
                match last_errno() {
                    libc::EFAULT => libc::EFAULT,
                    libc::ESRCH => libc::ESRCH,
                    _ => libc::EPERM,
                }
            });
        }
        let n = n as usize;
        if let Some(end) = buf[have..have + n].iter().position(|&b| b == 0) {
            buf.truncate(have + end);
            return Ok(buf);
        }
        have += n;
    }
    Err(libc::ENAMETOOLONG)
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dirfd, path, O_PATH | extra, RESOLVE_IN_ROOT)`.
fn open_in_root(root: &OwnedFd, path: &[u8], extra: i32) -> Result<OwnedFd, i32> {
    let c = CString::new(path).map_err(|_| libc::EINVAL)?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC | extra) as u64,
        mode: 0,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 with a valid path and a correctly sized struct.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the kernel just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn open_path(path: &str, extra: i32) -> std::io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open with a valid path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | extra) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What `path` (relative to `dirfd` of process `tid`) names, opened
/// `O_PATH` beneath the process's root: see the module's documentation.
fn resolve(tid: i32, dirfd: i32, path: &[u8], flags: i32) -> Result<OwnedFd, i32> {
    let nofollow = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
        libc::O_NOFOLLOW
    } else {
        0
    };
    let base = || {
        if dirfd == libc::AT_FDCWD {
            open_path(&format!("/proc/{tid}/cwd"), 0).map_err(errno)
        } else {
            take_fd(tid, dirfd)
        }
    };
    if path.is_empty() {
        return if flags & libc::AT_EMPTY_PATH != 0 {
            base()
        } else {
            Err(libc::ENOENT)
        };
    }
    let root = open_path(&format!("/proc/{tid}/root"), libc::O_DIRECTORY).map_err(errno)?;
    if path[0] == b'/' {
        return open_in_root(&root, path, nofollow);
    }
    let base = base()?;
    let base_st = statx(&base).map_err(errno)?;
    if u32::from(base_st.stx_mode) & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR);
    }
    // The directory's path from the box's root, as the kernel names it.
    let named = std::fs::read_link(format!("/proc/self/fd/{}", base.as_raw_fd())).map_err(errno)?;
    let named = std::os::unix::ffi::OsStrExt::as_bytes(named.as_os_str()).to_vec();
    if !named.starts_with(b"/") {
        return Err(libc::EPERM);
    }
    let again = open_in_root(&root, &named, libc::O_DIRECTORY).map_err(|_| libc::EPERM)?;
    let again_st = statx(&again).map_err(errno)?;
    let same = |a: &libc::statx, b: &libc::statx| {
        (a.stx_dev_major, a.stx_dev_minor, a.stx_ino, a.stx_mnt_id)
            == (b.stx_dev_major, b.stx_dev_minor, b.stx_ino, b.stx_mnt_id)
    };
    if !same(&base_st, &again_st) {
        return Err(libc::EPERM);
    }
    let mut full = named;
    full.push(b'/');
    full.extend_from_slice(path);
    if full.len() >= libc::PATH_MAX as usize * 2 {
        return Err(libc::ENAMETOOLONG);
    }
    open_in_root(&root, &full, nofollow)
}

fn statx(fd: &OwnedFd) -> std::io::Result<libc::statx> {
    // SAFETY: an all-zero statx is valid.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx of a descriptor with an empty path into a valid buffer.
    let rc = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS | libc::STATX_MNT_ID,
            &mut st,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn read_only(fd: &OwnedFd) -> bool {
    nix::sys::statvfs::fstatvfs(fd)
        .map(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
        .unwrap_or(false)
}

/// Sets `mode` on the target from a child of this process that joined
/// the box's user namespace (so the kernel checks too that the file is
/// the box's).
fn change(userns: &OwnedFd, target: &Target, mode: u32) -> Result<(), i32> {
    let proc_path = CString::new(format!("/proc/self/fd/{}", target.fd().as_raw_fd()))
        .map_err(|_| libc::EINVAL)?;
    let (ns, fd) = (userns.as_raw_fd(), target.fd().as_raw_fd());
    let by_description = matches!(target, Target::Description(_));
    // SAFETY: the child makes raw system calls only, and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(last_errno());
    }
    if pid == 0 {
        // SAFETY: raw system calls in the forked child.
        unsafe {
            let err = || *libc::__errno_location();
            if libc::setns(ns, libc::CLONE_NEWUSER) != 0 {
                libc::_exit(err());
            }
            let rc = if by_description {
                libc::fchmod(fd, mode)
            } else {
                let rc = libc::syscall(SYS_FCHMODAT2, fd, c"".as_ptr(), mode, libc::AT_EMPTY_PATH);
                if rc != 0 && matches!(err(), libc::ENOSYS | libc::EINVAL) {
                    libc::chmod(proc_path.as_ptr(), mode)
                } else {
                    rc as i32
                }
            };
            libc::_exit(if rc == 0 { 0 } else { err() });
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if rc == pid {
            break;
        }
        if rc < 0 && last_errno() != libc::EINTR {
            return Err(libc::EPERM);
        }
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, e) => Err(e),
        _ => Err(libc::EPERM),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classic BPF the program uses, run over one `seccomp_data`.
    fn run_bpf(prog: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let ins = &prog[pc];
            pc += 1;
            match ins.code {
                BPF_LD_W_ABS => {
                    let k = ins.k as usize;
                    a = u32::from_ne_bytes(data[k..k + 4].try_into().unwrap());
                }
                BPF_ALU_AND_K => a &= ins.k,
                BPF_JEQ_K => pc += usize::from(if a == ins.k { ins.jt } else { ins.jf }),
                BPF_JSET_K => pc += usize::from(if a & ins.k != 0 { ins.jt } else { ins.jf }),
                BPF_RET_K => return ins.k,
                c => panic!("unexpected instruction {c:#x}"),
            }
        }
    }

    fn verdict(nr: i64, args: [u64; 6]) -> u32 {
        run_bpf(&program(), AUDIT_ARCH, nr as u32, args)
    }

    #[test]
    fn the_filter_sends_set_id_mode_changes_and_nothing_else() {
        let eperm = ret_errno(libc::EPERM);
        for (nr, mode_arg) in [
            (libc::SYS_fchmod, 1),
            (libc::SYS_fchmodat, 2),
            (SYS_FCHMODAT2, 2),
        ] {
            for mode in [0o4755u64, 0o2755, 0o6000, 0o104755] {
                let mut args = [0; 6];
                args[mode_arg] = mode;
                assert_eq!(verdict(nr, args), RET_NOTIFY, "{nr} {mode:o}");
            }
            for mode in [0o755u64, 0o1777, 0o644] {
                let mut args = [0; 6];
                args[mode_arg] = mode;
                assert_eq!(verdict(nr, args), RET_ALLOW, "{nr} {mode:o}");
            }
        }
        // Creation with a set-id mode: EPERM; without creating, the mode
        // is not looked at.
        let creat = libc::O_CREAT as u64 | libc::O_WRONLY as u64;
        let tmpfile = libc::O_TMPFILE as u64 | libc::O_RDWR as u64;
        assert_eq!(
            verdict(libc::SYS_openat, [0, 0, creat, 0o4755, 0, 0]),
            eperm
        );
        assert_eq!(
            verdict(libc::SYS_openat, [0, 0, tmpfile, 0o2755, 0, 0]),
            eperm
        );
        assert_eq!(
            verdict(libc::SYS_openat, [0, 0, creat, 0o755, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            verdict(
                libc::SYS_openat,
                [0, 0, libc::O_RDONLY as u64, 0o4755, 0, 0]
            ),
            RET_ALLOW
        );
        assert_eq!(
            verdict(
                libc::SYS_mknodat,
                [0, 0, libc::S_IFREG as u64 | 0o4755, 0, 0, 0]
            ),
            eperm
        );
        assert_eq!(
            verdict(
                libc::SYS_mknodat,
                [0, 0, libc::S_IFIFO as u64 | 0o644, 0, 0, 0]
            ),
            RET_ALLOW
        );
        assert_eq!(verdict(libc::SYS_openat2, [0; 6]), ret_errno(libc::ENOSYS));
        // Everything else, and the upper half of a mode argument.
        assert_eq!(verdict(libc::SYS_getpid, [0o4755; 6]), RET_ALLOW);
        assert_eq!(
            verdict(libc::SYS_fchmod, [0, 0o4755 << 32, 0, 0, 0, 0]),
            RET_ALLOW
        );
        // Another architecture's calls kill.
        assert_eq!(
            run_bpf(&program(), 0x4000_0003, libc::SYS_getpid as u32, [0; 6]),
            RET_KILL
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_filter_reads_x86_64_legacy_calls_and_x32() {
        let eperm = ret_errno(libc::EPERM);
        assert_eq!(
            verdict(libc::SYS_chmod, [0, 0o4755, 0, 0, 0, 0]),
            RET_NOTIFY
        );
        assert_eq!(verdict(libc::SYS_creat, [0, 0o4755, 0, 0, 0, 0]), eperm);
        assert_eq!(verdict(libc::SYS_creat, [0, 0o755, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(verdict(libc::SYS_mknod, [0, 0o104755, 0, 0, 0, 0]), eperm);
        let creat = libc::O_CREAT as u64;
        assert_eq!(verdict(libc::SYS_open, [0, creat, 0o6755, 0, 0, 0]), eperm);
        assert_eq!(verdict(libc::SYS_open, [0, 0, 0o6755, 0, 0, 0]), RET_ALLOW);
        let x32 = (libc::SYS_fchmod as u32 | X32_BIT) as i64;
        assert_eq!(verdict(x32, [0, 0o4755, 0, 0, 0, 0]), RET_NOTIFY);
    }

    fn root() -> Caller {
        Caller {
            fsuid: 100_000,
            fsgid: 100_000,
            groups: vec![],
            cap_eff: 1 << CAP_FOWNER | 1 << CAP_FSETID,
        }
    }

    fn maps() -> (Vec<Extent>, Vec<Extent>) {
        let m = Extent::parse_map("0 100000 65536\n");
        (m.clone(), m)
    }

    #[test]
    fn box_root_sets_set_id_bits_on_the_boxs_files() {
        let (u, g) = maps();
        let file = File {
            uid: 100_000,
            gid: 100_042,
            symlink: false,
        };
        assert_eq!(decide(&root(), &file, 0o106755, &u, &g), Ok(0o6755));
        // Another box user's file: CAP_FOWNER over the box's ids.
        let other = File {
            uid: 101_000,
            ..file
        };
        assert_eq!(decide(&root(), &other, 0o4755, &u, &g), Ok(0o4755));
        // A file of ids outside the box: never.
        let host = File {
            uid: 1000,
            gid: 1000,
            symlink: false,
        };
        assert_eq!(decide(&root(), &host, 0o4755, &u, &g), Err(libc::EPERM));
        let symlink = File {
            symlink: true,
            ..file
        };
        assert_eq!(
            decide(&root(), &symlink, 0o4755, &u, &g),
            Err(libc::EOPNOTSUPP)
        );
    }

    #[test]
    fn an_ordinary_box_user_changes_only_its_own_files_and_groups() {
        let (u, g) = maps();
        let user = Caller {
            fsuid: 101_000,
            fsgid: 101_000,
            groups: vec![101_000, 100_100],
            cap_eff: 0,
        };
        let roots = File {
            uid: 100_000,
            gid: 100_000,
            symlink: false,
        };
        assert_eq!(decide(&user, &roots, 0o4755, &u, &g), Err(libc::EPERM));
        let own = File {
            uid: 101_000,
            gid: 100_000,
            symlink: false,
        };
        // Not in the file's group: S_ISGID goes, S_ISUID stays.
        assert_eq!(decide(&user, &own, 0o6755, &u, &g), Ok(0o4755));
        let own_group = File {
            gid: 100_100,
            ..own
        };
        assert_eq!(decide(&user, &own_group, 0o6755, &u, &g), Ok(0o6755));
        // CAP_FOWNER without the box's ids on the file is nothing.
        let capped = Caller {
            cap_eff: 1 << CAP_FOWNER,
            ..user
        };
        let host = File {
            uid: 5,
            gid: 5,
            symlink: false,
        };
        assert_eq!(decide(&capped, &host, 0o4755, &u, &g), Err(libc::EPERM));
    }

    #[test]
    fn status_and_maps_parse() {
        let status = "Name:\tsh\nUmask:\t0022\nUid:\t100000\t100001\t100002\t100003\n\
                      Gid:\t200000\t200001\t200002\t200003\nGroups:\t10 20 \n\
                      CapEff:\t0000000000000018\n";
        assert_eq!(
            Caller::parse(status),
            Some(Caller {
                fsuid: 100_003,
                fsgid: 200_003,
                groups: vec![10, 20],
                cap_eff: 0x18,
            })
        );
        let m = Extent::parse_map("         0     100000          1\n  1  300000 65535\n");
        let maps = |id| maps_host_id(&m, id);
        assert!(maps(100_000) && maps(300_000) && maps(365_534));
        assert!(!maps(100_001) && !maps(365_535) && !maps(0));
    }

    /// The kernel takes the program: a child under it has its set-id
    /// `fchmod` sent to the listener (answered here), its set-id creation
    /// refused and `openat2` unsupported, and the rest allowed.
    #[test]
    fn a_child_under_the_filter_is_sent_refused_and_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = CString::new(dir.path().join("f").to_str().unwrap()).unwrap();
        let made = CString::new(dir.path().join("g").to_str().unwrap()).unwrap();
        let prog = program();
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        // SAFETY: the child makes raw system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                let Ok(listener) = install(&prog) else {
                    libc::_exit(10)
                };
                // The listener to the parent, by number (same table).
                let fdn = listener.as_raw_fd();
                let b = fdn.to_ne_bytes();
                libc::write(theirs.as_raw_fd(), b.as_ptr().cast(), 4);
                let fd = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
                let refused = libc::open(made.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o4755)
                    == -1
                    && *libc::__errno_location() == libc::EPERM;
                let enosys = libc::syscall(libc::SYS_openat2, 0, 0, 0, 0) == -1
                    && *libc::__errno_location() == libc::ENOSYS;
                // The parent answers EXDEV, so we know it was sent.
                let sent =
                    libc::fchmod(fd, 0o4755) == -1 && *libc::__errno_location() == libc::EXDEV;
                let plain = libc::fchmod(fd, 0o755) == 0;
                if refused && enosys && sent && plain {
                    0
                } else {
                    1
                }
            };
            unsafe { libc::_exit(code) };
        }
        drop(theirs);
        let mut b = [0u8; 4];
        std::io::Read::read_exact(&mut &ours, &mut b).unwrap();
        let theirs_fd = i32::from_ne_bytes(b);
        // The child's listener, taken like any of a box's descriptors.
        let listener = take_fd(pid, theirs_fd).expect("pidfd_getfd of the child's listener");
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notif,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        assert_eq!(i64::from(notif.data.nr), libc::SYS_fchmod);
        assert_eq!(notif.data.args[1], 0o4755);
        let resp = libc::seccomp_notif_resp {
            id: notif.id,
            val: 0,
            error: -libc::EXDEV,
            flags: 0,
        };
        assert_eq!(
            unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) },
            0
        );
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "the filter did not act");
        assert!(!dir.path().join("g").exists());
    }
}
