//! Running commands inside a namespace box: the box's **zygote**.
//!
//! A multi-threaded process cannot join a user namespace, so each box's
//! supervisor starts one small single-threaded helper (`boxd __nsexec`)
//! that joins the box's namespaces once, changes root to the box, and then
//! forks every command of the box, already inside (no binary is executed
//! per exec but the command itself). Its children land in the box's pid
//! namespace; it is not in it itself, so nothing in the box can see or
//! signal it.
//!
//! It talks to the supervisor over a `SOCK_SEQPACKET` socket (fd 4), one
//! JSON message per packet:
//!
//! - in: [`Request::Spawn`], with the command's stdin, stdout and stderr
//!   passed as descriptors (`SCM_RIGHTS`); or [`Request::Connect`], a TCP
//!   connection to a port on the box's own loopback (a published port);
//! - out: first, once, [`Reply::Ready`] when the zygote has finished the
//!   box ([`super::finish`]: its `/proc` read-only, the egress proxy's
//!   socket in the box passed along), or [`Reply::Fail`] and its end; then
//!   [`Reply::Pid`] (the command was executed; its host pid is its
//!   process group) or [`Reply::Fail`] (126 cannot execute, 127 not
//!   found), or [`Reply::Connected`] with the socket passed back (its
//!   connect perhaps still under way: it never blocks the zygote), in
//!   request order; and [`Reply::Exit`] whenever a command ends.
//!
//! Every command runs confined exactly as the box's own processes are
//! ([`super::confine`]): no capabilities but box root's few,
//! `no_new_privs`, the seccomp filter (the zygote confines itself once,
//! so commands are born confined); in the box's cgroups (the zygote
//! joins them, so commands are born there), with the
//! box's `oom_score_adj` and, where no cgroup limits processes, its
//! `RLIMIT_NPROC`. The zygote dies with the supervisor
//! (`PR_SET_PDEATHSIG`) and the commands with the zygote.

use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sched::CloneFlags;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The argument that selects helper mode in `main`.
pub const HELPER_ARG: &str = "__nsexec";
/// The zygote's end of its packet socket with the supervisor.
pub const ZYGOTE_FD: RawFd = 4;
/// The most one request may hold (argv and environment).
pub const MAX_PACKET: usize = 1 << 20;
/// The `oom_score_adj` of every command in a box: under memory pressure
/// the kernel kills the box's commands before its pid 1 and init (which
/// would end the box) and before the host's processes.
const OOM_SCORE_ADJ: &[u8] = b"500";

/// A command to start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spawn {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub tty: bool,
    /// `USER[:GROUP]` to run as, resolved in the box's `/etc/passwd` and
    /// `/etc/group` ([`super::users`]); `None`: box root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Run this instead of `argv` ([`super::builtin`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<crate::engine::Builtin>,
}

/// What the supervisor asks of the zygote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    Spawn(Spawn),
    /// A TCP connection to `port` on the box's loopback (`::1` when
    /// `ipv6`, else 127.0.0.1), made in the box's network namespace.
    Connect {
        port: u16,
        ipv6: bool,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum Reply {
    /// The box is finished and the zygote serves requests; the egress
    /// listener, when one was asked for, comes with this reply.
    Ready,
    Pid(i32),
    Fail(i32, String),
    /// The connection's socket comes with this reply (non-blocking; its
    /// connect may still be under way).
    Connected,
    /// `(pid, exit code, signal)`.
    Exit(i32, Option<i32>, Option<i32>),
    /// The listener of the set-id filter the zygote confined itself with
    /// ([`super::setid`]) comes with this reply, sent once, right after
    /// [`Reply::Ready`] and before any command exists.
    Listener,
}

/// Where the zygote finds the box: the first packet it reads. The
/// supervisor starts the zygote while the box boots and sends this once
/// the box's init runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Enter {
    /// Host pid of a process in the box (its init).
    pub pid: i32,
    /// The box's egress port: the zygote listens on it inside the box.
    pub egress_port: Option<u16>,
}

/// Starts a box's zygote, which waits for [`Enter`]; `nproc` is
/// `RLIMIT_NPROC` for the commands, where no cgroup limits processes.
/// Returns it and the supervisor's end of its packet socket. The
/// supervisor moves it into the box's cgroups (with the boot helper, at
/// once: a cgroup v1 move waits for an RCU grace period, about 12 ms here,
/// unless another move has just paid for one), so that every command is
/// born in them.
pub fn start(nproc: Option<u64>) -> Result<(tokio::process::Child, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| Error::io("socketpair", e.into()))?;
    let mut helper = super::helper::Helper::new(HELPER_ARG)?;
    helper.pass(theirs.as_raw_fd(), ZYGOTE_FD);
    helper
        .cmd
        .arg(nproc.map_or("-".to_owned(), |n| n.to_string()))
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    let (child, _channel) = helper.spawn("the box's zygote")?;
    drop(theirs);
    Ok((child, ours))
}

/// Tells a started zygote where the box is.
pub fn enter(sock: &impl AsFd, enter: &Enter) -> Result<()> {
    send_json(sock, enter, &[])
}

/// Sends one request with its descriptors (a spawn's stdio, or none).
pub fn send(sock: &impl AsFd, request: &Request, fds: &[RawFd]) -> Result<()> {
    send_json(sock, request, fds)
}

fn send_json(sock: &impl AsFd, message: &impl Serialize, fds: &[RawFd]) -> Result<()> {
    let body = serde_json::to_vec(message).map_err(|e| Error::Internal(e.to_string()))?;
    if body.len() > MAX_PACKET {
        return Err(Error::InvalidArgument(
            "the command and its environment exceed 1 MiB".into(),
        ));
    }
    super::fdpass::send(sock, &body, fds)
        .map_err(|e| Error::io("send to the box's zygote", e.into()))?;
    Ok(())
}

/// Reads one reply and the descriptor it carries, if any; `None` when the
/// zygote is gone (or on `EAGAIN`, as `Err(WouldBlock)`).
pub fn receive(sock: &impl AsFd) -> std::io::Result<Option<(Reply, Option<OwnedFd>)>> {
    let mut buf = [0u8; 4096];
    // Any descriptor beyond the first is closed here.
    let (n, fds) = super::fdpass::receive(sock, &mut buf, nix::sys::socket::MsgFlags::MSG_DONTWAIT)
        .map_err(std::io::Error::from)?;
    let fd = fds.into_iter().next();
    if n == 0 {
        return Ok(None);
    }
    serde_json::from_slice(&buf[..n])
        .map(|r| Some((r, fd)))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Opens a pseudo-terminal pair on the box's own devpts instance (so the
/// command sees its terminal as `/dev/pts/N` inside the box), sized before
/// anything runs on it.
pub fn box_pty(pid: i32, rows: u16, cols: u16) -> Result<(OwnedFd, OwnedFd)> {
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

// ---------------------------------------------------------------------------
// The zygote itself. Runs before anything else in `main`, single-threaded.

/// `boxd __nsexec NPROC|-`, with its packet socket at
/// [`ZYGOTE_FD`].
pub fn helper_main(args: Vec<OsString>) -> ! {
    // SAFETY: the supervisor placed the socket at this number for us.
    let sock = unsafe { OwnedFd::from_raw_fd(ZYGOTE_FD) };
    match serve(&args, &sock) {
        Ok(()) => std::process::exit(0),
        Err(why) => {
            eprintln!("boxd zygote: {why}");
            std::process::exit(1)
        }
    }
}

struct Joins {
    nproc: Option<u64>,
    /// The zygote's own `oom_score_adj`, opened before it entered the box
    /// (where the file is no longer its own), and the value to go back to:
    /// each command inherits [`OOM_SCORE_ADJ`] from a fork made while it is
    /// set, so no command has to make itself dumpable to set its own.
    oom: Option<(std::fs::File, Vec<u8>)>,
}

impl Joins {
    /// Sets the zygote's OOM score for a fork (`true`) or back to its own.
    fn oom_for_fork(&self, forking: bool) {
        use std::os::unix::fs::FileExt;
        if let Some((file, own)) = &self.oom {
            let value: &[u8] = if forking { OOM_SCORE_ADJ } else { own };
            let _ = file.write_at(value, 0);
        }
    }
}

fn serve(args: &[OsString], sock: &OwnedFd) -> std::result::Result<(), String> {
    let word = |i: usize| {
        args.get(i)
            .and_then(|a| a.to_str())
            .ok_or("bad zygote arguments")
    };
    let nproc: Option<u64> = match word(0)? {
        "-" => None,
        n => Some(n.parse().map_err(|_| "bad zygote nproc")?),
    };
    // The kernel's OOM killer stays off the zygote where it may (commands
    // get 500).
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    let oom = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/oom_score_adj")
        .ok()
        .and_then(|f| {
            let own = std::fs::read("/proc/self/oom_score_adj").ok()?;
            Some((f, own.trim_ascii().to_vec()))
        });
    // Where the box is, once it runs (the supervisor has moved the zygote
    // into the box's cgroups by then); nothing: the start failed.
    let mut first = [0u8; 512];
    let n = loop {
        match nix::sys::socket::recv(
            sock.as_raw_fd(),
            &mut first,
            nix::sys::socket::MsgFlags::empty(),
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("recv: {e}")),
            Ok(0) => return Ok(()),
            Ok(n) => break n,
        }
    };
    let Enter { pid, egress_port } =
        serde_json::from_slice(&first[..n]).map_err(|e| format!("bad zygote start: {e}"))?;
    let the_box = Joins { nproc, oom };
    enter_box(pid)?;
    // The box's last steps, with the zygote's privileges in the box and
    // before any command exists; a failure is the start's.
    match super::finish::in_the_box(egress_port) {
        Ok(None) => reply_to(sock, &Reply::Ready)?,
        Ok(Some(listener)) => reply_with(sock, &Reply::Ready, &[listener.as_raw_fd()])?,
        Err(why) => {
            let _ = reply_to(sock, &Reply::Fail(0, why.clone()));
            return Err(why);
        }
    }
    // The zygote confines itself once, exactly as the box's processes are
    // (box root's few capabilities, `no_new_privs`, the seccomp filter):
    // every command it forks is born confined, with no step of its own.
    let filters = super::confine::filters()?;
    let setid = super::setid::program();
    let listener = super::confine::confine(filters, &setid, super::confine::BOX_ROOT_CAPS)
        .map_err(|step| {
            format!(
                "confining the zygote: {}",
                super::confine::step_message(step).unwrap_or("failed")
            )
        })?;
    // The supervisor serves it; no command ever holds it.
    reply_with(sock, &Reply::Listener, &[listener.as_raw_fd()])?;
    drop(listener);
    // Where each command was found last (PATH, name → path): tried first.
    let mut found: std::collections::HashMap<(String, String), CString> = Default::default();

    // Exits arrive as SIGCHLD on a signalfd, polled beside the socket.
    let mut mask = nix::sys::signal::SigSet::empty();
    mask.add(nix::sys::signal::Signal::SIGCHLD);
    mask.thread_block()
        .map_err(|e| format!("sigprocmask: {e}"))?;
    let sfd = nix::sys::signalfd::SignalFd::with_flags(
        &mask,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .map_err(|e| format!("signalfd: {e}"))?;
    let mut buf = vec![0u8; MAX_PACKET];
    super::helper::give_back_heap();
    loop {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [
            PollFd::new(sock.as_fd(), PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("poll: {e}")),
            Ok(_) => {}
        }
        let (sock_ready, sig_ready) = (
            fds[0].revents().is_some_and(|r| !r.is_empty()),
            fds[1].revents().is_some_and(|r| !r.is_empty()),
        );
        if sig_ready {
            while let Ok(Some(_)) = sfd.read_signal() {}
            reap(sock)?;
        }
        if sock_ready {
            match receive_request(sock, &mut buf)? {
                Received::Nothing => {}
                Received::Eof => return Ok(()), // the supervisor is gone
                Received::Spawn(spawn, stdio) => {
                    let reply = fork_command(&spawn, stdio, &the_box, &mut found);
                    reply_to(sock, &reply)?;
                }
                Received::Connect { port, ipv6 } => match connect_inside(port, ipv6) {
                    Ok(conn) => reply_with(sock, &Reply::Connected, &[conn.as_raw_fd()])?,
                    Err(errno) => reply_to(sock, &Reply::Fail(0, errno.desc().to_owned()))?,
                },
            }
        }
    }
}

fn reply_to(sock: &OwnedFd, reply: &Reply) -> std::result::Result<(), String> {
    reply_with(sock, reply, &[])
}

/// A reply with descriptors passed along.
fn reply_with(sock: &OwnedFd, reply: &Reply, fds: &[RawFd]) -> std::result::Result<(), String> {
    let body = serde_json::to_vec(reply).map_err(|e| e.to_string())?;
    super::fdpass::send(sock, &body, fds).map_err(|e| format!("send: {e}"))?;
    Ok(())
}

/// A non-blocking TCP socket connecting to `port` on the box's loopback
/// (the zygote is in the box's network namespace). A connection the box
/// refuses at once is an error here; one still under way is the
/// supervisor's to finish, so no box can hold the zygote up.
fn connect_inside(port: u16, ipv6: bool) -> std::result::Result<OwnedFd, nix::errno::Errno> {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6, connect, socket,
    };
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let (fd, result) = if ipv6 {
        let fd = socket(AddressFamily::Inet6, SockType::Stream, flags, None)?;
        let addr = SockaddrIn6::from(std::net::SocketAddrV6::new(
            std::net::Ipv6Addr::LOCALHOST,
            port,
            0,
            0,
        ));
        let r = connect(fd.as_raw_fd(), &addr);
        (fd, r)
    } else {
        let fd = socket(AddressFamily::Inet, SockType::Stream, flags, None)?;
        let addr = SockaddrIn::from(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::LOCALHOST,
            port,
        ));
        let r = connect(fd.as_raw_fd(), &addr);
        (fd, r)
    };
    match result {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => Ok(fd),
        Err(e) => Err(e),
    }
}

/// Reports every child that ended.
fn reap(sock: &OwnedFd) -> std::result::Result<(), String> {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    loop {
        let reply = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => Reply::Exit(pid.as_raw(), Some(code), None),
            Ok(WaitStatus::Signaled(pid, sig, _)) => {
                Reply::Exit(pid.as_raw(), None, Some(sig as i32))
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return Ok(()),
            Ok(_) => continue,
        };
        reply_to(sock, &reply)?;
    }
}

enum Received {
    Spawn(Spawn, [OwnedFd; 3]),
    Connect {
        port: u16,
        ipv6: bool,
    },
    Eof,
    /// Interrupted: nothing yet.
    Nothing,
}

/// One request and its descriptors (a spawn's three).
fn receive_request(sock: &OwnedFd, buf: &mut [u8]) -> std::result::Result<Received, String> {
    let (n, fds) = match super::fdpass::receive(sock, buf, nix::sys::socket::MsgFlags::empty()) {
        Ok(received) => received,
        Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => return Ok(Received::Nothing),
        Err(e) => return Err(format!("recvmsg: {e}")),
    };
    if n == 0 {
        return Ok(Received::Eof);
    }
    let request: Request =
        serde_json::from_slice(&buf[..n]).map_err(|e| format!("bad request: {e}"))?;
    match request {
        Request::Spawn(spawn) => {
            let stdio: [OwnedFd; 3] = fds
                .try_into()
                .map_err(|_| "a request without its three descriptors".to_owned())?;
            Ok(Received::Spawn(spawn, stdio))
        }
        Request::Connect { port, ipv6 } => Ok(Received::Connect { port, ipv6 }),
    }
}

/// Forks and executes one command; answers once it runs (or could not).
fn fork_command(
    spawn: &Spawn,
    stdio: [OwnedFd; 3],
    the_box: &Joins,
    found: &mut std::collections::HashMap<(String, String), CString>,
) -> Reply {
    if let Some(builtin) = &spawn.builtin {
        return fork_builtin(builtin, stdio, the_box);
    }
    let argv: Vec<CString> = match spawn
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<std::result::Result<_, _>>()
    {
        Ok(v) if !spawn.argv.is_empty() => v,
        _ => return Reply::Fail(126, "bad command".into()),
    };
    let ids = match &spawn.user {
        None => None,
        Some(user) => match super::users::resolve(
            user,
            &super::users::read_box_file("/etc/passwd"),
            &super::users::read_box_file("/etc/group"),
        ) {
            Ok(ids) => Some(ids),
            Err(e) => return Reply::Fail(126, e),
        },
    };
    let home = ids
        .as_ref()
        .filter(|_| !spawn.env.iter().any(|(k, _)| k == "HOME"))
        .map(|ids| ("HOME".to_owned(), ids.home.clone()));
    let envp: Vec<CString> = spawn
        .env
        .iter()
        .chain(home.as_ref())
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    let path = spawn
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    // Every place the command may be, resolved (allocated) before the fork;
    // where it was found last first (each failed try costs an `execve`).
    let key = (path.to_owned(), spawn.argv[0].clone());
    let mut candidates: Vec<CString> = if spawn.argv[0].contains('/') {
        vec![argv[0].clone()]
    } else {
        path.split(':')
            .map(|d| if d.is_empty() { "." } else { d })
            .filter_map(|d| CString::new(format!("{d}/{}", spawn.argv[0])).ok())
            .collect()
    };
    if candidates.len() > 1 {
        let first = match found.get(&key) {
            Some(last) => candidates.iter().position(|c| c == last),
            None => candidates.iter().position(|c| {
                // SAFETY: access with a valid C string.
                unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
            }),
        };
        if let Some(i) = first {
            let hit = candidates.remove(i);
            if found.len() >= 1024 {
                found.clear(); // a bound, however many commands a box runs
            }
            found.insert(key, hit.clone());
            candidates.insert(0, hit);
        }
    }
    let Ok(cwd) = CString::new(spawn.working_dir.as_bytes()) else {
        return Reply::Fail(126, "bad working directory".into());
    };
    let (err_r, err_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return Reply::Fail(126, format!("pipe: {e}")),
    };
    the_box.oom_for_fork(true);
    // SAFETY: the zygote is single-threaded; the child makes raw calls only.
    let forked = unsafe { nix::unistd::fork() };
    if !matches!(forked, Ok(nix::unistd::ForkResult::Child)) {
        the_box.oom_for_fork(false);
    }
    match forked {
        Err(e) => Reply::Fail(126, format!("fork: {e}")),
        Ok(nix::unistd::ForkResult::Child) => {
            drop(err_r);
            let failed = child(
                &argv,
                &envp,
                &candidates,
                &cwd,
                &stdio,
                spawn.tty,
                the_box,
                ids.as_ref(),
                err_w.as_raw_fd(),
            );
            let _ = nix::unistd::write(&err_w, &failed.to_ne_bytes());
            // SAFETY: leaving the forked child without running destructors.
            unsafe { libc::_exit(127) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(err_w);
            drop(stdio);
            // EOF on the error pipe means the exec succeeded, so the child
            // already leads its own process group: only now may the
            // supervisor signal the group.
            let mut buf = [0u8; 4];
            let n = loop {
                match nix::unistd::read(&err_r, &mut buf) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    other => break other.unwrap_or(0),
                }
            };
            if n != 4 {
                return Reply::Pid(child.as_raw());
            }
            // It is reaped (and its exit reported) with the others; the
            // supervisor ignores the exit of a pid it never learned.
            let failed = i32::from_ne_bytes(buf);
            if let Some(step) = super::confine::step_message(failed) {
                return Reply::Fail(126, format!("confining the command failed: {step}"));
            }
            if failed == super::confine::STEP_USER {
                return Reply::Fail(
                    126,
                    format!(
                        "cannot run as user {:?}: the box has no such id (it maps only the ids of its user namespace)",
                        spawn.user.as_deref().unwrap_or_default()
                    ),
                );
            }
            if failed == super::confine::STEP_CHDIR {
                return Reply::Fail(
                    126,
                    format!("working directory {:?} does not exist", spawn.working_dir),
                );
            }
            let errno = nix::errno::Errno::from_raw(failed);
            let code = if errno == nix::errno::Errno::ENOENT {
                127
            } else {
                126
            };
            Reply::Fail(
                code,
                format!("cannot run {:?}: {}", spawn.argv[0], errno.desc()),
            )
        }
    }
}

/// Forks a child that runs `builtin` (boxd's own code, inside the box)
/// with the command's stdio; answers once it is set up as a command is.
fn fork_builtin(builtin: &crate::engine::Builtin, stdio: [OwnedFd; 3], the_box: &Joins) -> Reply {
    let (err_r, err_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return Reply::Fail(126, format!("pipe: {e}")),
    };
    the_box.oom_for_fork(true);
    // SAFETY: the zygote is single-threaded, so the child may allocate.
    let forked = unsafe { nix::unistd::fork() };
    if !matches!(forked, Ok(nix::unistd::ForkResult::Child)) {
        the_box.oom_for_fork(false);
    }
    match forked {
        Err(e) => Reply::Fail(126, format!("fork: {e}")),
        Ok(nix::unistd::ForkResult::Child) => {
            drop(err_r);
            let code = match setup(&stdio, false, the_box, None, c"/", err_w.as_raw_fd()) {
                Err(failed) => {
                    let _ = nix::unistd::write(&err_w, &failed.to_ne_bytes());
                    126
                }
                Ok(()) => {
                    // Closed already (now at 0..2 only).
                    std::mem::forget(stdio);
                    // Unlike a command, it keeps the zygote's memory; it
                    // stays undumpable (as the zygote is), so the box may
                    // not read it.
                    drop(err_w); // set up: the parent may answer
                    super::builtin::run(builtin)
                }
            };
            // SAFETY: leaving the forked child without running destructors.
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(err_w);
            drop(stdio);
            let mut buf = [0u8; 4];
            let n = loop {
                match nix::unistd::read(&err_r, &mut buf) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    other => break other.unwrap_or(0),
                }
            };
            if n == 4 {
                let failed = i32::from_ne_bytes(buf);
                let step = super::confine::step_message(failed)
                    .map(str::to_owned)
                    .unwrap_or_else(|| nix::errno::Errno::from_raw(failed).desc().to_owned());
                return Reply::Fail(126, format!("setting up the copy failed: {step}"));
            }
            Reply::Pid(child.as_raw())
        }
    }
}

/// The forked child, up to `execve`; returns the failed step or errno.
#[allow(clippy::too_many_arguments)]
fn child(
    argv: &[CString],
    envp: &[CString],
    candidates: &[CString],
    cwd: &CString,
    stdio: &[OwnedFd; 3],
    tty: bool,
    the_box: &Joins,
    ids: Option<&super::users::Ids>,
    keep: RawFd,
) -> i32 {
    if let Err(failed) = setup(stdio, tty, the_box, ids, cwd, keep) {
        return failed;
    }
    exec(argv, envp, candidates)
}

/// A forked child made a command of the box: its stdio, session, death
/// signal, default signal dispositions, process limit, directory and
/// umask; every other descriptor but `keep` closed (its OOM score it
/// inherited). It is never made dumpable here: only `execve` makes a
/// command's process its own (so something in the box could reach into
/// it), by when nothing of the zygote's is open in it. `Err`: the failed
/// step or errno.
fn setup(
    stdio: &[OwnedFd; 3],
    tty: bool,
    the_box: &Joins,
    ids: Option<&super::users::Ids>,
    cwd: &std::ffi::CStr,
    keep: RawFd,
) -> std::result::Result<(), i32> {
    // SAFETY: plain syscalls in the forked child of a single-threaded
    // process.
    unsafe {
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // Dispositions as a fresh process has them: the zygote's runtime
        // ignores SIGPIPE, and an ignored signal stays ignored across
        // `execve` (`yes | head` would print "Broken pipe").
        // The raw call: glibc's wrapper refuses the real-time signals it
        // keeps for itself (32, 33), which an ignoring parent may pass on.
        #[repr(C)]
        struct KernelSigaction {
            handler: libc::sighandler_t,
            flags: libc::c_ulong,
            restorer: usize,
            mask: u64,
        }
        let dfl = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &dfl as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8usize,
                );
            }
        }
        for (i, fd) in stdio.iter().enumerate() {
            if libc::dup2(fd.as_raw_fd(), i as i32) < 0 {
                return Err(*libc::__errno_location());
            }
        }
        libc::setsid();
        if tty {
            libc::ioctl(0, libc::TIOCSCTTY, 0);
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if let Some(n) = the_box.nproc {
            let lim = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            libc::setrlimit(libc::RLIMIT_NPROC, &lim);
        }
        if let Some(ids) = ids {
            // Groups first: after setuid the rights to change them are gone.
            if libc::setgroups(ids.groups.len(), ids.groups.as_ptr()) != 0
                || libc::setgid(ids.gid) != 0
                || libc::setuid(ids.uid) != 0
            {
                return Err(super::confine::STEP_USER);
            }
        }
        // As the command's user: a directory it may not enter fails here.
        if libc::chdir(cwd.as_ptr()) != 0 {
            return Err(super::confine::STEP_CHDIR);
        }
        libc::umask(0o022);
        // Nothing but stdio reaches the command: not the zygote's socket
        // or signalfd, nor anything else (the error pipe, kept to report a
        // failed exec, closes on exec).
        super::helper::close_range(3, (keep - 1) as u32);
        super::helper::close_range((keep + 1) as u32, u32::MAX);
    }
    Ok(())
}

/// `execve` of the first candidate that is not missing; returns the errno.
fn exec(argv: &[CString], envp: &[CString], candidates: &[CString]) -> i32 {
    let argv_p: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp_p: Vec<*const libc::c_char> = envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // As execvp does: the first candidate that is not missing decides.
    let mut errno = libc::ENOENT;
    for path in candidates {
        // SAFETY: NUL-terminated arrays of valid C strings.
        unsafe { libc::execve(path.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
        // SAFETY: reading errno.
        let e = unsafe { *libc::__errno_location() };
        match e {
            libc::ENOENT | libc::ENOTDIR => continue,
            libc::EACCES => errno = libc::EACCES,
            other => return other,
        }
    }
    errno
}

/// Joins the namespaces of `pid` and changes root into its box.
fn enter_box(pid: i32) -> std::result::Result<(), String> {
    let open = |what: &str| {
        std::fs::File::open(format!("/proc/{pid}/{what}"))
            .map_err(|e| format!("the box is not running ({what}: {e})"))
    };
    let root = open("root")?;
    let spaces = [
        (open("ns/user")?, CloneFlags::CLONE_NEWUSER),
        (open("ns/ipc")?, CloneFlags::CLONE_NEWIPC),
        (open("ns/uts")?, CloneFlags::CLONE_NEWUTS),
        (open("ns/net")?, CloneFlags::CLONE_NEWNET),
        (open("ns/pid")?, CloneFlags::CLONE_NEWPID),
        (open("ns/cgroup")?, CloneFlags::CLONE_NEWCGROUP),
        (open("ns/mnt")?, CloneFlags::CLONE_NEWNS),
    ];
    // A kernel without cgroup namespaces leaves the box in the host's:
    // nothing to join then.
    let same_cgroups = std::fs::read_link(format!("/proc/{pid}/ns/cgroup")).ok()
        == std::fs::read_link("/proc/self/ns/cgroup").ok();
    for (fd, flag) in &spaces {
        if *flag == CloneFlags::CLONE_NEWCGROUP && same_cgroups {
            continue;
        }
        nix::sched::setns(fd, *flag).map_err(|e| format!("joining the box ({flag:?}): {e}"))?;
        if *flag == CloneFlags::CLONE_NEWUSER {
            // As box root from here on, never as the daemon's own user
            // (host root, when boxd runs as root): joining kept its ids.
            // No supplementary groups (refused, and moot, in a box of a
            // single id).
            let _ = nix::unistd::setgroups(&[]);
            super::userns::become_root(false).map_err(|e| format!("becoming box root: {e}"))?;
        }
    }
    nix::unistd::fchdir(&root).map_err(|e| format!("fchdir: {e}"))?;
    nix::unistd::chroot(".").map_err(|e| format!("chroot: {e}"))?;
    nix::unistd::chdir("/").map_err(|e| format!("chdir: {e}"))?;
    // Nothing in the box may read this process's memory or files.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
    Ok(())
}
