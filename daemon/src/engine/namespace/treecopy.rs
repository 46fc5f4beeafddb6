//! Copying a box's own files (its overlay's upper directory, or its full
//! copy) for a snapshot or a clone, by descriptor.
//!
//! The box may be running while it is copied, and it owns every name in
//! that tree: it can swap a directory for a symlink to any host path at any
//! moment. A copier that walks by path with more privilege than the box
//! (host root, or the user) would read the host's files through such a
//! swap. This one opens every entry relative to its parent's descriptor
//! with `O_NOFOLLOW`, so a symlink is only ever copied as a symlink, and
//! an entry swapped between its `fstatat` and its open is left out rather
//! than followed.
//!
//! What is kept: the tree, owners, modes, times, hard links within it,
//! symlinks, FIFOs and device nodes (overlay whiteouts are `0:0` character
//! devices), and extended attributes of files and directories (overlay's
//! `trusted.overlay.*` or `user.overlay.*`); data is shared where the file
//! system can clone it (`FICLONE`), else copied by `copy_file_range`, its
//! holes kept.
//!
//! Invariants: nothing outside `src` is ever opened or read (no symlink
//! followed, no `..`); nothing outside `dst` is ever written (`dst` is
//! made here, and every entry beneath it is made relative to its parent's
//! descriptor); the copy of a running box is of each file as it was when
//! it was opened.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use boxd_fs::archive::{DIR, READ};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat};

/// The argument that selects [`helper_main`] (a copy made as box root).
pub const HELPER_ARG: &str = "__treecopy";

/// `boxd __treecopy SRC DST`, run as box root for an unprivileged boxd
/// (`userns::run_as_box_root`).
pub fn helper_main(args: Vec<OsString>) -> ! {
    let copied = match args.as_slice() {
        [src, dst] => Some(copy_tree(Path::new(src), Path::new(dst))),
        [src, dst, swap] => swap
            .to_str()
            .and_then(Swap::parse)
            .map(|swap| copy_tree_swapping(Path::new(src), Path::new(dst), swap)),
        _ => None,
    };
    match copied {
        Some(copied) => match copied {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("boxd tree copy: {e}");
                std::process::exit(1)
            }
        },
        None => {
            eprintln!("boxd tree copy: bad arguments");
            std::process::exit(2)
        }
    }
}

/// Two box ids a copy exchanges, as uids and as gids (keep-id's copy of an
/// image for a user-run boxd: the host user becomes box user N, so what
/// was box root's on disk must be N's and N's box root's for the box to
/// see its image as it is). The default exchanges nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swap {
    pub uids: (u32, u32),
    pub gids: (u32, u32),
}

impl Swap {
    /// Box root and `uid`:`gid`.
    pub fn root_and(uid: u32, gid: u32) -> Swap {
        Swap {
            uids: (0, uid),
            gids: (0, gid),
        }
    }

    /// `A:B:C:D` ([`Swap::arg`]).
    fn parse(word: &str) -> Option<Swap> {
        let n: Vec<u32> = word
            .split(':')
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?;
        match n[..] {
            [a, b, c, d] => Some(Swap {
                uids: (a, b),
                gids: (c, d),
            }),
            _ => None,
        }
    }

    /// The helper's argument.
    pub fn arg(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.uids.0, self.uids.1, self.gids.0, self.gids.1
        )
    }

    fn one(pair: (u32, u32), id: u32) -> u32 {
        match id {
            i if i == pair.0 => pair.1,
            i if i == pair.1 => pair.0,
            i => i,
        }
    }

    fn owner(&self, st: &FileStat) -> (u32, u32) {
        (
            Self::one(self.uids, st.st_uid),
            Self::one(self.gids, st.st_gid),
        )
    }
}

/// Copies the directory (or the one file: a stopped box's disk) `src` to
/// `dst`, which must not exist.
pub fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    copy_tree_swapping(src, dst, Swap::default())
}

/// [`copy_tree`], every owner exchanged as `swap` says.
pub fn copy_tree_swapping(src: &Path, dst: &Path, swap: Swap) -> io::Result<()> {
    if std::fs::symlink_metadata(src)?.is_file() {
        let from =
            File::from(nix::fcntl::open(src, READ, Mode::empty()).map_err(|e| with(src, e))?);
        let to = File::from(
            nix::fcntl::open(
                dst,
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            )
            .map_err(|e| with(dst, e))?,
        );
        data(&from, &to, from.metadata()?.len())?;
        let st = nix::sys::stat::fstat(from.as_fd()).map_err(io::Error::from)?;
        return meta(&from, &to, &st, swap);
    }
    let s = nix::fcntl::open(src, DIR, Mode::empty()).map_err(|e| with(src, e))?;
    nix::unistd::mkdir(dst, Mode::from_bits_truncate(0o700)).map_err(|e| with(dst, e))?;
    let d = nix::fcntl::open(dst, DIR, Mode::empty()).map_err(|e| with(dst, e))?;
    let mut copier = Copier {
        swap,
        dst_root: d.try_clone()?,
        links: HashMap::new(),
    };
    copier.dir(&s, &d, PathBuf::new())?;
    let st = nix::sys::stat::fstat(s.as_fd()).map_err(io::Error::from)?;
    meta(&s, &d, &st, swap)
}

fn with(path: &Path, e: Errno) -> io::Error {
    io::Error::new(
        io::Error::from(e).kind(),
        format!("{}: {e}", path.display()),
    )
}

struct Copier {
    swap: Swap,
    dst_root: OwnedFd,
    /// Files with more than one link seen so far: where their first copy is.
    links: HashMap<(u64, u64), PathBuf>,
}

impl Copier {
    /// The entries of the open directory `s` into the open directory `d`
    /// (`rel`: `d`'s path below the copy's root).
    fn dir(&mut self, s: &OwnedFd, d: &OwnedFd, rel: PathBuf) -> io::Result<()> {
        let mut names: Vec<OsString> = Vec::new();
        for entry in nix::dir::Dir::from_fd(s.try_clone()?).map_err(io::Error::from)? {
            let entry = entry.map_err(io::Error::from)?;
            let n = entry.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(OsStr::from_bytes(n).to_owned());
            }
        }
        for name in names {
            let c = CString::new(name.as_bytes()).expect("a directory entry has no NUL");
            let Ok(st) = fstatat(s.as_fd(), c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue; // gone meanwhile
            };
            let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
            let here = rel.join(&name);
            match kind {
                SFlag::S_IFDIR => {
                    // Swapped for something else since the stat: left out.
                    let Ok(sub) = openat(s.as_fd(), c.as_c_str(), DIR, Mode::empty()) else {
                        continue;
                    };
                    nix::sys::stat::mkdirat(
                        d.as_fd(),
                        c.as_c_str(),
                        Mode::from_bits_truncate(0o700),
                    )
                    .map_err(io::Error::from)?;
                    let dsub = openat(d.as_fd(), c.as_c_str(), DIR, Mode::empty())
                        .map_err(io::Error::from)?;
                    self.dir(&sub, &dsub, here)?;
                    let st = nix::sys::stat::fstat(sub.as_fd()).map_err(io::Error::from)?;
                    meta(&sub, &dsub, &st, self.swap)?;
                }
                SFlag::S_IFREG => self.file(s, d, &c, here)?,
                SFlag::S_IFLNK => {
                    let Ok(target) = nix::fcntl::readlinkat(s.as_fd(), c.as_c_str()) else {
                        continue;
                    };
                    nix::unistd::symlinkat(target.as_os_str(), d.as_fd(), c.as_c_str())
                        .map_err(io::Error::from)?;
                    entry_meta(d.as_fd(), &c, &st, self.swap)?;
                }
                _ => {
                    // FIFOs, sockets, devices (whiteouts among them).
                    nix::sys::stat::mknodat(
                        d.as_fd(),
                        c.as_c_str(),
                        kind,
                        Mode::from_bits_truncate(st.st_mode & 0o7777),
                        st.st_rdev,
                    )
                    .map_err(io::Error::from)?;
                    entry_meta(d.as_fd(), &c, &st, self.swap)?;
                }
            }
        }
        Ok(())
    }

    fn file(&mut self, s: &OwnedFd, d: &OwnedFd, name: &CString, rel: PathBuf) -> io::Result<()> {
        let Ok(src) = openat(s.as_fd(), name.as_c_str(), READ, Mode::empty()) else {
            return Ok(()); // swapped for a symlink, a FIFO, …: left out
        };
        let src = File::from(src);
        let st = src.metadata()?;
        if !st.is_file() {
            return Ok(());
        }
        if st.nlink() > 1 {
            let key = (st.dev(), st.ino());
            if let Some(first) = self.links.get(&key) {
                let first = CString::new(first.as_os_str().as_bytes()).expect("no NUL");
                return nix::unistd::linkat(
                    self.dst_root.as_fd(),
                    first.as_c_str(),
                    d.as_fd(),
                    name.as_c_str(),
                    AtFlags::empty(),
                )
                .map_err(io::Error::from);
            }
            self.links.insert(key, rel);
        }
        let out = openat(
            d.as_fd(),
            name.as_c_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(io::Error::from)?;
        let out = File::from(out);
        data(&src, &out, st.len())?;
        let fst = nix::sys::stat::fstat(src.as_fd()).map_err(io::Error::from)?;
        meta(&src, &out, &fst, self.swap)
    }
}

/// The bytes of `src` (its first `len`, as it was opened) into `out`:
/// cloned where the file system can, else copied in the kernel, holes kept.
fn data(src: &File, out: &File, len: u64) -> io::Result<()> {
    // SAFETY: FICLONE takes the source descriptor as its argument.
    if unsafe { libc::ioctl(out.as_raw_fd(), libc::FICLONE, src.as_raw_fd()) } == 0 {
        return out.set_len(len);
    }
    let mut at: i64 = 0;
    let end = len as i64;
    while at < end {
        // SAFETY: lseek on a descriptor we own.
        let data = unsafe { libc::lseek(src.as_raw_fd(), at, libc::SEEK_DATA) };
        if data < 0 {
            // No data past `at` (ENXIO), or no SEEK_DATA: copy the rest.
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            copy_range(src, out, at, end)?;
            break;
        }
        if data >= end {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(src.as_raw_fd(), data, libc::SEEK_HOLE) };
        let upto = if hole < 0 { end } else { hole.min(end) };
        copy_range(src, out, data, upto)?;
        at = upto;
    }
    out.set_len(len)
}

fn copy_range(src: &File, out: &File, from: i64, to: i64) -> io::Result<()> {
    let mut off_in = from;
    let mut off_out = from;
    while off_in < to {
        let want = (to - off_in).min(1 << 30) as usize;
        // SAFETY: copy_file_range between descriptors we own, with offsets
        // it updates.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                out.as_raw_fd(),
                &mut off_out,
                want,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if matches!(
                e.raw_os_error(),
                Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL)
            ) {
                return copy_plain(src, out, off_in, to);
            }
            return Err(e);
        }
        if n == 0 {
            break; // the file shrank
        }
    }
    Ok(())
}

fn copy_plain(src: &File, out: &File, mut at: i64, to: i64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    while at < to {
        let want = ((to - at) as usize).min(buf.len());
        let n = src.read_at(&mut buf[..want], at as u64)?;
        if n == 0 {
            break;
        }
        out.write_all_at(&buf[..n], at as u64)?;
        at += n as i64;
    }
    Ok(())
}

/// Moves the owners of the tree `dir` (a stopped box's own files) from one
/// range of box ids to another: an owner `from.0 + n` (n < `RANGE`)
/// becomes `to.0 + n`, a group `from.1 + n` becomes `to.1 + n`, any other
/// owner (host root's overlay whiteouts) stays. By descriptor and never
/// following a symlink, as the copy is; set-id bits, which a change of
/// owner clears, are put back. What a box set of its own file
/// capabilities (`security.capability`) goes with the old owner, as the
/// kernel drops it on every change of owner.
pub fn shift_owners(dir: &Path, from: (u32, u32), to: (u32, u32)) -> io::Result<u64> {
    use super::idmap::RANGE;
    let moved =
        |id: u32, from: u32, to: u32| (id >= from && id - from < RANGE).then(|| to + (id - from));
    let mut changed = 0u64;
    let mut fix = |at: BorrowedFd<'_>, name: &CString, st: &FileStat| -> io::Result<()> {
        let (uid, gid) = (
            moved(st.st_uid, from.0, to.0),
            moved(st.st_gid, from.1, to.1),
        );
        if uid.is_none() && gid.is_none() {
            return Ok(());
        }
        nix::unistd::fchownat(
            at,
            name.as_c_str(),
            uid.map(Into::into),
            gid.map(Into::into),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(io::Error::from)?;
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        if kind != SFlag::S_IFLNK && st.st_mode & 0o6000 != 0 {
            // Nothing of the box runs while it is stopped: the name is
            // the entry just changed.
            nix::sys::stat::fchmodat(
                at,
                name.as_c_str(),
                Mode::from_bits_truncate(st.st_mode & 0o7777),
                nix::sys::stat::FchmodatFlags::FollowSymlink,
            )
            .map_err(io::Error::from)?;
        }
        changed += 1;
        Ok(())
    };
    let root = nix::fcntl::open(dir, DIR, Mode::empty()).map_err(|e| with(dir, e))?;
    let st = nix::sys::stat::fstat(root.as_fd()).map_err(io::Error::from)?;
    let parent = nix::fcntl::open(dir.parent().unwrap_or(Path::new("/")), DIR, Mode::empty())
        .map_err(|e| with(dir, e))?;
    let base = CString::new(
        dir.file_name()
            .map(|n| n.as_bytes().to_vec())
            .unwrap_or_else(|| b".".to_vec()),
    )
    .map_err(|_| io::Error::other("a NUL in the path"))?;
    let mut todo = vec![root];
    while let Some(d) = todo.pop() {
        let mut names: Vec<CString> = Vec::new();
        for entry in nix::dir::Dir::from_fd(d.try_clone()?).map_err(io::Error::from)? {
            let entry = entry.map_err(io::Error::from)?;
            let n = entry.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(CString::new(n).expect("a directory entry has no NUL"));
            }
        }
        for c in names {
            let Ok(st) = fstatat(d.as_fd(), c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            fix(d.as_fd(), &c, &st)?;
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
                && let Ok(sub) = openat(d.as_fd(), c.as_c_str(), DIR, Mode::empty())
            {
                todo.push(sub);
            }
        }
    }
    fix(parent.as_fd(), &base, &st)?;
    Ok(changed)
}

/// Owner, mode, extended attributes and times of `src` onto `dst` (both
/// open: a file or a directory).
fn meta(src: &impl AsFd, dst: &impl AsFd, st: &FileStat, swap: Swap) -> io::Result<()> {
    xattrs(src.as_fd(), dst.as_fd());
    let (uid, gid) = swap.owner(st);
    nix::unistd::fchown(dst.as_fd(), Some(uid.into()), Some(gid.into()))
        .map_err(io::Error::from)?;
    nix::sys::stat::fchmod(dst.as_fd(), Mode::from_bits_truncate(st.st_mode & 0o7777))
        .map_err(io::Error::from)?;
    let (atime, mtime) = times(st);
    nix::sys::stat::futimens(dst.as_fd(), &atime, &mtime).map_err(io::Error::from)
}

/// Owner and times of an entry that cannot be opened (a symlink, a node).
fn entry_meta(dir: BorrowedFd<'_>, name: &CString, st: &FileStat, swap: Swap) -> io::Result<()> {
    let (uid, gid) = swap.owner(st);
    nix::unistd::fchownat(
        dir,
        name.as_c_str(),
        Some(uid.into()),
        Some(gid.into()),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(io::Error::from)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFLNK {
        nix::sys::stat::fchmodat(
            dir,
            name.as_c_str(),
            Mode::from_bits_truncate(st.st_mode & 0o7777),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(io::Error::from)?;
    }
    let (atime, mtime) = times(st);
    nix::sys::stat::utimensat(
        dir,
        name.as_c_str(),
        &atime,
        &mtime,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .map_err(io::Error::from)
}

fn times(st: &FileStat) -> (nix::sys::time::TimeSpec, nix::sys::time::TimeSpec) {
    (
        nix::sys::time::TimeSpec::new(st.st_atime, st.st_atime_nsec),
        nix::sys::time::TimeSpec::new(st.st_mtime, st.st_mtime_nsec),
    )
}

/// Every extended attribute of `src` that `dst` will take (best effort:
/// a name the file system or the caller may not set is skipped, as `cp -a`
/// skips it).
fn xattrs(src: BorrowedFd<'_>, dst: BorrowedFd<'_>) {
    let mut names = vec![0u8; 64 * 1024];
    // SAFETY: flistxattr writes at most `len` bytes into our buffer.
    let n = unsafe { libc::flistxattr(src.as_raw_fd(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return;
    }
    names.truncate(n as usize);
    let mut value = vec![0u8; 64 * 1024];
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let Ok(c) = CString::new(name) else { continue };
        // SAFETY: fgetxattr writes at most `len` bytes into our buffer.
        let len = unsafe {
            libc::fgetxattr(
                src.as_raw_fd(),
                c.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        if len < 0 {
            continue;
        }
        // SAFETY: fsetxattr reads `len` bytes of our buffer.
        unsafe {
            libc::fsetxattr(
                dst.as_raw_fd(),
                c.as_ptr(),
                value.as_ptr().cast(),
                len as usize,
                0,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_tree_is_copied_with_links_holes_and_modes_and_nothing_followed() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let host = t.path().join("host");
        std::fs::create_dir_all(src.join("d/e")).unwrap();
        std::fs::create_dir_all(&host).unwrap();
        std::fs::write(host.join("secret"), "host only").unwrap();
        std::fs::write(src.join("d/f"), "data").unwrap();
        std::fs::hard_link(src.join("d/f"), src.join("d/e/g")).unwrap();
        symlink(&host, src.join("l")).unwrap();
        symlink(host.join("secret"), src.join("d/s")).unwrap();
        nix::unistd::mkfifo(&src.join("p"), Mode::S_IRWXU).unwrap();
        let sparse = File::create(src.join("sparse")).unwrap();
        sparse.set_len(64 << 20).unwrap();
        use std::os::unix::fs::FileExt;
        sparse.write_all_at(b"end", (64 << 20) - 3).unwrap();
        std::fs::set_permissions(
            src.join("d/f"),
            std::os::unix::fs::PermissionsExt::from_mode(0o751),
        )
        .unwrap();
        let dst = t.path().join("dst");
        copy_tree(&src, &dst).unwrap();
        assert_eq!(std::fs::read(dst.join("d/f")).unwrap(), b"data");
        let (a, b) = (
            std::fs::metadata(dst.join("d/f")).unwrap(),
            std::fs::metadata(dst.join("d/e/g")).unwrap(),
        );
        assert_eq!(a.ino(), b.ino(), "hard links stay links");
        assert_eq!(a.mode() & 0o7777, 0o751);
        assert_eq!(
            std::fs::read_link(dst.join("l")).unwrap(),
            host,
            "a symlink stays a symlink"
        );
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::symlink_metadata(dst.join("p"))
                .unwrap()
                .file_type()
                .is_fifo()
        );
        let s = std::fs::metadata(dst.join("sparse")).unwrap();
        assert_eq!(s.len(), 64 << 20);
        assert!(
            s.blocks() * 512 < 1 << 20,
            "holes kept ({} blocks)",
            s.blocks()
        );
        // Nothing of the host's in the copy's bytes.
        let mut found = false;
        for e in walk(&dst) {
            if std::fs::symlink_metadata(&e).unwrap().is_file() {
                found |= std::fs::read(&e)
                    .unwrap()
                    .windows(9)
                    .any(|w| w == b"host only");
            }
        }
        assert!(!found);
        assert!(
            copy_tree(&src, &dst).is_err(),
            "the destination must not exist"
        );
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                out.extend(walk(&p));
            }
            out.push(p);
        }
        out
    }
}
