//! `make bench`, files: `boxctl cp` of one big file into and out of a
//! running busybox box, against `podman cp` (`--runtime runc`) into and
//! out of a running container of the same image, and against `tar -C src
//! -cf - . | tar -C dst -xf -` on the host, in one run.
//!
//! The file (`BENCH_CP_MIB`, default 1024 MiB of random bytes) is copied
//! `BENCH_CP_ITERS` times (default 3) each way by each tool, in rotated
//! order; each copy's target is removed (untimed) before the next. Prints
//! the median MB/s and the ratios to podman and to the host's tar pipe.
//! When podman is missing or does not work here its rows are left out and
//! the reason printed. Not a test: it asserts only that every copy
//! succeeded with the right size.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use boxd_tests::bench::{env_or, timed};
use boxd_tests::podman::Podman;
use boxd_tests::{Daemon, busybox};

fn run(cmd: &mut Command) -> Duration {
    timed(cmd).0
}

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

fn size_of(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One tool's copies each way.
struct Tool {
    label: String,
    copy_in: Vec<Duration>,
    copy_out: Vec<Duration>,
}

fn main() {
    let mib = env_or::<u64>("BENCH_CP_MIB", 1024);
    let iters = env_or::<u64>("BENCH_CP_ITERS", 3).max(1) as usize;
    let bytes = mib << 20;
    let work = tempfile::Builder::new()
        .prefix("boxd-bench-cp-")
        .tempdir_in("/tmp")
        .expect("temporary directory");
    let src = work.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let file = src.join("big");
    run(&mut sh(&format!(
        "head -c {bytes} /dev/urandom > '{}'",
        file.display()
    )));
    let out_dir = work.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let landed = out_dir.join("big");

    let d = Daemon::start();
    run(d
        .boxctl()
        .args(["create", "cpbench", "--image"])
        .arg(busybox()));
    run(d.boxctl().args(["start", "cpbench"]));
    let mut boxd = Tool {
        label: "boxctl cp".into(),
        copy_in: vec![],
        copy_out: vec![],
    };

    let podman = match Podman::setup().and_then(|p| {
        let reference = p.load("busybox", &busybox())?;
        p.run_sleeping("cpbench", &reference)?;
        Ok(p)
    }) {
        Ok(p) => Some(p),
        Err(e) => {
            println!("\ncp: podman is skipped: {e}");
            None
        }
    };
    let mut pod = Tool {
        label: podman
            .as_ref()
            .map(|p| format!("podman cp ({} {})", p.runtime, p.version))
            .unwrap_or_default(),
        copy_in: vec![],
        copy_out: vec![],
    };
    let mut host = Tool {
        label: "tar | tar (host)".into(),
        copy_in: vec![],
        copy_out: vec![],
    };

    let file_s = file.to_string_lossy().into_owned();
    let out_s = out_dir.to_string_lossy().into_owned();
    for i in 0..iters {
        for k in 0..3 {
            match (i + k) % 3 {
                0 => {
                    boxd.copy_in
                        .push(run(d.boxctl().args(["cp", &file_s, "cpbench:/tmp/big"])));
                    boxd.copy_out
                        .push(run(d.boxctl().args(["cp", "cpbench:/tmp/big", &out_s])));
                    assert_eq!(size_of(&landed), bytes);
                    std::fs::remove_file(&landed).unwrap();
                    run(d.boxctl().args(["exec", "cpbench", "--", "rm", "/tmp/big"]));
                }
                1 => {
                    let Some(p) = &podman else { continue };
                    pod.copy_in
                        .push(run(p.cmd().args(["cp", &file_s, "cpbench:/tmp/big"])));
                    pod.copy_out
                        .push(run(p.cmd().args(["cp", "cpbench:/tmp/big", &out_s])));
                    assert_eq!(size_of(&landed), bytes);
                    std::fs::remove_file(&landed).unwrap();
                    run(p.cmd().args(["exec", "cpbench", "rm", "/tmp/big"]));
                }
                _ => {
                    // Host to host, once per direction's slot: the floor.
                    for v in [&mut host.copy_in, &mut host.copy_out] {
                        v.push(run(&mut sh(&format!(
                            "tar -C '{}' -cf - . | tar -C '{}' -xf -",
                            src.display(),
                            out_dir.display()
                        ))));
                        assert_eq!(size_of(&landed), bytes);
                        std::fs::remove_file(&landed).unwrap();
                    }
                }
            }
        }
    }
    if let Some(p) = &podman {
        let _ = p.try_cmd(&["rm", "-f", "-t", "0", "cpbench"]);
    }
    let _ = d.boxctl().args(["rm", "-f", "cpbench"]).output();

    let mbs = |t: Duration| bytes as f64 / t.as_secs_f64() / 1e6;
    println!("\ncp: one file of {mib} MiB, median of {iters} each way (MB/s = 10^6 bytes/s)");
    println!(
        "{:<34} {:>10} {:>9} {:>10} {:>9}",
        "tool", "in", "MB/s", "out", "MB/s"
    );
    let mut rows = vec![&mut boxd, &mut host];
    if podman.is_some() {
        rows.insert(1, &mut pod);
    }
    let mut medians = Vec::new();
    for t in rows {
        let (i, o) = (median(&mut t.copy_in), median(&mut t.copy_out));
        println!(
            "{:<34} {:>10.2?} {:>9.0} {:>10.2?} {:>9.0}",
            t.label,
            i,
            mbs(i),
            o,
            mbs(o)
        );
        medians.push((t.label.clone(), i, o));
    }
    let (_, bi, bo) = medians[0].clone();
    for (label, i, o) in &medians[1..] {
        println!(
            "boxctl cp / {label}: time x{:.2} in, x{:.2} out",
            bi.as_secs_f64() / i.as_secs_f64(),
            bo.as_secs_f64() / o.as_secs_f64()
        );
    }
}
