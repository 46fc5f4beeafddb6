//! A layer blob from hostile bytes, in a layout generated around it, loaded
//! by the namespace engine's image store: raw bytes (plain or gzip), or tar
//! streams assembled from the parts that matter (symlinks and hard links to
//! a host directory, absolute and climbing paths, whiteouts and opaque
//! markers, FIFOs, long names, files declared larger than the cap). Never a
//! panic; nothing outside the store and the layout is touched (a host
//! directory the layers' symlinks point at keeps its files, bytes and
//! inodes); a failed load leaves no cache entry and no unpack in progress;
//! a loaded image holds no FIFO or device, and its regular files add up to
//! no more than `max-image-size`.
#![no_main]

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use boxd::image::{ImageLimits, RootfsCache};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

const CAP: u64 = 256 << 10;

struct World {
    _dir: tempfile::TempDir,
    outer: PathBuf,
    victim_ino: u64,
    runtime: tokio::runtime::Runtime,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let outer = dir.path().to_path_buf();
        fs::create_dir(outer.join("host")).unwrap();
        fs::write(outer.join("host/victim"), "victim").unwrap();
        fs::create_dir(outer.join("run")).unwrap();
        World {
            victim_ino: fs::metadata(outer.join("host/victim")).unwrap().ino(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap(),
            outer,
            _dir: dir,
        }
    })
}

fn name(u: &mut Unstructured, w: &World) -> Result<String> {
    let host = w.outer.join("host");
    Ok(match u.int_in_range(0..=16)? {
        0 => "a".into(),
        1 => "a/b".into(),
        2 => "evil".into(),
        3 => "evil/pwned".into(),
        4 => "evil/victim".into(),
        5 => "a/.wh.b".into(),
        6 => "a/.wh..wh..opq".into(),
        7 => ".wh.evil".into(),
        8 => "../escape".into(),
        9 => "/abs".into(),
        10 => "./a/./b".into(),
        11 => host.join("victim").to_string_lossy().into_owned(),
        12 => "x".repeat(150),
        13 => "a/b/c/d/e".into(),
        14 => "".into(),
        _ => u.arbitrary::<String>()?.chars().take(40).collect(),
    })
}

fn target(u: &mut Unstructured, w: &World) -> Result<String> {
    Ok(match u.int_in_range(0..=6)? {
        0 => w.outer.join("host").to_string_lossy().into_owned(),
        1 => w.outer.join("host/victim").to_string_lossy().into_owned(),
        2 => "../../../../../../../..".into(),
        3 => "/".into(),
        4 => "evil/victim".into(),
        5 => "a".into(),
        _ => name(u, w)?,
    })
}

/// A tar stream from the vocabulary (GNU long names and links when a name
/// or target is long).
fn structured(u: &mut Unstructured, w: &World) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for _ in 0..u.int_in_range(0..=10)? {
        let path = name(u, w)?;
        let mut h = tar::Header::new_gnu();
        h.set_mode(u.int_in_range(0..=0o7777)?);
        h.set_mtime(1_600_000_000);
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
                h.set_entry_type(tar::EntryType::Fifo);
                h.set_size(0);
                b.append_data(&mut h, &path, std::io::empty())
            }
            4 => {
                // Zeros, maybe more than the cap allows.
                let size = u.int_in_range(0..=2 * CAP)?;
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(size);
                b.append_data(&mut h, &path, std::io::Read::take(std::io::repeat(0), size))
            }
            _ => {
                let d: Vec<u8> = u.arbitrary::<Vec<u8>>()?.into_iter().take(512).collect();
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(d.len() as u64);
                b.append_data(&mut h, &path, d.as_slice())
            }
        };
        if result.is_err() {
            break;
        }
    }
    Ok(b.into_inner().unwrap_or_default())
}

fn blob(layout: &Path, media_type: &str, bytes: &[u8]) -> String {
    let hex = hex::encode(Sha256::digest(bytes));
    fs::write(layout.join("blobs/sha256").join(&hex), bytes).unwrap();
    format!(
        r#"{{"mediaType":"{media_type}","digest":"sha256:{hex}","size":{}}}"#,
        bytes.len()
    )
}

/// A layout of one image whose layers are `layers`.
fn layout(dir: &Path, layers: &[(String, Vec<u8>)]) -> PathBuf {
    let layout = dir.join("layout");
    fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let descs: Vec<String> = layers.iter().map(|(m, b)| blob(&layout, m, b)).collect();
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = format!(
        r#"{{"architecture":"{arch}","os":"linux","config":{{"Cmd":["sh"]}},"rootfs":{{"type":"layers","diff_ids":[]}}}}"#
    );
    let config = blob(
        &layout,
        "application/vnd.oci.image.config.v1+json",
        config.as_bytes(),
    );
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{config},"layers":[{}]}}"#,
        descs.join(",")
    );
    let manifest = blob(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        manifest.as_bytes(),
    );
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    fs::write(
        layout.join("index.json"),
        format!(r#"{{"schemaVersion":2,"manifests":[{manifest}]}}"#),
    )
    .unwrap();
    layout
}

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

fn check(data: &[u8]) -> Result<()> {
    let w = world();
    let mut u = Unstructured::new(data);
    let mut layers = Vec::new();
    for _ in 0..u.int_in_range(1..=3)? {
        let raw = u.ratio(1, 4)?;
        let tar = if raw {
            let n = u.int_in_range(0..=4096)?;
            u.bytes(n.min(u.len()))?.to_vec()
        } else {
            structured(&mut u, w)?
        };
        let gzip = u.ratio(1, 3)?;
        let bytes = if gzip {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&tar).unwrap();
            gz.finish().unwrap()
        } else {
            tar
        };
        let media = match u.int_in_range(0..=2)? {
            0 => "application/vnd.oci.image.layer.v1.tar",
            1 => "application/vnd.oci.image.layer.v1.tar+gzip",
            _ => "application/vnd.docker.image.rootfs.diff.tar.gzip",
        };
        layers.push((media.to_owned(), bytes));
    }
    static N: AtomicU64 = AtomicU64::new(0);
    let run = w
        .outer
        .join("run")
        .join(N.fetch_add(1, Ordering::Relaxed).to_string());
    fs::create_dir(&run).unwrap();
    let layout = layout(&run, &layers);
    let images = run.join("images");
    let limits = ImageLimits {
        max_size: CAP,
        ..ImageLimits::default()
    };
    let store = RootfsCache::new(images.clone(), limits, Default::default());
    let result = w.runtime.block_on(store.load_layout(&layout));

    let mut host = Vec::new();
    walk(&w.outer.join("host"), &mut host);
    assert_eq!(host.len(), 1, "{host:?}");
    assert_eq!(fs::read(w.outer.join("host/victim")).unwrap(), b"victim");
    assert_eq!(
        fs::metadata(w.outer.join("host/victim")).unwrap().ino(),
        w.victim_ino
    );
    let mut top: Vec<String> = fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert!(top == ["images", "layout"] || top == ["layout"], "{top:?}");
    match result {
        Err(_) => {
            let left: Vec<_> = fs::read_dir(&images)
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "a failed load left {left:?}");
        }
        Ok(image) => {
            assert!(image.rootfs.starts_with(&images));
            assert!(image.rootfs.parent().unwrap().join("complete").is_file());
            let mut all = Vec::new();
            walk(&image.rootfs, &mut all);
            // Hard links share their data: each inode counts once.
            let mut seen = std::collections::HashSet::new();
            let mut bytes = 0;
            for (p, m) in &all {
                let t = m.file_type();
                assert!(
                    t.is_dir() || t.is_file() || t.is_symlink(),
                    "{}: {t:?}",
                    p.display()
                );
                if t.is_file() && seen.insert((m.dev(), m.ino())) {
                    bytes += m.len();
                }
            }
            assert!(bytes <= CAP, "{bytes} bytes unpacked, cap {CAP}");
        }
    }
    fs::remove_dir_all(&run).unwrap();
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = check(data);
});
