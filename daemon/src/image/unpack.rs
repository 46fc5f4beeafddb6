//! Flattening an image's layers into one root filesystem: whiteouts
//! applied, no entry written outside the root, sizes counted against
//! `max-image-size` as the tar streams are read.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, FileTimes};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use oci_spec::image::Descriptor;
use tar::EntryType;
use tokio_util::sync::CancellationToken;

use super::layout::Layout;
use super::*;

/// What one layer deletes from the layers below it.
#[derive(Debug, Default)]
pub(super) struct Whiteouts {
    /// Paths named by `.wh.<name>` files.
    pub(super) removed: Vec<PathBuf>,
    /// Directories marked with `.wh..wh..opq`: their lower contents go.
    pub(super) opaque: Vec<PathBuf>,
}

/// A layer blob being read, with what to name in errors.
pub(super) struct LayerBlob<'a> {
    pub(super) path: PathBuf,
    pub(super) digest: String,
    pub(super) media_type: &'a str,
    /// The blob's size, as its (verified) descriptor says: no read goes past it.
    pub(super) size: u64,
    /// The cap and the stop signal.
    pub(super) limits: &'a ImageLimits,
    /// Bytes the layers below this one unpacked to (counted against the cap).
    pub(super) below: u64,
}

/// Flattens `layers` (bottom to top) into `rootfs`.
pub(super) fn unpack_layers(
    layout: &Layout,
    layers: &[Descriptor],
    rootfs: &Path,
    owners: Owners,
) -> Result<(), ImageError> {
    let mut dir_mtimes = HashMap::new();
    let mut unpacked = 0u64;
    for desc in layers {
        let media_type = desc.media_type().to_string();
        let layer = LayerBlob {
            path: layout.blob_path(desc)?,
            digest: desc.digest().to_string(),
            media_type: &media_type,
            size: desc.size(),
            limits: &layout.limits,
            below: unpacked,
        };
        check_layer_media_type(&layer)?;
        layout.verify_blob_file(desc)?;
        let whiteouts = layer.scan_whiteouts()?;
        apply_whiteouts(rootfs, &whiteouts)
            .map_err(|e| layer.error("cannot apply whiteouts", e))?;
        unpacked += layer.extract(rootfs, &mut dir_mtimes, owners)?;
    }
    restore_dir_mtimes(rootfs, &dir_mtimes);
    Ok(())
}

pub(super) fn check_layer_media_type(layer: &LayerBlob) -> Result<(), ImageError> {
    if LAYER_MEDIA_TYPES.contains(&layer.media_type) {
        Ok(())
    } else if layer.media_type.contains("zstd") {
        Err(layer.invalid(ZSTD_UNSUPPORTED))
    } else {
        Err(layer.invalid(format!("unsupported layer media type {}", layer.media_type)))
    }
}

impl LayerBlob<'_> {
    pub(super) fn invalid(&self, reason: impl std::fmt::Display) -> ImageError {
        ImageError::invalid(&self.path, format!("layer {}: {reason}", self.digest))
    }

    /// An error while reading or writing this layer: malformed data is `Invalid`, the rest `Io`.
    pub(super) fn error(&self, what: &str, e: io::Error) -> ImageError {
        use io::ErrorKind::*;
        if files::is_stopping(&e) {
            return ImageError::Stopped;
        }
        match e.kind() {
            Other | InvalidData | InvalidInput | UnexpectedEof => {
                self.invalid(format!("{what}: {}", with_causes(&e)))
            }
            _ => ImageError::io(format!("layer {}: {what}", self.digest), e),
        }
    }

    /// What a guarded tar stream stopped on, as this layer's error.
    pub(super) fn stopped(&self, stop: TarStop) -> ImageError {
        match stop {
            TarStop::Read(e) => self.error("cannot read tar", e),
            TarStop::TooLarge => self.invalid(self.limits.too_large("image")),
            TarStop::Stopped => ImageError::Stopped,
        }
    }

    /// Opens the layer as a tar stream, decompressing gzip (detected by its
    /// magic bytes), read through `guard` and never past the blob's size.
    pub(super) fn open(&self, guard: &TarGuard) -> Result<tar::Archive<Box<dyn Read>>, ImageError> {
        let (file, _) = open_blob(&self.path, &self.digest)?;
        let mut reader = BufReader::new(file.take(self.size));
        let head = reader
            .fill_buf()
            .map_err(|e| self.error("cannot read", e))?;
        let stream: Box<dyn Read> = if head.starts_with(GZIP_MAGIC) {
            guard.reader(flate2::read::MultiGzDecoder::new(reader))
        } else if head.starts_with(ZSTD_MAGIC) {
            return Err(self.invalid(ZSTD_UNSUPPORTED));
        } else {
            guard.reader(reader)
        };
        let mut archive = tar::Archive::new(stream);
        archive.set_preserve_permissions(true);
        archive.set_preserve_mtime(true);
        archive.set_preserve_ownerships(false);
        archive.set_unpack_xattrs(false);
        archive.set_overwrite(true);
        Ok(archive)
    }

    /// First pass: validates every entry path and collects the whiteouts.
    pub(super) fn scan_whiteouts(&self) -> Result<Whiteouts, ImageError> {
        let mut guard = TarGuard::new(self.limits, self.below);
        let mut archive = self.open(&guard)?;
        let mut whiteouts = Whiteouts::default();
        let mut entries = archive
            .entries()
            .map_err(|e| self.error("cannot read tar", e))?;
        while let Some(entry) = guard.next(&mut entries) {
            let entry = entry.map_err(|e| self.stopped(e))?;
            let rel = self.entry_path(&entry)?;
            let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
                continue;
            };
            let Some(target) = name.as_bytes().strip_prefix(WHITEOUT_PREFIX) else {
                continue;
            };
            if name.as_bytes() == OPAQUE_WHITEOUT {
                whiteouts.opaque.push(parent.to_path_buf());
            } else if target.starts_with(WHITEOUT_PREFIX) || matches!(target, b"" | b"." | b"..") {
                tracing::debug!(layer = %self.digest, entry = %rel.display(), "ignoring special whiteout");
            } else {
                whiteouts
                    .removed
                    .push(parent.join(OsStr::from_bytes(target)));
            }
        }
        Ok(whiteouts)
    }

    /// Second pass: extracts every entry except whiteouts and special files.
    /// Returns the bytes the layer counted against the cap.
    pub(super) fn extract(
        &self,
        rootfs: &Path,
        dir_mtimes: &mut HashMap<PathBuf, u64>,
        owners: Owners,
    ) -> Result<u64, ImageError> {
        let mut guard = TarGuard::new(self.limits, self.below);
        let mut archive = self.open(&guard)?;
        let mut entries = archive
            .entries()
            .map_err(|e| self.error("cannot read tar", e))?;
        while let Some(entry) = guard.next(&mut entries) {
            let mut entry = entry.map_err(|e| self.stopped(e))?;
            let rel = self.entry_path(&entry)?;
            let kind = entry.header().entry_type();
            if rel.as_os_str().is_empty() || is_whiteout(&rel) || !self.wanted(&rel, kind) {
                continue;
            }
            let what = || format!("cannot unpack {}", rel.display());
            make_room(rootfs, &rel, kind.is_dir()).map_err(|e| self.error(&what(), e))?;
            let unpacked = entry
                .unpack_in(rootfs)
                .map_err(|e| self.error(&what(), e))?;
            if !unpacked {
                return Err(self.invalid(format!("refusing unsafe entry {}", rel.display())));
            }
            if let Some(path) = safe_join(rootfs, &rel) {
                owners
                    .apply(&path, entry.header())
                    .map_err(|e| self.error(&what(), e))?;
            }
            if kind.is_dir() {
                if owners.flattened() {
                    ensure_owner_rwx(rootfs, &rel).map_err(|e| self.error(&what(), e))?;
                }
                if let Ok(mtime) = entry.header().mtime() {
                    dir_mtimes.insert(rel, mtime);
                }
            }
        }
        Ok(guard.counted())
    }

    /// Whether an entry of this kind is unpacked; device nodes, FIFOs and the like are skipped.
    pub(super) fn wanted(&self, rel: &Path, kind: EntryType) -> bool {
        use EntryType::*;
        match kind {
            Regular | Continuous | GNUSparse | Directory | Symlink | Link => true,
            Char | Block | Fifo => {
                tracing::debug!(layer = %self.digest, entry = %rel.display(), ?kind, "skipping special file");
                false
            }
            _ => {
                tracing::debug!(layer = %self.digest, entry = %rel.display(), ?kind, "skipping entry type");
                false
            }
        }
    }

    /// An entry's path made relative (leading `/` and `.` dropped); `..` anywhere is an error.
    pub(super) fn entry_path<R: Read>(&self, entry: &tar::Entry<R>) -> Result<PathBuf, ImageError> {
        let path = entry.path().map_err(|e| self.error("bad entry path", e))?;
        let mut rel = PathBuf::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => rel.push(part),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    return Err(self.invalid(format!("unsafe path {} (has `..`)", path.display())));
                }
            }
        }
        Ok(rel)
    }
}

// ---------------------------------------------------------------------------
// Size accounting while reading tar streams
// ---------------------------------------------------------------------------

/// Why a guarded tar stream stopped.
#[derive(Debug)]
pub(crate) enum TarStop {
    /// Reading failed (a malformed stream, or extension headers over
    /// `MAX_TAR_EXTENSIONS`).
    Read(io::Error),
    /// The stream unpacks to more than the cap.
    TooLarge,
    /// The daemon is stopping.
    Stopped,
}

/// One pass over a tar stream under the image limits. It counts, before
/// each entry is handed out (so before anything of it is written), the bytes
/// from the end of the previous entry to the end of this one's data: headers
/// and extension headers, plus the data rounded up to 512 bytes, a sparse
/// file at its full length. That is the uncompressed tar stream's size. It
/// also bounds what the tar crate may read between two entries (it keeps
/// long names and PAX records in memory) and stops once the daemon does.
pub(crate) struct TarGuard {
    /// How far into the stream the reader may go; moved by `next`.
    ceiling: Arc<AtomicU64>,
    cancel: CancellationToken,
    max: u64,
    /// Counted against `max` before this stream (lower layers).
    below: u64,
    counted: u64,
    /// Where the data of the last entry handed out ends.
    end: u64,
}

impl TarGuard {
    pub(crate) fn new(limits: &ImageLimits, below: u64) -> TarGuard {
        TarGuard {
            ceiling: Arc::new(AtomicU64::new(MAX_TAR_EXTENSIONS)),
            cancel: limits.cancel.clone(),
            max: limits.max_size,
            below,
            counted: 0,
            end: 0,
        }
    }

    /// The decompressed stream, for `tar::Archive::new`.
    pub(crate) fn reader<'r>(&self, inner: impl Read + 'r) -> Box<dyn Read + 'r> {
        Box::new(Guarded {
            inner,
            pos: 0,
            ceiling: self.ceiling.clone(),
            cancel: self.cancel.clone(),
        })
    }

    /// The next entry, counted and checked against the cap.
    pub(crate) fn next<'a, R: Read>(
        &mut self,
        entries: &mut tar::Entries<'a, R>,
    ) -> Option<Result<tar::Entry<'a, R>, TarStop>> {
        if self.cancel.is_cancelled() {
            return Some(Err(TarStop::Stopped));
        }
        // The rest of the previous entry's data and padding, then the headers.
        let ceiling = self.end.saturating_add(511) & !511;
        self.ceiling.store(
            ceiling.saturating_add(MAX_TAR_EXTENSIONS),
            Ordering::Relaxed,
        );
        let next = entries.next();
        // The entry's own data is bounded by its size, which is counted.
        self.ceiling.store(u64::MAX, Ordering::Relaxed);
        let entry = match next? {
            Ok(entry) => entry,
            Err(_) if self.cancel.is_cancelled() => return Some(Err(TarStop::Stopped)),
            Err(e) => return Some(Err(TarStop::Read(e))),
        };
        let start = entry.raw_file_position();
        let data = entry.size().saturating_add(511) & !511;
        self.counted = self
            .counted
            .saturating_add(start.saturating_sub(self.end))
            .saturating_add(data);
        self.end = start.saturating_add(data);
        if self.max > 0 && self.below.saturating_add(self.counted) > self.max {
            return Some(Err(TarStop::TooLarge));
        }
        Some(Ok(entry))
    }

    /// Bytes counted in this stream so far.
    pub(crate) fn counted(&self) -> u64 {
        self.counted
    }
}

/// The decompressed tar stream: reads stop at the guard's ceiling and once
/// the daemon stops.
pub(super) struct Guarded<R> {
    pub(super) inner: R,
    pub(super) pos: u64,
    pub(super) ceiling: Arc<AtomicU64>,
    pub(super) cancel: CancellationToken,
}

impl<R: Read> Read for Guarded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.cancel.is_cancelled() {
            return Err(files::stopping());
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let room = self
            .ceiling
            .load(Ordering::Relaxed)
            .saturating_sub(self.pos);
        if room == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "an entry's extension headers (long names, PAX records) exceed {} bytes",
                    MAX_TAR_EXTENSIONS
                ),
            ));
        }
        let len = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..len])?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// An error and its sources, joined by ": " (the tar crate keeps the useful part in the source).
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

pub(super) fn is_whiteout(rel: &Path) -> bool {
    rel.file_name()
        .is_some_and(|n| n.as_bytes().starts_with(WHITEOUT_PREFIX))
}

/// `rootfs/rel` if every parent of it inside `rootfs` is a real directory (not a symlink),
/// so that acting on it cannot touch anything outside `rootfs`.
pub(super) fn safe_join(rootfs: &Path, rel: &Path) -> Option<PathBuf> {
    let mut path = rootfs.to_path_buf();
    let mut components = rel.components().peekable();
    while let Some(component) = components.next() {
        let Component::Normal(part) = component else {
            return None;
        };
        path.push(part);
        let is_last = components.peek().is_none();
        if !is_last && !fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            return None;
        }
    }
    Some(path)
}

/// Deletes whiteouts' targets. Paths under a symlink or a non-directory are left alone.
pub(super) fn apply_whiteouts(rootfs: &Path, whiteouts: &Whiteouts) -> io::Result<()> {
    for dir in &whiteouts.opaque {
        if let Some(dir) = safe_join(rootfs, dir).filter(|d| is_real_dir(d)) {
            for child in fs::read_dir(&dir)? {
                remove_any(&child?.path())?;
            }
        }
    }
    for path in &whiteouts.removed {
        if let Some(path) = safe_join(rootfs, path) {
            remove_any(&path)?;
        }
    }
    Ok(())
}

/// Removes what a lower layer left at `rel` unless a directory merges with a directory.
pub(super) fn make_room(rootfs: &Path, rel: &Path, new_is_dir: bool) -> io::Result<()> {
    let Some(path) = safe_join(rootfs, rel) else {
        return Ok(());
    };
    match fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() && new_is_dir => Ok(()),
        Ok(_) => remove_any(&path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes a file, symlink or directory tree without following symlinks; absent is fine.
pub(super) fn remove_any(path: &Path) -> io::Result<()> {
    let result = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

pub(super) fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Gives a just-unpacked directory `u+rwx`, so later entries, whiteouts and removal work unprivileged.
pub(super) fn ensure_owner_rwx(rootfs: &Path, rel: &Path) -> io::Result<()> {
    let Some(path) = safe_join(rootfs, rel) else {
        return Ok(());
    };
    let meta = fs::symlink_metadata(&path)?;
    let mode = meta.permissions().mode();
    if meta.is_dir() && mode & 0o700 != 0o700 {
        fs::set_permissions(&path, fs::Permissions::from_mode(mode | 0o700))?;
    }
    Ok(())
}

/// Sets directories' mtimes from their (topmost) layer entries, once nothing writes into them anymore.
pub(super) fn restore_dir_mtimes(rootfs: &Path, mtimes: &HashMap<PathBuf, u64>) {
    for (rel, &mtime) in mtimes {
        let Some(path) = safe_join(rootfs, rel).filter(|p| is_real_dir(p)) else {
            continue;
        };
        let modified = UNIX_EPOCH + Duration::from_secs(mtime);
        let result =
            File::open(&path).and_then(|f| f.set_times(FileTimes::new().set_modified(modified)));
        if let Err(e) = result {
            tracing::debug!(path = %path.display(), error = %e, "cannot set directory mtime");
        }
    }
}
