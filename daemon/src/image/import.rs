//! Reading images handed over as files: an OCI layout's own name, and
//! `docker save` tarballs (OCI layouts inside, as docker 25 and later write
//! them, or the older `manifest.json` format, converted to a layout).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::{GZIP_MAGIC, ImageError, MEDIA_DOCKER_CONFIG, MEDIA_DOCKER_MANIFEST, MEDIA_OCI_INDEX};

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const CONTAINERD_NAME: &str = "io.containerd.image.name";

/// The name a layout gives itself: a full reference in its index's
/// annotations, or `localhost/<directory>:<tag>` for a bare tag.
pub fn layout_name(dir: &Path) -> Option<String> {
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("index.json")).ok()?).ok()?;
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

/// Unpacks a `docker save` tarball (plain or gzip) under `work` and returns
/// an OCI layout for it and the name it carries.
pub fn from_tarball(src: &Path, work: &Path) -> Result<(PathBuf, Option<String>), ImageError> {
    let extract = work.join("extract");
    fs::create_dir_all(&extract).map_err(|e| ImageError::io("create a staging directory", e))?;
    let mut file = fs::File::open(src)
        .map_err(|e| ImageError::io(format!("cannot open {}", src.display()), e))?;
    let mut magic = [0u8; 2];
    let gz = file.read_exact(&mut magic).is_ok() && magic == GZIP_MAGIC;
    let file = fs::File::open(src)
        .map_err(|e| ImageError::io(format!("cannot open {}", src.display()), e))?;
    let reader: Box<dyn Read> = if gz {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    // `unpack` refuses entries that would land outside `extract`.
    tar::Archive::new(reader)
        .unpack(&extract)
        .map_err(|e| ImageError::invalid(src, format!("not a readable tar archive: {e}")))?;

    let docker: Option<serde_json::Value> = fs::read(extract.join("manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let tag = docker.as_ref().and_then(|m| {
        m.get(0)?
            .get("RepoTags")?
            .get(0)?
            .as_str()
            .map(str::to_owned)
    });
    if extract.join("oci-layout").is_file() {
        let name = tag.or_else(|| layout_name(&extract));
        return Ok((extract, name));
    }
    let entry = docker.as_ref().and_then(|m| m.get(0)).ok_or_else(|| {
        ImageError::invalid(
            src,
            "neither an OCI layout nor a `docker save` archive (no oci-layout, no manifest.json)",
        )
    })?;
    let inside = |field: &serde_json::Value| -> Result<PathBuf, ImageError> {
        let rel = field
            .as_str()
            .filter(|p| !p.starts_with('/') && !p.split('/').any(|c| c == ".."))
            .ok_or_else(|| {
                ImageError::invalid(src, "manifest.json names a path outside the archive")
            })?;
        Ok(extract.join(rel))
    };
    let layout = work.join("layout");
    let blobs = layout.join("blobs/sha256");
    fs::create_dir_all(&blobs).map_err(|e| ImageError::io("create a layout", e))?;
    let config = store(&blobs, &inside(&entry["Config"])?)?;
    let mut layers = Vec::new();
    for l in entry["Layers"].as_array().into_iter().flatten() {
        let (digest, size) = store(&blobs, &inside(l)?)?;
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
        hex::encode(Sha256::digest(manifest.as_bytes()))
    );
    let io = |e| ImageError::io("write a layout", e);
    fs::write(blobs.join(&manifest_digest[7..]), &manifest).map_err(io)?;
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

/// Moves a file into a layout's blobs under its digest. Only a regular
/// file of the archive: never a symlink, which could point at a host file.
fn store(blobs: &Path, file: &Path) -> Result<(String, u64), ImageError> {
    match fs::symlink_metadata(file) {
        Ok(m) if m.file_type().is_file() => {}
        _ => {
            return Err(ImageError::invalid(
                file,
                "manifest.json names something that is not a regular file of the archive",
            ));
        }
    }
    let mut f =
        fs::File::open(file).map_err(|e| ImageError::io(format!("read {}", file.display()), e))?;
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut f, &mut hasher)
        .map_err(|e| ImageError::io(format!("read {}", file.display()), e))?;
    let hex = hex::encode(hasher.finalize());
    fs::rename(file, blobs.join(&hex))
        .map_err(|e| ImageError::io(format!("move {}", file.display()), e))?;
    Ok((format!("sha256:{hex}"), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tarball(entries: &[(&str, &[u8])], links: &[(&str, &str)]) -> tempfile::NamedTempFile {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, path, *data).unwrap();
        }
        for (path, target) in links {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, path, target).unwrap();
        }
        let f = tempfile::NamedTempFile::new().unwrap();
        fs::write(f.path(), b.into_inner().unwrap()).unwrap();
        f
    }

    #[test]
    fn hostile_docker_save_archives_are_refused() {
        let work = tempfile::tempdir().unwrap();
        // A manifest naming a path outside the archive.
        let t = tarball(
            &[(
                "manifest.json",
                br#"[{"Config":"../../etc/passwd","RepoTags":["x:1"],"Layers":[]}]"#,
            )],
            &[],
        );
        let e = from_tarball(t.path(), &work.path().join("a")).unwrap_err();
        assert!(e.to_string().contains("outside the archive"), "{e}");
        // A config that is a symlink to a host file.
        let t = tarball(
            &[(
                "manifest.json",
                br#"[{"Config":"c.json","RepoTags":["x:1"],"Layers":[]}]"#,
            )],
            &[("c.json", "/etc/passwd")],
        );
        let e = from_tarball(t.path(), &work.path().join("b")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // Not an image at all.
        let t = tarball(&[("hello.txt", b"hi")], &[]);
        let e = from_tarball(t.path(), &work.path().join("c")).unwrap_err();
        assert!(e.to_string().contains("neither an OCI layout"), "{e}");
        // Not a tar archive.
        let f = tempfile::NamedTempFile::new().unwrap();
        fs::write(f.path(), b"definitely not tar, but long enough to look at").unwrap();
        assert!(from_tarball(f.path(), &work.path().join("d")).is_err());
    }
}
