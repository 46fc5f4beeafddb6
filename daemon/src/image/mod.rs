//! The namespace engine's image store: local OCI image layouts, unpacked once.
//!
//! An OCI image layout is a directory holding `oci-layout`, `index.json` and
//! content-addressed blobs under `blobs/sha256/`. [`ImageStore::load_layout`]
//! picks the manifest for this host, verifies every blob it reads against its
//! digest, flattens the layers (bottom to top, applying OCI whiteouts) into one
//! directory and caches it under the manifest digest:
//!
//! ```text
//! <root>/<hex>/rootfs        the flattened root filesystem (boxes copy it)
//! <root>/<hex>/config.json   the ImageConfig, serialized
//! <root>/<hex>/complete      marker: the entry is whole
//! <root>/tmp-<unique>/       an unpack in progress (renamed into place when done)
//! ```
//!
//! Manifest choice: from an index (index.json, or an image index it points to,
//! nested up to 4 deep) the first entry whose platform is
//! `linux/<host arch>` wins; failing that, a lone entry, or the first entry when
//! no entry names a platform. `org.opencontainers.image.ref.name` annotations
//! are not consulted.
//!
//! Unpacking is unprivileged: ownership is not preserved (everything belongs to
//! the daemon's user), device nodes and FIFOs are skipped, xattrs are dropped,
//! and directories get at least `u+rwx` so later layers, whiteouts and box
//! removal can modify them. Permission bits (including setuid/setgid/sticky)
//! and mtimes are preserved otherwise.
//!
//! Safety: entries with `..` components are rejected, absolute entry paths are
//! made relative, and writes go through [`tar::Entry::unpack_in`], which
//! refuses to write through a symlink that resolves outside the root
//! filesystem (absolute symlinks are resolved against the host, so an image
//! writing *through* an absolute symlink is rejected rather than followed).
//! Whiteouts and replacements never follow symlinks.
//!
//! Hostile layouts: `oci-layout`, `index.json` and every blob must be regular
//! files, opened without following a symlink in their last component and
//! without waiting on a FIFO, so a blob that is a symlink to `/dev/zero` or
//! to a host file, a FIFO or a device is refused (see [`files`]; a layout's
//! *directories* may be symlinks, as the daemon's own layouts' `blobs` is).
//! Every read is bounded by what its descriptor declares (index.json and
//! the oci-layout file by fixed bounds): a blob larger than declared is
//! refused after reading one byte more than its size. The layers of an
//! image may unpack to at most [`ImageLimits::max_size`] bytes
//! (`max-image-size`), counted as the layers' uncompressed tar streams
//! (headers included; a sparse file at its full length) and checked before
//! an entry is written, and the tar reader may hold at most
//! `MAX_TAR_EXTENSIONS` bytes of long names and PAX records per entry. Work
//! in blocking threads stops at its next read once
//! [`ImageLimits::cancel`] is cancelled (daemon shutdown).
//!
//! Not checked: the config's `rootfs.diff_ids` against the uncompressed layers
//! (every blob is already verified against its digest).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{self, File, FileTimes};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub mod auth;
pub(crate) mod files;
pub mod import;
pub mod local;
pub mod owners;
pub mod pull;

use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest, OciLayout};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tar::EntryType;
use tokio_util::sync::CancellationToken;

use files::Refused;

pub use owners::{Owners, Ownership};

/// How deep index → index → ... → manifest chains may go.
const MAX_INDEX_DEPTH: usize = 4;
/// Largest JSON blob (index, manifest, config) read into memory.
pub(crate) const MAX_JSON_BLOB: u64 = 16 << 20;
/// Largest `oci-layout` file read.
const MAX_LAYOUT_HEADER: u64 = 64 << 10;
/// Most bytes of extension headers (GNU long names and long links, PAX
/// records) the tar reader may consume before one entry: the tar crate
/// holds them in memory, so a gzip bomb in a PAX header must stop early.
const MAX_TAR_EXTENSIONS: u64 = 4 << 20;

pub(crate) const MEDIA_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const MEDIA_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const MEDIA_OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub(crate) const MEDIA_DOCKER_LIST: &str =
    "application/vnd.docker.distribution.manifest.list.v2+json";
pub(crate) const MEDIA_DOCKER_MANIFEST: &str =
    "application/vnd.docker.distribution.manifest.v2+json";
pub(crate) const MEDIA_DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

/// Layer media types this store can unpack (plain or gzip tar).
const LAYER_MEDIA_TYPES: [&str; 6] = [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
];

pub(crate) const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
const ZSTD_UNSUPPORTED: &str = "zstd layers are not supported yet";

const WHITEOUT_PREFIX: &[u8] = b".wh.";
const OPAQUE_WHITEOUT: &[u8] = b".wh..wh..opq";

/// The bounds on image work, shared by the store and the importer.
#[derive(Debug, Clone)]
pub struct ImageLimits {
    /// The most bytes an image's layers (or an imported archive) may unpack
    /// to (`max-image-size`; 0: no limit). See the module docs for what counts.
    pub max_size: u64,
    /// Cancelled when the daemon stops: image work running in blocking
    /// threads (hashing, unpacking) ends at its next read.
    pub cancel: CancellationToken,
}

impl Default for ImageLimits {
    fn default() -> ImageLimits {
        ImageLimits {
            max_size: crate::config::DEFAULT_MAX_IMAGE_SIZE,
            cancel: CancellationToken::new(),
        }
    }
}

impl ImageLimits {
    /// The error of a stream that unpacks past the cap; `what` is "image" or "archive".
    pub(crate) fn too_large(&self, what: &str) -> String {
        format!(
            "the {what} unpacks to more than {} (max-image-size); raise `max-image-size` \
             (boxd --max-image-size, BOXD_MAX_IMAGE_SIZE or the configuration file) if that is expected",
            crate::config::format_size(self.max_size)
        )
    }
}

/// Caches unpacked images under a root directory (e.g. `HOME/images`).
pub struct ImageStore {
    root: PathBuf,
    limits: ImageLimits,
    /// One lock per manifest digest, so an image is unpacked (or pruned) by one task at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// How many unpacks this store has run (diagnostics and tests).
    unpacks: AtomicUsize,
    /// Who owns the unpacked files.
    ownership: Ownership,
}

/// An unpacked image.
#[derive(Debug, Clone)]
pub struct Image {
    /// Digest of the image manifest, "sha256:<hex>".
    pub digest: String,
    /// The flattened, unpacked root filesystem (read-only by convention: boxes copy it).
    pub rootfs: PathBuf,
    pub config: ImageConfig,
}

/// The parts of an image's runtime configuration a box needs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ImageConfig {
    /// From `config.Env` ("K=V", split at the first '=').
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub user: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The path is not an OCI image layout.
    #[error("{} is not an OCI image layout: {reason}", path.display())]
    NotALayout { path: PathBuf, reason: String },
    /// Digest mismatch, bad JSON, unsupported media type, no manifest for this
    /// platform, bad tar, unsafe path in a layer...
    #[error("invalid OCI image at {}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// Not a valid image reference.
    #[error("invalid image reference {reference:?}: {reason}")]
    BadReference { reference: String, reason: String },
    /// No such image, locally or in the registry.
    #[error("{0}")]
    NotFound(String),
    /// The registry refused the credentials (or asked for some).
    #[error("{0}")]
    Denied(String),
    /// The registry could not be reached or broke off.
    #[error("{0}")]
    Registry(String),
    /// The image is in use and `force` was not given.
    #[error("{0}")]
    InUse(String),
    /// The daemon is stopping: the work was cut short.
    #[error("{}", files::STOPPING)]
    Stopped,
}

impl ImageError {
    fn io(context: impl Into<String>, source: io::Error) -> ImageError {
        if files::is_stopping(&source) {
            return ImageError::Stopped;
        }
        ImageError::Io {
            context: context.into(),
            source,
        }
    }

    fn invalid(path: impl Into<PathBuf>, reason: impl Into<String>) -> ImageError {
        ImageError::Invalid {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl ImageStore {
    /// A store under `root` whose unpacks run under `limits` and whose
    /// unpacked files are owned as `ownership` says.
    pub fn new(root: PathBuf, limits: ImageLimits, ownership: Ownership) -> ImageStore {
        ImageStore {
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

    /// Remove cached images whose digest is not in `keep`. Returns the removed digests, sorted.
    /// Unpacks in progress (`tmp-*`) are left alone. Not wired to the API
    /// yet: `boxctl image prune` arrives with registry pulls.
    #[allow(dead_code)]
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
    fn unpack_count(&self) -> usize {
        self.unpacks.load(Ordering::Relaxed)
    }
}

/// Runs blocking filesystem work off the async runtime.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, ImageError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ImageError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ImageError::io("image task failed", io::Error::other(e)))?
}

/// The hex part of a `sha256:<64 lowercase hex>` digest; `None` for anything else
/// (other algorithms, uppercase, path separators...).
pub(crate) fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    let ok = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then_some(hex)
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

/// The digest of the manifest a local layout holds for this host, checking
/// the layout and verifying every blob on the way (nothing is unpacked).
/// For engines that read layouts themselves.
pub fn layout_digest(layout: &Path) -> Result<String, ImageError> {
    Ok(Layout::open(layout)?.resolve()?.digest)
}

// ---------------------------------------------------------------------------
// Reading the layout
// ---------------------------------------------------------------------------

/// What a layout resolves to: the manifest for this host and its config.
#[derive(Debug)]
struct Resolved {
    layout: Layout,
    digest: String,
    manifest: ImageManifest,
    config: ImageConfig,
}

/// An OCI image layout directory whose header has been checked.
#[derive(Debug)]
struct Layout {
    dir: PathBuf,
    /// The cap and the stop signal for reading and unpacking it.
    limits: ImageLimits,
}

/// Whether a descriptor points at an index or a manifest.
enum BlobKind {
    Index,
    Manifest,
}

impl Layout {
    /// Checks that `dir` is a layout: a directory with a version 1 `oci-layout` and an `index.json`.
    fn open(dir: &Path) -> Result<Layout, ImageError> {
        let not_layout = |reason: &str| ImageError::NotALayout {
            path: dir.to_path_buf(),
            reason: reason.into(),
        };
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(not_layout("not a directory")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(not_layout("no such directory"));
            }
            Err(e) => return Err(ImageError::io(format!("cannot stat {}", dir.display()), e)),
        }
        let header_path = dir.join("oci-layout");
        let header = read_layout_file(&header_path, "oci-layout", MAX_LAYOUT_HEADER)?
            .ok_or_else(|| not_layout("no oci-layout file"))?;
        let header: OciLayout = parse_json(&header_path, "oci-layout", &header)?;
        let version = header.image_layout_version();
        if !version.starts_with("1.") {
            return Err(ImageError::invalid(
                &header_path,
                format!("unsupported imageLayoutVersion {version:?} (expected 1.x)"),
            ));
        }
        // Only whether it is there: resolve() opens it, refusing anything but a regular file.
        if fs::symlink_metadata(dir.join("index.json")).is_err() {
            return Err(not_layout("no index.json"));
        }
        Ok(Layout {
            dir: dir.to_path_buf(),
            limits: ImageLimits::default(),
        })
    }

    /// The same layout, read and unpacked under `limits`.
    fn limited(self, limits: ImageLimits) -> Layout {
        Layout { limits, ..self }
    }

    /// Follows index.json (and nested indexes) to this host's manifest, and reads its config.
    fn resolve(self) -> Result<Resolved, ImageError> {
        let index_path = self.dir.join("index.json");
        let bytes = read_layout_file(&index_path, "index.json", MAX_JSON_BLOB)?
            .ok_or_else(|| ImageError::invalid(&self.dir, "index.json is missing"))?;
        let index: ImageIndex = parse_json(&index_path, "index.json", &bytes)?;
        let mut entries = index.manifests().clone();
        let mut source = "index.json".to_owned();
        for _ in 0..MAX_INDEX_DEPTH {
            let desc = pick_manifest(&entries, "linux", host_arch())
                .map_err(|reason| ImageError::invalid(&self.dir, format!("{source} {reason}")))?
                .clone();
            let bytes = self.read_json_blob(&desc)?;
            let what = desc.digest().to_string();
            match self.blob_kind(&desc)? {
                BlobKind::Index => {
                    let index: ImageIndex = parse_json(&self.dir, &what, &bytes)?;
                    entries = index.manifests().clone();
                    source = format!("image index {what}");
                }
                BlobKind::Manifest => {
                    let manifest: ImageManifest = parse_json(&self.dir, &what, &bytes)?;
                    let config = self.read_config(&what, &manifest)?;
                    return Ok(Resolved {
                        layout: self,
                        digest: what,
                        manifest,
                        config,
                    });
                }
            }
        }
        Err(ImageError::invalid(
            &self.dir,
            format!("image indexes are nested more than {MAX_INDEX_DEPTH} deep"),
        ))
    }

    fn blob_kind(&self, desc: &Descriptor) -> Result<BlobKind, ImageError> {
        match desc.media_type().to_string().as_str() {
            MEDIA_OCI_INDEX | MEDIA_DOCKER_LIST => Ok(BlobKind::Index),
            MEDIA_OCI_MANIFEST | MEDIA_DOCKER_MANIFEST => Ok(BlobKind::Manifest),
            other => Err(ImageError::invalid(
                &self.dir,
                format!("{} has unsupported media type {other}", desc.digest()),
            )),
        }
    }

    /// Reads and converts the image config a manifest points at.
    fn read_config(
        &self,
        manifest_digest: &str,
        manifest: &ImageManifest,
    ) -> Result<ImageConfig, ImageError> {
        let desc = manifest.config();
        let media_type = desc.media_type().to_string();
        if media_type != MEDIA_OCI_CONFIG && media_type != MEDIA_DOCKER_CONFIG {
            return Err(ImageError::invalid(
                &self.dir,
                format!(
                    "manifest {manifest_digest} is not a container image (config media type {media_type})"
                ),
            ));
        }
        let bytes = self.read_json_blob(desc)?;
        let config: ImageConfiguration = parse_json(&self.dir, desc.digest().as_ref(), &bytes)?;
        Ok(ImageConfig::from_oci(&config))
    }

    /// Where a descriptor's blob lives; rejects anything but a well-formed sha256 digest.
    fn blob_path(&self, desc: &Descriptor) -> Result<PathBuf, ImageError> {
        let digest = desc.digest().to_string();
        let hex = sha256_hex(&digest).ok_or_else(|| {
            ImageError::invalid(
                &self.dir,
                format!(
                    "unsupported digest {digest:?}: only sha256:<64 lowercase hex> is accepted"
                ),
            )
        })?;
        Ok(self.dir.join("blobs").join("sha256").join(hex))
    }

    /// Reads a small JSON blob into memory, verified against its descriptor.
    fn read_json_blob(&self, desc: &Descriptor) -> Result<Vec<u8>, ImageError> {
        let path = self.blob_path(desc)?;
        if desc.size() > MAX_JSON_BLOB {
            return Err(ImageError::invalid(
                &path,
                format!(
                    "blob {} is too large ({} bytes) for metadata",
                    desc.digest(),
                    desc.size()
                ),
            ));
        }
        let (mut file, _) = open_blob(&path, desc.digest().as_ref())?;
        let bytes = files::read_bounded(&mut file, desc.size())
            .map_err(|e| ImageError::io(format!("cannot read {}", path.display()), e))?
            .ok_or_else(|| larger_than_declared(&path, desc))?;
        verify(&path, desc, bytes.len() as u64, &Sha256::digest(&bytes))?;
        Ok(bytes)
    }

    /// Hashes a (possibly large) blob file and checks it against its
    /// descriptor, reading at most one byte more than the descriptor's size.
    fn verify_blob_file(&self, desc: &Descriptor) -> Result<PathBuf, ImageError> {
        let path = self.blob_path(desc)?;
        let (mut file, meta) = open_blob(&path, desc.digest().as_ref())?;
        if meta.len() > desc.size() {
            return Err(larger_than_declared(&path, desc));
        }
        let (size, sha256) = files::hash_bounded(&mut file, desc.size(), &self.limits.cancel)
            .map_err(|e| ImageError::io(format!("cannot read {}", path.display()), e))?;
        if size > desc.size() {
            return Err(larger_than_declared(&path, desc));
        }
        verify(&path, desc, size, &sha256)?;
        Ok(path)
    }
}

/// Opens a blob if it is a regular file (see [`files::open_regular`]).
pub(crate) fn open_blob(path: &Path, digest: &str) -> Result<(File, fs::Metadata), ImageError> {
    files::open_regular(path).map_err(|r| refused(path, &format!("blob {digest}"), r))
}

/// A refused image file as an error naming it.
pub(crate) fn refused(path: &Path, what: &str, refusal: Refused) -> ImageError {
    match refusal {
        Refused::Missing => ImageError::invalid(path, format!("{what} is missing")),
        Refused::NotRegular(kind) => ImageError::invalid(
            path,
            format!("{what} is {kind}, not a regular file; refusing it"),
        ),
        Refused::Io(e) => ImageError::io(format!("cannot open {}", path.display()), e),
    }
}

fn larger_than_declared(path: &Path, desc: &Descriptor) -> ImageError {
    ImageError::invalid(
        path,
        format!(
            "blob {} is larger than the {} bytes its descriptor says; refusing it",
            desc.digest(),
            desc.size()
        ),
    )
}

/// Checks a blob's size and sha256 against its descriptor.
fn verify(path: &Path, desc: &Descriptor, size: u64, sha256: &[u8]) -> Result<(), ImageError> {
    let expected = desc.digest().to_string();
    let actual = format!("sha256:{}", hex::encode(sha256));
    if actual != expected {
        return Err(ImageError::invalid(
            path,
            format!("blob {expected} has digest {actual}: it is corrupt or was tampered with"),
        ));
    }
    if size != desc.size() {
        return Err(ImageError::invalid(
            path,
            format!(
                "blob {expected} is {size} bytes but its descriptor says {}",
                desc.size()
            ),
        ));
    }
    Ok(())
}

/// Chooses which entry of an index to follow (see the module docs).
pub(crate) fn pick_manifest<'a>(
    entries: &'a [Descriptor],
    os: &str,
    arch: &str,
) -> Result<&'a Descriptor, String> {
    let for_platform = |d: &&Descriptor| {
        d.platform()
            .as_ref()
            .is_some_and(|p| p.os().to_string() == os && p.architecture().to_string() == arch)
    };
    if let Some(d) = entries.iter().find(for_platform) {
        return Ok(d);
    }
    match entries {
        [] => Err("lists no manifests".into()),
        [only] => Ok(only),
        [first, ..] if entries.iter().all(|d| d.platform().is_none()) => Ok(first),
        _ => {
            let available: Vec<String> = entries
                .iter()
                .filter_map(|d| d.platform().as_ref())
                .map(|p| format!("{}/{}", p.os(), p.architecture()))
                .collect();
            Err(format!(
                "has no manifest for {os}/{arch} (it has {})",
                available.join(", ")
            ))
        }
    }
}

/// The OCI name of this host's architecture.
pub(crate) fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Reads a layout's own file (`oci-layout`, `index.json`) of at most
/// `limit` bytes, or `None` if it does not exist. Anything but a regular
/// file (a symlink, a FIFO, a device) is refused.
pub(crate) fn read_layout_file(
    path: &Path,
    what: &str,
    limit: u64,
) -> Result<Option<Vec<u8>>, ImageError> {
    let mut file = match files::open_regular(path) {
        Ok((file, _)) => file,
        Err(Refused::Missing) => return Ok(None),
        Err(r) => return Err(refused(path, what, r)),
    };
    let bytes = files::read_bounded(&mut file, limit)
        .map_err(|e| ImageError::io(format!("cannot read {}", path.display()), e))?;
    match bytes {
        Some(bytes) => Ok(Some(bytes)),
        None => Err(ImageError::invalid(
            path,
            format!("{what} is larger than {limit} bytes; refusing it"),
        )),
    }
}

fn parse_json<T: DeserializeOwned>(path: &Path, what: &str, bytes: &[u8]) -> Result<T, ImageError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ImageError::invalid(path, format!("{what} is not valid: {e}")))
}

impl ImageConfig {
    fn from_oci(image: &ImageConfiguration) -> ImageConfig {
        let Some(config) = image.config() else {
            return ImageConfig::default();
        };
        let list = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
        ImageConfig {
            env: list(config.env()).iter().map(|kv| split_env(kv)).collect(),
            working_dir: config.working_dir().clone().filter(|d| !d.is_empty()),
            entrypoint: list(config.entrypoint()),
            cmd: list(config.cmd()),
            user: config.user().clone().filter(|u| !u.is_empty()),
        }
    }
}

/// Splits "K=V" at the first '='; an entry without '=' has an empty value.
fn split_env(kv: &str) -> (String, String) {
    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
    (k.to_owned(), v.to_owned())
}

// ---------------------------------------------------------------------------
// The cache
// ---------------------------------------------------------------------------

/// Whether a cache entry is whole and was unpacked with owners `tag`.
fn is_complete(entry: &Path, tag: &str) -> bool {
    entry.join("complete").exists()
        && fs::read_to_string(entry.join("owners")).unwrap_or_else(|_| Ownership::default().tag)
            == tag
}

/// Unpacks an image into `root/tmp-*` and renames it to `dest` (the caller holds the digest lock).
fn unpack_image(
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
fn fill_entry(dir: &Path, image: &Resolved, owners: Owners, tag: &str) -> Result<(), ImageError> {
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

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    fs::write(path, bytes)
        .map_err(|e| ImageError::io(format!("cannot write {}", path.display()), e))
}

/// Removes a cache entry: renamed aside first, so a crash never leaves half an entry under its digest.
fn remove_entry(root: &Path, entry: &Path) -> Result<(), ImageError> {
    match move_aside(root, entry)? {
        Some(aside) => fs::remove_dir_all(&aside)
            .map_err(|e| ImageError::io(format!("cannot remove {}", aside.display()), e)),
        None => Ok(()),
    }
}

/// Renames a cache entry to `root/tmp-*`, where it no longer counts;
/// `None` when there is none.
fn move_aside(root: &Path, entry: &Path) -> Result<Option<PathBuf>, ImageError> {
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
fn discard(tmp: &Path) {
    if let Err(e) = fs::remove_dir_all(tmp) {
        tracing::warn!(path = %tmp.display(), error = %e, "cannot remove temporary image directory");
    }
}

/// Digests of the cache entries under `root`.
#[allow(dead_code)]
fn cached_digests(root: &Path) -> Result<Vec<String>, ImageError> {
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

// ---------------------------------------------------------------------------
// Flattening layers
// ---------------------------------------------------------------------------

/// What one layer deletes from the layers below it.
#[derive(Debug, Default)]
struct Whiteouts {
    /// Paths named by `.wh.<name>` files.
    removed: Vec<PathBuf>,
    /// Directories marked with `.wh..wh..opq`: their lower contents go.
    opaque: Vec<PathBuf>,
}

/// A layer blob being read, with what to name in errors.
struct LayerBlob<'a> {
    path: PathBuf,
    digest: String,
    media_type: &'a str,
    /// The blob's size, as its (verified) descriptor says: no read goes past it.
    size: u64,
    /// The cap and the stop signal.
    limits: &'a ImageLimits,
    /// Bytes the layers below this one unpacked to (counted against the cap).
    below: u64,
}

/// Flattens `layers` (bottom to top) into `rootfs`.
fn unpack_layers(
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

fn check_layer_media_type(layer: &LayerBlob) -> Result<(), ImageError> {
    if LAYER_MEDIA_TYPES.contains(&layer.media_type) {
        Ok(())
    } else if layer.media_type.contains("zstd") {
        Err(layer.invalid(ZSTD_UNSUPPORTED))
    } else {
        Err(layer.invalid(format!("unsupported layer media type {}", layer.media_type)))
    }
}

impl LayerBlob<'_> {
    fn invalid(&self, reason: impl std::fmt::Display) -> ImageError {
        ImageError::invalid(&self.path, format!("layer {}: {reason}", self.digest))
    }

    /// An error while reading or writing this layer: malformed data is `Invalid`, the rest `Io`.
    fn error(&self, what: &str, e: io::Error) -> ImageError {
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
    fn stopped(&self, stop: TarStop) -> ImageError {
        match stop {
            TarStop::Read(e) => self.error("cannot read tar", e),
            TarStop::TooLarge => self.invalid(self.limits.too_large("image")),
            TarStop::Stopped => ImageError::Stopped,
        }
    }

    /// Opens the layer as a tar stream, decompressing gzip (detected by its
    /// magic bytes), read through `guard` and never past the blob's size.
    fn open(&self, guard: &TarGuard) -> Result<tar::Archive<Box<dyn Read>>, ImageError> {
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
    fn scan_whiteouts(&self) -> Result<Whiteouts, ImageError> {
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
    fn extract(
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
    fn wanted(&self, rel: &Path, kind: EntryType) -> bool {
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
    fn entry_path<R: Read>(&self, entry: &tar::Entry<R>) -> Result<PathBuf, ImageError> {
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
struct Guarded<R> {
    inner: R,
    pos: u64,
    ceiling: Arc<AtomicU64>,
    cancel: CancellationToken,
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

fn is_whiteout(rel: &Path) -> bool {
    rel.file_name()
        .is_some_and(|n| n.as_bytes().starts_with(WHITEOUT_PREFIX))
}

/// `rootfs/rel` if every parent of it inside `rootfs` is a real directory (not a symlink),
/// so that acting on it cannot touch anything outside `rootfs`.
fn safe_join(rootfs: &Path, rel: &Path) -> Option<PathBuf> {
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
fn apply_whiteouts(rootfs: &Path, whiteouts: &Whiteouts) -> io::Result<()> {
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
fn make_room(rootfs: &Path, rel: &Path, new_is_dir: bool) -> io::Result<()> {
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
fn remove_any(path: &Path) -> io::Result<()> {
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

fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Gives a just-unpacked directory `u+rwx`, so later entries, whiteouts and removal work unprivileged.
fn ensure_owner_rwx(rootfs: &Path, rel: &Path) -> io::Result<()> {
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
fn restore_dir_mtimes(rootfs: &Path, mtimes: &HashMap<PathBuf, u64>) {
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

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    use serde_json::{Value, json};

    use super::*;

    const MTIME: u64 = 1_600_000_000;
    const TAR: &str = "application/vnd.oci.image.layer.v1.tar";
    const TAR_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

    /// What a test layer entry is; the entry's third field is file content or link target.
    #[derive(Clone, Copy)]
    enum Kind {
        File(u32),
        Dir(u32),
        Symlink,
        Hardlink,
        Fifo,
    }
    use Kind::*;

    type TestEntry<'a> = (&'a str, Kind, &'a str);

    struct Layer<'a> {
        entries: Vec<TestEntry<'a>>,
        gzip: bool,
        media_type: &'a str,
    }

    fn plain<'a>(entries: Vec<TestEntry<'a>>) -> Layer<'a> {
        Layer {
            entries,
            gzip: false,
            media_type: TAR,
        }
    }

    fn gzipped<'a>(entries: Vec<TestEntry<'a>>) -> Layer<'a> {
        Layer {
            entries,
            gzip: true,
            media_type: TAR_GZIP,
        }
    }

    /// A tar archive with the entries' paths written verbatim (so `..` and `/` get through).
    fn tar_bytes(entries: &[TestEntry]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for &(path, kind, content) in entries {
            let mut h = tar::Header::new_gnu();
            h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            let (ty, mode, data) = match kind {
                File(mode) => (EntryType::Regular, mode, content.as_bytes()),
                Dir(mode) => (EntryType::Directory, mode, &[][..]),
                Symlink => (EntryType::Symlink, 0o777, &[][..]),
                Hardlink => (EntryType::Link, 0o644, &[][..]),
                Fifo => (EntryType::Fifo, 0o644, &[][..]),
            };
            if matches!(kind, Symlink | Hardlink) {
                h.set_link_name(content).unwrap();
            }
            h.set_entry_type(ty);
            h.set_mode(mode);
            h.set_size(data.len() as u64);
            h.set_mtime(MTIME);
            h.set_uid(4321);
            h.set_gid(4321);
            h.set_cksum();
            builder.append(&h, data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    /// Stores a blob and returns its descriptor.
    fn blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Value {
        let hex = hex::encode(Sha256::digest(bytes));
        let dir = layout.join("blobs/sha256");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(&hex), bytes).unwrap();
        json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()})
    }

    fn json_blob(layout: &Path, media_type: &str, value: &Value) -> Value {
        blob(layout, media_type, &serde_json::to_vec(value).unwrap())
    }

    fn default_config() -> Value {
        json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]})
    }

    /// Stores layers, config and manifest; returns the manifest descriptor.
    fn image(layout: &Path, layers: &[Layer], config: Value, arch: &str) -> Value {
        let layers: Vec<Value> = layers
            .iter()
            .map(|l| {
                let tar = tar_bytes(&l.entries);
                let bytes = if l.gzip { gzip(&tar) } else { tar };
                blob(layout, l.media_type, &bytes)
            })
            .collect();
        let config = json!({
            "architecture": arch, "os": "linux", "config": config,
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        let config = json_blob(layout, MEDIA_OCI_CONFIG, &config);
        let manifest = json!({"schemaVersion": 2, "mediaType": MEDIA_OCI_MANIFEST, "config": config, "layers": layers});
        json_blob(layout, MEDIA_OCI_MANIFEST, &manifest)
    }

    fn index(manifests: Vec<Value>) -> Value {
        json!({"schemaVersion": 2, "mediaType": MEDIA_OCI_INDEX, "manifests": manifests})
    }

    fn write_layout_files(layout: &Path, manifests: Vec<Value>) {
        fs::write(
            layout.join("oci-layout"),
            r#"{"imageLayoutVersion":"1.0.0"}"#,
        )
        .unwrap();
        fs::write(
            layout.join("index.json"),
            serde_json::to_vec(&index(manifests)).unwrap(),
        )
        .unwrap();
    }

    /// A layout with one image made of `layers`.
    fn make_layout(dir: &Path, layers: &[Layer]) -> PathBuf {
        make_layout_with_config(dir, layers, default_config())
    }

    fn make_layout_with_config(dir: &Path, layers: &[Layer], config: Value) -> PathBuf {
        let layout = dir.join("layout");
        fs::create_dir_all(&layout).unwrap();
        let manifest = image(&layout, layers, config, host_arch());
        write_layout_files(&layout, vec![manifest]);
        layout
    }

    struct Fixture {
        dir: tempfile::TempDir,
        store: ImageStore,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::new(
            dir.path().join("images"),
            ImageLimits::default(),
            Ownership::default(),
        );
        Fixture { dir, store }
    }

    fn invalid_reason(result: Result<Image, ImageError>) -> String {
        match result {
            Err(ImageError::Invalid { reason, .. }) => reason,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    /// Every path under `dir` (relative), for checking nothing stray was left.
    fn walk(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
                if is_real_dir(&p) {
                    stack.push(p);
                }
            }
        }
        out.sort();
        out
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[tokio::test]
    async fn single_layer() {
        let f = fixture();
        let layout = make_layout(
            f.dir.path(),
            &[plain(vec![
                ("./", Dir(0o755), ""),
                ("bin/", Dir(0o755), ""),
                ("bin/tool", File(0o4755), "#!/bin/sh\n"),
                ("bin/sh", Symlink, "tool"),
                ("bin/hard", Hardlink, "bin/tool"),
                ("/abs/file", File(0o600), "abs"),
                ("tmp/", Dir(0o1777), ""),
                ("dev/null", Fifo, ""),
            ])],
        );
        let image = f.store.load_layout(&layout).await.unwrap();
        let rootfs = &image.rootfs;
        assert!(image.digest.starts_with("sha256:"));
        assert_eq!(
            rootfs,
            &f.dir
                .path()
                .join("images")
                .join(&image.digest[7..])
                .join("rootfs")
        );
        assert_eq!(
            fs::read_to_string(rootfs.join("bin/tool")).unwrap(),
            "#!/bin/sh\n"
        );
        assert_eq!(mode(&rootfs.join("bin/tool")), 0o4755);
        assert_eq!(
            fs::read_link(rootfs.join("bin/sh")).unwrap(),
            Path::new("tool")
        );
        let (tool, hard) = (
            fs::metadata(rootfs.join("bin/tool")).unwrap(),
            fs::metadata(rootfs.join("bin/hard")).unwrap(),
        );
        assert_eq!(tool.ino(), hard.ino());
        assert_eq!(fs::read_to_string(rootfs.join("abs/file")).unwrap(), "abs");
        assert_eq!(mode(&rootfs.join("tmp")), 0o1777);
        assert!(!rootfs.join("dev/null").exists(), "FIFOs are skipped");
        // Ownership is ours, mtimes are the layer's (directories too).
        let me = fs::metadata(f.dir.path()).unwrap().uid();
        assert_eq!(tool.uid(), me);
        assert_eq!(tool.mtime() as u64, MTIME);
        assert_eq!(
            fs::metadata(rootfs.join("bin")).unwrap().mtime() as u64,
            MTIME
        );

        let entry = rootfs.parent().unwrap();
        assert!(entry.join("complete").exists());
        let config: ImageConfig =
            serde_json::from_slice(&fs::read(entry.join("config.json")).unwrap()).unwrap();
        assert_eq!(config, image.config);

        // The second time comes from the cache.
        let again = f.store.load_layout(&layout).await.unwrap();
        assert_eq!(again.rootfs, image.rootfs);
        assert_eq!(f.store.unpack_count(), 1);
    }

    #[tokio::test]
    async fn whiteouts_remove_lower_files_and_opaque_dirs() {
        let f = fixture();
        let layout = make_layout(
            f.dir.path(),
            &[
                plain(vec![
                    ("etc/a", File(0o644), "a"),
                    ("etc/b", File(0o644), "b"),
                    ("etc/gone/deep", File(0o644), "d"),
                    ("opq/x", File(0o644), "x"),
                    ("opq/sub/y", File(0o644), "y"),
                    ("keep/z", File(0o644), "z"),
                ]),
                gzipped(vec![
                    ("etc/.wh.a", File(0o644), ""),
                    ("etc/.wh.gone", File(0o644), ""),
                    ("opq/", Dir(0o755), ""),
                    ("opq/new", File(0o644), "new"),
                    // The marker comes after this layer's own entry: it must not delete it.
                    ("opq/.wh..wh..opq", File(0o644), ""),
                    ("etc/.wh.never-existed", File(0o644), ""),
                ]),
            ],
        );
        let image = f.store.load_layout(&layout).await.unwrap();
        assert_eq!(
            walk(&image.rootfs),
            ["etc", "etc/b", "keep", "keep/z", "opq", "opq/new"]
        );
    }

    #[tokio::test]
    async fn upper_layers_replace_files_with_dirs_and_back() {
        let f = fixture();
        let layout = make_layout(
            f.dir.path(),
            &[
                plain(vec![
                    ("a", File(0o644), "file"),
                    ("b/inner", File(0o644), "x"),
                    ("c", Symlink, "a"),
                ]),
                plain(vec![
                    ("a/", Dir(0o755), ""),
                    ("a/in", File(0o644), "y"),
                    ("b", File(0o644), "now a file"),
                    ("c", File(0o644), "c"),
                ]),
            ],
        );
        let rootfs = f.store.load_layout(&layout).await.unwrap().rootfs;
        assert_eq!(fs::read_to_string(rootfs.join("a/in")).unwrap(), "y");
        assert_eq!(fs::read_to_string(rootfs.join("b")).unwrap(), "now a file");
        assert_eq!(fs::read_to_string(rootfs.join("c")).unwrap(), "c");
        assert!(!fs::symlink_metadata(rootfs.join("c")).unwrap().is_symlink());
    }

    #[tokio::test]
    async fn digest_mismatch_is_rejected() {
        let f = fixture();
        let layout = make_layout(f.dir.path(), &[plain(vec![("a", File(0o644), "a")])]);
        // Corrupt the largest blob: the layer.
        let blobs = layout.join("blobs/sha256");
        let layer = fs::read_dir(&blobs)
            .unwrap()
            .map(|e| e.unwrap().path())
            .max_by_key(|p| fs::metadata(p).unwrap().len())
            .unwrap();
        let mut bytes = fs::read(&layer).unwrap();
        bytes[600] ^= 1;
        fs::write(&layer, bytes).unwrap();
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        let name = layer.file_name().unwrap().to_str().unwrap();
        assert!(
            reason.contains(&format!("blob sha256:{name} has digest")),
            "{reason}"
        );
        assert_eq!(
            walk(&f.dir.path().join("images")),
            Vec::<String>::new(),
            "no cache entry, no temp dir"
        );
    }

    #[tokio::test]
    async fn malformed_digests_are_rejected() {
        let f = fixture();
        let layout = make_layout(f.dir.path(), &[plain(vec![("a", File(0o644), "a")])]);
        for digest in [
            "sha256:../../../../etc/passwd",
            "sha512:abcd",
            &format!("sha256:{}", "A".repeat(64)),
        ] {
            let desc = json!({"mediaType": MEDIA_OCI_MANIFEST, "digest": digest, "size": 10});
            fs::write(
                layout.join("index.json"),
                serde_json::to_vec(&index(vec![desc])).unwrap(),
            )
            .unwrap();
            let reason = invalid_reason(f.store.load_layout(&layout).await);
            // oci-spec's own digest check may catch it first, while parsing index.json.
            assert!(
                reason.contains("digest") || reason.contains("index.json is not valid"),
                "{digest}: {reason}"
            );
        }
    }

    #[tokio::test]
    async fn not_a_layout() {
        let f = fixture();
        let dir = f.dir.path().join("empty");
        fs::create_dir(&dir).unwrap();
        match f.store.load_layout(&dir).await {
            Err(ImageError::NotALayout { reason, .. }) => {
                assert!(reason.contains("oci-layout"), "{reason}")
            }
            other => panic!("expected NotALayout, got {other:?}"),
        }
        fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        match f.store.load_layout(&dir).await {
            Err(ImageError::NotALayout { reason, .. }) => {
                assert!(reason.contains("index.json"), "{reason}")
            }
            other => panic!("expected NotALayout, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn dotdot_entry_does_not_escape() {
        let f = fixture();
        let layout = make_layout(
            f.dir.path(),
            &[plain(vec![
                ("ok", File(0o644), "ok"),
                ("../escape", File(0o644), "x"),
                ("a/../../../escape2", File(0o644), "x"),
            ])],
        );
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("unsafe path ../escape"), "{reason}");
        let all = walk(f.dir.path());
        assert!(!all.iter().any(|p| p.contains("escape")), "{all:?}");
        assert_eq!(walk(&f.dir.path().join("images")), Vec::<String>::new());
    }

    #[tokio::test]
    async fn symlinks_do_not_let_later_entries_escape() {
        let f = fixture();
        let outside = f.dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("victim"), "precious").unwrap();
        let target = outside.to_str().unwrap();
        let cases: Vec<Vec<Layer>> = vec![
            // Absolute symlink in a lower layer, written through by an upper one.
            vec![
                plain(vec![("evil", Symlink, target)]),
                plain(vec![("evil/pwned", File(0o644), "x")]),
            ],
            // Relative symlink climbing out, same layer.
            vec![plain(vec![
                ("up", Symlink, "../../../../../../../.."),
                ("up/pwned", File(0o644), "x"),
            ])],
            // Directory entry through the symlink.
            vec![
                plain(vec![("evil", Symlink, target)]),
                plain(vec![("evil/pwned/", Dir(0o755), "")]),
            ],
            // Hard links pointing outside.
            vec![plain(vec![
                ("evil", Symlink, target),
                ("pwned", Hardlink, "evil/victim"),
            ])],
            vec![plain(vec![("pwned", Hardlink, "../../../outside/victim")])],
        ];
        for (i, layers) in cases.iter().enumerate() {
            let dir = f.dir.path().join(format!("case{i}"));
            let layout = make_layout(&dir, layers);
            let reason = invalid_reason(f.store.load_layout(&layout).await);
            assert!(
                reason.contains("outside of destination"),
                "case {i}: {reason}"
            );
        }
        assert_eq!(walk(&outside), ["victim"]);
        assert_eq!(
            fs::read_to_string(outside.join("victim")).unwrap(),
            "precious"
        );

        // Whiteouts do not follow symlinks either (and a file over a symlink replaces the link).
        let layout = make_layout(
            &f.dir.path().join("wh"),
            &[
                plain(vec![
                    ("evil", Symlink, target),
                    ("link", Symlink, &format!("{target}/victim")),
                ]),
                plain(vec![
                    ("evil/.wh.victim", File(0o644), ""),
                    ("link", File(0o644), "mine"),
                ]),
            ],
        );
        let rootfs = f.store.load_layout(&layout).await.unwrap().rootfs;
        assert_eq!(fs::read_to_string(rootfs.join("link")).unwrap(), "mine");
        assert_eq!(
            fs::read_to_string(outside.join("victim")).unwrap(),
            "precious"
        );
    }

    #[tokio::test]
    async fn gzip_and_plain_layers() {
        let f = fixture();
        let mislabelled = Layer {
            entries: vec![("c", File(0o644), "c")],
            gzip: true,
            media_type: TAR,
        };
        let docker = Layer {
            entries: vec![("d", File(0o644), "d")],
            gzip: true,
            media_type: "application/vnd.docker.image.rootfs.diff.tar.gzip",
        };
        let layout = make_layout(
            f.dir.path(),
            &[
                plain(vec![("a", File(0o644), "a")]),
                gzipped(vec![("b", File(0o644), "b")]),
                mislabelled,
                docker,
            ],
        );
        let rootfs = f.store.load_layout(&layout).await.unwrap().rootfs;
        assert_eq!(walk(&rootfs), ["a", "b", "c", "d"]);
    }

    #[tokio::test]
    async fn zstd_layers_are_refused_clearly() {
        let f = fixture();
        let zstd = Layer {
            entries: vec![("a", File(0o644), "a")],
            gzip: false,
            media_type: "application/vnd.oci.image.layer.v1.tar+zstd",
        };
        let layout = make_layout(f.dir.path(), &[zstd]);
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(
            reason.contains("zstd layers are not supported yet"),
            "{reason}"
        );
    }

    /// An architecture that is not this host's.
    fn other_arch() -> &'static str {
        if host_arch() == "s390x" {
            "riscv64"
        } else {
            "s390x"
        }
    }

    fn with_platform(mut desc: Value, arch: &str) -> Value {
        desc["platform"] = json!({"os": "linux", "architecture": arch});
        desc
    }

    #[tokio::test]
    async fn index_picks_this_hosts_platform() {
        let f = fixture();
        let layout = f.dir.path().join("layout");
        fs::create_dir(&layout).unwrap();
        let foreign = image(
            &layout,
            &[plain(vec![("foreign", File(0o644), "")])],
            default_config(),
            other_arch(),
        );
        let native = image(
            &layout,
            &[plain(vec![("native", File(0o644), "")])],
            default_config(),
            host_arch(),
        );
        let nested = index(vec![
            with_platform(foreign.clone(), other_arch()),
            with_platform(native.clone(), host_arch()),
        ]);
        let nested = json_blob(&layout, MEDIA_OCI_INDEX, &nested);
        write_layout_files(&layout, vec![nested]);

        let image = f.store.load_layout(&layout).await.unwrap();
        assert_eq!(image.digest, native["digest"]);
        assert_eq!(walk(&image.rootfs), ["native"]);

        // Directly in index.json too; and no match is a clear error.
        write_layout_files(
            &layout,
            vec![
                with_platform(foreign.clone(), other_arch()),
                with_platform(native, host_arch()),
            ],
        );
        assert_eq!(
            f.store.load_layout(&layout).await.unwrap().digest,
            image.digest
        );
        write_layout_files(
            &layout,
            vec![
                with_platform(foreign.clone(), other_arch()),
                with_platform(foreign, "mips64"),
            ],
        );
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(
            reason.contains(&format!("no manifest for linux/{}", host_arch())),
            "{reason}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_calls_unpack_once() {
        let f = fixture();
        let layout = make_layout(f.dir.path(), &[gzipped(vec![("a", File(0o644), "a")])]);
        let (a, b, c) = tokio::join!(
            f.store.load_layout(&layout),
            f.store.load_layout(&layout),
            f.store.load_layout(&layout)
        );
        let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
        assert_eq!(a.rootfs, b.rootfs);
        assert_eq!(a.rootfs, c.rootfs);
        assert_eq!(f.store.unpack_count(), 1);
        let entries = walk(&f.dir.path().join("images"));
        assert_eq!(
            entries.iter().filter(|p| !p.contains('/')).count(),
            1,
            "{entries:?}"
        );
    }

    #[tokio::test]
    async fn config_is_parsed() {
        let f = fixture();
        let config = json!({
            "Env": ["PATH=/usr/bin:/bin", "EQ=a=b", "EMPTY="],
            "WorkingDir": "/work",
            "Entrypoint": ["/bin/sh", "-c"],
            "Cmd": ["echo hi"],
            "User": "1000:1000",
        });
        let layout =
            make_layout_with_config(f.dir.path(), &[plain(vec![("a", File(0o644), "")])], config);
        let image = f.store.load_layout(&layout).await.unwrap();
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            image.config,
            ImageConfig {
                env: vec![
                    pair("PATH", "/usr/bin:/bin"),
                    pair("EQ", "a=b"),
                    pair("EMPTY", "")
                ],
                working_dir: Some("/work".into()),
                entrypoint: vec!["/bin/sh".into(), "-c".into()],
                cmd: vec!["echo hi".into()],
                user: Some("1000:1000".into()),
            }
        );
    }

    #[tokio::test]
    async fn read_only_dirs_stay_writable_for_upper_layers() {
        let f = fixture();
        let layout = make_layout(
            f.dir.path(),
            &[
                plain(vec![
                    ("ro/", Dir(0o555), ""),
                    ("ro/a", File(0o444), "a"),
                    ("ro/sub/", Dir(0o500), ""),
                    ("ro/sub/x", File(0o444), "x"),
                ]),
                plain(vec![
                    ("ro/b", File(0o644), "b"),
                    ("ro/.wh.a", File(0o644), ""),
                    ("ro/sub/.wh..wh..opq", File(0o644), ""),
                ]),
            ],
        );
        let image = f.store.load_layout(&layout).await.unwrap();
        let rootfs = &image.rootfs;
        assert_eq!(walk(rootfs), ["ro", "ro/b", "ro/sub"]);
        assert_eq!(mode(&rootfs.join("ro")), 0o755);
        assert_eq!(mode(&rootfs.join("ro/sub")), 0o700);

        // And the entry can be pruned.
        let removed = f.store.prune(&HashSet::new()).await.unwrap();
        assert_eq!(removed, [image.digest]);
        assert!(!rootfs.exists());
    }

    #[tokio::test]
    async fn prune_keeps_what_it_is_told_to() {
        let f = fixture();
        let one = make_layout(
            &f.dir.path().join("one"),
            &[plain(vec![("one", File(0o644), "")])],
        );
        let two = make_layout(
            &f.dir.path().join("two"),
            &[plain(vec![("two", File(0o644), "")])],
        );
        let one = f.store.load_layout(&one).await.unwrap();
        let two = f.store.load_layout(&two).await.unwrap();
        let keep = HashSet::from([one.digest.clone()]);
        assert_eq!(f.store.prune(&keep).await.unwrap(), [two.digest]);
        assert!(one.rootfs.join("one").exists());
        assert!(!two.rootfs.exists());
        assert_eq!(f.store.prune(&keep).await.unwrap(), Vec::<String>::new());
    }

    // -----------------------------------------------------------------------
    // Hostile layouts: blobs that are not files, blobs larger than declared,
    // gzip bombs against the size cap, and work stopped at shutdown.
    // -----------------------------------------------------------------------

    fn fixture_with(max_size: u64) -> (Fixture, CancellationToken) {
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let limits = ImageLimits {
            max_size,
            cancel: cancel.clone(),
        };
        let store = ImageStore::new(dir.path().join("images"), limits, Ownership::default());
        (Fixture { dir, store }, cancel)
    }

    /// A layout whose layers are the given blobs; returns it and the blob
    /// paths: config, then layers, then the manifest.
    fn layout_of_blobs(dir: &Path, layers: &[(&str, Vec<u8>)]) -> (PathBuf, Vec<PathBuf>) {
        let layout = dir.join("layout");
        fs::create_dir_all(&layout).unwrap();
        let descs: Vec<Value> = layers.iter().map(|(m, b)| blob(&layout, m, b)).collect();
        let config = json!({
            "architecture": host_arch(), "os": "linux", "config": default_config(),
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        let config = json_blob(&layout, MEDIA_OCI_CONFIG, &config);
        let manifest = json!({"schemaVersion": 2, "mediaType": MEDIA_OCI_MANIFEST, "config": config, "layers": descs});
        let manifest = json_blob(&layout, MEDIA_OCI_MANIFEST, &manifest);
        write_layout_files(&layout, vec![manifest.clone()]);
        let path = |d: &Value| {
            layout
                .join("blobs/sha256")
                .join(&d["digest"].as_str().unwrap()[7..])
        };
        let mut paths = vec![path(&config)];
        paths.extend(descs.iter().map(path));
        paths.push(path(&manifest));
        (layout, paths)
    }

    fn replace_with_symlink(path: &Path, target: &Path) {
        fs::remove_file(path).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    fn replace_with_fifo(path: &Path) {
        fs::remove_file(path).unwrap();
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }

    fn assert_nothing_cached(f: &Fixture) {
        let images = f.dir.path().join("images");
        if images.exists() {
            assert_eq!(
                walk(&images),
                Vec::<String>::new(),
                "no cache entry, no temp dir"
            );
        }
    }

    #[tokio::test]
    async fn blobs_that_are_symlinks_are_refused() {
        let f = fixture();
        let layer = tar_bytes(&[("a", File(0o644), "a")]);
        // The config a symlink to a host file holding exactly its bytes:
        // its digest matches, and it is refused all the same.
        let (layout, paths) = layout_of_blobs(&f.dir.path().join("cfg"), &[(TAR, layer.clone())]);
        let host_file = f.dir.path().join("host-config.json");
        fs::copy(&paths[0], &host_file).unwrap();
        replace_with_symlink(&paths[0], &host_file);
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(
            reason.contains("is a symbolic link, not a regular file"),
            "{reason}"
        );

        // The layer a symlink to /dev/zero: refused at once, nothing read.
        let (layout, paths) = layout_of_blobs(&f.dir.path().join("zero"), &[(TAR, layer.clone())]);
        replace_with_symlink(&paths[1], Path::new("/dev/zero"));
        let begin = std::time::Instant::now();
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("is a symbolic link"), "{reason}");
        assert!(begin.elapsed() < Duration::from_secs(2));

        // The manifest a symlink to a host copy of itself.
        let (layout, paths) = layout_of_blobs(&f.dir.path().join("man"), &[(TAR, layer)]);
        let host_manifest = f.dir.path().join("host-manifest.json");
        fs::copy(&paths[2], &host_manifest).unwrap();
        replace_with_symlink(&paths[2], &host_manifest);
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("is a symbolic link"), "{reason}");
        assert_nothing_cached(&f);
    }

    #[tokio::test]
    async fn fifo_and_device_blobs_are_refused_without_waiting() {
        let f = fixture();
        let layer = tar_bytes(&[("a", File(0o644), "a")]);
        for (i, which) in [0, 1, 2].into_iter().enumerate() {
            let (layout, paths) = layout_of_blobs(
                &f.dir.path().join(format!("fifo{i}")),
                &[(TAR, layer.clone())],
            );
            replace_with_fifo(&paths[which]);
            let reason =
                tokio::time::timeout(Duration::from_secs(10), f.store.load_layout(&layout))
                    .await
                    .map(invalid_reason)
                    .expect("a FIFO blob must not block");
            assert!(reason.contains("is a FIFO, not a regular file"), "{reason}");
        }
        // index.json and oci-layout as FIFOs or symlinks.
        let (layout, _) = layout_of_blobs(&f.dir.path().join("index"), &[(TAR, layer.clone())]);
        replace_with_fifo(&layout.join("index.json"));
        let reason = tokio::time::timeout(Duration::from_secs(10), f.store.load_layout(&layout))
            .await
            .map(invalid_reason)
            .expect("a FIFO index.json must not block");
        assert!(reason.contains("index.json is a FIFO"), "{reason}");
        let (layout, _) = layout_of_blobs(&f.dir.path().join("index2"), &[(TAR, layer.clone())]);
        let host_index = f.dir.path().join("host-index.json");
        fs::copy(layout.join("index.json"), &host_index).unwrap();
        replace_with_symlink(&layout.join("index.json"), &host_index);
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("index.json is a symbolic link"), "{reason}");
        let (layout, _) = layout_of_blobs(&f.dir.path().join("header"), &[(TAR, layer)]);
        replace_with_symlink(&layout.join("oci-layout"), Path::new("/dev/zero"));
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("oci-layout is a symbolic link"), "{reason}");
        assert_nothing_cached(&f);
    }

    #[tokio::test]
    async fn blobs_larger_than_declared_are_refused() {
        let f = fixture();
        let layer = tar_bytes(&[("a", File(0o644), "a")]);
        for which in [0, 1, 2] {
            let (layout, paths) = layout_of_blobs(
                &f.dir.path().join(format!("big{which}")),
                &[(TAR, layer.clone())],
            );
            let mut file = fs::OpenOptions::new()
                .append(true)
                .open(&paths[which])
                .unwrap();
            file.write_all(&[b' '; 100]).unwrap();
            let reason = invalid_reason(f.store.load_layout(&layout).await);
            assert!(
                reason.contains("is larger than the"),
                "blob {which}: {reason}"
            );
        }
        // index.json over its bound.
        let (layout, _) = layout_of_blobs(&f.dir.path().join("index"), &[(TAR, layer)]);
        let file = fs::OpenOptions::new()
            .write(true)
            .open(layout.join("index.json"))
            .unwrap();
        file.set_len(MAX_JSON_BLOB + 1).unwrap();
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("index.json is larger than"), "{reason}");
        assert_nothing_cached(&f);
    }

    /// A gzip layer holding one file of `size` zero bytes.
    fn zeros_layer(name: &str, size: u64) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        {
            let mut tar = tar::Builder::new(&mut gz);
            let mut h = tar::Header::new_gnu();
            h.set_size(size);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, name, io::repeat(0).take(size))
                .unwrap();
            tar.finish().unwrap();
        }
        gz.finish().unwrap()
    }

    #[tokio::test]
    async fn a_gzip_bomb_stops_at_the_size_cap() {
        let (f, _) = fixture_with(4 << 20);
        let bomb = zeros_layer("bomb", 64 << 20);
        assert!(bomb.len() < 128 << 10, "{} bytes", bomb.len());
        let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, bomb)]);
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(
            reason.contains(
                "the image unpacks to more than 4 MiB (max-image-size); raise `max-image-size`"
            ),
            "{reason}"
        );
        assert_nothing_cached(&f);

        // The cap counts every layer: two of 3 MiB are over 4 MiB, one is not.
        let three = zeros_layer("three", 3 << 20);
        let (layout, _) = layout_of_blobs(
            &f.dir.path().join("two"),
            &[
                (TAR_GZIP, three.clone()),
                (TAR_GZIP, zeros_layer("other", 3 << 20)),
            ],
        );
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("more than 4 MiB"), "{reason}");
        assert_nothing_cached(&f);
        let (layout, _) = layout_of_blobs(&f.dir.path().join("one"), &[(TAR_GZIP, three)]);
        let image = f.store.load_layout(&layout).await.unwrap();
        assert_eq!(
            fs::metadata(image.rootfs.join("three")).unwrap().len(),
            3 << 20
        );

        // 0: no limit.
        let (f, _) = fixture_with(0);
        let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, zeros_layer("big", 8 << 20))]);
        f.store.load_layout(&layout).await.unwrap();
    }

    #[tokio::test]
    async fn the_cap_counts_headers_and_data() {
        // One file of 1 MiB + 1 byte: a 512-byte header, and data rounded up to 512.
        let counted = 512 + (1 << 20) + 512;
        let layer = zeros_layer("f", (1 << 20) + 1);
        let (f, _) = fixture_with(counted);
        let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, layer.clone())]);
        f.store.load_layout(&layout).await.unwrap();
        let (f, _) = fixture_with(counted - 1);
        let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, layer)]);
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("max-image-size"), "{reason}");
        assert_nothing_cached(&f);
    }

    #[tokio::test]
    async fn many_empty_entries_count_their_headers() {
        // 20,000 empty files: no data, 10 MB of tar headers.
        let (f, _) = fixture_with(4 << 20);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        {
            let mut tar = tar::Builder::new(&mut gz);
            for i in 0..20_000 {
                let mut h = tar::Header::new_gnu();
                h.set_size(0);
                h.set_mode(0o644);
                h.set_cksum();
                tar.append_data(&mut h, format!("f{i}"), io::empty())
                    .unwrap();
            }
            tar.finish().unwrap();
        }
        let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, gz.finish().unwrap())]);
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("more than 4 MiB"), "{reason}");
        assert_nothing_cached(&f);
    }

    #[tokio::test]
    async fn huge_extension_headers_are_refused_before_they_are_read() {
        let f = fixture();
        let huge = 64u64 << 20;
        for kind in [EntryType::XHeader, EntryType::GNULongName] {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            {
                let mut tar = tar::Builder::new(&mut gz);
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(kind);
                h.set_size(huge);
                h.set_cksum();
                tar.append_data(&mut h, "ext", io::repeat(b'a').take(huge))
                    .unwrap();
                let mut h = tar::Header::new_gnu();
                h.set_size(1);
                h.set_mode(0o644);
                h.set_cksum();
                tar.append_data(&mut h, "file", &b"x"[..]).unwrap();
                tar.finish().unwrap();
            }
            let (layout, _) = layout_of_blobs(
                &f.dir.path().join(format!("{kind:?}")),
                &[(TAR_GZIP, gz.finish().unwrap())],
            );
            let reason = invalid_reason(f.store.load_layout(&layout).await);
            assert!(reason.contains("extension headers"), "{kind:?}: {reason}");
        }
        assert_nothing_cached(&f);
    }

    #[tokio::test]
    async fn cancelled_work_stops_and_leaves_nothing() {
        let (f, cancel) = fixture_with(0);
        let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, zeros_layer("big", 1 << 20))]);
        cancel.cancel();
        match f.store.load_layout(&layout).await {
            Err(e) => assert!(matches!(e, ImageError::Stopped), "{e}"),
            Ok(_) => panic!("loaded after cancel"),
        }
        assert_nothing_cached(&f);
    }

    #[test]
    fn unpacking_stops_when_cancelled() {
        // Between entries (the guard) and inside one (the guarded reader).
        let dir = tempfile::tempdir().unwrap();
        let bytes = zeros_layer("big", 8 << 20);
        let (_, paths) = layout_of_blobs(dir.path(), &[(TAR_GZIP, bytes.clone())]);
        let cancel = CancellationToken::new();
        let limits = ImageLimits {
            max_size: 0,
            cancel: cancel.clone(),
        };
        let layer = LayerBlob {
            path: paths[1].clone(),
            digest: "sha256:test".into(),
            media_type: TAR_GZIP,
            size: bytes.len() as u64,
            limits: &limits,
            below: 0,
        };
        let rootfs = dir.path().join("rootfs");
        fs::create_dir(&rootfs).unwrap();
        let mut guard = TarGuard::new(&limits, 0);
        let mut archive = layer.open(&guard).unwrap();
        let mut entries = archive.entries().unwrap();
        let mut entry = guard.next(&mut entries).unwrap().unwrap();
        let mut buf = [0u8; 4096];
        entry.read_exact(&mut buf).unwrap();
        cancel.cancel();
        let e = entry.read_exact(&mut buf).unwrap_err();
        assert!(matches!(
            layer.error("cannot unpack big", e),
            ImageError::Stopped
        ));
        assert!(matches!(
            guard.next(&mut entries),
            Some(Err(TarStop::Stopped))
        ));
        assert!(matches!(layer.scan_whiteouts(), Err(ImageError::Stopped)));
        let mut mtimes = HashMap::new();
        assert!(matches!(
            layer.extract(&rootfs, &mut mtimes, Owners::Flatten),
            Err(ImageError::Stopped)
        ));
        assert!(!rootfs.join("big").exists());
    }

    #[test]
    fn a_huge_blob_stops_hashing_when_cancelled() {
        // A 1 TiB sparse blob, declared as such: hashing would take minutes.
        let dir = tempfile::tempdir().unwrap();
        let (layout, paths) =
            layout_of_blobs(dir.path(), &[(TAR, tar_bytes(&[("a", File(0o644), "a")]))]);
        let file = fs::OpenOptions::new().write(true).open(&paths[1]).unwrap();
        file.set_len(1 << 40).unwrap();
        let cancel = CancellationToken::new();
        let limits = ImageLimits {
            max_size: 0,
            cancel: cancel.clone(),
        };
        let layout = Layout::open(&layout).unwrap().limited(limits);
        let digest = format!("sha256:{}", paths[1].file_name().unwrap().to_str().unwrap());
        let desc: Descriptor =
            serde_json::from_value(json!({"mediaType": TAR, "digest": digest, "size": 1u64 << 40}))
                .unwrap();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            cancel.cancel();
        });
        let begin = std::time::Instant::now();
        let e = layout.verify_blob_file(&desc).unwrap_err();
        assert!(matches!(e, ImageError::Stopped), "{e}");
        assert!(
            begin.elapsed() < Duration::from_secs(5),
            "{:?}",
            begin.elapsed()
        );
        stopper.join().unwrap();
    }
}
