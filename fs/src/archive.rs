//! Tar archives of files, `docker cp` style, shared by the host side
//! (`boxctl cp`, the JSONL driver) and by boxd's namespace engine, which
//! runs the same code inside a box (chrooted in it, so that every path and
//! symlink resolves in the box).
//!
//! - [`pack`]: a tar of one path: one top-level entry named after the
//!   path's last component (`DIR/.`: the directory's contents as `./…`),
//!   modes, mtimes, symlinks as links, numeric owners. Walked by
//!   descriptor, no symlink followed below the named path; a file is
//!   archived with exactly the length its descriptor had when it was opened
//!   (a file that grows meanwhile is cut there, one that shrinks padded
//!   with zeros), so nothing a box writes while it is copied can become
//!   another entry of the archive.
//! - [`unpack`]: docker's rule: into `path` when it is a directory, else
//!   the archive's one top-level entry becomes `path` (whose parent must
//!   exist). Every entry is made beneath that destination by descriptor,
//!   one component at a time, never following a symlink on the way,
//!   whoever made it (the archive, or whatever was there before): such an
//!   entry is refused. Entries with an absolute or `..` path are refused;
//!   an existing file or symlink is replaced, never written through; a hard
//!   link may only name a regular file this archive wrote. Files belong to
//!   whoever unpacks (as `docker cp` without `-a`).
//!
//! Blocking, streaming: memory stays bounded whatever the size.

use std::collections::HashSet;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

/// What kind of failure: the caller maps it to its own errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The path (or the destination's parent) does not exist.
    NotFound,
    /// The request or the archive is not acceptable.
    Invalid,
    /// Anything else (an I/O error).
    Io,
}

/// Why a copy failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub kind: Kind,
    pub message: String,
}

impl Failure {
    fn invalid(message: String) -> Failure {
        Failure {
            kind: Kind::Invalid,
            message,
        }
    }

    /// An I/O error on `what`: not found when it is missing.
    pub fn io(what: &str, e: io::Error) -> Failure {
        let kind = match e.kind() {
            io::ErrorKind::NotFound => Kind::NotFound,
            _ => Kind::Io,
        };
        Failure {
            kind,
            message: format!("{what}: {e}"),
        }
    }

    fn errno(what: &str, e: Errno) -> Failure {
        Failure::io(what, io::Error::from(e))
    }
}

type Result<T> = std::result::Result<T, Failure>;

/// How [`unpack`] sets modes.
#[derive(Debug, Clone, Copy)]
pub struct Modes {
    /// Exactly as archived, setuid and setgid included (inside a box);
    /// otherwise without them and through the umask (on the host, where a
    /// box's archive must not plant a setuid file).
    pub exact: bool,
}

/// Whether `path` names a directory's contents (`DIR/.`), as docker spells it.
pub fn names_contents(path: &str) -> bool {
    let trimmed = path.trim_end_matches('/');
    trimmed == "." || trimmed.ends_with("/.") || (trimmed.is_empty() && path.starts_with('/'))
}

/// Opening a directory of a tree someone else may change: never through
/// a symlink.
pub const DIR: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);
const LOOK: OFlag = OFlag::O_PATH
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);
/// Opening a file of such a tree to read it: never through a symlink,
/// never blocking on a FIFO, never taking a terminal.
pub const READ: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_CLOEXEC);

fn cstr(name: &OsStr) -> Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| Failure::invalid("a name with a NUL byte".into()))
}

// ---------------------------------------------------------------------------
// Packing.

/// Writes a tar of `path` to `w`. `follow_symlinks`: when `path` is a
/// symlink, archive what it points at (symlinks inside stay links).
pub fn pack(path: &str, follow_symlinks: bool, w: &mut impl Write) -> Result<()> {
    let p = Path::new(path);
    let flags = if follow_symlinks {
        OFlag::O_PATH | OFlag::O_CLOEXEC
    } else {
        LOOK
    };
    let top: OwnedFd =
        nix::fcntl::open(p, flags, Mode::empty()).map_err(|e| Failure::errno(path, e))?;
    let contents = names_contents(path);
    let name: PathBuf = if contents {
        PathBuf::from(".")
    } else {
        PathBuf::from(
            p.file_name()
                .expect("a path that is not its contents has a name"),
        )
    };
    pack_fd(top, &name, contents || path.ends_with('/'), path, w)
}

/// Writes a tar of what `top` (an `O_PATH` descriptor, or any open one)
/// is to `w`, its top-level entry named `name` (`.`: a directory's
/// contents). `dir_only`: anything but a directory is refused. `path` is
/// for messages.
pub fn pack_fd(
    top: OwnedFd,
    name: &Path,
    dir_only: bool,
    path: &str,
    w: &mut impl Write,
) -> Result<()> {
    let meta = File::from(top.try_clone().map_err(|e| Failure::io(path, e))?)
        .metadata()
        .map_err(|e| Failure::io(path, e))?;
    if dir_only && !meta.is_dir() {
        return Err(Failure::invalid(format!("{path}: not a directory")));
    }
    let mut b = tar::Builder::new(w);
    let name = name.to_path_buf();
    let ft = meta.file_type();
    if ft.is_dir() {
        let dir = reopen(&top, DIR).map_err(|e| Failure::errno(path, e))?;
        walk(&mut b, &name, dir, path)?;
    } else if ft.is_file() {
        let file = reopen(&top, READ).map_err(|e| Failure::errno(path, e))?;
        append_file(&mut b, &name, File::from(file), path)?;
    } else if ft.is_symlink() {
        let target =
            nix::fcntl::readlinkat(top.as_fd(), "").map_err(|e| Failure::errno(path, e))?;
        let target = PathBuf::from(target);
        append_link(&mut b, &name, &meta, &target, path)?;
    } else {
        return Err(Failure::invalid(format!(
            "{path}: not a file, directory or symlink"
        )));
    }
    b.finish()
        .map_err(|e| Failure::io(&format!("archiving {path}"), e))
}

/// An `O_PATH` descriptor opened again with `flags` (through `/proc`'s
/// magic link, which names the very file, never a path).
fn reopen(fd: &OwnedFd, flags: OFlag) -> std::result::Result<OwnedFd, Errno> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    nix::fcntl::open(link.as_str(), flags & !OFlag::O_NOFOLLOW, Mode::empty())
}

/// A directory (open, `dir`) and everything beneath it, by descriptor.
fn walk<W: Write>(b: &mut tar::Builder<W>, name: &Path, dir: OwnedFd, shown: &str) -> Result<()> {
    let dir = File::from(dir);
    let meta = dir.metadata().map_err(|e| Failure::io(shown, e))?;
    let mut h = header(&meta);
    // A directory's name ends in `/`, as tar writes it.
    let mut dir_name = name.as_os_str().to_owned();
    dir_name.push("/");
    b.append_data(&mut h, Path::new(&dir_name), io::empty())
        .map_err(|e| Failure::io(&format!("archiving {shown}"), e))?;
    let mut names: Vec<OsString> = Vec::new();
    let listing =
        nix::dir::Dir::from_fd(dir.try_clone().map_err(|e| Failure::io(shown, e))?.into())
            .map_err(|e| Failure::errno(shown, e))?;
    for entry in listing {
        let entry = entry.map_err(|e| Failure::errno(shown, e))?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(n).to_owned());
        }
    }
    names.sort();
    for n in names {
        let child = name.join(&n);
        let shown = format!("{shown}/{}", n.to_string_lossy());
        let Ok(look) = openat(dir.as_fd(), n.as_os_str(), LOOK, Mode::empty()) else {
            continue; // gone meanwhile
        };
        let meta = File::from(look.try_clone().map_err(|e| Failure::io(&shown, e))?)
            .metadata()
            .map_err(|e| Failure::io(&shown, e))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            match openat(dir.as_fd(), n.as_os_str(), DIR, Mode::empty()) {
                Ok(sub) => walk(b, &child, sub, &shown)?,
                Err(_) => continue, // swapped for something else meanwhile
            }
        } else if ft.is_file() {
            match openat(dir.as_fd(), n.as_os_str(), READ, Mode::empty()) {
                Ok(f) => append_file(b, &child, File::from(f), &shown)?,
                Err(_) => continue,
            }
        } else if ft.is_symlink() {
            let Ok(target) = nix::fcntl::readlinkat(dir.as_fd(), n.as_os_str()) else {
                continue;
            };
            append_link(b, &child, &meta, Path::new(&target), &shown)?;
        } else {
            use std::os::unix::fs::FileTypeExt;
            if ft.is_fifo() || ft.is_char_device() || ft.is_block_device() {
                let mut h = header(&meta);
                b.append_data(&mut h, &child, io::empty())
                    .map_err(|e| Failure::io(&format!("archiving {shown}"), e))?;
            }
            // Sockets are not archived (as tar does).
        }
    }
    Ok(())
}

/// A header from what `fstat` said.
fn header(meta: &std::fs::Metadata) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_metadata_in_mode(meta, tar::HeaderMode::Complete);
    if !meta.is_file() {
        h.set_size(0);
    }
    h
}

/// A regular file, with exactly the length `fstat` gave once it was open.
fn append_file<W: Write>(
    b: &mut tar::Builder<W>,
    name: &Path,
    file: File,
    shown: &str,
) -> Result<()> {
    let meta = file.metadata().map_err(|e| Failure::io(shown, e))?;
    if !meta.is_file() {
        return Ok(()); // swapped for something else meanwhile
    }
    let mut h = header(&meta);
    let len = meta.len();
    b.append_data(
        &mut h,
        name,
        Exactly {
            inner: file.take(len),
            left: len,
        },
    )
    .map_err(|e| Failure::io(&format!("archiving {shown}"), e))
}

fn append_link<W: Write>(
    b: &mut tar::Builder<W>,
    name: &Path,
    meta: &std::fs::Metadata,
    target: &Path,
    shown: &str,
) -> Result<()> {
    let mut h = header(meta);
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, name, target)
        .map_err(|e| Failure::io(&format!("archiving {shown}"), e))
}

/// Exactly `left` bytes: what the file has up to there, then zeros if it
/// shrank.
struct Exactly {
    inner: io::Take<File>,
    left: u64,
}

impl Read for Exactly {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = match self.inner.read(&mut buf[..want])? {
            0 => {
                buf[..want].fill(0);
                want
            }
            n => n,
        };
        self.left -= n as u64;
        Ok(n)
    }
}

// ---------------------------------------------------------------------------
// Unpacking.

/// Where the archive goes: into a directory, or as a new name in one.
enum Target {
    Into(OwnedFd),
    /// The archive's top-level entry becomes `name` in `parent`.
    As {
        parent: OwnedFd,
        name: OsString,
    },
}

/// An archive path's parts: `.` components dropped, `..` and absolute
/// paths refused. `top_dot`: it began with `.` (a contents archive).
fn parts(raw: &[u8]) -> Result<(bool, Vec<&OsStr>)> {
    if raw.first() == Some(&b'/') {
        return Err(Failure::invalid(format!(
            "the archive holds an absolute path: {:?}",
            String::from_utf8_lossy(raw)
        )));
    }
    let mut top_dot = false;
    let mut out = Vec::new();
    for (i, seg) in raw.split(|&b| b == b'/').enumerate() {
        match seg {
            b"" => {}
            b"." => top_dot |= i == 0,
            b".." => {
                return Err(Failure::invalid(format!(
                    "the archive holds a path with '..': {:?}",
                    String::from_utf8_lossy(raw)
                )));
            }
            s => out.push(OsStr::from_bytes(s)),
        }
    }
    Ok((top_dot, out))
}

/// Reads a tar from `r` and unpacks it at `path`.
pub fn unpack(path: &str, r: impl Read, modes: Modes) -> Result<()> {
    let p = Path::new(path);
    // The destination is the caller's own path: followed as it names it.
    let target = match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Target::Into(
            nix::fcntl::open(p, DIR & !OFlag::O_NOFOLLOW, Mode::empty())
                .map_err(|e| Failure::errno(path, e))?,
        ),
        Ok(_) if path.ends_with('/') => {
            return Err(Failure::invalid(format!("{path}: not a directory")));
        }
        Ok(_) | Err(_) => {
            let (parent, name) = match (p.parent(), p.file_name()) {
                (Some(parent), Some(name)) if !names_contents(path) => (parent, name),
                _ => return Err(Failure::invalid(format!("{path}: not a directory"))),
            };
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            let shown = parent.display().to_string();
            let fd = match nix::fcntl::open(parent, DIR & !OFlag::O_NOFOLLOW, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::ENOTDIR) => {
                    return Err(Failure::invalid(format!("{shown}: not a directory")));
                }
                Err(e) => return Err(Failure::errno(&shown, e)),
            };
            Target::As {
                parent: fd,
                name: name.to_owned(),
            }
        }
    };
    unpack_target(target, r, modes)
}

/// Unpacks a tar from `r` into the directory `dir` (open).
pub fn unpack_into(dir: OwnedFd, r: impl Read, modes: Modes) -> Result<()> {
    unpack_target(Target::Into(dir), r, modes)
}

/// Unpacks a tar from `r` whose one top-level entry becomes `name` in the
/// directory `parent` (open).
pub fn unpack_as(parent: OwnedFd, name: &OsStr, r: impl Read, modes: Modes) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.as_bytes().contains(&b'/') {
        return Err(Failure::invalid(format!("{name:?} is not a file name")));
    }
    unpack_target(
        Target::As {
            parent,
            name: name.to_owned(),
        },
        r,
        modes,
    )
}

fn unpack_target(target: Target, mut r: impl Read, modes: Modes) -> Result<()> {
    let mut archive = tar::Archive::new(&mut r);
    let mut unpacker = Unpacker {
        target,
        top: None,
        written: HashSet::new(),
        dirs: Vec::new(),
        mask: if modes.exact {
            0o7777
        } else {
            0o777 & !umask()
        },
    };
    let entries = archive
        .entries()
        .map_err(|e| Failure::invalid(format!("reading the archive: {e}")))?;
    for entry in entries {
        let entry = entry.map_err(|e| Failure::invalid(format!("reading the archive: {e}")))?;
        unpacker.entry(entry)?;
    }
    // Directories get their modes and times last, deepest first: a
    // read-only one is still written into, and its contents changed its
    // time.
    for (rel, mode, mtime) in unpacker.dirs.iter().rev() {
        let (base, comps) = unpacker.base(rel);
        let dir = open_dirs(base, comps, false, &unpacker.shown(rel))?;
        nix::sys::stat::fchmod(dir.as_fd(), Mode::from_bits_truncate(mode & unpacker.mask))
            .map_err(|e| Failure::errno(&unpacker.shown(rel), e))?;
        set_mtime(&dir, *mtime);
    }
    // Whatever follows the archive's end (padding) is read, so the writer
    // never meets a closed pipe.
    io::copy(&mut r, &mut io::sink()).map_err(|e| Failure::io("reading the archive", e))?;
    Ok(())
}

/// This process's umask, read without changing it.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

fn set_mtime(fd: &impl AsFd, mtime: u64) {
    let t = nix::sys::time::TimeSpec::new(mtime as i64, 0);
    let _ = nix::sys::stat::futimens(fd, &nix::sys::time::TimeSpec::UTIME_OMIT, &t);
}

/// Opens the directories `comps` one by one from `base`, never following a
/// symlink; with `create`, missing ones are made (0755, as `mkdir -p`).
fn open_dirs(
    base: BorrowedFd<'_>,
    comps: &[OsString],
    create: bool,
    shown: &str,
) -> Result<OwnedFd> {
    let mut current: OwnedFd = nix::unistd::dup(base).map_err(|e| Failure::errno(shown, e))?;
    for c in comps {
        let next = match openat(current.as_fd(), c.as_os_str(), DIR, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if create => {
                match nix::sys::stat::mkdirat(
                    current.as_fd(),
                    c.as_os_str(),
                    Mode::from_bits_truncate(0o755),
                ) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(Failure::errno(shown, e)),
                }
                openat(current.as_fd(), c.as_os_str(), DIR, Mode::empty())
                    .map_err(|e| through(shown, e))?
            }
            Err(e) => return Err(through(shown, e)),
        };
        current = next;
    }
    Ok(current)
}

/// A component that is a symlink (or not a directory) on the way.
fn through(shown: &str, e: Errno) -> Failure {
    match e {
        Errno::ELOOP | Errno::ENOTDIR => Failure::invalid(format!(
            "the archive writes {shown:?} through a symlink or a non-directory, which an unpack never follows"
        )),
        e => Failure::errno(shown, e),
    }
}

struct Unpacker {
    target: Target,
    /// The one top-level name (`As` only); `.` for a contents archive.
    top: Option<OsString>,
    /// Regular files this archive wrote (paths relative to the base): the
    /// only ones a hard link may name.
    written: HashSet<Vec<OsString>>,
    /// Directories made or entered, with their modes and mtimes.
    dirs: Vec<(Vec<OsString>, u32, u64)>,
    /// The mode bits kept.
    mask: u32,
}

impl Unpacker {
    /// Where an archive path lands, as components below the base
    /// ([`Unpacker::base`]); `None` for the destination itself.
    fn place(&mut self, raw: &[u8]) -> Result<Option<Vec<OsString>>> {
        let (top_dot, parts) = parts(raw)?;
        let owned = |v: &[&OsStr]| v.iter().map(|c| c.to_os_string()).collect::<Vec<_>>();
        match &self.target {
            Target::Into(_) => {
                if parts.is_empty() {
                    return Ok(None);
                }
                Ok(Some(owned(&parts)))
            }
            Target::As { name, .. } => {
                let name = name.clone();
                // A contents archive (`./` first, as tar writes `DIR/.`):
                // every entry is beneath the new name.
                if self.top.is_none() && top_dot && parts.is_empty() {
                    self.top = Some(".".into());
                }
                let mut out = vec![name];
                if self.top.as_deref() == Some(OsStr::new(".")) {
                    out.extend(owned(&parts));
                    return Ok(Some(out));
                }
                let (top, rest) = if top_dot {
                    (OsStr::new("."), &parts[..])
                } else if let Some((first, rest)) = parts.split_first() {
                    (*first, rest)
                } else {
                    return Ok(None);
                };
                match &self.top {
                    None => self.top = Some(top.to_owned()),
                    Some(t) if t == top => {}
                    Some(t) => {
                        return Err(Failure::invalid(format!(
                            "the archive has more than one top-level entry ({t:?} and {top:?}); copy into an existing directory instead"
                        )));
                    }
                }
                out.extend(owned(rest));
                Ok(Some(out))
            }
        }
    }

    /// The descriptor components are relative to, and the components.
    fn base<'a>(&'a self, rel: &'a [OsString]) -> (BorrowedFd<'a>, &'a [OsString]) {
        match &self.target {
            Target::Into(dir) => (dir.as_fd(), rel),
            Target::As { parent, .. } => (parent.as_fd(), rel),
        }
    }

    fn shown(&self, rel: &[OsString]) -> String {
        rel.iter()
            .map(|c| c.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/")
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<()> {
        use tar::EntryType;
        let raw = entry.path_bytes().into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            EntryType::XGlobalHeader
                | EntryType::XHeader
                | EntryType::GNULongName
                | EntryType::GNULongLink
        ) {
            return Ok(());
        }
        let Some(rel) = self.place(&raw)? else {
            return Ok(()); // the destination directory itself
        };
        let shown = self.shown(&rel);
        let (last, parents) = rel.split_last().expect("a placed entry has a name");
        let (base, _) = self.base(&rel);
        let dir = open_dirs(base, parents, true, &shown)?;
        let name = cstr(last)?;
        let existing = nix::sys::stat::fstatat(
            dir.as_fd(),
            name.as_c_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok();
        let is_dir = |st: &nix::sys::stat::FileStat| st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        let mode = entry.header().mode().unwrap_or(0o644);
        let mtime = entry.header().mtime().unwrap_or(0);
        match kind {
            EntryType::Directory => {
                match &existing {
                    Some(st) if !is_dir(st) => {
                        return Err(Failure::invalid(format!(
                            "cannot overwrite non-directory {shown} with a directory"
                        )));
                    }
                    Some(_) => {}
                    None => nix::sys::stat::mkdirat(
                        dir.as_fd(),
                        name.as_c_str(),
                        Mode::from_bits_truncate(0o700),
                    )
                    .map_err(|e| Failure::errno(&shown, e))?,
                }
                self.dirs.push((rel, mode, mtime));
            }
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                self.replace(&dir, &name, existing.as_ref(), &shown)?;
                let fd = openat(
                    dir.as_fd(),
                    name.as_c_str(),
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                )
                .map_err(|e| Failure::errno(&shown, e))?;
                let mut file = File::from(fd);
                io::copy(&mut entry, &mut file).map_err(|e| Failure::io(&shown, e))?;
                nix::sys::stat::fchmod(file.as_fd(), Mode::from_bits_truncate(mode & self.mask))
                    .map_err(|e| Failure::errno(&shown, e))?;
                set_mtime(&file, mtime);
                self.written.insert(rel);
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .map(|l| l.into_owned())
                    .ok_or_else(|| {
                        Failure::invalid(format!("{shown}: a symlink without a target"))
                    })?;
                self.replace(&dir, &name, existing.as_ref(), &shown)?;
                nix::unistd::symlinkat(OsStr::from_bytes(&target), dir.as_fd(), name.as_c_str())
                    .map_err(|e| Failure::errno(&shown, e))?;
                self.written.remove(&rel);
            }
            EntryType::Link => {
                let link = entry
                    .link_name_bytes()
                    .map(|l| l.into_owned())
                    .unwrap_or_default();
                let Some(src) = self.place(&link)? else {
                    return Err(Failure::invalid(format!(
                        "the archive links {shown:?} to the destination itself"
                    )));
                };
                if !self.written.contains(&src) {
                    return Err(Failure::invalid(format!(
                        "the archive links {shown:?} to {:?}, which is not a regular file it wrote",
                        self.shown(&src)
                    )));
                }
                let (src_last, src_parents) = src.split_last().expect("named");
                let (base, _) = self.base(&src);
                let src_dir = open_dirs(base, src_parents, false, &self.shown(&src))?;
                self.replace(&dir, &name, existing.as_ref(), &shown)?;
                nix::unistd::linkat(
                    src_dir.as_fd(),
                    cstr(src_last)?.as_c_str(),
                    dir.as_fd(),
                    name.as_c_str(),
                    nix::fcntl::AtFlags::empty(),
                )
                .map_err(|e| Failure::errno(&format!("linking {shown}"), e))?;
                self.written.insert(rel);
            }
            EntryType::Fifo => {
                self.replace(&dir, &name, existing.as_ref(), &shown)?;
                nix::unistd::mkfifoat(
                    dir.as_fd(),
                    name.as_c_str(),
                    Mode::from_bits_truncate(mode & self.mask),
                )
                .map_err(|e| Failure::errno(&shown, e))?;
            }
            other => {
                return Err(Failure::invalid(format!(
                    "{shown:?}: unsupported entry type {other:?}"
                )));
            }
        }
        Ok(())
    }

    /// Makes room for a non-directory: an existing file or symlink is
    /// removed (never written through); a directory stays, and is an error.
    fn replace(
        &self,
        dir: &OwnedFd,
        name: &CStr,
        existing: Option<&nix::sys::stat::FileStat>,
        shown: &str,
    ) -> Result<()> {
        match existing {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => Err(Failure::invalid(
                format!("cannot overwrite directory {shown} with a non-directory"),
            )),
            Some(_) => {
                nix::unistd::unlinkat(dir.as_fd(), name, nix::unistd::UnlinkatFlags::NoRemoveDir)
                    .map_err(|e| Failure::errno(shown, e))
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXACT: Modes = Modes { exact: true };
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, data).unwrap();
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, path: &str, to: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, path, to).unwrap();
    }

    /// A raw header, for paths the builder refuses to write.
    fn raw_file(path: &[u8]) -> Vec<u8> {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..path.len()].copy_from_slice(path);
        h.set_size(1);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        let mut out = h.as_bytes().to_vec();
        out.push(b'x');
        out.resize(1024, 0);
        out.extend([0u8; 1024]);
        out
    }

    fn s(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    #[test]
    fn out_then_in_keeps_tree_modes_and_links() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/x"), b"hello").unwrap();
        std::fs::set_permissions(src.join("sub/x"), PermissionsExt::from_mode(0o741)).unwrap();
        std::os::unix::fs::symlink("sub/x", src.join("l")).unwrap();
        let mut tar = Vec::new();
        pack(s(&src), false, &mut tar).unwrap();
        // Into an existing directory: it lands as dst/src.
        let dst = t.path().join("dst");
        std::fs::create_dir(&dst).unwrap();
        unpack(s(&dst), &tar[..], EXACT).unwrap();
        assert_eq!(std::fs::read(dst.join("src/sub/x")).unwrap(), b"hello");
        let mode = std::fs::metadata(dst.join("src/sub/x")).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o741);
        assert_eq!(
            std::fs::read_link(dst.join("src/l")).unwrap(),
            Path::new("sub/x")
        );
        // As a new name.
        let renamed = t.path().join("renamed");
        unpack(s(&renamed), &tar[..], EXACT).unwrap();
        assert_eq!(std::fs::read(renamed.join("sub/x")).unwrap(), b"hello");
        // A directory's contents, into a new name.
        let mut tar = Vec::new();
        pack(&format!("{}/.", s(&src)), false, &mut tar).unwrap();
        let contents = t.path().join("contents");
        unpack(s(&contents), &tar[..], EXACT).unwrap();
        assert_eq!(std::fs::read(contents.join("sub/x")).unwrap(), b"hello");
        unpack(s(&dst), &tar[..], EXACT).unwrap();
        assert_eq!(std::fs::read(dst.join("sub/x")).unwrap(), b"hello");
    }

    #[test]
    fn a_file_becomes_the_new_name_and_missing_parents_are_not_found() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"data").unwrap();
        let mut tar = Vec::new();
        pack(s(&t.path().join("f")), false, &mut tar).unwrap();
        unpack(s(&t.path().join("g")), &tar[..], EXACT).unwrap();
        assert_eq!(std::fs::read(t.path().join("g")).unwrap(), b"data");
        let e = unpack(s(&t.path().join("no/such/g")), &tar[..], EXACT).unwrap_err();
        assert_eq!(e.kind, Kind::NotFound, "{e:?}");
        let e = pack(s(&t.path().join("missing")), false, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind, Kind::NotFound, "{e:?}");
        let e = pack(&format!("{}/f/.", s(t.path())), false, &mut Vec::new()).unwrap_err();
        assert_ne!(e.kind, Kind::NotFound);
    }

    #[test]
    fn follow_symlinks_archives_the_target() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"data").unwrap();
        std::os::unix::fs::symlink("f", t.path().join("l")).unwrap();
        for (follow, is_link) in [(false, true), (true, false)] {
            let mut tar = Vec::new();
            pack(s(&t.path().join("l")), follow, &mut tar).unwrap();
            let mut a = tar::Archive::new(&tar[..]);
            let e = a.entries().unwrap().next().unwrap().unwrap();
            assert_eq!(e.path().unwrap(), Path::new("l"));
            assert_eq!(e.header().entry_type().is_symlink(), is_link);
        }
    }

    #[test]
    fn hostile_archives_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let dst = t.path().join("dst");
        std::fs::create_dir(&dst).unwrap();
        // Through a symlink the archive made.
        let tar = archive(|b| {
            link(b, "esc", s(t.path()));
            file(b, "esc/owned", b"x", 0o644);
        });
        let e = unpack(s(&dst), &tar[..], EXACT).unwrap_err();
        assert_eq!(e.kind, Kind::Invalid, "{e:?}");
        assert!(!t.path().join("owned").exists());
        // `..` and absolute paths.
        for raw in [&b"../up"[..], b"a/../../up", b"/abs"] {
            let e = unpack(s(&dst), &raw_file(raw)[..], EXACT).unwrap_err();
            assert_eq!(e.kind, Kind::Invalid, "{raw:?}: {e:?}");
        }
        assert!(!t.path().join("up").exists());
        // Two top-level entries cannot both become one new name.
        let tar = archive(|b| {
            file(b, "a", b"x", 0o644);
            file(b, "b", b"y", 0o644);
        });
        let e = unpack(s(&t.path().join("new")), &tar[..], EXACT).unwrap_err();
        assert_eq!(e.kind, Kind::Invalid, "{e:?}");
        // Not a tar at all.
        let e = unpack(s(&dst), &b"not a tar archive, just some text"[..], EXACT).unwrap_err();
        assert_ne!(e.kind, Kind::NotFound);
    }

    #[test]
    fn read_only_directories_are_filled_then_closed() {
        let t = tempfile::tempdir().unwrap();
        let tar = archive(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o555);
            h.set_size(0);
            b.append_data(&mut h, "ro/", &b""[..]).unwrap();
            file(b, "ro/f", b"in", 0o4755);
        });
        let host = t.path().join("host");
        unpack(s(&host), &tar[..], Modes { exact: false }).unwrap();
        assert_eq!(std::fs::read(host.join("f")).unwrap(), b"in");
        assert_eq!(mode_of(&host), 0o555);
        assert_eq!(mode_of(&host.join("f")), 0o755, "no setuid on the host");
        let boxed = t.path().join("box");
        unpack(s(&boxed), &tar[..], EXACT).unwrap();
        assert_eq!(mode_of(&boxed.join("f")), 0o4755, "exact in a box");
        for d in [&host, &boxed] {
            std::fs::set_permissions(d, PermissionsExt::from_mode(0o755)).unwrap();
        }
    }

    fn mode_of(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn an_existing_symlink_is_replaced_not_written_through() {
        let t = tempfile::tempdir().unwrap();
        let dst = t.path().join("dst");
        std::fs::create_dir(&dst).unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dst.join("f")).unwrap();
        let tar = archive(|b| file(b, "f", b"new", 0o600));
        unpack(s(&dst), &tar[..], EXACT).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(dst.join("f")).unwrap(), b"new");
        assert!(
            !std::fs::symlink_metadata(dst.join("f"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    fn hard(b: &mut tar::Builder<Vec<u8>>, path: &str, to: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Link);
        h.set_size(0);
        b.append_link(&mut h, path, to).unwrap();
    }

    #[test]
    fn a_hard_link_to_a_symlink_leads_nowhere() {
        // The attack of a box's forged archive: `s` a symlink to a host
        // directory, `h` a hard link to `s`, then a file beneath `h`.
        let t = tempfile::tempdir().unwrap();
        let host = t.path().join("host");
        std::fs::create_dir(&host).unwrap();
        let dst = t.path().join("dst");
        std::fs::create_dir(&dst).unwrap();
        let tar = archive(|b| {
            link(b, "out/s", s(&host));
            hard(b, "out/h", "out/s");
            file(b, "out/h/PWNED", b"x", 0o644);
        });
        let e = unpack(s(&dst), &tar[..], Modes { exact: false }).unwrap_err();
        assert_eq!(e.kind, Kind::Invalid, "{e:?}");
        assert!(e.message.contains("not a regular file it wrote"), "{e:?}");
        assert!(
            std::fs::read_dir(&host).unwrap().next().is_none(),
            "nothing on the host"
        );
        // A hard link to a file the archive wrote is fine; to one it did
        // not, or to something already there, is not.
        let ok = archive(|b| {
            file(b, "a", b"x", 0o644);
            hard(b, "b", "a");
        });
        let dst2 = t.path().join("dst2");
        std::fs::create_dir(&dst2).unwrap();
        unpack(s(&dst2), &ok[..], EXACT).unwrap();
        assert_eq!(std::fs::read(dst2.join("b")).unwrap(), b"x");
        let bad = archive(|b| hard(b, "c", "a"));
        assert!(
            unpack(s(&dst2), &bad[..], EXACT).is_err(),
            "a is not this archive's"
        );
    }

    #[test]
    fn nothing_below_the_destination_is_followed_whoever_made_it() {
        let t = tempfile::tempdir().unwrap();
        let host = t.path().join("host");
        std::fs::create_dir(&host).unwrap();
        let dst = t.path().join("dst");
        std::fs::create_dir(&dst).unwrap();
        std::os::unix::fs::symlink(&host, dst.join("d")).unwrap();
        let before = mode_of(&host);
        let tar = archive(|b| file(b, "d/x", b"x", 0o644));
        let e = unpack(s(&dst), &tar[..], EXACT).unwrap_err();
        assert_eq!(e.kind, Kind::Invalid, "{e:?}");
        assert!(!host.join("x").exists());
        // A directory entry over it does not follow it either.
        let tar = archive(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o777);
            h.set_size(0);
            b.append_data(&mut h, "d/", &b""[..]).unwrap();
        });
        assert!(unpack(s(&dst), &tar[..], EXACT).is_err());
        assert_eq!(
            mode_of(&host),
            before,
            "the host directory's mode is untouched"
        );
    }

    #[test]
    fn a_file_is_archived_at_the_length_it_had_when_opened() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        let file = File::open(&f).unwrap();
        // It grows after the open: only the first 5 bytes are taken.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&f)
            .unwrap()
            .write_all(&[b'X'; 4096])
            .unwrap();
        let mut e = Exactly {
            inner: file.take(5),
            left: 5,
        };
        let mut got = Vec::new();
        e.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"12345");
        // It shrinks: zeros to the length the header says.
        std::fs::write(&f, b"12").unwrap();
        let mut e = Exactly {
            inner: File::open(&f).unwrap().take(5),
            left: 5,
        };
        let mut got = Vec::new();
        e.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"12\0\0\0");
    }
}
