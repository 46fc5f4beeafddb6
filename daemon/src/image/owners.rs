//! Who owns an unpacked image's files, so that they keep, inside a box,
//! the owners, groups and modes the image gave them.
//!
//! A box sees host ids through its user namespace (`engine/namespace/
//! idmap.rs`), so an image's uid N must be stored as the host id that box
//! uid N stands for:
//!
//! - [`Owners::Shift`]: boxd runs as root and chowns each entry into the
//!   boxes' host range itself;
//! - [`Owners::Keep`]: the unpack runs as root of a user namespace with
//!   the boxes' map (an unprivileged boxd with a subordinate range: only
//!   there may it give files its subordinate ids), so the image's ids are
//!   written as they are;
//! - [`Owners::Flatten`]: everything belongs to the daemon's user (a box of
//!   a single id; tools that change owners cannot work there anyway).
//!
//! The store records the map's tag with each unpacked image, and unpacks
//! again when the map changed.

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;

/// How entries get their owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    Flatten,
    /// Image id N becomes host id `base + N` (N below `count`; others
    /// become the range's `nobody`, 65534).
    Shift {
        uid: u32,
        gid: u32,
        count: u32,
    },
    Keep,
}

/// Runs a command as box root in the boxes' user namespace (the namespace
/// engine's `userns::run_as_box_root`); the error is its message.
pub type AsBoxRoot =
    Arc<dyn Fn(Vec<OsString>) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// How a store owns what it unpacks.
#[derive(Clone)]
pub struct Ownership {
    /// For unpacking in this process.
    pub owners: Owners,
    /// Written with each unpacked image; a different tag means unpack again.
    pub tag: String,
    /// When set, unpacking and removing run in a helper as box root
    /// (`boxd __unpack`, `rm`), which applies [`Owners::Keep`].
    pub as_box_root: Option<AsBoxRoot>,
}

impl Default for Ownership {
    fn default() -> Ownership {
        Ownership {
            owners: Owners::Flatten,
            tag: "flatten".into(),
            as_box_root: None,
        }
    }
}

impl std::fmt::Debug for Ownership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ownership")
            .field("owners", &self.owners)
            .field("tag", &self.tag)
            .field("as_box_root", &self.as_box_root.is_some())
            .finish()
    }
}

/// The id the range's `nobody` has, for image ids beyond the range.
const NOBODY: u32 = 65_534;

impl Owners {
    /// Whether directories must stay writable by the daemon's user (only
    /// when nothing else may write them: the daemon owns every file but
    /// has no capability over its permissions).
    pub fn flattened(self) -> bool {
        self == Owners::Flatten
    }

    /// Gives a just-unpacked entry its owner and group from the tar header,
    /// then its mode again (a change of owner clears setuid and setgid).
    pub fn apply(self, path: &Path, header: &tar::Header) -> io::Result<()> {
        let (uid, gid) = match self {
            Owners::Flatten => return Ok(()),
            Owners::Keep => (id(header.uid()), id(header.gid())),
            Owners::Shift { uid, gid, count } => {
                let shift = |id: u32, base: u32| base + if id < count { id } else { NOBODY };
                (shift(id(header.uid()), uid), shift(id(header.gid()), gid))
            }
        };
        std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
        let meta = std::fs::symlink_metadata(path)?;
        if !meta.file_type().is_symlink()
            && let Ok(mode) = header.mode()
            && mode & 0o6000 != 0
        {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))?;
        }
        Ok(())
    }
}

/// A header id as a `u32` (tar allows more); too large is `nobody`.
fn id(v: io::Result<u64>) -> u32 {
    v.ok().and_then(|v| u32::try_from(v).ok()).unwrap_or(NOBODY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn shifted_owners_land_in_the_range_with_their_setuid_bits() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: chown to other ids needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwd");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(42);
        h.set_mode(0o4755);
        let owners = Owners::Shift {
            uid: 300_000,
            gid: 400_000,
            count: 65_536,
        };
        owners.apply(&file, &h).unwrap();
        let m = std::fs::metadata(&file).unwrap();
        assert_eq!((m.uid(), m.gid()), (300_000, 400_042));
        assert_eq!(m.mode() & 0o7777, 0o4755, "setuid survives the chown");
        h.set_uid(70_000);
        owners.apply(&file, &h).unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().uid(), 300_000 + NOBODY);
    }
}
