//! `make bench`, image part: pulling and unpacking the same image from a
//! registry on loopback, by boxd (`boxctl image pull` into a fresh daemon
//! home: download, verify, unpack) against the nearest direct alternative,
//! `skopeo copy` to an OCI layout followed by `umoci unpack`, in one run.
//!
//! The image is the Node image (`scripts/node-image.sh`: about 96 MB
//! compressed, 272 MB unpacked). `PULL_RUNS` sets the runs of each
//! (default 5). Not a test: nothing is asserted about time.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use boxd_tests::Daemon;
use boxd_tests::agent::node_image;
use boxd_tests::registry::Registry;

fn timed(mut c: Command) -> Duration {
    let t = Instant::now();
    let out = c.stdin(Stdio::null()).output().expect("run");
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        c,
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("PULL_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let image = node_image();
    let reg = Registry::start(false);
    reg.push(&image, "bench/node:24");
    let reference = format!("{}/bench/node:24", reg.host());

    let (mut boxd, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        // boxd: a fresh home each time, so nothing is cached.
        let d = Daemon::start();
        let mut c = d.boxctl();
        c.args(["image", "pull", &reference]);
        boxd.push(timed(c));
        drop(d);

        let dir = tempfile::tempdir().unwrap();
        let layout = dir.path().join("layout");
        let t = Instant::now();
        let mut copy = Command::new("skopeo");
        copy.args(["copy", "--quiet", "--src-tls-verify=false"])
            .arg(format!("docker://{reference}"))
            .arg(format!("oci:{}:node", layout.display()));
        timed(copy);
        let mut unpack = Command::new("umoci");
        unpack
            .args(["unpack", "--rootless", "--image"])
            .arg(format!("{}:node", layout.display()))
            .arg(dir.path().join("bundle"));
        timed(unpack);
        direct.push(t.elapsed());
    }
    let (b, s) = (median(boxd), median(direct));
    println!(
        "\n## image pull and unpack ({runs} runs each, Node image from a registry on loopback)\n"
    );
    println!("| path | median s | vs skopeo + umoci |");
    println!("| --- | ---: | ---: |");
    println!(
        "| `skopeo copy` to an OCI layout, then `umoci unpack --rootless` | {:.2} | 1.00x |",
        s.as_secs_f64()
    );
    println!(
        "| boxd, `boxctl image pull` (download, verify, unpack) | {:.2} | {:.2}x |",
        b.as_secs_f64(),
        b.as_secs_f64() / s.as_secs_f64()
    );
}
