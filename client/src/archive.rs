//! Tar archives of files, `docker cp` style, shared by the host side
//! (`boxctl cp`, the JSONL driver) and by boxd's namespace engine, which
//! runs the same code inside a box (chrooted in it, so that every path and
//! symlink resolves in the box).
//!
//! - [`pack`]: a tar of one path: one top-level entry named after the
//!   path's last component (`DIR/.`: the directory's contents as `./…`),
//!   modes, mtimes, symlinks as links, numeric owners.
//! - [`unpack`]: docker's rule: into `path` when it is a directory, else
//!   the archive's one top-level entry becomes `path` (whose parent must
//!   exist). Entries with an absolute or `..` path, or beneath a symlink
//!   the archive itself made, are refused; an existing file or symlink is
//!   replaced, never written through. Files belong to whoever unpacks
//!   (as `docker cp` without `-a`).
//!
//! Blocking, streaming: memory stays bounded whatever the size.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

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

/// Writes a tar of `path` to `w`. `follow_symlinks`: when `path` is a
/// symlink, archive what it points at (symlinks inside stay links).
pub fn pack(path: &str, follow_symlinks: bool, w: &mut impl Write) -> Result<()> {
    let p = Path::new(path);
    let meta = if follow_symlinks {
        std::fs::metadata(p)
    } else {
        std::fs::symlink_metadata(p)
    }
    .map_err(|e| Failure::io(path, e))?;
    let contents = names_contents(path);
    if (contents || path.ends_with('/')) && !meta.is_dir() {
        return Err(Failure::invalid(format!("{path}: not a directory")));
    }
    let mut b = tar::Builder::new(w);
    b.follow_symlinks(false);
    b.mode(tar::HeaderMode::Complete);
    let written = if contents {
        b.append_dir_all(".", p)
    } else {
        let name = p
            .file_name()
            .expect("a path that is not its contents has a name");
        if meta.is_dir() {
            b.append_dir_all(name, p)
        } else if meta.is_file() && follow_symlinks {
            // What a symlink points at, under the link's name.
            std::fs::File::open(p).and_then(|mut f| b.append_file(name, &mut f))
        } else if meta.file_type().is_symlink() || meta.is_file() {
            b.append_path_with_name(p, name)
        } else {
            return Err(Failure::invalid(format!(
                "{path}: not a file, directory or symlink"
            )));
        }
    };
    written
        .and_then(|()| b.finish())
        .map_err(|e| Failure::io(&format!("archiving {path}"), e))
}

/// Where the archive goes: into a directory, or as a new name in one.
enum Target {
    Into(PathBuf),
    /// The archive's top-level entry becomes `parent/name`.
    As {
        parent: PathBuf,
        name: std::ffi::OsString,
    },
}

/// An archive path's parts: `.` components dropped, `..` and absolute
/// paths refused. `top_dot`: it began with `.` (a contents archive).
fn parts(raw: &[u8]) -> Result<(bool, Vec<&std::ffi::OsStr>)> {
    use std::os::unix::ffi::OsStrExt;
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
            s => out.push(std::ffi::OsStr::from_bytes(s)),
        }
    }
    Ok((top_dot, out))
}

/// Reads a tar from `r` and unpacks it at `path`.
pub fn unpack(path: &str, mut r: impl Read, modes: Modes) -> Result<()> {
    let p = Path::new(path);
    let target = match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Target::Into(p.to_path_buf()),
        Ok(_) if path.ends_with('/') => {
            return Err(Failure::invalid(format!("{path}: not a directory")));
        }
        Ok(_) | Err(_) => {
            let (parent, name) = match (p.parent(), p.file_name()) {
                (Some(parent), Some(name)) if !names_contents(path) => (parent, name),
                _ => return Err(Failure::invalid(format!("{path}: not a directory"))),
            };
            match std::fs::metadata(parent) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Failure::invalid(format!(
                        "{}: not a directory",
                        parent.display()
                    )));
                }
                Err(e) => return Err(Failure::io(&parent.display().to_string(), e)),
            }
            Target::As {
                parent: parent.to_path_buf(),
                name: name.to_owned(),
            }
        }
    };
    let mut archive = tar::Archive::new(&mut r);
    archive.set_preserve_permissions(modes.exact);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let mut unpacker = Unpacker {
        target,
        top: None,
        links: Vec::new(),
        dirs: Vec::new(),
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
    for (dir, mode, mtime) in unpacker.dirs.iter().rev() {
        use std::os::unix::fs::PermissionsExt;
        let mode = if modes.exact {
            mode & 0o7777
        } else {
            mode & 0o777
        };
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Failure::io(&dir.display().to_string(), e))?;
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(*mtime);
        let _ = std::fs::File::open(dir).and_then(|d| d.set_modified(when));
    }
    // Whatever follows the archive's end (padding) is read, so the writer
    // never meets a closed pipe.
    io::copy(&mut r, &mut io::sink()).map_err(|e| Failure::io("reading the archive", e))?;
    Ok(())
}

struct Unpacker {
    target: Target,
    /// The one top-level name (`As` only); `.` for a contents archive.
    top: Option<std::ffi::OsString>,
    /// Symlinks this archive made: nothing is written beneath them.
    links: Vec<PathBuf>,
    /// Directories made, with their modes and mtimes.
    dirs: Vec<(PathBuf, u32, u64)>,
}

impl Unpacker {
    /// Where an archive path lands; `None` for the destination itself.
    fn place(&mut self, raw: &[u8]) -> Result<Option<PathBuf>> {
        let (top_dot, parts) = parts(raw)?;
        match &self.target {
            Target::Into(dir) => {
                if parts.is_empty() {
                    return Ok(None);
                }
                Ok(Some(parts.iter().fold(dir.clone(), |p, c| p.join(c))))
            }
            Target::As { parent, name } => {
                let start = parent.join(name);
                // A contents archive (`./` first, as tar writes `DIR/.`):
                // every entry is beneath the new name.
                if self.top.is_none() && top_dot && parts.is_empty() {
                    self.top = Some(".".into());
                }
                if self.top.as_deref() == Some(std::ffi::OsStr::new(".")) {
                    return Ok(Some(parts.iter().fold(start, |p, c| p.join(c))));
                }
                let (top, rest) = if top_dot {
                    (std::ffi::OsStr::new("."), &parts[..])
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
                            "the archive has more than one top-level entry ({:?} and {:?}); copy into an existing directory instead",
                            t, top
                        )));
                    }
                }
                Ok(Some(rest.iter().fold(start, |p, c| p.join(c))))
            }
        }
    }

    fn beneath_link(&self, at: &Path) -> bool {
        self.links.iter().any(|l| at != l && at.starts_with(l))
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<()> {
        use tar::EntryType;
        let raw = entry.path_bytes().into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            EntryType::XGlobalHeader | EntryType::XHeader | EntryType::GNULongName
        ) {
            return Ok(());
        }
        let Some(at) = self.place(&raw)? else {
            return Ok(()); // the destination directory itself
        };
        let shown = || String::from_utf8_lossy(&raw).into_owned();
        if self.beneath_link(&at) {
            return Err(Failure::invalid(format!(
                "the archive writes {:?} through a symlink it made",
                shown()
            )));
        }
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Failure::io(&parent.display().to_string(), e))?;
        }
        match kind {
            EntryType::Link => {
                let link = entry
                    .link_name_bytes()
                    .map(|l| l.into_owned())
                    .unwrap_or_default();
                let Some(src) = self.place(&link)? else {
                    return Err(Failure::invalid(format!(
                        "the archive links {:?} to the destination itself",
                        shown()
                    )));
                };
                if self.beneath_link(&src) {
                    return Err(Failure::invalid(format!(
                        "the archive links {:?} through a symlink it made",
                        shown()
                    )));
                }
                remove_existing(&at)?;
                std::fs::hard_link(&src, &at)
                    .map_err(|e| Failure::io(&format!("linking {}", at.display()), e))?;
            }
            EntryType::Directory => {
                if std::fs::symlink_metadata(&at).is_ok_and(|m| !m.is_dir()) {
                    return Err(Failure::invalid(format!(
                        "cannot overwrite non-directory {} with a directory",
                        at.display()
                    )));
                }
                if !at.is_dir() {
                    std::fs::create_dir(&at)
                        .map_err(|e| Failure::io(&at.display().to_string(), e))?;
                }
                let mode = entry.header().mode().unwrap_or(0o755);
                let mtime = entry.header().mtime().unwrap_or(0);
                self.dirs.push((at, mode, mtime));
            }
            EntryType::Regular
            | EntryType::Continuous
            | EntryType::Symlink
            | EntryType::Fifo
            | EntryType::GNUSparse => {
                // An existing file or symlink is replaced, never written
                // through; an existing directory is not replaced by a file.
                if std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
                    return Err(Failure::invalid(format!(
                        "cannot overwrite directory {} with a non-directory",
                        at.display()
                    )));
                }
                remove_existing(&at)?;
                entry
                    .unpack(&at)
                    .map_err(|e| Failure::io(&at.display().to_string(), e))?;
                if kind == EntryType::Symlink {
                    self.links.push(at);
                }
            }
            other => {
                return Err(Failure::invalid(format!(
                    "{:?}: unsupported entry type {other:?}",
                    shown()
                )));
            }
        }
        Ok(())
    }
}

fn remove_existing(at: &Path) -> Result<()> {
    match std::fs::symlink_metadata(at) {
        Ok(m) if !m.is_dir() => {
            std::fs::remove_file(at).map_err(|e| Failure::io(&at.display().to_string(), e))
        }
        _ => Ok(()),
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
}
