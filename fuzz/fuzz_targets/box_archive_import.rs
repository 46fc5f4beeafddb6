//! A box archive (`boxctl import-box`) from hostile bytes, imported by the
//! namespace engine: raw bytes, or a gzip'd tar assembled from the parts
//! that matter (the manifest first or not, climbing and absolute paths,
//! symlinks then entries through them, hard links to host files, devices
//! and FIFOs, duplicates, overlay and other extended attributes as PAX
//! records, files larger than the cap). Never a panic; nothing outside the
//! import's directory is touched (a host file beside it keeps its bytes,
//! inode and single link, and no other name appears there); what is
//! unpacked holds no block device and no character device but a whiteout
//! (0:0) (FIFOs a box made travel as such), and its regular files add up
//! to no more than the cap.
#![no_main]

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use boxd::engine::namespace::archive::fuzzing;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const CAP: u64 = 256 << 10;

struct World {
    _dir: tempfile::TempDir,
    outer: PathBuf,
    victim_ino: u64,
    manifest: Vec<u8>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let outer = dir.path().to_path_buf();
        fs::write(outer.join("victim"), "victim").unwrap();
        World {
            victim_ino: fs::metadata(outer.join("victim")).unwrap().ino(),
            manifest: fuzzing::manifest(),
            outer,
            _dir: dir,
        }
    })
}

fn name(u: &mut Unstructured, w: &World) -> Result<String> {
    Ok(match u.int_in_range(0..=14)? {
        0 => "files".into(),
        1 => "files/a".into(),
        2 => "files/a/b".into(),
        3 => "files/l".into(),
        4 => "files/l/victim".into(),
        5 => "files/../victim".into(),
        6 => "files/a/../../victim".into(),
        7 => w.outer.join("victim").to_string_lossy().into_owned(),
        8 => "victim".into(),
        9 => "files/.wh.a".into(),
        10 => format!("files/{}", "x".repeat(150)),
        11 => "boxd-box.json".into(),
        12 => "files/a/b/c/d/e".into(),
        _ => u.arbitrary::<String>()?.chars().take(40).collect(),
    })
}

fn target(u: &mut Unstructured, w: &World) -> Result<String> {
    Ok(match u.int_in_range(0..=6)? {
        0 => w.outer.to_string_lossy().into_owned(),
        1 => w.outer.join("victim").to_string_lossy().into_owned(),
        2 => "../../../../..".into(),
        3 => "/".into(),
        4 => "files/a".into(),
        5 => "a".into(),
        _ => name(u, w)?,
    })
}

fn xattr_key(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=6)? {
        0 => "BOXD.xattr.overlay.opaque".into(),
        1 => "BOXD.xattr.overlay.redirect".into(),
        2 => "BOXD.xattr.user.note".into(),
        3 => "BOXD.xattr.trusted.overlay.opaque".into(),
        4 => "BOXD.xattr.security.capability".into(),
        5 => "SCHILY.xattr.trusted.overlay.opaque".into(),
        _ => format!("BOXD.xattr.{}", u.arbitrary::<String>()?),
    })
}

/// A gzip'd tar from the vocabulary (GNU long names and links when a name
/// or target is long).
fn structured(u: &mut Unstructured, w: &World) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    if u.ratio(7, 8)? {
        let mut h = tar::Header::new_gnu();
        h.set_size(w.manifest.len() as u64);
        h.set_mode(0o644);
        let _ = b.append_data(&mut h, "boxd-box.json", w.manifest.as_slice());
    }
    for _ in 0..u.int_in_range(0..=10)? {
        let path = name(u, w)?;
        if u.ratio(1, 6)? {
            let key = xattr_key(u)?;
            let value: Vec<u8> = u.arbitrary()?;
            let _ = b.append_pax_extensions([(key.as_str(), value.as_slice())]);
        }
        let mut h = tar::Header::new_gnu();
        h.set_mode(u.int_in_range(0..=0o7777)?);
        h.set_mtime(1_600_000_000);
        h.set_uid(u.int_in_range(0..=70_000)?);
        let result = match u.int_in_range(0..=6)? {
            0 => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, &path, std::io::empty())
            }
            1 => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, &path, target(u, w)?)
            }
            2 => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                b.append_link(&mut h, &path, target(u, w)?)
            }
            3 => {
                let kind = *u.choose(&[
                    tar::EntryType::Fifo,
                    tar::EntryType::Char,
                    tar::EntryType::Block,
                ])?;
                h.set_entry_type(kind);
                h.set_size(0);
                let _ = h.set_device_major(u.int_in_range(0..=1)?);
                let _ = h.set_device_minor(u.int_in_range(0..=3)?);
                b.append_data(&mut h, &path, std::io::empty())
            }
            _ => {
                // Zeros, maybe more than the cap allows.
                let size = u.int_in_range(0..=2 * CAP)?;
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(size);
                b.append_data(&mut h, &path, std::io::repeat(0).take(size))
            }
        };
        let _ = result;
    }
    Ok(b.into_inner()
        .and_then(|gz| gz.finish())
        .unwrap_or_default())
}

/// Regular bytes under `dir`, failing on what an import may not make.
fn check_tree(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let meta = fs::symlink_metadata(e.path()).unwrap();
        let t = meta.file_type();
        assert!(!t.is_block_device(), "a block device was made: {:?}", e.path());
        assert!(
            !t.is_char_device() || meta.rdev() == 0,
            "a device other than a whiteout: {:?}",
            e.path()
        );
        if t.is_dir() {
            total += check_tree(&e.path());
        } else if t.is_file() {
            total += meta.len();
        }
    }
    total
}

fn check(u: &mut Unstructured) -> Result<()> {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let w = world();
    let bytes = if u.ratio(1, 5)? {
        u.arbitrary::<Vec<u8>>()?
    } else {
        structured(u, w)?
    };
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let archive = w.outer.join(format!("a{run}.tgz"));
    fs::File::create(&archive)
        .and_then(|mut f| f.write_all(&bytes))
        .unwrap();
    let dest = w.outer.join(format!("d{run}"));
    let _ = fuzzing::import(&archive, &dest, CAP);
    let unpacked = check_tree(&dest);
    assert!(unpacked <= CAP, "{unpacked} bytes unpacked, cap {CAP}");
    let victim = w.outer.join("victim");
    let meta = fs::metadata(&victim).unwrap();
    assert_eq!(fs::read(&victim).unwrap(), b"victim", "the host file changed");
    assert_eq!(meta.ino(), w.victim_ino, "the host file was replaced");
    assert_eq!(meta.nlink(), 1, "the host file was linked");
    let mut names: Vec<String> = fs::read_dir(&w.outer)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.retain(|n| n != &format!("a{run}.tgz") && n != &format!("d{run}"));
    assert_eq!(names, ["victim"], "something appeared beside the import");
    let _ = fs::remove_file(&archive);
    let _ = fs::remove_dir_all(&dest);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = check(&mut Unstructured::new(data));
});
