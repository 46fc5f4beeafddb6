//! Any messages, either way, through the ACP proxy's relay: it never
//! panics, and nothing it sends the client asks the client to run anything
//! or to touch a file outside the mount.
//!
//! The input is a sequence of messages. A message whose first byte has its
//! top bit clear is raw bytes (a line as a hostile agent or a confused
//! client writes it); otherwise the bytes pick a message from a grammar
//! of ACP methods, hostile paths (symlinks the "box" planted in the mount,
//! `..`, the mount's root, host paths), ids of every kind and content with
//! terminals, diffs and URIs. The low bit of the first byte says which side
//! sent it.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use boxd_client::jsonl::lines::Line;
use harness_box_exec::acp::mounts::{Mount, Mounts};
use harness_box_exec::acp::relay::{Out, Relay};
use harness_box_exec::acp::rewrite::Relaunch;
use harness_box_exec::acp::terminals;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// A project directory with a file, a subdirectory, a FIFO and symlinks
/// out of it (as a box would plant them), made once.
fn project() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("boxd-fuzz-acp-{}", std::process::id()));
        let proj = base.join("proj");
        std::fs::create_dir_all(proj.join("src")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(proj.join("src/a.rs"), "fn main() {}").unwrap();
        std::fs::write(base.join("outside/secret"), "host").unwrap();
        let _ = std::os::unix::fs::symlink(base.join("outside"), proj.join("out"));
        let _ = std::os::unix::fs::symlink(base.join("outside/secret"), proj.join("secret"));
        let _ = std::os::unix::fs::symlink("src/a.rs", proj.join("inner"));
        let _ = nix::unistd::mkfifo(&proj.join("fifo"), nix::sys::stat::Mode::S_IRWXU);
        proj.canonicalize().unwrap()
    })
}

const METHODS: &[&str] = &[
    "fs/read_text_file",
    "fs/write_text_file",
    "terminal/create",
    "terminal/output",
    "terminal/release",
    "session/request_permission",
    "session/update",
    "elicitation/create",
    "mcp/message",
    "_x/anything",
    "initialize",
    "session/new",
    "session/load",
    "session/prompt",
    "session/list",
    "$/cancel_request",
];

const PATHS: &[&str] = &[
    "/workspace/src/a.rs",
    "/workspace/new.txt",
    "/workspace/out/secret",
    "/workspace/out/new",
    "/workspace/secret",
    "/workspace/inner",
    "/workspace/fifo",
    "/workspace",
    "/workspace/",
    "/workspace/../etc/passwd",
    "/workspace/./src/../src/a.rs",
    "/workspace//src/a.rs",
    "/workspace2/x",
    "/etc/passwd",
    "relative/path",
    "",
    "/workspace/src/a.rs/below",
    "/workspace/ro/x",
];

fn pick<'a>(b: &mut impl Iterator<Item = u8>, from: &[&'a str]) -> &'a str {
    from[b.next().unwrap_or(0) as usize % from.len()]
}

fn id(b: &mut impl Iterator<Item = u8>) -> Value {
    match b.next().unwrap_or(0) % 4 {
        0 => json!(b.next().unwrap_or(0)),
        1 => json!(format!("s{}", b.next().unwrap_or(0))),
        2 => Value::Null,
        _ => json!({"nested": true}),
    }
}

/// A message from the grammar.
fn message(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.iter().copied();
    let method = pick(&mut b, METHODS);
    let path = pick(&mut b, PATHS);
    let host_path = format!("{}/{}", project().display(), pick(&mut b, &["src/a.rs", "out", "x"]));
    let kind = b.next().unwrap_or(0);
    let params = json!({
        "sessionId": "s",
        "path": path,
        "cwd": if kind & 1 == 0 { host_path.clone() } else { path.to_owned() },
        "additionalDirectories": [path],
        "content": "x",
        "command": "ls",
        "terminalId": pick(&mut b, &["box-term-1", "t", ""]),
        "requestId": id(&mut b),
        "mcpServers": [],
        "toolCall": {"toolCallId": "t", "locations": [{"path": path}], "content": [{"type": "terminal", "terminalId": "box-term-1"}, {"type": "diff", "path": path, "newText": "y"}]},
        "update": {"sessionUpdate": pick(&mut b, &["tool_call", "tool_call_update", "agent_message_chunk"]), "toolCallId": "t",
            "locations": [{"path": path}], "content": [{"type": "terminal", "terminalId": "box-term-1"}, {"type": "resource_link", "uri": format!("file://{path}")}]},
        "prompt": [{"type": "resource_link", "name": "x", "uri": format!("file://{host_path}")}],
        "clientCapabilities": {"fs": {"readTextFile": kind & 2 != 0, "writeTextFile": kind & 4 != 0}, "_meta": {"terminal-auth": true}},
    });
    let msg = match kind % 3 {
        0 => json!({"jsonrpc": "2.0", "id": id(&mut b), "method": method, "params": params}),
        1 => json!({"jsonrpc": "2.0", "method": method, "params": params}),
        _ => json!({"jsonrpc": "2.0", "id": id(&mut b), "result": {"sessionId": "s", "authMethods": [
            {"id": "a", "name": "a", "_meta": {"terminal-auth": {"command": "sh", "env": {"LD_PRELOAD": "/x"}}}},
            {"id": "t", "name": "t", "type": "terminal", "args": ["--login"], "env": {"LD_PRELOAD": "/x"}},
            {"id": "e", "name": "e", "type": "env_var", "varName": "LD_PRELOAD"},
            {"id": "u", "name": "u", "type": "shell", "command": "sh"}]}}),
    };
    serde_json::to_vec(&msg).unwrap()
}

fn relay() -> Relay {
    let proj = project();
    Relay::new(
        "fuzz",
        Mounts::new(vec![
            Mount { host: proj.clone(), guest: "/workspace".into(), read_only: false },
            Mount { host: proj.join("src"), guest: "/workspace/ro".into(), read_only: true },
        ]),
        Vec::new(),
        Relaunch { exe: "/bin/harness-box-exec".into(), args: vec!["--raw".into(), "--".into()] },
        terminals::Shared::new(),
    )
}

/// What may reach the client: never a terminal, never a file request,
/// never a method outside ACP's own, never an auth method that would have
/// the client run something of the agent's choosing on the host.
fn check_for_client(line: &[u8], _mounts: &Mounts) {
    let v: Value = serde_json::from_slice(line).expect("the relay sends the client JSON only");
    if let Some(methods) = v.get("result").and_then(|r| r.get("authMethods")).and_then(Value::as_array) {
        for m in methods {
            for (k, _) in m.get("env").and_then(Value::as_object).into_iter().flatten() {
                assert!(k.starts_with("BOXD_ACP_"), "the agent's {k} reaches the host: {m}");
            }
            if m.get("type").and_then(Value::as_str) == Some("terminal") {
                assert_eq!(m.get("args"), Some(&json!([])), "host args: {m}");
            }
            if let Some(auth) = m.get("_meta").and_then(|x| x.get("terminal-auth")) {
                assert_eq!(auth["command"], "/bin/harness-box-exec", "{m}");
                assert!(auth.get("env").is_none(), "{m}");
            }
            assert!(
                matches!(m.get("type").and_then(Value::as_str), None | Some("agent" | "terminal" | "env_var")),
                "an unknown auth shape passed: {m}"
            );
        }
    }
    let Some(method) = v.get("method").and_then(Value::as_str) else {
        return;
    };
    assert!(!method.starts_with("terminal/"), "a terminal reached the client: {v}");
    assert!(!method.starts_with("fs/"), "a file request reached the client: {v}");
    let is_request = v.get("id").is_some();
    if is_request {
        assert!(
            matches!(method, "session/request_permission" | "elicitation/create"),
            "{method} reached the client as a request"
        );
    } else {
        assert!(
            matches!(method, "session/update" | "$/cancel_request" | "elicitation/complete" | "auth/status_update"),
            "{method} reached the client as a notification"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = relay();
    let mounts = r.mounts.clone();
    for chunk in data.split(|&b| b == b'\n') {
        let Some((&head, body)) = chunk.split_first() else { continue };
        let line = if head & 0x80 != 0 { message(body) } else { body.to_vec() };
        let outs = if head & 1 == 0 {
            r.from_client(Line::Request(line))
        } else {
            r.from_agent(Line::Request(line))
        };
        for out in outs {
            if let Out::Client(l) = out {
                check_for_client(&l, &mounts);
            }
        }
    }
});
