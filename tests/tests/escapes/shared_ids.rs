//! Item 7: the ids of one box own nothing of another's. Today's main gave
//! every box of a root-run boxd one range (box root was host uid
//! 1879048192 in all of them): a set-id file one box left in a mount let
//! any local user signal, and own the files of, every other box.

use std::os::unix::fs::MetadataExt;

use boxd_tests::*;

/// The host pid and uid of the box process one of whose arguments is
/// `marker`.
fn host_process(marker: &str) -> (u32, u32) {
    let pid =
        boxd_tests::host_process(marker).unwrap_or_else(|| panic!("no host process runs {marker}"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse().ok())
        .unwrap();
    (pid, uid)
}

/// Whether a process of host uid `uid` may signal `pid` (signal 0), tried
/// by a child of this (root) test that becomes `uid`.
fn may_signal(uid: u32, pid: u32) -> bool {
    let out = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "--",
            "kill",
            "-0",
            &pid.to_string(),
        ])
        .output()
        .expect("run setpriv (util-linux)");
    out.status.success()
}

/// The first line of `/proc/PID/uid_map`: (outside, count) of box id 0.
fn box_range(pid: u32) -> (u64, u64) {
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let f: Vec<u64> = map
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    (f[1], f[2])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_set_id_file_one_box_leaves_makes_no_one_a_member_of_another_box() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let project = host_dir();
    let owner = std::fs::metadata(project.path()).unwrap().uid();
    let mut spec = busybox_spec();
    spec.mounts.push(v1::Mount {
        host_path: project.path().to_string_lossy().into(),
        guest_path: "/workspace".into(),
        read_only: false,
    });
    up(&mut c, "ids-a", spec).await;
    up(&mut c, "ids-b", busybox_spec()).await;
    sh(&mut c, "ids-a", "sleep 31401 >/dev/null 2>&1 &").await;
    sh(&mut c, "ids-b", "sleep 31402 >/dev/null 2>&1 &").await;
    let (a_pid, a_root) = host_process("31401");
    let (b_pid, b_root) = host_process("31402");
    let (a_range, b_range) = (box_range(a_pid), box_range(b_pid));
    println!("box root on the host: a {a_root} (ids {a_range:?}), b {b_root} (ids {b_range:?})");

    // Box root of A leaves what it can in its mount: a copy of a program,
    // given to another box id, then set-uid.
    let chown = run(
        &mut c,
        "ids-a",
        &[
            "sh",
            "-c",
            "cp /bin/busybox /workspace/s && chown 5:5 /workspace/s",
        ],
    )
    .await;
    let chmod = run(&mut c, "ids-a", &["chmod", "4755", "/workspace/s"]).await;
    let left = std::fs::metadata(project.path().join("s")).unwrap();
    println!(
        "in A's mount: chown 5:5 exit {:?} ({}), chmod 4755 exit {:?} ({}); on the host: uid {} gid {} mode {:o}",
        chown.exit.code,
        String::from_utf8_lossy(&chown.stderr).trim(),
        chmod.exit.code,
        String::from_utf8_lossy(&chmod.stderr).trim(),
        left.uid(),
        left.gid(),
        left.mode() & 0o7777
    );
    // SAFETY: geteuid has no preconditions.
    let root_run = unsafe { libc::geteuid() } == 0;
    if root_run {
        // A range of its own for each box, disjoint from the other's.
        assert_ne!(a_root, b_root, "two boxes share box root's host id");
        let overlap = a_range.0 < b_range.0 + b_range.1 && b_range.0 < a_range.0 + a_range.1;
        assert!(
            !overlap,
            "the boxes' ranges overlap: {a_range:?} {b_range:?}"
        );
        // The mount maps its owner alone: a chown to another box id fails,
        // and what the box left there is the owner's.
        assert_ne!(
            chown.exit.code,
            Some(0),
            "chown to box id 5 in a mount: {chown:?}"
        );
        assert_eq!(
            left.uid(),
            owner,
            "the file in the mount is not its owner's"
        );
        // The attack: a local user running a set-id file of A's (as any id
        // of A's range) cannot signal B's processes; A's own root can
        // signal A's (the check itself works).
        assert!(may_signal(a_root, a_pid), "setpriv cannot act as A's root");
        for uid in [a_root, a_root + 5, left.uid()] {
            assert!(
                !may_signal(uid, b_pid),
                "host uid {uid} (of box A) may signal box B's root process"
            );
        }
    } else {
        // A user-run boxd: every box is the user's, with the user's one
        // subordinate range; doctor says why it cannot be split.
        let doctor = d.boxctl().args(["doctor"]).output().unwrap();
        let text = String::from_utf8_lossy(&doctor.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("box ids"))
            .unwrap_or_default();
        println!("doctor: {line}");
        assert!(
            line.contains("cannot be split") || line.contains("one id"),
            "doctor does not say why boxes share ids: {text}"
        );
    }
    // Whoever made it, nothing set-id of a box's is left on the host.
    assert!(
        left.mode() & 0o6000 == 0 || left.uid() == owner,
        "a set-id file of a box id: uid {} mode {:o}",
        left.uid(),
        left.mode()
    );
    remove(&mut c, "ids-a").await;
    remove(&mut c, "ids-b").await;
}

/// A clone, and a box made before boxes had ranges of their own, get a
/// range of their own and see their files as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_clone_gets_ids_of_its_own_and_keeps_its_files() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: ranges per box are a root-run boxd's");
        return;
    }
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "ids-src", busybox_spec()).await;
    sh(
        &mut c,
        "ids-src",
        "echo mine > /etc/made && chown 7:7 /etc/made && mkdir -p /home/u && chown 1000:1000 /home/u",
    )
    .await;
    sh(&mut c, "ids-src", "sleep 31403 >/dev/null 2>&1 &").await;
    let (_, src_root) = host_process("31403");
    let out = d
        .boxctl()
        .args(["clone", "ids-src", "ids-dst"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    start(&mut c, "ids-dst").await;
    sh(&mut c, "ids-dst", "sleep 31404 >/dev/null 2>&1 &").await;
    let (_, dst_root) = host_process("31404");
    let seen = sh(
        &mut c,
        "ids-dst",
        "cat /etc/made; stat -c '%u:%g %n' /etc/made /home/u /bin/busybox /",
    )
    .await;
    println!(
        "clone: box root {dst_root} (source {src_root}); {}",
        seen.replace('\n', "; ")
    );
    assert_ne!(src_root, dst_root, "the clone shares its source's ids");
    assert!(seen.contains("mine"), "{seen}");
    assert!(seen.contains("7:7 /etc/made"), "{seen}");
    assert!(seen.contains("1000:1000 /home/u"), "{seen}");
    assert!(
        seen.contains("0:0 /bin/busybox"),
        "the image's files are box root's: {seen}"
    );
    assert!(
        seen.contains("0:0 /\n") || seen.ends_with("0:0 /"),
        "{seen}"
    );

    // What an older boxd left: the source box without ids.json, its files
    // in the pool's first range (the images' own, which every box had).
    c.stop_box(v1::StopBoxRequest {
        name: "ids-src".into(),
        force: true,
    })
    .await
    .unwrap();
    let src = list(&mut c)
        .await
        .into_iter()
        .find(|b| b.name == "ids-src")
        .unwrap();
    let dir = d.home.join("boxes").join(&src.id);
    std::fs::remove_file(dir.join("ids.json")).unwrap();
    let back = src_root - 1_879_048_192;
    let mut todo = vec![dir.join("upper")];
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let shift = |id: u32| {
            if id >= src_root && id - src_root < 65_536 {
                id - back
            } else {
                id
            }
        };
        std::os::unix::fs::lchown(&p, Some(shift(m.uid())), Some(shift(m.gid()))).unwrap();
        if m.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    start(&mut c, "ids-src").await;
    sh(&mut c, "ids-src", "sleep 31405 >/dev/null 2>&1 &").await;
    let (_, legacy_root) = host_process("31405");
    let seen = sh(
        &mut c,
        "ids-src",
        "cat /etc/made; stat -c '%u:%g %n' /etc/made /home/u; touch /etc/new && echo wrote",
    )
    .await;
    println!(
        "an older box, restarted: box root {legacy_root}; {}",
        seen.replace('\n', "; ")
    );
    assert_ne!(
        legacy_root, 1_879_048_192,
        "the older box still has the images' ids"
    );
    assert_ne!(legacy_root, dst_root);
    assert_eq!(seen, "mine\n7:7 /etc/made\n1000:1000 /home/u\nwrote\n");
    remove(&mut c, "ids-dst").await;
    remove(&mut c, "ids-src").await;
}
