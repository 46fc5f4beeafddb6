//! Snapshots, clones and box archives of BoxLite boxes, mapped onto
//! BoxLite's own: `LiteBox::snapshots()` (create, list, restore, remove),
//! `clone_box` (the clone named by the new record's id, as every boxd box
//! is), `export` and `BoxliteRuntime::import_box`.
//!
//! None of these boots a VM (BoxLite pauses a running VM around the disk
//! work of a snapshot, clone or export, and runs it directly on a stopped
//! one); BoxLite refuses a restore while the VM runs, and so does boxd
//! first.
//!
//! A boxd archive of a BoxLite box is an uncompressed tar of the manifest
//! (`boxd-box.json`: format, engine, the spec without secret values, the
//! image digest) and BoxLite's own archive (`box.boxlite`, compressed
//! already), so boxd's spec travels with BoxLite's disks.

use std::io::Read;
use std::path::Path;

use ::boxlite::runtime::options::{BoxArchive, CloneOptions, ExportOptions, SnapshotOptions};
use serde::{Deserialize, Serialize};

use super::{BoxliteEngine, map_err};
use crate::engine::box_archive::{self, FORMAT, MANIFEST, bad, secret_free};
use crate::engine::{Created, Snapshot};
use crate::error::{Error, Result};
use crate::model::{BoxRecord, BoxSpec};

/// BoxLite's archive inside boxd's.
const INNER: &str = "box.boxlite";
const ENGINE: &str = "boxlite";

#[derive(Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub engine: String,
    pub spec: BoxSpec,
    pub image_digest: String,
}

/// A BoxLite snapshot as boxd shows it.
pub fn snapshot_of(s: ::boxlite::SnapshotInfo) -> Snapshot {
    Snapshot {
        name: s.name,
        created_at_ms: s.created_at.saturating_mul(1000),
        size_bytes: s.disk_info.size_bytes,
    }
}

fn never_ran(record: &BoxRecord, what: &str) -> Error {
    Error::FailedPrecondition(format!(
        "box {:?} has never been started: its microVM has no disks yet to {what}; start it once first",
        record.name
    ))
}

/// Reads the manifest and copies BoxLite's archive out to `inner`.
fn unwrap_archive(path: &Path, inner: Option<&Path>) -> Result<Manifest> {
    let file =
        std::fs::File::open(path).map_err(|e| Error::io(format!("open {}", path.display()), e))?;
    let mut archive = tar::Archive::new(file);
    let mut entries = archive.entries().map_err(bad)?;
    let manifest: Manifest = box_archive::manifest(&mut entries, ENGINE)?;
    let Some(inner) = inner else {
        return Ok(manifest);
    };
    let mut e = entries
        .next()
        .ok_or_else(|| bad(format!("it holds no {INNER}")))?
        .map_err(bad)?;
    if e.path_bytes().as_ref() != INNER.as_bytes() || !e.header().entry_type().is_file() {
        return Err(bad(format!("its second entry is not {INNER}")));
    }
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(inner)
        .map_err(|e| Error::io(format!("create {}", inner.display()), e))?;
    let size = e.size();
    std::io::copy(&mut (&mut e).take(size), &mut out)
        .map_err(|e| Error::io(format!("write {}", inner.display()), e))?;
    Ok(manifest)
}

/// Writes boxd's archive (manifest, then `inner`) to `out`.
fn wrap_archive(out: &Path, manifest: &Manifest, inner: &Path) -> Result<()> {
    let io_err = |e: std::io::Error| Error::io("write the box archive", e);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .map_err(io_err)?;
    let mut tar = tar::Builder::new(file);
    let text = serde_json::to_vec_pretty(manifest).map_err(|e| Error::Internal(e.to_string()))?;
    let mut h = tar::Header::new_gnu();
    h.set_size(text.len() as u64);
    h.set_mode(0o600);
    tar.append_data(&mut h, MANIFEST, text.as_slice())
        .map_err(io_err)?;
    let mut f = std::fs::File::open(inner).map_err(io_err)?;
    tar.append_file(INNER, &mut f).map_err(io_err)?;
    tar.into_inner().map_err(io_err)?.sync_all().map_err(io_err)
}

impl BoxliteEngine {
    async fn live(&self, record: &BoxRecord) -> Result<(::boxlite::BoxInfo, ::boxlite::LiteBox)> {
        self.handle(record)
            .await?
            .ok_or_else(|| Self::missing(record))
    }

    /// The box's handle, if its VM ever ran: BoxLite makes a box's disks
    /// at its first start, so before it there is nothing to copy.
    async fn with_disks(
        &self,
        record: &BoxRecord,
        what: &str,
    ) -> Result<(::boxlite::BoxInfo, ::boxlite::LiteBox)> {
        let (info, handle) = self.live(record).await?;
        if info.status == ::boxlite::BoxStatus::Configured {
            return Err(never_ran(record, what));
        }
        Ok((info, handle))
    }

    pub(super) async fn snapshot_create_impl(
        &self,
        record: &BoxRecord,
        name: &str,
    ) -> Result<Snapshot> {
        let (_, handle) = self.with_disks(record, "snapshot").await?;
        let s = handle
            .snapshots()
            .create(SnapshotOptions::default(), name)
            .await
            .map_err(|e| map_err("snapshot the box", e))?;
        Ok(snapshot_of(s))
    }

    pub(super) async fn snapshot_list_impl(&self, record: &BoxRecord) -> Result<Vec<Snapshot>> {
        let (_, handle) = self.live(record).await?;
        let list = handle
            .snapshots()
            .list()
            .await
            .map_err(|e| map_err("list the box's snapshots", e))?;
        Ok(list.into_iter().map(snapshot_of).collect())
    }

    pub(super) async fn snapshot_restore_impl(&self, record: &BoxRecord, name: &str) -> Result<()> {
        let (info, handle) = self.with_disks(record, "restore").await?;
        if info.status.is_active() {
            return Err(Error::FailedPrecondition(format!(
                "box {:?}'s microVM is {}; stop it before restoring a snapshot",
                record.name, info.status
            )));
        }
        handle
            .snapshots()
            .restore(name)
            .await
            .map_err(|e| map_err("restore the snapshot", e))
    }

    pub(super) async fn snapshot_remove_impl(&self, record: &BoxRecord, name: &str) -> Result<()> {
        let (_, handle) = self.live(record).await?;
        handle
            .snapshots()
            .remove(name)
            .await
            .map_err(|e| map_err("remove the snapshot", e))
    }

    pub(super) async fn clone_impl(
        &self,
        source: &BoxRecord,
        target: &BoxRecord,
    ) -> Result<Created> {
        let (_, handle) = self.with_disks(source, "clone").await?;
        handle
            .clone_box(
                CloneOptions::default(),
                Some(super::boxlite_name(target).to_owned()),
            )
            .await
            .map_err(|e| map_err("clone the BoxLite box", e))?;
        Ok(Created {
            image_digest: source.image_digest.clone(),
            warnings: Vec::new(),
        })
    }

    pub(super) async fn export_impl(&self, record: &BoxRecord, path: &Path) -> Result<u64> {
        let (_, handle) = self.with_disks(record, "export").await?;
        let parent = path.parent().ok_or_else(|| bad("no directory"))?;
        let work = tempfile::Builder::new()
            .prefix(".boxd-export-")
            .tempdir_in(parent)
            .map_err(|e| Error::io(format!("create a directory in {}", parent.display()), e))?;
        let inner = work.path().join(INNER);
        handle
            .export(ExportOptions::default(), &inner)
            .await
            .map_err(|e| map_err("export the BoxLite box", e))?;
        let manifest = Manifest {
            format: FORMAT,
            engine: ENGINE.into(),
            spec: secret_free(&record.spec),
            image_digest: record.image_digest.clone(),
        };
        let (out, target) = (work.path().join("archive"), path.to_path_buf());
        tokio::task::spawn_blocking(move || {
            wrap_archive(&out, &manifest, &inner)?;
            let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                &out,
                nix::fcntl::AT_FDCWD,
                &target,
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            )
            .map_err(|e| match e {
                nix::errno::Errno::EEXIST => {
                    Error::AlreadyExists(format!("{} exists", target.display()))
                }
                e => Error::io(format!("write {}", target.display()), e.into()),
            })?;
            drop(work);
            Ok(size)
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
    }

    pub(super) async fn archive_spec_impl(&self, path: &Path) -> Result<BoxSpec> {
        let path = path.to_path_buf();
        let m = tokio::task::spawn_blocking(move || unwrap_archive(&path, None))
            .await
            .map_err(|e| Error::Internal(e.to_string()))??;
        Ok(m.spec)
    }

    pub(super) async fn import_impl(&self, path: &Path, target: &BoxRecord) -> Result<Created> {
        let work = tempfile::Builder::new()
            .prefix(".boxd-import-")
            .tempdir_in(&target.dir)
            .map_err(|e| Error::io(format!("create a directory in {}", target.dir.display()), e))?;
        let inner = work.path().join(INNER);
        let (src, dst) = (path.to_path_buf(), inner.clone());
        let manifest = tokio::task::spawn_blocking(move || unwrap_archive(&src, Some(&dst)))
            .await
            .map_err(|e| Error::Internal(e.to_string()))??;
        self.runtime
            .import_box(
                BoxArchive::new(&inner),
                Some(super::boxlite_name(target).to_owned()),
            )
            .await
            .map_err(|e| map_err("import the BoxLite archive", e))?;
        Ok(Created {
            image_digest: manifest.image_digest,
            warnings: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxds_archive_wraps_boxlites_with_a_secret_free_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("in.boxlite");
        std::fs::write(&inner, b"boxlite bytes").unwrap();
        let mut spec = BoxSpec {
            image: "alpine".into(),
            ..BoxSpec::default()
        };
        spec.secrets.push(crate::egress::Secret {
            name: "TOKEN".into(),
            hosts: vec!["example.com".into()],
            placeholder: "PH".into(),
            value: "hunter2".into(),
        });
        let m = Manifest {
            format: FORMAT,
            engine: ENGINE.into(),
            spec: secret_free(&spec),
            image_digest: "sha256:abc".into(),
        };
        let out = dir.path().join("box.boxd");
        wrap_archive(&out, &m, &inner).unwrap();
        assert!(
            !std::fs::read(&out)
                .unwrap()
                .windows(7)
                .any(|w| w == b"hunter2")
        );
        let back = dir.path().join("back.boxlite");
        let read = unwrap_archive(&out, Some(&back)).unwrap();
        assert_eq!(read.image_digest, "sha256:abc");
        assert_eq!(read.spec.secrets[0].name, "TOKEN");
        assert_eq!(std::fs::read(&back).unwrap(), b"boxlite bytes");
        // Never written over an existing file.
        assert!(wrap_archive(&out, &m, &inner).is_err());
        assert!(unwrap_archive(&out, Some(&back)).is_err());
    }

    #[test]
    fn an_archive_of_another_engine_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ns.boxd");
        let mut tar = tar::Builder::new(std::fs::File::create(&out).unwrap());
        let text =
            br#"{"format":1,"engine":"namespace","layout":"overlay","spec":{},"image_digest":""}"#;
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        tar.append_data(&mut h, MANIFEST, &text[..]).unwrap();
        tar.into_inner().unwrap();
        let e = unwrap_archive(&out, None).unwrap_err();
        assert!(
            matches!(&e, Error::FailedPrecondition(m) if m.contains("namespace engine")),
            "{e}"
        );
    }
}
