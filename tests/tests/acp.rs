//! The agent stays in the box at the protocol level too: an editor-like ACP
//! client (built on the official SDK, advertising terminal and fs and
//! serving them on the host, as editors do) drives agents through
//! `harness-box-exec` in its default ACP mode, and nothing the agent asks of
//! the client runs, writes or reads outside what the box can reach.
//!
//! Agents: the project's probe agent (`tests/acp/probe-agent.mjs`, on the
//! SDK), which calls every client method and plays hostile too, and
//! Claude Code's ACP adapter (`@zed-industries/claude-code-acp` 0.16.2)
//! against a fake Anthropic Messages API on loopback. Hosts: the editor
//! client, and the official Python SDK spawning the proxy with its trimmed
//! environment and a stderr it never reads.
//!
//! Needs the Node image (root: debootstrap), node and npm, python3-venv.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use boxd_tests::agent::{FakeLlm, acp_dir, acp_python, host_ca_flags, node_image};
use boxd_tests::{Daemon, bin, give_to_host_user};
use serde_json::{Value, json};

struct Setup {
    daemon: Daemon,
    dir: tempfile::TempDir,
    image: PathBuf,
    /// A path unique to this run, for proof files in the host's /tmp.
    mark: String,
}

impl Setup {
    fn new() -> Setup {
        let image = node_image();
        acp_dir();
        let dir = tempfile::tempdir().unwrap();
        let s = Setup {
            daemon: Daemon::start(),
            mark: format!("boxd-acp-{}", std::process::id()),
            image,
            dir,
        };
        std::fs::create_dir_all(s.project().join("sub")).unwrap();
        std::fs::write(s.project().join("README"), "hello from the project\n").unwrap();
        std::fs::create_dir_all(s.outside()).unwrap();
        std::fs::write(s.secret(), "host secret, outside every mount\n").unwrap();
        give_to_host_user(&s.project());
        s
    }

    /// The project, mounted at /workspace.
    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// A host directory no mount shows, and a secret in it.
    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    fn secret(&self) -> PathBuf {
        self.outside().join("secret.txt")
    }

    /// A file in the host's /tmp that must never appear.
    fn host_tmp(&self, what: &str) -> PathBuf {
        Path::new("/tmp").join(format!("{}-{what}", self.mark))
    }

    /// The proxy's flags for box `name` (the project at /workspace, the
    /// test's ACP files at /opt/acp).
    fn proxy_args(&self, name: &str, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--box".into(),
            name.into(),
            "--image".into(),
            self.image.display().to_string(),
            "--mount".into(),
            format!("{}:/workspace", self.project().display()),
            "--mount".into(),
            format!("{}:/opt/acp:ro", acp_dir().display()),
            "--workdir".into(),
            "/workspace".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(host_ca_flags());
        a
    }

    /// The editor client driving `proxy_args -- agent…`; its JSON result.
    fn editor(&self, client: &[&str], proxy: &[String], agent: &[&str]) -> (Value, String) {
        self.editor_in(&std::env::current_dir().unwrap(), client, proxy, agent)
    }

    /// [`Setup::editor`] started in `dir` (where an editor starts its agent).
    fn editor_in(
        &self,
        dir: &Path,
        client: &[&str],
        proxy: &[String],
        agent: &[&str],
    ) -> (Value, String) {
        let out = Command::new("node")
            .current_dir(dir)
            .arg(acp_dir().join("editor-client.mjs"))
            .args(client)
            .arg("--")
            .arg(bin("harness-box-exec"))
            .args(proxy)
            .arg("--")
            .args(agent)
            .env("BOXD_SOCKET", &self.daemon.socket)
            .env("BOXD_HOME", &self.daemon.home)
            .stdin(Stdio::null())
            .output()
            .expect("run editor-client.mjs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("editor-client.mjs printed no result ({e}); stderr:\n{stderr}")
        });
        (result, stderr)
    }

    /// The probe agent playing `steps`, with the project's host path as the
    /// session's working directory.
    fn probe(&self, steps: Value) -> (Value, Vec<Value>, String) {
        let prompt = json!({"steps": steps}).to_string();
        let cwd = self.project().display().to_string();
        let (r, stderr) = self.editor(
            &["--cwd", &cwd, "--prompt", &prompt],
            &self.proxy_args("probe", &[]),
            &["node", "/opt/acp/probe-agent.mjs"],
        );
        assert_eq!(r["stopReason"], "end_turn", "{r}\n{stderr}");
        let results = results_of(&r);
        (r, results, stderr)
    }
}

/// The `RESULTS<<[...]>>` an agent answered with.
fn results_of(r: &Value) -> Vec<Value> {
    let text = r["text"].as_str().unwrap_or_default();
    let inner = text
        .split_once("RESULTS<<")
        .and_then(|(_, rest)| rest.rsplit_once(">>"))
        .unwrap_or_else(|| panic!("no RESULTS in the agent's answer: {r}"))
        .0;
    serde_json::from_str(inner).expect("the results are JSON")
}

/// The methods the editor was asked to serve, and their paths.
fn received(r: &Value) -> Vec<(String, String)> {
    r["received"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["method"].as_str().unwrap().to_owned(),
                x["params"]["path"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn assert_no_host_terminal(r: &Value) {
    let terminals: Vec<_> = received(r)
        .into_iter()
        .filter(|(m, _)| m.starts_with("terminal/"))
        .collect();
    assert!(
        terminals.is_empty(),
        "terminal requests reached the editor: {terminals:?}"
    );
}

/// Every file request the editor got names a host path inside the project.
fn assert_files_only_in_project(r: &Value, project: &Path) {
    for (m, p) in received(r) {
        if m.starts_with("fs/") {
            assert!(
                Path::new(&p).starts_with(project),
                "{m} {p} reached the editor"
            );
        }
    }
}

fn host_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn the_box_is_the_agent_s_whole_world() {
    let s = Setup::new();
    let project = s.project();
    let secret = s.secret().display().to_string();
    let outside = s.outside().display().to_string();
    let proof = s.host_tmp("proof");
    let written = s.host_tmp("written");
    let forged = s.host_tmp("forged");
    // Something on the host's loopback that a host terminal would reach.
    let llm = FakeLlm::start();
    let fetch = format!(
        "require('http').get('http://127.0.0.1:{}/',r=>console.log('reached',r.statusCode)).on('error',e=>console.log('unreachable',e.code))",
        llm.port
    );
    let begin = Instant::now();
    let (r, results, stderr) = s.probe(json!([
        // 0: a shell command line, in the box.
        {"op": "terminal", "command": format!(
            "echo where=$(hostname) pwd=$(pwd) probe=$PROBE; echo proof > {}; cat /workspace/README", proof.display())},
        // 1: argv, a cwd, and the host's loopback.
        {"op": "terminal", "command": "node", "args": ["-e", fetch], "cwd": "/opt/acp"},
        // 2: outputByteLimit, cut at a character boundary.
        {"op": "terminal", "command": "printf", "args": ["aaaaaaaé€xyz"], "outputByteLimit": 7},
        // 3: kill.
        {"op": "terminal", "command": "sleep 100", "kill": true},
        // 4, 5: inside the mount: the proxy's, beneath the mount's descriptor.
        {"op": "write", "path": "/workspace/from-agent.txt", "content": "written by the agent\n"},
        {"op": "read", "path": "/workspace/README", "line": 1, "limit": 1},
        // 6, 7: outside every mount: the box's own files.
        {"op": "write", "path": written.display().to_string(), "content": "box only\n"},
        {"op": "local", "path": written.display().to_string()},
        // 8: a host file outside every mount: not in the box.
        {"op": "read", "path": &secret},
        // 9-12: symlinks the box plants in the mount, at host paths.
        {"op": "symlink", "target": &outside, "path": "/workspace/escape"},
        {"op": "read", "path": "/workspace/escape/secret.txt"},
        {"op": "symlink", "target": &secret, "path": "/workspace/secret-link"},
        {"op": "write", "path": "/workspace/secret-link", "content": "overwritten?\n"},
        // 13: climbing out with `..`.
        {"op": "read", "path": format!("/workspace/../..{secret}")},
        // 14: a tool call's location and diff.
        {"op": "location", "path": "/workspace/sub/a.rs"},
        // 15, 16: requests that would act on the host.
        {"op": "request", "method": "mcp/message", "params": {"sessionId": "probe-session"}},
        {"op": "request", "method": "_zed/open", "params": {"path": "/etc/passwd"}},
        // 17-20: junk, a forged answer, a forged request, a giant line.
        {"op": "raw", "line": "this is not JSON"},
        {"op": "raw", "line": "{\"jsonrpc\":\"2.0\",\"id\":987654,\"result\":{\"forged\":true}}"},
        {"op": "raw", "line": json!({"jsonrpc": "2.0", "id": "forged", "method": "fs/write_text_file",
            "params": {"sessionId": "probe-session", "path": forged.display().to_string(), "content": "x"}}).to_string()},
        {"op": "big", "bytes": 65 << 20},
        // 21: the proxy still serves after all that.
        {"op": "terminal", "command": "echo still here"},
    ]));
    let took = begin.elapsed();

    // What the agent was told.
    let caps = &r["initialize"]["_meta"]["clientCapabilities"];
    assert_eq!(caps["terminal"], true, "{caps}");
    assert_eq!(caps["auth"]["terminal"], false, "{caps}");
    assert!(caps["_meta"].get("terminal-auth").is_none(), "{caps}");
    assert_eq!(
        r["session"]["_meta"]["cwd"], "/workspace",
        "the editor's host path, mapped"
    );
    assert_eq!(r["session"]["_meta"]["cwdExists"], true);

    // 0: the command ran in the box, and left nothing on the host.
    let out0 = results[0]["result"]["output"].as_str().unwrap();
    assert!(out0.contains("pwd=/workspace probe=1"), "{out0}");
    assert!(out0.contains("hello from the project"), "{out0}");
    assert!(
        !out0.contains(&format!("where={} ", host_hostname())),
        "ran on the host: {out0}"
    );
    assert!(!proof.exists(), "a proof file appeared on the host");
    assert_eq!(results[0]["result"]["exit"]["exitCode"], 0);
    assert_eq!(
        results[0]["result"]["afterRelease"], -32602,
        "a released id answers nothing"
    );
    // 1: the box's loopback is not the host's.
    let out1 = results[1]["result"]["output"].as_str().unwrap();
    assert!(out1.contains("unreachable"), "{out1}");
    // 2: cut from the front, whole characters.
    assert_eq!(results[2]["result"]["output"], "€xyz", "{}", results[2]);
    assert_eq!(results[2]["result"]["truncated"], true);
    // 3: killed.
    assert_eq!(
        results[3]["result"]["exit"]["signal"], "SIGKILL",
        "{}",
        results[3]
    );
    // 4, 5: the proxy served them, on the host beneath the mount.
    assert_eq!(
        std::fs::read_to_string(project.join("from-agent.txt")).unwrap(),
        "written by the agent\n"
    );
    assert_eq!(results[5]["result"]["content"], "hello from the project\n");
    // 6, 7: written in the box, not on the host.
    assert!(results[6]["ok"] == true, "{}", results[6]);
    assert_eq!(results[7]["result"], "box only\n");
    assert!(
        !written.exists(),
        "a write outside the mounts landed on the host"
    );
    // 8-13: no host bytes, ever.
    for i in [8, 10, 13] {
        assert_eq!(results[i]["ok"], false, "{i}: {}", results[i]);
    }
    assert!(
        !r.to_string().contains("host secret"),
        "host bytes reached the agent: {r}"
    );
    // 12: served in the box, where the link leads nowhere that exists
    // (the host's path means nothing there): the write fails in the box.
    assert_eq!(results[12]["ok"], false, "{}", results[12]);
    assert_eq!(
        std::fs::read_to_string(s.secret()).unwrap(),
        "host secret, outside every mount\n",
        "the host file is untouched"
    );
    // 14: the editor sees host paths.
    let call = &r["toolCalls"][results[14]["result"].as_str().unwrap()];
    assert_eq!(
        call["locations"][0]["path"],
        project.join("sub/a.rs").display().to_string()
    );
    assert_eq!(
        call["content"][0]["path"],
        project.join("sub/a.rs").display().to_string()
    );
    // 15, 16: refused, naming why.
    for i in [15, 16] {
        assert_eq!(results[i]["error"]["code"], -32601, "{}", results[i]);
        assert!(
            results[i]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("does not pass")
        );
    }
    // 17-20: dropped on the way; nothing forged reached the host.
    assert!(!forged.exists(), "a forged request wrote on the host");
    assert!(stderr.contains("not JSON"), "{stderr}");
    assert!(stderr.contains("never made"), "{stderr}");
    assert!(stderr.contains("over the 64 MiB limit"), "{stderr}");
    // 21.
    assert!(
        results[21]["result"]["output"]
            .as_str()
            .unwrap()
            .contains("still here")
    );

    // The editor was never asked to run anything, nor about any file.
    assert_no_host_terminal(&r);
    assert_files_only_in_project(&r, &project);
    let asked: Vec<_> = received(&r)
        .into_iter()
        .filter(|(m, _)| m.starts_with("fs/"))
        .collect();
    assert!(
        asked.is_empty(),
        "the proxy serves files itself (beneath the mount, by descriptor): {asked:?}"
    );
    // What the editor shows for a terminal's tool call: its output.
    let shown = r["toolCalls"]["probe-0"]["content"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(shown.contains("pwd=/workspace"), "{}", r["toolCalls"]);
    eprintln!(
        "TIMING probe agent, 22 steps through the proxy: {:.2} s",
        took.as_secs_f64()
    );
}

#[test]
fn session_directories_map_or_fail_with_the_fix() {
    let s = Setup::new();
    let sub = s.project().join("sub").display().to_string();
    let extra = s.project().join("README").display().to_string();
    let (r, stderr) = s.editor(
        &["--cwd", &sub, "--additional", &extra],
        &s.proxy_args("dirs", &[]),
        &["node", "/opt/acp/probe-agent.mjs"],
    );
    assert_eq!(
        r["session"]["_meta"]["cwd"], "/workspace/sub",
        "{r}\n{stderr}"
    );
    assert_eq!(
        r["session"]["_meta"]["additionalDirectories"],
        json!(["/workspace/README"])
    );
    // A box path is taken as it is (a client that already speaks them).
    let (r, _) = s.editor(
        &["--cwd", "/workspace"],
        &s.proxy_args("dirs", &[]),
        &["node", "/opt/acp/probe-agent.mjs"],
    );
    assert_eq!(r["session"]["_meta"]["cwd"], "/workspace");
    // Outside every mount: a clear error, and the agent never sees it.
    let elsewhere = s.outside().display().to_string();
    let (r, _) = s.editor(
        &["--cwd", &elsewhere],
        &s.proxy_args("dirs", &[]),
        &["node", "/opt/acp/probe-agent.mjs"],
    );
    let e = &r["sessionError"];
    assert_eq!(e["code"], -32602, "{r}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(&elsewhere) && msg.contains(&format!("--mount {elsewhere}:{elsewhere}")),
        "{msg}"
    );
    // A reused box whose mounts differ says so, there and on stderr.
    let other = s.dir.path().join("other-project");
    std::fs::create_dir_all(&other).unwrap();
    give_to_host_user(&other);
    let mut args = s.proxy_args("dirs", &["--quiet"]);
    args[5] = format!("{}:/workspace", other.display());
    let cwd = other.display().to_string();
    let (r, stderr) = s.editor(
        &["--cwd", &cwd],
        &args,
        &["node", "/opt/acp/probe-agent.mjs"],
    );
    let msg = r["sessionError"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("already existed") && msg.contains("boxctl rm -f dirs"),
        "{r}"
    );
    assert!(
        stderr.contains("already exists without the mounts asked for"),
        "{stderr}"
    );

    // An agent that dies mid-turn: the proxy ends with its exit code, and
    // the editor hears of it (it does not wait for an answer forever).
    let cwd = s.project().display().to_string();
    let (r, stderr) = s.editor(
        &[
            "--cwd",
            &cwd,
            "--prompt",
            r#"{"steps":[{"op":"exit","code":3}]}"#,
        ],
        &s.proxy_args("dirs", &[]),
        &["node", "/opt/acp/probe-agent.mjs"],
    );
    assert_eq!(r["exit"]["code"], 3, "{r}\n{stderr}");
    assert!(r["error"].is_string(), "{r}");

    // The easy default: the editor starts the proxy in the project; the
    // project is mounted at its own path, in a box named after it.
    let proxy: Vec<String> = [
        "--mount-cwd".to_owned(),
        "--image".into(),
        s.image.display().to_string(),
        "--mount".into(),
        format!("{}:/opt/acp:ro", acp_dir().display()),
    ]
    .into_iter()
    .chain(host_ca_flags())
    .collect();
    let project = s.project().canonicalize().unwrap();
    let here = project.display().to_string();
    let (r, stderr) = s.editor_in(
        &project,
        &["--cwd", &here],
        &proxy,
        &["node", "/opt/acp/probe-agent.mjs"],
    );
    assert_eq!(r["session"]["_meta"]["cwd"], here, "{r}\n{stderr}");
    assert_eq!(r["session"]["_meta"]["cwdExists"], true);
    let ls = s.daemon.boxctl().args(["ls", "--json"]).output().unwrap();
    let ls = String::from_utf8_lossy(&ls.stdout);
    assert!(
        ls.contains("\"acp-project-"),
        "a box named after the project: {ls}"
    );
}

#[test]
fn mcp_servers_run_in_the_box_or_not_at_all() {
    let s = Setup::new();
    let llm = FakeLlm::start();
    let project = s.project().display().to_string();
    let mcp = json!([
        {"name": "in-box", "command": "node", "args": [format!("{project}/server.js")], "env": []},
        {"name": "host-only", "command": "/usr/local/bin/boxd-no-such-mcp", "args": [], "env": []},
        {"name": "loopback", "type": "http", "url": format!("http://127.0.0.1:{}/mcp", llm.port), "headers": []},
        {"name": "remote", "type": "http", "url": "https://mcp.example.com/mcp", "headers": []},
    ])
    .to_string();
    let cwd = s.project().display().to_string();
    // Without host.boxd.internal allowed, the loopback server is left out.
    let (r, stderr) = s.editor(
        &["--cwd", &cwd, "--mcp", &mcp],
        &s.proxy_args("mcp", &[]),
        &["node", "/opt/acp/probe-agent.mjs"],
    );
    let servers = &r["session"]["_meta"]["mcpServers"];
    let names: Vec<_> = servers
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["in-box", "remote"], "{r}\n{stderr}");
    assert_eq!(
        servers[0]["args"][0], "/workspace/server.js",
        "a host path in a mount, mapped"
    );
    assert!(stderr.contains("\"host-only\" left out"), "{stderr}");
    assert!(stderr.contains("\"loopback\" left out"), "{stderr}");
    // With it, the loopback server is named as the box reaches the host.
    let (r, stderr) = s.editor(
        &["--cwd", &cwd, "--mcp", &mcp],
        &s.proxy_args("mcp-net", &["--allow-net", "host.boxd.internal"]),
        &["node", "/opt/acp/probe-agent.mjs"],
    );
    let servers = &r["session"]["_meta"]["mcpServers"];
    assert_eq!(
        servers[1]["url"],
        format!("http://host.boxd.internal:{}/mcp", llm.port),
        "{r}\n{stderr}"
    );
}

#[test]
fn claude_code_runs_its_commands_and_writes_in_the_box() {
    let s = Setup::new();
    let proof = s.host_tmp("cc-proof");
    let written = s.host_tmp("cc-written");
    let secret = s.secret().display().to_string();
    let scenario = json!({"tools": [
        {"name": "mcp__acp__Bash", "input": {"command": format!(
            "echo where=$(hostname) pwd=$(pwd) > {p}; cat {p}", p = proof.display()), "timeout": 60000, "description": "where am I"}},
        {"name": "mcp__acp__Write", "input": {"file_path": written.display().to_string(), "content": "outside the mounts\n"}},
        {"name": "mcp__acp__Write", "input": {"file_path": "/workspace/from-claude.txt", "content": "inside the mount\n"}},
        {"name": "mcp__acp__Read", "input": {"file_path": secret}},
    ]});
    let llm = FakeLlm::anthropic(&scenario, s.dir.path());
    let base = format!("ANTHROPIC_BASE_URL=http://host.boxd.internal:{}", llm.port);
    let proxy = s.proxy_args(
        "claude",
        &[
            "--allow-net",
            "host.boxd.internal",
            // Claude Code refuses to skip permissions as root outside a sandbox.
            "--env",
            "IS_SANDBOX=1",
            "--env",
            &base,
            "--env",
            "ANTHROPIC_API_KEY=placeholder-not-a-key",
            "--env",
            "DISABLE_TELEMETRY=1",
            "--env",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
        ],
    );
    let cwd = s.project().display().to_string();
    let begin = Instant::now();
    let (r, stderr) = s.editor(
        &["--cwd", &cwd, "--prompt", "go"],
        &proxy,
        &[
            "node",
            "/opt/acp/node_modules/@zed-industries/claude-code-acp/dist/index.js",
        ],
    );
    let took = begin.elapsed();
    assert_eq!(r["stopReason"], "end_turn", "{r}\n{stderr}");
    assert_eq!(
        r["initialize"]["agentInfo"]["name"],
        "@zed-industries/claude-code-acp"
    );
    let results: Vec<String> = results_of(&r)
        .into_iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(results[0].contains("pwd=/workspace"), "{results:?}");
    assert!(
        !results[0].contains(&format!("where={} ", host_hostname())),
        "ran on the host: {results:?}"
    );
    assert!(!proof.exists(), "Claude Code's shell ran on the host");
    assert!(
        !written.exists(),
        "Claude Code's write outside the mounts landed on the host"
    );
    assert_eq!(
        std::fs::read_to_string(s.project().join("from-claude.txt")).unwrap(),
        "inside the mount\n"
    );
    assert!(
        !results[3].contains("host secret"),
        "a host file reached the agent: {results:?}"
    );
    assert_no_host_terminal(&r);
    assert_files_only_in_project(&r, &s.project());
    eprintln!(
        "TIMING claude-code-acp turn with 4 tool calls through the proxy: {:.2} s",
        took.as_secs_f64()
    );
}

/// The official Python SDK as the host: it passes only HOME, LOGNAME, PATH,
/// SHELL, TERM and USER (no XDG_RUNTIME_DIR, no BOXD_*), and pipes the
/// agent's stderr without ever reading it, while provisioning prints 3 MB
/// there.
#[test]
fn a_python_sdk_host_with_a_trimmed_environment_gets_its_answer() {
    let image = node_image();
    let acp = acp_dir();
    let python = acp_python();
    let d = Daemon::with_default_paths();
    let project = tempfile::tempdir().unwrap();
    give_to_host_user(project.path());
    let begin = Instant::now();
    let out = Command::new(&python)
        .arg(acp.join("python-host.py"))
        .args(["--cwd"])
        .arg(project.path())
        .arg("--")
        .arg(bin("harness-box-exec"))
        .args(["--box", "py", "--image"])
        .arg(&image)
        .arg("--mount")
        .arg(format!("{}:/opt/acp:ro", acp.display()))
        .arg("--mount")
        .arg(format!(
            "{}:{}",
            project.path().display(),
            project.path().display()
        ))
        .args([
            "--probe",
            "test -e /root/provisioned",
            "--provision",
            "head -c 3000000 /dev/zero | tr '\\0' x >&2; touch /root/provisioned",
            "--",
            "node",
            "/opt/acp/probe-agent.mjs",
        ])
        .env_clear()
        .env("HOME", d.user_home())
        .env("PATH", std::env::var("PATH").unwrap())
        .stdin(Stdio::null())
        .output()
        .expect("run python-host.py");
    let took = begin.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "no result ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(out.status.success(), "{result}");
    assert_eq!(
        result["initialize"]["agentInfo"]["name"], "boxd-probe-agent",
        "{result}"
    );
    assert_eq!(
        result["session"]["_meta"]["cwd"],
        project.path().display().to_string(),
        "mounted at the same path"
    );
    // One daemon: the proxy found the running one through the home.
    let spawned = std::fs::read_to_string(d.home.join("logs/boxd.stderr")).unwrap_or_default();
    assert!(
        !spawned.contains("already serving"),
        "a second boxd was started: {spawned}"
    );
    eprintln!(
        "TIMING Python SDK host, trimmed environment, 3 MB of unread provisioning stderr: initialize and session/new in {:.2} s",
        took.as_secs_f64()
    );
}
