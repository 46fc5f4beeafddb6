//! One running namespace box: a `bwrap` process and the namespaces it holds.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Child;

use crate::error::{Error, Result};
use crate::registry::BoxRecord;

/// The static init, built by `build.rs` from `init.c`.
static INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/boxd-init"));

use super::options::{self, INFO_FD, INIT_FD, SECCOMP_FDS};
/// How long processes get to end on SIGTERM before a stop kills them.
const STOP_GRACE: Duration = Duration::from_secs(3);

pub struct Sandbox {
    /// Asks the watcher to kill bwrap (a stop).
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    /// `None` while bwrap runs; then why the box ended.
    ended: tokio::sync::watch::Receiver<Option<String>>,
    /// Host pid of the box's pid 1 (bwrap's reaper): the first process to
    /// go when the box ends.
    pub pid1: i32,
    /// Host pid of the box's init: it runs once the box is fully set up,
    /// and execs join its namespaces and root.
    pub pid: i32,
}

/// A sealed, executable memfd holding the init, made once per daemon.
fn init_memfd() -> Result<&'static OwnedFd> {
    static FD: OnceLock<std::result::Result<OwnedFd, String>> = OnceLock::new();
    FD.get_or_init(|| {
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
                libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL,
            );
        }
        Ok(fd)
    })
    .as_ref()
    .map_err(|e| Error::Internal(format!("preparing the box init: {e}")))
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

impl Sandbox {
    pub async fn start(bwrap: &Path, record: &BoxRecord, rootfs: &Path) -> Result<Sandbox> {
        let init = init_memfd()?;
        let hosts = match record.spec.allow_net.is_empty() {
            true => None,
            false => Some(super::egress::hosts_file(&record.dir)?),
        };
        let mounts = options::resolve_mounts(rootfs, &record.spec, hosts.as_deref())?;
        let mut cmd = tokio::process::Command::new(bwrap);
        cmd.args(options::bwrap_args(&record.name, rootfs, &mounts));

        let (info_r, info_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::io("pipe", e.into()))?;
        let filters = super::confine::filters().map_err(Error::Internal)?;
        let seccomp = [
            program_memfd(&filters.clone3)?,
            program_memfd(&filters.deny)?,
        ];
        let (init_raw, info_raw) = (init.as_raw_fd(), info_w.as_raw_fd());
        let seccomp_raw = [seccomp[0].as_raw_fd(), seccomp[1].as_raw_fd()];
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::umask(0o022);
                crate::limits::restore_in_child();
                let fds = [
                    (init_raw, INIT_FD),
                    (info_raw, INFO_FD),
                    (seccomp_raw[0], SECCOMP_FDS[0]),
                    (seccomp_raw[1], SECCOMP_FDS[1]),
                ];
                for (from, to) in fds {
                    if libc::dup2(from, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("run {}", bwrap.display()), e))?;
        drop(info_w);
        let mut stderr = child.stderr.take().expect("stderr is piped");

        let info = tokio::task::spawn_blocking(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut std::fs::File::from(info_r), &mut text);
            text
        });
        let info = tokio::time::timeout(Duration::from_secs(30), info)
            .await
            .map_err(|_| Error::Engine("bubblewrap did not start the box within 30 s".into()))?
            .map_err(|e| Error::Internal(e.to_string()))?;
        let pid = serde_json::from_str::<serde_json::Value>(&info)
            .ok()
            .and_then(|v| v.get("child-pid")?.as_i64())
            .map(|p| p as i32);
        // bwrap reports its pid 1 as soon as it is cloned, before the mounts
        // and the pivot into the box: the box is ready once the init runs.
        let init_pid = match pid {
            Some(pid1) => wait_for_init(pid1).await,
            None => None,
        };
        let (Some(pid1), Some(init_pid)) = (pid, init_pid) else {
            let mut err = String::new();
            let _ =
                tokio::time::timeout(Duration::from_secs(5), stderr.read_to_string(&mut err)).await;
            let _ = child.kill().await;
            return Err(Error::Engine(format!(
                "the box could not start: {}",
                err.trim()
            )));
        };
        // Keep bwrap's later complaints in the daemon log.
        let name = record.name.clone();
        tokio::spawn(async move {
            let mut err = String::new();
            let _ = stderr.read_to_string(&mut err).await;
            if !err.trim().is_empty() {
                tracing::warn!(box_name = %name, stderr = %err.trim(), "bubblewrap");
            }
        });
        let (kill, ended) = watch(child);
        Ok(Sandbox {
            kill: Some(kill),
            ended,
            pid1,
            pid: init_pid,
        })
    }

    /// Ends every process of the box. Without `force`, processes get
    /// SIGTERM and [`STOP_GRACE`] to exit first.
    pub async fn stop(mut self, force: bool) {
        if !force {
            let pid = self.pid1;
            signal_box(pid, libc::SIGTERM);
            let deadline = tokio::time::Instant::now() + STOP_GRACE;
            while tokio::time::Instant::now() < deadline && box_processes(pid).len() > 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        let _ = self.ended.wait_for(Option::is_some).await;
        // bwrap's pid 1 dies with it; wait until the namespace is gone. An
        // exiting pid 1 first waits for every process of its namespace, so
        // once it is a zombie (waiting for the system to reap it: it is
        // not our child), the box is empty.
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

/// Waits until a child of `pid1` runs the init (its executable is the
/// `boxd-init` memfd). Gives up after 30 s or when `pid1` is gone.
async fn wait_for_init(pid1: i32) -> Option<i32> {
    let children = format!("/proc/{pid1}/task/{pid1}/children");
    for _ in 0..3000 {
        let Ok(list) = std::fs::read_to_string(&children) else {
            return None;
        };
        for child in list
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
        {
            let exe = std::fs::read_link(format!("/proc/{child}/exe")).unwrap_or_default();
            if exe.to_string_lossy().contains("boxd-init") {
                return Some(child);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Whether a process exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s.rsplit_once(") ")?.1.chars().next()? != 'Z'))
        .unwrap_or(false)
}

/// Host pids of the processes in the box's pid namespace, bwrap's pid 1
/// and the init included.
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
