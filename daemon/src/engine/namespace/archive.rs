//! Box archives of the namespace engine (`ExportBox`, `ImportBox`).
//!
//! An archive is a gzip-compressed tar: first `boxd-box.json` ([`Manifest`]:
//! the format, the spec without any secret's value, the image's reference
//! and digest, and how the files are kept), then the box's own files under
//! `files/` (an overlay's upper directory, or a full copy of the root).
//! Owners are the box's own ids (box root is 0), so an archive moves
//! between a root-run and an unprivileged boxd, or between hosts whose id
//! ranges differ. Whiteouts (character devices 0:0) travel as such; overlay
//! attributes travel as `BOXD.xattr.overlay.*` PAX records, whatever the
//! exporting daemon called them (`trusted.overlay.*` as root,
//! `user.overlay.*` unprivileged), and other `user.*` attributes as
//! `BOXD.xattr.user.*`.
//!
//! Invariants:
//! - export walks the box's files by descriptor, never following a symlink
//!   (a running box may swap a directory for a link to a host path
//!   mid-walk); it writes a temporary file beside the target and renames
//!   it into place only if nothing is there;
//! - import takes hostile bytes: every entry resolves beneath the new
//!   box's directory with no symlink on the way ([`open_dir_beneath`]);
//!   nothing is overwritten, hard links join only entries already
//!   unpacked there, the only devices are whiteouts, owners are mapped into
//!   this daemon's range, and the bytes unpacked (plus 512 per entry)
//!   count against `max-image-size`.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FchmodatFlags, Mode, SFlag, UtimensatFlags, fchmodat, fstatat, utimensat};
use nix::sys::time::TimeSpec;
use serde::{Deserialize, Serialize};

use super::NamespaceEngine;
use super::snapshots::Layout;
use crate::engine::Created;
use crate::engine::box_archive::{self, FORMAT, MANIFEST, bad, secret_free};
use crate::error::{Error, Result};
use crate::image::Owners;
use crate::image::files::{Refused, open_dir_beneath, open_followed};
use crate::registry::{BoxRecord, BoxSpec};

const FILES: &str = "files";
/// PAX record prefix of an extended attribute (overlay ones named
/// `overlay.*`, without the exporting daemon's namespace).
const XATTR: &str = "BOXD.xattr.";
/// Deeper directories than this are refused (each level holds a descriptor).
const MAX_DEPTH: usize = 512;

/// `boxd-box.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The engine that wrote it: "namespace".
    pub engine: String,
    pub layout: Layout,
    /// The box's spec; every secret's value is empty.
    pub spec: BoxSpec,
    /// The manifest digest of the image the box was made from.
    pub image_digest: String,
}

impl Manifest {
    pub fn new(record: &BoxRecord, layout: Layout) -> Manifest {
        Manifest {
            format: FORMAT,
            engine: "namespace".into(),
            layout,
            spec: secret_free(&record.spec),
            image_digest: record.image_digest.clone(),
        }
    }
}

/// How this daemon names overlay attributes (see `boot.rs`: `userxattr`
/// when unprivileged).
fn overlay_prefix(privileged: bool) -> &'static str {
    if privileged {
        "trusted.overlay."
    } else {
        "user.overlay."
    }
}

/// Opens an archive a client named (a regular file, symlinks followed).
fn open_archive(path: &Path) -> Result<tar::Archive<flate2::read::GzDecoder<File>>> {
    let (file, _) = open_followed(path).map_err(|r| match r {
        Refused::Missing => Error::NotFound(format!("{} does not exist", path.display())),
        Refused::NotRegular(what) => {
            Error::InvalidArgument(format!("{} is {what}, not a box archive", path.display()))
        }
        Refused::Io(e) => Error::io(format!("open {}", path.display()), e),
    })?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    archive.set_ignore_zeros(false);
    Ok(archive)
}

/// Reads the manifest, the archive's first entry.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let mut archive = open_archive(path)?;
    let mut entries = archive.entries().map_err(bad)?;
    manifest_of(&mut entries)
}

fn manifest_of<R: Read>(entries: &mut tar::Entries<'_, R>) -> Result<Manifest> {
    box_archive::manifest(entries, "namespace")
}

// ---------------------------------------------------------------- export

/// Host ids → the box's own (box root 0); ids outside the range are the
/// range's `nobody`.
fn to_box(owners: Owners, uid: u32, gid: u32) -> (u64, u64) {
    const NOBODY: u64 = 65_534;
    match owners {
        Owners::Shift {
            uid: bu,
            gid: bg,
            count,
        } => {
            let one = |id: u32, base: u32| {
                id.checked_sub(base)
                    .filter(|d| *d < count)
                    .map_or(NOBODY, u64::from)
            };
            (one(uid, bu), one(gid, bg))
        }
        // One id: the daemon's files are box root's.
        Owners::Flatten => {
            let own = |id: u32, mine: u32| if id == mine { 0 } else { NOBODY };
            (
                own(uid, nix::unistd::getuid().as_raw()),
                own(gid, nix::unistd::getgid().as_raw()),
            )
        }
        Owners::Keep => (uid.into(), gid.into()),
    }
}

/// A reader of exactly `len` bytes: a file that shrank while it was read
/// is padded with zeros, one that grew is cut (the tar header said `len`).
struct Exact<R> {
    inner: io::Take<R>,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        let n = if n == 0 {
            let n = buf.len().min(self.left as usize);
            buf[..n].fill(0);
            n
        } else {
            n
        };
        self.left -= n as u64;
        Ok(n)
    }
}

/// The extended attributes to carry of the file `fd` (an `O_PATH` or open
/// descriptor), as PAX records.
fn xattrs_of(fd: &OwnedFd, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL");
    let mut names = vec![0u8; 64 * 1024];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::listxattr(path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
    {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let key = if let Some(rest) = name.strip_prefix(prefix) {
            format!("{XATTR}overlay.{rest}")
        } else if name.starts_with("user.") && !name.starts_with("user.overlay.") {
            format!("{XATTR}{name}")
        } else {
            continue;
        };
        let cname = CString::new(name).expect("no NUL");
        let mut value = vec![0u8; 64 * 1024];
        // SAFETY: valid C strings and buffer.
        let len = unsafe {
            libc::getxattr(
                path.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        if len >= 0 {
            value.truncate(len as usize);
            out.push((key, value));
        }
    }
    out
}

/// Writes the tar of `root` (the box's files) under `files/`.
struct Exporter<W: Write> {
    tar: tar::Builder<W>,
    owners: Owners,
    prefix: &'static str,
    /// (dev, inode) of files with more than one link → their first path.
    links: HashMap<(u64, u64), PathBuf>,
}

impl<W: Write> Exporter<W> {
    fn header(&self, st: &libc::stat, kind: tar::EntryType) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(st.st_mode & 0o7777);
        let (uid, gid) = to_box(self.owners, st.st_uid, st.st_gid);
        h.set_uid(uid);
        h.set_gid(gid);
        h.set_mtime(st.st_mtime.max(0) as u64);
        h.set_size(0);
        h
    }

    /// One entry (`name` in the directory `dir`), and everything under it.
    fn entry(&mut self, dir: &OwnedFd, name: &OsStr, rel: &Path, depth: usize) -> io::Result<()> {
        let st = match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed by the running box meanwhile.
            Err(nix::errno::Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let path = Path::new(FILES).join(rel);
        let fmt = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        if fmt == SFlag::S_IFLNK {
            let target = nix::fcntl::readlinkat(dir.as_fd(), name)?;
            let mut h = self.header(&st, tar::EntryType::Symlink);
            return self.tar.append_link(&mut h, &path, target);
        }
        if fmt == SFlag::S_IFSOCK {
            return Ok(());
        }
        let flags = match fmt {
            SFlag::S_IFDIR => OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            SFlag::S_IFREG => OFlag::O_RDONLY | OFlag::O_NONBLOCK,
            _ => OFlag::O_PATH,
        } | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC
            | OFlag::O_NOCTTY;
        let fd = openat(dir.as_fd(), name, flags, Mode::empty())?;
        let st = nix::sys::stat::fstat(&fd)?;
        if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != fmt {
            return Ok(()); // swapped for something else meanwhile
        }
        let pax = xattrs_of(&fd, self.prefix);
        if !pax.is_empty() {
            self.tar
                .append_pax_extensions(pax.iter().map(|(k, v)| (k.as_str(), v.as_slice())))?;
        }
        match fmt {
            SFlag::S_IFDIR => {
                if depth > MAX_DEPTH {
                    return Err(io::Error::other(format!(
                        "{} is more than {MAX_DEPTH} directories deep",
                        rel.display()
                    )));
                }
                let mut h = self.header(&st, tar::EntryType::Directory);
                self.tar.append_data(&mut h, &path, io::empty())?;
                let listing = format!("/proc/self/fd/{}", fd.as_raw_fd());
                let mut names: Vec<OsString> = std::fs::read_dir(listing)?
                    .map(|e| e.map(|e| e.file_name()))
                    .collect::<io::Result<_>>()?;
                names.sort();
                for n in names {
                    self.entry(&fd, &n, &rel.join(&n), depth + 1)?;
                }
                Ok(())
            }
            SFlag::S_IFREG => {
                if st.st_nlink > 1 {
                    let key = (st.st_dev, st.st_ino);
                    if let Some(first) = self.links.get(&key) {
                        let mut h = self.header(&st, tar::EntryType::Link);
                        return self.tar.append_link(&mut h, &path, first);
                    }
                    self.links.insert(key, path.clone());
                }
                let mut h = self.header(&st, tar::EntryType::Regular);
                let len = st.st_size.max(0) as u64;
                h.set_size(len);
                let file = File::from(fd);
                let data = Exact {
                    inner: file.take(len),
                    left: len,
                };
                self.tar.append_data(&mut h, &path, data)
            }
            SFlag::S_IFCHR | SFlag::S_IFBLK | SFlag::S_IFIFO => {
                let kind = match fmt {
                    SFlag::S_IFCHR => tar::EntryType::Char,
                    SFlag::S_IFBLK => tar::EntryType::Block,
                    _ => tar::EntryType::Fifo,
                };
                let mut h = self.header(&st, kind);
                h.set_device_major(libc::major(st.st_rdev))?;
                h.set_device_minor(libc::minor(st.st_rdev))?;
                self.tar.append_data(&mut h, &path, io::empty())
            }
            _ => Ok(()),
        }
    }
}

/// Writes the archive of `files` (the box's upper directory or root copy)
/// to `out`.
fn write_archive(
    out: File,
    manifest: &Manifest,
    files: &Path,
    owners: Owners,
    privileged: bool,
) -> Result<File> {
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    let mut ex = Exporter {
        tar: tar::Builder::new(gz),
        owners,
        prefix: overlay_prefix(privileged),
        links: HashMap::new(),
    };
    let text = serde_json::to_vec_pretty(manifest).map_err(|e| Error::Internal(e.to_string()))?;
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o600);
    h.set_size(text.len() as u64);
    h.set_mtime((crate::registry::now_ms() / 1000).max(0) as u64);
    let io_err = |e: io::Error| Error::io("write the box archive", e);
    ex.tar
        .append_data(&mut h, MANIFEST, text.as_slice())
        .map_err(io_err)?;
    let parent = files.parent().unwrap_or(Path::new("/"));
    let dir: OwnedFd = nix::fcntl::open(
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io(format!("open {}", parent.display()), e.into()))?;
    let name = files.file_name().unwrap_or_default();
    ex.entry(&dir, name, Path::new(""), 0).map_err(io_err)?;
    let gz = ex.tar.into_inner().map_err(io_err)?;
    let file = gz.finish().map_err(io_err)?;
    file.sync_all().map_err(io_err)?;
    Ok(file)
}

// ---------------------------------------------------------------- import

/// Unpacks archive entries beneath `root` (see the module's invariants).
struct Importer {
    root: File,
    owners: Owners,
    prefix: &'static str,
    max: u64,
    total: u64,
    cancel: tokio_util::sync::CancellationToken,
    /// Directories' times, set last (entries written into them change them).
    dir_times: Vec<(PathBuf, u64)>,
}

/// An archive path under `files/` as a plain relative path (empty: the
/// root); anything else is refused.
fn plain(bytes: &[u8]) -> Result<PathBuf> {
    let path = Path::new(OsStr::from_bytes(bytes));
    let mut parts = path.components();
    if parts.next() != Some(Component::Normal(OsStr::new(FILES))) {
        return Err(bad(format!(
            "entry {:?} is outside {FILES}/",
            String::from_utf8_lossy(bytes)
        )));
    }
    let mut out = PathBuf::new();
    for c in parts {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => {
                return Err(bad(format!(
                    "entry {:?} leaves the box's directory",
                    String::from_utf8_lossy(bytes)
                )));
            }
        }
    }
    Ok(out)
}

fn refused(rel: &Path, r: Refused) -> Error {
    match r {
        Refused::Io(e) => Error::io(format!("unpack {}", rel.display()), e),
        Refused::Missing => bad(format!("{} comes before its directory", rel.display())),
        Refused::NotRegular(what) => bad(format!("{} lies {what}", rel.display())),
    }
}

impl Importer {
    fn parent_of(&self, rel: &Path) -> Result<(File, OsString)> {
        let name = rel
            .file_name()
            .ok_or_else(|| bad("an entry has no name"))?
            .to_owned();
        let parent = rel.parent().unwrap_or(Path::new(""));
        let dir = open_dir_beneath(&self.root, parent).map_err(|r| refused(rel, r))?;
        Ok((dir, name))
    }

    fn entry<R: Read>(&mut self, mut e: tar::Entry<'_, R>) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::FailedPrecondition("boxd is stopping".into()));
        }
        let rel = plain(&e.path_bytes())?;
        let size = e.size();
        self.total = self.total.saturating_add(size).saturating_add(512);
        if self.max > 0 && self.total > self.max {
            return Err(Error::ResourceExhausted(format!(
                "the box archive unpacks to more than max-image-size ({} bytes)",
                self.max
            )));
        }
        let h = e.header().clone();
        let kind = h.entry_type();
        let io_err = |e: io::Error| Error::io(format!("unpack {}", rel.display()), e);
        let nix_err = |e: nix::errno::Errno| io_err(e.into());
        let xattrs: Vec<(String, Vec<u8>)> = match e.pax_extensions().map_err(bad)? {
            Some(pax) => pax
                .flatten()
                .filter_map(|p| Some((p.key().ok()?.to_owned(), p.value_bytes().to_vec())))
                .collect(),
            None => Vec::new(),
        };
        if rel.as_os_str().is_empty() {
            if !kind.is_dir() {
                return Err(bad(format!("{FILES} is not a directory")));
            }
            let root = self.root.try_clone().map_err(io_err)?;
            return self.finish(&root, OsStr::new("."), &rel, &h, &xattrs, true);
        }
        let (dir, name) = self.parent_of(&rel)?;
        let mode = Mode::from_bits_truncate(0o600);
        match kind {
            tar::EntryType::Directory => {
                match nix::sys::stat::mkdirat(dir.as_fd(), name.as_os_str(), Mode::S_IRWXU) {
                    Ok(()) => {}
                    Err(nix::errno::Errno::EEXIST) => {
                        let st =
                            fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                                .map_err(nix_err)?;
                        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                            return Err(bad(format!("{} appears twice", rel.display())));
                        }
                    }
                    Err(e) => return Err(nix_err(e)),
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let fd = openat(
                    dir.as_fd(),
                    name.as_os_str(),
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    mode,
                )
                .map_err(|e| match e {
                    nix::errno::Errno::EEXIST => bad(format!("{} appears twice", rel.display())),
                    e => nix_err(e),
                })?;
                let mut file = File::from(fd);
                io::copy(&mut (&mut e).take(size), &mut file).map_err(io_err)?;
            }
            tar::EntryType::Symlink => {
                let target = e
                    .link_name_bytes()
                    .ok_or_else(|| bad(format!("symlink {} has no target", rel.display())))?;
                nix::unistd::symlinkat(OsStr::from_bytes(&target), dir.as_fd(), name.as_os_str())
                    .map_err(|e| match e {
                    nix::errno::Errno::EEXIST => bad(format!("{} appears twice", rel.display())),
                    e => nix_err(e),
                })?;
            }
            tar::EntryType::Link => {
                let target = e
                    .link_name_bytes()
                    .ok_or_else(|| bad(format!("hard link {} has no target", rel.display())))?;
                let from = plain(&target)?;
                let (from_dir, from_name) = self.parent_of(&from)?;
                let st = fstatat(
                    from_dir.as_fd(),
                    from_name.as_os_str(),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(|_| {
                    bad(format!(
                        "hard link {} names no earlier entry",
                        rel.display()
                    ))
                })?;
                if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                    return Err(bad(format!(
                        "hard link {} names a directory",
                        rel.display()
                    )));
                }
                nix::unistd::linkat(
                    from_dir.as_fd(),
                    from_name.as_os_str(),
                    dir.as_fd(),
                    name.as_os_str(),
                    AtFlags::empty(),
                )
                .map_err(nix_err)?;
                // A link shares its first entry's owner, mode and times.
                return Ok(());
            }
            tar::EntryType::Char | tar::EntryType::Fifo => {
                let (major, minor) = (
                    h.device_major().ok().flatten().unwrap_or(0),
                    h.device_minor().ok().flatten().unwrap_or(0),
                );
                let sflag = if kind == tar::EntryType::Char {
                    if (major, minor) != (0, 0) {
                        return Err(bad(format!(
                            "{} is a device ({major}:{minor}); only whiteouts (0:0) may be in a box archive",
                            rel.display()
                        )));
                    }
                    SFlag::S_IFCHR
                } else {
                    SFlag::S_IFIFO
                };
                nix::sys::stat::mknodat(dir.as_fd(), name.as_os_str(), sflag, mode, 0)
                    .map_err(nix_err)?;
            }
            other => {
                return Err(bad(format!(
                    "{} is of a kind a box archive does not hold ({other:?})",
                    rel.display()
                )));
            }
        }
        self.finish(&dir, &name, &rel, &h, &xattrs, kind.is_dir())
    }

    /// Owner, mode, attributes and time of a just-made entry.
    fn finish(
        &mut self,
        dir: &File,
        name: &OsStr,
        rel: &Path,
        h: &tar::Header,
        xattrs: &[(String, Vec<u8>)],
        is_dir: bool,
    ) -> Result<()> {
        let nix_err =
            |e: nix::errno::Errno| Error::io(format!("unpack {}", rel.display()), e.into());
        let symlink = h.entry_type() == tar::EntryType::Symlink;
        let (uid, gid) = (
            h.uid().ok().and_then(|v| u32::try_from(v).ok()),
            h.gid().ok().and_then(|v| u32::try_from(v).ok()),
        );
        let host = match self.owners {
            Owners::Shift {
                uid: bu,
                gid: bg,
                count,
            } => {
                let one =
                    |id: Option<u32>, base: u32| base + id.filter(|i| *i < count).unwrap_or(65_534);
                Some((one(uid, bu), one(gid, bg)))
            }
            Owners::Keep => Some((uid.unwrap_or(65_534), gid.unwrap_or(65_534))),
            Owners::Flatten => None,
        };
        if let Some((u, g)) = host {
            nix::unistd::fchownat(
                dir.as_fd(),
                name,
                Some(nix::unistd::Uid::from_raw(u)),
                Some(nix::unistd::Gid::from_raw(g)),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(nix_err)?;
        }
        if !symlink {
            let mut mode = h.mode().unwrap_or(0o644) & 0o7777;
            if self.owners.flattened() && is_dir {
                mode |= 0o700; // the daemon must still write it
            }
            fchmodat(
                dir.as_fd(),
                name,
                Mode::from_bits_truncate(mode),
                FchmodatFlags::FollowSymlink,
            )
            .map_err(nix_err)?;
            let at = format!("/proc/self/fd/{}/", dir.as_raw_fd());
            let path = CString::new([at.as_bytes(), name.as_bytes()].concat())
                .map_err(|_| bad("a NUL in a name"))?;
            for (key, value) in xattrs {
                let Some(attr) = key.strip_prefix(XATTR) else {
                    continue;
                };
                let attr = match attr.strip_prefix("overlay.") {
                    Some(rest) => format!("{}{rest}", self.prefix),
                    None if attr.starts_with("user.") => attr.to_owned(),
                    None => continue,
                };
                let cattr = CString::new(attr.clone()).map_err(|_| bad("a NUL in an attribute"))?;
                // SAFETY: valid C strings and buffer.
                let r = unsafe {
                    libc::lsetxattr(
                        path.as_ptr(),
                        cattr.as_ptr(),
                        value.as_ptr().cast(),
                        value.len(),
                        0,
                    )
                };
                if r != 0 {
                    return Err(Error::io(
                        format!("set {attr} on {}", rel.display()),
                        io::Error::last_os_error(),
                    ));
                }
            }
        }
        let mtime = h.mtime().unwrap_or(0);
        if is_dir {
            self.dir_times.push((rel.to_path_buf(), mtime));
        } else {
            let t = TimeSpec::new(mtime.min(i64::MAX as u64) as i64, 0);
            utimensat(dir.as_fd(), name, &t, &t, UtimensatFlags::NoFollowSymlink)
                .map_err(nix_err)?;
        }
        Ok(())
    }

    fn set_dir_times(&self) {
        for (rel, mtime) in self.dir_times.iter().rev() {
            let t = TimeSpec::new((*mtime).min(i64::MAX as u64) as i64, 0);
            if let Ok(d) = open_dir_beneath(&self.root, rel) {
                let _ = nix::sys::stat::futimens(&d, &t, &t);
            }
        }
    }
}

/// Unpacks the files of the archive at `path` into `dest` (which must not
/// exist); on failure the caller removes `dest`.
fn unpack(
    path: &Path,
    dest: &Path,
    owners: Owners,
    privileged: bool,
    limits: &crate::image::ImageLimits,
) -> Result<Manifest> {
    let mut archive = open_archive(path)?;
    let mut entries = archive.entries().map_err(bad)?;
    let manifest = manifest_of(&mut entries)?;
    std::fs::create_dir(dest).map_err(|e| Error::io(format!("create {}", dest.display()), e))?;
    let root = File::open(dest).map_err(|e| Error::io(format!("open {}", dest.display()), e))?;
    let mut im = Importer {
        root,
        owners,
        prefix: overlay_prefix(privileged),
        max: limits.max_size,
        total: 0,
        cancel: limits.cancel.clone(),
        dir_times: Vec::new(),
    };
    for e in entries {
        im.entry(e.map_err(bad)?)?;
    }
    im.set_dir_times();
    Ok(manifest)
}

/// The argument that selects [`helper_main`] in `main`.
pub const HELPER_ARG: &str = "__boxarchive";
/// How the helper marks its error's kind on stderr.
const ERROR_MARK: &str = "box-archive-error:";

/// `boxd __boxarchive export FILES MANIFEST-FILE OUT` and `boxd
/// __boxarchive import ARCHIVE DEST MAX-SIZE`: the archive work of an
/// unprivileged boxd with a subordinate id range, run as box root
/// (`userns::run_as_box_root`), where the box's ids are its own
/// ([`Owners::Keep`]) and only there readable and writable. An error is
/// printed as `box-archive-error:KIND:message` and exits 1.
pub fn helper_main(args: Vec<OsString>) -> ! {
    let arg = |i: usize| args.get(i).map(PathBuf::from).unwrap_or_default();
    let result = match args.first().and_then(|a| a.to_str()) {
        Some("export") if args.len() == 4 => (|| {
            let text = std::fs::read(arg(2)).map_err(|e| Error::io("read the manifest", e))?;
            let manifest: Manifest =
                serde_json::from_slice(&text).map_err(|e| Error::Internal(e.to_string()))?;
            let out = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(arg(3))
                .map_err(|e| Error::io("open the archive", e))?;
            write_archive(out, &manifest, &arg(1), Owners::Keep, false).map(drop)
        })(),
        Some("import") if args.len() == 4 => (|| {
            let max = args[3]
                .to_str()
                .and_then(|m| m.parse().ok())
                .ok_or_else(|| Error::Internal("bad helper arguments".into()))?;
            let limits = crate::image::ImageLimits {
                max_size: max,
                cancel: Default::default(),
            };
            unpack(&arg(1), &arg(2), Owners::Keep, false, &limits).map(drop)
        })(),
        _ => Err(Error::Internal("bad helper arguments".into())),
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            let kind = match e {
                Error::InvalidArgument(_) => "invalid",
                Error::ResourceExhausted(_) => "exhausted",
                Error::FailedPrecondition(_) => "precondition",
                Error::NotFound(_) => "notfound",
                _ => "other",
            };
            eprintln!("{ERROR_MARK}{kind}:{e}");
            std::process::exit(1)
        }
    }
}

/// The helper's error as the daemon's (see [`helper_main`]).
fn helper_error(e: Error) -> Error {
    let text = e.to_string();
    let Some(at) = text.find(ERROR_MARK) else {
        return e;
    };
    let rest = &text[at + ERROR_MARK.len()..];
    let (kind, message) = rest.split_once(':').unwrap_or(("other", rest));
    let message = message.trim().to_owned();
    match kind {
        "invalid" => Error::InvalidArgument(message),
        "exhausted" => Error::ResourceExhausted(message),
        "precondition" => Error::FailedPrecondition(message),
        "notfound" => Error::NotFound(message),
        _ => Error::Engine(message),
    }
}

impl NamespaceEngine {
    /// How box-relative ids map to this daemon's, for archives
    /// ([`Owners::Keep`]: the work runs as box root, see [`helper_main`]).
    fn archive_owners(&self) -> Result<Owners> {
        Ok(super::ownership(&self.ids, self.privileged).owners)
    }

    /// Runs [`helper_main`] as box root with `args`.
    async fn archive_helper(&self, args: Vec<OsString>) -> Result<()> {
        let exe = std::env::current_exe().map_err(|e| Error::io("find the boxd binary", e))?;
        let argv: Vec<OsString> = [exe.into_os_string(), HELPER_ARG.into()]
            .into_iter()
            .chain(args)
            .collect();
        super::userns::run_as_box_root(&self.ids, &argv)
            .await
            .map(drop)
            .map_err(helper_error)
    }

    pub(super) async fn export_impl(&self, record: &BoxRecord, path: &Path) -> Result<u64> {
        let owners = self.archive_owners()?;
        let (layout, files) = Layout::of(record)?;
        if layout == Layout::Disk {
            return Err(Error::Unimplemented(format!(
                "box {:?} keeps its files on a disk of its own, which cannot be exported yet; snapshots and clones work",
                record.name
            )));
        }
        let manifest = Manifest::new(record, layout);
        let parent = path
            .parent()
            .filter(|p| p.is_dir())
            .ok_or_else(|| {
                Error::InvalidArgument(format!("{}: its directory does not exist", path.display()))
            })?
            .to_path_buf();
        if path.symlink_metadata().is_ok() {
            return Err(Error::AlreadyExists(format!("{} exists", path.display())));
        }
        let tmp = tempfile::Builder::new()
            .prefix(".boxd-export-")
            .tempfile_in(&parent)
            .map_err(|e| Error::io(format!("create a file in {}", parent.display()), e))?;
        if owners == Owners::Keep {
            let text = serde_json::to_vec(&manifest).map_err(|e| Error::Internal(e.to_string()))?;
            let at = record.dir.join(".export-manifest.json");
            std::fs::write(&at, text).map_err(|e| Error::io("write the manifest", e))?;
            let written = self
                .archive_helper(vec![
                    "export".into(),
                    files.clone().into(),
                    at.clone().into(),
                    tmp.path().into(),
                ])
                .await;
            let _ = std::fs::remove_file(&at);
            written?;
        }
        let (privileged, target) = (self.privileged, path.to_path_buf());
        tokio::task::spawn_blocking(move || {
            let file = tmp
                .as_file()
                .try_clone()
                .map_err(|e| Error::io("open the archive", e))?;
            let file = if owners == Owners::Keep {
                file // written by the helper
            } else {
                write_archive(file, &manifest, &files, owners, privileged)?
            };
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            // Only if nothing appeared there meanwhile.
            nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                tmp.path(),
                nix::fcntl::AT_FDCWD,
                &target,
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            )
            .map_err(|e| match e {
                nix::errno::Errno::EEXIST => {
                    Error::AlreadyExists(format!("{} exists", target.display()))
                }
                e => Error::io(format!("write {}", target.display()), e.into()),
            })?;
            // Renamed away: nothing for the temporary file's drop to remove.
            let _ = tmp.into_temp_path().keep();
            Ok(size)
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
    }

    pub(super) async fn import_impl(&self, path: &Path, target: &BoxRecord) -> Result<Created> {
        let owners = self.archive_owners()?;
        let manifest = read_manifest(path)?;
        if manifest.layout == Layout::Overlay && self.copies.is_some() {
            return Err(Error::FailedPrecondition(
                "the archive holds an overlay box's writes, and overlays cannot be mounted here"
                    .into(),
            ));
        }
        let image = self.images.for_create(&target.spec.image).await?;
        let mut warnings = Vec::new();
        if image.digest != manifest.image_digest {
            warnings.push(format!(
                "the image {} is {} here, but the box was exported from {}: files the box did not write come from the image as it is here",
                target.spec.image, image.digest, manifest.image_digest
            ));
        }
        let dest = target.dir.join(manifest.layout.file_name());
        let (src, dst, privileged, limits) = (
            path.to_path_buf(),
            dest.clone(),
            self.privileged,
            self.archive_limits.clone(),
        );
        let unpacked = if owners == Owners::Keep {
            self.archive_helper(vec![
                "import".into(),
                src.into(),
                dst.into(),
                limits.max_size.to_string().into(),
            ])
            .await
        } else {
            tokio::task::spawn_blocking(move || {
                unpack(&src, &dst, owners, privileged, &limits).map(drop)
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))
            .and_then(|r| r)
        };
        let made = async {
            unpacked?;
            if manifest.layout == Layout::Overlay {
                self.make_work(target)?;
            }
            let config =
                serde_json::to_vec(&image.config).map_err(|e| Error::Internal(e.to_string()))?;
            std::fs::write(super::image_config_path(target), config)
                .map_err(|e| Error::io("write image.json", e))
        }
        .await;
        if let Err(e) = made {
            let _ = self.remove_tree(&dest).await;
            let _ = self.remove_tree(&super::work(target)).await;
            return Err(e);
        }
        Ok(Created {
            image_digest: image.digest,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn archive_paths_stay_under_files() {
        assert_eq!(plain(b"files").unwrap(), PathBuf::new());
        assert_eq!(plain(b"files/./a/b").unwrap(), PathBuf::from("a/b"));
        for hostile in [
            &b"/etc/passwd"[..],
            b"files/../x",
            b"files/a/../../x",
            b"other/x",
            b"../files/x",
            b"/files/x",
        ] {
            assert!(
                plain(hostile).is_err(),
                "{:?}",
                String::from_utf8_lossy(hostile)
            );
        }
    }

    /// Random archives from the parts that matter (climbing and absolute
    /// paths, symlinks then entries through them, hard links out and in,
    /// devices, FIFOs, duplicates) never panic the importer and never
    /// touch anything outside the import's directory: a canary beside it
    /// keeps its bytes and its single link.
    #[test]
    fn random_hostile_archives_stay_inside() {
        use rand::Rng;
        let outer = tempfile::tempdir().unwrap();
        let canary = outer.path().join("canary");
        std::fs::write(&canary, b"precious").unwrap();
        let canary_s = canary.to_string_lossy().into_owned();
        let names = [
            "files",
            "files/a",
            "files/a/b",
            "files/l",
            "files/l/canary",
            "files/../canary",
            "files/a/../../canary",
            canary_s.as_str(),
            "canary",
            "files/h",
        ];
        let targets = [
            "/",
            "..",
            "../..",
            canary_s.as_str(),
            "a",
            "files/a/b",
            "files/../canary",
        ];
        let manifest = serde_json::to_vec(&Manifest {
            format: FORMAT,
            engine: "namespace".into(),
            layout: Layout::Overlay,
            spec: BoxSpec::default(),
            image_digest: String::new(),
        })
        .unwrap();
        let mut rng = rand::rng();
        for run in 0..300 {
            let path = outer.path().join(format!("a{run}.tgz"));
            let gz = flate2::write::GzEncoder::new(
                File::create(&path).unwrap(),
                flate2::Compression::fast(),
            );
            let mut b = tar::Builder::new(gz);
            let mut h = tar::Header::new_gnu();
            h.set_size(manifest.len() as u64);
            b.append_data(&mut h, MANIFEST, manifest.as_slice())
                .unwrap();
            for _ in 0..rng.random_range(1..8) {
                let name = names[rng.random_range(0..names.len())].as_bytes();
                let link = targets[rng.random_range(0..targets.len())].as_bytes();
                let kind = [
                    tar::EntryType::Regular,
                    tar::EntryType::Directory,
                    tar::EntryType::Symlink,
                    tar::EntryType::Link,
                    tar::EntryType::Char,
                    tar::EntryType::Fifo,
                    tar::EntryType::Block,
                ][rng.random_range(0..7)];
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(kind);
                h.set_mode(rng.random_range(0..0o10000));
                let data: &[u8] = if kind == tar::EntryType::Regular {
                    b"evil"
                } else {
                    b""
                };
                h.set_size(data.len() as u64);
                let gnu = h.as_gnu_mut().unwrap();
                gnu.name[..name.len()].copy_from_slice(name);
                gnu.linkname[..link.len()].copy_from_slice(link);
                h.set_device_major(rng.random_range(0..2)).unwrap();
                h.set_device_minor(rng.random_range(0..4)).unwrap();
                h.set_cksum();
                b.append(&h, data).unwrap();
            }
            b.into_inner().unwrap().finish().unwrap();
            let dest = outer.path().join(format!("d{run}"));
            let limits = crate::image::ImageLimits {
                max_size: 1 << 20,
                cancel: Default::default(),
            };
            let _ = unpack(&path, &dest, Owners::Flatten, false, &limits);
            let meta = std::fs::metadata(&canary).unwrap();
            assert_eq!(std::fs::read(&canary).unwrap(), b"precious", "run {run}");
            assert_eq!(meta.nlink(), 1, "run {run}: the canary was linked");
            let mut entries: Vec<String> = std::fs::read_dir(outer.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('a') && !n.starts_with('d'))
                .collect();
            entries.sort();
            assert_eq!(entries, ["canary"], "run {run}");
        }
    }

    #[test]
    fn host_ids_become_the_boxs_own() {
        let shift = Owners::Shift {
            uid: 100_000,
            gid: 200_000,
            count: 65_536,
        };
        assert_eq!(to_box(shift, 100_000, 200_000), (0, 0));
        assert_eq!(to_box(shift, 101_234, 205_678), (1234, 5678));
        assert_eq!(
            to_box(shift, 0, 5),
            (65_534, 65_534),
            "host ids are nobody's"
        );
    }

    #[test]
    fn a_manifest_never_holds_a_secret_value() {
        let mut record = BoxRecord {
            id: "x".into(),
            name: "b".into(),
            spec: BoxSpec::default(),
            image_digest: "sha256:1".into(),
            created_at_ms: 0,
            started_at_ms: 0,
            state: crate::registry::State::Created,
            error: String::new(),
            dir: PathBuf::new(),
        };
        record.spec.secrets.push(crate::egress::Secret {
            name: "TOKEN".into(),
            hosts: vec!["example.com".into()],
            placeholder: "PH".into(),
            value: "hunter2".into(),
        });
        let text = serde_json::to_string(&Manifest::new(&record, Layout::Overlay)).unwrap();
        assert!(!text.contains("hunter2"));
        assert!(text.contains("TOKEN"));
    }
}
