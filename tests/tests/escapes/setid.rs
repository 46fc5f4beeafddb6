//! Set-id files on a host mount: a box tries to leave a set-user-id or
//! set-group-id file in the host directory bound at `/workspace` (on the
//! host such a file runs as its owner for any local user). Every way
//! busybox offers is refused with `EPERM` and leaves no set-id bit on the
//! host: `chmod 4755` and `chmod g+s` (absolute, relative, through a
//! symlink in the box's root, from a `chroot` into the mount), `cp -p` of a
//! set-id file and `tar x` of an archive holding one. The same bits on the
//! box's own root file system keep working, and are there; a non-root box
//! user still cannot change root's file there.

use std::os::unix::fs::MetadataExt;

use boxd_tests::*;

/// Every file and directory beneath `dir` with a set-id bit, as
/// `path mode`.
fn set_id_files(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.path().symlink_metadata().unwrap();
            if meta.mode() & 0o6000 != 0 {
                found.push(format!(
                    "{} {:o}",
                    entry.path().display(),
                    meta.mode() & 0o7777
                ));
            }
            if meta.is_dir() {
                todo.push(entry.path());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_leaves_no_set_id_file_on_a_host_mount() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let project = host_dir();
    let mut spec = busybox_spec();
    spec.mounts.push(v1::Mount {
        host_path: project.path().to_string_lossy().into(),
        guest_path: "/workspace".into(),
        read_only: false,
    });
    up(&mut c, "setid", spec).await;

    // On the box's own root: set-id bits work, and are there.
    let own = sh(
        &mut c,
        "setid",
        "cp /bin/busybox /tmp/suid && chmod 4755 /tmp/suid \
         && mkdir -p /usr/local/bin && cp /bin/busybox /usr/local/bin/x && chmod u+s,g+s /usr/local/bin/x \
         && cd /tmp && cat suid > rel && chmod 6700 rel \
         && ln -s /usr/local /tmp/link && chmod 2755 /tmp/link/bin/x \
         && mkdir /tmp/d && chmod g+s /tmp/d \
         && stat -c '%n %a' /tmp/suid /usr/local/bin/x /tmp/rel /tmp/d",
    )
    .await;
    println!("on the box's root: {}", own.trim().replace('\n', "; "));
    assert_eq!(
        own.split_whitespace().collect::<Vec<_>>(),
        [
            "/tmp/suid",
            "4755",
            "/usr/local/bin/x",
            "2755",
            "/tmp/rel",
            "6700",
            "/tmp/d",
            "2755"
        ],
        "{own}"
    );

    // On the host mount: each attempt is refused with EPERM.
    sh(
        &mut c,
        "setid",
        "cp /bin/busybox /workspace/f && mkdir /workspace/d && cp /bin/busybox /workspace/busybox \
         && ln -s /workspace/f /tmp/to-host && cd /tmp && tar cf /tmp/a.tar suid",
    )
    .await;
    for (what, script) in [
        ("chmod 4755", "chmod 4755 /workspace/f"),
        ("chmod g+s", "chmod g+s /workspace/f"),
        ("chmod g+s on a directory", "chmod g+s /workspace/d"),
        ("relative chmod", "cd /workspace/d && chmod 4755 ../f"),
        ("through a symlink in the root", "chmod 4755 /tmp/to-host"),
        (
            "from a chroot into the mount",
            "chroot /workspace /busybox chmod 4755 /f",
        ),
        ("cp -p of a set-id file", "cp -p /tmp/suid /workspace/c"),
        ("tar x of a set-id file", "tar xf /tmp/a.tar -C /workspace"),
    ] {
        let out = run(&mut c, "setid", &["sh", "-c", script]).await;
        let err = String::from_utf8_lossy(&out.stderr);
        println!(
            "{what} ({script}): exit {:?}, {}",
            out.exit.code,
            err.trim()
        );
        assert_ne!(out.exit.code, Some(0), "{what}: {out:?}");
        assert!(err.contains("Operation not permitted"), "{what}: {err}");
    }
    let left = set_id_files(project.path());
    println!("set-id files on the host: {left:?}");
    assert!(left.is_empty(), "set-id files on the host: {left:?}");
    // What the refused calls left is there, without the bits.
    let f = std::fs::metadata(project.path().join("f")).unwrap();
    assert_eq!(f.mode() & 0o7777, 0o755);

    // A non-root box user cannot set bits on root's file through the
    // supervisor; on its own file it can (its own id, nothing more).
    let mut req = start_req(
        "setid",
        &[
            "sh",
            "-c",
            "chmod 4755 /tmp/rel; echo root=$?; cp /bin/busybox /tmp/mine-$$ && chmod 4755 /tmp/mine-$$ && stat -c %a /tmp/mine-$$",
        ],
    );
    req.user = "1000:1000".into();
    let out = collect(ExecStream::start(&mut c, req).await.unwrap()).await;
    let text = out.stdout_str();
    println!(
        "as box user 1000: {} {}",
        text.trim().replace('\n', "; "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert_eq!(
        text.split_whitespace().collect::<Vec<_>>(),
        ["root=1", "4755"],
        "{out:?}"
    );
    assert_eq!(
        sh(&mut c, "setid", "stat -c %a /tmp/rel").await.trim(),
        "6700"
    );

    remove(&mut c, "setid").await;
}

/// A Debian box still installs a package holding a setuid file (dpkg
/// creates each file, then `fchmod`s it 4755 on the box's root), with no
/// network: the package is built in the box with `dpkg-deb`.
#[tokio::test(flavor = "multi_thread")]
async fn a_debian_box_installs_a_package_with_a_setuid_file() {
    let image = boxd_tests::agent::node_image();
    let d = Daemon::start();
    let mut c = d.client().await;
    let spec = v1::BoxSpec {
        image: image.to_string_lossy().into_owned(),
        ..Default::default()
    };
    up(&mut c, "setid-deb", spec).await;
    let out = run(
        &mut c,
        "setid-deb",
        &[
            "sh",
            "-c",
            "set -e; mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/local/bin \
             && printf 'Package: setid-probe\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: boxd <boxd@localhost>\\nDescription: a setuid file\\n' > /tmp/pkg/DEBIAN/control \
             && cp /bin/true /tmp/pkg/usr/local/bin/setid-probe && chmod 4755 /tmp/pkg/usr/local/bin/setid-probe \
             && dpkg-deb --root-owner-group --build /tmp/pkg /tmp/setid-probe.deb >/dev/null \
             && dpkg -i /tmp/setid-probe.deb >/dev/null \
             && stat -c '%U %a' /usr/local/bin/setid-probe",
        ],
    )
    .await;
    let text = out.stdout_str();
    println!(
        "dpkg -i of a package with a setuid file: exit {:?}, {} {}",
        out.exit.code,
        text.trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert_eq!(out.exit.code, Some(0), "{out:?}");
    assert_eq!(text.trim(), "root 4755");
    remove(&mut c, "setid-deb").await;
}
