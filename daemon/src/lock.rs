//! One daemon per home: an exclusive `flock` on `HOME/boxd.lock`, held for
//! the daemon's lifetime and released by the kernel when it exits, with the
//! holder's pid and socket written inside (`boxd_proto::lockfile`): for the
//! error message, and for clients that look for the daemon of a home.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use boxd_proto::lockfile;
use nix::fcntl::{Flock, FlockArg};

pub struct HomeLock {
    _lock: Flock<File>,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another boxd (pid {pid}) is already serving {home}; stop it first (boxctl daemon stop)"
    )]
    Held { pid: String, home: PathBuf },
    #[error("cannot open the lock file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl HomeLock {
    /// Takes `home`'s lock for a daemon serving `socket`.
    pub fn acquire(home: &Path, socket: &Path) -> Result<HomeLock, LockError> {
        let path = lockfile::path(home);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut file, _)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let pid = lockfile::Holder::parse(&text).pid;
                let pid = if pid.is_empty() {
                    "unknown".into()
                } else {
                    pid
                };
                return Err(LockError::Held {
                    pid,
                    home: home.to_path_buf(),
                });
            }
        };
        lock.set_len(0).map_err(io)?;
        lock.rewind().map_err(io)?;
        lock.write_all(lockfile::Holder::format(std::process::id(), socket).as_bytes())
            .map_err(io)?;
        Ok(HomeLock { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_names_the_holder() {
        let home = tempfile::tempdir().unwrap();
        let socket = home.path().join("run/boxd.sock");
        let _first = HomeLock::acquire(home.path(), &socket).unwrap();
        let holder = lockfile::holder(home.path()).expect("held");
        assert_eq!(holder.socket.as_deref(), Some(socket.as_path()));
        // flock locks belong to the open file description, so a second open
        // in the same process conflicts just like another process would.
        match HomeLock::acquire(home.path(), &socket) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            Ok(_) => panic!("a second lock was granted"),
            Err(e) => panic!("expected Held, got {e}"),
        }
    }
}
