//! `make bench`: an exec of `true` through each SDK against the Rust
//! client library, in one run, on one box of one daemon: the Python SDK
//! (blocking client, `sdk/python/bench/exec_true.py`), the TypeScript SDK
//! (`sdk/typescript/bench/exec-true.mjs`), and `boxd-client`'s
//! `ExecStream` (one connection, as both SDKs keep one). Not a test: it
//! asserts nothing about time. `BENCH_SDK_ITERS` sets the round trips
//! (default 300).

use std::time::Instant;

use boxd_tests::bench::env_or;
use boxd_tests::*;

fn p(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// The JSON line a bench script prints.
fn script(cmd: &mut std::process::Command) -> serde_json::Value {
    let out = cmd.output().expect("run the SDK's bench script");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON line")
}

fn main() {
    let iters: usize = env_or("BENCH_SDK_ITERS", 300);
    let python = sdk::python();
    let (ts, _lock) = sdk::typescript();
    let d = Daemon::start();
    ok(d.boxctl()
        .args(["run", "-d", "--name", "bench"])
        .arg(busybox())
        .args(["sleep", "100000"]));

    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = rt.block_on(boxd_client::connect(&d.socket)).unwrap();
    let mut lib = Vec::new();
    for i in 0..iters + 5 {
        let t = Instant::now();
        let mut s = rt
            .block_on(boxd_client::ExecStream::start(
                &mut c,
                start_req("bench", &["true"]),
            ))
            .unwrap();
        while let Some(ev) = rt.block_on(s.next()).unwrap() {
            if let boxd_client::ExecEvent::Exit(_) = ev {
                break;
            }
        }
        if i >= 5 {
            lib.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    lib.sort_by(f64::total_cmp);
    let base = p(&lib, 0.5);
    let py = script(
        std::process::Command::new(&python)
            .arg(agent::workspace().join("sdk/python/bench/exec_true.py"))
            .arg(&d.socket)
            .arg("bench")
            .arg(iters.to_string()),
    );
    let js = script(
        std::process::Command::new("node")
            .arg(ts.join("bench/exec-true.mjs"))
            .arg(&d.socket)
            .arg("bench")
            .arg(iters.to_string()),
    );
    println!("\n## exec of `true`: each SDK against the Rust client library ({iters} each)\n");
    println!("| client | p50 ms | p90 ms | p50 vs the Rust library |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| Rust `boxd-client` (`ExecStream`, one connection) | {:.2} | {:.2} | 1.00x |",
        base,
        p(&lib, 0.9)
    );
    for (name, r) in [
        ("Python SDK (`boxd.Client`, blocking, grpcio)", &py),
        ("TypeScript SDK (`@boxd/sdk`, grpc-js)", &js),
    ] {
        let p50 = r["p50_ms"].as_f64().unwrap();
        println!(
            "| {name} | {p50:.2} | {:.2} | {:.2}x |",
            r["p90_ms"].as_f64().unwrap(),
            p50 / base
        );
    }
    ok(d.boxctl().args(["rm", "-f", "bench"]));
}
