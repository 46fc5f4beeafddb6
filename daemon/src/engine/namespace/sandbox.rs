//! One running namespace box: a `bwrap` process and the namespaces it holds.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt};
use tokio::process::Child;

use super::boot::{self, Plan};
use super::cgroup::BoxCgroup;
use super::helper::Helper;
use super::idmap::IdMap;
use super::options::{INFO_FD, INIT_FD, READY_FD, SECCOMP_FDS};
use super::userns;
use crate::error::{Error, Result};

/// The static init, built by `build.rs` from `init.c`.
static INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/boxd-init"));

/// The most the boot helper may say on its channel.
const MAX_CHANNEL: u64 = 64 << 10;
/// How much of bubblewrap's stderr (which the box could write to, through
/// its pid 1) the daemon keeps: the last few KiB, never more.
const STDERR_TAIL: usize = 4 << 10;
/// How long processes get to end on SIGTERM before a stop kills them.
const STOP_GRACE: Duration = Duration::from_secs(3);

pub struct Sandbox {
    /// Asks the watcher to kill bwrap (a stop).
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    /// `None` while bwrap runs; then why the box ended.
    ended: tokio::sync::watch::Receiver<Option<String>>,
    /// Host pid of the box's pid 1, its init (bubblewrap's child, which
    /// execs the init once the box is set up): the first process to go
    /// when the box ends.
    pub pid1: i32,
    /// Host pid of the box's init once it runs (the same process as
    /// `pid1`): execs join its namespaces and root.
    pub pid: i32,
    /// The listener of the set-id filter the boot helper installed before
    /// it became bubblewrap ([`super::setid`]), for the supervisor to serve.
    pub setid: Option<OwnedFd>,
}

/// Where a supervisor finds the daemon's init memfd ([`init_memfd`]).
pub const SUPERVISOR_INIT_FD: i32 = 4;

static INIT_FD_ONCE: OnceLock<std::result::Result<OwnedFd, String>> = OnceLock::new();

/// A sealed, executable memfd holding the init, made once per daemon and
/// shared by every box it starts: each supervisor gets the daemon's at
/// [`SUPERVISOR_INIT_FD`] ([`adopt_init`]), so the init's pages exist once,
/// not once per box.
pub fn init_memfd() -> Result<&'static OwnedFd> {
    INIT_FD_ONCE
        .get_or_init(|| {
            use nix::sys::memfd::{MFdFlags, memfd_create};
            let fd = memfd_create(
                c"boxd-init",
                MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
            )
            .map_err(|e| format!("memfd_create: {e}"))?;
            let mut file = std::fs::File::from(fd);
            std::io::Write::write_all(&mut file, INIT).map_err(|e| format!("write init: {e}"))?;
            let fd = OwnedFd::from(file);
            // SAFETY: plain fcntl on an fd we own.
            unsafe {
                libc::fcntl(
                    fd.as_raw_fd(),
                    libc::F_ADD_SEALS,
                    libc::F_SEAL_WRITE
                        | libc::F_SEAL_GROW
                        | libc::F_SEAL_SHRINK
                        | libc::F_SEAL_SEAL,
                );
            }
            Ok(fd)
        })
        .as_ref()
        .map_err(|e| Error::Internal(format!("preparing the box init: {e}")))
}

/// In a supervisor: takes the daemon's init memfd from
/// [`SUPERVISOR_INIT_FD`] when it is one (sealed against writes), else
/// leaves [`init_memfd`] to make one.
pub fn adopt_init() {
    // SAFETY: F_GET_SEALS on a descriptor number; an unopened one fails.
    let seals = unsafe { libc::fcntl(SUPERVISOR_INIT_FD, libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_WRITE == 0 {
        return;
    }
    // SAFETY: the daemon placed its init memfd at this number for us, and
    // nothing else here owns it.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(SUPERVISOR_INIT_FD) };
    // Not for the supervisor's other children: the boot helper gets it
    // passed at INIT_FD.
    // SAFETY: plain fcntl on an fd we own.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    let _ = INIT_FD_ONCE.set(Ok(fd));
}

/// A seccomp program in a fresh memfd, read from the start by bwrap (a
/// fresh one per box: reading moves the shared file offset).
fn program_memfd(program: &seccompiler::BpfProgram) -> Result<OwnedFd> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create(c"boxd-seccomp", MFdFlags::MFD_CLOEXEC)
        .map_err(|e| Error::io("memfd_create", e.into()))?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, &super::confine::program_bytes(program))
        .map_err(|e| Error::io("write seccomp program", e))?;
    std::io::Seek::rewind(&mut file).map_err(|e| Error::io("rewind seccomp program", e))?;
    Ok(OwnedFd::from(file))
}

/// Why a boot helper did not get to start bubblewrap.
enum BootError {
    /// The user namespace could not be made or mapped.
    Map(String),
    /// The overlay root would not mount.
    Overlay(String),
    /// The box's spec asks for what cannot be (a mount that leads nowhere).
    Precondition(String),
    Other(Error),
}

impl From<BootError> for Error {
    fn from(e: BootError) -> Error {
        match e {
            BootError::Map(why) | BootError::Overlay(why) => {
                Error::Engine(format!("the box could not start: {why}"))
            }
            BootError::Precondition(why) => Error::FailedPrecondition(why),
            BootError::Other(e) => e,
        }
    }
}

/// Why the engine's probe failed.
pub enum ProbeError {
    Map(String),
    Mount(String),
}

/// Runs the boot helper of `plan` up to bubblewrap (or, for a probe, to
/// its exit): maps its user namespace with `ids` and collects its warnings.
async fn boot(
    helper: Helper,
    ids: &IdMap,
    cgroup: Option<(&BoxCgroup, Option<i32>)>,
    warnings: &mut Vec<String>,
) -> std::result::Result<Child, (Option<Child>, BootError)> {
    let (child, ours) = helper
        .spawn("the box's boot helper")
        .map_err(|e| (None, BootError::Other(e)))?;
    let pid = child.id().unwrap_or(0) as i32;
    let talk = async {
        ours.set_nonblocking(true)
            .map_err(|e| BootError::Other(Error::io("helper channel", e)))?;
        let (read, mut write) = tokio::net::UnixStream::from_std(ours)
            .map_err(|e| BootError::Other(Error::io("helper channel", e)))?
            .into_split();
        let mut lines = tokio::io::BufReader::new(read.take(MAX_CHANNEL)).lines();
        // The helper joins the box's cgroups before its namespace exists:
        // bubblewrap and everything in the box start inside. The zygote
        // joins in the same moment: a cgroup v1 move waits for an RCU grace
        // period (about 12 ms here) unless another move has just paid one.
        let join = |pid| match cgroup {
            None => Ok(()),
            Some((cg, zygote)) => {
                cg.attach(pid)?;
                zygote.map_or(Ok(()), |z| cg.attach(z))
            }
        };
        userns::map_helper(&mut lines, &mut write, pid, ids, join)
            .await
            .map_err(|e| match e.to_string() {
                why if why.starts_with("overlay ") => BootError::Overlay(why[8..].to_owned()),
                why if why.starts_with("precondition ") => {
                    BootError::Precondition(why[13..].to_owned())
                }
                why => BootError::Map(why),
            })?;
        // Then warnings, until the channel closes as bubblewrap starts.
        while let Some(line) = lines.next_line().await.ok().flatten() {
            if let Some(why) = line.strip_prefix("fail ") {
                return Err(if let Some(w) = why.strip_prefix("precondition ") {
                    BootError::Precondition(w.to_owned())
                } else if let Some(w) = why.strip_prefix("overlay ") {
                    BootError::Overlay(w.to_owned())
                } else {
                    BootError::Map(why.to_owned())
                });
            }
            if let Some(what) = line.strip_prefix("warn ") {
                warnings.push(what.to_owned());
            }
        }
        Ok(())
    };
    match tokio::time::timeout(Duration::from_secs(30), talk).await {
        Ok(Ok(())) => Ok(child),
        Ok(Err(e)) => Err((Some(child), e)),
        Err(_) => Err((
            Some(child),
            BootError::Other(Error::Engine(
                "the box's boot helper did not finish within 30 s".into(),
            )),
        )),
    }
}

/// Tries the boot helper's steps with `root` and `ids`, starting nothing.
pub async fn probe(
    root: &boot::Root,
    ids: &IdMap,
    privileged: bool,
) -> std::result::Result<(), ProbeError> {
    let plan = Plan {
        root: root.clone(),
        mounts: Vec::new(),
        range: ids.is_range(),
        privileged,
        box_root: ids.root(),
        bwrap: "/nonexistent".into(),
        bwrap_args: Vec::new(),
        nproc: None,
        probe: true,
        trust: None,
    };
    let json = serde_json::to_string(&plan).map_err(|e| ProbeError::Map(e.to_string()))?;
    let mut helper = Helper::new(boot::HELPER_ARG).map_err(|e| ProbeError::Map(e.to_string()))?;
    helper
        .cmd
        .arg(json)
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    match boot(helper, ids, None, &mut Vec::new()).await {
        Ok(mut child) => match child.wait().await {
            Ok(s) if s.success() => Ok(()),
            other => Err(ProbeError::Map(format!("the boot helper ended: {other:?}"))),
        },
        Err((_, BootError::Overlay(why))) => Err(ProbeError::Mount(why)),
        Err((_, BootError::Map(why) | BootError::Precondition(why))) => Err(ProbeError::Map(why)),
        Err((_, BootError::Other(e))) => Err(ProbeError::Map(e.to_string())),
    }
}

impl Sandbox {
    /// Starts the box: the boot helper assembles its root and user
    /// namespace as `plan` says and becomes bubblewrap; returns once the
    /// box's init runs. `idmap` writes the box's ids; the process
    /// `zygote` joins the box's cgroups with the helper; `box_name` is for
    /// logs; `warnings` collects what the helper could not do as asked.
    pub async fn start(
        plan: &Plan,
        idmap: &IdMap,
        cgroup: &BoxCgroup,
        zygote: Option<i32>,
        box_name: &str,
        warnings: &mut Vec<String>,
    ) -> Result<Sandbox> {
        let init = init_memfd()?;
        let plan_json = serde_json::to_string(plan).map_err(|e| Error::Internal(e.to_string()))?;
        let (info_r, info_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::io("pipe", e.into()))?;
        let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::io("pipe", e.into()))?;
        let filters = super::confine::filters().map_err(Error::Internal)?;
        let seccomp = [
            program_memfd(&filters.clone3)?,
            program_memfd(&filters.deny)?,
        ];
        let (setid_r, setid_w) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| Error::io("socketpair", e.into()))?;
        let mut helper = Helper::new(boot::HELPER_ARG)?;
        helper.pass(setid_w.as_raw_fd(), super::setid::BOOT_FD);
        helper.pass(init.as_raw_fd(), INIT_FD);
        helper.pass(info_w.as_raw_fd(), INFO_FD);
        helper.pass(seccomp[0].as_raw_fd(), SECCOMP_FDS[0]);
        helper.pass(seccomp[1].as_raw_fd(), SECCOMP_FDS[1]);
        helper.pass(ready_w.as_raw_fd(), READY_FD);
        helper
            .cmd
            .arg(plan_json)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let booted = boot(helper, idmap, Some((cgroup, zygote)), warnings).await;
        drop((info_w, ready_w, seccomp, setid_w));
        let mut child = match booted {
            Ok(child) => child,
            Err((child, e)) => {
                if let Some(mut child) = child {
                    let _ = child.kill().await;
                }
                return Err(e.into());
            }
        };
        // Passed before bubblewrap ran, so here once the channel closed.
        let Some(setid) = super::setid::take_boot_listener(&setid_r) else {
            let _ = child.kill().await;
            return Err(Error::Engine(
                "the box could not start: its boot helper passed no set-id listener".into(),
            ));
        };
        let stderr = Tail::collect(child.stderr.take().expect("stderr is piped"), box_name);

        // bubblewrap writes its pid 1 to the info pipe (a few bytes).
        let info = tokio::task::spawn_blocking(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(
                &mut std::io::Read::take(std::fs::File::from(info_r), 4096),
                &mut text,
            );
            text
        });
        let info = tokio::time::timeout(Duration::from_secs(30), info)
            .await
            .map_err(|_| Error::Engine("bubblewrap did not start the box within 30 s".into()))?
            .map_err(|e| Error::Internal(e.to_string()))?;
        let pid1 = serde_json::from_str::<serde_json::Value>(&info)
            .ok()
            .and_then(|v| v.get("child-pid")?.as_i64())
            .map(|p| p as i32);
        // bwrap reports its pid 1 as soon as it is cloned, before the mounts
        // and the pivot into the box: the box is ready once it runs the
        // init.
        let init_pid = match pid1 {
            Some(pid1) => wait_for_init(pid1, ready_r).await,
            None => None,
        };
        let (Some(pid1), Some(init_pid)) = (pid1, init_pid) else {
            let _ = child.kill().await;
            let err = stderr.text_when_done(Duration::from_secs(5)).await;
            return Err(Error::Engine(format!(
                "the box could not start: {}",
                err.trim()
            )));
        };
        let (kill, ended) = watch(child);
        Ok(Sandbox {
            kill: Some(kill),
            ended,
            pid1,
            pid: init_pid,
            setid: Some(setid),
        })
    }

    /// Ends every process of the box. Without `force`, processes get
    /// SIGTERM and [`STOP_GRACE`] to exit first.
    pub async fn stop(mut self, force: bool) {
        if !force {
            let pid = self.pid1;
            signal_box(pid, libc::SIGTERM);
            let deadline = tokio::time::Instant::now() + STOP_GRACE;
            while tokio::time::Instant::now() < deadline && box_processes(pid).len() > 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        let _ = self.ended.wait_for(Option::is_some).await;
        // The box's pid 1 (its init) dies with bwrap; wait until the
        // namespace is gone. An exiting pid 1 first waits for every
        // process of its namespace, so once it is a zombie (waiting for
        // the system to reap it: it is not our child), the box is empty.
        for _ in 0..250 {
            if !process_alive(self.pid1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Resolves with the reason once the box has ended, whether stopped or
    /// killed from outside.
    pub fn ended(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.ended.clone()
    }
}

/// Owns bwrap until it exits: kills it when asked (a stop), and publishes
/// why the box ended either way.
fn watch(
    mut child: Child,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::sync::watch::Receiver<Option<String>>,
) {
    let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
    let (ended_tx, ended_rx) = tokio::sync::watch::channel(None);
    tokio::spawn(async move {
        let reason = tokio::select! {
            status = child.wait() => {
                let how = match status {
                    Ok(s) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                        (_, Some(sig)) => format!("bubblewrap was killed by signal {sig}"),
                        (Some(code), _) => format!("bubblewrap exited with status {code}"),
                        _ => format!("bubblewrap ended: {s}"),
                    },
                    Err(e) => format!("waiting for bubblewrap failed: {e}"),
                };
                format!("its init was killed or exited ({how})")
            }
            _ = kill_rx => {
                let _ = child.kill().await;
                "it was stopped".to_owned()
            }
        };
        let _ = ended_tx.send(Some(reason));
    });
    (kill_tx, ended_rx)
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // A sandbox dropped without `stop` (daemon shutdown paths) still
        // takes its box down.
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }
}

/// Waits until `pid1` runs the init (its executable is the `boxd-init`
/// memfd): the init's first byte on its ready pipe, or the pipe's end
/// (bubblewrap failed). Gives up after 30 s.
async fn wait_for_init(pid1: i32, ready: OwnedFd) -> Option<i32> {
    let read = tokio::task::spawn_blocking(move || {
        let mut byte = [0u8; 1];
        std::io::Read::read(&mut std::fs::File::from(ready), &mut byte).ok()
    });
    let n = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .ok()?
        .ok()??;
    let exe = std::fs::read_link(format!("/proc/{pid1}/exe")).unwrap_or_default();
    (n == 1 && exe.to_string_lossy().contains("boxd-init")).then_some(pid1)
}

/// Whether a process exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s.rsplit_once(") ")?.1.chars().next()? != 'Z'))
        .unwrap_or(false)
}

/// Whether a process is on its way out (`PF_EXITING`): a box's pid 1 is
/// while it kills the rest of its namespace, before it is a zombie.
pub fn process_exiting(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")?
                .1
                .split(' ')
                .nth(6)?
                .parse::<u64>()
                .ok()
        })
        .is_some_and(|flags| flags & PF_EXITING != 0)
}

/// Host pids of the processes in the box's pid namespace, its pid 1 (the
/// init) included.
fn box_processes(pid1: i32) -> Vec<i32> {
    let Ok(ns) = std::fs::read_link(format!("/proc/{pid1}/ns/pid")) else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/ns/pid"))
                .ok()
                .as_ref()
                == Some(&ns)
        })
        .collect()
}

/// Signals every process of the box but its pid 1 (the init ignores it).
fn signal_box(pid1: i32, signal: i32) {
    for p in box_processes(pid1) {
        if p != pid1 {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(p, signal) };
        }
    }
}

/// The last [`STDERR_TAIL`] bytes of a stream the box may write to, read
/// to its end so that the writer never blocks; logged once, escaped, when
/// it ends.
#[derive(Clone)]
struct Tail {
    inner: Arc<Mutex<(Vec<u8>, bool)>>,
    done: Arc<tokio::sync::Notify>,
}

impl Tail {
    fn collect<R: AsyncRead + Unpin + Send + 'static>(mut reader: R, box_name: &str) -> Tail {
        let tail = Tail {
            inner: Arc::default(),
            done: Arc::default(),
        };
        let (t, name) = (tail.clone(), box_name.to_owned());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 << 10];
            let mut dropped = 0u64;
            loop {
                let n = match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let mut inner = t.inner.lock().expect("stderr tail");
                inner.0.extend_from_slice(&buf[..n]);
                if inner.0.len() > STDERR_TAIL {
                    let excess = inner.0.len() - STDERR_TAIL;
                    dropped += excess as u64;
                    inner.0.drain(..excess);
                }
            }
            let text = {
                let mut inner = t.inner.lock().expect("stderr tail");
                inner.1 = true;
                String::from_utf8_lossy(&inner.0).into_owned()
            };
            t.done.notify_waiters();
            if !text.trim().is_empty() {
                // Debug formatting escapes newlines and control characters:
                // what the box wrote cannot start a log line of its own.
                tracing::warn!(box_name = %name, stderr = ?text.trim(), dropped_bytes = dropped, "bubblewrap");
            }
        });
        tail
    }

    /// What was read, once the stream ended or `wait` passed.
    async fn text_when_done(&self, wait: Duration) -> String {
        let done = self.done.notified();
        if !self.inner.lock().expect("stderr tail").1 {
            let _ = tokio::time::timeout(wait, done).await;
        }
        String::from_utf8_lossy(&self.inner.lock().expect("stderr tail").0).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flood_of_stderr_keeps_only_the_tail() {
        let (mut w, r) = tokio::io::duplex(1 << 16);
        let tail = Tail::collect(r, "flood");
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let line = vec![b'x'; 1 << 16];
            for _ in 0..256 {
                w.write_all(&line).await.unwrap();
            }
            w.write_all(b"\nthe end").await.unwrap();
        });
        writer.await.unwrap();
        let text = tail.text_when_done(Duration::from_secs(5)).await;
        assert_eq!(text.len(), STDERR_TAIL);
        assert!(text.ends_with("\nthe end"));
    }
}
