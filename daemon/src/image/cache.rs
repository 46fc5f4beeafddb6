//! The rootfs cache: each image unpacked once, by manifest digest, under
//! `HOME/images/<hex>/` (see the module docs of `image`), shared
//! read-only by every box made from it.

use std::collections::{HashMap, HashSet};
use std::fs::{self};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::layout::{Layout, Resolved};
use super::unpack::unpack_layers;
use super::*;

/// Unpacked images under a root directory (`HOME/images`), one per
/// manifest digest.
pub struct RootfsCache {
    root: PathBuf,
    limits: ImageLimits,
    /// One lock per manifest digest, so an image is unpacked (or pruned) by one task at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// How many unpacks this store has run (diagnostics and tests).
    unpacks: AtomicUsize,
    /// Who owns the unpacked files.
    ownership: Ownership,
}

impl RootfsCache {
    /// A store under `root` whose unpacks run under `limits` and whose
    /// unpacked files are owned as `ownership` says.
    pub fn new(root: PathBuf, limits: ImageLimits, ownership: Ownership) -> RootfsCache {
        RootfsCache {
            root,
            limits,
            locks: Mutex::default(),
            unpacks: AtomicUsize::new(0),
            ownership,
        }
    }

    /// Resolve a layout directory to an unpacked image, unpacking it into the cache the first time.
    pub async fn load_layout(&self, layout: &Path) -> Result<Image, ImageError> {
        let (layout, limits) = (layout.to_path_buf(), self.limits.clone());
        let resolved = blocking(move || Layout::open(&layout)?.limited(limits).resolve()).await?;
        let digest = resolved.digest.clone();
        let entry = self.entry_dir(&digest)?;

        // The guard moves into the blocking task, so a cancelled caller cannot let a
        // second unpack of the same digest start while the first is still running.
        let guard = self.lock_for(&digest).lock_owned().await;
        let tag = self.ownership.tag.clone();
        let complete = {
            let entry = entry.clone();
            let tag = tag.clone();
            blocking(move || Ok(is_complete(&entry, &tag))).await?
        };
        let rootfs = entry.join("rootfs");
        let config = resolved.config.clone();
        if !complete {
            let (root, dest) = (self.root.clone(), entry.clone());
            match &self.ownership.as_box_root {
                // Unprivileged with a range: only box root may give the
                // files the boxes' ids.
                Some(run) => {
                    let layout = resolved.layout.dir.clone();
                    let argv: Vec<std::ffi::OsString> = vec![
                        "/proc/self/exe".into(),
                        UNPACK_HELPER_ARG.into(),
                        root.into(),
                        dest.into(),
                        layout.into(),
                        digest.clone().into(),
                        tag.into(),
                        self.limits.max_size.to_string().into(),
                    ];
                    run(argv).await.map_err(|reason| {
                        ImageError::invalid(
                            &resolved.layout.dir,
                            format!("unpacking failed: {reason}"),
                        )
                    })?;
                    drop(guard);
                }
                None => {
                    let owners = self.ownership.owners;
                    blocking(move || {
                        let _guard = guard;
                        unpack_image(&root, &dest, &resolved, owners, &tag)
                    })
                    .await?;
                }
            }
            self.unpacks.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%digest, rootfs = %rootfs.display(), "unpacked image");
        }
        Ok(Image {
            digest,
            rootfs,
            config,
        })
    }

    /// Removes cached images whose digest is not in `keep` (for `image
    /// prune`, `local.rs`). Returns the removed digests, sorted. Unpacks in
    /// progress (`tmp-*`) are left alone.
    pub async fn prune(&self, keep: &HashSet<String>) -> Result<Vec<String>, ImageError> {
        let root = self.root.clone();
        let cached = blocking(move || cached_digests(&root)).await?;
        let mut removed = Vec::new();
        for digest in cached.into_iter().filter(|d| !keep.contains(d)) {
            let guard = self.lock_for(&digest).lock_owned().await;
            let (root, entry) = (self.root.clone(), self.entry_dir(&digest)?);
            match &self.ownership.as_box_root {
                Some(run) => {
                    let aside = blocking(move || move_aside(&root, &entry)).await?;
                    if let Some(aside) = aside {
                        let argv = vec![
                            "rm".into(),
                            "-rf".into(),
                            "--one-file-system".into(),
                            aside.clone().into(),
                        ];
                        run(argv).await.map_err(|e| {
                            ImageError::io(
                                format!("cannot remove {}", aside.display()),
                                io::Error::other(e),
                            )
                        })?;
                    }
                }
                None => blocking(move || remove_entry(&root, &entry)).await?,
            }
            drop(guard);
            tracing::info!(%digest, "pruned image");
            removed.push(digest);
        }
        removed.sort();
        Ok(removed)
    }

    /// The unpacked root filesystem of `digest`, when it is in the cache
    /// (whole, and unpacked with this store's owners).
    pub async fn cached(&self, digest: &str) -> Option<PathBuf> {
        let entry = self.entry_dir(digest).ok()?;
        let tag = self.ownership.tag.clone();
        let _guard = self.lock_for(digest).lock_owned().await;
        let check = entry.clone();
        let complete = blocking(move || Ok(is_complete(&check, &tag))).await.ok()?;
        complete.then(|| entry.join("rootfs"))
    }

    /// The cache directory for a manifest digest.
    fn entry_dir(&self, digest: &str) -> Result<PathBuf, ImageError> {
        let hex = sha256_hex(digest).ok_or_else(|| {
            ImageError::invalid(&self.root, format!("malformed digest {digest:?}"))
        })?;
        Ok(self.root.join(hex))
    }

    fn lock_for(&self, digest: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        locks.entry(digest.to_owned()).or_default().clone()
    }

    #[cfg(test)]
    pub(super) fn unpack_count(&self) -> usize {
        self.unpacks.load(Ordering::Relaxed)
    }
}

/// A name no other unpack (in this or another process) uses at the same time.
fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nanos}-{n}", std::process::id())
}

/// Whether a cache entry is whole and was unpacked with owners `tag`.
pub(super) fn is_complete(entry: &Path, tag: &str) -> bool {
    entry.join("complete").exists()
        && fs::read_to_string(entry.join("owners")).unwrap_or_else(|_| Ownership::default().tag)
            == tag
}

/// Unpacks an image into `root/tmp-*` and renames it to `dest` (the caller holds the digest lock).
pub(super) fn unpack_image(
    root: &Path,
    dest: &Path,
    image: &Resolved,
    owners: Owners,
    tag: &str,
) -> Result<(), ImageError> {
    fs::create_dir_all(root)
        .map_err(|e| ImageError::io(format!("cannot create {}", root.display()), e))?;
    if dest.exists() && !is_complete(dest, tag) {
        // Left by something other than a finished unpack, or unpacked
        // with other owners.
        remove_entry(root, dest)?;
    }
    let tmp = root.join(format!("tmp-{}", unique_suffix()));
    fs::create_dir(&tmp)
        .map_err(|e| ImageError::io(format!("cannot create {}", tmp.display()), e))?;
    if let Err(e) = fill_entry(&tmp, image, owners, tag) {
        discard(&tmp);
        return Err(e);
    }
    if let Err(e) = fs::rename(&tmp, dest) {
        discard(&tmp);
        if !is_complete(dest, tag) {
            return Err(ImageError::io(
                format!("cannot move {} to {}", tmp.display(), dest.display()),
                e,
            ));
        }
    }
    Ok(())
}

/// Writes a whole cache entry (rootfs, config.json, the owners' tag, then
/// the complete marker) into `dir`.
pub(super) fn fill_entry(
    dir: &Path,
    image: &Resolved,
    owners: Owners,
    tag: &str,
) -> Result<(), ImageError> {
    let rootfs = dir.join("rootfs");
    fs::create_dir(&rootfs)
        .and_then(|()| fs::set_permissions(&rootfs, fs::Permissions::from_mode(0o755)))
        .map_err(|e| ImageError::io(format!("cannot create {}", rootfs.display()), e))?;
    let root_header = {
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mode(0o755);
        h
    };
    owners
        .apply(&rootfs, &root_header)
        .map_err(|e| ImageError::io(format!("cannot own {}", rootfs.display()), e))?;
    unpack_layers(&image.layout, image.manifest.layers(), &rootfs, owners)?;
    let config = serde_json::to_vec_pretty(&image.config)
        .map_err(|e| ImageError::io("cannot serialize image config", e.into()))?;
    write_file(&dir.join("config.json"), &config)?;
    write_file(&dir.join("owners"), tag.as_bytes())?;
    write_file(&dir.join("complete"), image.digest.as_bytes())
}

pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    fs::write(path, bytes)
        .map_err(|e| ImageError::io(format!("cannot write {}", path.display()), e))
}

/// Removes a cache entry: renamed aside first, so a crash never leaves half an entry under its digest.
pub(super) fn remove_entry(root: &Path, entry: &Path) -> Result<(), ImageError> {
    match move_aside(root, entry)? {
        Some(aside) => fs::remove_dir_all(&aside)
            .map_err(|e| ImageError::io(format!("cannot remove {}", aside.display()), e)),
        None => Ok(()),
    }
}

/// Renames a cache entry to `root/tmp-*`, where it no longer counts;
/// `None` when there is none.
pub(super) fn move_aside(root: &Path, entry: &Path) -> Result<Option<PathBuf>, ImageError> {
    let aside = root.join(format!("tmp-{}", unique_suffix()));
    match fs::rename(entry, &aside) {
        Ok(()) => Ok(Some(aside)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ImageError::io(
            format!("cannot move {} aside", entry.display()),
            e,
        )),
    }
}

/// The argument that selects [`unpack_helper_main`] in `main`.
pub const UNPACK_HELPER_ARG: &str = "__unpack";

/// `boxd __unpack ROOT DEST LAYOUT DIGEST TAG MAX-SIZE`: unpacks a layout's image
/// into the cache entry `DEST` with the image's own owners
/// ([`Owners::Keep`]). Run as box root by the store of an unprivileged
/// daemon with a subordinate range (see [`owners`]).
pub fn unpack_helper_main(args: Vec<std::ffi::OsString>) -> ! {
    let path = |i: usize| args.get(i).map(PathBuf::from);
    let max_size = args.get(5).and_then(|a| a.to_str()?.parse().ok());
    let result = match (
        path(0),
        path(1),
        path(2),
        args.get(3),
        args.get(4),
        max_size,
    ) {
        (Some(root), Some(dest), Some(layout), Some(digest), Some(tag), Some(max_size)) => {
            Layout::open(&layout)
                .map(|l| {
                    l.limited(ImageLimits {
                        max_size,
                        ..Default::default()
                    })
                })
                .and_then(Layout::resolve)
                .and_then(|resolved| {
                    if resolved.digest.as_str() != digest {
                        return Err(ImageError::invalid(
                            &layout,
                            "the layout changed while it was unpacked",
                        ));
                    }
                    unpack_image(
                        &root,
                        &dest,
                        &resolved,
                        Owners::Keep,
                        &tag.to_string_lossy(),
                    )
                })
                .map_err(|e| e.to_string())
        }
        _ => Err("bad helper arguments".into()),
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}

/// Best-effort removal of a failed unpack's temp dir.
pub(super) fn discard(tmp: &Path) {
    if let Err(e) = fs::remove_dir_all(tmp) {
        tracing::warn!(path = %tmp.display(), error = %e, "cannot remove temporary image directory");
    }
}

/// Digests of the cache entries under `root`.
#[allow(dead_code)]
pub(super) fn cached_digests(root: &Path) -> Result<Vec<String>, ImageError> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ImageError::io(format!("cannot list {}", root.display()), e)),
    };
    let mut digests = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| ImageError::io(format!("cannot list {}", root.display()), e))?;
        let digest = format!("sha256:{}", entry.file_name().to_string_lossy());
        if sha256_hex(&digest).is_some() {
            digests.push(digest);
        }
    }
    Ok(digests)
}
