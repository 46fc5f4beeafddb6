//! Any archive `boxctl cp BOX:PATH HOSTDIR` may be handed by a hostile
//! box, unpacked on the host: it never panics, nothing outside the
//! destination changes (a host directory beside it, reachable by symlinks
//! and hard links the archive makes, keeps its names, bytes and modes),
//! and nothing setuid or setgid is made.
//!
//! Inputs are raw bytes (first byte even) or archives built from a grammar
//! (first byte odd): symlinks to the host directory, to `..`, to each
//! other; hard links to them, to files, to directories, to nothing;
//! directories, files and FIFOs beneath all of them; `..`, absolute and
//! long names; modes with setuid bits.
#![no_main]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use boxd_fs::archive::{Modes, unpack};
use libfuzzer_sys::fuzz_target;

const NAMES: &[&str] = &[
    "s", "h", "d", "f", "s/x", "h/x", "h/PWNED", "d/s", "d/s/x", "a/b/c", "..", "../x", "/abs",
    ".", "./s", "s/../x", "f/x", "very/long/",
];

/// The host directory's state: every name with its bytes and mode.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        let bytes = if m.is_file() { std::fs::read(e.path()).unwrap() } else { Vec::new() };
        out.push((e.path(), bytes, m.mode()));
    }
    out.sort();
    out
}

fn build(bytes: &[u8], host: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut it = bytes.iter().copied();
    let pick = |it: &mut dyn Iterator<Item = u8>| NAMES[it.next().unwrap_or(0) as usize % NAMES.len()];
    while let Some(op) = it.next() {
        let name = pick(&mut it);
        let mut h = tar::Header::new_gnu();
        h.set_mode(if op & 0x10 != 0 { 0o6755 } else { 0o644 });
        h.set_size(0);
        let r = match op % 5 {
            0 => {
                h.set_entry_type(tar::EntryType::Symlink);
                let target = match it.next().unwrap_or(0) % 3 {
                    0 => host.display().to_string(),
                    1 => "..".to_owned(),
                    _ => pick(&mut it).to_owned(),
                };
                b.append_link(&mut h, name, target)
            }
            1 => {
                h.set_entry_type(tar::EntryType::Link);
                let to = pick(&mut it);
                b.append_link(&mut h, name, to)
            }
            2 => {
                h.set_entry_type(tar::EntryType::Directory);
                b.append_data(&mut h, name, &b""[..])
            }
            3 => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(4);
                b.append_data(&mut h, name, &b"data"[..])
            }
            _ => {
                h.set_entry_type(tar::EntryType::Fifo);
                b.append_data(&mut h, name, &b""[..])
            }
        };
        // The builder refuses some names (`..`): write the raw header then.
        if r.is_err() {
            let mut raw = tar::Header::new_old();
            let n = name.as_bytes();
            raw.as_old_mut().name[..n.len().min(100)].copy_from_slice(&n[..n.len().min(100)]);
            raw.set_size(0);
            raw.set_mode(0o644);
            raw.set_entry_type(tar::EntryType::Regular);
            raw.set_cksum();
            let _ = b.append(&raw, &b""[..]);
        }
    }
    b.into_inner().unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("secret"), b"host bytes").unwrap();
    let dst = t.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    let before = snapshot(&host);
    let archive = if first & 1 == 0 { rest.to_vec() } else { build(rest, &host) };
    // Into the directory, and as a new name beside it.
    let _ = unpack(dst.to_str().unwrap(), &archive[..], Modes { exact: false });
    let _ = unpack(dst.join("new").to_str().unwrap(), &archive[..], Modes { exact: false });
    assert_eq!(snapshot(&host), before, "the host directory changed");
    let mut top: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    top.sort();
    assert_eq!(top, ["dst", "host"], "something was made beside the destination");
    for e in walk(&dst) {
        let m = std::fs::symlink_metadata(&e).unwrap();
        assert_eq!(m.mode() & 0o6000, 0, "{} is setuid or setgid", e.display());
    }
});

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            // Make it readable for the walk (an archive may close it).
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}
