//! `make bench`: boxd against the nearest direct alternative, in one run.
//!
//! - exec round trip of `true` (p50, p99): through `boxctl`, `harness-box-exec`, through the
//!   client library, and bubblewrap running `true` directly on the same
//!   root filesystem;
//! - stdout throughput: 1 GiB through `cat` in a box, against the same bytes
//!   through a direct pipe on the host;
//! - the exec path at full speed: 1 GiB of `dd bs=1M` output through
//!   `boxctl exec`, and 1 GiB into `dd`'s stdin through `boxctl exec -i`,
//!   against the same `dd` on a host pipe, with the same reader (or
//!   writer) at the other end, and the CPU every process spent;
//! - create + start of a box from a cached image;
//! - HTTP through a box's egress proxy (allow-listed `host.boxd.internal`)
//!   against the same `wget` in a bubblewrap sandbox sharing the host's
//!   network (no proxy, no filter): small requests and a large download.
//!
//! Not a test: it asserts nothing about time. `BENCH_ITERS` sets the number
//! of round trips (default 200), `BENCH_BYTES` the throughput size.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use boxd_tests::bench::env_or;
use boxd_tests::*;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

struct Row {
    what: String,
    p50: Duration,
    p99: Duration,
}

fn summarize(what: &str, mut samples: Vec<Duration>) -> Row {
    samples.sort();
    Row {
        what: what.into(),
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
    }
}

/// Runs `sh -c SCRIPT` in the bench box and counts its stdout bytes.
async fn stdout_bytes(c: &mut Client, script: &str) -> u64 {
    let mut exec = ExecStream::start(c, start_req("bench", &["sh", "-c", script]))
        .await
        .unwrap();
    let mut n = 0u64;
    loop {
        match exec.next().await.unwrap() {
            Some(ExecEvent::Stdout(b)) => n += b.len() as u64,
            Some(ExecEvent::Exit(_)) => return n,
            _ => {}
        }
    }
}

/// One transfer: how long it took, and the CPU seconds of every process
/// on its path.
struct Flow {
    secs: f64,
    cpu: f64,
}

const MIB: usize = 1 << 20;

/// Reads `r` to its end in 4 MiB reads: the bytes.
fn drain(mut r: impl Read) -> u64 {
    let mut buf = vec![0u8; 4 * MIB];
    let mut n = 0u64;
    loop {
        match r.read(&mut buf).unwrap() {
            0 => return n,
            k => n += k as u64,
        }
    }
}

/// Writes `mib` MiB of zeros to `w` in 4 MiB writes, then closes it.
fn feed(mut w: impl std::io::Write, mib: u64) {
    let buf = vec![0u8; 4 * MIB];
    let mut left = mib as usize * MIB;
    while left > 0 {
        let k = left.min(buf.len());
        w.write_all(&buf[..k]).unwrap();
        left -= k;
    }
}

/// Runs `cmd` with `dd` at one end of its stdout (`out`) or stdin, this
/// thread at the other, `mib` MiB through; the CPU of this thread, the
/// children it reaps and `others` (the daemon, the box's processes).
fn flow(mut cmd: Command, out: bool, mib: u64, others: &dyn Fn() -> f64) -> Flow {
    use boxd_tests::procs::{children_cpu_seconds, thread_cpu_seconds};
    cmd.stderr(Stdio::null());
    if out {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    } else {
        cmd.stdin(Stdio::piped()).stdout(Stdio::null());
    }
    let cpu0 = thread_cpu_seconds() + children_cpu_seconds() + others();
    let t = Instant::now();
    let mut child = cmd.spawn().unwrap();
    if out {
        let n = drain(child.stdout.take().unwrap());
        assert_eq!(n, mib * MIB as u64);
    } else {
        feed(child.stdin.take().unwrap(), mib);
    }
    assert!(child.wait().unwrap().success());
    let secs = t.elapsed().as_secs_f64();
    let cpu = thread_cpu_seconds() + children_cpu_seconds() + others() - cpu0;
    Flow { secs, cpu }
}

/// `dd bs=1M` output and input through `boxctl exec`, against the same
/// `dd` (the box's busybox) on a host pipe with the same reader or writer.
fn dd_rows(d: &Daemon, rootfs: &std::path::Path, bytes: u64) {
    use boxd_tests::procs::{box_processes, cpu_seconds};
    let mib = (bytes / MIB as u64).max(1);
    let busybox = rootfs.join("bin/busybox");
    let host = |args: &[String]| {
        let mut cmd = Command::new(&busybox);
        cmd.arg("dd").args(args);
        cmd
    };
    let boxd = |args: &[String], stdin: bool| {
        let mut cmd = d.boxctl();
        cmd.arg("exec");
        if stdin {
            cmd.arg("-i");
        }
        cmd.args(["bench", "--", "dd"]).args(args);
        cmd
    };
    let daemon = d.pid();
    let home = d.home.clone();
    let boxd_cpu = move || {
        let mut pids = box_processes(&home);
        pids.push(daemon);
        cpu_seconds(&pids)
    };
    let none = || 0.0;
    let out_args = [
        "if=/dev/zero".to_owned(),
        "bs=1M".into(),
        format!("count={mib}"),
    ];
    let in_args = ["of=/dev/null".to_owned(), "bs=1M".into()];
    let rows = [
        (
            "stdout",
            "host pipe: `dd` → the reader",
            flow(host(&out_args), true, mib, &none),
        ),
        (
            "stdout",
            "`boxctl exec bench -- dd …` → the reader",
            flow(boxd(&out_args, false), true, mib, &boxd_cpu),
        ),
        (
            "stdin",
            "host pipe: the writer → `dd`",
            flow(host(&in_args), false, mib, &none),
        ),
        (
            "stdin",
            "the writer → `boxctl exec -i bench -- dd …`",
            flow(boxd(&in_args, true), false, mib, &boxd_cpu),
        ),
    ];
    println!(
        "\n## the exec path at full speed ({mib} MiB of `dd bs=1M`, 4 MiB reads and writes at the bench's end)\n"
    );
    println!("| stream | path | seconds | MiB/s | vs host pipe | CPU-s per GiB, every process |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    let gib = mib as f64 / 1024.0;
    for pair in rows.chunks(2) {
        let base = pair[0].2.secs;
        for (stream, what, f) in pair {
            println!(
                "| {stream} | {what} | {:.2} | {:.0} | {:.2}x | {:.2} |",
                f.secs,
                mib as f64 / f.secs,
                base / f.secs,
                f.cpu / gib
            );
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn main() {
    let iters: usize = env_or("BENCH_ITERS", 200);
    let bytes: u64 = env_or("BENCH_BYTES", 1 << 30);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let d = Daemon::start();
    let mut c = rt.block_on(d.client());
    let info = rt.block_on(up(&mut c, "bench", busybox_spec()));
    // The image's shared, unpacked root (boxes are overlays on it).
    let digest = info.image_digest.trim_start_matches("sha256:");
    let rootfs = d.home.join("images").join(digest).join("rootfs");
    assert!(rootfs.join("bin/busybox").exists(), "{}", rootfs.display());

    // Warm up every path once.
    rt.block_on(run(&mut c, "bench", &["true"]));

    let mut lib = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        let out = rt.block_on(run(&mut c, "bench", &["true"]));
        lib.push(t.elapsed());
        assert_eq!(out.exit.code, Some(0));
    }
    let mut cli = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        let st = d
            .boxctl()
            .args(["exec", "bench", "--", "true"])
            .status()
            .unwrap();
        cli.push(t.elapsed());
        assert!(st.success());
    }
    // What an agent host pays per launch on a warm box: connect, reuse,
    // start (a no-op), exec with stdio attached.
    let mut proxy = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        let st = d
            .proxy()
            .args(["--quiet", "--box", "bench", "--", "true"])
            .status()
            .unwrap();
        proxy.push(t.elapsed());
        assert!(st.success());
    }
    let mut direct = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        let st = Command::new("bwrap")
            .args([
                "--unshare-user",
                "--uid",
                "0",
                "--gid",
                "0",
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-net",
            ])
            .arg("--bind")
            .arg(&rootfs)
            .args(["/", "--proc", "/proc", "--dev", "/dev", "--", "/bin/true"])
            .status()
            .unwrap();
        direct.push(t.elapsed());
        assert!(st.success());
    }
    let rows = [
        summarize("bubblewrap directly (new sandbox per run)", direct),
        summarize("boxd, client library (one connection)", lib),
        summarize("boxd, `boxctl exec` (new process and connection)", cli),
        summarize(
            "boxd, `harness-box-exec` on a warm box (new process)",
            proxy,
        ),
    ];

    // Throughput: 1 GiB of zeros through `cat` in the box vs a host pipe.
    let script = format!("head -c {bytes} /dev/zero | cat");
    let t = Instant::now();
    let out = rt.block_on(stdout_bytes(&mut c, &script));
    let boxd_tp = t.elapsed();
    assert_eq!(out, bytes);
    let t = Instant::now();
    // The same busybox binary as in the box, so only the path differs.
    let mut child = Command::new(rootfs.join("bin/busybox"))
        .args(["sh", "-c", &script])
        .env("PATH", rootfs.join("bin"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdout.take().unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        let r = pipe.read(&mut buf).unwrap();
        if r == 0 {
            break;
        }
        n += r as u64;
    }
    child.wait().unwrap();
    let pipe_tp = t.elapsed();
    assert_eq!(n, bytes);
    let mib = bytes as f64 / (1 << 20) as f64;
    dd_rows(&d, &rootfs, bytes);

    // Create, then start, from a cached image (the image is unpacked already).
    let (mut create, mut start) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let name = format!("cs{i}");
        let req = v1::CreateBoxRequest {
            name: name.clone(),
            spec: Some(busybox_spec()),
            ..Default::default()
        };
        let t = Instant::now();
        rt.block_on(c.create_box(req)).unwrap();
        create.push(t.elapsed());
        let t = Instant::now();
        rt.block_on(c.start_box(v1::StartBoxRequest { name: name.clone() }))
            .unwrap();
        start.push(t.elapsed());
        rt.block_on(c.remove_box(v1::RemoveBoxRequest { name, force: true }))
            .unwrap();
    }
    let lifecycle = [
        summarize(
            "create (an empty upper layer over the cached image, the record)",
            create,
        ),
        summarize("start (supervisor, bwrap up, init running, zygote)", start),
    ];

    // The JSONL driver against the gRPC client it wraps, in the same run.
    let jsonl_iters = iters.min(500);
    let mut grpc_describe = Vec::new();
    for _ in 0..jsonl_iters {
        let t = Instant::now();
        rt.block_on(c.describe(v1::DescribeRequest {})).unwrap();
        grpc_describe.push(t.elapsed());
    }
    let mut j = Jsonl::start(&d.socket);
    j.next_frame(); // transport
    let mut jsonl_describe = Vec::new();
    for i in 0..jsonl_iters as u64 {
        let t = Instant::now();
        let r = j.call(i, "host.describe", serde_json::json!({}));
        jsonl_describe.push(t.elapsed());
        assert!(r["result"].is_object());
    }
    let text_bytes = bytes.min(256 << 20);
    let text_script = format!("head -c {text_bytes} /dev/zero | tr '\\0' a");
    let t = Instant::now();
    let got = rt.block_on(stdout_bytes(&mut c, &text_script));
    let grpc_text = t.elapsed();
    assert_eq!(got, text_bytes);
    let t = Instant::now();
    let r = j.call(
        1 << 40,
        "box.exec",
        serde_json::json!({"name": "bench", "command": "sh", "args": ["-c", text_script]}),
    );
    let id = r["result"]["execId"].as_str().unwrap().to_owned();
    let mut n = 0u64;
    loop {
        let f = j.next_frame();
        j.seen.clear();
        if f["execId"] != id.as_str() {
            continue;
        }
        if f["type"] == "exit" {
            break;
        }
        n += f["data"].as_str().map_or(0, |d| d.len() as u64);
    }
    let jsonl_text = t.elapsed();
    assert_eq!(n, text_bytes);
    j.seen.clear();
    let (gd, jd) = (
        summarize("gRPC client, `Describe`", grpc_describe),
        summarize("`boxctl jsonl`, `host.describe`", jsonl_describe),
    );
    let text_mib = text_bytes as f64 / (1 << 20) as f64;

    let base = rows[0].p50.as_secs_f64();
    println!("\n## exec round trip of `true` ({iters} runs each)\n");
    println!("| path | p50 ms | p99 ms | p50 vs bubblewrap |");
    println!("| --- | ---: | ---: | ---: |");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2}x |",
            r.what,
            ms(r.p50),
            ms(r.p99),
            r.p50.as_secs_f64() / base
        );
    }
    println!("\n## stdout throughput ({mib:.0} MiB)\n");
    println!("| path | seconds | MiB/s | vs pipe |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| host pipe (the box's busybox `head \\| cat`, read directly) | {:.2} | {:.0} | 1.00x |",
        pipe_tp.as_secs_f64(),
        mib / pipe_tp.as_secs_f64()
    );
    println!(
        "| boxd exec, client library | {:.2} | {:.0} | {:.2}x |",
        boxd_tp.as_secs_f64(),
        mib / boxd_tp.as_secs_f64(),
        pipe_tp.as_secs_f64() / boxd_tp.as_secs_f64()
    );
    println!("\n## box lifecycle (20 runs)\n");
    println!("| what | p50 ms | p99 ms |");
    println!("| --- | ---: | ---: |");
    for r in &lifecycle {
        println!("| {} | {} | {} |", r.what, ms(r.p50), ms(r.p99));
    }
    egress(&rt, &mut c, &d, iters.min(100), bytes.min(256 << 20));

    println!(
        "\n## JSONL driver vs the gRPC client ({jsonl_iters} round trips; {text_mib:.0} MiB of text output)\n"
    );
    println!("| what | gRPC client | `boxctl jsonl` | ratio |");
    println!("| --- | ---: | ---: | ---: |");
    latency_rows("describe round trip", &gd, &jd);
    println!(
        "| output throughput MiB/s | {:.0} | {:.0} | {:.2}x |",
        text_mib / grpc_text.as_secs_f64(),
        text_mib / jsonl_text.as_secs_f64(),
        grpc_text.as_secs_f64() / jsonl_text.as_secs_f64()
    );
}

/// A host HTTP server on loopback answering every request with `size`
/// bytes of zeros; returns its port.
fn zeros_server(size: u64) -> u16 {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut head = [0u8; 4096];
                let _ = conn.read(&mut head);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
                );
                let chunk = vec![0u8; 1 << 20];
                let mut left = size;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if conn.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    port
}

/// `make bench`'s egress rows: a box whose only way out is boxd's proxy
/// against bubblewrap sharing the host network, same busybox `wget`.
fn egress(rt: &tokio::runtime::Runtime, c: &mut Client, d: &Daemon, iters: usize, bytes: u64) {
    let spec = v1::BoxSpec {
        allow_net: vec!["host.boxd.internal".into()],
        ..busybox_spec()
    };
    let info = rt.block_on(up(c, "bench-net", spec));
    let digest = info.image_digest.trim_start_matches("sha256:");
    let rootfs = d.home.join("images").join(digest).join("rootfs");
    let (small, large) = (zeros_server(5), zeros_server(bytes));
    let direct = |url: &str| {
        Command::new("bwrap")
            .args(["--unshare-user", "--uid", "0", "--gid", "0"])
            .args(["--unshare-pid", "--unshare-ipc", "--unshare-uts"])
            .arg("--bind")
            .arg(&rootfs)
            .args(["/", "--proc", "/proc", "--dev", "/dev", "--"])
            .args(["/bin/wget", "-Y", "off", "-q", "-O", "/dev/null", url])
            .env_clear()
            .status()
            .unwrap()
    };
    let proxied = |c: &mut Client, url: &str| {
        let out = rt.block_on(run(c, "bench-net", &["wget", "-q", "-O", "/dev/null", url]));
        assert_eq!(out.exit.code, Some(0), "{out:?}");
    };
    let via = |port: u16| format!("http://host.boxd.internal:{port}/");
    let plain = |port: u16| format!("http://127.0.0.1:{port}/");
    proxied(c, &via(small));
    assert!(direct(&plain(small)).success());
    let (mut through, mut around) = (Vec::new(), Vec::new());
    for _ in 0..iters {
        let t = Instant::now();
        proxied(c, &via(small));
        through.push(t.elapsed());
        let t = Instant::now();
        assert!(direct(&plain(small)).success());
        around.push(t.elapsed());
    }
    let (through, around) = (
        summarize("through the egress proxy", through),
        summarize("bubblewrap, host network", around),
    );
    let t = Instant::now();
    proxied(c, &via(large));
    let big_through = t.elapsed();
    let t = Instant::now();
    assert!(direct(&plain(large)).success());
    let big_around = t.elapsed();
    let mib = bytes as f64 / (1 << 20) as f64;
    println!(
        "\n## HTTP from a box: egress proxy vs host network ({iters} small GETs; one {mib:.0} MiB GET)\n"
    );
    println!("| what | bubblewrap, host network | egress proxy (boxd) | ratio |");
    println!("| --- | ---: | ---: | ---: |");
    latency_rows("small GET incl. exec,", &around, &through);
    println!(
        "| download MiB/s | {:.0} | {:.0} | {:.2}x |",
        mib / big_around.as_secs_f64(),
        mib / big_through.as_secs_f64(),
        big_around.as_secs_f64() / big_through.as_secs_f64()
    );
}

/// Two table rows, p50 and p99, of `base` against `other` (the second
/// column), with the ratio other/base.
fn latency_rows(what: &str, base: &Row, other: &Row) {
    for (p, b, o) in [("p50", base.p50, other.p50), ("p99", base.p99, other.p99)] {
        println!(
            "| {what} {p} ms | {} | {} | {:.2}x |",
            ms(b),
            ms(o),
            o.as_secs_f64() / b.as_secs_f64()
        );
    }
}
