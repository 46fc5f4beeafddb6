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

/// Where the init's memfd and bwrap's info pipe sit in the bwrap process.
const INIT_FD: i32 = 10;
const INFO_FD: i32 = 11;
/// How long processes get to end on SIGTERM before a stop kills them.
const STOP_GRACE: Duration = Duration::from_secs(3);

pub struct Sandbox {
    child: Child,
    /// Host pid of the box's pid 1 (bwrap's reaper).
    pid1: i32,
    /// Host pid of the box's init: it runs once the box is fully set up,
    /// and execs join its namespaces and root.
    pub pid: i32,
    pub shares_host_net: bool,
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

impl Sandbox {
    pub async fn start(bwrap: &Path, record: &BoxRecord, rootfs: &Path) -> Result<Sandbox> {
        let init = init_memfd()?;
        let shares_host_net = !record.spec.allow_net.is_empty();
        let mut cmd = tokio::process::Command::new(bwrap);
        cmd.args(["--unshare-user", "--uid", "0", "--gid", "0"])
            .args(["--unshare-pid", "--unshare-ipc", "--unshare-uts"]);
        if !shares_host_net {
            cmd.arg("--unshare-net");
        }
        cmd.arg("--die-with-parent")
            .arg("--bind")
            .arg(rootfs)
            .arg("/")
            .args(["--proc", "/proc", "--dev", "/dev", "--hostname"])
            .arg(&record.name);
        if shares_host_net {
            cmd.args(["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]);
        }
        for m in &record.spec.mounts {
            cmd.arg(if m.read_only { "--ro-bind" } else { "--bind" })
                .arg(&m.host_path)
                .arg(&m.guest_path);
        }
        cmd.args([
            "--info-fd",
            &INFO_FD.to_string(),
            "--",
            &format!("/proc/self/fd/{INIT_FD}"),
        ]);

        let (info_r, info_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::io("pipe", e.into()))?;
        let (init_raw, info_raw) = (init.as_raw_fd(), info_w.as_raw_fd());
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::umask(0o022);
                for (from, to) in [(init_raw, INIT_FD), (info_raw, INFO_FD)] {
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
        Ok(Sandbox {
            child,
            pid1,
            pid: init_pid,
            shares_host_net,
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
        let _ = self.child.kill().await;
        // bwrap's pid 1 dies with it; wait until the namespace is gone.
        let gone = Path::new("/proc").join(self.pid1.to_string());
        for _ in 0..250 {
            if !gone.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
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
