//! `make bench`: an MCP `exec` of `true` (the official Python SDK's
//! `call_tool` through `boxctl mcp`, one session) against `boxctl exec BOX
//! true` (a new process each time, the command line's cost) and the client
//! library's exec (one connection), in one run. Not a test: it asserts
//! nothing about time. `BENCH_MCP_ITERS` sets the round trips (default 200).

use std::time::Instant;

use boxd_tests::bench::{env_or, timed};
use boxd_tests::*;

fn p(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn row(what: &str, mut ms: Vec<f64>, base: f64) -> String {
    ms.sort_by(f64::total_cmp);
    format!(
        "| {what} | {:.2} | {:.2} | {:.2}x |",
        p(&ms, 0.5),
        p(&ms, 0.9),
        p(&ms, 0.5) / base
    )
}

fn main() {
    let iters: usize = env_or("BENCH_MCP_ITERS", 200);
    let d = Daemon::start();
    ok(d.boxctl()
        .args(["run", "-d", "--name", "cli"])
        .arg(busybox())
        .args(["sleep", "100000"]));
    let mut cli = Vec::new();
    for _ in 0..iters {
        cli.push(
            timed(d.boxctl().args(["exec", "cli", "true"]))
                .0
                .as_secs_f64()
                * 1000.0,
        );
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = rt.block_on(boxd_client::connect(&d.socket)).unwrap();
    let mut lib = Vec::new();
    for _ in 0..iters {
        let t = Instant::now();
        let mut s = rt
            .block_on(boxd_client::ExecStream::start(
                &mut c,
                start_req("cli", &["true"]),
            ))
            .unwrap();
        while let Some(ev) = rt.block_on(s.next()).unwrap() {
            if let boxd_client::ExecEvent::Exit(_) = ev {
                break;
            }
        }
        lib.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let out = agent::mcp_client(
        &format!("bench:{iters}"),
        &d,
        std::path::Path::new("/nonexistent"),
        std::path::Path::new("/nonexistent"),
    )
    .output()
    .expect("run the MCP SDK client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mcp: Vec<f64> = report["ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let mut sorted = cli.clone();
    sorted.sort_by(f64::total_cmp);
    let base = p(&sorted, 0.5);
    println!("\n## exec of `true`: MCP against boxctl and the client library ({iters} each)\n");
    println!("| path | p50 ms | p90 ms | p50 vs `boxctl exec` |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "{}",
        row(
            "`boxctl exec BOX true` (new process and connection)",
            cli,
            base
        )
    );
    println!("{}", row("client library (one connection)", lib, base));
    println!(
        "{}",
        row(
            "MCP `exec` tool (official Python SDK, one session, through `boxctl mcp`)",
            mcp,
            base
        )
    );
    ok(d.boxctl().args(["rm", "-f", "cli"]));
}
