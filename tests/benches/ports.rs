//! Published ports: HTTP from the host to busybox `httpd` in a box through
//! `--publish` (the box's supervisor accepts, the zygote connects inside
//! the box, bytes are relayed), against the same busybox `httpd` (the
//! host's, which the test image is built from) serving the same files (the
//! box's own layer) on the host's loopback directly. Small GETs (connect, request,
//! reply, close: p50, p99) and one large download.
//!
//! Not a test: it asserts nothing about time. `BENCH_ITERS` sets the number
//! of small GETs (default 200), `BENCH_BYTES` the download (default 256 MiB).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use boxd_tests::bench::env_or;
use boxd_tests::*;

/// One HTTP/1.0 GET; the bytes read (head and body).
fn get(addr: SocketAddr, path: &str) -> std::io::Result<usize> {
    let mut s = TcpStream::connect(addr)?;
    write!(s, "GET {path} HTTP/1.0\r\n\r\n")?;
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0;
    loop {
        match s.read(&mut buf)? {
            0 => return Ok(n),
            k => n += k,
        }
    }
}

fn wait_for(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(get(addr, "/small"), Ok(n) if n > 0) {
        assert!(Instant::now() < deadline, "no server at {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.99))
}

/// p50/p99 of `iters` small GETs and the download's MiB/s.
fn measure(addr: SocketAddr, iters: usize, bytes: u64) -> (f64, f64, f64) {
    wait_for(addr);
    let samples = (0..iters)
        .map(|_| {
            let t = Instant::now();
            get(addr, "/small").unwrap();
            t.elapsed()
        })
        .collect();
    let (p50, p99) = percentiles(samples);
    let t = Instant::now();
    let n = get(addr, "/big").unwrap();
    assert!(n as u64 >= bytes, "short download: {n}");
    let mib = bytes as f64 / (1 << 20) as f64;
    (p50, p99, mib / t.elapsed().as_secs_f64())
}

fn main() {
    let iters: usize = env_or("BENCH_ITERS", 200);
    let bytes: u64 = env_or("BENCH_BYTES", 256 << 20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let d = Daemon::start();
    let mut c = rt.block_on(d.client());
    let spec = v1::BoxSpec {
        ports: vec![v1::PortMapping {
            box_port: 8000,
            ..Default::default()
        }],
        ..busybox_spec()
    };
    let info = rt.block_on(up(&mut c, "bench-ports", spec));
    let p = &info.ports[0];
    let boxed: SocketAddr = format!("{}:{}", p.host_ip, p.host_port).parse().unwrap();
    let make = format!(
        "mkdir -p /www && echo hello > /www/small && dd if=/dev/zero of=/www/big bs=1M count={} 2>/dev/null",
        bytes >> 20
    );
    rt.block_on(sh(&mut c, "bench-ports", &make));
    let mut req = start_req("bench-ports", &["httpd", "-f", "-p", "8000", "-h", "/www"]);
    req.detach = true;
    drop(rt.block_on(ExecStream::start(&mut c, req)).unwrap());

    // The same busybox httpd on the same files (the box's own layer), on
    // the host's loopback.
    let www = d
        .home
        .join("boxes")
        .join(&info.id)
        .join("upper")
        .join("www");
    assert!(www.join("big").is_file(), "{}", www.display());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut host = Command::new("busybox")
        .args(["httpd", "-f", "-p"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-h")
        .arg(&www)
        .env_clear()
        .spawn()
        .unwrap();
    let direct: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let (d50, d99, dtp) = measure(direct, iters, bytes);
    let (b50, b99, btp) = measure(boxed, iters, bytes);
    let _ = host.kill();
    let _ = host.wait();
    let mib = bytes as f64 / (1 << 20) as f64;
    println!(
        "\n## HTTP into a box: published port vs the host's loopback ({iters} small GETs; one {mib:.0} MiB GET)\n"
    );
    println!("| what | httpd on the host | published port (boxd) | ratio |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| small GET p50 ms | {d50:.2} | {b50:.2} | {:.2}x |",
        b50 / d50
    );
    println!(
        "| small GET p99 ms | {d99:.2} | {b99:.2} | {:.2}x |",
        b99 / d99
    );
    println!(
        "| download MiB/s | {dtp:.0} | {btp:.0} | {:.2}x |",
        btp / dtp
    );
}
