//! Starting `boxd` on demand, for every client that may find it absent.
//!
//! Several clients may start at once (an agent host launching proxies in
//! parallel); each spawns a `boxd`, exactly one wins the home lock, the
//! others exit at once, and every client waits for the winner to answer.
//!
//! A client whose socket is only derived (no flag, no `BOXD_SOCKET`) may
//! not agree with the daemon on it: an agent host that passes its agents
//! only `HOME`, `PATH` and a few more leaves out `XDG_RUNTIME_DIR`. The
//! home is what they share, so the home lock's record
//! ([`boxd_proto::lockfile`]) says where its daemon serves, and the client
//! goes there instead of starting a second daemon that could only fail.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use boxd_proto::lockfile;

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
    #[error(
        "boxd (pid {pid}) serves {home} on {serving}, not on {asked}; give --socket {serving} (or BOXD_SOCKET), or leave the socket out"
    )]
    ServesElsewhere {
        pid: String,
        home: PathBuf,
        serving: PathBuf,
        asked: PathBuf,
    },
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
    /// The socket it answered on (reconnect there): `paths.socket`, or the
    /// one the home lock named.
    pub socket: PathBuf,
}

/// Connects to the daemon, starting it first (detached, in its own process
/// group, its stderr appended to `HOME/logs/boxd.stderr`) when nothing
/// answers on the socket and no daemon holds the home. Never waits out a
/// start that already failed: a `boxd` that exits while no daemon holds the
/// home is reported at once with the last line it logged.
pub async fn ensure_running(
    paths: &Paths,
    boxd: &Path,
    args: &[String],
) -> Result<Running, SpawnError> {
    if let Some(running) = try_describe(&paths.socket, Origin::AlreadyRunning).await? {
        return Ok(running);
    }
    if let Some(running) = serving_elsewhere(paths).await? {
        return Ok(running);
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
    let mut ours_exited = false;
    while Instant::now() < deadline {
        if let Some(running) = try_describe(&paths.socket, Origin::Started).await? {
            // Reap our child later if it lost the race; it exits on its own.
            std::thread::spawn(move || child.wait());
            return Ok(running);
        }
        if !ours_exited && let Ok(Some(status)) = child.try_wait() {
            ours_exited = true;
            // Another boxd holding the home lock means another client won
            // the race: wait for it (below). Otherwise ours failed.
            if lockfile::holder(&paths.home).is_none() {
                return Err(SpawnError::Exited {
                    status,
                    last_line: last_line(&log),
                    log,
                });
            }
        }
        if ours_exited {
            // The winner may serve another socket: go there.
            if let Some(running) = serving_elsewhere(paths).await? {
                return Ok(running);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(SpawnError::Timeout { log })
}

/// The daemon that holds `paths.home` when its lock says it serves
/// another socket than `paths.socket` and it answers there. An explicit
/// socket is not overridden: that is an error naming both.
async fn serving_elsewhere(paths: &Paths) -> Result<Option<Running>, SpawnError> {
    let Some(holder) = lockfile::holder(&paths.home) else {
        return Ok(None);
    };
    let Some(serving) = holder.socket.filter(|s| *s != paths.socket) else {
        return Ok(None);
    };
    if !paths.socket_is_default {
        return Err(SpawnError::ServesElsewhere {
            pid: holder.pid,
            home: paths.home.clone(),
            serving,
            asked: paths.socket.clone(),
        });
    }
    try_describe(&serving, Origin::AlreadyRunning).await
}

/// The daemon, if one answers on `socket`; a daemon of another protocol,
/// or a socket this user cannot trust (another user's, or open to others),
/// is an error, not a reason to start a second one.
async fn try_describe(socket: &Path, origin: Origin) -> Result<Option<Running>, SpawnError> {
    match connect_described(socket).await {
        Ok((client, describe)) => Ok(Some(Running {
            client,
            describe,
            origin,
            socket: socket.to_path_buf(),
        })),
        Err(e @ (ConnectError::Protocol { .. } | ConnectError::Untrusted { .. })) => Err(e.into()),
        Err(_) => Ok(None),
    }
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
