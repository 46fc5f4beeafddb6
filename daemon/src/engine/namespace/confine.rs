//! What a process in a namespace box may not do: few capabilities, no new
//! privileges, and a seccomp filter on the system calls a box never needs.
//!
//! Applied twice: by bubblewrap to the box's own processes (its pid 1 and
//! the init: `--cap-drop ALL`, `--add-seccomp-fd`, and bubblewrap always
//! sets `no_new_privs`), and by the exec helper to every command it forks
//! ([`confine`]), since joining the box's user namespace hands the helper
//! a full capability set in it. A command runs as box root with
//! [`BOX_ROOT_CAPS`] only: the capabilities rootless Podman gives a
//! container's root, enough for package managers, `chown`, `useradd` and
//! `su`. They act in the box's user namespace alone, on the box's own ids
//! (which are never host root's, see `idmap.rs`); `CAP_SYS_ADMIN`,
//! `CAP_NET_ADMIN`, `CAP_NET_RAW`, `CAP_SYS_PTRACE` and the rest are gone,
//! from the bounding set too.
//!
//! The filter is a deny-list in the spirit of Docker's and Flatpak's
//! defaults (`EPERM` for each listed call, `ENOSYS` for `clone3` so that
//! libc falls back to `clone`, whose flags the filter can read):
//! - no new namespaces and no mounts: `unshare`, `setns`, `clone` with
//!   `CLONE_NEWUSER`, `mount`, `umount2`, `pivot_root` and the new mount
//!   API, so a box cannot build itself a user namespace with a fresh set of
//!   capabilities;
//! - sockets of the unix, inet, inet6 and netlink families only: no
//!   `AF_VSOCK` (the hypervisor's sockets), `AF_PACKET`, `AF_ALG`, ...;
//! - no kernel surface a box has no use for: keyrings, BPF,
//!   `perf_event_open`, `userfaultfd`, `io_uring`, module loading, kexec,
//!   `open_by_handle_at`, `syslog`, `acct`, swap, NUMA policy, `reboot`;
//! - no typing into a terminal: `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)`.
//!
//! System calls of another ABI (i386 on x86_64) kill the process: the
//! filter checks the architecture first. On x86_64 the x32 numbers of the
//! listed calls are denied too.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// Denied outright, with `EPERM`.
const DENIED: &[libc::c_long] = &[
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_add_key,
    libc::SYS_keyctl,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_mbind,
    libc::SYS_set_mempolicy,
    libc::SYS_migrate_pages,
    libc::SYS_move_pages,
    // Another process's descriptors and memory: nothing in a box needs
    // them (ptrace stays, for debuggers), and a box that took a
    // descriptor from a process being set up as a command could reach
    // what that process briefly held.
    libc::SYS_pidfd_getfd,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// The socket families a box may use.
const ALLOWED_FAMILIES: [libc::c_int; 4] = [
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

/// Capabilities a command in a box keeps (in the box's user namespace):
/// rootless Podman's default set.
pub const BOX_ROOT_CAPS: u64 = cap(CAP_CHOWN)
    | cap(CAP_DAC_OVERRIDE)
    | cap(CAP_FOWNER)
    | cap(CAP_FSETID)
    | cap(CAP_KILL)
    | cap(CAP_SETGID)
    | cap(CAP_SETUID)
    | cap(CAP_SETPCAP)
    | cap(CAP_NET_BIND_SERVICE)
    | cap(CAP_SYS_CHROOT)
    | cap(CAP_SETFCAP);

const fn cap(n: u32) -> u64 {
    1 << n
}

// From <linux/capability.h>.
const CAP_CHOWN: u32 = 0;
const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_FOWNER: u32 = 3;
const CAP_FSETID: u32 = 4;
const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_SETPCAP: u32 = 8;
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_SYS_CHROOT: u32 = 18;
const CAP_SETFCAP: u32 = 31;

/// The x32 ABI's system call numbers are the x86_64 ones with this bit set.
#[cfg(target_arch = "x86_64")]
const X32_BIT: i64 = 0x4000_0000;

/// The two programs: the deny-list (`EPERM`) and `clone3` (`ENOSYS`).
pub struct Filters {
    pub deny: BpfProgram,
    pub clone3: BpfProgram,
}

/// The filters, compiled once per daemon.
pub fn filters() -> Result<&'static Filters, String> {
    static FILTERS: OnceLock<Result<Filters, String>> = OnceLock::new();
    FILTERS.get_or_init(compile).as_ref().map_err(Clone::clone)
}

fn compile() -> Result<Filters, String> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp: {e}"))?;
    let cond = |arg, len, op, value| {
        SeccompCondition::new(arg, len, op, value).map_err(|e| format!("seccomp: {e}"))
    };
    let rule = |conds| SeccompRule::new(conds).map_err(|e| format!("seccomp: {e}"));

    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in DENIED {
        deny.insert(nr, Vec::new());
    }
    let newuser = libc::CLONE_NEWUSER as u64;
    deny.insert(
        libc::SYS_clone,
        vec![rule(vec![cond(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(newuser),
            newuser,
        )?])?],
    );
    // Socket families: a rule matches (and denies) when the domain is none
    // of the allowed ones.
    let mut other_family = Vec::new();
    for family in ALLOWED_FAMILIES {
        other_family.push(cond(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            family as u64,
        )?);
    }
    deny.insert(libc::SYS_socket, vec![rule(other_family.clone())?]);
    deny.insert(libc::SYS_socketpair, vec![rule(other_family)?]);
    let mut ioctls = Vec::new();
    for request in [libc::TIOCSTI, libc::TIOCLINUX] {
        ioctls.push(rule(vec![cond(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            #[allow(clippy::unnecessary_cast)] // the request type differs across libcs
            (request as u64),
        )?])?);
    }
    deny.insert(libc::SYS_ioctl, ioctls);
    #[cfg(target_arch = "x86_64")]
    {
        let x32: Vec<(i64, Vec<SeccompRule>)> = deny
            .iter()
            .map(|(nr, rules)| (nr | X32_BIT, rules.clone()))
            .collect();
        deny.extend(x32);
    }

    let program = |rules, action| -> Result<BpfProgram, String> {
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
            .map_err(|e| format!("seccomp: {e}"))?;
        filter.try_into().map_err(|e| format!("seccomp: {e}"))
    };
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, Vec::new());
    Ok(Filters {
        deny: program(deny, SeccompAction::Errno(libc::EPERM as u32))?,
        clone3: program(clone3, SeccompAction::Errno(libc::ENOSYS as u32))?,
    })
}

/// A program as the bytes the kernel (and `bwrap --add-seccomp-fd`) takes:
/// an array of `struct sock_filter`.
pub fn program_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for ins in program {
        out.extend_from_slice(&ins.code.to_ne_bytes());
        out.push(ins.jt);
        out.push(ins.jf);
        out.extend_from_slice(&ins.k.to_ne_bytes());
    }
    out
}

/// Keeps only the capabilities in `keep` (bounding, effective, permitted;
/// none inheritable or ambient), sets `no_new_privs` and installs the
/// filters, the set-id one last ([`super::setid`]), whose listener it
/// returns: a box's zygote does this to itself before it forks any
/// command. Only raw system calls.
///
/// Returns the step that failed (see [`step_message`]), so the exec fails
/// closed rather than running unconfined.
pub fn confine(
    filters: &Filters,
    setid: &[libc::sock_filter],
    keep: u64,
) -> Result<std::os::fd::OwnedFd, i32> {
    // SAFETY: prctl/syscall with plain integer arguments and pointers to
    // live, correctly laid-out structures.
    unsafe {
        for cap in 0..64u32 {
            if keep & (1 << cap) != 0 {
                continue;
            }
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0
                && *libc::__errno_location() != libc::EINVAL
            {
                return Err(STEP_BOUNDING);
            }
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(STEP_NO_NEW_PRIVS);
        }
        for program in [&filters.clone3, &filters.deny] {
            let prog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0 {
                return Err(STEP_SECCOMP);
            }
        }
        let listener = super::setid::install(setid).map_err(|_| STEP_SETID)?;
        // _LINUX_CAPABILITY_VERSION_3: two 32-bit halves.
        let header = CapHeader {
            version: 0x2008_0522,
            pid: 0,
        };
        let half = |v: u64| CapData {
            effective: v as u32,
            permitted: v as u32,
            inheritable: 0,
        };
        let data = [half(keep), half(keep >> 32)];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(STEP_CAPSET);
        }
        Ok(listener)
    }
}

/// Failed steps of [`confine`], numbered apart from errno values.
const STEP_BOUNDING: i32 = 10_001;
const STEP_NO_NEW_PRIVS: i32 = 10_002;
const STEP_SECCOMP: i32 = 10_003;
const STEP_CAPSET: i32 = 10_004;
const STEP_SETID: i32 = 10_005;
/// The working directory does not exist (or is no directory).
pub const STEP_CHDIR: i32 = 10_006;
/// Switching to the exec's user (`setgroups`, `setgid`, `setuid`) failed.
pub const STEP_USER: i32 = 10_007;

/// What a step number from [`confine`] means; `None` for anything
/// else (an errno).
pub fn step_message(step: i32) -> Option<&'static str> {
    Some(match step {
        STEP_BOUNDING => "dropping the capability bounding set",
        STEP_NO_NEW_PRIVS => "setting no_new_privs",
        STEP_SECCOMP => "installing the seccomp filter",
        STEP_CAPSET => "clearing the capability sets",
        STEP_SETID => "installing the set-id seccomp filter",
        _ => return None,
    })
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_serialize() {
        let f = filters().expect("filters compile");
        assert!(f.deny.len() > DENIED.len(), "one check per denied call");
        let bytes = program_bytes(&f.deny);
        assert_eq!(bytes.len(), f.deny.len() * 8);
        assert_eq!(program_bytes(&f.clone3).len(), f.clone3.len() * 8);
    }

    /// The filter really denies what it lists, in a forked child.
    #[test]
    fn a_confined_child_cannot_unshare() {
        let f = filters().unwrap();
        // SAFETY: the child only makes raw system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    libc::_exit(10);
                }
                for program in [&f.clone3, &f.deny] {
                    let prog = libc::sock_fprog {
                        len: program.len() as u16,
                        filter: program.as_ptr() as *mut libc::sock_filter,
                    };
                    if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0 {
                        libc::_exit(11);
                    }
                }
                let unshare = libc::unshare(libc::CLONE_NEWUSER) == -1
                    && *libc::__errno_location() == libc::EPERM;
                let clone3 = libc::syscall(libc::SYS_clone3, 0, 0) == -1
                    && *libc::__errno_location() == libc::ENOSYS;
                let getpid_ok = libc::getpid() > 0;
                if unshare && clone3 && getpid_ok { 0 } else { 1 }
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "filter did not deny");
    }
}
