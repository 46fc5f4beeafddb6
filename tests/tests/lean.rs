//! What a running box costs on the host, beyond what it runs: properties
//! of boxd's per-box processes (figures are `make bench`'s, never a test's).

use std::path::Path;

use boxd_tests::*;

/// Every process below this home's box supervisors (a supervisor's stderr
/// is its box's `supervisor.log`), the supervisors included.
fn box_processes(home: &Path) -> Vec<u32> {
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    let boxes = home.join("boxes");
    let mut found: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/fd/2")).is_ok_and(|l| l.starts_with(&boxes))
                && std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.windows(11).any(|w| w == b"__supervise"))
        })
        .collect();
    loop {
        let more: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| !found.contains(p) && parent(*p).is_some_and(|pp| found.contains(&pp)))
            .collect();
        if more.is_empty() {
            return found;
        }
        found.extend(more);
    }
}

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
