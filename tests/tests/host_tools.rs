//! A hostile box against boxd's host-side tools: the code that reads a
//! box's files, parses its bytes or answers its processes with more
//! privilege than the box has (host root for a root-run boxd, the user for
//! a user-run one). Each case is the attack, run from inside a box, and
//! what must hold on the host; the probes are static C programs
//! (`tests/src/probes/`). Run as root and as an ordinary user (`make
//! faults`, `scripts/isolation-as-user.sh`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use boxd_tests::*;

/// A busybox box with the probes at `/probes` (and `extra` mounts).
async fn probe_box(c: &mut Client, name: &str, extra: Vec<v1::Mount>) {
    let mut spec = busybox_spec();
    spec.mounts.push(v1::Mount {
        host_path: probes().to_string_lossy().into(),
        guest_path: "/probes".into(),
        read_only: true,
    });
    spec.mounts.extend(extra);
    up(c, name, spec).await;
}

/// Waits until `file` in the box holds `what`.
async fn wait_in_box(c: &mut Client, name: &str, file: &str, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = run(c, name, &["cat", file]).await.stdout_str();
        if out.contains(what) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "{file} never said {what:?}: {out}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            out.extend(files_holding(&p, needle));
        } else if m.is_file()
            && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
        {
            out.push(p);
        }
    }
    out
}

fn remove(rt_c: &mut Client, names: &[&str]) -> impl std::future::Future<Output = ()> {
    let mut c = rt_c.clone();
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    async move {
        for n in names {
            let _ = c
                .remove_box(v1::RemoveBoxRequest {
                    name: n,
                    force: true,
                })
                .await;
        }
    }
}

/// `boxctl cp BOX:PATH HOSTDIR` of a file the box grows while it is read:
/// the bytes past the length archived first become tar entries of the
/// box's choosing (a symlink to a host directory, a hard link to that
/// symlink, a file beneath the hard link). Nothing is written outside the
/// destination.
#[tokio::test(flavor = "multi_thread")]
async fn cp_out_writes_nothing_outside_its_destination() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let victim = tempfile::tempdir().unwrap();
    let dest = tempfile::tempdir().unwrap();
    let input = host_dir();
    // The smuggled entries, as a tar stream without its end.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    b.append_link(&mut h, "s", victim.path()).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    b.append_link(&mut h, "h", "s").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(6);
    h.set_mode(0o644);
    b.append_data(&mut h, "h/PWNED", &b"owned\n"[..]).unwrap();
    let payload = b.into_inner().unwrap();
    std::fs::write(input.path().join("payload"), &payload).unwrap();
    give_to_host_user(input.path());
    probe_box(
        &mut c,
        "cp",
        vec![v1::Mount {
            host_path: input.path().to_string_lossy().into(),
            guest_path: "/in".into(),
            read_only: true,
        }],
    )
    .await;
    // 64 MiB: a whole number of tar blocks, so what is appended starts
    // where the archive's next header would.
    sh(
        &mut c,
        "cp",
        "mkdir -p /data && dd if=/dev/zero of=/data/big.bin bs=1M count=64 2>/dev/null",
    )
    .await;
    sh(
        &mut c,
        "cp",
        "/probes/growfile /data/big.bin /in/payload > /tmp/grow.log 2>&1 &",
    )
    .await;
    wait_in_box(&mut c, "cp", "/tmp/grow.log", "watching").await;
    let out = d
        .boxctl()
        .args(["cp", "cp:/data/big.bin"])
        .arg(dest.path())
        .output()
        .unwrap();
    let grew = wait_in_box(&mut c, "cp", "/tmp/grow.log", "grew").await;
    println!(
        "cp of a file the box grew while it was read ({}): exit {:?}, {}",
        grew.trim().replace('\n', "; "),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let planted: Vec<_> = std::fs::read_dir(victim.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        planted.is_empty(),
        "cp wrote outside its destination: {planted:?}"
    );
    assert!(
        !dest.path().join("h").exists(),
        "no entry beyond the file's length was unpacked"
    );
    let copied = std::fs::metadata(dest.path().join("big.bin"))
        .unwrap()
        .len();
    assert_eq!(copied, 64 << 20, "the file as long as it was when opened");
    remove(&mut c, &["cp"]).await;
}

/// Snapshots and clones of a running box while it swaps a directory of
/// its own for a symlink to a host directory (`renameat2(RENAME_EXCHANGE)`
/// in a loop): no copy holds a byte of the host's.
#[tokio::test(flavor = "multi_thread")]
async fn snapshots_and_clones_of_a_running_box_copy_no_host_file() {
    let d = Daemon::start();
    let mut c = d.client().await;
    const MARK: &str = "host-secret-marker-7f3a";
    let secret = tempfile::tempdir().unwrap();
    std::fs::write(secret.path().join("secret"), MARK).unwrap();
    probe_box(&mut c, "snap", vec![]).await;
    let script = format!(
        "mkdir -p /root/work/d && for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero of=/root/work/d/f$i bs=1M count=2 2>/dev/null; done && ln -s {} /root/work/l && (/probes/swapper /root/work/d /root/work/l 60 > /tmp/swap.log 2>&1 &)",
        secret.path().display()
    );
    sh(&mut c, "snap", &script).await;
    let mut leaked = Vec::new();
    for i in 0..12 {
        let name = format!("s{i}");
        let made = c
            .create_snapshot(v1::CreateSnapshotRequest {
                box_name: "snap".into(),
                name: name.clone(),
            })
            .await;
        if made.is_ok() {
            let dirs: Vec<PathBuf> = std::fs::read_dir(d.home.join("boxes"))
                .unwrap()
                .flatten()
                .map(|e| e.path().join("snapshots").join(&name))
                .filter(|p| p.exists())
                .collect();
            for dir in dirs {
                leaked.extend(files_holding(&dir, MARK.as_bytes()));
            }
            let _ = c
                .remove_snapshot(v1::RemoveSnapshotRequest {
                    box_name: "snap".into(),
                    name,
                })
                .await;
        }
        if i % 3 == 0 {
            let clone = format!("c{i}");
            if c.clone_box(v1::CloneBoxRequest {
                source: "snap".into(),
                name: clone.clone(),
            })
            .await
            .is_ok()
            {
                let info = c
                    .inspect_box(v1::InspectBoxRequest {
                        name: clone.clone(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                leaked.extend(files_holding(
                    &d.home.join("boxes").join(&info.id),
                    MARK.as_bytes(),
                ));
                remove(&mut c, &[&clone]).await;
            }
        }
    }
    println!(
        "12 snapshots and 4 clones taken while the box swapped a directory for a symlink to the host: {} host files copied",
        leaked.len()
    );
    assert!(
        leaked.is_empty(),
        "host files copied into a snapshot or clone: {leaked:?}"
    );
    remove(&mut c, &["snap"]).await;
}

/// A box-root process takes the descriptors of every process it sees
/// (`pidfd_getfd`) while 200 commands are set up: it never holds the
/// socket the box's zygote talks to its supervisor on.
#[tokio::test(flavor = "multi_thread")]
async fn the_zygote_s_socket_never_reaches_the_box() {
    let d = Daemon::start();
    let mut c = d.client().await;
    probe_box(&mut c, "thief", vec![]).await;
    sh(&mut c, "thief", "/probes/fdthief 6 > /tmp/thief.log 2>&1 &").await;
    for _ in 0..200 {
        run(&mut c, "thief", &["true"]).await;
    }
    let log = wait_in_box(&mut c, "thief", "/tmp/thief.log", "tries").await;
    println!(
        "pidfd_getfd on every command as it was set up: {}",
        log.trim().replace('\n', "; ")
    );
    assert!(
        !log.contains("stole"),
        "the zygote's socket reached the box: {log}"
    );
    // Commands start as fresh processes do: no signal ignored or blocked.
    let status = run(&mut c, "thief", &["cat", "/proc/self/status"])
        .await
        .stdout_str();
    for field in ["SigIgn:", "SigBlk:"] {
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
    let piped = run(&mut c, "thief", &["sh", "-c", "yes | head -n 1"]).await;
    assert_eq!(piped.stdout_str(), "y\n");
    assert!(
        piped.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    remove(&mut c, &["thief"]).await;
}

/// A box opens all the inotify instances it can: it gets its own share,
/// and its owner on the host keeps being able to open them.
#[tokio::test(flavor = "multi_thread")]
async fn a_box_cannot_use_up_its_owners_inotify_instances() {
    let d = Daemon::start();
    let mut c = d.client().await;
    probe_box(&mut c, "ino", vec![]).await;
    sh(
        &mut c,
        "ino",
        "/probes/inotifies 100000 30 > /tmp/ino.log 2>&1 &",
    )
    .await;
    let got = wait_in_box(&mut c, "ino", "/tmp/ino.log", "got").await;
    let host = std::process::Command::new(probes().join("inotifies"))
        .arg("16")
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout).into_owned();
    let limit =
        std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances").unwrap_or_default();
    println!(
        "a box opening inotify instances: {}; then the host (uid {}, limit {}): {}",
        got.trim(),
        nix::unistd::geteuid(),
        limit.trim(),
        host.trim()
    );
    assert!(
        host.starts_with("got 16"),
        "the host lost its inotify instances to a box: {host}"
    );
    let n: u64 = got.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(n <= 64, "a box holds at most its own share: {got}");
    remove(&mut c, &["ino"]).await;
}

/// A box that shares a writable host directory with another box swaps a
/// directory on the way to the other box's mount point for a symlink to a
/// host directory while that box starts, again and again: the starting
/// box's mount point is never made outside its root.
#[tokio::test(flavor = "multi_thread")]
async fn mount_points_are_made_inside_the_box_whatever_a_neighbour_swaps_in() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let shared = host_dir();
    std::fs::create_dir_all(shared.path().join("sub")).unwrap();
    give_to_host_user(shared.path());
    // Writable by anyone, as the host's /var/tmp is (and not under /tmp,
    // where the boot helper mounts the box's root while it works).
    let outside = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let mounted = host_dir();
    let share = |guest: &str| v1::Mount {
        host_path: shared.path().to_string_lossy().into(),
        guest_path: guest.into(),
        read_only: false,
    };
    probe_box(&mut c, "flipper", vec![share("/s")]).await;
    let script = format!(
        "ln -s {} /s/link && (/probes/swapper /s/sub /s/link 90 > /tmp/swap.log 2>&1 &) && (while :; do rmdir /s/sub/deep/mnt /s/sub/deep /s/link/deep/mnt /s/link/deep 2>/dev/null; done > /dev/null 2>&1 &)",
        outside.path().display()
    );
    sh(&mut c, "flipper", &script).await;
    let mut spec = busybox_spec();
    spec.mounts.push(share("/s"));
    spec.mounts.push(v1::Mount {
        host_path: mounted.path().to_string_lossy().into(),
        guest_path: "/s/sub/deep/mnt".into(),
        read_only: false,
    });
    create(&mut c, "victim", spec).await;
    let (mut started, mut refused) = (0, 0);
    for _ in 0..40 {
        match c
            .start_box(v1::StartBoxRequest {
                name: "victim".into(),
            })
            .await
        {
            Ok(_) => started += 1,
            Err(_) => refused += 1,
        }
        let _ = c
            .stop_box(v1::StopBoxRequest {
                name: "victim".into(),
                force: true,
            })
            .await;
        let made: Vec<_> = std::fs::read_dir(outside.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(
            made.is_empty(),
            "a mount point was made outside the box: {made:?}"
        );
    }
    println!(
        "40 starts while a neighbour swapped a directory on the mount point's way and removed what was made: {started} started, {refused} refused (\"changed while the box started\"), nothing made outside"
    );
    remove(&mut c, &["victim", "flipper"]).await;
}

/// `boxctl exec BOX -- yes | head -n 1`: boxctl ends (exit 141, as a pipe
/// would end it) instead of streaming and forwarding SIGPIPE in a loop.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_whose_reader_went_away_ends() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "pipe", busybox_spec()).await;
    let script = format!(
        "set -o pipefail; {} exec pipe -- yes | head -n 1; echo \"rc=${{PIPESTATUS[0]}}\"",
        bin("boxctl").display()
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .env("BOXD_SOCKET", &d.socket)
        .env("BOXD_HOME", &d.home)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said,
        "y\nrc=141\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    remove(&mut c, &["pipe"]).await;
}

/// What a box can read of the host through its own /proc: no path of
/// boxd's home or box id in its mount table, no host cgroup path.
#[tokio::test(flavor = "multi_thread")]
async fn a_box_s_proc_names_no_host_path() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let info = up(&mut c, "proc", busybox_spec()).await;
    let mountinfo = run(&mut c, "proc", &["cat", "/proc/self/mountinfo"])
        .await
        .stdout_str();
    let home = d.home.to_string_lossy().into_owned();
    assert!(!mountinfo.contains(&home), "{mountinfo}");
    assert!(!mountinfo.contains(&info.id), "{mountinfo}");
    let cgroup = run(&mut c, "proc", &["cat", "/proc/self/cgroup"])
        .await
        .stdout_str();
    for line in cgroup.lines() {
        assert!(line.ends_with(":/"), "a host cgroup path: {line}");
    }
    println!(
        "mountinfo's root: {}",
        mountinfo.lines().next().unwrap_or_default()
    );
    remove(&mut c, &["proc"]).await;
}

/// Listing boxes does not walk their files: with 200,000 files in a box,
/// `boxctl ls` is as fast as with none (timings printed, not asserted).
#[tokio::test(flavor = "multi_thread")]
async fn listing_boxes_never_walks_their_files() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "many", busybox_spec()).await;
    let time_ls = |d: &Daemon| {
        let begin = Instant::now();
        ok(d.boxctl().args(["ls", "--json"]));
        begin.elapsed()
    };
    let empty = time_ls(&d);
    sh(
        &mut c,
        "many",
        "mkdir -p /m && cd /m && i=0; while [ $i -lt 200 ]; do mkdir d$i && (cd d$i && touch $(seq 1 1000)); i=$((i+1)); done",
    )
    .await;
    assert_eq!(
        sh(&mut c, "many", "find /m -type f | wc -l").await.trim(),
        "200000"
    );
    let mut times = Vec::new();
    for _ in 0..5 {
        times.push(time_ls(&d));
    }
    times.sort();
    println!(
        "boxctl ls: {:.1} ms with an empty box, {:.1} ms (median of 5) with 200,000 files in it",
        empty.as_secs_f64() * 1e3,
        times[2].as_secs_f64() * 1e3
    );
    // The disk use is still told, once measured in the background.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let disk = list(&mut c).await[0].disk_bytes.unwrap_or(0);
        if disk > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the disk use was never measured");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    remove(&mut c, &["many"]).await;
}

/// A client that opens connections without end: the ones over the cap get
/// a clear error, and connections that never make a call are closed.
#[tokio::test(flavor = "multi_thread")]
async fn connections_are_capped_and_silent_ones_closed() {
    let d = Daemon::with_env(
        "namespace",
        vec![("BOXD_MAX_CONNECTIONS".into(), "8".into())],
    );
    // Silent: opened, never used; closed by boxd.
    let silent = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let begin = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match std::io::Read::read(&mut &silent, &mut buf) {
            Ok(0) => break true,
            Ok(_) => continue, // its settings frame
            Err(_) => break false,
        }
    };
    assert!(closed, "a connection that made no call stayed open");
    println!(
        "a connection that made no call was closed after {:.1} s",
        begin.elapsed().as_secs_f64()
    );
    // Eight served; the ninth is told why it is not.
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(d.client().await);
    }
    let err = boxd_client::connect(&d.socket)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("client connections open, its limit"), "{err}");
    println!("the connection over the cap of 8: {err}");
    drop(held);
    // Room again once they close.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut c = d.client().await;
    assert!(c.describe(v1::DescribeRequest {}).await.is_ok());
}
