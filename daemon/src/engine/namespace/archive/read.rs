//! Reading a box archive from hostile bytes: every entry beneath the new
//! box's directory, nothing overwritten or followed, bounded.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FchmodatFlags, Mode, SFlag, UtimensatFlags, fchmodat, fstatat, utimensat};
use nix::sys::time::TimeSpec;

use super::*;
use crate::error::{Error, Result};
use crate::image::Owners;
use crate::image::files::{Refused, open_dir_beneath};

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
pub(super) fn unpack(
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
}
