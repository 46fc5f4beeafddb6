//! What the agent-in-a-box tests need besides a daemon: the Node image
//! (`scripts/node-image.sh`), the ACP ingredients of `tests/acp/` (clients
//! and a probe agent built with the official SDKs, Claude Code's ACP
//! adapter, fake model servers, the Python SDK in a private venv), and the
//! host's extra CA when the registries are reached through an intercepting
//! proxy.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The workspace root (`BOXD_TEST_WORKSPACE`: a staged copy of what the
/// tests read from it, for a run as a user who cannot read the checkout).
pub fn workspace() -> PathBuf {
    if let Some(dir) = std::env::var_os("BOXD_TEST_WORKSPACE") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The Node OCI layout, built (about a minute, once; cached) when missing.
pub fn node_image() -> PathBuf {
    // A layout built elsewhere (by root: debootstrap needs it), for a run as
    // an ordinary user.
    if let Some(path) = std::env::var_os("BOXD_NODE_IMAGE") {
        return PathBuf::from(path);
    }
    let out = Command::new(workspace().join("scripts/node-image.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/node-image.sh");
    assert!(out.status.success(), "scripts/node-image.sh failed");
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8 path").trim())
}

/// `tests/acp/`, with its locked npm dependencies installed.
pub fn acp_dir() -> PathBuf {
    npm_dir(
        "acp",
        &[
            "@agentclientprotocol/sdk",
            "@zed-industries/claude-code-acp",
        ],
    )
}

/// `tests/NAME/`, with its locked npm dependencies installed (`npm ci`,
/// when one of `packages` is missing).
pub fn npm_dir(name: &str, packages: &[&str]) -> PathBuf {
    let dir = workspace().join("tests").join(name);
    // Tests of one binary, and test binaries run side by side, install
    // once: a second `npm ci` in the same directory removes what the
    // first is writing.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _held = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lock = std::fs::File::create(dir.join(".npm-ci.lock"))
        .unwrap_or_else(|e| panic!("create tests/{name}/.npm-ci.lock: {e}"));
    // SAFETY: flock on a descriptor this process holds; released when
    // `lock` is dropped at the end of this function.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    let installed = packages
        .iter()
        .all(|p| dir.join("node_modules").join(p).is_dir());
    if !installed {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&dir)
            .status()
            .unwrap_or_else(|e| panic!("run npm ci in tests/{name}: {e}"));
        assert!(status.success(), "npm ci in tests/{name} failed");
    }
    dir
}

/// The Python that has the official ACP SDK (`tests/acp/requirements.txt`,
/// pinned), in a venv of its own under the target directory.
pub fn acp_python() -> PathBuf {
    crate::sdk_python("acp")
}

/// A fake model server of `tests/acp/` on a free loopback port: a Node
/// script that prints `listening PORT` once it listens.
pub struct FakeLlm {
    child: Child,
    pub port: u16,
}

impl FakeLlm {
    /// The OpenAI-compatible one (`fake-llm.mjs`, for pi).
    pub fn start() -> FakeLlm {
        FakeLlm::script("fake-llm.mjs", &[])
    }

    /// The Anthropic Messages one (`fake-anthropic.mjs`, for Claude Code),
    /// playing `scenario` (its tool calls, in order).
    pub fn anthropic(scenario: &serde_json::Value, dir: &Path) -> FakeLlm {
        let file = dir.join("scenario.json");
        std::fs::write(&file, scenario.to_string()).expect("write the scenario");
        FakeLlm::script("fake-anthropic.mjs", &[file.as_os_str()])
    }

    fn script(name: &str, args: &[&std::ffi::OsStr]) -> FakeLlm {
        let mut child = Command::new("node")
            .arg(acp_dir().join(name))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a fake model server (node)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the fake model server's port");
        let port = line
            .strip_prefix("listening ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from {name}: {line:?}"));
        FakeLlm { child, port }
    }

    /// A pi agent directory (`~/.pi/agent`) whose default model is this
    /// server, as boxes name the host (`host.boxd.internal`, through their
    /// egress proxy), with a placeholder key (no real provider is reachable).
    pub fn pi_agent_dir(&self, dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        let models = serde_json::json!({"providers": {"fake": {
            "baseUrl": format!("http://host.boxd.internal:{}/v1", self.port),
            "api": "openai-completions",
            "apiKey": "placeholder-not-a-key",
            "models": [{"id": "fake-model", "name": "Fake model"}],
        }}});
        std::fs::write(dir.join("models.json"), models.to_string()).unwrap();
        let settings = serde_json::json!({"defaultProvider": "fake", "defaultModel": "fake-model"});
        std::fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the registries are reached through a TLS-intercepting proxy, the
/// host trusts its CA through `NODE_EXTRA_CA_CERTS`; the box must too, or
/// npm fails with SELF_SIGNED_CERT_IN_CHAIN. Returns the proxy flags that
/// mount that file read-only and point Node at it (none when unset).
pub fn host_ca_flags() -> Vec<String> {
    match std::env::var("NODE_EXTRA_CA_CERTS") {
        Ok(path) if Path::new(&path).is_file() => vec![
            "--mount".into(),
            format!("{path}:/etc/ssl/host-extra-ca.crt:ro"),
            "--env".into(),
            "NODE_EXTRA_CA_CERTS=/etc/ssl/host-extra-ca.crt".into(),
        ],
        _ => Vec::new(),
    }
}

/// The official MCP Python SDK's client (`tests/mcp/agent.py`) in `mode`,
/// driving `boxctl mcp` (flags to be added) against `d`'s daemon, with
/// `project` and `outside` as the host directories it names.
pub fn mcp_client(mode: &str, d: &crate::Daemon, project: &Path, outside: &Path) -> Command {
    let mut cmd = Command::new(crate::sdk_python("mcp"));
    cmd.arg(workspace().join("tests/mcp/agent.py"))
        .arg(mode)
        .arg(crate::bin("boxctl"))
        .arg(crate::busybox())
        .arg(project)
        .arg(outside)
        .env("BOXD_SOCKET", &d.socket)
        .env("BOXD_HOME", &d.home);
    cmd
}
