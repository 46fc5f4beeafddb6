//! What the agent-in-a-box tests need besides a daemon: the Node image
//! (`scripts/node-image.sh`), the ACP client built with the official SDK and
//! the fake model server (`tests/acp/`), and the host's extra CA when the
//! registries are reached through an intercepting proxy.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The workspace root.
pub fn workspace() -> PathBuf {
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
    let dir = workspace().join("tests/acp");
    if !dir.join("node_modules/@agentclientprotocol/sdk").is_dir() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&dir)
            .status()
            .expect("run npm ci in tests/acp");
        assert!(status.success(), "npm ci in tests/acp failed");
    }
    dir
}

/// The fake OpenAI-compatible model server on a free loopback port.
pub struct FakeLlm {
    child: Child,
    pub port: u16,
}

impl FakeLlm {
    pub fn start() -> FakeLlm {
        let mut child = Command::new("node")
            .arg(acp_dir().join("fake-llm.mjs"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the fake model server (node)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the fake model server's port");
        let port = line
            .strip_prefix("listening ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from fake-llm.mjs: {line:?}"));
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
