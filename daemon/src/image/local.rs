//! The images a daemon keeps itself (the namespace engine's): references,
//! pulled and imported images, their blobs, and the unpacked cache.
//!
//! ```text
//! HOME/images/images.json        references → manifest digests, and each image's facts
//! HOME/images/blobs/sha256/<hex> every blob, shared between images (pull.rs)
//! HOME/images/layouts/<hex>/     an OCI layout per image whose `blobs` is the shared store
//! HOME/images/<hex>/rootfs       the unpacked image (RootfsCache in mod.rs)
//! ```
//!
//! **Invariants:** `images.json` is replaced atomically and only after the
//! blobs it names are stored; one pull per reference at a time (a second
//! caller waits and then finds the image); prune never removes an image a
//! box was created from, nor a blob such an image needs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::pull::{self, Blobs, Progress, Pulled};
use super::{Image, ImageConfig, ImageError, ImageLimits, RootfsCache};

/// `images.json`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Catalog {
    /// Normalized reference → manifest digest.
    refs: BTreeMap<String, String>,
    /// Manifest digest → what is known of the image.
    images: BTreeMap<String, Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    repo_digest: String,
    manifest_media_type: String,
    manifest_size: u64,
    config_digest: String,
    layers: Vec<(String, u64)>,
    os: String,
    architecture: String,
    added_at_ms: i64,
}

impl Entry {
    fn from_pulled(p: &Pulled) -> Entry {
        Entry {
            repo_digest: p.repo_digest.clone(),
            manifest_media_type: p.manifest_media_type.clone(),
            manifest_size: p.manifest_size,
            config_digest: p.config_digest.clone(),
            layers: p.layers.clone(),
            os: p.os.clone(),
            architecture: p.architecture.clone(),
            added_at_ms: now_ms(),
        }
    }

    fn blobs(&self, manifest: &str) -> Vec<String> {
        let mut b = vec![manifest.to_owned(), self.config_digest.clone()];
        b.extend(self.layers.iter().map(|(d, _)| d.clone()));
        b
    }
}

pub struct LocalImages {
    root: PathBuf,
    limits: ImageLimits,
    store: RootfsCache,
    blobs: Blobs,
    catalog: tokio::sync::Mutex<Catalog>,
    pulls: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl LocalImages {
    /// The images under `root`, unpacked and imported under `limits`,
    /// their unpacked files owned as `ownership` says (the namespace
    /// engine's id map).
    pub fn new(root: PathBuf, limits: ImageLimits, ownership: super::Ownership) -> LocalImages {
        let catalog = std::fs::read(root.join("images.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        LocalImages {
            store: RootfsCache::new(root.clone(), limits.clone(), ownership),
            limits,
            blobs: Blobs::new(root.join("blobs")),
            catalog: tokio::sync::Mutex::new(catalog),
            pulls: Mutex::default(),
            root,
        }
    }

    /// The unpacked image a box is created from: a local layout directory
    /// (an absolute path), or a reference, pulled only when no image has it.
    pub async fn for_create(&self, image: &str) -> Result<Image, ImageError> {
        if Path::new(image).is_absolute() {
            return self.store.load_layout(Path::new(image)).await;
        }
        let reference = pull::parse_reference(image)?;
        let name = reference.whole();
        let lock = self.pull_lock(&name);
        let _held = lock.lock().await;
        let known = self.catalog.lock().await.refs.get(&name).cloned();
        let digest = match known {
            Some(d) => d,
            None => {
                let pulled = pull::pull(&reference, &self.blobs, &Progress::default()).await?;
                self.record(&name, &pulled).await?
            }
        };
        let layout = self.layout(&digest).await?;
        self.store.load_layout(&layout).await
    }

    /// The unpacked root filesystem of `digest`, the image a box was made
    /// from (`image` as its spec names it): from the cache, else unpacked
    /// again from the stored layout, or from the local layout `image` when
    /// it still holds that digest.
    pub async fn for_start(&self, digest: &str, image: &str) -> Result<PathBuf, ImageError> {
        if let Some(rootfs) = self.store.cached(digest).await {
            return Ok(rootfs);
        }
        let gone = || {
            ImageError::NotFound(format!(
                "the image this box was made from ({digest}) is no longer stored; pull or import {image} again, or recreate the box"
            ))
        };
        let stored = super::sha256_hex(digest).map(|hex| self.root.join("layouts").join(hex));
        let layout = match stored {
            Some(l) if l.join("index.json").is_file() => l,
            _ if Path::new(image).is_absolute() => PathBuf::from(image),
            _ => return Err(gone()),
        };
        let unpacked = self.store.load_layout(&layout).await?;
        if unpacked.digest != digest {
            return Err(gone());
        }
        Ok(unpacked.rootfs)
    }

    /// Pulls `image` (always asking the registry what the reference names
    /// now), unpacks it, and describes it.
    pub async fn pull(
        &self,
        image: &str,
        progress: Progress,
    ) -> Result<crate::model::ImageInfo, ImageError> {
        let reference = pull::parse_reference(image)?;
        let name = reference.whole();
        let lock = self.pull_lock(&name);
        let _held = lock.lock().await;
        let pulled = pull::pull(&reference, &self.blobs, &progress).await?;
        let digest = self.record(&name, &pulled).await?;
        progress.send(crate::model::PullEvent::Unpacking).await;
        let layout = self.layout(&digest).await?;
        let image = self.store.load_layout(&layout).await?;
        Ok(self.describe(&digest, Some(&image.config)).await)
    }

    fn pull_lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
        pulls.entry(name.to_owned()).or_default().clone()
    }

    /// Names `digest` by `name` and remembers the image; returns the digest.
    async fn record(&self, name: &str, pulled: &Pulled) -> Result<String, ImageError> {
        let mut catalog = self.catalog.lock().await;
        let mut next = catalog.clone();
        let digest = pulled.manifest_digest.clone();
        let previous = next.images.get(&digest).map(|e| e.added_at_ms);
        let mut entry = Entry::from_pulled(pulled);
        entry.added_at_ms = previous.unwrap_or(entry.added_at_ms);
        next.images.insert(digest.clone(), entry);
        next.refs.insert(name.to_owned(), digest.clone());
        self.save(&next).await?;
        *catalog = next;
        Ok(digest)
    }

    async fn save(&self, catalog: &Catalog) -> Result<(), ImageError> {
        let path = self.root.join("images.json");
        let tmp = self
            .root
            .join(format!(".images.json.tmp-{:016x}", rand::random::<u64>()));
        let bytes = serde_json::to_vec_pretty(catalog).expect("serializable");
        let io = |e| ImageError::io(format!("write {}", path.display()), e);
        tokio::fs::create_dir_all(&self.root).await.map_err(io)?;
        tokio::fs::write(&tmp, bytes).await.map_err(io)?;
        tokio::fs::rename(&tmp, &path).await.map_err(io)
    }

    /// An OCI layout for one stored image (written once): its `index.json`
    /// names the manifest, its `blobs` is the shared store.
    async fn layout(&self, digest: &str) -> Result<PathBuf, ImageError> {
        let entry = self
            .catalog
            .lock()
            .await
            .images
            .get(digest)
            .cloned()
            .ok_or_else(|| ImageError::NotFound(format!("no image {digest}")))?;
        let hex = super::sha256_hex(digest)
            .ok_or_else(|| ImageError::NotFound(format!("bad digest {digest}")))?;
        let dir = self.root.join("layouts").join(hex);
        if dir.join("index.json").is_file() {
            return Ok(dir);
        }
        let parent = self.root.join("layouts");
        let tmp = parent.join(format!(".tmp-{hex}-{:016x}", rand::random::<u64>()));
        let io = |e| ImageError::io(format!("write {}", tmp.display()), e);
        std::fs::create_dir_all(&tmp).map_err(io)?;
        std::fs::write(tmp.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).map_err(io)?;
        let index = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": super::MEDIA_OCI_INDEX,
            "manifests": [{
                "mediaType": entry.manifest_media_type,
                "digest": digest,
                "size": entry.manifest_size,
            }],
        });
        std::fs::write(tmp.join("index.json"), index.to_string()).map_err(io)?;
        std::os::unix::fs::symlink("../../blobs", tmp.join("blobs")).map_err(io)?;
        if std::fs::rename(&tmp, &dir).is_err() {
            // Written meanwhile by another task: use theirs.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Ok(dir)
    }

    async fn describe(
        &self,
        digest: &str,
        config: Option<&ImageConfig>,
    ) -> crate::model::ImageInfo {
        let catalog = self.catalog.lock().await;
        describe(&catalog, digest, config)
    }

    pub async fn list(&self) -> Vec<crate::model::ImageInfo> {
        let catalog = self.catalog.lock().await;
        catalog
            .images
            .keys()
            .map(|d| describe(&catalog, d, None))
            .collect()
    }

    /// The manifest digest a reference or digest names.
    async fn find(&self, what: &str) -> Result<String, ImageError> {
        let catalog = self.catalog.lock().await;
        if catalog.images.contains_key(what) {
            return Ok(what.to_owned());
        }
        let name = pull::parse_reference(what)?.whole();
        catalog
            .refs
            .get(&name)
            .cloned()
            .ok_or_else(|| ImageError::NotFound(format!("no image {what} here (boxctl image ls)")))
    }

    pub async fn inspect(&self, what: &str) -> Result<crate::model::ImageInfo, ImageError> {
        let digest = self.find(what).await?;
        let layout = self.layout(&digest).await?;
        let config = self.store.load_layout(&layout).await.ok().map(|i| i.config);
        Ok(self.describe(&digest, config.as_ref()).await)
    }

    /// Untags `what` (a reference), or every reference of a digest; deletes
    /// the image when nothing names it any more and no box uses it. Untagging
    /// an image boxes use needs `force`; the image then stays, unnamed, until
    /// a prune finds no box using it.
    pub async fn remove(
        &self,
        what: &str,
        in_use: &HashMap<String, Vec<String>>,
        force: bool,
    ) -> Result<crate::model::RemovedImage, ImageError> {
        let digest = self.find(what).await?;
        if let Some(boxes) = in_use.get(&digest).filter(|b| !b.is_empty() && !force) {
            return Err(ImageError::InUse(format!(
                "image {what} is used by {}; remove those boxes first, or pass --force (the boxes keep their files)",
                boxes.join(", ")
            )));
        }
        let mut catalog = self.catalog.lock().await;
        let mut next = catalog.clone();
        let by_digest = next.images.contains_key(what);
        let name = (!by_digest)
            .then(|| pull::parse_reference(what).map(|r| r.whole()))
            .transpose()?;
        let mut untagged = Vec::new();
        next.refs.retain(|r, d| {
            let drop = *d == digest && name.as_ref().is_none_or(|n| n == r);
            if drop {
                untagged.push(r.clone());
            }
            !drop
        });
        let mut deleted = Vec::new();
        // An image a box uses stays (untagged) until prune finds it unused.
        if !next.refs.values().any(|d| *d == digest) && !in_use.contains_key(&digest) {
            next.images.remove(&digest);
            deleted.push(digest.clone());
        }
        self.save(&next).await?;
        *catalog = next;
        drop(catalog);
        if !deleted.is_empty() {
            self.sweep(in_use).await?;
        }
        Ok(crate::model::RemovedImage { untagged, deleted })
    }

    /// Deletes images nothing names and no box uses, then every blob,
    /// layout and unpacked tree no remaining image needs.
    pub async fn prune(
        &self,
        in_use: &HashMap<String, Vec<String>>,
    ) -> Result<crate::model::Pruned, ImageError> {
        let mut catalog = self.catalog.lock().await;
        let mut next = catalog.clone();
        let named: HashSet<String> = next.refs.values().cloned().collect();
        let mut deleted: Vec<String> = next
            .images
            .keys()
            .filter(|d| !named.contains(*d) && !in_use.contains_key(*d))
            .cloned()
            .collect();
        for d in &deleted {
            next.images.remove(d);
        }
        self.save(&next).await?;
        *catalog = next;
        drop(catalog);
        let (blobs, reclaimed) = self.sweep(in_use).await?;
        deleted.extend(blobs);
        deleted.sort();
        deleted.dedup();
        Ok(crate::model::Pruned {
            deleted,
            reclaimed_bytes: reclaimed,
        })
    }

    /// Removes what no remaining image needs: unpacked trees (unless a box
    /// uses them), layouts and blobs. Returns the removed blobs and bytes.
    async fn sweep(
        &self,
        in_use: &HashMap<String, Vec<String>>,
    ) -> Result<(Vec<String>, u64), ImageError> {
        let catalog = self.catalog.lock().await;
        let mut keep: HashSet<String> = catalog.images.keys().cloned().collect();
        keep.extend(in_use.keys().cloned());
        let needed: BTreeSet<String> = catalog
            .images
            .iter()
            .flat_map(|(d, e)| {
                let mut b = e.blobs(d);
                b.push(e.repo_digest.clone());
                b
            })
            .collect();
        let mut reclaimed = 0;
        for d in self.store.prune(&keep).await? {
            tracing::info!(digest = %d, "removed unpacked image");
        }
        if let Ok(dirs) = std::fs::read_dir(self.root.join("layouts")) {
            for dir in dirs.flatten() {
                let d = format!("sha256:{}", dir.file_name().to_string_lossy());
                if !keep.contains(&d) {
                    let _ = std::fs::remove_dir_all(dir.path());
                }
            }
        }
        let mut removed = Vec::new();
        for d in self.blobs.list() {
            if !needed.contains(&d) {
                let path = self.blobs.path(&d)?;
                reclaimed += std::fs::metadata(&path).map_or(0, |m| m.len());
                std::fs::remove_file(&path)
                    .map_err(|e| ImageError::io(format!("remove {}", path.display()), e))?;
                removed.push(d);
            }
        }
        Ok((removed, reclaimed))
    }

    /// Imports an OCI layout directory or a `docker save` tarball.
    pub async fn import(
        &self,
        path: &Path,
        reference: Option<&str>,
    ) -> Result<crate::model::ImageInfo, ImageError> {
        let staging = tempfile::Builder::new()
            .prefix(".import-")
            .tempdir_in({
                std::fs::create_dir_all(&self.root)
                    .map_err(|e| ImageError::io("create the image store", e))?;
                &self.root
            })
            .map_err(|e| ImageError::io("create a staging directory", e))?;
        let (layout, default_name) = if path.is_dir() {
            (path.to_path_buf(), super::import::layout_name(path))
        } else {
            let src = path.to_path_buf();
            let dest = staging.path().to_path_buf();
            let limits = self.limits.clone();
            super::blocking(move || super::import::from_tarball(&src, &dest, &limits)).await?
        };
        let name = match reference
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .or(default_name)
        {
            Some(n) => pull::parse_reference(&n)?.whole(),
            None => {
                return Err(ImageError::invalid(
                    path,
                    "it names no image; give one with --tag",
                ));
            }
        };
        // Verify the image as a whole (and learn its digest) before storing
        // anything: load_layout checks every blob it reads.
        let image = self.store.load_layout(&layout).await?;
        let blobs = &self.blobs;
        let manifest_path = layout
            .join("blobs/sha256")
            .join(super::sha256_hex(&image.digest).unwrap_or_default());
        // Read as every blob is (a regular file, bounded); checked again by `put`.
        let (mut file, _) = super::open_blob(&manifest_path, &image.digest)?;
        let manifest_bytes = super::files::read_bounded(&mut file, super::MAX_JSON_BLOB)
            .map_err(|e| ImageError::io(format!("read {}", manifest_path.display()), e))?
            .ok_or_else(|| ImageError::invalid(&manifest_path, "the manifest is too large"))?;
        let manifest: oci_spec::image::ImageManifest = serde_json::from_slice(&manifest_bytes)
            .map_err(|e| ImageError::invalid(&manifest_path, e.to_string()))?;
        let mut to_copy = vec![manifest.config()];
        to_copy.extend(manifest.layers());
        for desc in to_copy {
            let d = desc.digest().to_string();
            let src = layout
                .join("blobs/sha256")
                .join(super::sha256_hex(&d).unwrap_or_default());
            blobs
                .import_file(&src, &d, desc.size(), &self.limits.cancel)
                .await?;
        }
        blobs.put(&image.digest, &manifest_bytes).await?;
        let config_bytes = std::fs::read(blobs.path(manifest.config().digest().as_ref())?)
            .map_err(|e| ImageError::io("read the image config", e))?;
        let config: oci_spec::image::ImageConfiguration = serde_json::from_slice(&config_bytes)
            .map_err(|e| ImageError::invalid(path, e.to_string()))?;
        let pulled = Pulled {
            repo_digest: image.digest.clone(),
            manifest_digest: image.digest.clone(),
            manifest_media_type: manifest
                .media_type()
                .as_ref()
                .map_or(super::MEDIA_OCI_MANIFEST.to_owned(), |m| m.to_string()),
            manifest_size: manifest_bytes.len() as u64,
            layers: manifest
                .layers()
                .iter()
                .map(|l| (l.digest().to_string(), l.size()))
                .collect(),
            config_digest: manifest.config().digest().to_string(),
            os: config.os().to_string(),
            architecture: config.architecture().to_string(),
        };
        let digest = self.record(&name, &pulled).await?;
        Ok(self.describe(&digest, Some(&image.config)).await)
    }
}

fn describe(
    catalog: &Catalog,
    digest: &str,
    config: Option<&ImageConfig>,
) -> crate::model::ImageInfo {
    let entry = catalog.images.get(digest);
    let mut references: Vec<String> = catalog
        .refs
        .iter()
        .filter(|(_, d)| *d == digest)
        .map(|(r, _)| r.clone())
        .collect();
    references.sort();
    let mut info = crate::model::ImageInfo {
        references,
        digest: digest.to_owned(),
        ..Default::default()
    };
    if let Some(e) = entry {
        info.repo_digest = e.repo_digest.clone();
        info.size = e.layers.iter().map(|(_, s)| s).sum();
        info.layers = e.layers.len() as u32;
        info.os = e.os.clone();
        info.architecture = e.architecture.clone();
        info.added_at_ms = e.added_at_ms;
    }
    if let Some(c) = config {
        info.env = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        info.working_dir = c.working_dir.clone().unwrap_or_default();
        info.cmd = c.cmd.clone();
        info.entrypoint = c.entrypoint.clone();
    }
    info
}
