//! Opening and reading the files of an image without trusting them: a
//! layout's `oci-layout`, `index.json` and blobs, and the files of an
//! imported archive.
//!
//! - [`open_regular`] opens a path's last component without following it
//!   (`O_NOFOLLOW`) and without waiting (`O_NONBLOCK`: a FIFO would block an
//!   open for reading until a writer came), then accepts only a regular file
//!   (`fstat`). A symlink to `/dev/zero` or to a host file, a FIFO, a device
//!   or a directory is refused with an error that names it.
//! - [`open_beneath`] resolves a relative path inside a directory one
//!   component at a time with no symlink anywhere (`openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or an `O_NOFOLLOW` walk where
//!   `openat2` is missing), for paths an archive names.
//! - [`read_bounded`] and [`hash_bounded`] read at most one byte more than
//!   the caller allows, so a file larger than its descriptor says is caught
//!   without reading the rest of it; hashing stops when the daemon does.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

/// Why a path could not be used as an image file.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Nothing is there.
    Missing,
    /// Something other than a regular file is there (named: "a symbolic link", "a FIFO"...).
    NotRegular(&'static str),
    /// The open or stat failed otherwise.
    Io(io::Error),
}

impl Refused {
    fn from_io(e: io::Error) -> Refused {
        match e.raw_os_error() {
            Some(libc::ENOENT) => Refused::Missing,
            // O_NOFOLLOW on a symlink; O_DIRECTORY on a non-directory (inside a walk).
            Some(libc::ELOOP) => Refused::NotRegular("a symbolic link"),
            Some(libc::ENOTDIR) => Refused::NotRegular("under something that is not a directory"),
            // openat2's refusals: a symlink component, or an escape.
            Some(libc::EXDEV) => Refused::NotRegular("outside the directory"),
            _ => Refused::Io(e),
        }
    }
}

/// What a file type is called in an error.
pub(crate) fn describe(file_type: fs::FileType) -> &'static str {
    if file_type.is_file() {
        "a regular file"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

const READ_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_NONBLOCK)
    .union(OFlag::O_CLOEXEC)
    .union(OFlag::O_NOCTTY);

/// Accepts an opened file only if it is a regular file.
fn regular(fd: OwnedFd) -> Result<(File, fs::Metadata), Refused> {
    let file = File::from(fd);
    let meta = file.metadata().map_err(Refused::Io)?;
    if !meta.file_type().is_file() {
        return Err(Refused::NotRegular(describe(meta.file_type())));
    }
    Ok((file, meta))
}

/// Opens `path` for reading if its last component is a regular file (not
/// followed if it is a symlink; a FIFO does not block the open).
pub(crate) fn open_regular(path: &Path) -> Result<(File, fs::Metadata), Refused> {
    let fd = nix::fcntl::open(path, READ_FLAGS, Mode::empty())
        .map_err(|e| Refused::from_io(e.into()))?;
    regular(fd)
}

/// Opens `path` for reading, following symlinks (a path a client chose),
/// if it ends at a regular file; a FIFO does not block the open.
pub(crate) fn open_followed(path: &Path) -> Result<(File, fs::Metadata), Refused> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    let fd =
        nix::fcntl::open(path, flags, Mode::empty()).map_err(|e| Refused::from_io(e.into()))?;
    regular(fd)
}

/// Opens the regular file at `rel` inside the directory `dir`, resolving
/// every component inside `dir` with no symlink (and no `..`, no absolute
/// path) anywhere.
pub(crate) fn open_beneath(dir: &File, rel: &Path) -> Result<(File, fs::Metadata), Refused> {
    check_relative(rel)?;
    let fd = resolve_beneath(dir, rel, READ_FLAGS).map_err(|e| Refused::from_io(e.into()))?;
    regular(fd)
}

/// Opens the directory at `rel` inside `dir` the same way (`rel` empty: `dir` itself).
pub(crate) fn open_dir_beneath(dir: &File, rel: &Path) -> Result<File, Refused> {
    if rel.as_os_str().is_empty() {
        return dir.try_clone().map_err(Refused::Io);
    }
    check_relative(rel)?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = resolve_beneath(dir, rel, flags).map_err(|e| Refused::from_io(e.into()))?;
    Ok(File::from(fd))
}

/// Only plain names: no root, no `.`, no `..`.
fn check_relative(rel: &Path) -> Result<(), Refused> {
    if !boxd_fs::beneath::is_plain_relative(rel) {
        return Err(Refused::NotRegular("not a plain relative path"));
    }
    Ok(())
}

/// [`boxd_fs::beneath::open`]: no symlink on the way, never leaving `dir`.
fn resolve_beneath(dir: &File, rel: &Path, flags: OFlag) -> Result<OwnedFd, Errno> {
    boxd_fs::beneath::open(dir.as_fd(), rel, flags)
}

/// Reads all of `file` if it holds at most `limit` bytes; `Ok(None)` if it holds more.
pub(crate) fn read_bounded(file: &mut File, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let hint = file.metadata().map(|m| m.len()).unwrap_or(0).min(limit);
    let mut bytes = Vec::with_capacity(hint as usize + 1);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// The sha256 and size of `reader`'s bytes, reading at most `limit + 1` of
/// them (a size over `limit` means there was more). Stops with an error
/// once `cancel` is cancelled.
pub(crate) fn hash_bounded(
    reader: &mut impl Read,
    limit: u64,
    cancel: &CancellationToken,
) -> io::Result<(u64, [u8; 32])> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    let mut reader = reader.take(limit.saturating_add(1));
    loop {
        if cancel.is_cancelled() {
            return Err(stopping());
        }
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hasher.finalize().into()))
}

/// The error of image work cut short because the daemon is stopping.
pub(crate) fn stopping() -> io::Error {
    io::Error::other(Stopping)
}

pub(crate) const STOPPING: &str = "boxd is shutting down";

/// What [`stopping`] wraps, so it is recognised through the tar crate's
/// own wrapping ([`is_stopping`]).
#[derive(Debug)]
struct Stopping;

impl std::fmt::Display for Stopping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(STOPPING)
    }
}

impl std::error::Error for Stopping {}

/// Whether `e` is, or wraps, the error of [`stopping`].
pub(crate) fn is_stopping(e: &io::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if err.is::<Stopping>() {
            return true;
        }
        // An io::Error's `source` skips the error it wraps: look at that too.
        current = match err.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    false
}

/// The device and inode of a file, to tell whether two opens met the same file.
pub(crate) fn identity(meta: &fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_regular_files_open() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("file"), "x").unwrap();
        symlink(d.join("file"), d.join("link")).unwrap();
        symlink("/dev/zero", d.join("zero")).unwrap();
        nix::unistd::mkfifo(&d.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        fs::create_dir(d.join("dir")).unwrap();
        assert!(open_regular(&d.join("file")).is_ok());
        for (name, what) in [
            ("link", "a symbolic link"),
            ("zero", "a symbolic link"),
            ("fifo", "a FIFO"),
            ("dir", "a directory"),
        ] {
            match open_regular(&d.join(name)) {
                Err(Refused::NotRegular(w)) => assert_eq!(w, what, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(matches!(
            open_regular(Path::new("/dev/null")),
            Err(Refused::NotRegular("a character device"))
        ));
        assert!(matches!(
            open_regular(&d.join("missing")),
            Err(Refused::Missing)
        ));
    }

    #[test]
    fn beneath_refusals_say_what_is_in_the_way() {
        // The resolution itself is boxd_fs::beneath's (tested there); here,
        // what its refusals become.
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("root/real")).unwrap();
        fs::write(d.join("root/real/f"), "ok").unwrap();
        symlink("real", d.join("root/rel")).unwrap();
        let root = File::open(d.join("root")).unwrap();
        let (mut f, _) = open_beneath(&root, Path::new("real/f")).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "ok");
        for rel in ["rel/f", "../root/real/f", "/etc/passwd"] {
            assert!(
                matches!(
                    open_beneath(&root, Path::new(rel)),
                    Err(Refused::NotRegular(_))
                ),
                "{rel}"
            );
        }
        assert!(matches!(
            open_beneath(&root, Path::new("real/none")),
            Err(Refused::Missing)
        ));
        assert!(open_dir_beneath(&root, Path::new("real")).is_ok());
    }

    #[test]
    fn bounded_reads_stop_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, "0123456789").unwrap();
        let (mut f, _) = open_regular(&p).unwrap();
        assert_eq!(read_bounded(&mut f, 10).unwrap().unwrap(), b"0123456789");
        let (mut f, _) = open_regular(&p).unwrap();
        assert!(read_bounded(&mut f, 9).unwrap().is_none());
        let mut zero = File::open("/dev/zero").unwrap();
        let (size, _) = hash_bounded(&mut zero, 1000, &CancellationToken::new()).unwrap();
        assert_eq!(size, 1001);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let e = hash_bounded(&mut zero, u64::MAX, &cancel).unwrap_err();
        assert!(is_stopping(&e));
        // As the tar crate wraps a failed unpack: an error whose source is ours.
        #[derive(Debug)]
        struct Wrap(io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("failed to unpack")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        assert!(is_stopping(&io::Error::other(Wrap(e))));
        assert!(!is_stopping(&io::Error::other(STOPPING)));
    }
}
