//! Host paths that a box, an agent or a client can influence, used beneath
//! a root held open: the one place where such a path meets the host's
//! file system.
//!
//! A [`Root`] is a directory opened once, when the policy that allows it is
//! set (an MCP server's `--allow-mount`, a box's mount for the ACP proxy,
//! the directory `boxctl cp` writes into). Every later use of a path in it
//! (finding, reading, writing, packing, unpacking) starts from that
//! descriptor and walks down with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` ([`crate::beneath`]), so
//! the check and the use are one descriptor walk: a component a box
//! renames or swaps for a symlink between a check and a use is refused
//! (`ELOOP`/`EXDEV`), never followed.
//!
//! Invariants: a path is beneath a root only by whole components, after
//! `.` and `..` are taken out lexically (never through the file system);
//! no operation here follows a symlink below the root, the last component
//! included; a root's own path is resolved once, at [`Root::open`] (the
//! user named it), and never again.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

use crate::archive::{self, DIR, Failure, Kind, Modes, READ};
use crate::beneath;

/// A directory held open; every path used in it is resolved beneath it.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    /// The path as the user gave it (normalized).
    given: PathBuf,
    /// The path it resolved to when it was opened.
    real: PathBuf,
}

/// What is at a path beneath a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A regular file, reached with no symlink on the way.
    File,
    /// A directory, reached likewise (the root itself included).
    Dir,
    /// Nothing yet; the part of the path that exists is a chain of plain
    /// directories (a write may create it there).
    Missing,
    /// A symlink on the way or at the end, a component that is not a
    /// directory, or something that is not a file or a directory (a FIFO,
    /// a device, a socket): nothing here may open it.
    Leaves,
}

impl PartialEq for Root {
    fn eq(&self, other: &Root) -> bool {
        self.real == other.real && self.given == other.given
    }
}

impl Eq for Root {}

impl Root {
    /// Opens the directory `path` (absolute) as a root: symlinks in `path`
    /// itself are followed, now and once.
    pub fn open(path: &Path) -> io::Result<Root> {
        if !path.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not an absolute path", path.display()),
            ));
        }
        // Opened as spelled (the kernel's `..`, through whatever symlink
        // the user's path has); the normalized spelling is for matching.
        let dir = nix::fcntl::open(path, DIR & !OFlag::O_NOFOLLOW, Mode::empty())
            .map_err(io::Error::from)?;
        let given = normalize(path);
        let real = std::fs::read_link(format!("/proc/self/fd/{}", fd_num(&dir)))
            .unwrap_or_else(|_| given.clone());
        Ok(Root { dir, given, real })
    }

    /// Opens `rel` beneath `outer` (no symlink on the way) as a root of its
    /// own, named `path`: a root nested in another one, which a box that
    /// can write the outer one may have swapped for a symlink.
    pub fn open_beneath(outer: &Root, rel: &Path, path: &Path) -> Result<Root, Failure> {
        let dir = outer.open_at(rel, DIR)?;
        Ok(Root {
            dir,
            given: normalize(path),
            real: outer.real.join(rel),
        })
    }

    /// The path this root resolved to when it was opened.
    pub fn path(&self) -> &Path {
        &self.real
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// `abs` below this root (empty: the root itself), by whole
    /// components, after `.` and `..` are taken out lexically; `None`
    /// when it is not beneath it (by either of the root's spellings).
    pub fn relative(&self, abs: &Path) -> Option<PathBuf> {
        if !abs.is_absolute() {
            return None;
        }
        let abs = normalize(abs);
        [&self.real, &self.given]
            .into_iter()
            .find_map(|r| abs.strip_prefix(r).ok().map(Path::to_path_buf))
    }

    /// The host path `rel` names, for messages.
    pub fn shown(&self, rel: &Path) -> String {
        if rel.as_os_str().is_empty() {
            self.real.display().to_string()
        } else {
            self.real.join(rel).display().to_string()
        }
    }

    /// Opens `rel` beneath the root with `flags`, following no symlink
    /// (the last component included); empty `rel`: the root itself.
    pub fn open_at(&self, rel: &Path, flags: OFlag) -> Result<OwnedFd, Failure> {
        let opened = if rel.as_os_str().is_empty() {
            openat(
                self.dir.as_fd(),
                ".",
                flags | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
        } else {
            beneath::open(self.dir.as_fd(), rel, flags | OFlag::O_CLOEXEC)
        };
        opened.map_err(|e| self.failure(rel, e))
    }

    /// A failure on `rel`, saying when a symlink (or a swapped component)
    /// was refused.
    pub fn failure(&self, rel: &Path, e: Errno) -> Failure {
        let shown = self.shown(rel);
        match e {
            Errno::ELOOP | Errno::EXDEV => Failure {
                kind: Kind::Invalid,
                message: format!(
                    "{shown}: a symlink on the way, which is never followed beneath {}",
                    self.real.display()
                ),
            },
            Errno::EINVAL => Failure {
                kind: Kind::Invalid,
                message: format!("{shown}: not a plain path beneath {}", self.real.display()),
            },
            e => Failure::io(&shown, io::Error::from(e)),
        }
    }

    /// What is at `rel`.
    pub fn find(&self, rel: &Path) -> Found {
        match self.open_at(rel, OFlag::O_PATH) {
            Ok(fd) => match File::from(fd).metadata() {
                Ok(m) if m.is_file() => Found::File,
                Ok(m) if m.is_dir() => Found::Dir,
                _ => Found::Leaves,
            },
            Err(f) if f.kind == Kind::NotFound => {
                let mut parent = rel.to_path_buf();
                while parent.pop() {
                    match self.open_at(&parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
                        Ok(_) => return Found::Missing,
                        Err(f) if f.kind == Kind::NotFound => continue,
                        Err(_) => return Found::Leaves,
                    }
                }
                Found::Missing
            }
            Err(_) => Found::Leaves,
        }
    }

    /// The regular file `rel`, at most `max` bytes of it (more is an error
    /// naming the bound).
    pub fn read(&self, rel: &Path, max: u64) -> Result<Vec<u8>, Failure> {
        let shown = self.shown(rel);
        let file = File::from(self.open_at(rel, READ)?);
        let meta = file.metadata().map_err(|e| Failure::io(&shown, e))?;
        if !meta.is_file() {
            return Err(invalid(format!("{shown} is not a regular file")));
        }
        let mut bytes = Vec::new();
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::io(&shown, e))?;
        if bytes.len() as u64 > max {
            return Err(invalid(format!("{shown} is larger than {max} bytes")));
        }
        Ok(bytes)
    }

    /// Writes `data` as the regular file `rel` (made, 0666 less the umask,
    /// when missing; truncated when it exists), in a directory that exists.
    pub fn write(&self, rel: &Path, data: &[u8]) -> Result<(), Failure> {
        let (parent, name) = self.parent(rel)?;
        let shown = self.shown(rel);
        let fd = openat(
            parent.as_fd(),
            name,
            OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_NOFOLLOW
                | OFlag::O_NONBLOCK
                | OFlag::O_NOCTTY
                | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )
        .map_err(|e| self.failure(rel, e))?;
        let mut file = File::from(fd);
        let meta = file.metadata().map_err(|e| Failure::io(&shown, e))?;
        if !meta.is_file() {
            return Err(invalid(format!("{shown} is not a regular file")));
        }
        file.set_len(0).map_err(|e| Failure::io(&shown, e))?;
        file.write_all(data).map_err(|e| Failure::io(&shown, e))
    }

    /// Makes the missing directories of `rel` (0777 less the umask), each
    /// beneath the one before it with no symlink followed, as `mkdir -p`.
    pub fn make_dirs(&self, rel: &Path) -> Result<(), Failure> {
        let mut done = PathBuf::new();
        for c in rel.components() {
            let Component::Normal(name) = c else {
                return Err(self.failure(rel, Errno::EINVAL));
            };
            let parent = self.open_at(&done, DIR)?;
            match nix::sys::stat::mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o777)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(self.failure(&done.join(name), e)),
            }
            done.push(name);
        }
        // What is there now is a directory reached with no symlink.
        self.open_at(&done, DIR).map(drop)
    }

    /// A tar of `rel` (`contents`: a directory's contents, as `DIR/.`) to
    /// `w`, by [`archive::pack_fd`]'s rules; no symlink is followed (one
    /// on the way is refused, one at `rel` is archived as the link).
    pub fn pack(&self, rel: &Path, contents: bool, w: &mut impl Write) -> Result<(), Failure> {
        let name = match (contents, rel.file_name().or(self.real.file_name())) {
            (false, Some(n)) => PathBuf::from(n),
            _ => PathBuf::from("."),
        };
        let top = self.open_at(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW)?;
        archive::pack_fd(top, &name, contents, &self.shown(rel), w)
    }

    /// [`Root::pack`] of `rel` with its top-level entry named `name`.
    pub fn pack_as(&self, rel: &Path, name: &Path, w: &mut impl Write) -> Result<(), Failure> {
        let top = self.open_at(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW)?;
        archive::pack_fd(top, name, false, &self.shown(rel), w)
    }

    /// Unpacks a tar from `r` at `rel` by [`archive::unpack`]'s rule: into
    /// it when it is a directory, else the archive's one top-level entry
    /// becomes it (its parent must exist). A symlink at `rel` or on the way
    /// is refused.
    pub fn unpack(&self, rel: &Path, r: impl Read, modes: Modes) -> Result<(), Failure> {
        match self.open_at(rel, DIR) {
            Ok(dir) => archive::unpack_into(dir, r, modes),
            Err(f) if f.kind == Kind::NotFound || is_not_dir(self, rel) => {
                let (parent, name) = self.parent(rel)?;
                archive::unpack_as(parent, name, r, modes)
            }
            Err(f) => Err(f),
        }
    }

    /// The parent directory of `rel` (open, beneath the root) and its name.
    fn parent<'a>(&self, rel: &'a Path) -> Result<(OwnedFd, &'a OsStr), Failure> {
        let name = rel
            .file_name()
            .ok_or_else(|| invalid(format!("{} is a directory", self.shown(rel))))?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        Ok((self.open_at(parent, DIR)?, name))
    }
}

/// Whether `rel` is there and is not a directory (nor a symlink).
fn is_not_dir(root: &Root, rel: &Path) -> bool {
    root.find(rel) == Found::File
}

/// The root of `roots` that `abs` is beneath with the most components,
/// and `abs` below it.
pub fn locate<'a, R: AsRef<Root>>(roots: &'a [R], abs: &Path) -> Option<(&'a Root, PathBuf)> {
    roots
        .iter()
        .map(AsRef::as_ref)
        .filter_map(|r| r.relative(abs).map(|rel| (r, rel)))
        .max_by_key(|(r, rel)| {
            (
                r.real.components().count(),
                std::cmp::Reverse(rel.components().count()),
            )
        })
}

impl AsRef<Root> for Root {
    fn as_ref(&self) -> &Root {
        self
    }
}

fn invalid(message: String) -> Failure {
    Failure {
        kind: Kind::Invalid,
        message,
    }
}

fn fd_num(fd: &OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// `path` with `.` and `..` taken out, without touching the disk (`..` at
/// the root stays at the root).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "host").unwrap();
        fs::create_dir_all(dir.path().join("proj/d")).unwrap();
        fs::write(dir.path().join("proj/d/f"), "ok").unwrap();
        symlink(outside.path(), dir.path().join("proj/out")).unwrap();
        symlink("d/f", dir.path().join("proj/flink")).unwrap();
        let root = Root::open(&dir.path().join("proj")).unwrap();
        (dir, outside, root)
    }

    #[test]
    fn paths_are_beneath_by_whole_components() {
        let (dir, _o, root) = tree();
        let p = dir.path().join("proj");
        assert_eq!(root.relative(&p), Some(PathBuf::new()));
        assert_eq!(root.relative(&p.join("d/f")), Some(PathBuf::from("d/f")));
        assert_eq!(
            root.relative(&p.join("d/../d/f")),
            Some(PathBuf::from("d/f"))
        );
        assert_eq!(root.relative(&p.join("../proj2/x")), None);
        assert_eq!(root.relative(&dir.path().join("proj2")), None);
        assert_eq!(root.relative(Path::new("proj/d")), None);
    }

    #[test]
    fn nothing_follows_a_symlink_below_the_root() {
        let (_d, outside, root) = tree();
        assert_eq!(root.find(Path::new("d/f")), Found::File);
        assert_eq!(root.find(Path::new("d")), Found::Dir);
        assert_eq!(root.find(Path::new("")), Found::Dir);
        assert_eq!(root.find(Path::new("d/new")), Found::Missing);
        assert_eq!(root.find(Path::new("new/deeper")), Found::Missing);
        for rel in ["out/secret", "flink", "out", "out/new", "d/f/x"] {
            assert_eq!(root.find(Path::new(rel)), Found::Leaves, "{rel}");
        }
        assert_eq!(root.read(Path::new("d/f"), 10).unwrap(), b"ok");
        let e = root.read(Path::new("out/secret"), 10).unwrap_err();
        assert!(e.message.contains("symlink"), "{e}");
        assert!(root.read(Path::new("d/f"), 1).is_err(), "bounded");
        assert!(root.write(Path::new("out/secret"), b"x").is_err());
        assert!(root.write(Path::new("flink"), b"x").is_err());
        assert_eq!(fs::read(outside.path().join("secret")).unwrap(), b"host");
        root.write(Path::new("d/g"), b"new").unwrap();
        root.write(Path::new("d/f"), b"o").unwrap();
        assert_eq!(root.read(Path::new("d/f"), 10).unwrap(), b"o");
        let mut tar = Vec::new();
        // A symlink named itself is archived as the link it is.
        root.pack(Path::new("out"), false, &mut tar).unwrap();
        let mut a = tar::Archive::new(&tar[..]);
        let kinds: Vec<_> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().header().entry_type())
            .collect();
        assert_eq!(kinds, [tar::EntryType::Symlink]);
        tar.clear();
        assert!(root.pack(Path::new("out/secret"), false, &mut tar).is_err());
        let e = root
            .unpack(Path::new("out/x"), io::empty(), Modes { exact: false })
            .unwrap_err();
        assert!(e.message.contains("symlink"), "{e}");
    }

    #[test]
    fn a_copy_round_trips_beneath_a_root() {
        let (dir, _o, root) = tree();
        let mut tar = Vec::new();
        root.pack(Path::new("d"), false, &mut tar).unwrap();
        root.unpack(Path::new("copy"), &tar[..], Modes { exact: false })
            .unwrap();
        assert_eq!(fs::read(dir.path().join("proj/copy/f")).unwrap(), b"ok");
        root.unpack(Path::new("d"), &tar[..], Modes { exact: false })
            .unwrap();
        assert_eq!(fs::read(dir.path().join("proj/d/d/f")).unwrap(), b"ok");
    }

    #[test]
    fn the_most_specific_root_is_found() {
        let (dir, _o, root) = tree();
        let inner = Root::open_beneath(&root, Path::new("d"), &dir.path().join("proj/d")).unwrap();
        let roots = [root, inner];
        let (r, rel) = locate(&roots, &dir.path().join("proj/d/f")).unwrap();
        assert_eq!(r.path(), dir.path().join("proj/d").canonicalize().unwrap());
        assert_eq!(rel, Path::new("f"));
        assert!(
            Root::open_beneath(&roots[0], Path::new("out"), &dir.path().join("proj/out")).is_err()
        );
    }
}
