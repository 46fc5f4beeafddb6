//! `make bench`: what a running idle box costs the host, against a podman
//! container in the same run, at several counts of running boxes.
//!
//! For each count N (`BENCH_FOOTPRINT`, default `50,500`): N boxes of the
//! busybox image started on a fresh boxd (no command running in them),
//! then N podman containers of the same image (`podman run -d --network
//! none IMAGE sleep`, whose `sleep` is the container's init). Counted per
//! box: the PSS of every process kept for it (boxd: its supervisor and
//! everything below it; podman: its `conmon` and the container's
//! processes), and the kernel's own memory (`/proc/meminfo`: slab, kernel
//! stacks, page tables, per-cpu) grown while they ran, divided by N; and
//! the daemon's RSS. Not a test: it asserts nothing about sizes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use boxd_tests::bench::{env_or, timed};
use boxd_tests::podman::Podman;
use boxd_tests::procs::box_processes;
use boxd_tests::{Daemon, busybox};

/// Kernel memory in KiB: what `/proc/meminfo` says the kernel holds for
/// itself (not page cache, not processes' pages).
fn kernel_kib() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap();
    info.lines()
        .filter(|l| {
            ["Slab:", "KernelStack:", "PageTables:", "Percpu:"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// The PSS of these processes, KiB.
fn pss_kib(pids: &BTreeSet<u32>) -> u64 {
    pids.iter()
        .filter_map(|p| {
            let r = std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok()?;
            r.lines()
                .find(|l| l.starts_with("Pss:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// `pid` and every process below it.
fn tree(pid: u32, out: &mut BTreeSet<u32>) {
    if !out.insert(pid) {
        return;
    }
    let kids =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
        tree(k, out);
    }
}

/// Lets the kernel settle (freed slabs, RCU) before a reading.
fn settle() {
    std::thread::sleep(Duration::from_secs(2));
}

struct Cost {
    procs: usize,
    pss_kib: u64,
    kernel_kib: i64,
    start: Duration,
    daemon_rss_kib: Option<(u64, u64)>,
}

fn boxd_cost(image: &str, n: usize) -> Cost {
    let d = Daemon::start();
    // The image unpacks into the cache on the first create: not counted.
    timed(d.boxctl().args(["create", "warm", "--image", image]));
    timed(d.boxctl().args(["rm", "warm"]));
    let rss0 = rss_kib(d.pid());
    settle();
    let k0 = kernel_kib();
    let t = Instant::now();
    for i in 0..n {
        timed(
            d.boxctl()
                .args(["create", &format!("fp{i}"), "--image", image]),
        );
        timed(d.boxctl().args(["start", &format!("fp{i}")]));
    }
    let start = t.elapsed() / n as u32;
    settle();
    let pids: BTreeSet<u32> = box_processes(&d.home).into_iter().collect();
    let cost = Cost {
        procs: pids.len(),
        pss_kib: pss_kib(&pids),
        kernel_kib: kernel_kib() as i64 - k0 as i64,
        start,
        daemon_rss_kib: Some((rss0, rss_kib(d.pid()))),
    };
    // Boxes outlive their daemon: removed before it stops.
    let names: Vec<String> = (0..n).map(|i| format!("fp{i}")).collect();
    for chunk in names.chunks(100) {
        timed(d.boxctl().args(["rm", "-f"]).args(chunk));
    }
    cost
}

fn podman_cost(p: &Podman, reference: &str, n: usize) -> Result<Cost, String> {
    let _ = p.try_cmd(&["rm", "--all", "--force", "-t", "0"]);
    settle();
    let k0 = kernel_kib();
    let t = Instant::now();
    for i in 0..n {
        p.run_sleeping(&format!("fp{i}"), reference)?;
    }
    let start = t.elapsed() / n as u32;
    settle();
    let mut pids = BTreeSet::new();
    for i in 0..n {
        let conmon = p.try_cmd(&[
            "inspect",
            "--format",
            "{{.State.ConmonPid}}",
            &format!("fp{i}"),
        ])?;
        if let Ok(pid) = conmon.trim().parse() {
            tree(pid, &mut pids);
        }
    }
    let cost = Cost {
        procs: pids.len(),
        pss_kib: pss_kib(&pids),
        kernel_kib: kernel_kib() as i64 - k0 as i64,
        start,
        daemon_rss_kib: None,
    };
    let _ = p.try_cmd(&["rm", "--all", "--force", "-t", "0"]);
    Ok(cost)
}

fn main() {
    let counts: Vec<usize> = env_or::<String>("BENCH_FOOTPRINT", "50,500".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .filter(|&c| c > 0)
        .collect();
    let layout = busybox();
    let image = layout.to_string_lossy().into_owned();
    let podman = match Podman::setup() {
        Ok(p) => match p.load("footprint", &layout) {
            Ok(r) => Some((p, r)),
            Err(e) => {
                println!("\nfootprint: podman is skipped: {e}");
                None
            }
        },
        Err(e) => {
            println!("\nfootprint: podman is skipped: {e}");
            None
        }
    };
    if let Some((p, _)) = &podman {
        println!(
            "\nfootprint: podman {} (`--runtime {}`, {}), cgroups {} via {}",
            p.version, p.runtime, p.runtime_version, p.cgroups, p.cgroup_manager
        );
    }
    for n in counts {
        let b = boxd_cost(&image, n);
        let pm = podman
            .as_ref()
            .map(|(p, r)| podman_cost(p, r, n).unwrap_or_else(|e| panic!("podman: {e}")));
        let mib = |kib: f64| kib / 1024.0;
        println!("\n## a running idle box, {n} at once (busybox image)\n");
        println!("| per box | boxd | podman | boxd ÷ podman |");
        println!("| --- | ---: | ---: | ---: |");
        let row = |what: &str, ours: f64, theirs: Option<f64>, unit: &str| {
            let (t, r) = match theirs {
                Some(t) if t > 0.0 => (format!("{t:.2} {unit}"), format!("{:.2}x", ours / t)),
                Some(t) => (format!("{t:.2} {unit}"), "-".into()),
                None => ("-".into(), "-".into()),
            };
            println!("| {what} | {ours:.2} {unit} | {t} | {r} |");
        };
        let per = |x: f64| x / n as f64;
        row(
            "processes kept",
            per(b.procs as f64),
            pm.as_ref().map(|c| per(c.procs as f64)),
            "",
        );
        row(
            "PSS of those processes",
            mib(per(b.pss_kib as f64)),
            pm.as_ref().map(|c| mib(per(c.pss_kib as f64))),
            "MiB",
        );
        row(
            "kernel memory (`/proc/meminfo` slab, stacks, page tables, per-cpu)",
            mib(per(b.kernel_kib as f64)),
            pm.as_ref().map(|c| mib(per(c.kernel_kib as f64))),
            "MiB",
        );
        row(
            "start (boxd: `create` + `start`; podman: `run -d`)",
            b.start.as_secs_f64() * 1000.0,
            pm.as_ref().map(|c| c.start.as_secs_f64() * 1000.0),
            "ms",
        );
        if let Some((before, after)) = b.daemon_rss_kib {
            println!(
                "\nboxd's own RSS: {:.1} MiB before the boxes, {:.1} MiB with {n} running",
                mib(before as f64),
                mib(after as f64)
            );
        }
    }
}
