//! Snapshots, clones and box archives, through `boxctl` and the client
//! library, on real boxes.

use std::io::{Read, Write};
use std::process::Output;

use boxd_client::{Client, tonic::Code, v1};
use boxd_tests::*;

fn stdout(out: Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The box directories under the daemon's home (one per box).
fn box_dirs(d: &Daemon) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d.home.join("boxes"))
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn snapshot_write_restore_returns_the_old_bytes() {
    let d = Daemon::start();
    ok(d.boxctl()
        .args(["create", "snap", "--image"])
        .arg(busybox()));
    ok(d.boxctl().args(["start", "snap"]));
    let sh = |script: &str| {
        stdout(ok(d
            .boxctl()
            .args(["exec", "snap", "--", "sh", "-c", script])))
    };
    // Before the snapshot: a file of ours, and an image file deleted (a
    // whiteout in the snapshot).
    sh("mkdir -p /data && printf old > /data/f && rm /bin/arch");
    let out = ok(d
        .boxctl()
        .args(["snapshot", "create", "snap", "s1", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "s1");
    assert_eq!(v["box"], "snap");

    // After it: change, delete an image file, add.
    sh("printf new > /data/f && rm /bin/ascii && echo x > /data/g");
    let err = fails(d.boxctl().args(["snapshot", "restore", "snap", "s1"]));
    assert!(err.contains("running"), "{err}");

    ok(d.boxctl().args(["stop", "snap"]));
    ok(d.boxctl().args(["snapshot", "restore", "snap", "s1"]));
    ok(d.boxctl().args(["start", "snap"]));
    assert_eq!(sh("cat /data/f"), "old");
    assert_eq!(
        sh(
            "[ -e /bin/ascii ] && echo back; [ -e /bin/arch ] || echo gone; [ -e /data/g ] || echo none"
        ),
        "back\ngone\nnone\n"
    );
    // The box writes on after a restore (its work directory was emptied).
    sh("printf newer > /data/f");
    assert_eq!(sh("cat /data/f"), "newer");

    // Listed, then removed; a second snapshot of that name is refused.
    let err = fails(d.boxctl().args(["snapshot", "create", "snap", "s1"]));
    assert!(err.contains("already"), "{err}");
    let out = ok(d.boxctl().args(["snapshot", "ls", "snap", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["name"], "s1");
    assert!(v[0]["createdAtMs"].as_i64().unwrap() > 0);
    let human = stdout(ok(d.boxctl().args(["snapshot", "ls", "snap"])));
    assert!(human.starts_with("NAME") && human.contains("s1"), "{human}");
    ok(d.boxctl().args(["snapshot", "rm", "snap", "s1"]));
    let out = ok(d.boxctl().args(["snapshot", "ls", "snap", "--json"]));
    assert_eq!(stdout(out).trim(), "[]");
    ok(d.boxctl().args(["stop", "snap"]));
    let err = fails(d.boxctl().args(["snapshot", "restore", "snap", "s1"]));
    assert!(err.contains("no snapshot"), "{err}");

    // A default name is made up (the time).
    let out = ok(d.boxctl().args(["snapshot", "create", "snap", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["name"].as_str().unwrap().starts_with("20"), "{v}");
    ok(d.boxctl().args(["rm", "-f", "snap"]));
}

#[test]
fn snapshot_names_and_archive_paths_are_validated() {
    let d = Daemon::start();
    ok(d.boxctl().args(["create", "val", "--image"]).arg(busybox()));
    for bad in ["../x", ".hidden", "-x", "a/b", &"n".repeat(65), "sp ace"] {
        let err = fails(d.boxctl().args(["snapshot", "create", "--", "val", bad]));
        assert!(err.contains("invalid snapshot name"), "{bad}: {err}");
        let err = fails(d.boxctl().args(["clone", "--", "val", bad]));
        assert!(err.contains("invalid box name"), "{bad}: {err}");
    }
    let err = fails(d.boxctl().args(["snapshot", "ls", "nobox"]));
    assert!(err.contains("no box"), "{err}");
    let err = fails(d.boxctl().args(["clone", "nobox", "new"]));
    assert!(err.contains("no box"), "{err}");
    let err = fails(d.boxctl().args(["clone", "val", "val"]));
    assert!(err.contains("exists"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let there = dir.path().join("there");
    std::fs::write(&there, b"keep").unwrap();
    let err = fails(d.boxctl().args(["export", "val"]).arg(&there));
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read(&there).unwrap(), b"keep");
    let err = fails(
        d.boxctl()
            .args(["export", "val"])
            .arg(dir.path().join("missing/dir/a.tgz")),
    );
    assert!(err.contains("directory"), "{err}");
    let err = fails(d.boxctl().args(["import-box"]).arg(&there).arg("imp"));
    assert!(err.contains("not a usable box archive"), "{err}");
    let err = fails(d.boxctl().args(["import-box", "/no/such/file", "imp"]));
    assert!(err.contains("No such file"), "{err}");
    let names: Vec<String> = stdout(ok(d.boxctl().args(["ls", "--json"])))
        .lines()
        .map(String::from)
        .collect();
    assert!(!names.join("").contains("\"imp\""));
    ok(d.boxctl().args(["rm", "val"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clone_of_a_running_box_has_its_files_and_runs_on_its_own() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "src", busybox_spec()).await;
    sh(
        &mut c,
        "src",
        "mkdir /work && echo one > /work/a && rm /bin/arch && rm -rf /etc && mkdir /etc && touch /etc/mine",
    )
    .await;
    // An edit made just before the clone is in it.
    sh(&mut c, "src", "echo two >> /work/a").await;
    let r = c
        .clone_box(v1::CloneBoxRequest {
            source: "src".into(),
            name: "copy".into(),
        })
        .await
        .expect("clone")
        .into_inner();
    assert!(r.created);
    let b = r.r#box.unwrap();
    assert_eq!(b.name, "copy");
    assert_eq!(b.state, v1::BoxState::Created as i32);
    start(&mut c, "copy").await;
    assert_eq!(sh(&mut c, "copy", "cat /work/a").await, "one\ntwo\n");
    assert_eq!(
        sh(&mut c, "copy", "[ -e /bin/arch ] || echo gone; ls /etc").await,
        "gone\nmine\n"
    );
    // Writes to either do not show in the other.
    sh(&mut c, "copy", "echo clone > /work/b").await;
    sh(&mut c, "src", "echo source > /work/c").await;
    assert_eq!(
        sh(&mut c, "src", "ls /work").await,
        "a\nc\n",
        "the source sees none of the clone's writes"
    );
    assert_eq!(sh(&mut c, "copy", "ls /work").await, "a\nb\n");

    // Through the JSONL envelope too.
    let mut j = Jsonl::start(&d.socket);
    let v = j.call(
        1,
        "box.clone",
        serde_json::json!({"source": "src", "name": "copy2"}),
    );
    assert_eq!(v["result"]["created"], true, "{v}");
    let v = j.call(
        2,
        "box.clone",
        serde_json::json!({"source": "src", "name": "copy2"}),
    );
    assert!(v["error"].is_object(), "{v}");
    let v = j.call(
        3,
        "box.snapshot",
        serde_json::json!({"name": "copy2", "snapshot": "j1"}),
    );
    assert_eq!(v["result"]["name"], "j1", "{v}");
    let v = j.call(4, "box.snapshots", serde_json::json!({"name": "copy2"}));
    assert_eq!(v["result"][0]["name"], "j1", "{v}");
    let v = j.call(
        5,
        "box.restore",
        serde_json::json!({"name": "copy2", "snapshot": "j1"}),
    );
    assert!(v["result"].is_object(), "{v}");
    let v = j.call(
        6,
        "box.removeSnapshot",
        serde_json::json!({"name": "copy2", "snapshot": "j1"}),
    );
    assert!(v["result"].is_object(), "{v}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy2.tgz").to_string_lossy().into_owned();
    let v = j.call(
        8,
        "box.export",
        serde_json::json!({"name": "copy2", "path": path}),
    );
    assert!(v["result"]["sizeBytes"].as_u64().unwrap() > 0, "{v}");
    let v = j.call(
        9,
        "box.import",
        serde_json::json!({"path": path, "name": "copy3"}),
    );
    assert_eq!(v["result"]["created"], true, "{v}");
    let v = j.call(
        10,
        "box.export",
        serde_json::json!({"name": "copy2", "path": path}),
    );
    assert_eq!(v["error"]["code"], "already_exists", "{v}");
    let v = j.call(7, "host.describe", serde_json::json!({}));
    let caps = v["result"]["capabilities"].to_string();
    for m in ["box.snapshot", "box.clone", "box.export", "box.import"] {
        assert!(caps.contains(m), "{m} in {caps}");
    }
    drop(j);

    for name in ["src", "copy", "copy2", "copy3"] {
        c.remove_box(v1::RemoveBoxRequest {
            name: name.into(),
            force: true,
        })
        .await
        .unwrap();
    }
}

/// Every byte of a gzip archive, uncompressed.
fn gunzip(path: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn export_then_import_keeps_files_modes_owners_and_whiteouts_but_no_secret() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let spec = v1::BoxSpec {
        env: [("KEEP".to_string(), "me".to_string())].into(),
        ..busybox_spec()
    };
    up(&mut c, "orig", spec).await;
    sh(
        &mut c,
        "orig",
        "mkdir -p /w/d && echo data > /w/f && chown 1234:5678 /w/f && chmod 0640 /w/f \
         && chmod 0750 /w/d && ln -s ../f /w/d/link && ln /w/f /w/hard && rm /bin/arch \
         && dd if=/dev/urandom of=/w/big bs=64k count=16 2>/dev/null && md5sum /w/big > /w/big.md5 \
         && rm -rf /etc && mkdir /etc && echo new > /etc/new",
    )
    .await;
    let before = sh(
        &mut c,
        "orig",
        "stat -c '%n %u:%g %a %h' /w/f /w/d /w/hard && readlink /w/d/link && md5sum /w/big",
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("orig.boxd.tgz");
    let out = ok(d
        .boxctl()
        .args(["export", "orig"])
        .arg(&archive)
        .arg("--json"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let size = std::fs::metadata(&archive).unwrap().len();
    assert_eq!(v["sizeBytes"].as_u64(), Some(size));
    assert!(gunzip(&archive).starts_with(b"boxd-box.json"));
    // Only the archive is left in the directory (no temporary file).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    ok(d.boxctl().args(["rm", "-f", "orig"]));
    let out = ok(d
        .boxctl()
        .arg("import-box")
        .arg(&archive)
        .args(["back", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["created"], true, "{v}");
    start(&mut c, "back").await;
    let after = sh(
        &mut c,
        "back",
        "stat -c '%n %u:%g %a %h' /w/f /w/d /w/hard && readlink /w/d/link && md5sum /w/big",
    )
    .await;
    assert_eq!(after, before);
    assert!(after.contains("/w/f 1234:5678 640 2"), "{after}");
    assert_eq!(
        sh(
            &mut c,
            "back",
            "[ -e /bin/arch ] || echo gone; echo $KEEP; cat /w/d/link"
        )
        .await,
        "gone\nme\ndata\n"
    );
    // /etc was replaced: an opaque directory hides the image's files.
    assert_eq!(sh(&mut c, "back", "ls /etc").await, "new\n");
    assert_eq!(
        sh(&mut c, "back", "md5sum -c /w/big.md5").await,
        "/w/big: OK\n"
    );

    // A secret's value never leaves boxd: not in the archive, and an
    // import says which secrets were dropped.
    const VALUE: &str = "s3cr3t-value-that-never-leaves";
    let shared = host_dir();
    let spec = v1::BoxSpec {
        mounts: vec![v1::Mount {
            host_path: shared.path().to_string_lossy().into_owned(),
            guest_path: "/shared".into(),
            read_only: false,
        }],
        allow_net: vec!["example.com".into()],
        secrets: vec![v1::Secret {
            name: "TOKEN".into(),
            hosts: vec!["example.com".into()],
            placeholder: String::new(),
            value: VALUE.into(),
        }],
        ports: vec![v1::PortMapping {
            host_ip: "0.0.0.0".into(),
            box_port: 80,
            ..Default::default()
        }],
        ..busybox_spec()
    };
    create(&mut c, "sec", spec).await;
    let sec = dir.path().join("sec.tgz");
    ok(d.boxctl().args(["export", "sec"]).arg(&sec));
    let bytes = gunzip(&sec);
    assert!(
        !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
        "a secret's value is in the archive"
    );
    let out = ok(d
        .boxctl()
        .arg("import-box")
        .arg(&sec)
        .args(["sec2", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains("TOKEN") && warnings.contains("secret"),
        "{warnings}"
    );
    // The exporting host's paths are not mounted by an import.
    assert!(
        warnings.contains("mounts were not imported") && warnings.contains("/shared"),
        "{warnings}"
    );
    let info = c
        .inspect_box(v1::InspectBoxRequest {
            name: "sec2".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let spec = info.spec.unwrap();
    assert!(spec.secrets.is_empty());
    assert!(spec.mounts.is_empty());
    // Nor what the box may reach or where it listens on this host: an
    // archive from someone else must not choose (it listened on 0.0.0.0).
    assert!(spec.allow_net.is_empty(), "{:?}", spec.allow_net);
    assert!(spec.ports.is_empty(), "{:?}", spec.ports);
    assert!(
        warnings.contains("allow-list was not imported") && warnings.contains("example.com"),
        "{warnings}"
    );
    assert!(
        warnings.contains("published ports were not imported") && warnings.contains("0.0.0.0:0:80"),
        "{warnings}"
    );
    // The importer may give them again.
    ok(d.boxctl().arg("import-box").arg(&sec).args([
        "sec3",
        "--allow-net",
        "example.com",
        "--publish",
        "127.0.0.1:0:80",
    ]));
    let spec = c
        .inspect_box(v1::InspectBoxRequest {
            name: "sec3".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .spec
        .unwrap();
    assert_eq!(spec.allow_net, ["example.com"]);
    assert_eq!(spec.ports.len(), 1);
    assert_eq!(spec.ports[0].host_ip, "127.0.0.1");

    // A second import under a taken name is refused, and leaves nothing.
    let dirs = box_dirs(&d);
    let err = fails(d.boxctl().arg("import-box").arg(&archive).arg("back"));
    assert!(err.contains("exists"), "{err}");
    assert_eq!(box_dirs(&d), dirs);
    for name in ["back", "sec", "sec2", "sec3"] {
        c.remove_box(v1::RemoveBoxRequest {
            name: name.into(),
            force: true,
        })
        .await
        .unwrap();
    }
}

/// A box archive whose manifest is a real one (from `template`), and
/// whose files are what `add` writes.
fn hostile_archive(
    template: &std::path::Path,
    path: &std::path::Path,
    add: impl FnOnce(&mut tar::Builder<flate2::write::GzEncoder<std::fs::File>>),
) {
    let manifest = {
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(
            std::fs::File::open(template).unwrap(),
        ));
        let mut e = a.entries().unwrap().next().unwrap().unwrap();
        let mut v = Vec::new();
        e.read_to_end(&mut v).unwrap();
        v
    };
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut b = tar::Builder::new(gz);
    let mut h = tar::Header::new_gnu();
    h.set_size(manifest.len() as u64);
    h.set_mode(0o600);
    b.append_data(&mut h, "boxd-box.json", manifest.as_slice())
        .unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    b.append_data(&mut h, "files", std::io::empty()).unwrap();
    add(&mut b);
    b.into_inner().unwrap().finish().unwrap().flush().unwrap();
}

/// A raw header whose name is written as is (the tar crate's own setters
/// refuse `..` and absolute paths).
fn raw_header(kind: tar::EntryType, name: &[u8], link: &[u8], size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(size);
    let gnu = h.as_gnu_mut().expect("a GNU header");
    gnu.name[..name.len()].copy_from_slice(name);
    gnu.linkname[..link.len()].copy_from_slice(link);
    h.set_cksum();
    h
}

fn append_raw(
    b: &mut tar::Builder<flate2::write::GzEncoder<std::fs::File>>,
    h: &tar::Header,
    data: &[u8],
) {
    b.append(h, data).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_box_archives_are_refused_and_leave_nothing_behind() {
    let d = Daemon::with_env(
        "namespace",
        vec![("BOXD_MAX_IMAGE_SIZE".into(), "16M".into())],
    );
    let mut c = d.client().await;
    create(&mut c, "tmpl", busybox_spec()).await;
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("tmpl.tgz");
    ok(d.boxctl().args(["export", "tmpl"]).arg(&template));
    // A canary beside the boxes: nothing an archive says may reach it.
    let canary = dir.path().join("canary");
    std::fs::write(&canary, b"untouched").unwrap();
    let canary_s = canary.to_string_lossy().into_owned();

    type Add = Box<dyn FnOnce(&mut tar::Builder<flate2::write::GzEncoder<std::fs::File>>)>;
    let canary_abs = canary_s.clone();
    let cases: Vec<(&str, Add, &str)> = vec![
        (
            "dotdot",
            Box::new(|b| {
                let h = raw_header(tar::EntryType::Regular, b"files/../../../escape", b"", 1);
                append_raw(b, &h, b"x");
            }),
            "leaves",
        ),
        (
            "absolute",
            Box::new(move |b| {
                let name = canary_abs.clone().into_bytes();
                let h = raw_header(tar::EntryType::Regular, &name, b"", 1);
                append_raw(b, &h, b"x");
            }),
            "outside",
        ),
        (
            "through-symlink",
            Box::new(move |b| {
                let h = raw_header(tar::EntryType::Symlink, b"files/up", b"/", 0);
                append_raw(b, &h, b"");
                let name = format!("files/up{}", canary_s.clone());
                let h = raw_header(tar::EntryType::Regular, name.as_bytes(), b"", 1);
                append_raw(b, &h, b"x");
            }),
            "symbolic link",
        ),
        (
            "hardlink-out",
            Box::new(|b| {
                let h = raw_header(tar::EntryType::Link, b"files/pw", b"/etc/passwd", 0);
                append_raw(b, &h, b"");
            }),
            "outside",
        ),
        (
            "hardlink-dotdot",
            Box::new(|b| {
                let h = raw_header(tar::EntryType::Link, b"files/pw", b"files/../../x", 0);
                append_raw(b, &h, b"");
            }),
            "leaves",
        ),
        (
            "device",
            Box::new(|b| {
                let mut h = raw_header(tar::EntryType::Char, b"files/mem", b"", 0);
                h.set_device_major(1).unwrap();
                h.set_device_minor(1).unwrap();
                h.set_cksum();
                append_raw(b, &h, b"");
            }),
            "device",
        ),
        (
            "overwrite",
            Box::new(|b| {
                for _ in 0..2 {
                    let h = raw_header(tar::EntryType::Regular, b"files/twice", b"", 1);
                    append_raw(b, &h, b"x");
                }
            }),
            "twice",
        ),
        (
            "too-big",
            Box::new(|b| {
                let mut h = tar::Header::new_gnu();
                h.set_size(17 << 20);
                h.set_mode(0o644);
                b.append_data(&mut h, "files/big", std::io::repeat(0).take(17 << 20))
                    .unwrap();
            }),
            "max-image-size",
        ),
    ];
    let dirs = box_dirs(&d);
    for (name, add, says) in cases {
        let path = dir.path().join(format!("{name}.tgz"));
        hostile_archive(&template, &path, add);
        let err = c
            .import_box(v1::ImportBoxRequest {
                path: path.to_string_lossy().into_owned(),
                name: format!("h-{name}"),
                ..Default::default()
            })
            .await
            .expect_err(name);
        assert!(
            matches!(err.code(), Code::InvalidArgument | Code::ResourceExhausted),
            "{name}: {err:?}"
        );
        assert!(err.message().contains(says), "{name}: {}", err.message());
        assert_eq!(box_dirs(&d), dirs, "{name}: a box directory was left");
        assert_eq!(std::fs::read(&canary).unwrap(), b"untouched", "{name}");
        assert!(!dir.path().join("escape").exists(), "{name}");
    }
    let names: Vec<String> = list(&mut c).await.into_iter().map(|b| b.name).collect();
    assert_eq!(names, ["tmpl"]);
}

async fn snapshot_size(c: &mut Client, name: &str) -> u64 {
    c.create_snapshot(v1::CreateSnapshotRequest {
        box_name: name.into(),
        name: "size".into(),
    })
    .await
    .expect("snapshot")
    .into_inner()
    .size_bytes
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_costs_about_the_boxs_writes() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "ten", busybox_spec()).await;
    sh(
        &mut c,
        "ten",
        "dd if=/dev/urandom of=/ten bs=1M count=10 2>/dev/null",
    )
    .await;
    let size = snapshot_size(&mut c, "ten").await;
    let mb = 1 << 20;
    assert!(
        (10 * mb..14 * mb).contains(&size),
        "a snapshot of 10 MiB of writes takes {size} bytes"
    );
    c.remove_box(v1::RemoveBoxRequest {
        name: "ten".into(),
        force: true,
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_with_a_disk_of_its_own_is_snapshotted_and_cloned_stopped() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let describe = c
        .describe(v1::DescribeRequest {})
        .await
        .unwrap()
        .into_inner();
    if !describe
        .notes
        .iter()
        .any(|n| n.starts_with("disk size: a box created with one writes"))
    {
        eprintln!("skipped: boxes get no disk of their own here (boxd must run as root)");
        return;
    }
    let spec = v1::BoxSpec {
        disk_size_gb: Some(1),
        ..busybox_spec()
    };
    up(&mut c, "disk", spec).await;
    sh(&mut c, "disk", "echo old > /f && rm /bin/arch").await;
    let e = c
        .create_snapshot(v1::CreateSnapshotRequest {
            box_name: "disk".into(),
            name: "s".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("stop the box"), "{}", e.message());
    let e = c
        .clone_box(v1::CloneBoxRequest {
            source: "disk".into(),
            name: "disk2".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(box_dirs(&d).len(), 1, "a refused clone leaves nothing");

    ok(d.boxctl().args(["stop", "disk"]));
    let out = ok(d
        .boxctl()
        .args(["snapshot", "create", "disk", "s", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The disk's file is sparse, and so is its copy.
    assert!(v["sizeBytes"].as_u64().unwrap() < 256 << 20, "{v}");
    ok(d.boxctl().args(["clone", "disk", "disk2"]));
    start(&mut c, "disk").await;
    sh(&mut c, "disk", "echo new > /f && rm /bin/ascii").await;
    ok(d.boxctl().args(["stop", "disk"]));
    ok(d.boxctl().args(["snapshot", "restore", "disk", "s"]));
    start(&mut c, "disk").await;
    start(&mut c, "disk2").await;
    for name in ["disk", "disk2"] {
        assert_eq!(
            sh(
                &mut c,
                name,
                "cat /f; [ -e /bin/arch ] || echo gone; [ -e /bin/ascii ] && echo here"
            )
            .await,
            "old\ngone\nhere\n",
            "{name}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let e = c
        .export_box(v1::ExportBoxRequest {
            name: "disk".into(),
            path: dir.path().join("d.tgz").to_string_lossy().into_owned(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    for name in ["disk", "disk2"] {
        c.remove_box(v1::RemoveBoxRequest {
            name: name.into(),
            force: true,
        })
        .await
        .unwrap();
    }
}
