//! A real OCI image layout built from the host's static busybox, with no network.
//!
//! The layer is a plain (uncompressed) tar, media type
//! `application/vnd.oci.image.layer.v1.tar`, so no compression crate is needed.
//! Every entry has a fixed mtime and owner, so the same busybox gives the same
//! manifest digest.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Where Debian's busybox-static puts the binary.
const BUSYBOX_PATHS: [&str; 2] = ["/bin/busybox", "/usr/bin/busybox"];
const INSTALL_HINT: &str = "install it with `apt-get install busybox-static`";
/// A fixed mtime for every entry, so the layout is reproducible.
const MTIME: u64 = 1_700_000_000;

const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";

const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const GROUP: &str = "root:x:0:\nnobody:x:65534:\n";

/// Builds (once per path; reuse if `dir/index.json` exists) an OCI image layout at `dir` containing
/// busybox at /bin/busybox, a symlink /bin/<applet> -> busybox for every applet in `busybox --list`,
/// directories /etc /tmp (1777) /root /proc /dev /sys /var /workspace, /etc/passwd and /etc/group with root and nobody,
/// and a config with Env ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"], WorkingDir "/", Cmd ["sh"].
/// Single layer (plain tar). Returns `dir`. Panics with a clear message (including "apt-get install busybox-static") if busybox is missing.
///
/// Safe for concurrent callers: the layout is built in a temporary sibling
/// directory and renamed into place; whoever loses the race uses the winner's.
pub fn busybox_layout(dir: &Path) -> PathBuf {
    if dir.join("index.json").exists() {
        return dir.to_path_buf();
    }
    let busybox = find_busybox();
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(parent)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
    let tmp = tempfile::Builder::new()
        .prefix(".busybox-layout-")
        .tempdir_in(parent)
        .unwrap_or_else(|e| {
            panic!(
                "cannot create a temporary directory in {}: {e}",
                parent.display()
            )
        });
    write_layout(tmp.path(), &busybox);
    set_mode(tmp.path(), 0o755); // tempdir_in makes it 0700
    if let Err(e) = fs::rename(tmp.path(), dir) {
        // Someone else finished first (their rename won); `tmp` is removed on drop.
        assert!(
            dir.join("index.json").exists(),
            "cannot move the busybox layout to {}: {e}",
            dir.display()
        );
    }
    dir.to_path_buf()
}

/// The host's busybox, which must be statically linked to run inside an image.
/// The static busybox binary the test image is made from (also handy on
/// the host, for the same tool inside and outside a box).
pub fn busybox_binary() -> PathBuf {
    find_busybox()
}

fn find_busybox() -> PathBuf {
    let path = BUSYBOX_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "busybox not found at {}; {INSTALL_HINT}",
                BUSYBOX_PATHS.join(" or ")
            )
        });
    let elf = fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        !has_interpreter(&elf),
        "{} is dynamically linked and cannot run inside an image; {INSTALL_HINT}",
        path.display()
    );
    path
}

/// Whether a 64-bit little-endian ELF file asks for a dynamic loader (has a PT_INTERP segment).
fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |o: usize| {
        elf.get(o..o + 2)
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8).map_or(0, |b| {
            u64::from_le_bytes(b.try_into().unwrap_or_default()) as usize
        })
    };
    if !elf.starts_with(b"\x7fELF\x02\x01") {
        return false; // not 64-bit little-endian: let running it tell
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| u32_at(phoff.saturating_add(i.saturating_mul(phentsize))) == PT_INTERP)
}

/// The applets a busybox binary provides, from `busybox --list`.
fn applets(busybox: &Path) -> Vec<String> {
    let out = Command::new(busybox)
        .arg("--list")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} --list: {e}", busybox.display()));
    assert!(
        out.status.success(),
        "{} --list failed: {}",
        busybox.display(),
        out.status
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_owned)
        .collect()
}

/// Writes oci-layout, the blobs and index.json into `dir` (index.json last).
fn write_layout(dir: &Path, busybox: &Path) {
    let config = serde_json::json!({
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"],
        "WorkingDir": "/",
        "Cmd": ["sh"],
    });
    write_layout_with(dir, busybox, config);
}

/// [`write_layout`] with `config` as the image config's `config` section,
/// under the ref name `busybox`.
fn write_layout_with(dir: &Path, busybox: &Path, config: serde_json::Value) {
    let layer = layer_tar(busybox);
    let layer_digest = sha256(&layer);
    let layer_desc = write_blob(dir, MEDIA_LAYER, &layer);
    let image_config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": config,
        // The layer is uncompressed, so its diff ID is its digest.
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    });
    let config_desc = write_blob(dir, MEDIA_CONFIG, &to_json(&image_config));
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config_desc,
        "layers": [layer_desc],
    });
    let mut manifest_desc = write_blob(dir, MEDIA_MANIFEST, &to_json(&manifest));
    manifest_desc["platform"] = serde_json::json!({"architecture": oci_arch(), "os": "linux"});
    manifest_desc["annotations"] =
        serde_json::json!({"org.opencontainers.image.ref.name": "busybox"});
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [manifest_desc]});
    write(
        &dir.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    );
    write(&dir.join("index.json"), &to_json(&index));
}

/// The root filesystem as an uncompressed tar.
fn layer_tar(busybox: &Path) -> Vec<u8> {
    let binary =
        fs::read(busybox).unwrap_or_else(|e| panic!("cannot read {}: {e}", busybox.display()));
    let mut tar = tar::Builder::new(Vec::new());
    dir_entry(&mut tar, "bin", 0o755);
    file_entry(&mut tar, "bin/busybox", 0o755, &binary);
    for applet in applets(busybox) {
        symlink_entry(&mut tar, &format!("bin/{applet}"), "busybox");
    }
    for (dir, mode) in [
        ("etc", 0o755),
        ("tmp", 0o1777),
        ("root", 0o700),
        ("proc", 0o555),
        ("dev", 0o755),
        ("sys", 0o555),
        ("var", 0o755),
        ("workspace", 0o755),
    ] {
        dir_entry(&mut tar, dir, mode);
    }
    file_entry(&mut tar, "etc/passwd", 0o644, PASSWD.as_bytes());
    file_entry(&mut tar, "etc/group", 0o644, GROUP.as_bytes());
    tar.into_inner()
        .unwrap_or_else(|e| panic!("cannot finish the busybox layer: {e}"))
}

/// A header owned by root with the fixed mtime.
fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(MTIME);
    h.set_uid(0);
    h.set_gid(0);
    h
}

fn dir_entry(tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32) {
    let mut h = header(tar::EntryType::Directory, mode, 0);
    tar.append_data(&mut h, format!("{path}/"), std::io::empty())
        .unwrap_or_else(|e| panic!("cannot add {path} to the busybox layer: {e}"));
}

fn file_entry(tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]) {
    let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
    tar.append_data(&mut h, path, data)
        .unwrap_or_else(|e| panic!("cannot add {path} to the busybox layer: {e}"));
}

fn symlink_entry(tar: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
    tar.append_link(&mut h, path, target)
        .unwrap_or_else(|e| panic!("cannot add {path} to the busybox layer: {e}"));
}

/// Stores a blob under `blobs/sha256/` and returns its descriptor.
fn write_blob(dir: &Path, media_type: &str, bytes: &[u8]) -> serde_json::Value {
    let digest = sha256(bytes);
    let blobs = dir.join("blobs").join("sha256");
    fs::create_dir_all(&blobs).unwrap_or_else(|e| panic!("cannot create {}: {e}", blobs.display()));
    write(&blobs.join(&digest["sha256:".len()..]), bytes);
    serde_json::json!({"mediaType": media_type, "digest": digest, "size": bytes.len()})
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn to_json(value: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| panic!("cannot serialize {value}: {e}"))
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", path.display()));
}

fn write(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// The OCI name of this host's architecture (`amd64`, `arm64`).
pub fn host_arch() -> &'static str {
    oci_arch()
}

/// The OCI name of this host's architecture.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// An uncompressed layer holding one file.
pub fn file_layer(path: &str, data: &[u8]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, path, 0o644, data);
    tar.into_inner().expect("finish a layer")
}

/// An uncompressed layer holding symlinks: `(path, target)`.
pub fn symlink_layer(links: &[(&str, &str)]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, target) in links {
        symlink_entry(&mut tar, path, target);
    }
    tar.into_inner().expect("finish a layer")
}

/// The other architecture in a two-platform index.
pub fn foreign_arch() -> &'static str {
    if oci_arch() == "arm64" {
        "amd64"
    } else {
        "arm64"
    }
}

/// Builds at `dir` a layout whose index lists one image per entry of
/// `images`: `(architecture, extra layers on top of busybox)`. Returns the
/// manifest digest of each, in order.
pub fn layout_with(dir: &Path, images: &[(&str, Vec<Vec<u8>>)]) -> Vec<String> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    let base = layer_tar(&find_busybox());
    let mut descs = Vec::new();
    let mut digests = Vec::new();
    for (arch, extra) in images {
        let mut layers = vec![write_blob(dir, MEDIA_LAYER, &base)];
        let mut diff_ids = vec![sha256(&base)];
        for l in extra {
            layers.push(write_blob(dir, MEDIA_LAYER, l));
            diff_ids.push(sha256(l));
        }
        let config = serde_json::json!({
            "architecture": arch, "os": "linux",
            "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"], "Cmd": ["sh"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        });
        let config_desc = write_blob(dir, MEDIA_CONFIG, &to_json(&config));
        let manifest = serde_json::json!({"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config_desc, "layers": layers});
        let mut desc = write_blob(dir, MEDIA_MANIFEST, &to_json(&manifest));
        digests.push(desc["digest"].as_str().unwrap().to_owned());
        desc["platform"] = serde_json::json!({"architecture": arch, "os": "linux"});
        descs.push(desc);
    }
    // index.json names one image index (as skopeo's `oci:` transport wants),
    // which lists the platforms.
    let inner =
        serde_json::json!({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": descs});
    let mut inner_desc = write_blob(dir, MEDIA_INDEX, &to_json(&inner));
    inner_desc["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": "latest"});
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [inner_desc]});
    write(
        &dir.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    );
    write(&dir.join("index.json"), &to_json(&index));
    digests
}

/// Writes a `docker save` tarball (the pre-OCI `manifest.json` format) of
/// the busybox image, tagged `tag`.
pub fn docker_save_tarball(out: &Path, tag: &str) {
    let layer = layer_tar(&find_busybox());
    let layer_digest = sha256(&layer);
    let config = serde_json::json!({
        "architecture": oci_arch(), "os": "linux",
        "config": {"Env": ["PATH=/bin", "HOME=/root", "FROM_DOCKER_SAVE=1"], "Cmd": ["sh"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    });
    let config = to_json(&config);
    let config_name = format!("{}.json", &sha256(&config)[7..]);
    let layer_name = format!("{}/layer.tar", &layer_digest[7..]);
    let manifest =
        serde_json::json!([{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]);
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, &config_name, 0o644, &config);
    dir_entry(&mut tar, &layer_digest[7..], 0o755);
    file_entry(&mut tar, &layer_name, 0o644, &layer);
    file_entry(&mut tar, "manifest.json", 0o644, &to_json(&manifest));
    write(out, &tar.into_inner().unwrap());
}

/// Builds at `dir` (replacing whatever is there) the busybox image with
/// `config` as its image config's `config` section (`User`, `Env`, `Cmd`,
/// `Labels`, …: everything an image's author controls), under the ref name
/// `busybox`. For hostile images: the layer is busybox's own, so only what
/// `config` says differs. Returns `dir`.
pub fn busybox_layout_with_config(dir: &Path, config: serde_json::Value) -> PathBuf {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    write_layout_with(dir, &find_busybox(), config);
    set_mode(dir, 0o755);
    dir.to_path_buf()
}
