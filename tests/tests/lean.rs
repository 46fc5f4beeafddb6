//! What a running box costs on the host, beyond what it runs: properties
//! of boxd's per-box processes (figures are `make bench`'s, never a test's).

use boxd_tests::procs::box_processes;
use boxd_tests::*;

/// The boxes of one daemon run one copy of the init: its memfd is made
/// once per daemon and handed to every supervisor, not written again for
/// each box.
#[tokio::test(flavor = "multi_thread")]
async fn the_boxes_of_a_daemon_share_one_init() {
    use std::os::unix::fs::MetadataExt;
    let d = Daemon::start();
    let mut c = d.client().await;
    for name in ["lean-a", "lean-b", "lean-c"] {
        up(&mut c, name, busybox_spec()).await;
    }
    let inits: Vec<(u32, u64)> = box_processes(&d.home)
        .into_iter()
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/exe"))
                .is_ok_and(|e| e.to_string_lossy().contains("boxd-init"))
        })
        .map(|p| {
            (
                p,
                std::fs::metadata(format!("/proc/{p}/exe")).unwrap().ino(),
            )
        })
        .collect();
    println!("the boxes' inits (pid, memfd inode): {inits:?}");
    assert_eq!(inits.len(), 3, "one init per box: {inits:?}");
    assert!(
        inits.iter().all(|(_, ino)| *ino == inits[0].1),
        "each box has an init of its own: {inits:?}"
    );
    for name in ["lean-a", "lean-b", "lean-c"] {
        c.remove_box(v1::RemoveBoxRequest {
            name: name.into(),
            force: true,
        })
        .await
        .unwrap();
    }
}

/// A running box keeps four processes on the host (its supervisor, the
/// bubblewrap that holds its namespaces, its init as its pid 1 and its
/// zygote), and the two of boxd's run the small helper binary, never the
/// daemon's: the daemon's executable is mapped by no process of a box.
#[tokio::test(flavor = "multi_thread")]
async fn a_box_keeps_four_processes_and_none_runs_the_daemon_binary() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "lean-p", busybox_spec()).await;
    let exe = |p: &u32| {
        std::fs::read_link(format!("/proc/{p}/exe"))
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let procs: Vec<(u32, String)> = box_processes(&d.home)
        .into_iter()
        .map(|p| (p, exe(&p)))
        .collect();
    println!("the box's processes (pid, executable): {procs:?}");
    let daemon = exe(&d.pid());
    assert!(daemon.ends_with("/boxd"), "{daemon}");
    assert_eq!(procs.len(), 4, "{procs:?}");
    let helpers: Vec<&(u32, String)> = procs
        .iter()
        .filter(|(_, e)| e.ends_with("/boxd-box"))
        .collect();
    assert_eq!(helpers.len(), 2, "the supervisor and the zygote: {procs:?}");
    assert!(
        procs.iter().any(|(_, e)| e.ends_with("/bwrap")),
        "{procs:?}"
    );
    assert!(
        procs.iter().any(|(_, e)| e.contains("boxd-init")),
        "{procs:?}"
    );
    for (p, _) in &procs {
        let maps = std::fs::read_to_string(format!("/proc/{p}/maps")).unwrap_or_default();
        assert!(
            !maps.lines().any(|l| l.ends_with(&daemon)),
            "process {p} maps the daemon's binary"
        );
    }
    // Inside, the init is pid 1.
    let out = run(&mut c, "lean-p", &["cat", "/proc/1/cmdline"]).await;
    assert!(
        out.stdout_str().contains("/proc/self/fd/"),
        "{}",
        out.stdout_str()
    );
    c.remove_box(v1::RemoveBoxRequest {
        name: "lean-p".into(),
        force: true,
    })
    .await
    .unwrap();
}
