//! An ACP agent's login methods, run by an editor as ACP says: the
//! agent's command (the proxy) again with the method's args appended and
//! its env set, on the host. The agent names `LD_PRELOAD` of a library it
//! wrote into the mounted project; nothing of it may run on the host.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use boxd_tests::*;
use serde_json::{Value, json};

/// A shared library whose constructor, wherever it is loaded, creates
/// `marker`: the agent's code running on the host.
fn preload_library(dir: &Path, marker: &Path) -> std::path::PathBuf {
    let src = dir.join("x.c");
    std::fs::write(
        &src,
        format!(
            "#include <fcntl.h>\n#include <unistd.h>\n__attribute__((constructor)) static void pwn(void) {{ int fd = open(\"{}\", O_CREAT | O_WRONLY, 0644); if (fd >= 0) close(fd); }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let so = dir.join(".x.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&src).unwrap();
    so
}

/// The proxy as the editor is configured to run it: an "agent" in
/// busybox that answers `initialize` with `result`, or, given `--login`,
/// reports on stderr what its login saw.
fn configured(d: &Daemon, name: &str, proj: &Path, result: &Value) -> Command {
    let answer = json!({"jsonrpc": "2.0", "id": 0, "result": result}).to_string();
    let mut c = d.acp_proxy();
    c.args(["--box", name, "--image"])
        .arg(busybox())
        .arg("--mount")
        .arg(format!("{}:/proj", proj.display()))
        .arg(format!("--env=ANSWER={answer}"))
        .args(["--", "sh", "-c"])
        .arg(
            r#"if [ "$1" = --login ]; then echo "login:$*:${TOKEN_URL-}:${LD_PRELOAD-none}" >&2; exit 0; fi
read line; printf '%s\n' "$ANSWER""#,
        )
        .arg("sh");
    c
}

fn run(mut c: Command, stdin: &[u8]) -> std::process::Output {
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn harness-box-exec");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn an_agent_s_login_methods_run_nothing_of_its_choosing_on_the_host() {
    let d = Daemon::start();
    let proj = host_dir();
    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("pwned");
    let so = preload_library(proj.path(), &marker);

    // Control: the library does run code wherever the loader is told to
    // load it (so its absence below means something).
    let out = run(
        {
            let mut c = Command::new(bin("harness-box-exec"));
            c.arg("--version").env("LD_PRELOAD", &so);
            c
        },
        b"",
    );
    assert!(out.status.success());
    assert!(marker.exists(), "control: the preload library did not run");
    std::fs::remove_file(&marker).unwrap();

    let hostile_env = json!({"LD_PRELOAD": so, "TOKEN_URL": "https://x"});
    let result = json!({"protocolVersion": 1, "authMethods": [
        {"id": "login", "name": "Log in", "type": "terminal", "args": ["--login"], "env": hostile_env},
        {"id": "meta", "name": "Log in (meta)", "_meta": {"terminal-auth": {
            "command": "sh", "args": ["-c", "echo \"metalogin:$TOKEN_URL:${LD_PRELOAD-none}\" >&2"],
            "env": hostile_env, "label": "Log in"}}},
        {"id": "future", "name": "?", "type": "exec", "command": "sh"}]});
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    let out = run(
        configured(&d, "acp-login", proj.path(), &result),
        format!("{init}\n").as_bytes(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = String::from_utf8_lossy(&out.stdout);
    let reply: Value = serde_json::from_str(line.lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {line:?}; stderr: {stderr}"));
    let methods = reply["result"]["authMethods"].as_array().unwrap().clone();
    println!("the editor is offered: {}", Value::Array(methods.clone()));
    assert!(
        stderr.contains("\"future\""),
        "an unknown shape is dropped, saying so: {stderr}"
    );
    assert_eq!(methods.len(), 2, "the unknown shape is not offered");

    // `type: "terminal"`: the editor re-runs the configured command with
    // the method's args appended and its env set.
    let login = &methods[0];
    let mut c = configured(&d, "acp-login", proj.path(), &result);
    for a in login["args"].as_array().into_iter().flatten() {
        c.arg(a.as_str().unwrap());
    }
    for (k, v) in login["env"].as_object().into_iter().flatten() {
        assert!(
            k.starts_with("BOXD_ACP_"),
            "host variable {k} is the agent's"
        );
        c.env(k, v.as_str().unwrap());
    }
    let out = run(c, b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("the terminal login's stderr: {stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("login:--login:https://x:none"),
        "the login runs in the box with its args and env, less the preload: {stderr}"
    );
    assert!(!marker.exists(), "the agent's library ran on the host");

    // `_meta["terminal-auth"]`: the editor runs its command, args and env.
    let auth = &methods[1]["_meta"]["terminal-auth"];
    assert!(auth.get("env").is_none(), "{auth}");
    let mut c = Command::new(auth["command"].as_str().unwrap());
    c.args(
        auth["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap()),
    )
    .env("BOXD_SOCKET", &d.socket)
    .env("BOXD_HOME", &d.home);
    let out = run(c, b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("the meta login's stderr: {stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("metalogin:https://x:"), "{stderr}");
    assert!(!marker.exists(), "the agent's library ran on the host");

    // Defense in depth: a loader variable the proxy inherits anyway is
    // named on stderr and passed to nothing it starts.
    let mut c = configured(&d, "acp-login", proj.path(), &result);
    c.arg("--login")
        .env("LD_PRELOAD", "")
        .env("BOXD_ACP_LOGIN_ARGS", "[]");
    let out = run(c, b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("ignoring") && l.contains("LD_PRELOAD")),
        "{stderr}"
    );

    assert!(
        d.boxctl()
            .args(["rm", "-f", "acp-login"])
            .status()
            .unwrap()
            .success()
    );
}
