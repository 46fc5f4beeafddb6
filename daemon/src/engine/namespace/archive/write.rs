//! Writing a box archive: the box's files walked by descriptor, never
//! following a symlink, with box-relative owners.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstatat};

use super::*;
use crate::error::{Error, Result};
use crate::image::Owners;

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
pub(super) fn write_archive(
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
    h.set_mtime((crate::model::now_ms() / 1000).max(0) as u64);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
