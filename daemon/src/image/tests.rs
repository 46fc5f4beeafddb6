//! The image store's tests: layouts built here, unpacked, checked.

use std::io::Write;
use std::os::unix::fs::MetadataExt;

use serde_json::{Value, json};

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use oci_spec::image::Descriptor;
use sha2::{Digest as _, Sha256};
use tar::EntryType;

use super::cache::*;
use super::layout::*;
use super::unpack::*;
use super::*;

const MTIME: u64 = 1_600_000_000;
const TAR: &str = "application/vnd.oci.image.layer.v1.tar";
const TAR_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// What a test layer entry is; the entry's third field is file content or link target.
#[derive(Clone, Copy)]
enum Kind {
    File(u32),
    Dir(u32),
    Symlink,
    Hardlink,
    Fifo,
}
use Kind::*;

type TestEntry<'a> = (&'a str, Kind, &'a str);

struct Layer<'a> {
    entries: Vec<TestEntry<'a>>,
    gzip: bool,
    media_type: &'a str,
}

fn plain<'a>(entries: Vec<TestEntry<'a>>) -> Layer<'a> {
    Layer {
        entries,
        gzip: false,
        media_type: TAR,
    }
}

fn gzipped<'a>(entries: Vec<TestEntry<'a>>) -> Layer<'a> {
    Layer {
        entries,
        gzip: true,
        media_type: TAR_GZIP,
    }
}

/// A tar archive with the entries' paths written verbatim (so `..` and `/` get through).
fn tar_bytes(entries: &[TestEntry]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for &(path, kind, content) in entries {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        let (ty, mode, data) = match kind {
            File(mode) => (EntryType::Regular, mode, content.as_bytes()),
            Dir(mode) => (EntryType::Directory, mode, &[][..]),
            Symlink => (EntryType::Symlink, 0o777, &[][..]),
            Hardlink => (EntryType::Link, 0o644, &[][..]),
            Fifo => (EntryType::Fifo, 0o644, &[][..]),
        };
        if matches!(kind, Symlink | Hardlink) {
            h.set_link_name(content).unwrap();
        }
        h.set_entry_type(ty);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_mtime(MTIME);
        h.set_uid(4321);
        h.set_gid(4321);
        h.set_cksum();
        builder.append(&h, data).unwrap();
    }
    builder.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// Stores a blob and returns its descriptor.
fn blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Value {
    let hex = hex::encode(Sha256::digest(bytes));
    let dir = layout.join("blobs/sha256");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(&hex), bytes).unwrap();
    json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()})
}

fn json_blob(layout: &Path, media_type: &str, value: &Value) -> Value {
    blob(layout, media_type, &serde_json::to_vec(value).unwrap())
}

fn default_config() -> Value {
    json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]})
}

/// Stores layers, config and manifest; returns the manifest descriptor.
fn image(layout: &Path, layers: &[Layer], config: Value, arch: &str) -> Value {
    let layers: Vec<Value> = layers
        .iter()
        .map(|l| {
            let tar = tar_bytes(&l.entries);
            let bytes = if l.gzip { gzip(&tar) } else { tar };
            blob(layout, l.media_type, &bytes)
        })
        .collect();
    let config = json!({
        "architecture": arch, "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": []},
    });
    let config = json_blob(layout, MEDIA_OCI_CONFIG, &config);
    let manifest = json!({"schemaVersion": 2, "mediaType": MEDIA_OCI_MANIFEST, "config": config, "layers": layers});
    json_blob(layout, MEDIA_OCI_MANIFEST, &manifest)
}

fn index(manifests: Vec<Value>) -> Value {
    json!({"schemaVersion": 2, "mediaType": MEDIA_OCI_INDEX, "manifests": manifests})
}

fn write_layout_files(layout: &Path, manifests: Vec<Value>) {
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index(manifests)).unwrap(),
    )
    .unwrap();
}

/// A layout with one image made of `layers`.
fn make_layout(dir: &Path, layers: &[Layer]) -> PathBuf {
    make_layout_with_config(dir, layers, default_config())
}

fn make_layout_with_config(dir: &Path, layers: &[Layer], config: Value) -> PathBuf {
    let layout = dir.join("layout");
    fs::create_dir_all(&layout).unwrap();
    let manifest = image(&layout, layers, config, host_arch());
    write_layout_files(&layout, vec![manifest]);
    layout
}

struct Fixture {
    dir: tempfile::TempDir,
    store: RootfsCache,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = RootfsCache::new(
        dir.path().join("images"),
        ImageLimits::default(),
        Ownership::default(),
    );
    Fixture { dir, store }
}

fn invalid_reason(result: Result<Image, ImageError>) -> String {
    match result {
        Err(ImageError::Invalid { reason, .. }) => reason,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// Every path under `dir` (relative), for checking nothing stray was left.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if is_real_dir(&p) {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[tokio::test]
async fn single_layer() {
    let f = fixture();
    let layout = make_layout(
        f.dir.path(),
        &[plain(vec![
            ("./", Dir(0o755), ""),
            ("bin/", Dir(0o755), ""),
            ("bin/tool", File(0o4755), "#!/bin/sh\n"),
            ("bin/sh", Symlink, "tool"),
            ("bin/hard", Hardlink, "bin/tool"),
            ("/abs/file", File(0o600), "abs"),
            ("tmp/", Dir(0o1777), ""),
            ("dev/null", Fifo, ""),
        ])],
    );
    let image = f.store.load_layout(&layout).await.unwrap();
    let rootfs = &image.rootfs;
    assert!(image.digest.starts_with("sha256:"));
    assert_eq!(
        rootfs,
        &f.dir
            .path()
            .join("images")
            .join(&image.digest[7..])
            .join("rootfs")
    );
    assert_eq!(
        fs::read_to_string(rootfs.join("bin/tool")).unwrap(),
        "#!/bin/sh\n"
    );
    assert_eq!(mode(&rootfs.join("bin/tool")), 0o4755);
    assert_eq!(
        fs::read_link(rootfs.join("bin/sh")).unwrap(),
        Path::new("tool")
    );
    let (tool, hard) = (
        fs::metadata(rootfs.join("bin/tool")).unwrap(),
        fs::metadata(rootfs.join("bin/hard")).unwrap(),
    );
    assert_eq!(tool.ino(), hard.ino());
    assert_eq!(fs::read_to_string(rootfs.join("abs/file")).unwrap(), "abs");
    assert_eq!(mode(&rootfs.join("tmp")), 0o1777);
    assert!(!rootfs.join("dev/null").exists(), "FIFOs are skipped");
    // Ownership is ours, mtimes are the layer's (directories too).
    let me = fs::metadata(f.dir.path()).unwrap().uid();
    assert_eq!(tool.uid(), me);
    assert_eq!(tool.mtime() as u64, MTIME);
    assert_eq!(
        fs::metadata(rootfs.join("bin")).unwrap().mtime() as u64,
        MTIME
    );

    let entry = rootfs.parent().unwrap();
    assert!(entry.join("complete").exists());
    let config: ImageConfig =
        serde_json::from_slice(&fs::read(entry.join("config.json")).unwrap()).unwrap();
    assert_eq!(config, image.config);

    // The second time comes from the cache.
    let again = f.store.load_layout(&layout).await.unwrap();
    assert_eq!(again.rootfs, image.rootfs);
    assert_eq!(f.store.unpack_count(), 1);
}

#[tokio::test]
async fn whiteouts_remove_lower_files_and_opaque_dirs() {
    let f = fixture();
    let layout = make_layout(
        f.dir.path(),
        &[
            plain(vec![
                ("etc/a", File(0o644), "a"),
                ("etc/b", File(0o644), "b"),
                ("etc/gone/deep", File(0o644), "d"),
                ("opq/x", File(0o644), "x"),
                ("opq/sub/y", File(0o644), "y"),
                ("keep/z", File(0o644), "z"),
            ]),
            gzipped(vec![
                ("etc/.wh.a", File(0o644), ""),
                ("etc/.wh.gone", File(0o644), ""),
                ("opq/", Dir(0o755), ""),
                ("opq/new", File(0o644), "new"),
                // The marker comes after this layer's own entry: it must not delete it.
                ("opq/.wh..wh..opq", File(0o644), ""),
                ("etc/.wh.never-existed", File(0o644), ""),
            ]),
        ],
    );
    let image = f.store.load_layout(&layout).await.unwrap();
    assert_eq!(
        walk(&image.rootfs),
        ["etc", "etc/b", "keep", "keep/z", "opq", "opq/new"]
    );
}

#[tokio::test]
async fn upper_layers_replace_files_with_dirs_and_back() {
    let f = fixture();
    let layout = make_layout(
        f.dir.path(),
        &[
            plain(vec![
                ("a", File(0o644), "file"),
                ("b/inner", File(0o644), "x"),
                ("c", Symlink, "a"),
            ]),
            plain(vec![
                ("a/", Dir(0o755), ""),
                ("a/in", File(0o644), "y"),
                ("b", File(0o644), "now a file"),
                ("c", File(0o644), "c"),
            ]),
        ],
    );
    let rootfs = f.store.load_layout(&layout).await.unwrap().rootfs;
    assert_eq!(fs::read_to_string(rootfs.join("a/in")).unwrap(), "y");
    assert_eq!(fs::read_to_string(rootfs.join("b")).unwrap(), "now a file");
    assert_eq!(fs::read_to_string(rootfs.join("c")).unwrap(), "c");
    assert!(!fs::symlink_metadata(rootfs.join("c")).unwrap().is_symlink());
}

#[tokio::test]
async fn digest_mismatch_is_rejected() {
    let f = fixture();
    let layout = make_layout(f.dir.path(), &[plain(vec![("a", File(0o644), "a")])]);
    // Corrupt the largest blob: the layer.
    let blobs = layout.join("blobs/sha256");
    let layer = fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(&layer).unwrap();
    bytes[600] ^= 1;
    fs::write(&layer, bytes).unwrap();
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    let name = layer.file_name().unwrap().to_str().unwrap();
    assert!(
        reason.contains(&format!("blob sha256:{name} has digest")),
        "{reason}"
    );
    assert_eq!(
        walk(&f.dir.path().join("images")),
        Vec::<String>::new(),
        "no cache entry, no temp dir"
    );
}

#[tokio::test]
async fn malformed_digests_are_rejected() {
    let f = fixture();
    let layout = make_layout(f.dir.path(), &[plain(vec![("a", File(0o644), "a")])]);
    for digest in [
        "sha256:../../../../etc/passwd",
        "sha512:abcd",
        &format!("sha256:{}", "A".repeat(64)),
    ] {
        let desc = json!({"mediaType": MEDIA_OCI_MANIFEST, "digest": digest, "size": 10});
        fs::write(
            layout.join("index.json"),
            serde_json::to_vec(&index(vec![desc])).unwrap(),
        )
        .unwrap();
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        // oci-spec's own digest check may catch it first, while parsing index.json.
        assert!(
            reason.contains("digest") || reason.contains("index.json is not valid"),
            "{digest}: {reason}"
        );
    }
}

#[tokio::test]
async fn not_a_layout() {
    let f = fixture();
    let dir = f.dir.path().join("empty");
    fs::create_dir(&dir).unwrap();
    match f.store.load_layout(&dir).await {
        Err(ImageError::NotALayout { reason, .. }) => {
            assert!(reason.contains("oci-layout"), "{reason}")
        }
        other => panic!("expected NotALayout, got {other:?}"),
    }
    fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    match f.store.load_layout(&dir).await {
        Err(ImageError::NotALayout { reason, .. }) => {
            assert!(reason.contains("index.json"), "{reason}")
        }
        other => panic!("expected NotALayout, got {other:?}"),
    }
}

#[tokio::test]
async fn dotdot_entry_does_not_escape() {
    let f = fixture();
    let layout = make_layout(
        f.dir.path(),
        &[plain(vec![
            ("ok", File(0o644), "ok"),
            ("../escape", File(0o644), "x"),
            ("a/../../../escape2", File(0o644), "x"),
        ])],
    );
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("unsafe path ../escape"), "{reason}");
    let all = walk(f.dir.path());
    assert!(!all.iter().any(|p| p.contains("escape")), "{all:?}");
    assert_eq!(walk(&f.dir.path().join("images")), Vec::<String>::new());
}

#[tokio::test]
async fn symlinks_do_not_let_later_entries_escape() {
    let f = fixture();
    let outside = f.dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("victim"), "precious").unwrap();
    let target = outside.to_str().unwrap();
    let cases: Vec<Vec<Layer>> = vec![
        // Absolute symlink in a lower layer, written through by an upper one.
        vec![
            plain(vec![("evil", Symlink, target)]),
            plain(vec![("evil/pwned", File(0o644), "x")]),
        ],
        // Relative symlink climbing out, same layer.
        vec![plain(vec![
            ("up", Symlink, "../../../../../../../.."),
            ("up/pwned", File(0o644), "x"),
        ])],
        // Directory entry through the symlink.
        vec![
            plain(vec![("evil", Symlink, target)]),
            plain(vec![("evil/pwned/", Dir(0o755), "")]),
        ],
        // Hard links pointing outside.
        vec![plain(vec![
            ("evil", Symlink, target),
            ("pwned", Hardlink, "evil/victim"),
        ])],
        vec![plain(vec![("pwned", Hardlink, "../../../outside/victim")])],
    ];
    for (i, layers) in cases.iter().enumerate() {
        let dir = f.dir.path().join(format!("case{i}"));
        let layout = make_layout(&dir, layers);
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(
            reason.contains("outside of destination"),
            "case {i}: {reason}"
        );
    }
    assert_eq!(walk(&outside), ["victim"]);
    assert_eq!(
        fs::read_to_string(outside.join("victim")).unwrap(),
        "precious"
    );

    // Whiteouts do not follow symlinks either (and a file over a symlink replaces the link).
    let layout = make_layout(
        &f.dir.path().join("wh"),
        &[
            plain(vec![
                ("evil", Symlink, target),
                ("link", Symlink, &format!("{target}/victim")),
            ]),
            plain(vec![
                ("evil/.wh.victim", File(0o644), ""),
                ("link", File(0o644), "mine"),
            ]),
        ],
    );
    let rootfs = f.store.load_layout(&layout).await.unwrap().rootfs;
    assert_eq!(fs::read_to_string(rootfs.join("link")).unwrap(), "mine");
    assert_eq!(
        fs::read_to_string(outside.join("victim")).unwrap(),
        "precious"
    );
}

#[tokio::test]
async fn gzip_and_plain_layers() {
    let f = fixture();
    let mislabelled = Layer {
        entries: vec![("c", File(0o644), "c")],
        gzip: true,
        media_type: TAR,
    };
    let docker = Layer {
        entries: vec![("d", File(0o644), "d")],
        gzip: true,
        media_type: "application/vnd.docker.image.rootfs.diff.tar.gzip",
    };
    let layout = make_layout(
        f.dir.path(),
        &[
            plain(vec![("a", File(0o644), "a")]),
            gzipped(vec![("b", File(0o644), "b")]),
            mislabelled,
            docker,
        ],
    );
    let rootfs = f.store.load_layout(&layout).await.unwrap().rootfs;
    assert_eq!(walk(&rootfs), ["a", "b", "c", "d"]);
}

#[tokio::test]
async fn zstd_layers_are_refused_clearly() {
    let f = fixture();
    let zstd = Layer {
        entries: vec![("a", File(0o644), "a")],
        gzip: false,
        media_type: "application/vnd.oci.image.layer.v1.tar+zstd",
    };
    let layout = make_layout(f.dir.path(), &[zstd]);
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(
        reason.contains("zstd layers are not supported yet"),
        "{reason}"
    );
}

/// An architecture that is not this host's.
fn other_arch() -> &'static str {
    if host_arch() == "s390x" {
        "riscv64"
    } else {
        "s390x"
    }
}

fn with_platform(mut desc: Value, arch: &str) -> Value {
    desc["platform"] = json!({"os": "linux", "architecture": arch});
    desc
}

#[tokio::test]
async fn index_picks_this_hosts_platform() {
    let f = fixture();
    let layout = f.dir.path().join("layout");
    fs::create_dir(&layout).unwrap();
    let foreign = image(
        &layout,
        &[plain(vec![("foreign", File(0o644), "")])],
        default_config(),
        other_arch(),
    );
    let native = image(
        &layout,
        &[plain(vec![("native", File(0o644), "")])],
        default_config(),
        host_arch(),
    );
    let nested = index(vec![
        with_platform(foreign.clone(), other_arch()),
        with_platform(native.clone(), host_arch()),
    ]);
    let nested = json_blob(&layout, MEDIA_OCI_INDEX, &nested);
    write_layout_files(&layout, vec![nested]);

    let image = f.store.load_layout(&layout).await.unwrap();
    assert_eq!(image.digest, native["digest"]);
    assert_eq!(walk(&image.rootfs), ["native"]);

    // Directly in index.json too; and no match is a clear error.
    write_layout_files(
        &layout,
        vec![
            with_platform(foreign.clone(), other_arch()),
            with_platform(native, host_arch()),
        ],
    );
    assert_eq!(
        f.store.load_layout(&layout).await.unwrap().digest,
        image.digest
    );
    write_layout_files(
        &layout,
        vec![
            with_platform(foreign.clone(), other_arch()),
            with_platform(foreign, "mips64"),
        ],
    );
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(
        reason.contains(&format!("no manifest for linux/{}", host_arch())),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_unpack_once() {
    let f = fixture();
    let layout = make_layout(f.dir.path(), &[gzipped(vec![("a", File(0o644), "a")])]);
    let (a, b, c) = tokio::join!(
        f.store.load_layout(&layout),
        f.store.load_layout(&layout),
        f.store.load_layout(&layout)
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    assert_eq!(a.rootfs, b.rootfs);
    assert_eq!(a.rootfs, c.rootfs);
    assert_eq!(f.store.unpack_count(), 1);
    let entries = walk(&f.dir.path().join("images"));
    assert_eq!(
        entries.iter().filter(|p| !p.contains('/')).count(),
        1,
        "{entries:?}"
    );
}

#[tokio::test]
async fn config_is_parsed() {
    let f = fixture();
    let config = json!({
        "Env": ["PATH=/usr/bin:/bin", "EQ=a=b", "EMPTY="],
        "WorkingDir": "/work",
        "Entrypoint": ["/bin/sh", "-c"],
        "Cmd": ["echo hi"],
        "User": "1000:1000",
    });
    let layout =
        make_layout_with_config(f.dir.path(), &[plain(vec![("a", File(0o644), "")])], config);
    let image = f.store.load_layout(&layout).await.unwrap();
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        image.config,
        ImageConfig {
            env: vec![
                pair("PATH", "/usr/bin:/bin"),
                pair("EQ", "a=b"),
                pair("EMPTY", "")
            ],
            working_dir: Some("/work".into()),
            entrypoint: vec!["/bin/sh".into(), "-c".into()],
            cmd: vec!["echo hi".into()],
            user: Some("1000:1000".into()),
        }
    );
}

#[tokio::test]
async fn read_only_dirs_stay_writable_for_upper_layers() {
    let f = fixture();
    let layout = make_layout(
        f.dir.path(),
        &[
            plain(vec![
                ("ro/", Dir(0o555), ""),
                ("ro/a", File(0o444), "a"),
                ("ro/sub/", Dir(0o500), ""),
                ("ro/sub/x", File(0o444), "x"),
            ]),
            plain(vec![
                ("ro/b", File(0o644), "b"),
                ("ro/.wh.a", File(0o644), ""),
                ("ro/sub/.wh..wh..opq", File(0o644), ""),
            ]),
        ],
    );
    let image = f.store.load_layout(&layout).await.unwrap();
    let rootfs = &image.rootfs;
    assert_eq!(walk(rootfs), ["ro", "ro/b", "ro/sub"]);
    assert_eq!(mode(&rootfs.join("ro")), 0o755);
    assert_eq!(mode(&rootfs.join("ro/sub")), 0o700);

    // And the entry can be pruned.
    let removed = f.store.prune(&HashSet::new()).await.unwrap();
    assert_eq!(removed, [image.digest]);
    assert!(!rootfs.exists());
}

#[tokio::test]
async fn prune_keeps_what_it_is_told_to() {
    let f = fixture();
    let one = make_layout(
        &f.dir.path().join("one"),
        &[plain(vec![("one", File(0o644), "")])],
    );
    let two = make_layout(
        &f.dir.path().join("two"),
        &[plain(vec![("two", File(0o644), "")])],
    );
    let one = f.store.load_layout(&one).await.unwrap();
    let two = f.store.load_layout(&two).await.unwrap();
    let keep = HashSet::from([one.digest.clone()]);
    assert_eq!(f.store.prune(&keep).await.unwrap(), [two.digest]);
    assert!(one.rootfs.join("one").exists());
    assert!(!two.rootfs.exists());
    assert_eq!(f.store.prune(&keep).await.unwrap(), Vec::<String>::new());
}

// -----------------------------------------------------------------------
// Hostile layouts: blobs that are not files, blobs larger than declared,
// gzip bombs against the size cap, and work stopped at shutdown.
// -----------------------------------------------------------------------

fn fixture_with(max_size: u64) -> (Fixture, CancellationToken) {
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let limits = ImageLimits {
        max_size,
        cancel: cancel.clone(),
    };
    let store = RootfsCache::new(dir.path().join("images"), limits, Ownership::default());
    (Fixture { dir, store }, cancel)
}

/// A layout whose layers are the given blobs; returns it and the blob
/// paths: config, then layers, then the manifest.
fn layout_of_blobs(dir: &Path, layers: &[(&str, Vec<u8>)]) -> (PathBuf, Vec<PathBuf>) {
    let layout = dir.join("layout");
    fs::create_dir_all(&layout).unwrap();
    let descs: Vec<Value> = layers.iter().map(|(m, b)| blob(&layout, m, b)).collect();
    let config = json!({
        "architecture": host_arch(), "os": "linux", "config": default_config(),
        "rootfs": {"type": "layers", "diff_ids": []},
    });
    let config = json_blob(&layout, MEDIA_OCI_CONFIG, &config);
    let manifest = json!({"schemaVersion": 2, "mediaType": MEDIA_OCI_MANIFEST, "config": config, "layers": descs});
    let manifest = json_blob(&layout, MEDIA_OCI_MANIFEST, &manifest);
    write_layout_files(&layout, vec![manifest.clone()]);
    let path = |d: &Value| {
        layout
            .join("blobs/sha256")
            .join(&d["digest"].as_str().unwrap()[7..])
    };
    let mut paths = vec![path(&config)];
    paths.extend(descs.iter().map(path));
    paths.push(path(&manifest));
    (layout, paths)
}

fn replace_with_symlink(path: &Path, target: &Path) {
    fs::remove_file(path).unwrap();
    std::os::unix::fs::symlink(target, path).unwrap();
}

fn replace_with_fifo(path: &Path) {
    fs::remove_file(path).unwrap();
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

fn assert_nothing_cached(f: &Fixture) {
    let images = f.dir.path().join("images");
    if images.exists() {
        assert_eq!(
            walk(&images),
            Vec::<String>::new(),
            "no cache entry, no temp dir"
        );
    }
}

#[tokio::test]
async fn blobs_that_are_symlinks_are_refused() {
    let f = fixture();
    let layer = tar_bytes(&[("a", File(0o644), "a")]);
    // The config a symlink to a host file holding exactly its bytes:
    // its digest matches, and it is refused all the same.
    let (layout, paths) = layout_of_blobs(&f.dir.path().join("cfg"), &[(TAR, layer.clone())]);
    let host_file = f.dir.path().join("host-config.json");
    fs::copy(&paths[0], &host_file).unwrap();
    replace_with_symlink(&paths[0], &host_file);
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(
        reason.contains("is a symbolic link, not a regular file"),
        "{reason}"
    );

    // The layer a symlink to /dev/zero: refused at once, nothing read.
    let (layout, paths) = layout_of_blobs(&f.dir.path().join("zero"), &[(TAR, layer.clone())]);
    replace_with_symlink(&paths[1], Path::new("/dev/zero"));
    let begin = std::time::Instant::now();
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("is a symbolic link"), "{reason}");
    assert!(begin.elapsed() < Duration::from_secs(2));

    // The manifest a symlink to a host copy of itself.
    let (layout, paths) = layout_of_blobs(&f.dir.path().join("man"), &[(TAR, layer)]);
    let host_manifest = f.dir.path().join("host-manifest.json");
    fs::copy(&paths[2], &host_manifest).unwrap();
    replace_with_symlink(&paths[2], &host_manifest);
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("is a symbolic link"), "{reason}");
    assert_nothing_cached(&f);
}

#[tokio::test]
async fn fifo_and_device_blobs_are_refused_without_waiting() {
    let f = fixture();
    let layer = tar_bytes(&[("a", File(0o644), "a")]);
    for (i, which) in [0, 1, 2].into_iter().enumerate() {
        let (layout, paths) = layout_of_blobs(
            &f.dir.path().join(format!("fifo{i}")),
            &[(TAR, layer.clone())],
        );
        replace_with_fifo(&paths[which]);
        let reason = tokio::time::timeout(Duration::from_secs(10), f.store.load_layout(&layout))
            .await
            .map(invalid_reason)
            .expect("a FIFO blob must not block");
        assert!(reason.contains("is a FIFO, not a regular file"), "{reason}");
    }
    // index.json and oci-layout as FIFOs or symlinks.
    let (layout, _) = layout_of_blobs(&f.dir.path().join("index"), &[(TAR, layer.clone())]);
    replace_with_fifo(&layout.join("index.json"));
    let reason = tokio::time::timeout(Duration::from_secs(10), f.store.load_layout(&layout))
        .await
        .map(invalid_reason)
        .expect("a FIFO index.json must not block");
    assert!(reason.contains("index.json is a FIFO"), "{reason}");
    let (layout, _) = layout_of_blobs(&f.dir.path().join("index2"), &[(TAR, layer.clone())]);
    let host_index = f.dir.path().join("host-index.json");
    fs::copy(layout.join("index.json"), &host_index).unwrap();
    replace_with_symlink(&layout.join("index.json"), &host_index);
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("index.json is a symbolic link"), "{reason}");
    let (layout, _) = layout_of_blobs(&f.dir.path().join("header"), &[(TAR, layer)]);
    replace_with_symlink(&layout.join("oci-layout"), Path::new("/dev/zero"));
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("oci-layout is a symbolic link"), "{reason}");
    assert_nothing_cached(&f);
}

#[tokio::test]
async fn blobs_larger_than_declared_are_refused() {
    let f = fixture();
    let layer = tar_bytes(&[("a", File(0o644), "a")]);
    for which in [0, 1, 2] {
        let (layout, paths) = layout_of_blobs(
            &f.dir.path().join(format!("big{which}")),
            &[(TAR, layer.clone())],
        );
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(&paths[which])
            .unwrap();
        file.write_all(&[b' '; 100]).unwrap();
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(
            reason.contains("is larger than the"),
            "blob {which}: {reason}"
        );
    }
    // index.json over its bound.
    let (layout, _) = layout_of_blobs(&f.dir.path().join("index"), &[(TAR, layer)]);
    let file = fs::OpenOptions::new()
        .write(true)
        .open(layout.join("index.json"))
        .unwrap();
    file.set_len(MAX_JSON_BLOB + 1).unwrap();
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("index.json is larger than"), "{reason}");
    assert_nothing_cached(&f);
}

/// A gzip layer holding one file of `size` zero bytes.
fn zeros_layer(name: &str, size: u64) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    {
        let mut tar = tar::Builder::new(&mut gz);
        let mut h = tar::Header::new_gnu();
        h.set_size(size);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, io::repeat(0).take(size))
            .unwrap();
        tar.finish().unwrap();
    }
    gz.finish().unwrap()
}

#[tokio::test]
async fn a_gzip_bomb_stops_at_the_size_cap() {
    let (f, _) = fixture_with(4 << 20);
    let bomb = zeros_layer("bomb", 64 << 20);
    assert!(bomb.len() < 128 << 10, "{} bytes", bomb.len());
    let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, bomb)]);
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(
        reason.contains(
            "the image unpacks to more than 4 MiB (max-image-size); raise `max-image-size`"
        ),
        "{reason}"
    );
    assert_nothing_cached(&f);

    // The cap counts every layer: two of 3 MiB are over 4 MiB, one is not.
    let three = zeros_layer("three", 3 << 20);
    let (layout, _) = layout_of_blobs(
        &f.dir.path().join("two"),
        &[
            (TAR_GZIP, three.clone()),
            (TAR_GZIP, zeros_layer("other", 3 << 20)),
        ],
    );
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("more than 4 MiB"), "{reason}");
    assert_nothing_cached(&f);
    let (layout, _) = layout_of_blobs(&f.dir.path().join("one"), &[(TAR_GZIP, three)]);
    let image = f.store.load_layout(&layout).await.unwrap();
    assert_eq!(
        fs::metadata(image.rootfs.join("three")).unwrap().len(),
        3 << 20
    );

    // 0: no limit.
    let (f, _) = fixture_with(0);
    let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, zeros_layer("big", 8 << 20))]);
    f.store.load_layout(&layout).await.unwrap();
}

#[tokio::test]
async fn the_cap_counts_headers_and_data() {
    // One file of 1 MiB + 1 byte: a 512-byte header, and data rounded up to 512.
    let counted = 512 + (1 << 20) + 512;
    let layer = zeros_layer("f", (1 << 20) + 1);
    let (f, _) = fixture_with(counted);
    let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, layer.clone())]);
    f.store.load_layout(&layout).await.unwrap();
    let (f, _) = fixture_with(counted - 1);
    let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, layer)]);
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("max-image-size"), "{reason}");
    assert_nothing_cached(&f);
}

#[tokio::test]
async fn many_empty_entries_count_their_headers() {
    // 20,000 empty files: no data, 10 MB of tar headers.
    let (f, _) = fixture_with(4 << 20);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    {
        let mut tar = tar::Builder::new(&mut gz);
        for i in 0..20_000 {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, format!("f{i}"), io::empty())
                .unwrap();
        }
        tar.finish().unwrap();
    }
    let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, gz.finish().unwrap())]);
    let reason = invalid_reason(f.store.load_layout(&layout).await);
    assert!(reason.contains("more than 4 MiB"), "{reason}");
    assert_nothing_cached(&f);
}

#[tokio::test]
async fn huge_extension_headers_are_refused_before_they_are_read() {
    let f = fixture();
    let huge = 64u64 << 20;
    for kind in [EntryType::XHeader, EntryType::GNULongName] {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        {
            let mut tar = tar::Builder::new(&mut gz);
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(huge);
            h.set_cksum();
            tar.append_data(&mut h, "ext", io::repeat(b'a').take(huge))
                .unwrap();
            let mut h = tar::Header::new_gnu();
            h.set_size(1);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, "file", &b"x"[..]).unwrap();
            tar.finish().unwrap();
        }
        let (layout, _) = layout_of_blobs(
            &f.dir.path().join(format!("{kind:?}")),
            &[(TAR_GZIP, gz.finish().unwrap())],
        );
        let reason = invalid_reason(f.store.load_layout(&layout).await);
        assert!(reason.contains("extension headers"), "{kind:?}: {reason}");
    }
    assert_nothing_cached(&f);
}

#[tokio::test]
async fn cancelled_work_stops_and_leaves_nothing() {
    let (f, cancel) = fixture_with(0);
    let (layout, _) = layout_of_blobs(f.dir.path(), &[(TAR_GZIP, zeros_layer("big", 1 << 20))]);
    cancel.cancel();
    match f.store.load_layout(&layout).await {
        Err(e) => assert!(matches!(e, ImageError::Stopped), "{e}"),
        Ok(_) => panic!("loaded after cancel"),
    }
    assert_nothing_cached(&f);
}

#[test]
fn unpacking_stops_when_cancelled() {
    // Between entries (the guard) and inside one (the guarded reader).
    let dir = tempfile::tempdir().unwrap();
    let bytes = zeros_layer("big", 8 << 20);
    let (_, paths) = layout_of_blobs(dir.path(), &[(TAR_GZIP, bytes.clone())]);
    let cancel = CancellationToken::new();
    let limits = ImageLimits {
        max_size: 0,
        cancel: cancel.clone(),
    };
    let layer = LayerBlob {
        path: paths[1].clone(),
        digest: "sha256:test".into(),
        media_type: TAR_GZIP,
        size: bytes.len() as u64,
        limits: &limits,
        below: 0,
    };
    let rootfs = dir.path().join("rootfs");
    fs::create_dir(&rootfs).unwrap();
    let mut guard = TarGuard::new(&limits, 0);
    let mut archive = layer.open(&guard).unwrap();
    let mut entries = archive.entries().unwrap();
    let mut entry = guard.next(&mut entries).unwrap().unwrap();
    let mut buf = [0u8; 4096];
    entry.read_exact(&mut buf).unwrap();
    cancel.cancel();
    let e = entry.read_exact(&mut buf).unwrap_err();
    assert!(matches!(
        layer.error("cannot unpack big", e),
        ImageError::Stopped
    ));
    assert!(matches!(
        guard.next(&mut entries),
        Some(Err(TarStop::Stopped))
    ));
    assert!(matches!(layer.scan_whiteouts(), Err(ImageError::Stopped)));
    let mut mtimes = HashMap::new();
    assert!(matches!(
        layer.extract(&rootfs, &mut mtimes, Owners::Flatten),
        Err(ImageError::Stopped)
    ));
    assert!(!rootfs.join("big").exists());
}

#[test]
fn a_huge_blob_stops_hashing_when_cancelled() {
    // A 1 TiB sparse blob, declared as such: hashing would take minutes.
    let dir = tempfile::tempdir().unwrap();
    let (layout, paths) =
        layout_of_blobs(dir.path(), &[(TAR, tar_bytes(&[("a", File(0o644), "a")]))]);
    let file = fs::OpenOptions::new().write(true).open(&paths[1]).unwrap();
    file.set_len(1 << 40).unwrap();
    let cancel = CancellationToken::new();
    let limits = ImageLimits {
        max_size: 0,
        cancel: cancel.clone(),
    };
    let layout = Layout::open(&layout).unwrap().limited(limits);
    let digest = format!("sha256:{}", paths[1].file_name().unwrap().to_str().unwrap());
    let desc: Descriptor =
        serde_json::from_value(json!({"mediaType": TAR, "digest": digest, "size": 1u64 << 40}))
            .unwrap();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        cancel.cancel();
    });
    let begin = std::time::Instant::now();
    let e = layout.verify_blob_file(&desc).unwrap_err();
    assert!(matches!(e, ImageError::Stopped), "{e}");
    assert!(
        begin.elapsed() < Duration::from_secs(5),
        "{:?}",
        begin.elapsed()
    );
    stopper.join().unwrap();
}
