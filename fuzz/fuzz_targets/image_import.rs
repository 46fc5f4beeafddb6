//! `image import` of a `docker save` archive (`from_tarball`) from hostile
//! bytes: raw, or archives assembled from the parts that matter (symlinks
//! and hard links to a host directory and file, absolute and climbing
//! paths, `manifest.json` naming paths through links, FIFOs, duplicate and
//! nested entries, gzip). Never a panic, and nothing outside the import's
//! own work directory is touched: a canary file and a host directory
//! beside it keep their names, bytes and inodes. A layout that comes back
//! holds no symlink, no hard-linked file and nothing but directories and
//! regular files.
#![no_main]

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use boxd::image::ImageLimits;
use boxd::image::import::from_tarball;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

/// `outer/` holds `canary`, `host/victim` and `run/` (each input's files).
struct World {
    _dir: tempfile::TempDir,
    outer: PathBuf,
    canary_ino: u64,
    victim_ino: u64,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let outer = dir.path().to_path_buf();
        fs::write(outer.join("canary"), "precious").unwrap();
        fs::create_dir(outer.join("host")).unwrap();
        fs::write(outer.join("host/victim"), "victim").unwrap();
        fs::create_dir(outer.join("run")).unwrap();
        let ino = |p: &str| fs::metadata(outer.join(p)).unwrap().ino();
        World {
            canary_ino: ino("canary"),
            victim_ino: ino("host/victim"),
            outer,
            _dir: dir,
        }
    })
}

/// A path an archive entry or `manifest.json` might name.
fn name(u: &mut Unstructured, w: &World) -> Result<String> {
    let host = w.outer.join("host");
    let canary = w.outer.join("canary");
    Ok(match u.int_in_range(0..=17)? {
        0 => "manifest.json".into(),
        1 => "oci-layout".into(),
        2 => "index.json".into(),
        3 => "d".into(),
        4 => "d/victim".into(),
        5 => "c.json".into(),
        6 => "l/layer.tar".into(),
        7 => "l".into(),
        8 => "../canary".into(),
        9 => "../../canary".into(),
        10 => canary.to_string_lossy().into_owned(),
        11 => host.join("victim").to_string_lossy().into_owned(),
        12 => "./d/victim".into(),
        13 => "d/../../canary".into(),
        14 => "blobs/sha256/x".into(),
        15 => "".into(),
        16 => "/".into(),
        _ => u.arbitrary::<String>()?.chars().take(40).collect(),
    })
}

/// Where a link might point.
fn target(u: &mut Unstructured, w: &World) -> Result<String> {
    Ok(match u.int_in_range(0..=8)? {
        0 => w.outer.join("host").to_string_lossy().into_owned(),
        1 => w.outer.join("host/victim").to_string_lossy().into_owned(),
        2 => w.outer.join("canary").to_string_lossy().into_owned(),
        3 => "..".into(),
        4 => "../..".into(),
        5 => "/".into(),
        6 => "c.json".into(),
        7 => "d".into(),
        _ => name(u, w)?,
    })
}

/// A `manifest.json` naming paths from the same vocabulary.
fn manifest(u: &mut Unstructured, w: &World) -> Result<Vec<u8>> {
    let config = name(u, w)?;
    let mut layers = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        layers.push(name(u, w)?);
    }
    let quote = |s: &str| format!("{s:?}");
    let layers: Vec<String> = layers.iter().map(|l| quote(l)).collect();
    Ok(format!(
        r#"[{{"Config":{},"RepoTags":["fuzz/x:1"],"Layers":[{}]}}]"#,
        quote(&config),
        layers.join(",")
    )
    .into_bytes())
}

fn header(kind: tar::EntryType, path: &str, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    let bytes = path.as_bytes();
    let n = bytes.len().min(99);
    h.as_old_mut().name[..n].copy_from_slice(&bytes[..n]);
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(size);
    h
}

/// An archive built from the vocabulary.
fn structured(u: &mut Unstructured, w: &World) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for _ in 0..u.int_in_range(0..=8)? {
        let path = name(u, w)?;
        let mut h;
        let data: Vec<u8> = match u.int_in_range(0..=6)? {
            0 => {
                h = header(tar::EntryType::Directory, &path, 0);
                Vec::new()
            }
            1 => {
                let t = target(u, w)?;
                h = header(tar::EntryType::Symlink, &path, 0);
                let _ = h.set_link_name(&t);
                Vec::new()
            }
            2 => {
                let t = target(u, w)?;
                h = header(tar::EntryType::Link, &path, 0);
                let _ = h.set_link_name(&t);
                Vec::new()
            }
            3 => {
                h = header(tar::EntryType::Fifo, &path, 0);
                Vec::new()
            }
            4 => {
                let m = manifest(u, w)?;
                h = header(tar::EntryType::Regular, "manifest.json", m.len() as u64);
                m
            }
            _ => {
                let d: Vec<u8> = u.arbitrary::<Vec<u8>>()?.into_iter().take(256).collect();
                h = header(tar::EntryType::Regular, &path, d.len() as u64);
                d
            }
        };
        h.set_cksum();
        if b.append(&h, data.as_slice()).is_err() {
            break;
        }
    }
    let tar = b.into_inner().unwrap_or_default();
    if u.ratio(1, 4)? {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        return Ok(gz.finish().unwrap());
    }
    Ok(tar)
}

/// Every path under `dir` (not following symlinks).
fn walk(dir: &Path, out: &mut Vec<(PathBuf, fs::Metadata)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            walk(&p, out);
        }
        out.push((p, m));
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

fn check(data: &[u8]) -> Result<()> {
    let w = world();
    let mut u = Unstructured::new(data);
    let bytes = if u.ratio(1, 5)? {
        u.take_rest().to_vec()
    } else {
        structured(&mut u, w)?
    };
    static N: AtomicU64 = AtomicU64::new(0);
    let run = w
        .outer
        .join("run")
        .join(N.fetch_add(1, Ordering::Relaxed).to_string());
    fs::create_dir(&run).unwrap();
    let src = run.join("archive.tar");
    fs::write(&src, &bytes).unwrap();
    let work = run.join("work");
    let limits = ImageLimits {
        max_size: 1 << 20,
        ..ImageLimits::default()
    };
    let result = from_tarball(&src, &work, &limits);

    // Nothing outside `work` changed.
    assert_eq!(names(&w.outer), ["canary", "host", "run"]);
    assert_eq!(names(&w.outer.join("host")), ["victim"]);
    assert_eq!(fs::read(w.outer.join("canary")).unwrap(), b"precious");
    assert_eq!(fs::read(w.outer.join("host/victim")).unwrap(), b"victim");
    assert_eq!(
        fs::metadata(w.outer.join("canary")).unwrap().ino(),
        w.canary_ino
    );
    assert_eq!(
        fs::metadata(w.outer.join("host/victim")).unwrap().ino(),
        w.victim_ino
    );
    assert_eq!(names(&run), ["archive.tar", "work"]);
    // The import makes directories and regular files only, each with one link.
    let mut all = Vec::new();
    walk(&work, &mut all);
    for (p, m) in &all {
        assert!(
            m.is_dir() || m.is_file(),
            "{} is {:?}",
            p.display(),
            m.file_type()
        );
        assert!(
            m.is_dir() || m.nlink() == 1,
            "{} has {} links",
            p.display(),
            m.nlink()
        );
    }
    if let Ok((layout, _)) = result {
        assert!(layout.starts_with(&work), "{}", layout.display());
    }
    fs::remove_dir_all(&run).unwrap();
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = check(data);
});
