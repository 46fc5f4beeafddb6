//! Snapshots and clones of a namespace box's files.
//!
//! A box's own files are one of `BOX/upper` (its writes over the shared
//! image), `BOX/disk.img` (a file system of its own holding those writes)
//! or `BOX/rootfs` (a full copy). A snapshot is `BOX/snapshots/NAME/`: a
//! copy of that one thing (by descriptor, never following a symlink the
//! box may swap in while it runs: `treecopy.rs`; owners, whiteouts and
//! overlay xattrs kept; on a copy-on-write file system the data is
//! shared) and `snapshot.json`. A clone is the same copy into a new box's
//! directory.
//!
//! Invariants:
//! - a snapshot appears under its name only once complete (it is made as
//!   `snapshots/.NAME.tmp` and renamed);
//! - a restore swaps the copy in with one `renameat2(RENAME_EXCHANGE)`, so
//!   a crash leaves the box's old files or the new ones, never a mix; the
//!   overlay's work directory is emptied after;
//! - a running box with a disk of its own is neither snapshotted nor
//!   cloned (its file system is mounted and changing: a copy of the file
//!   would be torn); a running overlay box is copied live, file by file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{NamespaceEngine, disk_image, rootfs, upper, work};
use crate::engine::{Created, Snapshot};
use crate::error::{Error, Result};
use crate::model::BoxRecord;

/// Which of its own files a box has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `upper/`: writes over the shared image.
    Overlay,
    /// `disk.img`: a file system of its own holding the writes.
    Disk,
    /// `rootfs/`: a full copy of the image.
    Rootfs,
}

impl Layout {
    /// The layout of the box's files (and where they are).
    pub fn of(record: &BoxRecord) -> Result<(Layout, PathBuf)> {
        let found = [
            (Layout::Disk, disk_image(record)),
            (Layout::Overlay, upper(record)),
            (Layout::Rootfs, rootfs(record)),
        ]
        .into_iter()
        .find(|(_, p)| p.symlink_metadata().is_ok());
        found.ok_or_else(|| {
            Error::Internal(format!(
                "box {:?} has no files in {}",
                record.name,
                record.dir.display()
            ))
        })
    }

    /// The name of these files in a box's (or snapshot's) directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Layout::Overlay => "upper",
            Layout::Disk => "disk.img",
            Layout::Rootfs => "rootfs",
        }
    }
}

/// `snapshot.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    name: String,
    created_at_ms: i64,
    size_bytes: u64,
    layout: Layout,
}

fn snapshots_dir(record: &BoxRecord) -> PathBuf {
    record.dir.join("snapshots")
}

fn read_meta(dir: &Path) -> Option<Meta> {
    let bytes = std::fs::read(dir.join("snapshot.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

impl NamespaceEngine {
    fn is_running(&self, record: &BoxRecord) -> bool {
        self.running
            .lock()
            .expect("sandbox table")
            .contains_key(&record.id)
    }

    /// Refuses to copy a running box's own file system (see the module).
    fn copyable(&self, record: &BoxRecord, layout: Layout, what: &str) -> Result<()> {
        if layout == Layout::Disk && self.is_running(record) {
            return Err(Error::FailedPrecondition(format!(
                "box {:?} runs on a disk of its own, which cannot be copied while it is mounted; stop the box before {what}",
                record.name
            )));
        }
        Ok(())
    }

    pub(super) async fn snapshot_create_impl(
        &self,
        record: &BoxRecord,
        name: &str,
    ) -> Result<Snapshot> {
        let (layout, live) = Layout::of(record)?;
        self.copyable(record, layout, "taking a snapshot")?;
        let all = snapshots_dir(record);
        std::fs::create_dir_all(&all)
            .map_err(|e| Error::io(format!("create {}", all.display()), e))?;
        let done = all.join(name);
        if done.symlink_metadata().is_ok() {
            return Err(Error::AlreadyExists(format!(
                "box {:?} already has a snapshot named {name:?}",
                record.name
            )));
        }
        let tmp = all.join(format!(".{name}.tmp"));
        self.remove_tree(&tmp).await?;
        let made = async {
            std::fs::create_dir(&tmp)
                .map_err(|e| Error::io(format!("create {}", tmp.display()), e))?;
            self.copy_tree(&live, &tmp.join(layout.file_name()), "taking a snapshot")
                .await?;
            let size_bytes = self.measure(tmp.clone()).await.unwrap_or(0);
            let meta = Meta {
                name: name.to_owned(),
                created_at_ms: crate::model::now_ms(),
                size_bytes,
                layout,
            };
            let text = serde_json::to_vec(&meta).map_err(|e| Error::Internal(e.to_string()))?;
            std::fs::write(tmp.join("snapshot.json"), text)
                .map_err(|e| Error::io("write snapshot.json", e))?;
            std::fs::rename(&tmp, &done)
                .map_err(|e| Error::io(format!("rename to {}", done.display()), e))?;
            Ok(Snapshot {
                name: meta.name,
                created_at_ms: meta.created_at_ms,
                size_bytes: meta.size_bytes,
            })
        }
        .await;
        if made.is_err() {
            let _ = self.remove_tree(&tmp).await;
        }
        made
    }

    pub(super) fn snapshot_list_impl(&self, record: &BoxRecord) -> Result<Vec<Snapshot>> {
        let all = snapshots_dir(record);
        let entries = match std::fs::read_dir(&all) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("read {}", all.display()), e)),
        };
        let mut out: Vec<Snapshot> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| read_meta(&e.path()))
            .map(|m| Snapshot {
                name: m.name,
                created_at_ms: m.created_at_ms,
                size_bytes: m.size_bytes,
            })
            .collect();
        out.sort_by(|a, b| (a.created_at_ms, &a.name).cmp(&(b.created_at_ms, &b.name)));
        Ok(out)
    }

    fn snapshot_dir(&self, record: &BoxRecord, name: &str) -> Result<(PathBuf, Meta)> {
        let dir = snapshots_dir(record).join(name);
        let meta = read_meta(&dir).ok_or_else(|| {
            Error::NotFound(format!(
                "box {:?} has no snapshot named {name:?}",
                record.name
            ))
        })?;
        Ok((dir, meta))
    }

    pub(super) async fn snapshot_restore_impl(&self, record: &BoxRecord, name: &str) -> Result<()> {
        if self.is_running(record) {
            return Err(Error::FailedPrecondition(format!(
                "box {:?} is running; stop it before restoring a snapshot",
                record.name
            )));
        }
        let (dir, meta) = self.snapshot_dir(record, name)?;
        let (layout, live) = Layout::of(record)?;
        if layout != meta.layout {
            return Err(Error::FailedPrecondition(format!(
                "snapshot {name:?} holds the box's files as {:?}, but the box now keeps them as {:?}",
                meta.layout, layout
            )));
        }
        let staged = record.dir.join(format!("{}.restore", layout.file_name()));
        self.remove_tree(&staged).await?;
        let copied = self
            .copy_tree(
                &dir.join(layout.file_name()),
                &staged,
                "restoring a snapshot",
            )
            .await;
        if let Err(e) = copied {
            let _ = self.remove_tree(&staged).await;
            return Err(e);
        }
        nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &staged,
            nix::fcntl::AT_FDCWD,
            &live,
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        )
        .map_err(|e| Error::io("swap in the snapshot's files", e.into()))?;
        self.disk.stale(&record.id);
        // `staged` now holds the files as they were; the overlay's work
        // directory may hold state of the upper it belonged to.
        self.remove_tree(&staged).await?;
        if layout == Layout::Overlay {
            self.remove_tree(&work(record)).await?;
            self.make_work(record)?;
        }
        Ok(())
    }

    pub(super) async fn snapshot_remove_impl(&self, record: &BoxRecord, name: &str) -> Result<()> {
        let (dir, _) = self.snapshot_dir(record, name)?;
        // Renamed first, so a half-removed snapshot is never listed.
        let doomed = snapshots_dir(record).join(format!(".{name}.rm"));
        self.remove_tree(&doomed).await?;
        std::fs::rename(&dir, &doomed)
            .map_err(|e| Error::io(format!("remove {}", dir.display()), e))?;
        self.remove_tree(&doomed).await
    }

    /// Copies `source`'s files, image defaults and (for an overlay) a new
    /// work directory into `target`'s directory; on failure removes what
    /// it made.
    pub(super) async fn clone_impl(
        &self,
        source: &BoxRecord,
        target: &BoxRecord,
    ) -> Result<Created> {
        let (layout, live) = Layout::of(source)?;
        self.copyable(source, layout, "cloning it")?;
        // The copy keeps the source's ids; they become the clone's own as
        // it starts (`own_files`).
        self.claim_ids(target)?;
        let made = async {
            self.copy_tree(
                &live,
                &target.dir.join(layout.file_name()),
                "copying the box's files",
            )
            .await?;
            std::fs::copy(
                super::image_config_path(source),
                super::image_config_path(target),
            )
            .map_err(|e| Error::io("copy image.json", e))?;
            if layout == Layout::Overlay {
                self.make_work(target)?;
            }
            Ok(Created {
                image_digest: source.image_digest.clone(),
                warnings: Vec::new(),
            })
        }
        .await;
        if made.is_err() {
            let _ = self.remove_tree(&target.dir.join(layout.file_name())).await;
        }
        made
    }
}
