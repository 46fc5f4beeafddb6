//! Which range of the id pool each box of a root-run boxd has
//! ([`super::idmap::IdMap::for_slot`]).
//!
//! A box's range is its *slot*: range 0 of the pool owns the image store's
//! files (and the boxes made before boxes had ranges of their own), boxes
//! take 1 and up. The slot is kept in the box's directory (`ids.json`) and
//! claimed host-wide, so that two root-run boxds (two homes, or a test's
//! temporary one beside the user's) never hand one range to two boxes:
//! each claimed slot is a file in [`REGISTRY`] (one directory per pool)
//! naming the box directory that holds it, made with `O_EXCL` under an
//! exclusive lock of the pool's directory. A claim whose box directory is
//! gone (a box removed, a temporary home deleted) is free again.
//!
//! Invariants: no two existing box directories hold one slot of one pool;
//! slot 0 is never claimed; a box that cannot get a slot is not made
//! (`ResourceExhausted`, naming the pool).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where claims are kept: persistent, since a box's files keep its ids
/// across reboots.
pub const REGISTRY: &str = "/var/lib/boxd/id-slots";
/// The file in a box's directory that names its slot.
const BOX_FILE: &str = "ids.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct BoxIds {
    slot: u32,
}

/// The slot of the box in `box_dir`: 0 for a box made before boxes had
/// ranges of their own (or where the pool has one range).
pub fn of(box_dir: &Path) -> u32 {
    std::fs::read(box_dir.join(BOX_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<BoxIds>(&b).ok())
        .map_or(0, |ids| ids.slot)
}

/// Claims a free slot of the pool `pool` (a name that tells pools apart,
/// such as their first uid and gid) with `slots` ranges for the box in
/// `box_dir`, and records it there.
pub fn claim(registry: &Path, pool: &str, slots: u32, box_dir: &Path) -> Result<u32> {
    let dir = registry.join(pool);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let lock =
        std::fs::File::open(&dir).map_err(|e| Error::io(format!("open {}", dir.display()), e))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(Error::io(
            "lock the id slots",
            std::io::Error::last_os_error(),
        ));
    }
    let me = box_dir
        .canonicalize()
        .map_err(|e| Error::io(format!("resolve {}", box_dir.display()), e))?;
    let taken = |slot: u32| -> Result<bool> {
        let file = dir.join(slot.to_string());
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
        {
            Ok(mut f) => {
                f.write_all(me.as_os_str().as_encoded_bytes())
                    .map_err(|e| Error::io(format!("write {}", file.display()), e))?;
                Ok(false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mut holder = Vec::new();
                std::fs::File::open(&file)
                    .and_then(|mut f| f.read_to_end(&mut holder))
                    .map_err(|e| Error::io(format!("read {}", file.display()), e))?;
                let holder = PathBuf::from(String::from_utf8_lossy(&holder).into_owned());
                // A claim is held while its box directory says so.
                if holder != me && holder.is_absolute() && of(&holder) == slot {
                    return Ok(true);
                }
                std::fs::write(&file, me.as_os_str().as_encoded_bytes())
                    .map_err(|e| Error::io(format!("write {}", file.display()), e))?;
                Ok(false)
            }
            Err(e) => Err(Error::io(format!("create {}", file.display()), e)),
        }
    };
    for slot in 1..slots {
        if !taken(slot)? {
            let text =
                serde_json::to_vec(&BoxIds { slot }).map_err(|e| Error::Internal(e.to_string()))?;
            std::fs::write(box_dir.join(BOX_FILE), text)
                .map_err(|e| Error::io("write the box's ids.json", e))?;
            return Ok(slot);
        }
    }
    Err(Error::ResourceExhausted(format!(
        "every one of the {} id ranges of this host's pool ({pool}) belongs to a box; remove boxes, or give root a larger range in /etc/subuid and /etc/subgid",
        slots - 1
    )))
}

/// Gives back the slot of the box in `box_dir` (before its directory
/// goes), if it holds one.
pub fn release(registry: &Path, pool: &str, box_dir: &Path) {
    let slot = of(box_dir);
    if slot == 0 {
        return;
    }
    let file = registry.join(pool).join(slot.to_string());
    let me = box_dir
        .canonicalize()
        .unwrap_or_else(|_| box_dir.to_path_buf());
    if std::fs::read(&file).is_ok_and(|h| h == me.as_os_str().as_encoded_bytes()) {
        let _ = std::fs::remove_file(file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_get_distinct_slots_and_a_removed_box_s_slot_is_free_again() {
        let registry = tempfile::tempdir().unwrap();
        let homes = tempfile::tempdir().unwrap();
        let dir = |n: &str| {
            let d = homes.path().join(n);
            std::fs::create_dir(&d).unwrap();
            d
        };
        let (a, b, c) = (dir("a"), dir("b"), dir("c"));
        let reg = registry.path();
        assert_eq!(claim(reg, "p", 4, &a).unwrap(), 1);
        assert_eq!(claim(reg, "p", 4, &b).unwrap(), 2);
        assert_eq!(of(&a), 1);
        assert_eq!(of(&b), 2);
        // Another pool is counted apart.
        let other = dir("other");
        assert_eq!(claim(reg, "q", 4, &other).unwrap(), 1);
        // a's directory goes (its home was deleted): its slot is free.
        std::fs::remove_dir_all(&a).unwrap();
        assert_eq!(claim(reg, "p", 4, &c).unwrap(), 1);
        // Full: 3 slots (1..4) held by b, c and d.
        let d = dir("d");
        assert_eq!(claim(reg, "p", 4, &d).unwrap(), 3);
        let e = dir("e");
        let full = claim(reg, "p", 4, &e).unwrap_err();
        assert!(full.to_string().contains("id ranges"), "{full}");
        // Released explicitly: free.
        release(reg, "p", &b);
        assert_eq!(claim(reg, "p", 4, &e).unwrap(), 2);
        // A pool of one range has no slot for a box.
        let f = dir("f");
        assert!(claim(reg, "r", 1, &f).is_err());
        assert_eq!(of(&f), 0);
    }

    #[test]
    fn a_claim_file_naming_a_directory_that_holds_another_slot_is_stale() {
        let registry = tempfile::tempdir().unwrap();
        let homes = tempfile::tempdir().unwrap();
        let a = homes.path().join("a");
        std::fs::create_dir(&a).unwrap();
        let b = homes.path().join("b");
        std::fs::create_dir(&b).unwrap();
        let reg = registry.path();
        assert_eq!(claim(reg, "p", 8, &a).unwrap(), 1);
        // a's ids.json says 5 now (rewritten): the claim of 1 is not a's.
        std::fs::write(a.join(BOX_FILE), br#"{"slot":5}"#).unwrap();
        assert_eq!(claim(reg, "p", 8, &b).unwrap(), 1);
    }
}
