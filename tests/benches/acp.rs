//! `make bench`: what the ACP-aware proxy adds, against the nearest direct
//! alternatives, in one run.
//!
//! - a `session/prompt` round trip (an editor-like client built on the
//!   official SDK, the project's probe agent answering at once): through
//!   `harness-box-exec` in ACP mode, through `--raw` (byte for byte, the
//!   proxy as it was), and the agent run on the host with no box;
//! - 64 MiB of terminal output: the probe agent runs `head -c 64M` in a
//!   terminal the proxy serves in the box (keeping its last 16 MiB, which
//!   `terminal/output` returns: one message of an SDK holds at most
//!   32 MiB), against the agent running the same command itself in the
//!   box (what it does when no terminal is offered), and against the
//!   editor serving that terminal on the host (an agent on the host, no
//!   box: what the proxy replaces).
//!
//! Not a test: it asserts nothing about time. `BENCH_ACP_PROMPTS` sets the
//! round trips (200), `BENCH_ACP_REPS` the 64 MiB repetitions (3).

use std::process::{Command, Stdio};

use boxd_tests::agent::{acp_dir, host_ca_flags, node_image};
use boxd_tests::bench::env_or;
use boxd_tests::{Daemon, bin, give_to_host_user};
use serde_json::{Value, json};

const BYTES: usize = 64 << 20;
/// What the terminal keeps and returns.
const KEPT: usize = 16 << 20;

/// The editor client driving `agent…`, its result.
fn editor(d: &Daemon, client: &[&str], agent: &[String]) -> Value {
    let out = Command::new("node")
        .arg(acp_dir().join("editor-client.mjs"))
        .args(client)
        .arg("--")
        .args(agent)
        .env("BOXD_SOCKET", &d.socket)
        .env("BOXD_HOME", &d.home)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run editor-client.mjs");
    let r: Value = serde_json::from_slice(&out.stdout).expect("a result");
    assert_eq!(r["stopReason"], "end_turn", "{r}");
    r
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// The probe agent's per-step answers.
fn steps(r: &Value) -> Vec<Value> {
    let text = r["text"].as_str().unwrap();
    let inner = text
        .split_once("RESULTS<<")
        .unwrap()
        .1
        .rsplit_once(">>")
        .unwrap()
        .0;
    serde_json::from_str(inner).unwrap()
}

fn main() {
    let prompts: usize = env_or("BENCH_ACP_PROMPTS", 200);
    let reps: usize = env_or("BENCH_ACP_REPS", 3);
    let image = node_image();
    let acp = acp_dir();
    let d = Daemon::start();
    let project = tempfile::tempdir().unwrap();
    give_to_host_user(project.path());
    let cwd = project.path().display().to_string();
    let proxy = |raw: bool| -> Vec<String> {
        let mut a = vec![bin("harness-box-exec").display().to_string()];
        if raw {
            a.push("--raw".into());
        }
        a.extend([
            "--box".into(),
            "bench-acp".into(),
            "--image".into(),
            image.display().to_string(),
            "--mount".into(),
            format!("{cwd}:{cwd}"),
            "--mount".into(),
            format!("{}:/opt/acp:ro", acp.display()),
            "--workdir".into(),
            cwd.clone(),
            "--quiet".into(),
        ]);
        a.extend(host_ca_flags());
        a.extend([
            "--".into(),
            "node".into(),
            "/opt/acp/probe-agent.mjs".into(),
        ]);
        a
    };
    let on_host: Vec<String> = vec![
        "node".into(),
        acp.join("probe-agent.mjs").display().to_string(),
    ];
    // Create the box and warm every path once.
    editor(
        &d,
        &["--cwd", &cwd, "--prompt", r#"{"steps":[]}"#],
        &proxy(false),
    );

    // Prompt round trips.
    let n = prompts.to_string();
    let empty = r#"{"steps":[]}"#;
    let mut rows = Vec::new();
    for (what, agent) in [
        ("harness-box-exec (ACP mode)", proxy(false)),
        ("harness-box-exec --raw", proxy(true)),
        ("the agent on the host, no box", on_host.clone()),
    ] {
        let r = editor(
            &d,
            &["--cwd", &cwd, "--prompt", empty, "--repeat", &n],
            &agent,
        );
        let ms: Vec<f64> = r["timings"]["promptsMs"]
            .as_array()
            .unwrap()
            .iter()
            .skip(5)
            .map(|v| v.as_f64().unwrap())
            .collect();
        rows.push((what, percentile(ms.clone(), 0.5), percentile(ms, 0.9)));
    }
    println!(
        "\n### ACP `session/prompt` round trip ({prompts} in one session, the first 5 left out)\n"
    );
    println!("| path | p50 ms | p90 ms | p50 ÷ raw |");
    println!("| --- | ---: | ---: | ---: |");
    let raw = rows[1].1;
    for (what, p50, p90) in &rows {
        println!("| {what} | {p50:.3} | {p90:.3} | {:.2}x |", p50 / raw);
    }

    // 64 MiB through a terminal.
    let command = format!("head -c {BYTES} /dev/zero | tr '\\0' a");
    let terminal = json!({"steps": [{"op": "terminal", "command": &command, "outputByteLimit": KEPT, "quiet": true}]}).to_string();
    let spawn = json!({"steps": [{"op": "spawn", "command": &command, "quiet": true}]}).to_string();
    let mut cases: Vec<(&str, Vec<f64>)> = Vec::new();
    for (what, agent, prompt, returned) in [
        (
            "terminal served in the box by the proxy",
            proxy(false),
            &terminal,
            KEPT,
        ),
        (
            "the agent's own child process in the box",
            proxy(false),
            &spawn,
            BYTES,
        ),
        (
            "terminal served on the host by the editor (no box)",
            on_host.clone(),
            &terminal,
            KEPT,
        ),
    ] {
        let mut times = Vec::new();
        for _ in 0..reps {
            let r = editor(&d, &["--cwd", &cwd, "--prompt", prompt], &agent);
            let s = &steps(&r)[0];
            assert_eq!(s["result"]["output"], returned, "{s}");
            times.push(s["ms"].as_f64().unwrap());
        }
        cases.push((what, times));
    }
    println!(
        "\n### 64 MiB of terminal output (`head -c 64M`; the terminals keep and return the last 16 MiB, the agent's own process reads all 64; {reps} runs)\n"
    );
    println!("| path | median ms | MiB/s | ÷ the agent's own process |");
    println!("| --- | ---: | ---: | ---: |");
    let own = percentile(cases[1].1.clone(), 0.5);
    for (what, times) in &cases {
        let med = percentile(times.clone(), 0.5);
        println!(
            "| {what} | {med:.0} | {:.0} | {:.2}x |",
            64.0 / (med / 1000.0),
            med / own
        );
    }
    // Boxes outlive their daemon: remove ours before it stops.
    let _ = d.boxctl().args(["rm", "-f", "bench-acp"]).status();
}
