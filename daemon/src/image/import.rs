//! Reading images handed over as files: an OCI layout's own name, and
//! `docker save` tarballs (OCI layouts inside, as docker 25 and later write
//! them, or the older `manifest.json` format, converted to a layout).
//!
//! An archive is hostile until proven otherwise. Its entries are written by
//! this module itself, not by the tar crate's `unpack`: only directories
//! (mode 0700) and regular files (0600) are created, at relative paths
//! without `..` (an absolute path is refused), under a fresh `extract/`
//! directory, each one resolved inside it with no symlink in any component.
//! Symlinks, hard links, devices and FIFOs in the archive are never created
//! (a path that names one is refused saying so), so nothing in `extract/`
//! leads outside it. Every path `manifest.json` names is opened the same way
//! (`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, see `files.rs`), must
//! be a regular file with one link (one this import wrote), is hashed from
//! that open file, and is renamed from that directory into the layout's
//! blobs, then checked to be the very file that was hashed. The archive's
//! unpacked size counts against `max-image-size` like an image's layers.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufReader, Read, Seek, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use serde_json::Value;
use tar::EntryType;

use super::files::{self, Refused};
use super::{
    GZIP_MAGIC, ImageError, ImageLimits, MAX_JSON_BLOB, MEDIA_DOCKER_CONFIG, MEDIA_DOCKER_MANIFEST,
    MEDIA_OCI_INDEX, TarGuard, TarStop,
};

const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// How many left-out entries (links, special files) are remembered for errors.
const MAX_SKIPPED: usize = 4096;
const CONTAINERD_NAME: &str = "io.containerd.image.name";

/// The name a layout gives itself: a full reference in its index's
/// annotations, or `localhost/<directory>:<tag>` for a bare tag. The
/// index is read as a layout's index always is (a regular file, bounded).
pub fn layout_name(dir: &Path) -> Option<String> {
    let bytes = super::read_layout_file(&dir.join("index.json"), "index.json", MAX_JSON_BLOB)
        .ok()
        .flatten()?;
    let index: Value = serde_json::from_slice(&bytes).ok()?;
    let annotations = index.get("manifests")?.get(0)?.get("annotations")?;
    if let Some(full) = annotations.get(CONTAINERD_NAME).and_then(|v| v.as_str()) {
        return Some(full.to_owned());
    }
    let name = annotations.get(REF_NAME)?.as_str()?;
    if name.contains('/') {
        return Some(name.to_owned());
    }
    let dir_name = dir.file_name()?.to_str()?.to_ascii_lowercase().replace(
        |c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)),
        "-",
    );
    let tag = name.replace(
        |c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)),
        "-",
    );
    Some(format!("localhost/{dir_name}:{tag}"))
}

/// Unpacks a `docker save` tarball (plain or gzip) under `work` (which the
/// caller owns and nothing else writes to) and returns an OCI layout for it
/// and the name it carries.
pub fn from_tarball(
    src: &Path,
    work: &Path,
    limits: &ImageLimits,
) -> Result<(PathBuf, Option<String>), ImageError> {
    let extract = work.join("extract");
    fs::create_dir_all(work)
        .and_then(|()| fs::create_dir(&extract))
        .map_err(|e| ImageError::io("create a staging directory", e))?;
    let root = File::open(&extract)
        .map_err(|e| ImageError::io(format!("open {}", extract.display()), e))?;
    let archive = Archive {
        src,
        root: &root,
        skipped: unpack(src, &root, limits)?,
    };

    let docker: Option<Value> = match files::open_beneath(&root, Path::new("manifest.json")) {
        Ok((mut f, _)) => {
            let bytes = files::read_bounded(&mut f, MAX_JSON_BLOB)
                .map_err(|e| ImageError::io("read manifest.json", e))?
                .ok_or_else(|| ImageError::invalid(src, "manifest.json is too large"))?;
            serde_json::from_slice(&bytes).ok()
        }
        Err(_) => None,
    };
    let tag = docker.as_ref().and_then(|m| {
        m.get(0)?
            .get("RepoTags")?
            .get(0)?
            .as_str()
            .map(str::to_owned)
    });
    if files::open_beneath(&root, Path::new("oci-layout")).is_ok() {
        let name = tag.or_else(|| layout_name(&extract));
        return Ok((extract, name));
    }
    let entry = docker.as_ref().and_then(|m| m.get(0)).ok_or_else(|| {
        ImageError::invalid(
            src,
            "neither an OCI layout nor a `docker save` archive (no oci-layout, no manifest.json)",
        )
    })?;
    let layout = work.join("layout");
    let blobs_path = layout.join("blobs/sha256");
    fs::create_dir_all(&blobs_path).map_err(|e| ImageError::io("create a layout", e))?;
    let blobs = File::open(&blobs_path)
        .map_err(|e| ImageError::io(format!("open {}", blobs_path.display()), e))?;
    let mut stored = HashMap::new();
    let config = archive.store(&entry["Config"], &blobs, &mut stored, limits)?;
    let mut layers = Vec::new();
    for l in entry["Layers"].as_array().into_iter().flatten() {
        let (digest, size) = archive.store(l, &blobs, &mut stored, limits)?;
        layers.push(serde_json::json!({
            "mediaType": "application/vnd.docker.image.rootfs.diff.tar",
            "digest": digest,
            "size": size,
        }));
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_DOCKER_MANIFEST,
        "config": {"mediaType": MEDIA_DOCKER_CONFIG, "digest": config.0, "size": config.1},
        "layers": layers,
    })
    .to_string();
    let manifest_digest = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(manifest.as_bytes()))
    );
    let io = |e| ImageError::io("write a layout", e);
    fs::write(blobs_path.join(&manifest_digest[7..]), &manifest).map_err(io)?;
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_OCI_INDEX,
        "manifests": [{"mediaType": MEDIA_DOCKER_MANIFEST, "digest": manifest_digest, "size": manifest.len()}],
    });
    fs::write(layout.join("index.json"), index.to_string()).map_err(io)?;
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .map_err(io)?;
    Ok((layout, tag))
}

/// An unpacked archive: its source (for errors), the directory it was
/// unpacked into, and what of it was not unpacked (links, special files).
struct Archive<'a> {
    src: &'a Path,
    root: &'a File,
    skipped: HashMap<PathBuf, &'static str>,
}

impl Archive<'_> {
    fn invalid(&self, reason: impl Into<String>) -> ImageError {
        ImageError::invalid(self.src, reason)
    }

    /// The relative path a `manifest.json` field names: plain components
    /// only (a leading `./` is dropped).
    fn path_of(&self, field: &Value) -> Result<PathBuf, ImageError> {
        let text = field.as_str().unwrap_or_default();
        match archive_path(Path::new(text)) {
            Some(rel) if !rel.as_os_str().is_empty() => Ok(rel),
            _ => Err(self.invalid(format!(
                "manifest.json names {text:?}, a path outside the archive (absolute, empty or with `..`)"
            ))),
        }
    }

    /// Moves the regular file `field` names into the layout's blobs under
    /// its digest (once per path: a layer named twice is stored once).
    fn store(
        &self,
        field: &Value,
        blobs: &File,
        stored: &mut HashMap<PathBuf, (String, u64)>,
        limits: &ImageLimits,
    ) -> Result<(String, u64), ImageError> {
        let rel = self.path_of(field)?;
        if let Some(done) = stored.get(&rel) {
            return Ok(done.clone());
        }
        let shown = rel.display();
        let (mut file, meta) = files::open_beneath(self.root, &rel).map_err(|r| match r {
            Refused::Io(e) => ImageError::io(format!("read {shown} of the archive"), e),
            _ => self.invalid(format!(
                "manifest.json names {shown}, which is not a regular file of the archive ({})",
                self.why_missing(&rel)
            )),
        })?;
        if meta.nlink() != 1 {
            return Err(self.invalid(format!(
                "{shown} has {} links; only files this import wrote are used",
                meta.nlink()
            )));
        }
        let (size, sha256) = files::hash_bounded(&mut file, meta.len(), &limits.cancel)
            .map_err(|e| ImageError::io(format!("read {shown} of the archive"), e))?;
        if size != meta.len() {
            return Err(self.invalid(format!("{shown} changed while it was read")));
        }
        let hex = hex::encode(sha256);
        // The directory is resolved like the file, so the rename acts on
        // the entry just read, never on anything a symlink leads to.
        let parent = rel.parent().unwrap_or(Path::new(""));
        let name = rel.file_name().unwrap_or_default();
        let dir = files::open_dir_beneath(self.root, parent).map_err(|r| match r {
            Refused::Io(e) => {
                ImageError::io(format!("open {} of the archive", parent.display()), e)
            }
            _ => self.invalid(format!(
                "{} is not a directory of the archive",
                parent.display()
            )),
        })?;
        let moved = |e: Errno| ImageError::io(format!("move {shown} into the layout"), e.into());
        renameat(dir.as_fd(), name, blobs.as_fd(), hex.as_str()).map_err(moved)?;
        let now =
            fstatat(blobs.as_fd(), hex.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).map_err(moved)?;
        if (now.st_dev as u64, now.st_ino as u64) != files::identity(&meta) {
            let _ = unlinkat(blobs.as_fd(), hex.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(self.invalid(format!("{shown} was replaced while it was read")));
        }
        let done = (format!("sha256:{hex}"), size);
        stored.insert(rel, done.clone());
        Ok(done)
    }

    /// Why a path is not a regular file of the archive, for the error.
    fn why_missing(&self, rel: &Path) -> String {
        let mut prefix = PathBuf::new();
        for part in rel.components() {
            prefix.push(part);
            if let Some(kind) = self.skipped.get(&prefix) {
                return format!(
                    "{} is {kind} in the archive, which an import never creates or follows",
                    prefix.display()
                );
            }
        }
        "no such file, or it is under a path that is not a directory, or it was already used".into()
    }
}

/// An archive's path made relative: `.` components dropped; `None` for an
/// absolute path or one with `..`.
fn archive_path(path: &Path) -> Option<PathBuf> {
    let mut rel = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::RootDir | Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(rel)
}

/// Writes the archive's directories and regular files into `root`; returns
/// what was left out (links and special files), by path.
fn unpack(
    src: &Path,
    root: &File,
    limits: &ImageLimits,
) -> Result<HashMap<PathBuf, &'static str>, ImageError> {
    let (mut file, _) =
        files::open_followed(src).map_err(|r| super::refused(src, "the archive", r))?;
    let mut magic = [0u8; 2];
    let gz = file.read_exact(&mut magic).is_ok() && magic == GZIP_MAGIC;
    file.rewind()
        .map_err(|e| ImageError::io(format!("read {}", src.display()), e))?;
    let mut guard = TarGuard::new(limits, 0);
    let reader = BufReader::new(file);
    let stream = if gz {
        guard.reader(flate2::read::GzDecoder::new(reader))
    } else {
        guard.reader(reader)
    };
    let unreadable = |e: io::Error| -> ImageError {
        if crate::error::is_no_space(&e) || files::is_stopping(&e) {
            return ImageError::io("unpack the archive", e);
        }
        ImageError::invalid(
            src,
            format!("not a readable tar archive: {}", super::with_causes(&e)),
        )
    };
    let mut archive = tar::Archive::new(stream);
    let mut entries = archive.entries().map_err(unreadable)?;
    let mut skipped = HashMap::new();
    while let Some(entry) = guard.next(&mut entries) {
        let mut entry = entry.map_err(|stop| match stop {
            TarStop::Read(e) => unreadable(e),
            TarStop::TooLarge => ImageError::invalid(src, limits.too_large("archive")),
            TarStop::Stopped => ImageError::Stopped,
        })?;
        let path = entry.path().map_err(unreadable)?.into_owned();
        let rel = archive_path(&path).ok_or_else(|| {
            ImageError::invalid(
                src,
                format!(
                    "the archive holds {}, a path outside it (absolute or with `..`)",
                    path.display()
                ),
            )
        })?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let kind = entry.header().entry_type();
        let wrote = match kind {
            EntryType::Directory => make_dirs(root, &rel).map(drop),
            EntryType::Regular | EntryType::Continuous => write_file(root, &rel, &mut entry),
            _ => {
                // Never created; remembered (so many) only to explain a refusal.
                if skipped.len() < MAX_SKIPPED {
                    let what = match kind {
                        EntryType::Symlink => "a symbolic link",
                        EntryType::Link => "a hard link",
                        _ => "a special file",
                    };
                    skipped.insert(rel, what);
                }
                Ok(())
            }
        };
        wrote.map_err(|e| {
            if crate::error::is_no_space(&e) || files::is_stopping(&e) {
                ImageError::io(format!("unpack {} from the archive", path.display()), e)
            } else {
                ImageError::invalid(
                    src,
                    format!(
                        "cannot unpack {}: {}",
                        path.display(),
                        super::with_causes(&e)
                    ),
                )
            }
        })?;
    }
    Ok(skipped)
}

/// Creates the directories of `rel` under `root` (0700), never following
/// a symlink; returns the last one, open.
fn make_dirs(root: &File, rel: &Path) -> io::Result<File> {
    let mut dir = root.try_clone()?;
    for part in rel.components() {
        let name = part.as_os_str();
        match mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        dir = File::from(openat(dir.as_fd(), name, flags, Mode::empty())?);
    }
    Ok(dir)
}

/// Writes one regular file (0600) of the archive; a later entry of the same
/// path replaces an earlier file (never a directory).
fn write_file(root: &File, rel: &Path, data: &mut impl Read) -> io::Result<()> {
    let dir = make_dirs(root, rel.parent().unwrap_or(Path::new("")))?;
    let name = rel.file_name().unwrap_or_default();
    match unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(dir.as_fd(), name, flags, Mode::from_bits_truncate(0o600))?;
    let mut out = io::BufWriter::with_capacity(1 << 20, File::from(fd));
    io::copy(data, &mut out)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One entry of a hand-made archive (names written verbatim, so
    /// absolute and `..` paths get through).
    enum E<'a> {
        File(&'a str, &'a [u8]),
        Dir(&'a str),
        Symlink(&'a str, &'a str),
        Hardlink(&'a str, &'a str),
        Fifo(&'a str),
    }

    fn tar_of(entries: &[E]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for e in entries {
            let mut h = tar::Header::new_gnu();
            let (name, kind, data): (&str, EntryType, &[u8]) = match e {
                E::File(n, d) => (n, EntryType::Regular, d),
                E::Dir(n) => (n, EntryType::Directory, &[]),
                E::Symlink(n, t) => {
                    h.set_link_name(t).unwrap();
                    (n, EntryType::Symlink, &[])
                }
                E::Hardlink(n, t) => {
                    h.set_link_name(t).unwrap();
                    (n, EntryType::Link, &[])
                }
                E::Fifo(n) => (n, EntryType::Fifo, &[]),
            };
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_entry_type(kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    /// A host directory with a canary file, beside the import's work directory.
    struct Host {
        dir: tempfile::TempDir,
        ino: u64,
    }

    impl Host {
        fn new() -> Host {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir(dir.path().join("host")).unwrap();
            fs::write(dir.path().join("host/canary"), "precious").unwrap();
            let ino = fs::metadata(dir.path().join("host/canary")).unwrap().ino();
            Host { dir, ino }
        }

        fn host(&self) -> String {
            self.dir.path().join("host").to_str().unwrap().to_owned()
        }

        fn canary(&self) -> String {
            format!("{}/canary", self.host())
        }

        /// Imports `bytes` as an archive in a fresh work directory.
        fn import(
            &self,
            name: &str,
            bytes: &[u8],
        ) -> Result<(PathBuf, Option<String>), ImageError> {
            let src = self.dir.path().join(format!("{name}.tar"));
            fs::write(&src, bytes).unwrap();
            from_tarball(&src, &self.dir.path().join(name), &ImageLimits::default())
        }

        /// The canary is where it was, the same file with the same bytes,
        /// and nothing was added beside it.
        fn assert_untouched(&self) {
            let canary = self.dir.path().join("host/canary");
            assert_eq!(
                fs::read_to_string(&canary).ok().as_deref(),
                Some("precious")
            );
            assert_eq!(fs::metadata(&canary).unwrap().ino(), self.ino);
            assert_eq!(
                fs::read_dir(self.dir.path().join("host")).unwrap().count(),
                1
            );
        }
    }

    fn manifest(config: &str, layers: &[&str]) -> Vec<u8> {
        serde_json::json!([{"Config": config, "RepoTags": ["x:1"], "Layers": layers}])
            .to_string()
            .into_bytes()
    }

    fn reason(r: Result<(PathBuf, Option<String>), ImageError>) -> String {
        match r {
            Err(ImageError::Invalid { reason, .. }) => reason,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_manifest_path_through_a_symlinked_directory_moves_nothing() {
        // The reported attack: `d` → a host directory, and manifest.json
        // naming `d/canary`. The old importer renamed the host file into its
        // staging area (and deleted it with the staging area).
        let h = Host::new();
        let host = h.host();
        let r = h.import(
            "a",
            &tar_of(&[
                E::Symlink("d", &host),
                E::File("manifest.json", &manifest("d/canary", &[])),
            ]),
        );
        let why = reason(r);
        assert!(
            why.contains("d/canary, which is not a regular file of the archive (d is a symbolic link in the archive"),
            "{why}"
        );
        h.assert_untouched();
        // The same through a layer path, and through a relative link climbing out.
        let r = h.import(
            "b",
            &tar_of(&[
                E::Symlink("l", "../../host"),
                E::File("c.json", b"{}"),
                E::File("manifest.json", &manifest("c.json", &["l/canary"])),
            ]),
        );
        assert!(reason(r).contains("l is a symbolic link"));
        h.assert_untouched();
    }

    #[test]
    fn links_in_the_archive_are_never_created_or_followed() {
        let h = Host::new();
        let canary = h.canary();
        for (i, entries) in [
            // A hard link to a host file, named as the config.
            vec![
                E::Hardlink("c.json", &canary),
                E::File("manifest.json", &manifest("c.json", &[])),
            ],
            // A hard link to a file of the archive.
            vec![
                E::File("real.json", b"{}"),
                E::Hardlink("c.json", "real.json"),
                E::File("manifest.json", &manifest("c.json", &[])),
            ],
            // A symlink to a host file.
            vec![
                E::Symlink("c.json", &canary),
                E::File("manifest.json", &manifest("c.json", &[])),
            ],
            // manifest.json itself a symlink to a host file.
            vec![E::Symlink("manifest.json", &canary)],
        ]
        .into_iter()
        .enumerate()
        {
            let work = h.dir.path().join(format!("w{i}"));
            let r = h.import(&format!("w{i}"), &tar_of(&entries));
            assert!(r.is_err(), "case {i}: {r:?}");
            h.assert_untouched();
            // Nothing but directories and regular files was made.
            let mut stack = vec![work];
            while let Some(d) = stack.pop() {
                for e in fs::read_dir(&d).unwrap() {
                    let p = e.unwrap().path();
                    let m = fs::symlink_metadata(&p).unwrap();
                    assert!(
                        m.is_dir() || (m.is_file() && m.nlink() == 1),
                        "{}",
                        p.display()
                    );
                    if m.is_dir() {
                        stack.push(p);
                    }
                }
            }
        }
    }

    #[test]
    fn absolute_and_climbing_paths_are_refused() {
        let h = Host::new();
        let planted = format!("{}/planted", h.host());
        let r = h.import("a", &tar_of(&[E::File(&planted, b"x")]));
        assert!(reason(r).contains("a path outside it"));
        let r = h.import("b", &tar_of(&[E::File("../../host/planted", b"x")]));
        assert!(reason(r).contains("a path outside it"));
        for config in [
            h.canary(),
            "../host/canary".into(),
            "a/../../host/canary".into(),
            "".into(),
        ] {
            let r = h.import(
                "c",
                &tar_of(&[E::File("manifest.json", &manifest(&config, &[]))]),
            );
            assert!(reason(r).contains("a path outside the archive"), "{config}");
            fs::remove_dir_all(h.dir.path().join("c")).unwrap();
        }
        h.assert_untouched();
    }

    #[test]
    fn a_fifo_source_or_entry_does_not_hang() {
        let h = Host::new();
        let fifo = h.dir.path().join("fifo.tar");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let e = from_tarball(&fifo, &h.dir.path().join("w"), &ImageLimits::default()).unwrap_err();
        assert!(e.to_string().contains("the archive is a FIFO"), "{e}");
        let r = h.import(
            "f",
            &tar_of(&[
                E::Fifo("c.json"),
                E::File("manifest.json", &manifest("c.json", &[])),
            ]),
        );
        assert!(reason(r).contains("c.json is a special file in the archive"));
    }

    #[test]
    fn an_archive_over_the_size_cap_is_refused() {
        let h = Host::new();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        {
            let mut tar = tar::Builder::new(&mut gz);
            let mut hd = tar::Header::new_gnu();
            hd.set_size(64 << 20);
            hd.set_mode(0o644);
            hd.set_cksum();
            tar.append_data(&mut hd, "big", io::repeat(0).take(64 << 20))
                .unwrap();
            tar.finish().unwrap();
        }
        let src = h.dir.path().join("bomb.tar.gz");
        fs::write(&src, gz.finish().unwrap()).unwrap();
        let limits = ImageLimits {
            max_size: 1 << 20,
            ..ImageLimits::default()
        };
        let r = from_tarball(&src, &h.dir.path().join("w"), &limits);
        let why = reason(r);
        assert!(
            why.contains("the archive unpacks to more than 1 MiB (max-image-size)"),
            "{why}"
        );
        // Nothing of the big file was written.
        assert!(!h.dir.path().join("w/extract/big").exists());
    }

    #[test]
    fn a_docker_save_archive_converts_and_loads() {
        let h = Host::new();
        let layer = {
            let mut b = tar::Builder::new(Vec::new());
            let mut hd = tar::Header::new_gnu();
            hd.set_size(3);
            hd.set_mode(0o755);
            b.append_data(&mut hd, "bin/hello", &b"hi\n"[..]).unwrap();
            b.into_inner().unwrap()
        };
        let config = serde_json::json!({
            "architecture": super::super::host_arch(), "os": "linux",
            "config": {"Cmd": ["hello"]}, "rootfs": {"type": "layers", "diff_ids": []},
        })
        .to_string();
        // The same layer named twice (stored once), under `./`-prefixed paths.
        let bytes = tar_of(&[
            E::Dir("./abc/"),
            E::File("./abc/layer.tar", &layer),
            E::File("cfg.json", config.as_bytes()),
            E::File(
                "manifest.json",
                &manifest("./cfg.json", &["abc/layer.tar", "./abc/layer.tar"]),
            ),
        ]);
        let (layout, tag) = h.import("ok", &bytes).unwrap();
        assert_eq!(tag.as_deref(), Some("x:1"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store = super::super::RootfsCache::new(
            h.dir.path().join("images"),
            ImageLimits::default(),
            Default::default(),
        );
        let image = rt.block_on(store.load_layout(&layout)).unwrap();
        assert_eq!(
            fs::read_to_string(image.rootfs.join("bin/hello")).unwrap(),
            "hi\n"
        );
        assert_eq!(image.config.cmd, ["hello"]);
        h.assert_untouched();
    }

    #[test]
    fn hostile_docker_save_archives_are_refused() {
        let h = Host::new();
        // Not an image at all.
        let r = h.import("c", &tar_of(&[E::File("hello.txt", b"hi")]));
        assert!(reason(r).contains("neither an OCI layout"));
        // Not a tar archive.
        let r = h.import("d", b"definitely not tar, but long enough to look at");
        assert!(r.is_err());
        // A symlink named as a blob of an OCI layout inside the archive.
        let canary = h.canary();
        let r = h.import(
            "e",
            &tar_of(&[
                E::File("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#),
                E::File("index.json", br#"{"schemaVersion":2,"manifests":[]}"#),
                E::Symlink("blobs/sha256/aa", &canary),
            ]),
        );
        // An OCI layout comes back as it is (load_layout reads it); the link was not made.
        let (layout, _) = r.unwrap();
        assert!(fs::symlink_metadata(layout.join("blobs/sha256/aa")).is_err());
        h.assert_untouched();
    }
}
