//! Running a command inside a namespace box.
//!
//! The daemon is multi-threaded and cannot join a user namespace itself, so
//! each exec re-executes the daemon binary as a small single-threaded helper
//! (`boxd __nsexec`) that joins the box's namespaces, changes root to the
//! box, forks the command (which lands in the box's pid namespace) and
//! reports on fd 3, one line each:
//!
//! - `pid N`: the command was executed; N is its host pid and process group;
//! - `exit N` or `signal N`: how it ended;
//! - `fail CODE MESSAGE`: it could not run (126 cannot execute, 127 not
//!   found), before or after the fork.
//!
//! The command runs confined exactly as the box's own processes are
//! ([`super::confine`]): no capabilities, `no_new_privs`, the seccomp
//! filter.
//!
//! The command's stdio is the helper's, handed over untouched, so output
//! never passes through the helper. The helper dies with the daemon
//! (`PR_SET_PDEATHSIG`) and the command dies with the helper.

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use nix::sched::CloneFlags;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::engine::{ExitStatus, Input, Output, Process, ProcessControl};
use crate::error::{Error, Result};

/// The argument that selects helper mode in `main`.
pub const HELPER_ARG: &str = "__nsexec";
const STATUS_FD: i32 = super::helper::CHANNEL_FD;
/// The `oom_score_adj` of every command in a box.
const OOM_SCORE_ADJ: &[u8] = b"500";

/// The box to join.
pub struct Target {
    /// Host pid of a process in the box (its init).
    pub pid: i32,
    /// The box's `cgroup.procs` files, joined before anything else.
    pub cgroups: Vec<std::path::PathBuf>,
    /// `RLIMIT_NPROC` for the command, where no cgroup limits processes.
    pub nproc: Option<u64>,
}

struct Control {
    pgid: i32,
    pty: Option<OwnedFd>,
}

impl ProcessControl for Control {
    fn signal(&self, signal: i32) -> Result<()> {
        if self.pgid <= 1 {
            // The command never started; there is nothing to signal (and
            // kill(0) would hit the daemon's own group).
            return Ok(());
        }
        // SAFETY: kill has no memory-safety preconditions.
        let rc = unsafe { libc::kill(-self.pgid, signal) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ESRCH) {
                return Err(Error::io("signal exec", err));
            }
        }
        Ok(())
    }

    fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        let Some(pty) = &self.pty else {
            return Err(Error::FailedPrecondition("the exec has no TTY".into()));
        };
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads a winsize from a valid pointer.
        if unsafe { libc::ioctl(pty.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
            return Err(Error::io("resize TTY", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

/// Starts `command` in the box through the helper.
pub async fn spawn(
    target: Target,
    command: &str,
    args: &[String],
    env: Vec<(String, String)>,
    working_dir: &str,
    stdin: bool,
    tty: Option<(u16, u16)>,
) -> Result<Process> {
    use std::process::Stdio;
    let mut helper = super::helper::Helper::new(HELPER_ARG)?;
    let cmd = &mut helper.cmd;
    let cgroups: Vec<String> = target
        .cgroups
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    cmd.arg(target.pid.to_string())
        .arg(working_dir)
        .arg(if tty.is_some() { "1" } else { "0" })
        .arg(if cgroups.is_empty() {
            "-".to_owned()
        } else {
            cgroups.join("\n")
        })
        .arg(target.nproc.map_or("-".to_owned(), |n| n.to_string()))
        .arg("--")
        .arg(command)
        .args(args)
        .envs(env);

    let mut pty_master = None;
    if let Some((rows, cols)) = tty {
        let (master, slave) = box_pty(target.pid, rows, cols)?;
        let slave = std::fs::File::from(slave);
        let dup = |f: &std::fs::File| f.try_clone().map_err(|e| Error::io("dup pty", e));
        cmd.stdin(Stdio::from(dup(&slave)?))
            .stdout(Stdio::from(dup(&slave)?))
            .stderr(Stdio::from(slave));
        pty_master = Some(master);
    } else {
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
    // The pty's slave ends go with the command, so EOF arrives.
    let (mut child, status_ours) = helper.spawn("the exec helper")?;

    status_ours
        .set_nonblocking(true)
        .map_err(|e| Error::io("status socket", e))?;
    let status =
        tokio::net::UnixStream::from_std(status_ours).map_err(|e| Error::io("status socket", e))?;
    let mut lines = BufReader::new(status).lines();

    let first = lines.next_line().await.ok().flatten().unwrap_or_default();
    let (pgid, early_exit) = match first.split_once(' ') {
        Some(("pid", n)) => (
            n.parse::<i32>()
                .map_err(|_| Error::Internal(format!("helper said {first:?}")))?,
            None,
        ),
        _ => (0, Some(parse_status(&first))),
    };

    let (stdin, stdout, stderr): (Option<Input>, Output, Option<Output>) = match &pty_master {
        Some(master) => {
            let reader =
                std::fs::File::from(master.try_clone().map_err(|e| Error::io("dup pty", e))?);
            let writer =
                std::fs::File::from(master.try_clone().map_err(|e| Error::io("dup pty", e))?);
            (
                stdin.then(|| Box::pin(tokio::fs::File::from_std(writer)) as Input),
                Box::pin(tokio::fs::File::from_std(reader)),
                None,
            )
        }
        None => (
            child.stdin.take().map(|w| Box::pin(w) as Input),
            Box::pin(grow_pipe(child.stdout.take().expect("stdout is piped"))),
            Some(Box::pin(grow_pipe(child.stderr.take().expect("stderr is piped"))) as Output),
        ),
    };

    let exit = Box::pin(async move {
        let status = match early_exit {
            Some(s) => s,
            None => {
                let line = lines.next_line().await.ok().flatten().unwrap_or_default();
                parse_status(&line)
            }
        };
        let _ = child.wait().await;
        status
    });
    Ok(Process {
        stdin,
        stdout,
        stderr,
        control: Arc::new(Control {
            pgid,
            pty: pty_master,
        }),
        exit,
    })
}

/// Bigger pipe buffers mean fewer, larger reads for bulk output. Best
/// effort: the kernel caps it at `/proc/sys/fs/pipe-max-size`.
fn grow_pipe<T: AsRawFd>(pipe: T) -> T {
    // SAFETY: F_SETPIPE_SZ on a pipe we own; failure leaves it as it was.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
    pipe
}

/// Opens a pseudo-terminal pair on the box's own devpts instance (so the
/// command sees its terminal as `/dev/pts/N` inside the box), sized before
/// anything runs on it.
fn box_pty(pid: i32, rows: u16, cols: u16) -> Result<(OwnedFd, OwnedFd)> {
    use std::os::unix::fs::OpenOptionsExt;
    let ptmx = format!("/proc/{pid}/root/dev/pts/ptmx");
    let master: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&ptmx)
        .map_err(|e| Error::io(format!("open {ptmx}"), e))?
        .into();
    let fd = master.as_raw_fd();
    let unlock: libc::c_int = 0;
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: ioctls on a pty master we own, with valid pointers.
    let slave = unsafe {
        if libc::ioctl(fd, libc::TIOCSPTLCK, &unlock) != 0
            || libc::ioctl(fd, libc::TIOCSWINSZ, &ws) != 0
        {
            return Err(Error::io("set up pty", std::io::Error::last_os_error()));
        }
        libc::ioctl(
            fd,
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if slave < 0 {
        return Err(Error::io("open pty peer", std::io::Error::last_os_error()));
    }
    // SAFETY: TIOCGPTPEER returned a new descriptor that nothing else owns.
    Ok((master, unsafe { OwnedFd::from_raw_fd(slave) }))
}

fn parse_status(line: &str) -> ExitStatus {
    let mut words = line.splitn(3, ' ');
    match (words.next(), words.next(), words.next()) {
        (Some("exit"), Some(n), _) => ExitStatus {
            code: n.parse().ok(),
            ..Default::default()
        },
        (Some("signal"), Some(n), _) => ExitStatus {
            signal: n.parse().ok(),
            ..Default::default()
        },
        (Some("fail"), Some(code), msg) => ExitStatus {
            code: code.parse().ok(),
            error: Some(msg.unwrap_or("the command could not run").to_owned()),
            ..Default::default()
        },
        _ => ExitStatus {
            error: Some("the exec helper ended without a status".into()),
            ..Default::default()
        },
    }
}

// ---------------------------------------------------------------------------
// The helper itself. Runs before anything else in `main`, single-threaded.

/// `boxd __nsexec PID WORKDIR TTY CGROUP-PROCS|- NPROC|- -- COMMAND ARGS...`
pub fn helper_main(args: Vec<OsString>) -> ! {
    // SAFETY: fd 3 was set up by the daemon for us.
    let mut status = unsafe { std::fs::File::from_raw_fd(STATUS_FD) };
    let code = match run_helper(&args, &mut status) {
        Ok(()) => 0,
        Err((code, msg)) => {
            let _ = writeln!(status, "fail {code} {msg}");
            1
        }
    };
    std::process::exit(code)
}

type HelperError = (i32, String);

fn run_helper(
    args: &[OsString],
    status: &mut std::fs::File,
) -> std::result::Result<(), HelperError> {
    let bad = || (126, "bad helper arguments".to_owned());
    let word = |i: usize| args.get(i).and_then(|a| a.to_str()).ok_or_else(bad);
    let pid: i32 = word(0)?.parse().map_err(|_| bad())?;
    let working_dir = word(1)?.to_owned();
    let tty = word(2)? == "1";
    let cgroups = word(3)?;
    let nproc: Option<u64> = match word(4)? {
        "-" => None,
        n => Some(n.parse().map_err(|_| bad())?),
    };
    if word(5)? != "--" || args.len() < 7 {
        return Err(bad());
    }
    let argv: Vec<CString> = args[6..]
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| bad()))
        .collect::<std::result::Result<_, _>>()?;

    // The box's cgroups are opened while the helper still has the
    // daemon's rights on them; the command joins them (the kernel checks
    // the opener's rights) before it executes, so it and its children count
    // against the box's limits and the helper, which must report its exit,
    // never does.
    let cgroup_files: Vec<std::fs::File> = match cgroups {
        "-" => Vec::new(),
        list => list
            .split('\n')
            .map(|procs| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(procs)
                    .map_err(|e| (126, format!("opening the box's cgroup {procs}: {e}")))
            })
            .collect::<std::result::Result<_, _>>()?,
    };
    enter_box(pid, &working_dir)?;
    // Compiled (allocated) before the fork: the child may only make raw
    // system calls.
    let filters = super::confine::filters().map_err(|e| (126, e))?;

    let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| (126, format!("pipe: {e}")))?;
    // SAFETY: the helper is single-threaded; the child only calls
    // async-signal-safe functions before exec.
    match unsafe { nix::unistd::fork() }.map_err(|e| (126, format!("fork: {e}")))? {
        nix::unistd::ForkResult::Child => {
            drop(err_r);
            // SAFETY: plain syscalls in the forked child.
            unsafe {
                libc::setsid();
                if tty {
                    libc::ioctl(0, libc::TIOCSCTTY, 0);
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::close(STATUS_FD);
                for f in &cgroup_files {
                    if libc::write(f.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                        let failed = super::confine::STEP_CGROUP;
                        let _ = nix::unistd::write(&err_w, &failed.to_ne_bytes());
                        libc::_exit(127);
                    }
                }
                // Under memory pressure the kernel kills the box's commands
                // before its pid 1 and init (which would end the box) and
                // before the host's processes.
                // (Its /proc files are its own again only once dumpable:
                // becoming box root cleared that, as any uid change does.)
                libc::prctl(libc::PR_SET_DUMPABLE, 1);
                let adj = libc::open(
                    c"/proc/self/oom_score_adj".as_ptr(),
                    libc::O_WRONLY | libc::O_CLOEXEC,
                );
                if adj >= 0 {
                    libc::write(adj, OOM_SCORE_ADJ.as_ptr().cast(), OOM_SCORE_ADJ.len());
                    libc::close(adj);
                }
                if let Some(n) = nproc {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    libc::setrlimit(libc::RLIMIT_NPROC, &lim);
                }
            }
            // Joining the box's user namespace gave this process every
            // capability in it: keep only box root's few before the
            // command runs.
            let failed = match super::confine::confine(filters, super::confine::BOX_ROOT_CAPS) {
                Err(step) => step,
                Ok(()) => nix::unistd::execvp(&argv[0], &argv).unwrap_err() as i32,
            };
            let _ = nix::unistd::write(&err_w, &failed.to_ne_bytes());
            // SAFETY: leaving the forked child without running destructors.
            unsafe { libc::_exit(127) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(err_w);
            // EOF on the error pipe means the exec succeeded, so the child
            // already leads its own process group: only now may the daemon
            // signal the group.
            let mut buf = [0u8; 4];
            let n = nix::unistd::read(&err_r, &mut buf).unwrap_or(0);
            if n == 4 {
                let _ = nix::sys::wait::waitpid(child, None);
                let failed = i32::from_ne_bytes(buf);
                if let Some(step) = super::confine::step_message(failed) {
                    return Err((126, format!("confining the command failed: {step}")));
                }
                let errno = nix::errno::Errno::from_raw(failed);
                let code = if errno == nix::errno::Errno::ENOENT {
                    127
                } else {
                    126
                };
                let cmd = args[6].to_string_lossy();
                return Err((code, format!("cannot run {cmd:?}: {}", errno.desc())));
            }
            let _ = writeln!(status, "pid {child}");
            let wait = nix::sys::wait::waitpid(child, None);
            let line = match wait {
                Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => format!("exit {c}"),
                Ok(nix::sys::wait::WaitStatus::Signaled(_, s, _)) => format!("signal {}", s as i32),
                other => return Err((126, format!("waiting for the command: {other:?}"))),
            };
            let _ = writeln!(status, "{line}");
            Ok(())
        }
    }
}

/// Joins the namespaces of `pid` and changes root and directory into its box.
fn enter_box(pid: i32, working_dir: &str) -> std::result::Result<(), HelperError> {
    let open = |what: &str| {
        std::fs::File::open(format!("/proc/{pid}/{what}"))
            .map_err(|e| (126, format!("the box is not running ({what}: {e})")))
    };
    let root = open("root")?;
    let mut spaces = vec![
        (open("ns/user")?, CloneFlags::CLONE_NEWUSER),
        (open("ns/ipc")?, CloneFlags::CLONE_NEWIPC),
        (open("ns/uts")?, CloneFlags::CLONE_NEWUTS),
    ];
    spaces.push((open("ns/net")?, CloneFlags::CLONE_NEWNET));
    spaces.push((open("ns/pid")?, CloneFlags::CLONE_NEWPID));
    spaces.push((open("ns/mnt")?, CloneFlags::CLONE_NEWNS));
    for (fd, flag) in &spaces {
        nix::sched::setns(fd, *flag)
            .map_err(|e| (126, format!("joining the box ({flag:?}): {e}")))?;
        if *flag == CloneFlags::CLONE_NEWUSER {
            // As box root from here on, never as the daemon's own user
            // (host root, when boxd runs as root): joining kept its ids.
            // No supplementary groups (refused, and moot, in a box of a
            // single id).
            let _ = nix::unistd::setgroups(&[]);
            super::userns::become_root(false)
                .map_err(|e| (126, format!("becoming box root: {e}")))?;
        }
    }
    nix::unistd::fchdir(&root).map_err(|e| (126, format!("fchdir: {e}")))?;
    nix::unistd::chroot(".").map_err(|e| (126, format!("chroot: {e}")))?;
    nix::unistd::chdir(working_dir).map_err(|e| {
        (
            126,
            format!("working directory {working_dir:?}: {}", e.desc()),
        )
    })?;
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0o022) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_parse() {
        assert_eq!(parse_status("exit 3").code, Some(3));
        assert_eq!(parse_status("signal 9").signal, Some(9));
        let f = parse_status("fail 127 cannot run \"x\": No such file");
        assert_eq!(f.code, Some(127));
        assert_eq!(f.error.as_deref(), Some("cannot run \"x\": No such file"));
        assert!(parse_status("").error.is_some());
    }
}
