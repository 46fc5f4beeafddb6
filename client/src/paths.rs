//! Where the daemon keeps its socket and its state.

use std::path::{Path, PathBuf};

/// Longest socket path the platform accepts (`sun_path` less the NUL):
/// 107 bytes on Linux, 103 on macOS.
#[cfg(target_os = "macos")]
pub const MAX_SOCKET_PATH: usize = 103;
#[cfg(not(target_os = "macos"))]
pub const MAX_SOCKET_PATH: usize = 107;

/// The daemon's socket and state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// The Unix socket the daemon listens on.
    pub socket: PathBuf,
    /// The state directory: boxes, images, logs, the lock.
    pub home: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    #[error("cannot determine the home directory of this user; set BOXD_HOME")]
    NoHome,
    #[error("{what} must be an absolute path: {path}")]
    NotAbsolute { what: &'static str, path: PathBuf },
    #[error(
        "socket path is {len} bytes, longer than the {max} this platform allows: {path}; pass a shorter --socket"
    )]
    SocketTooLong {
        path: PathBuf,
        len: usize,
        max: usize,
    },
}

impl Paths {
    /// Resolves the paths from explicit values (flags), then `BOXD_SOCKET`
    /// and `BOXD_HOME`, then the per-user defaults:
    ///
    /// - home: the platform data directory (`$XDG_DATA_HOME/boxd`,
    ///   `~/Library/Application Support/boxd`);
    /// - socket: `$XDG_RUNTIME_DIR/boxd/boxd.sock` where there is one,
    ///   otherwise `$TMPDIR/boxd-$UID/boxd.sock` (short enough for macOS).
    ///   When only the home is overridden, the socket is `HOME/run/boxd.sock`
    ///   so that a second home never talks to the first one's daemon.
    pub fn resolve(socket: Option<PathBuf>, home: Option<PathBuf>) -> Result<Paths, PathsError> {
        let socket = socket.or_else(|| env_path("BOXD_SOCKET"));
        let home_override = home.or_else(|| env_path("BOXD_HOME"));
        let home = match &home_override {
            Some(h) => absolute("BOXD_HOME", h)?,
            None => default_home()?,
        };
        let socket = match socket {
            Some(s) => absolute("BOXD_SOCKET", &s)?,
            None if home_override.is_some() => home.join("run").join("boxd.sock"),
            None => default_socket(),
        };
        let len = socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(PathsError::SocketTooLong {
                path: socket,
                len,
                max: MAX_SOCKET_PATH,
            });
        }
        Ok(Paths { socket, home })
    }
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn absolute(what: &'static str, p: &Path) -> Result<PathBuf, PathsError> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(p))
            .map_err(|_| PathsError::NotAbsolute {
                what,
                path: p.to_path_buf(),
            })
    }
}

fn project_dirs() -> Option<directories::ProjectDirs> {
    directories::ProjectDirs::from("", "", "boxd")
}

fn default_home() -> Result<PathBuf, PathsError> {
    project_dirs()
        .map(|d| d.data_dir().to_path_buf())
        .ok_or(PathsError::NoHome)
}

fn default_socket() -> PathBuf {
    if let Some(dir) = project_dirs().and_then(|d| d.runtime_dir().map(Path::to_path_buf)) {
        return dir.join("boxd.sock");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir()
        .join(format!("boxd-{uid}"))
        .join("boxd.sock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_values_win() {
        let p = Paths::resolve(Some("/s/b.sock".into()), Some("/h".into())).unwrap();
        assert_eq!(p.socket, PathBuf::from("/s/b.sock"));
        assert_eq!(p.home, PathBuf::from("/h"));
    }

    #[test]
    fn home_override_moves_the_socket_too() {
        let p = Paths::resolve(None, Some("/var/tmp/h".into())).unwrap();
        assert_eq!(p.socket, PathBuf::from("/var/tmp/h/run/boxd.sock"));
    }

    #[test]
    fn overlong_socket_is_refused() {
        let long = format!("/{}/boxd.sock", "x".repeat(120));
        let err = Paths::resolve(Some(long.into()), Some("/h".into())).unwrap_err();
        assert!(matches!(err, PathsError::SocketTooLong { .. }), "{err}");
    }
}
