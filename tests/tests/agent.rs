//! An ACP agent in a box, end to end: `harness-box-exec … -- pi-acp` with the
//! Node image, pi and pi-acp installed from npm by `--provision` (never baked
//! into the image), a fake model server on loopback (no API key anywhere),
//! and two kinds of ACP host: raw JSON-RPC lines written here, and a client
//! built with the official ACP SDK that spawns the proxy as its agent.
//!
//! Needs the npm registry (for provisioning) and root (debootstrap, for the
//! image); timings are printed, never asserted.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use boxd_tests::agent::{FakeLlm, acp_dir, host_ca_flags, node_image};
use boxd_tests::{Daemon, bin, give_to_host_user};
use serde_json::{Value, json};

/// pi 1.x needs Node >= 22.19; pi-acp 0.0.34 needs pi >= 0.81.
const PROVISION: &str = "npm install -g --ignore-scripts --no-audit --no-fund \
    @earendil-works/pi-coding-agent@1.6.0 pi-acp@0.0.34";
const PROBE: &str = "command -v pi-acp && command -v pi";

struct Setup {
    daemon: Daemon,
    _llm: FakeLlm,
    dir: tempfile::TempDir,
    image: std::path::PathBuf,
}

impl Setup {
    fn project(&self) -> std::path::PathBuf {
        self.dir.path().join("project")
    }

    /// `harness-box-exec` with the flags an agent catalog would give it.
    fn proxy_args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--box".into(),
            "agent".into(),
            "--image".into(),
            self.image.display().to_string(),
            "--mount".into(),
            format!("{}:/workspace", self.project().display()),
            "--mount".into(),
            format!(
                "{}:/root/.pi/agent",
                self.dir.path().join("pi-agent").display()
            ),
            "--workdir".into(),
            "/workspace".into(),
            "--allow-net".into(),
            "registry.npmjs.org".into(),
            "--allow-net".into(),
            "host.boxd.internal".into(),
            "--env".into(),
            "PI_OFFLINE=1".into(),
            "--env".into(),
            "PI_SKIP_VERSION_CHECK=1".into(),
            "--probe".into(),
            PROBE.into(),
            "--provision".into(),
            PROVISION.into(),
        ];
        a.extend(host_ca_flags());
        a
    }

    fn proxy(&self) -> Command {
        let mut c = self.daemon.acp_proxy();
        c.args(self.proxy_args()).args(["--", "pi-acp"]);
        c
    }
}

fn setup() -> Setup {
    let image = node_image();
    let llm = FakeLlm::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("project")).unwrap();
    std::fs::write(
        dir.path().join("project/README"),
        "hello from the project\n",
    )
    .unwrap();
    llm.pi_agent_dir(&dir.path().join("pi-agent"));
    give_to_host_user(&dir.path().join("project"));
    give_to_host_user(&dir.path().join("pi-agent"));
    Setup {
        daemon: Daemon::start(),
        _llm: llm,
        dir,
        image,
    }
}

/// A proxy with piped stdio and a thread that parses every stdout line as a
/// JSON-RPC message (anything else on stdout fails the test).
struct Agent {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<Value>,
    stderr: std::thread::JoinHandle<String>,
}

impl Agent {
    fn spawn(mut cmd: Command) -> Agent {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn harness-box-exec");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let line = line.expect("stdout is UTF-8");
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("non-ACP bytes on stdout ({e}): {line:?}"));
                assert_eq!(v["jsonrpc"], "2.0", "{line}");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        Agent {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        }
    }

    fn send(&mut self, v: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// Reads messages until the response to `id`, answering the agent's own
    /// requests with "method not found" and keeping its notifications.
    fn response(&mut self, id: u64, notifications: &mut Vec<Value>) -> Value {
        loop {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .expect("an ACP message within 120 s");
            if v.get("method").is_some() && v.get("id").is_some() {
                let answer = json!({"jsonrpc": "2.0", "id": v["id"],
                    "error": {"code": -32601, "message": "not supported by this test host"}});
                self.send(answer);
            } else if v.get("method").is_some() {
                notifications.push(v);
            } else if v["id"] == id {
                return v;
            }
        }
    }

    /// Closes stdin (pi-acp exits on EOF) and returns the exit code and stderr.
    fn finish(mut self) -> (Option<i32>, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (status.code(), self.stderr.join().unwrap())
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true},
        "clientInfo": {"name": "boxd-test", "version": "0.1.0"}}})
}

/// Proof 2: `initialize` answered by pi-acp in the box; the first run
/// provisions, the second reuses the box and skips provisioning.
fn initialize_twice(s: &Setup) {
    let mut timings = Vec::new();
    for run in ["first (provisions)", "second (box reused)"] {
        let begin = Instant::now();
        let mut agent = Agent::spawn(s.proxy());
        agent.send(initialize());
        let reply = agent.response(0, &mut Vec::new());
        let took = begin.elapsed();
        let (code, stderr) = agent.finish();
        assert_eq!(code, Some(0), "{run}: {stderr}");
        assert_eq!(reply["result"]["protocolVersion"], 1, "{reply}");
        assert_eq!(reply["result"]["agentInfo"]["name"], "pi-acp", "{reply}");
        let provisioned = stderr.contains("provisioned box agent");
        assert_eq!(provisioned, run.starts_with("first"), "{run}: {stderr}");
        timings.push((run, took));
    }
    for (run, took) in timings {
        eprintln!(
            "TIMING initialize reply, {run}: {:.2} s",
            took.as_secs_f64()
        );
    }
}

/// Proof 3: a whole ACP turn over raw JSON-RPC lines, ending in `end_turn`.
fn full_turn_raw(s: &Setup) {
    let begin = Instant::now();
    let mut agent = Agent::spawn(s.proxy());
    let mut notes = Vec::new();
    agent.send(initialize());
    agent.response(0, &mut notes);
    let init_ms = begin.elapsed().as_millis();
    agent.send(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
        "params": {"cwd": "/workspace", "mcpServers": []}}));
    let session = agent.response(1, &mut notes);
    let session_id = session["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("session/new: {session}"))
        .to_owned();
    let new_ms = begin.elapsed().as_millis();
    agent.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "ping"}]}}),
    );
    let done = agent.response(2, &mut notes);
    let prompt_ms = begin.elapsed().as_millis();
    let (code, stderr) = agent.finish();
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}\n{stderr}");
    let text: String = notes
        .iter()
        .filter(|n| n["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|n| n["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(text.contains("pong from the fake model"), "{text:?}");
    assert_eq!(code, Some(0), "{stderr}");
    eprintln!(
        "TIMING raw ACP turn on a warm box: initialize {init_ms} ms, session/new {new_ms} ms, \
         session/prompt end_turn {prompt_ms} ms"
    );
}

/// Proof 3b: one agent session spans two daemon restarts: a graceful
/// one (SIGTERM, as `boxctl daemon stop && boxctl daemon start`) after
/// `initialize`, and a crash (SIGKILL) after `session/new`; the turn still
/// ends in `end_turn`, and stdout carries only ACP messages throughout.
fn turn_across_daemon_restarts(s: &mut Setup) {
    let mut agent = Agent::spawn(s.proxy());
    let mut notes = Vec::new();
    agent.send(initialize());
    agent.response(0, &mut notes);
    let begin = Instant::now();
    s.daemon.restart();
    let graceful = begin.elapsed();
    agent.send(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
        "params": {"cwd": "/workspace", "mcpServers": []}}));
    let session = agent.response(1, &mut notes);
    let session_id = session["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("session/new: {session}"))
        .to_owned();
    let begin = Instant::now();
    s.daemon.kill();
    s.daemon.restart();
    let crash = begin.elapsed();
    agent.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "ping"}]}}),
    );
    let done = agent.response(2, &mut notes);
    let (code, stderr) = agent.finish();
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}\n{stderr}");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("reattached"), "{stderr}");
    eprintln!(
        "TIMING ACP session across a daemon stop+start ({:.2} s) and a SIGKILL+start ({:.2} s): end_turn",
        graceful.as_secs_f64(),
        crash.as_secs_f64()
    );
}

/// Proof 4: an unmodified ACP host (the official SDK) spawns the proxy as
/// its agent; the model asks for a `bash` tool call, which pi runs in the
/// box, and its edit lands in the project on the host.
fn sdk_host_turn(s: &Setup) {
    let begin = Instant::now();
    let out = Command::new("node")
        .arg(acp_dir().join("editor-client.mjs"))
        .args([
            "--cwd",
            "/workspace",
            "--prompt",
            "RUN: echo written-in-the-box > /workspace/from-agent.txt; cat /workspace/README",
            "--",
        ])
        .arg(bin("harness-box-exec"))
        .args(s.proxy_args())
        .args(["--", "pi-acp"])
        .env("BOXD_SOCKET", &s.daemon.socket)
        .env("BOXD_HOME", &s.daemon.home)
        .stdin(Stdio::null())
        .output()
        .expect("run editor-client.mjs");
    let took = begin.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "editor-client.mjs: {stderr}");
    let result: Value = serde_json::from_slice(&out.stdout).expect("one JSON result");
    assert_eq!(result["stopReason"], "end_turn", "{result}\n{stderr}");
    assert_eq!(result["initialize"]["agentInfo"]["name"], "pi-acp");
    assert!(
        result["updates"]["tool_call"].as_u64() >= Some(1),
        "{result}"
    );
    assert!(
        result["text"]
            .as_str()
            .unwrap_or_default()
            .contains("The command printed: hello from the project"),
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(s.project().join("from-agent.txt")).unwrap(),
        "written-in-the-box\n",
        "the agent's edit lands in the project"
    );
    eprintln!(
        "TIMING SDK host turn with a tool call: {:.2} s ({})",
        took.as_secs_f64(),
        result["timings"]
    );
}

#[test]
fn pi_acp_runs_in_a_box_behind_harness_box_exec() {
    let mut s = setup();
    initialize_twice(&s);
    full_turn_raw(&s);
    turn_across_daemon_restarts(&mut s);
    sdk_host_turn(&s);
}
