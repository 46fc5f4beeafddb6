//! The namespace engine's image store: local OCI image layouts, unpacked once.
//!
//! An OCI image layout is a directory holding `oci-layout`, `index.json` and
//! content-addressed blobs under `blobs/sha256/`. [`RootfsCache::load_layout`]
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
//! Owners: as `owners.rs` decides (shifted into the boxes' id range, kept,
//! or flattened for a box of one id). Device nodes and FIFOs are skipped,
//! xattrs dropped, and directories get at least `u+rwx` for their owner so
//! later layers, whiteouts and box removal can modify them; permission bits
//! (setuid/setgid/sticky included) and mtimes are kept.
//!
//! The code: `layout.rs` reads and verifies a layout, `unpack.rs` flattens
//! its layers, `cache.rs` ([`RootfsCache`]) keeps the result per digest.
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

mod cache;
mod layout;
mod unpack;

pub mod auth;
pub(crate) mod files;
pub mod import;
pub mod local;
pub mod owners;
pub mod pull;

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use cache::{RootfsCache, UNPACK_HELPER_ARG, unpack_helper_main};
pub use layout::layout_digest;
pub use owners::{Owners, Ownership};

pub(crate) use layout::{host_arch, open_blob, pick_manifest, read_layout_file, refused};
pub(crate) use unpack::{TarGuard, TarStop, with_causes};

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

#[cfg(test)]
mod tests;
