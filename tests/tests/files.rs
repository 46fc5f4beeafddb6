//! Files into and out of boxes: `boxctl cp` and the client library's
//! copies against a real daemon and busybox boxes (namespace engine).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use boxd_client::copy::{self, Dest, Source};
use boxd_tests::*;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// src/{a.txt 0640, sub/ 0750, sub/b 0755, link -> a.txt}
fn tree(root: &Path) -> std::path::PathBuf {
    let src = root.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("a.txt"), b"alpha\n").unwrap();
    std::fs::write(src.join("sub/b"), b"#!/bin/sh\necho bee\n").unwrap();
    std::fs::set_permissions(src.join("a.txt"), PermissionsExt::from_mode(0o640)).unwrap();
    std::fs::set_permissions(src.join("sub/b"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(src.join("sub"), PermissionsExt::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
    src
}

fn same_tree(a: &Path, b: &Path) {
    assert_eq!(std::fs::read(a.join("a.txt")).unwrap(), b"alpha\n");
    assert_eq!(std::fs::read(b.join("a.txt")).unwrap(), b"alpha\n");
    assert_eq!(
        std::fs::read(b.join("sub/b")).unwrap(),
        std::fs::read(a.join("sub/b")).unwrap()
    );
    for p in ["a.txt", "sub", "sub/b"] {
        assert_eq!(mode(&a.join(p)), mode(&b.join(p)), "{p}");
    }
    assert_eq!(
        std::fs::read_link(b.join("link")).unwrap(),
        Path::new("a.txt")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cp_moves_files_dirs_modes_and_symlinks_both_ways() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "f", busybox_spec()).await;
    let host = tempfile::tempdir().unwrap();
    let src = tree(host.path());

    // A directory into an existing directory: it lands inside.
    ok(d.boxctl().arg("cp").arg(&src).arg("f:/tmp"));
    let seen = sh(
        &mut c,
        "f",
        "cd /tmp/src && cat a.txt && stat -c '%a %n' a.txt sub sub/b && readlink link && sub/b",
    )
    .await;
    assert_eq!(
        seen, "alpha\n640 a.txt\n750 sub\n755 sub/b\na.txt\nbee\n",
        "in the box"
    );
    // Owned by box root (as `docker cp` without -a).
    assert_eq!(
        sh(&mut c, "f", "stat -c '%u:%g' /tmp/src/sub/b").await,
        "0:0\n"
    );

    // Into a missing path: the directory becomes it.
    ok(d.boxctl().arg("cp").arg(&src).arg("f:/tmp/renamed"));
    assert_eq!(
        sh(&mut c, "f", "cat /tmp/renamed/sub/b").await,
        "#!/bin/sh\necho bee\n"
    );

    // A file, as a new name; then over an existing file.
    ok(d.boxctl()
        .arg("cp")
        .arg(src.join("a.txt"))
        .arg("f:/tmp/one"));
    ok(d.boxctl()
        .arg("cp")
        .arg(src.join("sub/b"))
        .arg("f:/tmp/one"));
    assert_eq!(
        sh(&mut c, "f", "cat /tmp/one").await,
        "#!/bin/sh\necho bee\n"
    );

    // Out to a missing host path: the directory becomes it.
    let back = host.path().join("back");
    let out = ok(d.boxctl().args(["cp", "f:/tmp/src"]).arg(&back));
    assert!(out.stdout.is_empty(), "nothing on stdout without -");
    same_tree(&src, &back);

    // DIR/. copies the contents, into an existing directory.
    let contents = host.path().join("contents");
    std::fs::create_dir(&contents).unwrap();
    ok(d.boxctl().args(["cp", "f:/tmp/src/."]).arg(&contents));
    same_tree(&src, &contents);
    // And into the box, as a new directory.
    ok(d.boxctl()
        .arg("cp")
        .arg(format!("{}/.", src.display()))
        .arg("f:/tmp/flat"));
    assert_eq!(
        sh(&mut c, "f", "ls /tmp/flat | sort | tr '\\n' ' '").await,
        "a.txt link sub "
    );

    // --json says how many archive bytes moved.
    let out = ok(d
        .boxctl()
        .args(["cp", "--json", "f:/tmp/one"])
        .arg(host.path().join("one")));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["bytes"].as_u64().unwrap() >= 1024, "{v}");
    assert_eq!(
        std::fs::read(host.path().join("one")).unwrap(),
        b"#!/bin/sh\necho bee\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tar_on_stdin_and_stdout_and_through_the_library() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "t", busybox_spec()).await;
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o600);
    b.append_data(&mut h, "dir/x", &b"hello"[..]).unwrap();
    let tar = b.into_inner().unwrap();

    let mut child = d
        .boxctl()
        .args(["cp", "-", "t:/tmp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &tar).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        sh(&mut c, "t", "cat /tmp/dir/x; stat -c %a /tmp/dir/x").await,
        "hello600\n"
    );

    let out = ok(d.boxctl().args(["cp", "t:/tmp/dir", "-"]));
    let mut a = tar::Archive::new(&out.stdout[..]);
    let names: Vec<String> = a
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["dir/", "dir/x"]);

    // The library, with a tar in memory both ways.
    let n = copy::copy_in(
        &mut c,
        "t",
        Source::Tar(Box::new(std::io::Cursor::new(tar.clone()))),
        "/tmp/lib",
        None,
    )
    .await
    .unwrap();
    assert_eq!(n, tar.len() as u64);
    assert_eq!(sh(&mut c, "t", "cat /tmp/lib/x").await, "hello");
    let host = tempfile::tempdir().unwrap();
    copy::copy_out(
        &mut c,
        "t",
        "/tmp/lib/x",
        false,
        Dest::Path(host.path().join("x")),
        None,
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(host.path().join("x")).unwrap(), b"hello");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_copies_are_clear_errors() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "e", busybox_spec()).await;
    create(&mut c, "cold", busybox_spec()).await;
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let out = host.path().join("out");

    let e = fails(d.boxctl().args(["cp", "e:/no/such/file"]).arg(&out));
    assert!(e.contains("No such file"), "{e}");
    let e = fails(d.boxctl().arg("cp").arg(&file).arg("e:/no/such/dir/f"));
    assert!(e.contains("No such file"), "{e}");
    let e = fails(d.boxctl().args(["cp", "e:relative"]).arg(&out));
    assert!(e.contains("must be absolute"), "{e}");
    let e = fails(d.boxctl().args(["cp", "e:/tmp/../etc"]).arg(&out));
    assert!(e.contains("'..'"), "{e}");
    let e = fails(d.boxctl().args(["cp", "cold:/etc"]).arg(&out));
    assert!(e.contains("start it first"), "{e}");
    let e = fails(d.boxctl().args(["cp", "nobody:/etc"]).arg(&out));
    assert!(e.contains("nobody"), "{e}");
    let e = fails(d.boxctl().args(["cp", "bad!name:/etc"]).arg(&out));
    assert!(e.contains("invalid box name"), "{e}");
    let e = fails(
        d.boxctl()
            .arg("cp")
            .arg(host.path().join("missing"))
            .arg("e:/tmp"),
    );
    assert!(e.contains("No such file"), "{e}");
    let e = fails(d.boxctl().args(["cp", "e:/tmp/x/."]).arg(&out));
    assert!(!e.is_empty());
    let usage = d.boxctl().args(["cp", "e:/a", "e:/b"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(!out.exists(), "a failed copy left {}", out.display());

    // A hostile archive on stdin: `..`, absolute paths, and writing
    // through a symlink it made are refused; nothing lands outside.
    let raw = |path: &[u8]| {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..path.len()].copy_from_slice(path);
        h.set_size(1);
        h.set_mode(0o644);
        h.set_cksum();
        let mut t = h.as_bytes().to_vec();
        t.push(b'x');
        t.resize(1024, 0);
        t.extend([0u8; 1024]);
        t
    };
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "esc", "/etc").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    b.append_data(&mut h, "esc/planted", &b"x"[..]).unwrap();
    let through_link = b.into_inner().unwrap();
    sh(&mut c, "e", "mkdir -p /tmp/in").await;
    for tar in [raw(b"../up"), raw(b"/abs"), through_link] {
        let mut child = d
            .boxctl()
            .args(["cp", "-", "e:/tmp/in"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), &tar).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains("'..'") || e.contains("absolute") || e.contains("symlink"),
            "{e}"
        );
    }
    assert_eq!(
        sh(
            &mut c,
            "e",
            "ls /tmp/up /up /abs /etc/planted 2>/dev/null; echo done"
        )
        .await,
        "done\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn box_symlinks_resolve_inside_the_box() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "s", busybox_spec()).await;
    sh(
        &mut c,
        "s",
        "mkdir -p /etc && echo box-passwd > /etc/passwd && \
         ln -s /etc/passwd /tmp/pw && ln -s / /tmp/root && \
         ln -s ../../../../../../../etc /tmp/up && ln -s /etc /tmp/etc",
    )
    .await;
    let host = tempfile::tempdir().unwrap();
    let out = |name: &str| host.path().join(name);

    // Followed (-L), the link is the box's file, never the host's.
    ok(d.boxctl().args(["cp", "-L", "s:/tmp/pw"]).arg(out("pw")));
    assert_eq!(std::fs::read(out("pw")).unwrap(), b"box-passwd\n");
    // Not followed, it stays a link.
    ok(d.boxctl().args(["cp", "s:/tmp/pw"]).arg(out("pwlink")));
    assert_eq!(
        std::fs::read_link(out("pwlink")).unwrap(),
        Path::new("/etc/passwd")
    );
    // Through a link to / and a link full of `..`.
    ok(d.boxctl()
        .args(["cp", "s:/tmp/root/etc/passwd"])
        .arg(out("viaroot")));
    assert_eq!(std::fs::read(out("viaroot")).unwrap(), b"box-passwd\n");
    ok(d.boxctl()
        .args(["cp", "s:/tmp/up/passwd"])
        .arg(out("viaup")));
    assert_eq!(std::fs::read(out("viaup")).unwrap(), b"box-passwd\n");

    // Into the box through its links: the box's /etc, not the host's.
    let name = format!("boxd-cp-probe-{}", std::process::id());
    let file = host.path().join(&name);
    std::fs::write(&file, b"probe").unwrap();
    ok(d.boxctl().arg("cp").arg(&file).arg("s:/tmp/etc/"));
    ok(d.boxctl().arg("cp").arg(&file).arg("s:/tmp/up/"));
    assert_eq!(sh(&mut c, "s", &format!("cat /etc/{name}")).await, "probe");
    assert!(
        !Path::new("/etc").join(&name).exists(),
        "a copy reached the host's /etc"
    );
}

/// How many copies run in box `name` (each is a zygote's child).
async fn copies(c: &mut Client, name: &str) -> String {
    sh(c, name, "ps -o args | grep -c '[_]_nsexec' || true").await
}

/// [`copies`], asked again for up to 10 s until it says `want`.
async fn copies_until(c: &mut Client, name: &str, want: &str) -> String {
    let mut seen = String::new();
    for _ in 0..100 {
        seen = copies(c, name).await;
        if seen == want {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    seen
}

/// A running box `name` with 256 MiB in `/tmp/z`, and a `boxctl cp` of it
/// to stdout that has been read for 1 MiB and then left unread (so the
/// copy is held mid-way in the box).
async fn copy_out_held(d: &Daemon, c: &mut Client, name: &str) -> std::process::Child {
    use std::io::Read;
    up(c, name, busybox_spec()).await;
    sh(
        c,
        name,
        "dd if=/dev/zero of=/tmp/z bs=1M count=256 2>/dev/null",
    )
    .await;
    let mut child = d
        .boxctl()
        .args(["cp", &format!("{name}:/tmp/z"), "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = vec![0u8; 1 << 20];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    child
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_away_mid_copy_ends_the_copy() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut child = copy_out_held(&d, &mut c, "k").await;
    // The copy runs in the box (held back by the unread pipe), and is no
    // one's exec.
    assert_eq!(copies(&mut c, "k").await, "1\n");
    let execs = c
        .list_execs(boxd_client::v1::ListExecsRequest {
            box_name: "k".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(execs.execs.iter().all(|e| e.command == "sh"), "{execs:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut left = copies_until(&mut c, "k", "0\n").await;
    assert_eq!(left, "0\n", "the copy outlived its client");

    // The same going in: a client that leaves halfway through an archive.
    let mut child = d
        .boxctl()
        .args(["cp", "-", "k:/tmp"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_path("half").unwrap();
    h.set_size(64 << 20);
    h.set_mode(0o644);
    h.set_cksum();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, h.as_bytes()).unwrap();
    std::io::Write::write_all(&mut stdin, &vec![7u8; 1 << 20]).unwrap();
    let seen = copies_until(&mut c, "k", "1\n").await;
    assert_eq!(seen, "1\n", "the copy in never ran");
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);
    left = copies_until(&mut c, "k", "0\n").await;
    assert_eq!(left, "0\n", "the copy in outlived its client");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_the_daemon_left_behind_is_killed_when_it_returns() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let mut child = copy_out_held(&d, &mut c, "r").await;
    assert_eq!(copies(&mut c, "r").await, "1\n");
    // A crash: the daemon's side of the copy never runs its cleanup.
    d.kill();
    let _ = child.kill();
    let _ = child.wait();
    d.restart();
    let mut c = d.client().await;
    let left = copies_until(&mut c, "r", "0\n").await;
    assert_eq!(left, "0\n", "a copy outlived the daemon that ran it");
    let execs = c
        .list_execs(boxd_client::v1::ListExecsRequest {
            box_name: "r".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(execs.execs.iter().all(|e| e.command == "sh"), "{execs:?}");
}
