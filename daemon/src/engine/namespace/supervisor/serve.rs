//! The supervisor process (`boxd __supervise`): one per running namespace
//! box, in a session of its own and outside the daemon's process tree, so
//! that the box and its execs outlive the daemon (a crash, an upgrade, an
//! idle exit).
//!
//! It binds the box's published ports (`ports.rs`), starts the box
//! (bubblewrap, as the daemon did before), serves its egress proxy,
//! starts its zygote, relays the published ports into the box through
//! it, and holds every exec's stdio: each
//! exec's output goes into its log (`exec_log.rs`), read by the daemon's
//! subscriptions over `BOXDIR/supervisor.sock`. It ends once the box has
//! ended and every exec's output was read (or after [`LINGER`]).
//!
//! Invariants: only its own uid may connect; an exec's exit is recorded
//! after its last output; nothing a connection sends can crash it (bad
//! frames end that connection); it keeps at most `exec_log::KEEP_EXITED` exited
//! execs.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::net::UnixStream;
use tokio::sync::{broadcast, oneshot, watch};

use super::super::nsexec::{self, Reply as ZReply, Spawn};
use super::super::sandbox::Sandbox;
use super::super::usage::{self, Usage};
use super::ports;
use super::wire::{self, ExecInfo, Frame, Push, Reply, Request, RunSpec, Start, Up};
use crate::engine::exec::{ExecHandle, LocalExec};
use crate::engine::{ExitStatus, Process, ProcessControl};
use crate::error::{Error, Result};
use crate::exec_log::Offsets;

/// The argument that selects this mode in `main`.
pub const HELPER_ARG: &str = "__supervise";
/// How long an ended box's supervisor waits for its execs' output to be
/// read before it goes.
const LINGER: Duration = Duration::from_secs(10);

/// `boxd __supervise`, with its channel at fd 3. Never returns.
pub fn helper_main() -> ! {
    // Out of the daemon's process tree: the daemon's child (which it
    // reaps) leaves at once; its child is the supervisor. A fork clears
    // the parent-death signal the helper launcher set.
    // SAFETY: no thread exists yet.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { .. }) => std::process::exit(0),
        Ok(nix::unistd::ForkResult::Child) => {}
        Err(_) => std::process::exit(1),
    }
    let _ = nix::unistd::setsid();
    super::super::sandbox::adopt_init();
    // SAFETY: the daemon placed the channel at this number for us.
    let channel = unsafe {
        <std::os::unix::net::UnixStream as std::os::fd::FromRawFd>::from_raw_fd(
            super::super::helper::CHANNEL_FD,
        )
    };
    let mut line = String::new();
    let read = std::io::BufRead::read_line(
        &mut std::io::BufReader::new(std::io::Read::take(&channel, 16 << 20)),
        &mut line,
    );
    let start: Start = match read.ok().and_then(|_| serde_json::from_str(&line).ok()) {
        Some(s) => s,
        None => std::process::exit(1),
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(_) => std::process::exit(1),
    };
    let code = runtime.block_on(supervise(start, channel));
    std::process::exit(code)
}

async fn supervise(start: Start, channel: std::os::unix::net::UnixStream) -> i32 {
    let tell = |ready: &wire::Ready| {
        let mut line = serde_json::to_vec(ready).expect("serializable");
        line.push(b'\n');
        let _ = std::io::Write::write_all(&mut &channel, &line);
    };
    let failed = |e: Error| wire::Ready::Failed {
        kind: match e {
            Error::FailedPrecondition(_) => "precondition".into(),
            _ => "engine".into(),
        },
        message: e.to_string(),
    };
    // Before anything starts: a host address that cannot be had fails the
    // start with nothing to undo.
    let listeners = match ports::bind(&start.ports) {
        Ok(l) => l,
        Err(e) => {
            tell(&failed(e));
            return 1;
        }
    };
    // The zygote starts while the box boots; it joins the box's cgroups
    // with the boot helper and enters the box once the init runs.
    let zygote = match nsexec::start(start.nproc) {
        Ok(z) => z,
        Err(e) => {
            tell(&failed(e));
            return 1;
        }
    };
    let mut warnings = Vec::new();
    let mut sandbox = match Sandbox::start(
        &start.plan,
        &start.ids,
        &start.cgroup,
        zygote.0.id().map(|p| p as i32),
        &start.box_name,
        &mut warnings,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            tell(&failed(e));
            return 1;
        }
    };
    let (pid1, init) = (sandbox.pid1, sandbox.pid);
    if let Some(listener) = sandbox.setid.take()
        && let Err(e) = super::super::setid::serve(listener, init, "boot")
    {
        sandbox.stop(true).await;
        tell(&failed(Error::Engine(format!(
            "cannot serve the box's set-id listener: {e}"
        ))));
        return 1;
    }
    let set_up = async {
        let port = start
            .egress
            .as_ref()
            .map(|_| super::super::egress::PROXY_PORT);
        let (zygote, listener) = Zygote::enter(
            zygote,
            &nsexec::Enter {
                pid: init,
                egress_port: port,
            },
        )
        .await?;
        let zygote = Arc::new(zygote);
        let (proxy, traffic) = match listener {
            Some(listener) => {
                let (guard, traffic, refusals) = start_proxy(&start, listener)?;
                (Some(guard), Some((traffic, refusals)))
            }
            None => (None, None),
        };
        let relays = listeners.serve(zygote.clone())?;
        let path = start.dir.join(wire::SOCKET);
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)
            .map_err(|e| Error::io(format!("bind {}", path.display()), e))?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|e| Error::io("chmod the supervisor's socket", e))?;
        Ok::<_, Error>((proxy, traffic, zygote, relays, listener))
    };
    let (proxy, traffic, zygote, relays, listener) = match set_up.await {
        Ok(v) => v,
        Err(e) => {
            sandbox.stop(true).await;
            tell(&failed(e));
            return 1;
        }
    };
    tell(&wire::Ready::Running {
        pid1,
        init,
        warnings,
    });
    drop(channel);
    tracing::info!(box_name = %start.box_name, pid1, init, ports = ?relays.published(), "box running");
    super::super::helper::give_back_heap();

    let ended = sandbox.ended();
    let pushes = broadcast::channel(256).0;
    let traffic = traffic.map(|(traffic, refusals)| {
        tokio::spawn(push_refusals(refusals, pushes.clone()));
        traffic
    });
    let sup = Arc::new(Sup {
        pid1,
        init,
        ended: ended.clone(),
        sandbox: tokio::sync::Mutex::new(Some(sandbox)),
        zygote,
        traffic,
        relays,
        execs: Mutex::new(HashMap::new()),
        pushes: pushes.clone(),
        stops: Default::default(),
        socket_ino: std::fs::metadata(start.dir.join(wire::SOCKET))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .ok(),
        start,
    });
    {
        let (sup, mut ended) = (sup.clone(), ended.clone());
        tokio::spawn(async move {
            let reason = match ended.wait_for(Option::is_some).await {
                Ok(reason) => reason.clone(),
                Err(_) => None,
            };
            if let Some(reason) = reason {
                tracing::info!(%reason, "box ended");
                sup.relays.close().await;
                let _ = sup.pushes.send(Push::Ended(reason));
            }
        });
    }
    let drained = drained(sup.clone());
    tokio::pin!(drained);
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            conn = listener.accept() => {
                if let Ok((stream, _)) = conn {
                    tokio::spawn(connection(sup.clone(), stream));
                }
            }
            _ = &mut drained => break,
            _ = tick.tick() => {
                // The box's state is gone (removed by hand, or another
                // supervisor took its place): nothing can reach this box
                // any more, so it stops (unless it was stopped already).
                if sup.socket_ino() != sup.socket_ino {
                    let sandbox = sup.sandbox.lock().await.take();
                    if let Some(sandbox) = sandbox {
                        tracing::warn!(box_name = %sup.start.box_name, "the box's socket is gone; stopping it");
                        sup.relays.close().await;
                        sandbox.stop(true).await;
                        return 0;
                    }
                }
            }
        }
    }
    drop(proxy);
    sup.release_socket();
    0
}

/// Resolves once the box has ended and its execs' output was read (or
/// [`LINGER`] passed).
async fn drained(sup: Arc<Sup>) {
    let mut ended = sup.ended.clone();
    let _ = ended.wait_for(Option::is_some).await;
    let deadline = tokio::time::Instant::now() + LINGER;
    loop {
        let busy = sup.stops.load(std::sync::atomic::Ordering::SeqCst) > 0
            || sup
                .execs
                .lock()
                .expect("exec table")
                .values()
                .any(|e| e.local.log().exit().is_none() || e.local.log().readers() > 0);
        if !busy || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The supervisor's state.
struct Sup {
    start: Start,
    pid1: i32,
    init: i32,
    ended: watch::Receiver<Option<String>>,
    sandbox: tokio::sync::Mutex<Option<Sandbox>>,
    zygote: Arc<Zygote>,
    /// The published ports.
    relays: ports::Relays,
    /// The egress proxy's byte counts, when the box has one.
    traffic: Option<Arc<crate::egress::Traffic>>,
    execs: Mutex<HashMap<String, Arc<Exec>>>,
    /// To every `Hello` connection.
    pushes: broadcast::Sender<Push>,
    /// Stops under way: the supervisor answers them before it goes.
    stops: std::sync::atomic::AtomicUsize,
    /// Its socket's inode: the path is another supervisor's once that
    /// differs (a start of the box right after a stop).
    socket_ino: Option<u64>,
}

struct Exec {
    info: Mutex<ExecInfo>,
    local: Arc<LocalExec>,
}

impl Sup {
    fn socket_ino(&self) -> Option<u64> {
        std::fs::metadata(self.start.dir.join(wire::SOCKET))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .ok()
    }

    /// Removes the socket, if it is still this supervisor's.
    fn release_socket(&self) {
        if self.socket_ino.is_some() && self.socket_ino() == self.socket_ino {
            let _ = std::fs::remove_file(self.start.dir.join(wire::SOCKET));
        }
    }

    fn exec(&self, id: &str) -> Result<Arc<Exec>> {
        self.execs
            .lock()
            .expect("exec table")
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no exec with id {id:?}")))
    }

    /// Starts a command through the zygote; its output goes to a new log.
    async fn run(self: &Arc<Self>, run: RunSpec) -> Result<Arc<Exec>> {
        let (spec, started_at_ms) = (run.spec, run.started_at_ms);
        if self.ended.borrow().is_some() {
            return Err(Error::FailedPrecondition("the box is not running".into()));
        }
        if self
            .execs
            .lock()
            .expect("exec table")
            .contains_key(&spec.id)
        {
            return Err(Error::AlreadyExists(format!("exec {} exists", spec.id)));
        }
        let (process, pid) = self.spawn(&spec).await?;
        let local = LocalExec::start(process, spec.detach);
        let exec = Arc::new(Exec {
            info: Mutex::new(ExecInfo {
                id: spec.id.clone(),
                command: spec.command.clone(),
                args: spec.args.clone(),
                tty: spec.tty.is_some(),
                detach: spec.detach,
                stdin: spec.stdin,
                started_at_ms,
                exit: None,
            }),
            local,
        });
        self.execs
            .lock()
            .expect("exec table")
            .insert(spec.id.clone(), exec.clone());
        tracing::debug!(exec_id = %spec.id, pid, "exec started");
        let sup = self.clone();
        let e = exec.clone();
        // The daemon's own execs (copies) leave the table once they end:
        // they never take the place of a client's kept exec.
        let daemons_own = spec.builtin.is_some();
        tokio::spawn(async move {
            let mut status = e.local.wait().await;
            if status.code.is_none() && status.signal.is_none() && status.error.is_none() {
                status.error = Some("the exec ended without a status".into());
            }
            e.info.lock().expect("exec info").exit = Some(status.clone());
            let id = e.info.lock().expect("exec info").id.clone();
            let _ = sup.pushes.send(Push::Exited {
                id: id.clone(),
                status,
            });
            if daemons_own {
                sup.execs.lock().expect("exec table").remove(&id);
            }
            sup.prune();
        });
        Ok(exec)
    }

    fn prune(&self) {
        let mut table = self.execs.lock().expect("exec table");
        crate::exec_log::prune_exited(&mut table, |e| {
            let info = e.info.lock().expect("exec info");
            info.exit.as_ref().map(|_| info.started_at_ms)
        });
    }

    /// The process of `spec`: stdio made here, the command forked by the
    /// zygote.
    async fn spawn(self: &Arc<Self>, spec: &crate::engine::ExecSpec) -> Result<(Process, i32)> {
        use tokio::net::unix::pipe;
        let pipe_pair = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| Error::io("pipe", e.into()))
        };
        let mut argv = vec![spec.command.clone()];
        argv.extend(spec.args.iter().cloned());
        let request = nsexec::Request::Spawn(Spawn {
            argv,
            env: spec.env.clone(),
            working_dir: spec.working_dir.clone(),
            tty: spec.tty.is_some(),
            user: spec.user.clone(),
            builtin: spec.builtin.clone(),
        });
        type Streams = (
            Option<crate::engine::Input>,
            crate::engine::Output,
            Option<crate::engine::Output>,
            Option<OwnedFd>,
        );
        let (theirs, ours): ([OwnedFd; 3], Streams) = match spec.tty {
            Some((rows, cols)) => {
                let (master, slave) = nsexec::box_pty(self.init, rows, cols)?;
                let dup = |f: &OwnedFd| f.try_clone().map_err(|e| Error::io("dup pty", e));
                let reader = tokio::fs::File::from_std(std::fs::File::from(dup(&master)?));
                let writer = spec
                    .stdin
                    .then(|| dup(&master))
                    .transpose()?
                    .map(|w| Box::pin(tokio::fs::File::from_std(std::fs::File::from(w))) as _);
                (
                    [dup(&slave)?, dup(&slave)?, slave],
                    (writer, Box::pin(reader) as _, None, Some(master)),
                )
            }
            None => {
                let (in_r, in_w) = pipe_pair()?;
                let (out_r, out_w) = pipe_pair()?;
                let (err_r, err_w) = pipe_pair()?;
                // A copy's archive comes in bulk, as other output goes out.
                let in_w = if spec.builtin.is_some() {
                    grow_pipe(in_w)
                } else {
                    in_w
                };
                let stdin = if spec.stdin {
                    let w = pipe::Sender::from_owned_fd(in_w)
                        .map_err(|e| Error::io("stdin pipe", e))?;
                    Some(Box::pin(w) as crate::engine::Input)
                } else {
                    drop(in_w); // the command reads EOF
                    None
                };
                let out = pipe::Receiver::from_owned_fd(grow_pipe(out_r))
                    .map_err(|e| Error::io("stdout pipe", e))?;
                let err = pipe::Receiver::from_owned_fd(grow_pipe(err_r))
                    .map_err(|e| Error::io("stderr pipe", e))?;
                (
                    [in_r, out_w, err_w],
                    (stdin, Box::pin(out) as _, Some(Box::pin(err) as _), None),
                )
            }
        };
        let (stdin, stdout, stderr, pty) = ours;
        let reply = self.zygote.spawn(&request, theirs).await?;
        let (pid, exit): (i32, futures::future::BoxFuture<'static, ExitStatus>) = match reply {
            Spawned::Pid(pid, rx) => {
                let sup = self.clone();
                // (Read only where a limit can kill: not on every exec.)
                let ooms_before = match self.start.limits.memory_bytes {
                    Some(_) => self.start.cgroup.oom_kills(),
                    None => 0,
                };
                (
                    pid,
                    Box::pin(async move {
                        let mut status = rx.await.unwrap_or_else(|_| ExitStatus {
                            error: Some("the box's zygote ended".into()),
                            ..Default::default()
                        });
                        sup.annotate(&mut status, ooms_before).await;
                        status
                    }),
                )
            }
            Spawned::Socket(_) => {
                return Err(Error::Internal(
                    "the box's zygote answered a spawn with a socket".into(),
                ));
            }
            Spawned::Fail(code, message) => (
                0,
                Box::pin(std::future::ready(ExitStatus {
                    code: Some(code),
                    signal: None,
                    error: Some(message),
                })),
            ),
        };
        let process = Process {
            stdin,
            stdout,
            stderr,
            control: Arc::new(Control { pgid: pid, pty }),
            exit,
        };
        Ok((process, pid))
    }

    /// Says why a killed command died, when it was its box ending or the
    /// box running out of memory.
    async fn annotate(&self, status: &mut ExitStatus, ooms_before: u64) {
        if status.signal.is_some() && status.error.is_none() {
            status.error = super::super::box_ended(self.pid1, self.ended.clone()).await;
        }
        if status.signal == Some(libc::SIGKILL)
            && status.error.is_none()
            && self.start.limits.memory_bytes.is_some()
            && self.start.cgroup.oom_kills() > ooms_before
        {
            status.error = Some(super::super::out_of_memory(&self.start.limits));
        }
    }
}

/// Bigger pipe buffers mean fewer, larger reads for bulk output. Best
/// effort: the kernel caps it at `/proc/sys/fs/pipe-max-size`.
fn grow_pipe(pipe: OwnedFd) -> OwnedFd {
    // SAFETY: F_SETPIPE_SZ on a pipe we own; failure leaves it as it was.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
    pipe
}

struct Control {
    pgid: i32,
    pty: Option<OwnedFd>,
}

impl ProcessControl for Control {
    fn signal(&self, signal: i32) -> Result<()> {
        if self.pgid <= 1 {
            // The command never started; there is nothing to signal (and
            // kill(0) would hit the supervisor's own group).
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

/// Whether `pid` may be a command the zygote forked: a child of the
/// zygote, in the box's pid namespace (as the box's init is), and never
/// pid 0 or 1 or a negative one. A pid already gone (a command that exited
/// and was reaped at once, or is being reaped) is accepted: there is
/// nothing to signal.
fn commands_pid(pid: i32, zygote: Option<i32>, box_init: i32) -> bool {
    if pid <= 1 {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    let mut fields = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace())
        .into_iter()
        .flatten();
    let state = fields.next();
    let ppid = fields.next().and_then(|p| p.parse::<i32>().ok());
    let ns = |p: i32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    match (ppid, zygote) {
        // A zombie its parent is reaping at this very moment shows parent
        // 0: as good as gone (the command exited at once).
        (Some(0), _) if state == Some("Z") => true,
        (Some(ppid), Some(z)) if ppid == z => {
            let theirs = ns(pid);
            theirs.is_none() || theirs == ns(box_init)
        }
        _ => false,
    }
}

/// The zygote's answer to a request.
enum Spawned {
    Pid(i32, oneshot::Receiver<ExitStatus>),
    Fail(i32, String),
    /// A connection inside the box.
    Socket(OwnedFd),
}

impl Sup {
    /// What the box uses now: its processes (below its pid 1 and its
    /// zygote) and its network traffic (through its egress proxy and its
    /// published ports).
    fn usage(&self) -> Usage {
        let roots: Vec<i32> = [Some(self.pid1), self.zygote.pid]
            .into_iter()
            .flatten()
            .collect();
        let (egress_rx, egress_tx) = self.traffic.as_ref().map_or((0, 0), |t| t.totals());
        let (ports_rx, ports_tx) = self.relays.totals();
        let (net_rx_bytes, net_tx_bytes) = (egress_rx + ports_rx, egress_tx + ports_tx);
        Usage {
            net_rx_bytes,
            net_tx_bytes,
            ..usage::measure(&self.start.cgroup, &roots)
        }
    }
}

/// The zygote's next reply and the descriptor it carries; `None` once the
/// zygote is gone.
async fn next_reply(sock: &AsyncFd<OwnedFd>) -> std::io::Result<Option<(ZReply, Option<OwnedFd>)>> {
    loop {
        let mut ready = sock.readable().await?;
        match nsexec::receive(sock.get_ref()) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => ready.clear_ready(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// The supervisor's side of the zygote.
struct Zygote {
    pid: Option<i32>,
    sock: Arc<AsyncFd<OwnedFd>>,
    /// One request at a time: replies come in request order.
    lock: tokio::sync::Mutex<()>,
    pending: Arc<Mutex<Option<oneshot::Sender<Spawned>>>>,
    exits: Arc<Mutex<HashMap<i32, oneshot::Sender<ExitStatus>>>>,
    child: tokio::sync::Mutex<Option<tokio::process::Child>>,
}

impl Zygote {
    /// Sends the started zygote into the box (`enter`) and waits for it to
    /// finish the box ([`nsexec::Reply::Ready`]); returns it and the egress
    /// listener it made, when `enter` asked for one.
    async fn enter(
        (mut child, sock): (tokio::process::Child, OwnedFd),
        enter: &nsexec::Enter,
    ) -> Result<(Zygote, Option<std::net::TcpListener>)> {
        nsexec::enter(&sock, enter)?;
        nix::fcntl::fcntl(
            &sock,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .map_err(|e| Error::io("zygote socket", e.into()))?;
        // SAFETY: the socket is owned by the AsyncFd, and only read and
        // written through it, until it drops.
        let sock =
            unsafe { AsyncFd::register(sock) }.map_err(|e| Error::io("zygote socket", e.into()))?;
        let first = match tokio::time::timeout(Duration::from_secs(30), next_reply(&sock)).await {
            Err(_) => Err(Error::Engine(
                "the box's zygote was not ready within 30 s".into(),
            )),
            Ok(Err(e)) => Err(Error::io("zygote socket", e)),
            Ok(Ok(Some((ZReply::Ready, fd)))) => match (fd, enter.egress_port) {
                (Some(fd), Some(_)) => Ok(Some(std::net::TcpListener::from(fd))),
                (None, None) => Ok(None),
                _ => Err(Error::Engine(
                    "the box's zygote did not pass the egress socket asked for".into(),
                )),
            },
            Ok(Ok(Some((ZReply::Fail(_, why), _)))) => {
                Err(Error::Engine(format!("the box could not start: {why}")))
            }
            Ok(Ok(other)) => Err(Error::Engine(format!(
                "the box's zygote ended before it was ready ({})",
                other.map_or("no reply".into(), |(r, _)| format!("{r:?}"))
            ))),
        };
        let listener = match first {
            Ok(listener) => listener,
            Err(e) => {
                let _ = child.kill().await;
                return Err(e);
            }
        };
        let sock = Arc::new(sock);
        let zygote = Zygote {
            pid: child.id().map(|p| p as i32),
            sock: sock.clone(),
            lock: tokio::sync::Mutex::new(()),
            pending: Arc::default(),
            exits: Arc::default(),
            child: tokio::sync::Mutex::new(Some(child)),
        };
        let (pending, exits) = (zygote.pending.clone(), zygote.exits.clone());
        let (zygote_pid, box_init) = (zygote.pid, enter.pid);
        tokio::spawn(async move {
            while let Ok(Some((reply, fd))) = next_reply(&sock).await {
                match reply {
                    // Once, first, and read by `enter`: never again.
                    ZReply::Ready => {}
                    ZReply::Connected => {
                        let answer = match fd {
                            Some(fd) => Spawned::Socket(fd),
                            None => Spawned::Fail(0, "no socket came with the reply".into()),
                        };
                        if let Some(p) = pending.lock().expect("zygote").take() {
                            let _ = p.send(answer);
                        }
                    }
                    ZReply::Pid(pid) if !commands_pid(pid, zygote_pid, box_init) => {
                        // The supervisor signals this pid's process group:
                        // only a command the zygote forked in the box may
                        // be one (never a host process named by whatever
                        // answered on the zygote's socket). A command that
                        // exited at once may already be reaped and its pid
                        // taken by another process (pid_max can be 32768):
                        // so the exec waits for the zygote's exit report
                        // of that pid, but holds pid 0, which is never
                        // signalled.
                        tracing::debug!(
                            pid,
                            "a zygote reply names a process that is not its command in the box (now): it is never signalled"
                        );
                        let (tx, rx) = oneshot::channel();
                        exits.lock().expect("zygote").insert(pid, tx);
                        if let Some(p) = pending.lock().expect("zygote").take() {
                            let _ = p.send(Spawned::Pid(0, rx));
                        }
                    }
                    ZReply::Pid(pid) => {
                        let (tx, rx) = oneshot::channel();
                        exits.lock().expect("zygote").insert(pid, tx);
                        if let Some(p) = pending.lock().expect("zygote").take() {
                            let _ = p.send(Spawned::Pid(pid, rx));
                        }
                    }
                    ZReply::Fail(code, msg) => {
                        if let Some(p) = pending.lock().expect("zygote").take() {
                            let _ = p.send(Spawned::Fail(code, msg));
                        }
                    }
                    ZReply::Listener => match fd {
                        Some(fd) => {
                            if let Err(e) = super::super::setid::serve(fd, box_init, "zygote") {
                                // Dropped: the filter's calls then fail
                                // (ENOSYS), never pass unchecked.
                                tracing::warn!("cannot serve the zygote's set-id listener: {e}");
                            }
                        }
                        None => tracing::warn!("the zygote's set-id listener did not come"),
                    },
                    ZReply::Exit(pid, code, signal) => {
                        if let Some(tx) = exits.lock().expect("zygote").remove(&pid) {
                            let _ = tx.send(ExitStatus {
                                code,
                                signal,
                                error: None,
                            });
                        }
                    }
                }
            }
            tracing::warn!("the box's zygote ended");
            // Waiters see their senders dropped.
            pending.lock().expect("zygote").take();
            exits.lock().expect("zygote").clear();
        });
        Ok((zygote, listener))
    }

    /// Ends the zygote (it is in the box's cgroups, which go next).
    async fn end(&self) {
        if let Some(mut child) = self.child.lock().await.take() {
            let _ = child.kill().await;
        }
    }

    async fn spawn(&self, request: &nsexec::Request, stdio: [OwnedFd; 3]) -> Result<Spawned> {
        let raw = [
            stdio[0].as_raw_fd(),
            stdio[1].as_raw_fd(),
            stdio[2].as_raw_fd(),
        ];
        let answer = self.ask(request, &raw).await;
        // The zygote has its copies; the command's ends close here.
        drop(stdio);
        answer
    }

    /// One request and its answer (one at a time: answers come in order).
    async fn ask(&self, request: &nsexec::Request, fds: &[std::os::fd::RawFd]) -> Result<Spawned> {
        let _one = self.lock.lock().await;
        let (tx, rx) = oneshot::channel();
        *self.pending.lock().expect("zygote") = Some(tx);
        loop {
            let mut guard = self
                .sock
                .writable()
                .await
                .map_err(|e| Error::io("zygote socket", e))?;
            match nsexec::send(self.sock.get_ref(), request, fds) {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::WouldBlock =>
                {
                    guard.clear_ready();
                }
                other => break other?,
            }
        }
        rx.await
            .map_err(|_| Error::Engine("the box's zygote ended".into()))
    }
}

#[async_trait::async_trait]
impl ports::Inside for Zygote {
    async fn connect(&self, port: u16, ipv6: bool) -> std::result::Result<OwnedFd, String> {
        match self
            .ask(&nsexec::Request::Connect { port, ipv6 }, &[])
            .await
        {
            Ok(Spawned::Socket(fd)) => Ok(fd),
            Ok(Spawned::Fail(_, why)) => Err(why),
            Ok(Spawned::Pid(..)) => Err("the box's zygote answered a connect with a pid".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Serves one connection (see `wire.rs`).
async fn connection(sup: Arc<Sup>, stream: UnixStream) {
    let ours = nix::unistd::getuid().as_raw();
    if stream.peer_cred().map(|c| c.uid()).ok() != Some(ours) {
        return;
    }
    let (mut r, mut w) = stream.into_split();
    let Ok(Some(first)) = wire::read(&mut r).await else {
        return;
    };
    let Ok(request) = first.parse::<Request>() else {
        return;
    };
    let reply = match request {
        Request::Hello => return hello(sup, r, w).await,
        Request::Run(spec) => match sup.run(spec).await {
            Ok(exec) => return subscription(exec, Offsets::default(), r, w).await,
            Err(e) => Reply::error(&e),
        },
        Request::Attach { id, from } => match sup.exec(&id) {
            Ok(exec) => return subscription(exec, from, r, w).await,
            Err(e) => Reply::error(&e),
        },
        Request::Stdin { id } => match sup.exec(&id) {
            Ok(exec) => return stdin(exec, r, w).await,
            Err(e) => Reply::error(&e),
        },
        Request::CloseStdin { id } => match sup.exec(&id) {
            Ok(exec) => done(exec.local.close_stdin().await),
            Err(e) => Reply::error(&e),
        },
        Request::Signal { id, signal } => match sup.exec(&id) {
            Ok(exec) => done(exec.local.signal(signal).await),
            Err(e) => Reply::error(&e),
        },
        Request::Resize { id, rows, cols } => match sup.exec(&id) {
            Ok(exec) => done(exec.local.resize(rows, cols).await),
            Err(e) => Reply::error(&e),
        },
        Request::Usage => Reply::Usage(sup.usage()),
        Request::Stop { force } => {
            sup.stops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // The host ports are free once the stop is answered.
            sup.relays.close().await;
            let sandbox = sup.sandbox.lock().await.take();
            if let Some(sandbox) = sandbox {
                sandbox.stop(force).await;
            }
            // Its execs die with it; their exits are recorded first.
            let execs: Vec<_> = sup
                .execs
                .lock()
                .expect("exec table")
                .values()
                .cloned()
                .collect();
            for e in execs {
                let _ = tokio::time::timeout(Duration::from_secs(5), e.local.wait()).await;
            }
            sup.zygote.end().await;
            // The path is free for the box's next start before the answer.
            sup.release_socket();
            let _ = wire::write(&mut w, &Frame::json(&Reply::Done)).await;
            sup.stops.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            return;
        }
    };
    let _ = wire::write(&mut w, &Frame::json(&reply)).await;
}

fn done(r: Result<()>) -> Reply {
    match r {
        Ok(()) => Reply::Done,
        Err(e) => Reply::error(&e),
    }
}

/// The daemon's watch: the box and its execs as they are, then what
/// happens to them.
async fn hello(
    sup: Arc<Sup>,
    mut r: tokio::net::unix::OwnedReadHalf,
    mut w: tokio::net::unix::OwnedWriteHalf,
) {
    // Subscribed before the snapshot: nothing falls between.
    let mut pushes = sup.pushes.subscribe();
    let execs: Vec<ExecInfo> = sup
        .execs
        .lock()
        .expect("exec table")
        .values()
        .map(|e| e.info.lock().expect("exec info").clone())
        .collect();
    let hello = Reply::Hello {
        version: wire::VERSION,
        pid1: sup.pid1,
        init: sup.init,
        cgroup: sup.start.cgroup.clone(),
        execs,
        ports: sup.relays.published(),
    };
    if wire::write(&mut w, &Frame::json(&hello)).await.is_err() {
        return;
    }
    let reason = sup.ended.borrow().clone();
    if let Some(reason) = reason {
        let _ = wire::write(&mut w, &Frame::json(&Push::Ended(reason))).await;
    }
    loop {
        tokio::select! {
            push = pushes.recv() => match push {
                Ok(p) => {
                    if wire::write(&mut w, &Frame::json(&p)).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => return,
            },
            frame = wire::read(&mut r) => {
                if !matches!(frame, Ok(Some(_))) {
                    return;
                }
            }
        }
    }
}

/// One subscription: `Subscribed`, the output, the exit; acknowledgements
/// come up the same connection.
async fn subscription(
    exec: Arc<Exec>,
    from: Offsets,
    r: tokio::net::unix::OwnedReadHalf,
    w: tokio::net::unix::OwnedWriteHalf,
) {
    let sub = LocalExec::subscription(exec.local.log(), from);
    let mut w = tokio::io::BufWriter::with_capacity(64 << 10, w);
    let head = Reply::Subscribed {
        start: sub.start,
        stdin_offset: sub.stdin_offset,
    };
    if wire::write(&mut w, &Frame::json(&head)).await.is_err() || w.flush().await.is_err() {
        return;
    }
    let acks = sub.acks;
    let mut events = sub.events;
    let reader = tokio::spawn(async move {
        let mut frames = wire::Reader::new(r);
        while let Ok(Some(frame)) = frames.next().await {
            if let Ok(Up::Ack(upto)) = frame.parse::<Up>() {
                acks.ack(upto);
            }
        }
    });
    while let Some(event) = events.recv().await {
        let (frame, last) = match event {
            crate::exec_log::Event::Output(s, b) => (Frame::Output(s, b), false),
            crate::exec_log::Event::Exit(status) => (Frame::json(&Push::Exit(status)), true),
        };
        if wire::write(&mut w, &frame).await.is_err() {
            break;
        }
        // Flushed whenever nothing more is ready: small outputs go at once.
        if (last || events.is_empty()) && w.flush().await.is_err() {
            break;
        }
        if last {
            break;
        }
    }
    // Once the daemon closes its side (or is gone), the reader ends and
    // the subscription with it.
    let _ = reader.await;
}

/// An exec's stdin: each frame written (bytes it had already skipped),
/// then answered with the offset reached.
async fn stdin(
    exec: Arc<Exec>,
    r: tokio::net::unix::OwnedReadHalf,
    mut w: tokio::net::unix::OwnedWriteHalf,
) {
    if wire::write(&mut w, &Frame::json(&Reply::Done))
        .await
        .is_err()
    {
        return;
    }
    let mut frames = wire::Reader::new(r);
    while let Ok(Some(frame)) = frames.next().await {
        let Frame::Stdin(at, data) = frame else {
            return;
        };
        let reply = match exec.local.write_stdin(at, data).await {
            Ok(n) => Reply::Taken(n),
            Err(e) => Reply::error(&e),
        };
        if wire::write(&mut w, &Frame::json(&reply)).await.is_err() {
            return;
        }
    }
}

/// A serving egress proxy: it stops when the guard drops; its traffic;
/// the targets it refuses.
type RunningProxy = (
    tokio_util::sync::DropGuard,
    Arc<crate::egress::Traffic>,
    broadcast::Receiver<crate::egress::Refusal>,
);

/// Serves the box's egress proxy on `listener` (inside the box's network
/// namespace) until the returned guard is dropped.
fn start_proxy(start: &Start, listener: std::net::TcpListener) -> Result<RunningProxy> {
    use crate::egress::{AllowList, Proxy, Secrets};
    let egress = start.egress.as_ref().expect("a box with a proxy");
    // Validated at create; an old record that no longer parses is refused.
    let allow = AllowList::parse(&egress.allow_net)
        .map_err(|e| Error::FailedPrecondition(format!("allow-net: {e}")))?;
    let secrets = Secrets::new(egress.secrets.clone())
        .map_err(|e| Error::FailedPrecondition(format!("secrets: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("egress listener", e))?;
    let listener =
        tokio::net::TcpListener::from_std(listener).map_err(|e| Error::io("egress listener", e))?;
    let aliases = HashMap::from([(
        super::super::egress::HOST_ALIAS.to_owned(),
        "127.0.0.1".to_owned(),
    )]);
    let intercepts = !secrets.is_empty();
    let mut proxy = Proxy::new(start.box_name.clone(), allow, secrets, aliases);
    if intercepts {
        // Without it, HTTPS to the secrets' hosts is refused (502), never
        // tunnelled with the placeholder in it.
        match crate::egress::ca::BoxCa::load(&start.dir, &start.box_id) {
            Ok(ca) => proxy = proxy.with_ca(Arc::new(ca)),
            Err(e) => tracing::warn!(box_name = start.box_name, "the box's CA: {e}"),
        }
    }
    let proxy = Arc::new(proxy);
    let traffic = proxy.traffic();
    let refusals = proxy.refusals();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(proxy.serve(listener, stop.clone()));
    Ok((stop.drop_guard(), traffic, refusals))
}

/// How long a refused target stays quiet after it was reported: a box
/// retrying a refused host in a loop makes one event per target per
/// [`REFUSAL_QUIET`], not a flood.
pub const REFUSAL_QUIET: std::time::Duration = std::time::Duration::from_secs(10);

/// Pushes the proxy's refusals to the daemon, each target once per
/// [`REFUSAL_QUIET`].
async fn push_refusals(
    mut refusals: broadcast::Receiver<crate::egress::Refusal>,
    pushes: broadcast::Sender<Push>,
) {
    type Told = (String, u16, crate::egress::Why);
    let mut told: HashMap<Told, std::time::Instant> = HashMap::new();
    loop {
        let refusal = match refusals.recv().await {
            Ok(refusal) => refusal,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let now = std::time::Instant::now();
        told.retain(|_, at| now.duration_since(*at) < REFUSAL_QUIET);
        let key = (refusal.host.clone(), refusal.port, refusal.why.clone());
        if told.contains_key(&key) || told.len() >= 1024 {
            continue;
        }
        told.insert(key, now);
        let why = Some(refusal.to_string());
        let crate::egress::Refusal { host, port, .. } = refusal;
        let _ = pushes.send(Push::Refused { host, port, why });
    }
}
