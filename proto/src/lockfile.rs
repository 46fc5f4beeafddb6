//! The home lock's record: which daemon holds a home and where it serves.
//!
//! `boxd` holds an exclusive `flock` on `HOME/boxd.lock` for its lifetime
//! and writes two lines inside: its pid and the socket it serves. A client
//! whose own idea of the socket differs (an agent host that passes only
//! `HOME` and `PATH` to its agents, so `XDG_RUNTIME_DIR` is missing) finds
//! the running daemon through the home it shares with it: [`holder`] reads
//! the record only while the lock is held, so a record left by a daemon
//! that died is never believed.

use std::path::{Path, PathBuf};

/// The lock file of a home.
pub fn path(home: &Path) -> PathBuf {
    home.join("boxd.lock")
}

/// What the lock file says of the daemon holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its pid, as written (empty when the file was still being written).
    pub pid: String,
    /// The socket it serves; `None` when not written (yet).
    pub socket: Option<PathBuf>,
}

impl Holder {
    /// The record's text: `PID\nSOCKET\n`.
    pub fn format(pid: u32, socket: &Path) -> String {
        format!("{pid}\n{}\n", socket.display())
    }

    /// Reads a record; anything after the second line is ignored.
    pub fn parse(text: &str) -> Holder {
        let mut lines = text.lines();
        let pid = lines.next().unwrap_or("").trim().to_owned();
        let socket = lines
            .next()
            .map(str::trim)
            .filter(|s| s.starts_with('/'))
            .map(PathBuf::from);
        Holder { pid, socket }
    }
}

/// The daemon holding `home`'s lock right now, if any. `None` when no
/// process holds it (a record left behind by a daemon that died is not
/// believed) or the file cannot be read.
pub fn holder(home: &Path) -> Option<Holder> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut file = std::fs::File::open(path(home)).ok()?;
    // SAFETY: flock on a descriptor we own; a shared lock we get is
    // released when `file` is closed.
    let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    if free {
        return None;
    }
    let mut text = String::new();
    // The record is a few dozen bytes; a bigger file is not boxd's.
    (&mut file).take(4096).read_to_string(&mut text).ok()?;
    Some(Holder::parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips() {
        let text = Holder::format(42, Path::new("/run/user/1000/boxd/boxd.sock"));
        assert_eq!(text, "42\n/run/user/1000/boxd/boxd.sock\n");
        assert_eq!(
            Holder::parse(&text),
            Holder {
                pid: "42".into(),
                socket: Some("/run/user/1000/boxd/boxd.sock".into()),
            }
        );
        // An older daemon wrote only its pid; a half-written file nothing.
        assert_eq!(Holder::parse("42\n").socket, None);
        assert_eq!(Holder::parse("").pid, "");
        assert_eq!(Holder::parse("7\nrelative/path\n").socket, None);
    }

    #[test]
    fn only_a_held_lock_is_believed() {
        use std::os::fd::AsRawFd;
        let home = tempfile::tempdir().unwrap();
        std::fs::write(path(home.path()), Holder::format(7, Path::new("/s.sock"))).unwrap();
        assert_eq!(holder(home.path()), None, "nobody holds it");
        let f = std::fs::File::open(path(home.path())).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
        let h = holder(home.path()).expect("held");
        assert_eq!(h.socket.as_deref(), Some(Path::new("/s.sock")));
        drop(f);
        assert_eq!(holder(home.path()), None);
    }
}
