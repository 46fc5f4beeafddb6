//! Item 2: a nested mount's root swapped for a symlink. Mounts `proj →
//! /proj` and `proj/sub → /sub`; the agent renames `/proj/sub` away and
//! puts a symlink to a host directory in its place (the box's `/sub` is
//! untouched), then asks for `fs/read_text_file /sub/key` and
//! `fs/write_text_file /sub/planted`. Today's main forwarded both to the
//! editor with host paths through the symlink.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;

use boxd_tests::*;
use serde_json::{Value, json};

#[test]
fn a_swapped_nested_mount_root_leads_neither_the_editor_nor_the_proxy_out() {
    let d = Daemon::start();
    let proj = host_dir();
    let outside = host_dir();
    std::fs::create_dir(proj.path().join("sub")).unwrap();
    std::fs::write(proj.path().join("sub/key"), "the box's own key\n").unwrap();
    std::fs::write(outside.path().join("key"), "host secret\n").unwrap();
    give_to_host_user(proj.path());
    let read = json!({"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file",
        "params": {"sessionId": "s", "path": "/sub/key"}});
    let write = json!({"jsonrpc": "2.0", "id": 2, "method": "fs/write_text_file",
        "params": {"sessionId": "s", "path": "/sub/planted", "content": "from the agent\n"}});
    let init = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}});
    let script = format!(
        r#"read line; printf '%s\n' '{init}'
mv /proj/sub /proj/moved && ln -s {outside} /proj/sub || echo "swap failed" >&2
printf '%s\n' '{read}'; read -r answer; echo "read: $answer" >&2
printf '%s\n' '{write}'; read -r answer; echo "write: $answer" >&2"#,
        outside = outside.path().display()
    );
    let mut child = d
        .acp_proxy()
        .args(["--box", "nested", "--image"])
        .arg(busybox())
        .arg("--mount")
        .arg(format!("{}:/proj", proj.path().display()))
        .arg("--mount")
        .arg(format!("{}:/sub", proj.path().join("sub").display()))
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}}}});
    writeln!(stdin, "{init}").unwrap();
    // The editor: answers every request it gets as an editor would (by
    // opening the host path it names) and records it.
    let mut asked = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let msg: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let Some(method) = msg["method"].as_str() else {
            continue;
        };
        let path = msg["params"]["path"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let answer = match method {
            "fs/read_text_file" => {
                json!({"content": std::fs::read_to_string(&path).unwrap_or_default()})
            }
            _ => {
                let _ =
                    std::fs::write(&path, msg["params"]["content"].as_str().unwrap_or_default());
                json!({})
            }
        };
        asked.push(path);
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": msg["id"], "result": answer})
        )
        .unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("the editor was asked about: {asked:?}\nthe agent saw:\n{stderr}");
    assert!(!stderr.contains("swap failed"), "{stderr}");
    let outside_now: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        outside_now,
        ["key"],
        "nothing was written outside the mounts"
    );
    assert!(
        !stderr.contains("host secret"),
        "a host file outside the mounts reached the agent"
    );
    assert!(
        asked
            .iter()
            .all(|p| !Path::new(p).starts_with(proj.path().join("sub"))),
        "the editor was handed a path through the swapped symlink: {asked:?}"
    );
    assert!(
        stderr.contains("the box's own key"),
        "the box's /sub is what it reads: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(proj.path().join("moved/planted")).unwrap(),
        "from the agent\n",
        "the write landed in the box's /sub"
    );
    ok(d.boxctl().args(["rm", "-f", "nested"]));
}
