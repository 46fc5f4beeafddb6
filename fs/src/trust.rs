//! Whether a socket may be trusted with this user's requests (and the
//! secrets some of them carry): checked by every client before it sends a
//! byte, and by the daemon before it binds.
//!
//! A socket is trusted when nobody but this user (and root, who can read
//! everything anyway) can put something else in its place:
//!
//! - every directory looked into on the way (after symlinks, resolved here
//!   one component at a time as the kernel would) belongs to this user or
//!   root and, when others may write it, is sticky (like `/tmp`);
//! - every symlink followed belongs to this user or root;
//! - the socket's own directory belongs to this user and is closed to
//!   group and others (0700);
//! - the socket belongs to this user and is not writable by group/others;
//! - once connected, the process answering runs as this user
//!   (`SO_PEERCRED`). On macOS a peer of uid 0 is also accepted: launchd
//!   (root) binds and listens on a LaunchAgent's socket, so the kernel
//!   reports root for a socket-activated boxd.
//!
//! A process running as root gets no exception: a socket of another uid is
//! refused as for anyone, since the owner could answer as boxd (and that
//! user's own boxd refuses root's requests anyway).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// More symlinks than this on one path is a loop (Linux allows 40).
const MAX_LINKS: usize = 40;

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFSOCK: u32 = 0o140_000;

/// The uid every check is made for: this process's effective uid, which
/// owns what it creates and is what `SO_PEERCRED` reports of it.
/// This process's effective uid: whose socket and home these are.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The owner and mode (file-type bits included) of a path, not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub uid: u32,
    pub mode: u32,
}

impl Stat {
    fn kind(self) -> u32 {
        self.mode & S_IFMT
    }
    pub fn is_dir(self) -> bool {
        self.kind() == S_IFDIR
    }
    pub fn is_symlink(self) -> bool {
        self.kind() == S_IFLNK
    }
    pub fn is_socket(self) -> bool {
        self.kind() == S_IFSOCK
    }
    /// Permission bits, with setuid/setgid/sticky.
    pub fn perms(self) -> u32 {
        self.mode & 0o7777
    }
}

/// The filesystem as the checks see it (a seam for the unit tests).
pub trait Fs {
    fn lstat(&self, path: &Path) -> io::Result<Stat>;
    fn readlink(&self, path: &Path) -> io::Result<PathBuf>;
    /// Creates one directory, mode 0700.
    fn mkdir(&self, path: &Path) -> io::Result<()>;
}

/// The real filesystem.
pub struct RealFs;

impl Fs for RealFs {
    fn lstat(&self, path: &Path) -> io::Result<Stat> {
        let m = std::fs::symlink_metadata(path)?;
        Ok(Stat {
            uid: m.uid(),
            mode: m.mode(),
        })
    }
    fn readlink(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(path)
    }
}

/// What is wrong with a path (or the peer) on the way to the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// The socket's directory belongs to this other uid.
    SocketDirOwner(u32),
    /// The socket's directory is ours, with these permissions open to
    /// group or others.
    SocketDirOpen(u32),
    /// A directory on the way belongs to this uid, neither ours nor root's.
    DirOwner(u32),
    /// A directory on the way that others may write (these permissions),
    /// without the sticky bit.
    DirWritable(u32),
    /// A symlink on the way belongs to this uid, neither ours nor root's.
    SymlinkOwner(u32),
    /// The socket belongs to this other uid.
    SocketOwner(u32),
    /// Our socket, writable by group or others (these permissions).
    SocketWritable(u32),
    /// A directory was expected here.
    NotADirectory,
    /// A socket was expected here.
    NotASocket,
    /// The path has more than 40 symlinks (or loops).
    TooManyLinks,
    /// The process answering on the socket runs as this other uid.
    Peer(u32),
}

impl Problem {
    /// The uid of another user this problem names, if any.
    pub fn other_uid(self) -> Option<u32> {
        match self {
            Problem::SocketDirOwner(u)
            | Problem::DirOwner(u)
            | Problem::SymlinkOwner(u)
            | Problem::SocketOwner(u)
            | Problem::Peer(u) => Some(u),
            _ => None,
        }
    }
}

/// A socket that must not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// The path at fault (a directory, symlink or the socket itself).
    pub path: PathBuf,
    pub problem: Problem,
    /// This process's uid.
    pub me: u32,
}

impl std::error::Error for Untrusted {}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        let me = who(self.me);
        let me_or_root = if self.me == 0 {
            me.clone()
        } else {
            format!("{me} or root")
        };
        const TAKE: &str = "whoever owns it can put a socket of their own in boxd's place and read every request and secret sent to it";
        match self.problem {
            Problem::SocketDirOwner(u) => write!(
                f,
                "the socket's directory {p} belongs to {}, not to {me}: {TAKE}",
                who(u)
            )?,
            Problem::SocketDirOpen(m) => write!(
                f,
                "the socket's directory {p} is open to other users (mode {m:04o}): another user could put a socket in boxd's place; make it private (`chmod 700 {p}`) or"
            )?,
            Problem::DirOwner(u) => write!(
                f,
                "{p}, a directory on the socket's path, belongs to {}, not to {me_or_root}: {TAKE}",
                who(u)
            )?,
            Problem::DirWritable(m) => write!(
                f,
                "{p}, a directory on the socket's path, is writable by other users and not sticky (mode {m:04o}): another user could replace what is in it with a socket of their own"
            )?,
            Problem::SymlinkOwner(u) => write!(
                f,
                "{p}, a symlink on the socket's path, belongs to {}, not to {me_or_root}: {TAKE}",
                who(u)
            )?,
            Problem::SocketOwner(u) => write!(
                f,
                "the socket {p} belongs to {}, not to {me}: {TAKE}",
                who(u)
            )?,
            Problem::SocketWritable(m) => write!(
                f,
                "the socket {p} is writable by other users (mode {m:04o}); boxd makes it 0600: restart boxd, `chmod 600 {p}`, or"
            )?,
            Problem::NotADirectory => write!(f, "{p} is not a directory")?,
            Problem::NotASocket => write!(f, "{p} is not a socket")?,
            Problem::TooManyLinks => write!(f, "{p}: too many levels of symlinks")?,
            Problem::Peer(u) => write!(
                f,
                "the process answering on {p} runs as {}, not as {me}: another user's process must not receive this user's requests",
                who(u)
            )?,
        }
        let fix = "set XDG_RUNTIME_DIR, BOXD_SOCKET or --socket to a directory of your own";
        match self.problem {
            Problem::SocketDirOpen(_) | Problem::SocketWritable(_) => write!(f, " {fix}"),
            p if self.me == 0 && p.other_uid().is_some() => write!(
                f,
                "; root does not use a socket another user controls (that user's boxd would refuse root anyway): run this as that user, or give root a socket of its own (BOXD_SOCKET or --socket)"
            ),
            _ => write!(f, "; {fix}"),
        }
    }
}

/// `uid N (name)`, or `uid N` when the name cannot be found.
pub fn who(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

/// The user name of `uid`, from the password database.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain data; zeroed is a valid value.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to live memory of the stated size;
    // getpwuid_r writes only into `pw` and `buf`.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into `buf`, NUL-terminated by getpwuid_r.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// Why a path could not be checked: an untrusted path, or an I/O error
/// (a missing socket is `NotFound`).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Untrusted(#[from] Untrusted),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<Untrusted> for io::Error {
    /// An untrusted socket travels as the payload of an `io::Error` (the
    /// only error a connector may return), to be found again by
    /// `downcast`.
    fn from(u: Untrusted) -> io::Error {
        io::Error::other(u)
    }
}

impl From<CheckError> for io::Error {
    fn from(e: CheckError) -> io::Error {
        match e {
            CheckError::Untrusted(u) => u.into(),
            CheckError::Io(e) => e,
        }
    }
}

fn untrusted(me: u32, path: &Path, problem: Problem) -> CheckError {
    CheckError::Untrusted(Untrusted {
        path: path.to_path_buf(),
        problem,
        me,
    })
}

/// A directory looked into on the way: ours or root's, and not writable by
/// others unless sticky.
pub fn check_passage(me: u32, path: &Path, st: Stat) -> Result<(), Untrusted> {
    let problem = if !st.is_dir() {
        Problem::NotADirectory
    } else if st.uid != me && st.uid != 0 {
        Problem::DirOwner(st.uid)
    } else if st.perms() & 0o022 != 0 && st.perms() & 0o1000 == 0 {
        Problem::DirWritable(st.perms())
    } else {
        return Ok(());
    };
    Err(Untrusted {
        path: path.to_path_buf(),
        problem,
        me,
    })
}

/// A symlink followed on the way: ours or root's.
pub fn check_symlink(me: u32, path: &Path, st: Stat) -> Result<(), Untrusted> {
    if st.uid == me || st.uid == 0 {
        return Ok(());
    }
    Err(Untrusted {
        path: path.to_path_buf(),
        problem: Problem::SymlinkOwner(st.uid),
        me,
    })
}

/// The socket's own directory: ours, 0700 (nothing for group or others).
pub fn check_socket_dir(me: u32, path: &Path, st: Stat) -> Result<(), Untrusted> {
    let problem = if !st.is_dir() {
        Problem::NotADirectory
    } else if st.uid != me {
        Problem::SocketDirOwner(st.uid)
    } else if st.perms() & 0o077 != 0 {
        Problem::SocketDirOpen(st.perms())
    } else {
        return Ok(());
    };
    Err(Untrusted {
        path: path.to_path_buf(),
        problem,
        me,
    })
}

/// The socket: a socket, ours, not writable by group or others.
pub fn check_socket_file(me: u32, path: &Path, st: Stat) -> Result<(), Untrusted> {
    let problem = if !st.is_socket() {
        Problem::NotASocket
    } else if st.uid != me {
        Problem::SocketOwner(st.uid)
    } else if st.perms() & 0o022 != 0 {
        Problem::SocketWritable(st.perms())
    } else {
        return Ok(());
    };
    Err(Untrusted {
        path: path.to_path_buf(),
        problem,
        me,
    })
}

/// The process answering on `socket` runs as `peer`: it must be us (or,
/// on macOS, root: launchd listens on a LaunchAgent's socket).
pub fn check_peer(me: u32, socket: &Path, peer: u32) -> Result<(), Untrusted> {
    if peer == me || (cfg!(target_os = "macos") && peer == 0) {
        return Ok(());
    }
    Err(Untrusted {
        path: socket.to_path_buf(),
        problem: Problem::Peer(peer),
        me,
    })
}

/// Puts `path`'s components in front of `todo`, in order (`..` kept, `.`
/// and the root dropped).
fn push_front(todo: &mut VecDeque<OsString>, path: &Path) {
    for c in path.components().rev() {
        match c {
            Component::Normal(n) => todo.push_front(n.to_os_string()),
            Component::ParentDir => todo.push_front("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

fn absolute(path: &Path) -> io::Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(path))
    }
}

/// Resolves `path` one component at a time, as the kernel would, checking
/// every directory looked into ([`check_passage`]) and every symlink
/// followed ([`check_symlink`]). With `create`, a missing directory is
/// created (0700) once its parent passed. Returns the resolved path (no
/// symlink left in it) and what is there; the last component itself is
/// not judged, only reached.
pub fn resolve(
    fs: &dyn Fs,
    me: u32,
    path: &Path,
    create: bool,
) -> Result<(PathBuf, Stat), CheckError> {
    let mut todo = VecDeque::new();
    push_front(&mut todo, &absolute(path)?);
    let mut at = PathBuf::from("/");
    let mut at_stat = fs.lstat(&at)?;
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            at.pop();
            at_stat = fs.lstat(&at)?;
            continue;
        }
        check_passage(me, &at, at_stat)?;
        let next = at.join(&name);
        let st = match fs.lstat(&next) {
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => match fs.mkdir(&next) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e.into()),
                _ => fs.lstat(&next)?,
            },
            r => r?,
        };
        if st.is_symlink() {
            check_symlink(me, &next, st)?;
            links += 1;
            if links > MAX_LINKS {
                return Err(untrusted(me, &next, Problem::TooManyLinks));
            }
            let target = fs.readlink(&next)?;
            if target.is_absolute() {
                at = PathBuf::from("/");
                at_stat = fs.lstat(&at)?;
            }
            push_front(&mut todo, &target);
            continue;
        }
        at = next;
        at_stat = st;
    }
    Ok((at, at_stat))
}

/// Everything a client checks before it connects to `socket`: the path to
/// it ([`resolve`]), its directory ([`check_socket_dir`]) and the socket
/// ([`check_socket_file`]), following a symlink at the socket's own name
/// the same way. Returns the socket's resolved path. A missing socket (or
/// directory) is an `Io` error of kind `NotFound`, reported only once the
/// directories on the way to it passed and its directory, if any, is ours
/// (open or not: boxd makes it 0700 when it starts).
pub fn check_socket(fs: &dyn Fs, me: u32, socket: &Path) -> Result<PathBuf, CheckError> {
    let mut target = absolute(socket)?;
    for _ in 0..=MAX_LINKS {
        let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
            return Err(untrusted(me, &target, Problem::NotASocket));
        };
        let (dir, dir_stat) = resolve(fs, me, dir, false)?;
        let path = dir.join(name);
        let st = match fs.lstat(&path) {
            Ok(st) => st,
            Err(e) => {
                // Nothing to send anything to. A directory of another uid
                // is still refused (no daemon may be started there); one of
                // ours that is too open is not, since the daemon closes it
                // before it binds.
                match check_socket_dir(me, &dir, dir_stat) {
                    Err(u) if !matches!(u.problem, Problem::SocketDirOpen(_)) => {
                        return Err(u.into());
                    }
                    _ => return Err(e.into()),
                }
            }
        };
        if !st.is_symlink() {
            check_socket_dir(me, &dir, dir_stat)?;
            check_socket_file(me, &path, st)?;
            return Ok(path);
        }
        // A link at the socket's name: its directory is only on the way.
        check_passage(me, &dir, dir_stat)?;
        check_symlink(me, &path, st)?;
        target = dir.join(fs.readlink(&path)?);
    }
    Err(untrusted(me, socket, Problem::TooManyLinks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const ME: u32 = 1000;
    const OTHER: u32 = 1001;

    fn dir(uid: u32, perms: u32) -> Stat {
        Stat {
            uid,
            mode: S_IFDIR | perms,
        }
    }
    fn sock(uid: u32, perms: u32) -> Stat {
        Stat {
            uid,
            mode: S_IFSOCK | perms,
        }
    }

    /// An in-memory filesystem: path → (stat, symlink target).
    #[derive(Default)]
    struct Fake(HashMap<PathBuf, (Stat, Option<PathBuf>)>);

    impl Fake {
        /// `/` and `/tmp` as on any Linux host, `/home/me` ours.
        fn host() -> Fake {
            let mut f = Fake::default();
            f.put("/", dir(0, 0o755));
            f.put("/tmp", dir(0, 0o1777));
            f.put("/home", dir(0, 0o755));
            f.put("/home/me", dir(ME, 0o750));
            f
        }
        fn put(&mut self, p: &str, st: Stat) {
            self.0.insert(p.into(), (st, None));
        }
        fn link(&mut self, p: &str, uid: u32, target: &str) {
            let st = Stat {
                uid,
                mode: S_IFLNK | 0o777,
            };
            self.0.insert(p.into(), (st, Some(target.into())));
        }
        /// A private socket of ours at `dir/boxd.sock`, in a 0700 `dir` of ours.
        fn ours(&mut self, d: &str) {
            self.put(d, dir(ME, 0o700));
            self.put(&format!("{d}/boxd.sock"), sock(ME, 0o600));
        }
        fn check(&self, socket: &str) -> Result<PathBuf, Problem> {
            check_socket(self, ME, Path::new(socket)).map_err(|e| match e {
                CheckError::Untrusted(u) => u.problem,
                CheckError::Io(e) => panic!("{socket}: {e}"),
            })
        }
    }

    impl Fs for Fake {
        fn lstat(&self, path: &Path) -> io::Result<Stat> {
            self.0
                .get(path)
                .map(|(s, _)| *s)
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn readlink(&self, path: &Path) -> io::Result<PathBuf> {
            self.0
                .get(path)
                .and_then(|(_, t)| t.clone())
                .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
        }
        fn mkdir(&self, _: &Path) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }
    }

    #[test]
    fn a_private_socket_of_ours_is_trusted() {
        let mut f = Fake::host();
        f.ours("/tmp/boxd-1000");
        assert_eq!(
            f.check("/tmp/boxd-1000/boxd.sock"),
            Ok("/tmp/boxd-1000/boxd.sock".into())
        );
        f.ours("/home/me/run");
        assert_eq!(
            f.check("/home/me/./run/../run/boxd.sock"),
            Ok("/home/me/run/boxd.sock".into())
        );
    }

    #[test]
    fn a_socket_directory_of_another_uid_is_refused() {
        let mut f = Fake::host();
        f.put("/tmp/boxd-1000", dir(OTHER, 0o700));
        f.put("/tmp/boxd-1000/boxd.sock", sock(OTHER, 0o600));
        assert_eq!(
            f.check("/tmp/boxd-1000/boxd.sock"),
            Err(Problem::SocketDirOwner(OTHER))
        );
        // Even root's: the socket's directory must be this user's.
        f.put("/tmp/boxd-1000", dir(0, 0o700));
        assert_eq!(
            f.check("/tmp/boxd-1000/boxd.sock"),
            Err(Problem::SocketDirOwner(0))
        );
    }

    #[test]
    fn an_open_socket_directory_is_refused_even_if_ours() {
        for perms in [0o777, 0o755, 0o710, 0o701, 0o1777] {
            let mut f = Fake::host();
            f.ours("/tmp/b");
            f.put("/tmp/b", dir(ME, perms));
            assert_eq!(
                f.check("/tmp/b/boxd.sock"),
                Err(Problem::SocketDirOpen(perms)),
                "{perms:o}"
            );
        }
    }

    #[test]
    fn the_socket_must_be_ours_and_not_writable_by_others() {
        let mut f = Fake::host();
        f.ours("/tmp/b");
        f.put("/tmp/b/boxd.sock", sock(OTHER, 0o600));
        assert_eq!(
            f.check("/tmp/b/boxd.sock"),
            Err(Problem::SocketOwner(OTHER))
        );
        f.put("/tmp/b/boxd.sock", sock(ME, 0o666));
        assert_eq!(
            f.check("/tmp/b/boxd.sock"),
            Err(Problem::SocketWritable(0o666))
        );
        f.put("/tmp/b/boxd.sock", sock(ME, 0o755));
        assert!(f.check("/tmp/b/boxd.sock").is_ok());
        f.put("/tmp/b/boxd.sock", dir(ME, 0o700));
        assert_eq!(f.check("/tmp/b/boxd.sock"), Err(Problem::NotASocket));
    }

    #[test]
    fn directories_on_the_way_must_be_ours_or_roots_and_not_open_to_writers() {
        let mut f = Fake::host();
        f.put("/srv", dir(OTHER, 0o755));
        f.ours("/srv/b");
        assert_eq!(f.check("/srv/b/boxd.sock"), Err(Problem::DirOwner(OTHER)));
        // World-writable without the sticky bit: anyone may rename `b`.
        f.put("/srv", dir(0, 0o777));
        assert_eq!(
            f.check("/srv/b/boxd.sock"),
            Err(Problem::DirWritable(0o777))
        );
        f.put("/srv", dir(0, 0o775));
        assert_eq!(
            f.check("/srv/b/boxd.sock"),
            Err(Problem::DirWritable(0o775))
        );
        // Sticky, like /tmp: our own entry in it is ours alone.
        f.put("/srv", dir(0, 0o1777));
        assert!(f.check("/srv/b/boxd.sock").is_ok());
        // A file where a directory should be.
        f.put("/srv", sock(ME, 0o600));
        assert_eq!(f.check("/srv/b/boxd.sock"), Err(Problem::NotADirectory));
    }

    #[test]
    fn symlinks_are_followed_and_must_be_ours_or_roots() {
        let mut f = Fake::host();
        f.ours("/home/me/run");
        // Another user's link in /tmp, pointing at our good directory.
        f.link("/tmp/boxd-1000", OTHER, "/home/me/run");
        assert_eq!(
            f.check("/tmp/boxd-1000/boxd.sock"),
            Err(Problem::SymlinkOwner(OTHER))
        );
        // Ours (absolute and relative) is followed to what it names.
        f.link("/tmp/boxd-1000", ME, "../home/me/run");
        assert_eq!(
            f.check("/tmp/boxd-1000/boxd.sock"),
            Ok("/home/me/run/boxd.sock".into())
        );
        // A link at the socket's own name, in a directory we may not use.
        f.link("/home/me/boxd.sock", ME, "run/boxd.sock");
        assert_eq!(
            f.check("/home/me/boxd.sock"),
            Ok("/home/me/run/boxd.sock".into())
        );
        f.put("/srv", dir(OTHER, 0o700));
        f.ours("/srv/x");
        f.link("/home/me/evil.sock", ME, "/srv/x/boxd.sock");
        assert_eq!(f.check("/home/me/evil.sock"), Err(Problem::DirOwner(OTHER)));
        // The directory a link leads to is judged, not the link's.
        f.put("/tmp/open", dir(ME, 0o777));
        f.put("/tmp/open/boxd.sock", sock(ME, 0o600));
        f.link("/home/me/run/open.sock", ME, "/tmp/open/boxd.sock");
        assert_eq!(
            f.check("/home/me/run/open.sock"),
            Err(Problem::SocketDirOpen(0o777))
        );
        // Loops end.
        f.link("/home/me/a", ME, "b");
        f.link("/home/me/b", ME, "a");
        assert_eq!(f.check("/home/me/a/boxd.sock"), Err(Problem::TooManyLinks));
    }

    #[test]
    fn a_missing_socket_is_not_found_only_behind_trusted_directories() {
        let mut f = Fake::host();
        f.put("/home/me/run", dir(ME, 0o700));
        let e = check_socket(&f, ME, Path::new("/home/me/run/boxd.sock")).unwrap_err();
        assert!(
            matches!(&e, CheckError::Io(e) if e.kind() == io::ErrorKind::NotFound),
            "{e}"
        );
        f.put("/tmp/evil", dir(OTHER, 0o700));
        assert_eq!(
            f.check("/tmp/evil/boxd.sock"),
            Err(Problem::SocketDirOwner(OTHER))
        );
        // Ours but open, and empty: not running (boxd closes it at start).
        f.put("/tmp/open", dir(ME, 0o755));
        let e = check_socket(&f, ME, Path::new("/tmp/open/boxd.sock")).unwrap_err();
        assert!(
            matches!(&e, CheckError::Io(e) if e.kind() == io::ErrorKind::NotFound),
            "{e}"
        );
    }

    #[test]
    fn root_is_held_to_the_same_rules() {
        let mut f = Fake::host();
        f.ours("/home/me/run");
        let e = check_socket(&f, 0, Path::new("/home/me/run/boxd.sock")).unwrap_err();
        let CheckError::Untrusted(u) = e else {
            panic!("{e}")
        };
        // /home/me, on the way, is neither root's nor ours.
        assert_eq!(u.problem, Problem::DirOwner(ME));
        let msg = u.to_string();
        assert!(msg.contains("belongs to uid 1000"), "{msg}");
        assert!(msg.contains("not to uid 0"), "{msg}");
        assert!(
            msg.contains("root does not use a socket another user controls"),
            "{msg}"
        );
        // A user's private directory in /tmp: root refuses it too.
        f.ours("/tmp/boxd-1000");
        let e = check_socket(&f, 0, Path::new("/tmp/boxd-1000/boxd.sock")).unwrap_err();
        let CheckError::Untrusted(u) = e else {
            panic!("{e}")
        };
        assert_eq!(u.problem, Problem::SocketDirOwner(ME));
        // And root's own socket passes.
        f.put("/root", dir(0, 0o700));
        f.put("/root/boxd.sock", sock(0, 0o600));
        assert!(check_socket(&f, 0, Path::new("/root/boxd.sock")).is_ok());
    }

    #[test]
    fn the_peer_must_be_this_user() {
        let s = Path::new("/run/user/1000/boxd/boxd.sock");
        assert!(check_peer(ME, s, ME).is_ok());
        let e = check_peer(ME, s, OTHER).unwrap_err();
        assert_eq!(e.problem, Problem::Peer(OTHER));
        let msg = e.to_string();
        assert!(msg.contains("runs as uid 1001"), "{msg}");
        assert!(msg.contains(&s.display().to_string()), "{msg}");
        assert!(
            msg.contains("set XDG_RUNTIME_DIR, BOXD_SOCKET or --socket"),
            "{msg}"
        );
        assert_eq!(check_peer(ME, s, 0).is_ok(), cfg!(target_os = "macos"));
        assert!(check_peer(0, s, ME).is_err());
    }

    #[test]
    fn messages_name_the_path_the_owner_and_the_fix() {
        let u = Untrusted {
            path: "/tmp/boxd-1000".into(),
            problem: Problem::SocketDirOwner(0),
            me: ME,
        };
        let msg = u.to_string();
        assert!(msg.contains("/tmp/boxd-1000"), "{msg}");
        assert!(msg.contains("uid 0 (root)"), "{msg}");
        assert!(msg.contains("to a directory of your own"), "{msg}");
        let u = Untrusted {
            path: "/tmp/b".into(),
            problem: Problem::SocketDirOpen(0o777),
            me: ME,
        };
        let msg = u.to_string();
        assert!(msg.contains("mode 0777"), "{msg}");
        assert!(msg.contains("chmod 700 /tmp/b"), "{msg}");
    }

    #[test]
    fn the_real_filesystem_agrees() {
        use std::os::unix::fs::PermissionsExt;
        let me = my_uid();
        let t = tempfile::tempdir().unwrap();
        let run = t.path().join("run");
        // Created 0700 on the way.
        let (resolved, st) = resolve(&RealFs, me, &run, true).unwrap();
        assert_eq!(resolved, std::fs::canonicalize(&run).unwrap());
        assert!(
            st.is_dir() && st.uid == me && st.perms() & 0o077 == 0,
            "{st:?}"
        );
        let socket = run.join("boxd.sock");
        let _l = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(check_socket(&RealFs, me, &socket).is_ok());
        let link = t.path().join("link");
        std::os::unix::fs::symlink("run", &link).unwrap();
        assert!(check_socket(&RealFs, me, &link.join("boxd.sock")).is_ok());
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_socket(&RealFs, me, &socket).unwrap_err();
        assert!(
            matches!(&e, CheckError::Untrusted(u) if u.problem == Problem::SocketDirOpen(0o755)),
            "{e}"
        );
    }
}
