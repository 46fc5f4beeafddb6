//! Pulling images from OCI registries into the local blob store.
//!
//! [`pull`] resolves a reference to this host's platform manifest (following
//! an index when there is one), and stores the index, the manifest, the
//! config and every layer in [`Blobs`], the content-addressed store shared by
//! every image (a layer two images share is downloaded and kept once).
//!
//! **Invariants:** a blob file exists only once its bytes matched its digest
//! (downloads go to a temporary file that is renamed into place after the
//! check), so an interrupted pull leaves nothing a later pull would trust;
//! one download per digest at a time, so concurrent pulls of the same image
//! fetch each layer once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::{Client, Reference};
use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::model::{PullEvent, PullLayer};

use super::{
    ImageError, MAX_INDEX_DEPTH, MAX_JSON_BLOB, MEDIA_DOCKER_LIST, MEDIA_DOCKER_MANIFEST,
    MEDIA_OCI_INDEX, MEDIA_OCI_MANIFEST, auth, host_arch, pick_manifest, sha256_hex,
};

/// How many layers download at once.
const PARALLEL_LAYERS: usize = 3;

/// Where pull progress goes (nowhere for a pull nobody watches). Progress
/// reports are dropped rather than slowing the pull when the receiver lags;
/// the other events always arrive.
#[derive(Clone, Default)]
pub struct Progress(Option<mpsc::Sender<PullEvent>>);

impl Progress {
    pub fn new(tx: mpsc::Sender<PullEvent>) -> Progress {
        Progress(Some(tx))
    }

    pub async fn send(&self, event: PullEvent) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(event).await;
        }
    }

    fn report(&self, event: PullEvent) {
        if let Some(tx) = &self.0 {
            let _ = tx.try_send(event);
        }
    }
}

/// The content-addressed blob store, `ROOT/sha256/<hex>`.
pub struct Blobs {
    dir: PathBuf,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Blobs {
    pub fn new(root: PathBuf) -> Blobs {
        Blobs {
            dir: root.join("sha256"),
            locks: Mutex::default(),
        }
    }

    /// The file of a `sha256:<hex>` digest (which need not exist).
    pub fn path(&self, digest: &str) -> Result<PathBuf, ImageError> {
        let hex = sha256_hex(digest).ok_or_else(|| {
            ImageError::Registry(format!("unsupported digest {digest:?} (only sha256)"))
        })?;
        Ok(self.dir.join(hex))
    }

    pub fn has(&self, digest: &str) -> bool {
        self.path(digest).is_ok_and(|p| p.is_file())
    }

    /// Every stored digest.
    pub fn list(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let d = format!("sha256:{}", e.ok()?.file_name().to_str()?);
                sha256_hex(&d).is_some().then_some(d)
            })
            .collect()
    }

    fn lock(&self, digest: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(digest.to_owned()).or_default().clone()
    }

    /// A temporary file beside the blobs, for a blob being written.
    fn temp(&self, digest: &str) -> Result<PathBuf, ImageError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| ImageError::io(format!("create {}", self.dir.display()), e))?;
        let hex = sha256_hex(digest).unwrap_or("blob");
        Ok(self
            .dir
            .join(format!(".tmp-{hex}-{:016x}", rand::random::<u64>())))
    }

    /// Stores bytes already in memory, after checking them against `digest`.
    pub async fn put(&self, digest: &str, bytes: &[u8]) -> Result<(), ImageError> {
        let path = self.path(digest)?;
        let actual = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
        if actual != digest {
            return Err(ImageError::invalid(
                &path,
                format!("content does not match its digest {digest} (got {actual})"),
            ));
        }
        let lock = self.lock(digest);
        let _held = lock.lock().await;
        if path.is_file() {
            return Ok(());
        }
        let tmp = self.temp(digest)?;
        let io = |e| ImageError::io(format!("write {}", tmp.display()), e);
        tokio::fs::write(&tmp, bytes).await.map_err(io)?;
        tokio::fs::rename(&tmp, &path).await.map_err(io)
    }

    /// Stores a copy of a local file, checked against `digest` and `size`
    /// as it is read: a regular file only (see `files.rs`), read no further
    /// than one byte past `size`; the copy stops when `cancel` is.
    pub async fn import_file(
        &self,
        src: &std::path::Path,
        digest: &str,
        size: u64,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<(), ImageError> {
        let lock = self.lock(digest);
        let _held = lock.lock().await;
        let path = self.path(digest)?;
        if path.is_file() {
            return Ok(());
        }
        let tmp = self.temp(digest)?;
        let (src, tmp2, cancel) = (src.to_path_buf(), tmp.clone(), cancel.clone());
        let what = digest.to_owned();
        let actual = super::blocking(move || {
            let (input, _) = super::open_blob(&src, &what)?;
            let mut input = std::io::Read::take(input, size.saturating_add(1));
            let mut out = std::fs::File::create(&tmp2)
                .map_err(|e| ImageError::io(format!("create {}", tmp2.display()), e))?;
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut read = 0u64;
            loop {
                if cancel.is_cancelled() {
                    return Err(ImageError::Stopped);
                }
                let n = std::io::Read::read(&mut input, &mut buf)
                    .map_err(|e| ImageError::io(format!("read {}", src.display()), e))?;
                if n == 0 {
                    break;
                }
                read += n as u64;
                if read > size {
                    return Err(ImageError::invalid(
                        &src,
                        format!("blob is larger than the {size} bytes its descriptor says"),
                    ));
                }
                hasher.update(&buf[..n]);
                std::io::Write::write_all(&mut out, &buf[..n])
                    .map_err(|e| ImageError::io(format!("write {}", tmp2.display()), e))?;
            }
            Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
        })
        .await;
        match actual {
            Ok(a) if a == digest => tokio::fs::rename(&tmp, &path)
                .await
                .map_err(|e| ImageError::io(format!("store {}", path.display()), e)),
            other => {
                let _ = tokio::fs::remove_file(&tmp).await;
                match other {
                    Ok(a) => Err(ImageError::invalid(
                        &path,
                        format!("content does not match its digest {digest} (got {a})"),
                    )),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Downloads one blob unless it is stored already, reporting progress.
    async fn download(
        &self,
        client: &Client,
        reference: &Reference,
        desc: &OciDescriptor,
        tally: &Tally,
    ) -> Result<(), ImageError> {
        let lock = self.lock(&desc.digest);
        let _held = lock.lock().await;
        let path = self.path(&desc.digest)?;
        if path.is_file() {
            tally.add(desc, desc.size.max(0) as u64);
            return Ok(());
        }
        let tmp = self.temp(&desc.digest)?;
        let result = self.fetch(client, reference, desc, &tmp, tally).await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result?;
        tokio::fs::rename(&tmp, &path)
            .await
            .map_err(|e| ImageError::io(format!("store {}", path.display()), e))
    }

    async fn fetch(
        &self,
        client: &Client,
        reference: &Reference,
        desc: &OciDescriptor,
        tmp: &PathBuf,
        tally: &Tally,
    ) -> Result<(), ImageError> {
        let mut stream = client
            .pull_blob_stream(reference, desc)
            .await
            .map_err(|e| registry_error(reference, e))?
            .stream;
        let mut file = tokio::fs::File::create(tmp)
            .await
            .map_err(|e| ImageError::io(format!("create {}", tmp.display()), e))?;
        let mut hasher = Sha256::new();
        let mut got = 0u64;
        let expected = desc.size.max(0) as u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                if e.to_string().contains("digest") {
                    ImageError::Registry(format!(
                        "{} from {} does not match its digest ({e}): rejected",
                        desc.digest,
                        reference.resolve_registry()
                    ))
                } else {
                    ImageError::Registry(format!(
                        "downloading {} from {} broke off after {got} of {expected} bytes: {e}",
                        desc.digest,
                        reference.resolve_registry()
                    ))
                }
            })?;
            got += chunk.len() as u64;
            if got > expected {
                return Err(ImageError::Registry(format!(
                    "{} from {} is larger than the {expected} bytes its manifest says",
                    desc.digest,
                    reference.resolve_registry()
                )));
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| ImageError::io(format!("write {}", tmp.display()), e))?;
            tally.add(desc, chunk.len() as u64);
        }
        file.sync_all()
            .await
            .map_err(|e| ImageError::io(format!("write {}", tmp.display()), e))?;
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != desc.digest || got != expected {
            return Err(ImageError::Registry(format!(
                "{} from {} does not match its digest (got {actual}, {got} of {expected} bytes): rejected",
                desc.digest,
                reference.resolve_registry()
            )));
        }
        Ok(())
    }
}

/// Byte counts of a pull in progress, turned into progress reports.
struct Tally {
    progress: Progress,
    total: u64,
    state: Mutex<(u64, HashMap<String, u64>)>,
}

impl Tally {
    fn add(&self, desc: &OciDescriptor, n: u64) {
        let (done, layer_done) = {
            let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let (done, layers) = &mut *guard;
            *done += n;
            let l = layers.entry(desc.digest.clone()).or_default();
            *l += n;
            (*done, *l)
        };
        self.progress.report(PullEvent::Progress {
            layer_digest: desc.digest.clone(),
            layer_done,
            layer_size: desc.size.max(0) as u64,
            done_bytes: done,
            total_bytes: self.total,
        });
    }
}

/// What a pull stored.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The digest the reference resolved to (an index, or the manifest).
    pub repo_digest: String,
    /// This platform's manifest.
    pub manifest_digest: String,
    pub manifest_media_type: String,
    pub manifest_size: u64,
    pub layers: Vec<(String, u64)>,
    pub config_digest: String,
    pub os: String,
    pub architecture: String,
}

/// Parses a reference the way docker does (`alpine` is
/// `docker.io/library/alpine:latest`).
pub fn parse_reference(s: &str) -> Result<Reference, ImageError> {
    s.parse::<Reference>()
        .map_err(|e| ImageError::BadReference {
            reference: s.to_owned(),
            reason: e.to_string(),
        })
}

/// Plain HTTP for registries on this machine (as docker allows by default)
/// and for those in `BOXD_INSECURE_REGISTRIES` (comma-separated
/// `host:port`); HTTPS for every other.
fn client_for(registry: &str) -> Client {
    let host = registry.rsplit_once(':').map_or(registry, |(h, _)| h);
    let loopback = matches!(host, "localhost" | "[::1]") || host.starts_with("127.");
    let listed = std::env::var("BOXD_INSECURE_REGISTRIES")
        .unwrap_or_default()
        .split(',')
        .any(|r| r.trim() == registry);
    Client::new(ClientConfig {
        protocol: if loopback || listed {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        read_timeout: Some(std::time::Duration::from_secs(60)),
        connect_timeout: Some(std::time::Duration::from_secs(15)),
        ..Default::default()
    })
}

const ACCEPTED: [&str; 4] = [
    MEDIA_OCI_INDEX,
    MEDIA_OCI_MANIFEST,
    MEDIA_DOCKER_LIST,
    MEDIA_DOCKER_MANIFEST,
];

/// Pulls `reference` into `blobs`.
pub async fn pull(
    reference: &Reference,
    blobs: &Blobs,
    progress: &Progress,
) -> Result<Pulled, ImageError> {
    let registry = reference.resolve_registry().to_owned();
    let client = client_for(&registry);
    let auth = auth::for_registry(&registry);
    let (mut body, mut digest) = client
        .pull_manifest_raw(reference, &auth, &ACCEPTED)
        .await
        .map_err(|e| registry_error(reference, e))?;
    let repo_digest = digest.clone();
    let mut media_type = String::new();
    for depth in 0..=MAX_INDEX_DEPTH {
        blobs.put(&digest, &body).await?;
        media_type = media_type_of(&body);
        if media_type != MEDIA_OCI_INDEX && media_type != MEDIA_DOCKER_LIST {
            break;
        }
        if depth == MAX_INDEX_DEPTH {
            return Err(ImageError::Registry(format!(
                "{reference}: image indexes nested more than {MAX_INDEX_DEPTH} deep"
            )));
        }
        let index: ImageIndex = serde_json::from_slice(&body).map_err(|e| {
            ImageError::Registry(format!("{reference}: bad image index {digest}: {e}"))
        })?;
        let entry = pick_manifest(index.manifests(), "linux", host_arch())
            .map_err(|reason| ImageError::NotFound(format!("{reference}: the index {reason}")))?;
        let child = reference.clone_with_digest(entry.digest().to_string());
        (body, digest) = client
            .pull_manifest_raw(&child, &auth, &ACCEPTED)
            .await
            .map_err(|e| registry_error(reference, e))?;
    }
    let manifest: ImageManifest = serde_json::from_slice(&body)
        .map_err(|e| ImageError::Registry(format!("{reference}: bad manifest {digest}: {e}")))?;
    let config_desc = descriptor(manifest.config());
    if config_desc.size.max(0) as u64 > MAX_JSON_BLOB {
        return Err(ImageError::Registry(format!(
            "{reference}: config blob of {} bytes is too large",
            config_desc.size
        )));
    }
    if !blobs.has(&config_desc.digest) {
        let mut bytes = Vec::new();
        client
            .pull_blob(reference, &config_desc, &mut bytes)
            .await
            .map_err(|e| registry_error(reference, e))?;
        blobs.put(&config_desc.digest, &bytes).await?;
    }
    let config_bytes = tokio::fs::read(blobs.path(&config_desc.digest)?)
        .await
        .map_err(|e| ImageError::io("read the image config", e))?;
    let config: ImageConfiguration = serde_json::from_slice(&config_bytes)
        .map_err(|e| ImageError::Registry(format!("{reference}: bad image config: {e}")))?;

    let layers: Vec<OciDescriptor> = manifest.layers().iter().map(descriptor).collect();
    let total = layers
        .iter()
        .filter(|l| !blobs.has(&l.digest))
        .map(|l| l.size.max(0) as u64)
        .sum();
    progress
        .send(PullEvent::Started {
            reference: reference.whole(),
            digest: digest.clone(),
            layers: layers
                .iter()
                .map(|l| PullLayer {
                    digest: l.digest.clone(),
                    size: l.size.max(0) as u64,
                    cached: blobs.has(&l.digest),
                })
                .collect(),
            total_bytes: total,
        })
        .await;
    let tally = Tally {
        progress: progress.clone(),
        total,
        state: Mutex::default(),
    };
    let mut queue = layers
        .iter()
        .filter(|l| !blobs.has(&l.digest))
        .cloned()
        .collect::<Vec<_>>()
        .into_iter();
    let mut running = futures::stream::FuturesUnordered::new();
    for l in queue.by_ref().take(PARALLEL_LAYERS) {
        running.push(download_layer(
            blobs, &client, reference, l, &tally, progress,
        ));
    }
    while let Some(done) = running.next().await {
        done?;
        if let Some(l) = queue.next() {
            running.push(download_layer(
                blobs, &client, reference, l, &tally, progress,
            ));
        }
    }

    Ok(Pulled {
        repo_digest,
        manifest_digest: digest,
        manifest_media_type: media_type,
        manifest_size: body.len() as u64,
        layers: layers
            .iter()
            .map(|l| (l.digest.clone(), l.size.max(0) as u64))
            .collect(),
        config_digest: config_desc.digest,
        os: config.os().to_string(),
        architecture: config.architecture().to_string(),
    })
}

async fn download_layer(
    blobs: &Blobs,
    client: &Client,
    reference: &Reference,
    layer: OciDescriptor,
    tally: &Tally,
    progress: &Progress,
) -> Result<(), ImageError> {
    blobs.download(client, reference, &layer, tally).await?;
    progress.send(PullEvent::LayerDone(layer.digest)).await;
    Ok(())
}

fn descriptor(d: &oci_spec::image::Descriptor) -> OciDescriptor {
    OciDescriptor {
        media_type: d.media_type().to_string(),
        digest: d.digest().to_string(),
        size: d.size() as i64,
        ..Default::default()
    }
}

/// The media type a manifest or index declares, or the one its shape implies.
fn media_type_of(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    match v.get("mediaType").and_then(|m| m.as_str()) {
        Some(m) => m.to_owned(),
        None if v.get("manifests").is_some() => MEDIA_OCI_INDEX.to_owned(),
        None => MEDIA_OCI_MANIFEST.to_owned(),
    }
}

/// A registry error in words a user can act on.
fn registry_error(reference: &Reference, e: OciDistributionError) -> ImageError {
    let registry = reference.resolve_registry();
    match e {
        OciDistributionError::AuthenticationFailure(m) => ImageError::Denied(format!(
            "{registry} refused the credentials for {reference}: {m} (credentials come from {})",
            auth::files()
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        OciDistributionError::UnauthorizedError { .. } => ImageError::Denied(format!(
            "{registry} requires credentials for {reference}; log in with docker, podman or skopeo (`skopeo login {registry}`)"
        )),
        OciDistributionError::ImageManifestNotFoundError(m) => {
            ImageError::NotFound(format!("{reference}: {m}"))
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                )
            }) =>
        {
            ImageError::NotFound(format!("{reference} was not found in {registry}"))
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)) =>
        {
            ImageError::Denied(format!(
                "{registry} denied access to {reference}; log in with docker, podman or skopeo"
            ))
        }
        OciDistributionError::ServerError { code: 404, .. } => {
            ImageError::NotFound(format!("{reference} was not found in {registry}"))
        }
        OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => ImageError::Denied(format!(
            "{registry} denied access to {reference}; log in with docker, podman or skopeo"
        )),
        OciDistributionError::RequestError(e) => ImageError::Registry(format!(
            "cannot reach {registry} for {reference}: {}",
            error_chain(&e)
        )),
        other => ImageError::Registry(format!("pulling {reference} from {registry}: {other}")),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
