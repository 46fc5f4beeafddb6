//! `make bench`, box lifecycle: boxd against podman (`--runtime runc`) on
//! the same images, in one run.
//!
//! For the busybox test image and the Node image (`scripts/node-image.sh`),
//! each already cached by both sides (one untimed warm-up each):
//!
//! - create → start → exec `true` → rm, step by step: `boxctl create`,
//!   `start`, `exec NAME -- true`, `rm -f` against a boxd started here on a
//!   temporary socket and home; `podman create` (a `sleep` as the
//!   container's process), `start`, `exec NAME true`, `rm -f -t 0`; and
//!   `podman run --rm IMAGE true`, podman's one-command form. The three are
//!   interleaved, each iteration in a rotated order;
//! - disk added by one fresh box: boxd's home, and podman's storage
//!   (graph root, run root, tmp dir), `du -x` real and apparent, before
//!   and after create, and after start + exec.
//!
//! Only the public surface is used (`boxctl`, box ids from `--json`), so
//! the harness measures any engine the daemon runs. Podman runs rootful
//! when we are root, with its own `containers.conf` and storage under a
//! temporary directory (nothing of the user's podman is read or written);
//! when podman is missing or does not work here its columns are left out
//! and the reason printed.
//!
//! Not a test: it asserts nothing about time. `BENCH_LIFECYCLE_BUSYBOX`
//! (default 20) and `BENCH_LIFECYCLE_NODE` (default 10; 0 skips the Node
//! image) set the iterations.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use boxd_tests::bench::{env_or, timed};
use boxd_tests::podman::Podman;
use boxd_tests::{Daemon, agent::workspace, busybox};

fn main() {
    let busybox_iters = env_or::<usize>("BENCH_LIFECYCLE_BUSYBOX", 20);
    let node_iters = env_or::<usize>("BENCH_LIFECYCLE_NODE", 10);

    let mut images = vec![Image {
        label: "busybox",
        layout: busybox(),
        iters: busybox_iters,
        goal: 0.3,
    }];
    if node_iters > 0 {
        match node_image() {
            Ok(layout) => images.push(Image {
                label: "node",
                layout,
                iters: node_iters,
                goal: 0.5,
            }),
            Err(e) => println!("\nbox lifecycle: the Node image is skipped: {e}"),
        }
    }

    let podman = match Podman::setup() {
        Ok(p) => Some(p),
        Err(e) => {
            println!("\nbox lifecycle: podman is skipped: {e}");
            None
        }
    };
    let d = Daemon::start();

    let mut results = Vec::new();
    for image in &images {
        let layout = image.layout.to_string_lossy().into_owned();
        // The podman side of this image, if it can be loaded and runs.
        let pm = podman
            .as_ref()
            .and_then(|p| match p.load(image.label, &image.layout) {
                Ok(reference) => Some((p, reference)),
                Err(e) => {
                    println!("\nbox lifecycle ({}): podman is skipped: {e}", image.label);
                    None
                }
            });

        // Warm-up, untimed: boxd unpacks the image into its cache on the
        // first create; podman's first container sets up its own state.
        boxd_cycle(&d, &format!("warm-{}", image.label), &layout);
        if let Some((p, r)) = &pm {
            p.cycle(&format!("warm-{}", image.label), r);
            p.run_rm(r);
        }

        let boxd_disk = boxd_disk(&d, image.label, &layout);
        let podman_disk = pm.as_ref().map(|(p, r)| p.disk(image.label, r));

        let mut boxd = Steps::default();
        let mut pod = Steps::default();
        let mut run_rm = Vec::new();
        for i in 0..image.iters {
            for k in 0..3 {
                match (i + k) % 3 {
                    0 => boxd.push(boxd_cycle(&d, &format!("{}-{i}", image.label), &layout)),
                    1 => {
                        if let Some((p, r)) = &pm {
                            pod.push(p.cycle(&format!("{}-{i}", image.label), r));
                        }
                    }
                    _ => {
                        if let Some((p, r)) = &pm {
                            run_rm.push(p.run_rm(r));
                        }
                    }
                }
            }
        }
        results.push(Outcome {
            image,
            boxd,
            podman: pm.is_some().then_some((pod, run_rm)),
            boxd_disk,
            podman_disk,
        });
    }

    if let Some(p) = &podman {
        println!(
            "\nbox lifecycle: podman {} (`--runtime {}`, {}), storage driver {}, cgroups {} via {}, \
             `--network none`; boxd's namespace engine (no network but loopback when nothing is allow-listed)",
            p.version, p.runtime, p.runtime_version, p.driver, p.cgroups, p.cgroup_manager
        );
    }
    for r in &results {
        r.print();
    }
}

struct Image {
    label: &'static str,
    layout: PathBuf,
    iters: usize,
    /// The goal for the total, as a ratio boxd/podman.
    goal: f64,
}

/// The Node OCI layout (`scripts/node-image.sh`: cached, built once, needs
/// root and debootstrap), or why it cannot be had.
fn node_image() -> Result<PathBuf, String> {
    let out = Command::new(workspace().join("scripts/node-image.sh"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run scripts/node-image.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!("scripts/node-image.sh failed ({})", out.status));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    ))
}

/// One box through `boxctl`: create, start, exec `true`, rm.
fn boxd_cycle(d: &Daemon, name: &str, image: &str) -> [Duration; 4] {
    [
        timed(d.boxctl().args(["create", name, "--image", image])).0,
        timed(d.boxctl().args(["start", name])).0,
        timed(d.boxctl().args(["exec", name, "--", "true"])).0,
        timed(d.boxctl().args(["rm", "-f", name])).0,
    ]
}

/// Real and apparent bytes under `paths`, one filesystem each (`du -x`:
/// a box's or a container's mounted root is not counted twice), each
/// inode once.
#[derive(Clone, Copy, Default)]
struct Usage {
    real: i64,
    apparent: i64,
}

fn du(paths: &[&Path]) -> Usage {
    let total = |flags: &[&str]| -> i64 {
        let out = Command::new("du")
            .args(["-s", "-x", "-c"])
            .args(flags)
            .args(paths)
            .output()
            .expect("run du");
        assert!(
            out.status.success(),
            "du: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The last line is the grand total.
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().expect("du total");
        last.split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .expect("du number")
    };
    Usage {
        real: total(&["-B1"]),
        apparent: total(&["-b"]),
    }
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, o: Usage) -> Usage {
        Usage {
            real: self.real - o.real,
            apparent: self.apparent - o.apparent,
        }
    }
}

/// What one fresh box adds on disk: after create, and after start + exec
/// `true` (while it runs).
struct Disk {
    created: Usage,
    used: Usage,
    /// The same, counting only the box's own directory (boxd).
    own: Option<(Usage, Usage)>,
}

fn boxd_disk(d: &Daemon, label: &str, image: &str) -> Disk {
    let name = format!("disk-{label}");
    let before = du(&[&d.home]);
    let (_, json) = timed(
        d.boxctl()
            .args(["--json", "create", &name, "--image", image]),
    );
    let v: serde_json::Value = serde_json::from_str(&json).expect("create --json");
    let id = v["box"]["boxId"].as_str().expect("boxId").to_owned();
    let dir = d.home.join("boxes").join(&id);
    let created = du(&[&d.home]) - before;
    let own_created = if dir.is_dir() {
        Some(du(&[&dir]))
    } else {
        None
    };
    timed(d.boxctl().args(["start", &name]));
    timed(d.boxctl().args(["exec", &name, "--", "true"]));
    let used = du(&[&d.home]) - before;
    let own = own_created.map(|c| (c, du(&[&dir])));
    timed(d.boxctl().args(["rm", "-f", &name]));
    Disk { created, used, own }
}

/// Podman's side of a box's lifecycle.
trait Lifecycle {
    fn cycle(&self, name: &str, reference: &str) -> [Duration; 4];
    fn run_rm(&self, reference: &str) -> Duration;
    fn disk(&self, label: &str, reference: &str) -> Disk;
}

fn create_args<'a>(name: &'a str, reference: &'a str) -> [&'a str; 10] {
    [
        "create",
        "--pull",
        "never",
        "--network",
        "none",
        "--name",
        name,
        reference,
        "sleep",
        "3600",
    ]
}

impl Lifecycle for Podman {
    /// One container: create (its process a `sleep`), start, exec `true`,
    /// rm (killed at once: `-t 0`, as boxd's `rm -f` kills).
    fn cycle(&self, name: &str, reference: &str) -> [Duration; 4] {
        [
            timed(self.cmd().args(create_args(name, reference))).0,
            timed(self.cmd().args(["start", name])).0,
            timed(self.cmd().args(["exec", name, "true"])).0,
            timed(self.cmd().args(["rm", "-f", "-t", "0", name])).0,
        ]
    }

    /// `podman run --rm IMAGE true`: all four in one command.
    fn run_rm(&self, reference: &str) -> Duration {
        timed(self.cmd().args([
            "run",
            "--rm",
            "--pull",
            "never",
            "--network",
            "none",
            reference,
            "true",
        ]))
        .0
    }

    /// The growth of podman's whole storage (graph root, run root, tmp
    /// dir) for one container.
    fn disk(&self, label: &str, reference: &str) -> Disk {
        let name = format!("disk-{label}");
        let p = self.dir();
        let before = du(&[p]);
        timed(self.cmd().args(create_args(&name, reference)));
        let created = du(&[p]) - before;
        timed(self.cmd().args(["start", &name]));
        timed(self.cmd().args(["exec", &name, "true"]));
        let used = du(&[p]) - before;
        timed(self.cmd().args(["rm", "-f", "-t", "0", &name]));
        Disk {
            created,
            used,
            own: None,
        }
    }
}

#[derive(Default)]
struct Steps {
    steps: [Vec<Duration>; 4],
    total: Vec<Duration>,
}

impl Steps {
    fn push(&mut self, one: [Duration; 4]) {
        for (v, d) in self.steps.iter_mut().zip(one) {
            v.push(d);
        }
        self.total.push(one.iter().sum());
    }
}

/// p50 and p90 of `samples`.
fn p50_p90(samples: &[Duration]) -> (Duration, Duration) {
    let mut s = samples.to_vec();
    s.sort();
    let at = |p: f64| s[((s.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.9))
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn kib(bytes: i64) -> String {
    format!("{:.0}", bytes as f64 / 1024.0)
}

struct Outcome<'a> {
    image: &'a Image,
    boxd: Steps,
    podman: Option<(Steps, Vec<Duration>)>,
    boxd_disk: Disk,
    podman_disk: Option<Disk>,
}

impl Outcome<'_> {
    fn print(&self) {
        let (label, n) = (self.image.label, self.image.iters);
        println!(
            "\n## box lifecycle, {label} image: boxd vs podman --runtime runc ({n} runs each, interleaved)\n"
        );
        println!(
            "| step | boxd p50 ms | boxd p90 ms | podman p50 ms | podman p90 ms | boxd/podman p50 | boxd/podman p90 |"
        );
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
        let podman = self.podman.as_ref();
        let names = ["create", "start", "exec `true`", "rm -f"];
        for (i, what) in names.iter().enumerate() {
            latency_row(
                what,
                &self.boxd.steps[i],
                podman.map(|(p, _)| &p.steps[i][..]),
            );
        }
        let total_ratio = latency_row(
            "**total**, create → rm",
            &self.boxd.total,
            podman.map(|(p, _)| &p.total[..]),
        );
        latency_row(
            "total vs `podman run --rm IMAGE true`",
            &self.boxd.total,
            podman.map(|(_, r)| &r[..]),
        );

        println!(
            "\n| disk added by one fresh box ({label}) | boxd real KiB | boxd apparent KiB | podman real KiB | podman apparent KiB |"
        );
        println!("| --- | ---: | ---: | ---: | ---: |");
        let pd = self.podman_disk.as_ref();
        let cells = |u: Option<Usage>| match u {
            Some(u) => format!("{} | {}", kib(u.real), kib(u.apparent)),
            None => "– | –".into(),
        };
        let (b, p) = (&self.boxd_disk, pd);
        println!(
            "| after create | {} | {} |",
            cells(Some(b.created)),
            cells(p.map(|d| d.created))
        );
        println!(
            "| after create, start, exec `true` (running) | {} | {} |",
            cells(Some(b.used)),
            cells(p.map(|d| d.used))
        );
        if let Some((c, u)) = b.own {
            println!(
                "| boxd: the box's own directory, after create / running | {} / {} | {} / {} | | |",
                kib(c.real),
                kib(u.real),
                kib(c.apparent),
                kib(u.apparent)
            );
        }

        let goal = self.image.goal;
        let disk_goal = if label == "node" {
            format!(
                "; disk ≤ 1024 KiB per fresh box: {} KiB, {}",
                kib(b.used.real.max(b.created.real)),
                if b.used.real.max(b.created.real) <= 1 << 20 {
                    "met"
                } else {
                    "not met"
                }
            )
        } else {
            String::new()
        };
        match total_ratio {
            Some(r) => println!(
                "\nGoal: total ≤ {goal:.1}x podman's: {r:.2}x, {}{disk_goal}.",
                if r <= goal { "met" } else { "not met" }
            ),
            None => println!(
                "\nGoal: total ≤ {goal:.1}x podman's: not measured (no podman){disk_goal}."
            ),
        }
    }
}

/// One row of a lifecycle table: boxd's p50 and p90, podman's, and the
/// ratios boxd/podman; returns the p50 ratio (none without podman).
fn latency_row(what: &str, boxd: &[Duration], podman: Option<&[Duration]>) -> Option<f64> {
    let (b50, b90) = p50_p90(boxd);
    let Some(podman) = podman.filter(|p| !p.is_empty()) else {
        println!("| {what} | {} | {} | – | – | – | – |", ms(b50), ms(b90));
        return None;
    };
    let (p50, p90) = p50_p90(podman);
    let (r50, r90) = (
        b50.as_secs_f64() / p50.as_secs_f64(),
        b90.as_secs_f64() / p90.as_secs_f64(),
    );
    println!(
        "| {what} | {} | {} | {} | {} | {r50:.2}x | {r90:.2}x |",
        ms(b50),
        ms(b90),
        ms(p50),
        ms(p90)
    );
    Some(r50)
}
