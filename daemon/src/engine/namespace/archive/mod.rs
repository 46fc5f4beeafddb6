//! Box archives of the namespace engine (`ExportBox`, `ImportBox`).
//!
//! An archive is a gzip-compressed tar: first `boxd-box.json` ([`Manifest`]:
//! the format, the spec without any secret's value, the image's reference
//! and digest, and how the files are kept), then the box's own files under
//! `files/` (an overlay's upper directory, or a full copy of the root).
//! Owners are the box's own ids (box root is 0), so an archive moves
//! between a root-run and an unprivileged boxd, or between hosts whose id
//! ranges differ. Whiteouts (character devices 0:0) travel as such; overlay
//! attributes travel as `BOXD.xattr.overlay.*` PAX records, whatever the
//! exporting daemon called them (`trusted.overlay.*` as root,
//! `user.overlay.*` unprivileged), and other `user.*` attributes as
//! `BOXD.xattr.user.*`.
//!
//! Invariants:
//! - export walks the box's files by descriptor, never following a symlink
//!   (a running box may swap a directory for a link to a host path
//!   mid-walk); it writes a temporary file beside the target and renames
//!   it into place only if nothing is there;
//! - import takes hostile bytes: every entry resolves beneath the new
//!   box's directory with no symlink on the way ([`open_dir_beneath`]);
//!   nothing is overwritten, hard links join only entries already
//!   unpacked there, the only devices are whiteouts, owners are mapped into
//!   this daemon's range, and the bytes unpacked (plus 512 per entry)
//!   count against `max-image-size`.

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod read;
mod write;

use read::unpack;
use write::write_archive;

use super::NamespaceEngine;
use super::snapshots::Layout;
use crate::engine::Created;
use crate::engine::box_archive::{self, FORMAT, MANIFEST, bad, secret_free};
use crate::error::{Error, Result};
use crate::image::Owners;
use crate::image::files::{Refused, open_followed};
use crate::model::{BoxRecord, BoxSpec};

const FILES: &str = "files";
/// PAX record prefix of an extended attribute (overlay ones named
/// `overlay.*`, without the exporting daemon's namespace).
const XATTR: &str = "BOXD.xattr.";
/// Deeper directories than this are refused (each level holds a descriptor).
const MAX_DEPTH: usize = 512;

/// `boxd-box.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The engine that wrote it: "namespace".
    pub engine: String,
    pub layout: Layout,
    /// The box's spec; every secret's value is empty.
    pub spec: BoxSpec,
    /// The manifest digest of the image the box was made from.
    pub image_digest: String,
}

impl Manifest {
    pub fn new(record: &BoxRecord, layout: Layout) -> Manifest {
        Manifest {
            format: FORMAT,
            engine: "namespace".into(),
            layout,
            spec: secret_free(&record.spec),
            image_digest: record.image_digest.clone(),
        }
    }
}

/// How this daemon names overlay attributes (see `boot.rs`: `userxattr`
/// when unprivileged).
fn overlay_prefix(privileged: bool) -> &'static str {
    if privileged {
        "trusted.overlay."
    } else {
        "user.overlay."
    }
}

/// Opens an archive a client named (a regular file, symlinks followed).
fn open_archive(path: &Path) -> Result<tar::Archive<flate2::read::GzDecoder<File>>> {
    let (file, _) = open_followed(path).map_err(|r| match r {
        Refused::Missing => Error::NotFound(format!("{} does not exist", path.display())),
        Refused::NotRegular(what) => {
            Error::InvalidArgument(format!("{} is {what}, not a box archive", path.display()))
        }
        Refused::Io(e) => Error::io(format!("open {}", path.display()), e),
    })?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    archive.set_ignore_zeros(false);
    Ok(archive)
}

/// Reads the manifest, the archive's first entry.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let mut archive = open_archive(path)?;
    let mut entries = archive.entries().map_err(bad)?;
    manifest_of(&mut entries)
}

fn manifest_of<R: Read>(entries: &mut tar::Entries<'_, R>) -> Result<Manifest> {
    box_archive::manifest(entries, "namespace")
}

/// What the `box_archive_import` fuzz target drives: a manifest to start
/// an archive with, and the importer as an unprivileged boxd without a
/// range runs it. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    pub fn manifest() -> Vec<u8> {
        serde_json::to_vec(&Manifest {
            format: box_archive::FORMAT,
            engine: "namespace".into(),
            layout: Layout::Overlay,
            spec: BoxSpec::default(),
            image_digest: String::new(),
        })
        .expect("a manifest serializes")
    }

    pub fn import(archive: &Path, dest: &Path, max_size: u64) -> std::result::Result<(), String> {
        let limits = crate::image::ImageLimits {
            max_size,
            cancel: Default::default(),
        };
        unpack(archive, dest, Owners::Flatten, false, &limits)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// The argument that selects [`helper_main`] in `main`.
pub const HELPER_ARG: &str = "__boxarchive";
/// How the helper marks its error's kind on stderr.
const ERROR_MARK: &str = "box-archive-error:";

/// `boxd __boxarchive export FILES MANIFEST-FILE OUT` and `boxd
/// __boxarchive import ARCHIVE DEST MAX-SIZE`: the archive work of an
/// unprivileged boxd with a subordinate id range, run as box root
/// (`userns::run_as_box_root`), where the box's ids are its own
/// ([`Owners::Keep`]) and only there readable and writable. An error is
/// printed as `box-archive-error:KIND:message` and exits 1.
pub fn helper_main(args: Vec<OsString>) -> ! {
    let arg = |i: usize| args.get(i).map(PathBuf::from).unwrap_or_default();
    let result = match args.first().and_then(|a| a.to_str()) {
        Some("export") if args.len() == 4 => (|| {
            let text = std::fs::read(arg(2)).map_err(|e| Error::io("read the manifest", e))?;
            let manifest: Manifest =
                serde_json::from_slice(&text).map_err(|e| Error::Internal(e.to_string()))?;
            let out = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(arg(3))
                .map_err(|e| Error::io("open the archive", e))?;
            write_archive(out, &manifest, &arg(1), Owners::Keep, false).map(drop)
        })(),
        Some("import") if args.len() == 4 => (|| {
            let max = args[3]
                .to_str()
                .and_then(|m| m.parse().ok())
                .ok_or_else(|| Error::Internal("bad helper arguments".into()))?;
            let limits = crate::image::ImageLimits {
                max_size: max,
                cancel: Default::default(),
            };
            unpack(&arg(1), &arg(2), Owners::Keep, false, &limits).map(drop)
        })(),
        _ => Err(Error::Internal("bad helper arguments".into())),
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            let kind = match e {
                Error::InvalidArgument(_) => "invalid",
                Error::ResourceExhausted(_) => "exhausted",
                Error::FailedPrecondition(_) => "precondition",
                Error::NotFound(_) => "notfound",
                _ => "other",
            };
            eprintln!("{ERROR_MARK}{kind}:{e}");
            std::process::exit(1)
        }
    }
}

/// The helper's error as the daemon's (see [`helper_main`]).
fn helper_error(e: Error) -> Error {
    let text = e.to_string();
    let Some(at) = text.find(ERROR_MARK) else {
        return e;
    };
    let rest = &text[at + ERROR_MARK.len()..];
    let (kind, message) = rest.split_once(':').unwrap_or(("other", rest));
    let message = message.trim().to_owned();
    match kind {
        "invalid" => Error::InvalidArgument(message),
        "exhausted" => Error::ResourceExhausted(message),
        "precondition" => Error::FailedPrecondition(message),
        "notfound" => Error::NotFound(message),
        _ => Error::Engine(message),
    }
}

impl NamespaceEngine {
    /// How box-relative ids map to this daemon's, for archives
    /// ([`Owners::Keep`]: the work runs as box root, see [`helper_main`]).
    fn archive_owners(&self, record: &BoxRecord) -> Result<Owners> {
        Ok(super::ownership(&self.range_of(record), self.privileged).owners)
    }

    /// Runs [`helper_main`] as box root with `args`.
    async fn archive_helper(&self, args: Vec<OsString>) -> Result<()> {
        let exe = std::env::current_exe().map_err(|e| Error::io("find the boxd binary", e))?;
        let argv: Vec<OsString> = [exe.into_os_string(), HELPER_ARG.into()]
            .into_iter()
            .chain(args)
            .collect();
        super::userns::run_as_box_root(&self.ids, &argv)
            .await
            .map(drop)
            .map_err(helper_error)
    }

    pub(super) async fn export_impl(&self, record: &BoxRecord, path: &Path) -> Result<u64> {
        let owners = self.archive_owners(record)?;
        let (layout, files) = Layout::of(record)?;
        if layout == Layout::Disk {
            return Err(Error::Unimplemented(format!(
                "box {:?} keeps its files on a disk of its own, which cannot be exported yet; snapshots and clones work",
                record.name
            )));
        }
        let manifest = Manifest::new(record, layout);
        let parent = path
            .parent()
            .filter(|p| p.is_dir())
            .ok_or_else(|| {
                Error::InvalidArgument(format!("{}: its directory does not exist", path.display()))
            })?
            .to_path_buf();
        if path.symlink_metadata().is_ok() {
            return Err(Error::AlreadyExists(format!("{} exists", path.display())));
        }
        let tmp = tempfile::Builder::new()
            .prefix(".boxd-export-")
            .tempfile_in(&parent)
            .map_err(|e| Error::io(format!("create a file in {}", parent.display()), e))?;
        if owners == Owners::Keep {
            let text = serde_json::to_vec(&manifest).map_err(|e| Error::Internal(e.to_string()))?;
            let at = record.dir.join(".export-manifest.json");
            std::fs::write(&at, text).map_err(|e| Error::io("write the manifest", e))?;
            let written = self
                .archive_helper(vec![
                    "export".into(),
                    files.clone().into(),
                    at.clone().into(),
                    tmp.path().into(),
                ])
                .await;
            let _ = std::fs::remove_file(&at);
            written?;
        }
        let (privileged, target) = (self.privileged, path.to_path_buf());
        tokio::task::spawn_blocking(move || {
            let file = tmp
                .as_file()
                .try_clone()
                .map_err(|e| Error::io("open the archive", e))?;
            let file = if owners == Owners::Keep {
                file // written by the helper
            } else {
                write_archive(file, &manifest, &files, owners, privileged)?
            };
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            // Only if nothing appeared there meanwhile.
            nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                tmp.path(),
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
            // Renamed away: nothing for the temporary file's drop to remove.
            let _ = tmp.into_temp_path().keep();
            Ok(size)
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
    }

    pub(super) async fn import_impl(&self, path: &Path, target: &BoxRecord) -> Result<Created> {
        self.claim_ids(target)?;
        let owners = self.archive_owners(target)?;
        let manifest = read_manifest(path)?;
        if manifest.layout == Layout::Overlay && self.copies.is_some() {
            return Err(Error::FailedPrecondition(
                "the archive holds an overlay box's writes, and overlays cannot be mounted here"
                    .into(),
            ));
        }
        let image = self.images.for_create(&target.spec.image).await?;
        let mut warnings = Vec::new();
        if image.digest != manifest.image_digest {
            warnings.push(format!(
                "the image {} is {} here, but the box was exported from {}: files the box did not write come from the image as it is here",
                target.spec.image, image.digest, manifest.image_digest
            ));
        }
        let dest = target.dir.join(manifest.layout.file_name());
        let (src, dst, privileged, limits) = (
            path.to_path_buf(),
            dest.clone(),
            self.privileged,
            self.archive_limits.clone(),
        );
        let unpacked = if owners == Owners::Keep {
            self.archive_helper(vec![
                "import".into(),
                src.into(),
                dst.into(),
                limits.max_size.to_string().into(),
            ])
            .await
        } else {
            tokio::task::spawn_blocking(move || {
                unpack(&src, &dst, owners, privileged, &limits).map(drop)
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))
            .and_then(|r| r)
        };
        let made = async {
            unpacked?;
            if manifest.layout == Layout::Overlay {
                self.make_work(target)?;
            }
            let config =
                serde_json::to_vec(&image.config).map_err(|e| Error::Internal(e.to_string()))?;
            std::fs::write(super::image_config_path(target), config)
                .map_err(|e| Error::io("write image.json", e))
        }
        .await;
        if let Err(e) = made {
            let _ = self.remove_tree(&dest).await;
            let _ = self.remove_tree(&super::work(target)).await;
            return Err(e);
        }
        Ok(Created {
            image_digest: image.digest,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_never_holds_a_secret_value() {
        let mut record = BoxRecord {
            id: "x".into(),
            name: "b".into(),
            spec: BoxSpec::default(),
            image_digest: "sha256:1".into(),
            created_at_ms: 0,
            started_at_ms: 0,
            state: crate::model::State::Created,
            error: String::new(),
            dir: PathBuf::new(),
        };
        record.spec.secrets.push(crate::egress::Secret {
            name: "TOKEN".into(),
            hosts: vec!["example.com".into()],
            placeholder: "PH".into(),
            value: "hunter2".into(),
        });
        let text = serde_json::to_string(&Manifest::new(&record, Layout::Overlay)).unwrap();
        assert!(!text.contains("hunter2"));
        assert!(text.contains("TOKEN"));
    }
}
