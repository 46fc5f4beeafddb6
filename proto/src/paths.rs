//! Where the daemon keeps its socket and its state: the rendezvous of the
//! daemon and every client, resolved the same way by both.

use std::path::{Path, PathBuf};

/// Longest socket path the platform accepts (`sun_path` less the NUL):
/// 107 bytes on Linux, 103 on macOS.
#[cfg(target_os = "macos")]
pub const MAX_SOCKET_PATH: usize = 103;
#[cfg(not(target_os = "macos"))]
pub const MAX_SOCKET_PATH: usize = 107;

/// The daemon's socket and state directory.
/// This process's effective uid: whose socket and home these are.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// The Unix socket the daemon listens on.
    pub socket: PathBuf,
    /// The state directory: boxes, images, logs, the lock.
    pub home: PathBuf,
    /// No flag or `BOXD_SOCKET` named the socket (it was derived from the
    /// home or the per-user directories): a client may then follow the
    /// home's lock to the socket its daemon serves ([`crate::lockfile`]).
    pub socket_is_default: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    #[error("cannot determine the home directory of this user; set BOXD_HOME")]
    NoHome,
    #[error("{what} must be an absolute path: {path}")]
    NotAbsolute { what: &'static str, path: PathBuf },
    #[error(
        "socket path is {len} bytes, longer than the {max} this platform allows: {path}; pass a shorter --socket (or BOXD_SOCKET)"
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
    /// - socket: `$XDG_RUNTIME_DIR/boxd/boxd.sock` where there is one;
    ///   otherwise `$TMPDIR/boxd-$UID/boxd.sock` when the temporary
    ///   directory is this user's alone (macOS gives every user one);
    ///   otherwise `HOME/run/boxd.sock`. Never a shared directory such as
    ///   `/tmp`, where another user could create `boxd-$UID` first.
    ///   When only the home is overridden, the socket is `HOME/run/boxd.sock`
    ///   so that a second home never talks to the first one's daemon.
    pub fn resolve(socket: Option<PathBuf>, home: Option<PathBuf>) -> Result<Paths, PathsError> {
        let socket = socket.or_else(|| env_path("BOXD_SOCKET"));
        let home_override = home.or_else(|| env_path("BOXD_HOME"));
        let home = match &home_override {
            Some(h) => absolute("BOXD_HOME", h)?,
            None => default_home()?,
        };
        let socket_is_default = socket.is_none();
        let socket = match socket {
            Some(s) => absolute("BOXD_SOCKET", &s)?,
            None if home_override.is_some() => home.join("run").join("boxd.sock"),
            None => {
                let tmp = std::env::temp_dir();
                let uid = my_uid();
                default_socket(
                    project_dirs().and_then(|d| d.runtime_dir().map(Path::to_path_buf)),
                    &tmp,
                    private_to(uid, &tmp),
                    &home,
                    uid,
                )
            }
        };
        let len = socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(PathsError::SocketTooLong {
                path: socket,
                len,
                max: MAX_SOCKET_PATH,
            });
        }
        Ok(Paths {
            socket,
            home,
            socket_is_default,
        })
    }
}

impl Paths {
    /// These paths, with the socket the home's daemon serves when it is
    /// running elsewhere than the derived default (its lock says where:
    /// [`crate::lockfile`]). An explicit socket is kept as given.
    pub fn following_lock(mut self) -> Paths {
        if self.socket_is_default
            && let Some(serving) = crate::lockfile::holder(&self.home).and_then(|h| h.socket)
        {
            self.socket = serving;
        }
        self
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

/// The default socket (see [`Paths::resolve`]): the runtime directory's,
/// else the temporary directory's when it is private to this user, else
/// the home's.
fn default_socket(
    runtime: Option<PathBuf>,
    tmp: &Path,
    tmp_private: bool,
    home: &Path,
    uid: u32,
) -> PathBuf {
    match runtime {
        Some(dir) => dir.join("boxd.sock"),
        None if tmp_private => tmp.join(format!("boxd-{uid}")).join("boxd.sock"),
        None => home.join("run").join("boxd.sock"),
    }
}

/// Whether `dir` (followed) belongs to `uid` and is closed to everyone
/// else, like macOS's per-user `$TMPDIR` and unlike `/tmp`.
fn private_to(uid: u32, dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_socket_follows_the_home_s_lock_and_an_explicit_one_does_not() {
        use std::os::fd::AsRawFd;
        let home = tempfile::tempdir().unwrap();
        let serving = Path::new("/run/user/7/boxd/boxd.sock");
        std::fs::write(
            crate::lockfile::path(home.path()),
            crate::lockfile::Holder::format(1, serving),
        )
        .unwrap();
        let derived = Paths {
            socket: home.path().join("run/boxd.sock"),
            home: home.path().to_path_buf(),
            socket_is_default: true,
        };
        assert_eq!(
            derived.clone().following_lock(),
            derived,
            "nobody holds the lock"
        );
        let f = std::fs::File::open(crate::lockfile::path(home.path())).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
        assert_eq!(derived.clone().following_lock().socket, serving);
        let explicit = Paths {
            socket_is_default: false,
            ..derived.clone()
        };
        assert_eq!(explicit.clone().following_lock(), explicit);
    }

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
    fn the_default_socket_is_never_in_a_shared_directory() {
        let home = Path::new("/home/me/.local/share/boxd");
        // The runtime directory first (directories adds `boxd`).
        assert_eq!(
            default_socket(
                Some("/run/user/1000/boxd".into()),
                Path::new("/tmp"),
                false,
                home,
                1000
            ),
            PathBuf::from("/run/user/1000/boxd/boxd.sock")
        );
        // No runtime directory and a shared /tmp: the home, not /tmp/boxd-1000.
        assert_eq!(
            default_socket(None, Path::new("/tmp"), false, home, 1000),
            PathBuf::from("/home/me/.local/share/boxd/run/boxd.sock")
        );
        // A temporary directory of this user's alone (macOS's $TMPDIR).
        assert_eq!(
            default_socket(None, Path::new("/var/folders/x/T"), true, home, 501),
            PathBuf::from("/var/folders/x/T/boxd-501/boxd.sock")
        );
    }

    #[test]
    fn only_a_temporary_directory_of_ours_alone_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let me = my_uid();
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(private_to(me, t.path()));
        assert!(!private_to(me.wrapping_add(1), t.path()));
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(!private_to(me, t.path()));
        // /tmp is root's and everyone's.
        assert!(!private_to(me, Path::new("/tmp")));
        assert!(!private_to(me, &t.path().join("missing")));
    }

    #[test]
    fn overlong_socket_is_refused() {
        let long = format!("/{}/boxd.sock", "x".repeat(120));
        let err = Paths::resolve(Some(long.into()), Some("/h".into())).unwrap_err();
        assert!(matches!(err, PathsError::SocketTooLong { .. }), "{err}");
    }
}
