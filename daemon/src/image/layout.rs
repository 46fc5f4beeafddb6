//! Reading an OCI image layout: its header, the manifest for this host
//! through nested indexes, and every blob verified against its digest
//! with reads bounded by what its descriptor declares.

use std::fs::{self, File};
use std::io::{self};
use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest, OciLayout};
use serde::de::DeserializeOwned;
use sha2::{Digest as _, Sha256};

use super::files::Refused;
use super::*;

/// The digest of the manifest a local layout holds for this host, checking
/// the layout and verifying every blob on the way (nothing is unpacked).
/// For engines that read layouts themselves.
pub fn layout_digest(layout: &Path) -> Result<String, ImageError> {
    Ok(Layout::open(layout)?.resolve()?.digest)
}

/// What a layout resolves to: the manifest for this host and its config.
#[derive(Debug)]
pub(super) struct Resolved {
    pub(super) layout: Layout,
    pub(super) digest: String,
    pub(super) manifest: ImageManifest,
    pub(super) config: ImageConfig,
}

/// An OCI image layout directory whose header has been checked.
#[derive(Debug)]
pub(super) struct Layout {
    pub(super) dir: PathBuf,
    /// The cap and the stop signal for reading and unpacking it.
    pub(super) limits: ImageLimits,
}

/// Whether a descriptor points at an index or a manifest.
pub(super) enum BlobKind {
    Index,
    Manifest,
}

impl Layout {
    /// Checks that `dir` is a layout: a directory with a version 1 `oci-layout` and an `index.json`.
    pub(super) fn open(dir: &Path) -> Result<Layout, ImageError> {
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
    pub(super) fn limited(self, limits: ImageLimits) -> Layout {
        Layout { limits, ..self }
    }

    /// Follows index.json (and nested indexes) to this host's manifest, and reads its config.
    pub(super) fn resolve(self) -> Result<Resolved, ImageError> {
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

    pub(super) fn blob_kind(&self, desc: &Descriptor) -> Result<BlobKind, ImageError> {
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
    pub(super) fn read_config(
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
    pub(super) fn blob_path(&self, desc: &Descriptor) -> Result<PathBuf, ImageError> {
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
    pub(super) fn read_json_blob(&self, desc: &Descriptor) -> Result<Vec<u8>, ImageError> {
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
    pub(super) fn verify_blob_file(&self, desc: &Descriptor) -> Result<PathBuf, ImageError> {
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

pub(super) fn larger_than_declared(path: &Path, desc: &Descriptor) -> ImageError {
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
pub(super) fn verify(
    path: &Path,
    desc: &Descriptor,
    size: u64,
    sha256: &[u8],
) -> Result<(), ImageError> {
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

pub(super) fn parse_json<T: DeserializeOwned>(
    path: &Path,
    what: &str,
    bytes: &[u8],
) -> Result<T, ImageError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ImageError::invalid(path, format!("{what} is not valid: {e}")))
}

impl ImageConfig {
    pub(super) fn from_oci(image: &ImageConfiguration) -> ImageConfig {
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
pub(super) fn split_env(kv: &str) -> (String, String) {
    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
    (k.to_owned(), v.to_owned())
}
