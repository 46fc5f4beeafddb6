//! HTTPS to a secret's host through the proxy (TLS terminated with the
//! box's CA, the request rewritten, the answer redacted, TLS again to the
//! upstream), against the same client talking TLS to the same upstream
//! directly, and through a blind `CONNECT` tunnel (a host no secret names).
//! Everything runs in this one process on loopback: the client, the proxy,
//! and a hyper + rustls upstream (`tests/support`).
//!
//! Measured: small GETs on one kept-alive connection (HTTP/1.1 and HTTP/2,
//! p50/p99), a new connection per GET (connect, `CONNECT`, handshakes),
//! the first server-sent event of a stream, and large downloads (the median of three)
//! (MiB/s, and this process's CPU seconds per GiB: the client's and the
//! upstream's in every column, the proxy's besides in the other two).
//!
//! Not a test: it asserts nothing about time. `BENCH_QUICK=1` runs a few
//! of each; `BENCH_ITERS` sets the kept-alive GETs (default 2000),
//! `BENCH_BYTES` the download (default 256 MiB).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use support::*;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy)]
enum Route {
    Direct,
    Tunnel,
    Intercepted,
}

const ROUTES: [Route; 3] = [Route::Direct, Route::Tunnel, Route::Intercepted];

/// One client connection, HTTP/1.1 or HTTP/2 as ALPN chose.
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

struct Setup {
    up: Upstream,
    proxy: Running,
}

impl Setup {
    async fn open(&self, route: Route, h2: bool) -> Sender {
        let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[b"http/1.1"] };
        let port = self.up.port;
        let stream = match route {
            Route::Direct => {
                let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                tls(tcp, &self.up.root, HOST, alpn).await
            }
            Route::Tunnel => {
                let tcp = connect(self.proxy.addr, &format!("127.0.0.1:{port}")).await;
                tls(tcp, &self.up.root, HOST, alpn).await
            }
            Route::Intercepted => {
                let tcp = connect(self.proxy.addr, &format!("{HOST}:{port}")).await;
                tls(tcp, &self.proxy.ca, HOST, alpn).await
            }
        }
        .unwrap();
        tcp_nodelay(&stream);
        let io = TokioIo::new(stream);
        if h2 {
            let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            Sender::H2(send)
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Sender::H1(send)
        }
    }
}

fn tcp_nodelay(stream: &tokio_rustls::client::TlsStream<TcpStream>) {
    let _ = stream.get_ref().0.set_nodelay(true);
}

impl Sender {
    async fn send(&mut self, path: &str) -> Response<Incoming> {
        let req = Request::builder().header("authorization", format!("Bearer {TOKEN}"));
        match self {
            Sender::H1(s) => {
                s.ready().await.unwrap();
                let req = req
                    .uri(path)
                    .header("host", HOST)
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                s.send_request(req).await.unwrap()
            }
            Sender::H2(s) => {
                let req = req
                    .uri(format!("https://{HOST}{path}"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                s.send_request(req).await.unwrap()
            }
        }
    }

    /// A whole GET: its body's length.
    async fn get(&mut self, path: &str) -> usize {
        let response = self.send(path).await;
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut n = 0;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                n += data.len();
            }
        }
        n
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// p50 and p99, in ms.
fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |p: f64| ms(v[((v.len() as f64 - 1.0) * p).round() as usize]);
    (at(0.5), at(0.99))
}

/// This process's user + system CPU time.
fn cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()), 0);
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

async fn kept_alive(s: &Setup, route: Route, h2: bool, iters: usize) -> (f64, f64) {
    let mut conn = s.open(route, h2).await;
    for _ in 0..iters / 10 {
        conn.get("/echo").await;
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        conn.get("/echo").await;
        samples.push(t.elapsed());
    }
    percentiles(samples)
}

async fn new_connections(s: &Setup, route: Route, iters: usize) -> (f64, f64) {
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        s.open(route, false).await.get("/echo").await;
        samples.push(t.elapsed());
    }
    percentiles(samples)
}

/// From sending the request to the first event of `/sse` (HTTP/2, kept
/// alive; the stream is reset after its first event).
async fn first_event(s: &Setup, route: Route, iters: usize) -> (f64, f64) {
    let mut conn = s.open(route, true).await;
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        let mut body = conn.send("/sse").await.into_body();
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "data: one\n\n");
        samples.push(t.elapsed());
    }
    percentiles(samples)
}

/// MiB/s and CPU seconds per GiB of one download of `bytes`.
async fn download(s: &Setup, route: Route, h2: bool, bytes: usize) -> (f64, f64) {
    let mut conn = s.open(route, h2).await;
    let (t, c) = (Instant::now(), cpu());
    let n = conn.get(&format!("/bytes/{bytes}")).await;
    let (took, used) = (t.elapsed(), cpu() - c);
    assert_eq!(n, bytes);
    let gib = bytes as f64 / (1u64 << 30) as f64;
    (gib * 1024.0 / took.as_secs_f64(), used.as_secs_f64() / gib)
}

/// Downloads per route and protocol, interleaved.
const ROUNDS: usize = 3;

fn row(what: &str, v: [f64; 3], digits: usize) {
    println!(
        "| {what} | {:.digits$} | {:.digits$} | {:.digits$} | {:.2}x | {:.2}x |",
        v[0],
        v[1],
        v[2],
        v[1] / v[0],
        v[2] / v[0],
    );
}

fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let iters: usize = env_or("BENCH_ITERS", if quick { 200 } else { 2000 });
    let bytes: usize = env_or("BENCH_BYTES", if quick { 32 << 20 } else { 256 << 20 });
    let (conns, events) = if quick { (30, 10) } else { (300, 100) };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let up = upstream().await;
        let proxy = proxy(&up.root, &[HOST, "127.0.0.1"]).await;
        let s = Setup { up, proxy };
        println!(
            "\n## HTTPS to a secret's host: direct, blind tunnel, intercepted ({iters} kept-alive GETs, {conns} new connections, {events} first events, median of {ROUNDS} downloads of {} MiB)\n",
            bytes >> 20
        );
        println!("| what | direct | blind tunnel | intercepted | tunnel/direct | intercepted/direct |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: |");
        for (h2, name) in [(false, "HTTP/1.1"), (true, "HTTP/2")] {
            let mut p50 = [0.0; 3];
            let mut p99 = [0.0; 3];
            for (i, route) in ROUTES.into_iter().enumerate() {
                (p50[i], p99[i]) = kept_alive(&s, route, h2, iters).await;
            }
            row(&format!("kept-alive GET, {name}, p50 ms"), p50, 3);
            row(&format!("kept-alive GET, {name}, p99 ms"), p99, 3);
        }
        let mut p50 = [0.0; 3];
        let mut p99 = [0.0; 3];
        for (i, route) in ROUTES.into_iter().enumerate() {
            (p50[i], p99[i]) = new_connections(&s, route, conns).await;
        }
        row("new connection + GET, p50 ms", p50, 2);
        row("new connection + GET, p99 ms", p99, 2);
        for (i, route) in ROUTES.into_iter().enumerate() {
            (p50[i], p99[i]) = first_event(&s, route, events).await;
        }
        row("first SSE event, p50 ms", p50, 3);
        row("first SSE event, p99 ms", p99, 3);
        for (h2, name) in [(false, "HTTP/1.1"), (true, "HTTP/2")] {
            // Rounds of the three routes in turn, the median of each: one
            // download alone swings with what else the 2 cores do.
            let mut runs: [Vec<(f64, f64)>; 3] = Default::default();
            for _ in 0..ROUNDS {
                for (i, route) in ROUTES.into_iter().enumerate() {
                    runs[i].push(download(&s, route, h2, bytes).await);
                }
            }
            let mut rate = [0.0; 3];
            let mut cost = [0.0; 3];
            for (i, mut run) in runs.into_iter().enumerate() {
                run.sort_by(|a, b| a.0.total_cmp(&b.0));
                (rate[i], cost[i]) = run[run.len() / 2];
            }
            row(&format!("download, {name}, MiB/s"), rate, 0);
            row(&format!("download, {name}, CPU s/GiB"), cost, 2);
        }
        println!(
            "\nupstream requests seen: {}",
            s.up.seen.lock().unwrap().len()
        );
    });
}
