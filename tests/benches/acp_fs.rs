//! The ACP proxy's `fs/*` calls inside a mount, served by the proxy on the
//! host beneath the mount's descriptor, against a round trip through the
//! editor (`session/request_permission`, which the proxy forwards and the
//! editor answers at once: what forwarding a file call cost, less the
//! editor's read). An agent in busybox sends N of each and a marker after
//! each phase; this program is the editor, timing the markers. Files are
//! 64 bytes: busybox's `read` takes the answer a byte at a time, which
//! would otherwise be most of what is timed.
//!
//! `cargo bench -p boxd-tests --bench acp_fs` (in `make bench`);
//! `BENCH_ACP_FS_N` sets N (500), `BENCH_PROXY` another harness-box-exec
//! (an older build, to compare).

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use boxd_tests::*;
use serde_json::{Value, json};

fn main() {
    let n: usize = std::env::var("BENCH_ACP_FS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let d = Daemon::start();
    let proj = host_dir();
    std::fs::write(proj.path().join("f.txt"), "x".repeat(63) + "\n").unwrap();
    give_to_host_user(proj.path());
    let init = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}});
    let read = json!({"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file",
        "params": {"sessionId": "s", "path": "/proj/f.txt"}});
    let write = json!({"jsonrpc": "2.0", "id": 2, "method": "fs/write_text_file",
        "params": {"sessionId": "s", "path": "/proj/g.txt", "content": "y".repeat(64)}});
    let ask = json!({"jsonrpc": "2.0", "id": 3, "method": "session/request_permission",
        "params": {"sessionId": "s", "options": [{"optionId": "a", "name": "Allow", "kind": "allow_once"}],
            "toolCall": {"toolCallId": "t"}}});
    let mark = |phase: &str| {
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s",
            "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": phase}}}})
    };
    let lp = |req: &Value| {
        format!("i=0; while [ $i -lt {n} ]; do printf '%s\\n' '{req}'; read -r a; i=$((i+1)); done")
    };
    let script = format!(
        "read -r line; printf '%s\\n' '{init}'\nprintf '%s\\n' '{m0}'\n{r}\nprintf '%s\\n' '{m1}'\n{w}\nprintf '%s\\n' '{m2}'\n{a}\nprintf '%s\\n' '{m3}'",
        m0 = mark("start"),
        r = lp(&read),
        m1 = mark("read"),
        w = lp(&write),
        m2 = mark("write"),
        a = lp(&ask),
        m3 = mark("ask"),
    );
    let mut cmd = match std::env::var_os("BENCH_PROXY") {
        Some(p) => {
            let mut c = std::process::Command::new(p);
            c.env("BOXD_SOCKET", &d.socket).env("BOXD_HOME", &d.home);
            c
        }
        None => d.acp_proxy(),
    };
    let mut child = cmd
        .args(["--box", "acpfs", "--image"])
        .arg(busybox())
        .arg("--mount")
        .arg(format!("{}:/proj", proj.path().display()))
        .args(["--quiet", "--", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}}}});
    writeln!(stdin, "{hello}").unwrap();
    let mut marks: Vec<(String, Instant)> = Vec::new();
    let mut forwarded = 0usize;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let msg: Value = serde_json::from_str(&line.unwrap()).unwrap();
        match msg["method"].as_str() {
            Some("session/update") => {
                let phase = msg["params"]["update"]["content"]["text"]
                    .as_str()
                    .unwrap_or("");
                marks.push((phase.to_owned(), Instant::now()));
            }
            // An older proxy forwards fs/* inside a mount: serve it as an
            // editor does, from disk.
            Some("fs/read_text_file") => {
                forwarded += 1;
                let text =
                    std::fs::read_to_string(msg["params"]["path"].as_str().unwrap()).unwrap();
                writeln!(
                    stdin,
                    "{}",
                    json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": text}})
                )
                .unwrap();
            }
            Some("fs/write_text_file") => {
                forwarded += 1;
                let p = &msg["params"];
                std::fs::write(p["path"].as_str().unwrap(), p["content"].as_str().unwrap())
                    .unwrap();
                writeln!(
                    stdin,
                    "{}",
                    json!({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
                )
                .unwrap();
            }
            Some("session/request_permission") => {
                writeln!(
                    stdin,
                    "{}",
                    json!({"jsonrpc": "2.0", "id": msg["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": "a"}}})
                )
                .unwrap();
            }
            _ => {}
        }
    }
    drop(stdin);
    child.wait().unwrap();
    let at = |p: &str| {
        marks
            .iter()
            .find(|(m, _)| m == p)
            .map(|(_, t)| *t)
            .expect(p)
    };
    let per = |a: &str, b: &str| (at(b) - at(a)).as_secs_f64() * 1e6 / n as f64;
    let (r, w, a) = (
        per("start", "read"),
        per("read", "write"),
        per("write", "ask"),
    );
    println!(
        "ACP fs calls inside a mount, {n} each, per call (editor served {forwarded} of them):"
    );
    println!("  fs/read_text_file 64 B    {r:8.1} µs");
    println!("  fs/write_text_file 64 B   {w:8.1} µs");
    println!("  editor round trip         {a:8.1} µs (session/request_permission)");
    println!(
        "  read / round trip {:.2}x, write / round trip {:.2}x",
        r / a,
        w / a
    );
    let _ = d.boxctl().args(["rm", "-f", "acpfs"]).status();
    std::thread::sleep(Duration::from_millis(10));
}
