//! Load: many execs at once, many connections at once, a long run of
//! sequential execs with the daemon's descriptors and memory sampled, and a
//! client that never reads. Timings are printed (`make faults` shows them),
//! never asserted; resource bounds are.

use std::time::{Duration, Instant};

use boxd_tests::*;

/// Open descriptors and resident memory (KiB) of a process.
fn usage(pid: u32) -> (usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    (fds, rss)
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn execs_256_at_once_across_16_boxes() {
    let d = Daemon::start();
    let mut c = d.client().await;
    for b in 0..16 {
        up(&mut c, &format!("load-{b}"), busybox_spec()).await;
    }
    let begin = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..256 {
        let socket = d.socket.clone();
        tasks.push(tokio::spawn(async move {
            // 16 execs share each connection, as clients do.
            let mut c = boxd_client::connect(&socket).await.unwrap();
            let script = format!(
                "i=0; while [ $i -lt 200 ]; do echo exec-{i}-line-$i; i=$((i+1)); done; exit {}",
                i % 7
            );
            let out = run(&mut c, &format!("load-{}", i % 16), &["sh", "-c", &script]).await;
            (i, out)
        }));
    }
    for t in tasks {
        let (i, out) = t.await.unwrap();
        assert_eq!(out.exit.code, Some(i % 7), "exec {i}: {:?}", out.exit);
        let lines: Vec<String> = out.stdout_str().lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), 200, "exec {i}");
        for (n, l) in lines.iter().enumerate() {
            assert_eq!(l, &format!("exec-{i}-line-{n}"));
        }
    }
    println!(
        "256 concurrent execs across 16 boxes, 200 lines each, all output exact: {:?}",
        begin.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_connections_held_at_once() {
    raise_fd_limit();
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "held", busybox_spec()).await;
    let (fds0, rss0) = usage(d.pid());
    let begin = Instant::now();
    let mut held = Vec::new();
    for _ in 0..1000 {
        // `connect` makes the connection and calls Describe on it.
        held.push(boxd_client::connect(&d.socket).await.expect("connect"));
    }
    let connected = begin.elapsed();
    let (fds1, rss1) = usage(d.pid());
    assert!(
        fds1 >= fds0 + 1000,
        "one descriptor per connection: {fds0} -> {fds1}"
    );
    // Every held connection still works, and so does a new one.
    for c in held.iter_mut().step_by(50) {
        assert_eq!(sh(c, "held", "echo ok").await, "ok\n");
    }
    let mut fresh = d.client().await;
    assert_eq!(sh(&mut fresh, "held", "echo fresh").await, "fresh\n");
    drop(held);
    let released = Instant::now();
    loop {
        let (fds, _) = usage(d.pid());
        if fds <= fds0 + 2 {
            break;
        }
        assert!(
            released.elapsed() < Duration::from_secs(20),
            "descriptors not released: {fds} (was {fds0})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "1000 connections opened in {connected:?}; daemon fds {fds0} -> {fds1} -> back to baseline in {:?}; RSS {} -> {} MiB",
        released.elapsed(),
        rss0 / 1024,
        rss1 / 1024
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_sequential_execs_leak_nothing() {
    let total: usize = std::env::var("LOAD_EXECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "seq", busybox_spec()).await;
    // Warm up (first execs allocate the runtime's pools), then sample.
    for _ in 0..100 {
        run(&mut c, "seq", &["true"]).await;
    }
    let (fds0, rss0) = usage(d.pid());
    let mut samples = Vec::new();
    let begin = Instant::now();
    for i in 1..=total {
        let out = run(&mut c, "seq", &["true"]).await;
        assert_eq!(out.exit.code, Some(0), "exec {i}: {out:?}");
        if i % 500 == 0 {
            samples.push((i, usage(d.pid())));
        }
    }
    let took = begin.elapsed();
    // The bounds: no descriptor survives its exec, and memory stops
    // growing once the allocator has warmed up (16 MiB of slack over the
    // sample after the first 1,000).
    let rss_1000 = samples
        .iter()
        .find(|(i, _)| *i == 1000.min(total))
        .map(|s| s.1.1)
        .unwrap_or(rss0);
    for (i, (fds, rss)) in &samples {
        assert!(
            *fds <= fds0 + 2,
            "after {i} execs: {fds} fds (baseline {fds0})"
        );
        assert!(
            *rss <= rss_1000.max(rss0) + 16 * 1024,
            "after {i} execs: RSS {rss} KiB (baseline {rss0}, at 1000: {rss_1000})"
        );
    }
    let max_rss = samples.iter().map(|s| s.1.1).max().unwrap_or(rss0);
    let max_fds = samples.iter().map(|s| s.1.0).max().unwrap_or(fds0);
    println!(
        "{total} sequential execs in {took:?} ({:.2} ms each); fds baseline {fds0}, max {max_fds}; RSS baseline {} KiB, at 1000 {} KiB, max {} KiB, last {} KiB",
        took.as_secs_f64() * 1000.0 / total as f64,
        rss0,
        rss_1000,
        max_rss,
        samples.last().map(|s| s.1.1).unwrap_or(rss0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_costs_bounded_memory_and_slows_no_one() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "flood", busybox_spec()).await;
    up(&mut c, "other", busybox_spec()).await;
    let mut other = d.client().await;
    let time_execs = |n: usize| {
        let socket = d.socket.clone();
        async move {
            let mut c = boxd_client::connect(&socket).await.unwrap();
            let mut times = Vec::new();
            for _ in 0..n {
                let t = Instant::now();
                let out = run(&mut c, "other", &["echo", "hi"]).await;
                assert_eq!(out.stdout_str(), "hi\n");
                times.push(t.elapsed());
            }
            times.sort();
            times[times.len() / 2]
        }
    };
    let before = time_execs(50).await;
    let (_, rss0) = usage(d.pid());

    // Four streams of endless output nobody reads, on a connection of
    // their own.
    let mut stalled = d.client().await;
    let mut floods = Vec::new();
    for _ in 0..4 {
        floods.push(
            ExecStream::start(&mut stalled, start_req("flood", &["cat", "/dev/zero"]))
                .await
                .unwrap(),
        );
    }
    let mut peak = rss0;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(usage(d.pid()).1);
    }
    let during = time_execs(50).await;
    for _ in 0..10 {
        peak = peak.max(usage(d.pid()).1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The producers are held back, not buffered: windows of 4 MiB per
    // stream and 16 MiB per connection, plus small queues.
    let grew = peak.saturating_sub(rss0);
    assert!(
        grew < 64 * 1024,
        "RSS grew {grew} KiB with four unread floods"
    );
    // The commands are blocked on a full pipe, not spinning.
    let state = sh(&mut other, "other", "echo ok").await;
    assert_eq!(state, "ok\n");
    println!(
        "4 unread floods for 4 s: daemon RSS {} -> peak {} KiB (+{grew} KiB); other clients' exec p50 {before:?} before, {during:?} during ({:.2}x)",
        rss0,
        peak,
        during.as_secs_f64() / before.as_secs_f64()
    );
    drop(floods);
}

/// The SHA-256 of a host file, by `sha256sum` (fast at any build profile).
fn sha256_file(path: &std::path::Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)[..64].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn large_cp_both_ways_byte_exact_with_flat_daemon_memory() {
    // 1 GiB where the disk has room for two copies of it and a margin (the
    // source is removed once it is in, so at most two exist at a time);
    // less on a small disk, never under 64 MiB: the point is that boxd
    // streams, which any size well past its buffers shows.
    let host = tempfile::tempdir().unwrap();
    let free = boxd_tests::free_bytes(host.path());
    let size: u64 = ((free / 4) & !((1 << 20) - 1)).min(1 << 30);
    if size < 64 << 20 {
        println!("SKIPPED: {} MiB free on the test disk", free >> 20);
        return;
    }
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "big", busybox_spec()).await;
    let src = host.path().join("big");
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("head -c {size} /dev/urandom > '{}'", src.display()))
        .status()
        .unwrap();
    assert!(made.success());
    let want = sha256_file(&src);

    // boxd's resident memory, sampled while the copies run.
    let pid = d.pid();
    let rss0 = usage(pid).1;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(usage(pid).1);
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        })
    };
    let t = Instant::now();
    let out = d
        .boxctl()
        .arg("cp")
        .arg(&src)
        .arg("big:/tmp/big")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let took_in = t.elapsed();
    let inside = sh(&mut c, "big", "sha256sum /tmp/big").await;
    assert_eq!(&inside[..64], want, "copied in byte-exact");
    std::fs::remove_file(&src).unwrap();
    let back = host.path().join("back");
    let t = Instant::now();
    let out = d
        .boxctl()
        .args(["cp", "big:/tmp/big"])
        .arg(&back)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let took_out = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let peak = sampler.join().unwrap();
    assert_eq!(std::fs::metadata(&back).unwrap().len(), size);
    assert_eq!(sha256_file(&back), want, "copied out byte-exact");
    let grew = peak.saturating_sub(rss0);
    assert!(
        grew < 64 * 1024,
        "boxd's RSS grew {grew} KiB copying {} MiB ({rss0} -> {peak} KiB)",
        size >> 20
    );
    let mbs = |d: Duration| size as f64 / d.as_secs_f64() / 1e6;
    println!(
        "{} MiB cp: in {took_in:?} ({:.0} MB/s), out {took_out:?} ({:.0} MB/s); boxd RSS {rss0} -> peak {peak} KiB (+{grew} KiB)",
        size >> 20,
        mbs(took_in),
        mbs(took_out)
    );
}
