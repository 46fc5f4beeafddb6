//! Starting `boxd` on demand, for every client that may find it absent.
//!
//! Several clients may start at once (an agent host launching proxies in
//! parallel); each spawns a `boxd`, exactly one wins the home lock, the
//! others exit at once, and every client waits for the winner to answer.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{Client, ConnectError, Paths, connect_described, v1};

/// How long a client waits for a freshly started daemon to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot prepare {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot run {bin}: {source}")]
    Exec {
        bin: PathBuf,
        source: std::io::Error,
    },
    #[error("boxd exited ({status}): {last_line} (log: {log})")]
    Exited {
        status: std::process::ExitStatus,
        last_line: String,
        log: PathBuf,
    },
    #[error("boxd did not answer within {} s; see {log}", START_TIMEOUT.as_secs())]
    Timeout { log: PathBuf },
    #[error(transparent)]
    Connect(#[from] ConnectError),
}

/// The `boxd` binary: the explicit one, else the one beside the running
/// executable, else `boxd` on `PATH`.
pub fn boxd_binary(explicit: Option<PathBuf>) -> PathBuf {
    explicit
        .or_else(|| {
            let sibling = std::env::current_exe().ok()?.with_file_name("boxd");
            sibling.is_file().then_some(sibling)
        })
        .unwrap_or_else(|| PathBuf::from("boxd"))
}

/// Whether we started the daemon or found it running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    AlreadyRunning,
    Started,
}

/// A connected client and what the daemon says about itself.
pub struct Running {
    pub client: Client,
    pub describe: v1::DescribeResponse,
    pub origin: Origin,
}

/// Connects to the daemon, starting it first (detached, in its own process
/// group, its stderr appended to `HOME/logs/boxd.stderr`) when nothing
/// answers on the socket.
pub async fn ensure_running(
    paths: &Paths,
    boxd: &Path,
    args: &[String],
) -> Result<Running, SpawnError> {
    if let Some((client, describe)) = try_describe(paths).await? {
        return Ok(Running {
            client,
            describe,
            origin: Origin::AlreadyRunning,
        });
    }
    let logs = paths.home.join("logs");
    // Private, as the daemon would make them (umask 077).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&logs)
        .map_err(|source| SpawnError::Io {
            path: logs.clone(),
            source,
        })?;
    let log = logs.join("boxd.stderr");
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log)
        .map_err(|source| SpawnError::Io {
            path: log.clone(),
            source,
        })?;
    let mut cmd = std::process::Command::new(boxd);
    cmd.arg("--socket")
        .arg(&paths.socket)
        .arg("--home")
        .arg(&paths.home)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        // Its own process group: the daemon outlives this client, its
        // terminal and the signals sent to the client's group.
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| SpawnError::Exec {
        bin: boxd.to_path_buf(),
        source,
    })?;
    let deadline = Instant::now() + START_TIMEOUT;
    let mut exited = None;
    while Instant::now() < deadline {
        if let Some((client, describe)) = try_describe(paths).await? {
            // Reap our child later if it lost the race; it exits on its own.
            std::thread::spawn(move || child.wait());
            return Ok(Running {
                client,
                describe,
                origin: Origin::Started,
            });
        }
        if exited.is_none()
            && let Ok(Some(status)) = child.try_wait()
        {
            // Another boxd holding the home lock means another client won
            // the race: keep waiting for it. Otherwise ours failed.
            if !lock_held(&paths.home) {
                return Err(SpawnError::Exited {
                    status,
                    last_line: last_line(&log),
                    log,
                });
            }
            exited = Some(status);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(SpawnError::Timeout { log })
}

/// The daemon, if one answers; a daemon of another protocol, or a socket
/// this user cannot trust (another user's, or open to others), is an
/// error, not a reason to start a second one.
async fn try_describe(paths: &Paths) -> Result<Option<(Client, v1::DescribeResponse)>, SpawnError> {
    match connect_described(&paths.socket).await {
        Ok(found) => Ok(Some(found)),
        Err(e @ (ConnectError::Protocol { .. } | ConnectError::Untrusted { .. })) => Err(e.into()),
        Err(_) => Ok(None),
    }
}

/// Whether some process holds the daemon's home lock right now.
fn lock_held(home: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::File::open(home.join("boxd.lock")) else {
        return false;
    };
    // SAFETY: flock on a file descriptor we own; the shared lock (if we get
    // it) is released when `file` is closed below.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    rc != 0
}

fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_owned()
}
