//! `boxctl jsonl` end to end: the envelope on stdio against a real boxd.

use base64::Engine as _;
use boxd_tests::*;
use serde_json::{Value, json};

fn image() -> String {
    busybox().to_string_lossy().into_owned()
}

#[test]
fn a_session_from_describe_to_shutdown() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    let transport = j.next_frame();
    assert_eq!(transport["type"], "transport", "the first frame");
    assert_eq!(transport["servicePid"], d.pid());
    assert_ne!(transport["servicePid"], transport["bridgePid"]);

    let describe = j.call(1, "host.describe", json!({}));
    assert!(
        describe["result"]["protocol"]
            .as_str()
            .unwrap()
            .ends_with("+jsonl-v1")
    );
    assert_eq!(describe["result"]["isolation"], "namespace");
    assert_eq!(describe["result"]["pid"], d.pid());

    let created = j.call(2, "box.create", json!({"name": "j", "image": image()}));
    assert_eq!(created["result"]["created"], true, "{created}");
    let reused = j.call(
        3,
        "box.create",
        json!({"name": "j", "image": image(), "cpus": 2}),
    );
    assert_eq!(reused["result"]["created"], false);
    assert!(
        reused["result"]["warnings"]
            .as_array()
            .is_some_and(|w| !w.is_empty())
    );
    let started = j.call(4, "box.start", json!({"name": "j"}));
    assert!(started["result"]["bootMs"].is_u64(), "{started}");

    let script = "echo hi; printf '\\377\\376' >&2; exit 3";
    j.request(
        5.into(),
        "box.exec",
        json!({"name": "j", "command": "sh", "args": ["-c", script]}),
    );
    let reply = j.reply(&5.into());
    let exec_id = reply["result"]["execId"].as_str().unwrap().to_owned();
    let exit = j.exit_of(&exec_id);
    assert_eq!(exit["exitCode"], 3);
    // Every event of the exec came after its reply and before its exit.
    let at = |f: &Value| j.seen.iter().position(|x| x == f).unwrap();
    let (reply_at, exit_at) = (at(&reply), at(&exit));
    let events: Vec<(usize, &Value)> = j
        .seen
        .iter()
        .enumerate()
        .filter(|(_, f)| f["execId"] == exec_id.as_str())
        .collect();
    for (i, f) in &events {
        assert!(*i > reply_at && *i <= exit_at, "{f} out of order");
    }
    let stdout: String = events
        .iter()
        .filter(|(_, f)| f["stream"] == "stdout")
        .map(|(_, f)| f["data"].as_str().unwrap())
        .collect();
    assert_eq!(stdout, "hi\n");
    let stderr: Vec<u8> = events
        .iter()
        .filter(|(_, f)| f["stream"] == "stderr")
        .flat_map(|(_, f)| {
            base64::engine::general_purpose::STANDARD
                .decode(f["dataBase64"].as_str().unwrap())
                .unwrap()
        })
        .collect();
    assert_eq!(stderr, [0xff, 0xfe], "invalid UTF-8 travels as base64");

    let list = j.call(6, "box.list", json!({}));
    assert_eq!(list["result"][0]["name"], "j");
    assert_eq!(list["result"][0]["state"], "running");
    assert!(
        list["result"][0]["diskBytes"].is_u64(),
        "disk used is listed: {list}"
    );
    assert_eq!(
        j.call(7, "box.remove", json!({"name": "j", "force": true}))["result"]["ok"],
        true
    );
    j.frame_where(|f| f["type"] == "boxState" && f["name"] == "j" && f["state"] == "removed");
    assert_eq!(j.call(8, "shutdown", json!({}))["result"]["ok"], true);
    let (status, _) = j.close();
    assert!(status.success());
}

#[test]
fn stdin_kill_and_end_of_input() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    j.call(1, "box.create", json!({"name": "s", "image": image()}));
    j.call(2, "box.start", json!({"name": "s"}));
    let r = j.call(
        3,
        "box.exec",
        json!({"name": "s", "command": "cat", "interactive": true}),
    );
    let cat = r["result"]["execId"].as_str().unwrap().to_owned();
    assert_eq!(
        j.call(
            4,
            "exec.stdin",
            json!({"execId": cat, "data": "abc", "dataBase64": "AAE="})
        )["result"]["ok"],
        true
    );
    j.call(5, "exec.stdin", json!({"execId": cat, "close": true}));
    assert_eq!(j.exit_of(&cat)["exitCode"], 0);
    // Once it has exited, input fails as a signal does: the bytes went
    // nowhere, and the client is told.
    for (id, method, params) in [
        (6, "exec.stdin", json!({"execId": cat, "data": "late"})),
        (7, "exec.kill", json!({"execId": cat})),
    ] {
        let f = j.call(id, method, params);
        assert_eq!(f["error"]["code"], "failed_precondition", "{method}: {f}");
        assert!(
            f["error"]["message"]
                .as_str()
                .unwrap()
                .contains("has exited"),
            "{method}: {f}"
        );
    }
    let out: Vec<Value> = j
        .seen
        .iter()
        .filter(|f| f["execId"] == cat.as_str() && f["type"] == "output")
        .cloned()
        .collect();
    let bytes: Vec<u8> = out
        .iter()
        .flat_map(|f| match f["data"].as_str() {
            Some(t) => t.as_bytes().to_vec(),
            None => base64::engine::general_purpose::STANDARD
                .decode(f["dataBase64"].as_str().unwrap())
                .unwrap(),
        })
        .collect();
    assert_eq!(bytes, b"abc\x00\x01");

    let r = j.call(
        6,
        "box.exec",
        json!({"name": "s", "command": "sleep", "args": ["1000"]}),
    );
    let sleep = r["result"]["execId"].as_str().unwrap().to_owned();
    j.call(
        7,
        "exec.kill",
        json!({"execId": sleep, "signal": "SIGTERM"}),
    );
    assert_eq!(j.exit_of(&sleep)["signal"], 15);

    // End of input ends the driver; its execs are killed, the box stays.
    let r = j.call(
        8,
        "box.exec",
        json!({"name": "s", "command": "sleep", "args": ["1000"]}),
    );
    let last = r["result"]["execId"].as_str().unwrap().to_owned();
    let (status, seen) = j.close();
    assert!(status.success());
    assert!(
        seen.iter()
            .any(|f| f["type"] == "exit" && f["execId"] == last.as_str()),
        "its exec was ended"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = d.client().await;
        let boxes = c
            .list_boxes(v1::ListBoxesRequest {})
            .await
            .unwrap()
            .into_inner()
            .boxes;
        assert_eq!(boxes.len(), 1, "boxes outlive the driver");
        let execs = c
            .list_execs(v1::ListExecsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .execs;
        // Kept (with its last output) as exited: killed when its driver went.
        assert!(
            execs.iter().all(|e| e.exec_id != last || e.exited),
            "{execs:?}"
        );
    });
}

#[test]
fn bad_input_gets_error_frames_and_the_driver_keeps_serving() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    j.next_frame(); // transport
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not json\n".to_vec(), "parse_error"),
        (b"\xff\xfe\n".to_vec(), "parse_error"),
        (b"[1,2]\n".to_vec(), "invalid_request"),
        (br#"{"method":"box.list"}"#.to_vec(), "invalid_request"),
        (
            br#"{"id":-3,"method":"box.list"}"#.to_vec(),
            "invalid_request",
        ),
        (
            br#"{"id":{},"method":"box.list"}"#.to_vec(),
            "invalid_request",
        ),
    ];
    for (line, code) in cases {
        let mut line = line;
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        j.write(&line);
        let f = j.next_frame();
        assert_eq!(
            (f["id"].clone(), f["error"]["code"].as_str()),
            (Value::Null, Some(code)),
            "{:?}",
            String::from_utf8_lossy(&line)
        );
    }
    let with_id = [
        (json!({"id": "a", "method": "box.nope"}), "unknown_method"),
        (
            json!({"id": "b", "method": "box.list", "extra": 1}),
            "invalid_request",
        ),
        (
            json!({"id": "c", "method": "box.start", "params": {"name": "x", "bogus": true}}),
            "invalid_params",
        ),
        (
            json!({"id": "d", "method": "box.start", "params": {"name": 5}}),
            "invalid_params",
        ),
        (
            json!({"id": "e", "method": "box.start", "params": {"name": "nope"}}),
            "not_found",
        ),
        (
            json!({"id": "f", "method": "box.create", "params": {"name": "../x", "image": "/tmp"}}),
            "invalid_params",
        ),
        (
            json!({"id": 9, "method": "exec.stdin", "params": {"execId": "zz", "data": "x"}}),
            "not_found",
        ),
    ];
    for (req, code) in with_id {
        j.write(format!("{req}\n").as_bytes());
        let f = j.reply(&req["id"]);
        assert_eq!(f["error"]["code"], code, "{req} -> {f}");
    }
    j.call(11, "box.create", json!({"name": "idle", "image": image()}));
    let f = j.call(12, "box.exec", json!({"name": "idle", "command": "true"}));
    assert_eq!(
        f["error"]["code"], "failed_precondition",
        "exec in a box that is not running: {f}"
    );
    // A line over 4 MiB is refused, and the next request is answered.
    let mut huge = vec![b' '; (4 << 20) + 1];
    huge.push(b'\n');
    j.write(&huge);
    let f = j.next_frame();
    assert_eq!(
        (f["id"].clone(), f["error"]["code"].as_str()),
        (Value::Null, Some("too_large"))
    );
    assert!(j.call(10, "box.list", json!({}))["result"].is_array());
    let (status, _) = j.close();
    assert!(status.success());
}

#[test]
fn without_a_daemon_every_method_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Jsonl::start(&dir.path().join("none.sock"));
    let t = j.next_frame();
    assert_eq!(t["type"], "transport");
    assert!(t["servicePid"].is_null());
    let f = j.call(1, "host.describe", json!({}));
    assert_eq!(f["error"]["code"], "unavailable");
    let (status, _) = j.close();
    assert!(status.success());
}

/// `boxctl jsonl` starts boxd when nothing answers, as `boxctl` and
/// `harness-box-exec` do, saying so in one line on stderr.
#[test]
fn the_driver_starts_the_daemon() {
    let dir = tempfile::Builder::new()
        .prefix("boxd-jsonl-")
        .tempdir_in("/tmp")
        .unwrap();
    let (home, socket) = (dir.path().join("home"), dir.path().join("s.sock"));
    let mut child = std::process::Command::new(bin("boxctl"))
        .arg("jsonl")
        .env("BOXD_HOME", &home)
        .env("BOXD_SOCKET", &socket)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::{BufRead, Write};
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"id":1,"method":"host.describe","params":{{}}}}"#
    )
    .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let frames: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(frames[0]["servicePid"].is_number(), "{frames:?}");
    let reply = frames.iter().find(|f| f["id"] == 1).expect("a reply");
    assert!(reply["result"].is_object(), "{reply}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines().filter(|l| l.contains("started boxd")).count(),
        1,
        "{err}"
    );
    let stop = std::process::Command::new(bin("boxctl"))
        .args(["daemon", "stop"])
        .env("BOXD_HOME", &home)
        .env("BOXD_SOCKET", &socket)
        .output()
        .unwrap();
    assert!(stop.status.success());
}

#[test]
fn requests_are_dispatched_concurrently() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    for (i, name) in ["slow", "fast"].iter().enumerate() {
        j.call(
            i as u64 * 2 + 1,
            "box.create",
            json!({"name": name, "image": image()}),
        );
        j.call(i as u64 * 2 + 2, "box.start", json!({"name": name}));
    }
    // A process that ignores SIGTERM makes a graceful stop take its whole
    // grace period.
    let r = j.call(5, "box.exec", json!({"name": "slow", "command": "sh", "args": ["-c", "trap '' TERM; echo ready; sleep 100"]}));
    let stubborn = r["result"]["execId"].as_str().unwrap().to_owned();
    loop {
        let f = j.next_frame();
        if f["execId"] == stubborn.as_str() && f["type"] == "output" {
            break;
        }
    }
    let r = j.call(
        6,
        "box.exec",
        json!({"name": "fast", "command": "cat", "interactive": true}),
    );
    let cat = r["result"]["execId"].as_str().unwrap().to_owned();
    j.request(7.into(), "box.stop", json!({"name": "slow"}));
    j.request(
        8.into(),
        "box.create",
        json!({"name": "third", "image": image()}),
    );
    j.request(
        9.into(),
        "exec.stdin",
        json!({"execId": cat, "data": "x", "close": true}),
    );
    let mut order = Vec::new();
    while order.len() < 3 {
        let f = j.next_frame();
        if let Some(id) = f["id"].as_u64() {
            order.push(id);
        }
    }
    assert_eq!(
        order[0], 9,
        "exec.stdin was answered before the slow stop and the create: {order:?}"
    );
    assert_eq!(
        *order.last().unwrap(),
        7,
        "the graceful stop came last: {order:?}"
    );
}

#[test]
fn a_16_mib_burst_is_split_into_frames_within_the_bound() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    j.call(1, "box.create", json!({"name": "b", "image": image()}));
    j.call(2, "box.start", json!({"name": "b"}));
    let n = 16 << 20;
    let r = j.call(3, "box.exec", json!({"name": "b", "command": "sh", "args": ["-c", format!("head -c {n} /dev/zero | tr '\\0' a")]}));
    let id = r["result"]["execId"].as_str().unwrap().to_owned();
    let exit = j.exit_of(&id);
    assert_eq!(exit["exitCode"], 0);
    let frames: Vec<&Value> = j
        .seen
        .iter()
        .filter(|f| f["execId"] == id.as_str() && f["type"] == "output")
        .collect();
    let total: usize = frames
        .iter()
        .map(|f| f["data"].as_str().unwrap().len())
        .sum();
    assert_eq!(total, n);
    for f in &frames {
        assert!(f.to_string().len() <= 16 << 20, "a frame over 16 MiB");
    }
}

#[test]
fn a_flood_of_ten_thousand_requests_and_duplicate_ids() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    j.next_frame(); // transport
    let mut batch = Vec::new();
    for i in 0..10_000u64 {
        batch.extend_from_slice(format!("{{\"id\":{i},\"method\":\"box.list\"}}\n").as_bytes());
    }
    j.write(&batch);
    let mut answered = std::collections::HashSet::new();
    while answered.len() < 10_000 {
        let f = j.next_frame();
        if let Some(id) = f["id"].as_u64() {
            assert!(f["result"].is_array(), "{f}");
            assert!(answered.insert(id), "id {id} answered twice");
        }
    }
    // The same id twice: each request gets its own reply.
    j.request("dup".into(), "box.list", json!({}));
    j.request("dup".into(), "host.describe", json!({}));
    let a = j.reply(&"dup".into());
    let b = j.reply(&"dup".into());
    assert!(a["result"].is_array() != b["result"].is_array(), "{a} {b}");
}

#[test]
fn interleaved_execs_keep_their_streams_apart() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    j.call(1, "box.create", json!({"name": "i", "image": image()}));
    j.call(2, "box.start", json!({"name": "i"}));
    let mut ids = Vec::new();
    for k in 0..8u64 {
        let r = j.call(
            10 + k,
            "box.exec",
            json!({"name": "i", "command": "cat", "interactive": true}),
        );
        ids.push(r["result"]["execId"].as_str().unwrap().to_owned());
    }
    for round in 0..5 {
        for (k, id) in ids.iter().enumerate() {
            j.call(
                100 + round * 8 + k as u64,
                "exec.stdin",
                json!({"execId": id, "data": format!("{k}:{round};")}),
            );
        }
    }
    for (k, id) in ids.iter().enumerate() {
        j.call(
            200 + k as u64,
            "exec.stdin",
            json!({"execId": id, "close": true}),
        );
    }
    for (k, id) in ids.iter().enumerate() {
        assert_eq!(j.exit_of(id)["exitCode"], 0);
        let text: String = j
            .seen
            .iter()
            .filter(|f| f["execId"] == id.as_str() && f["type"] == "output")
            .map(|f| f["data"].as_str().unwrap().to_owned())
            .collect();
        let want: String = (0..5).map(|r| format!("{k}:{r};")).collect();
        assert_eq!(text, want);
    }
}

#[test]
fn tty_resize_and_stop() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    j.call(1, "box.create", json!({"name": "t", "image": image()}));
    j.call(2, "box.start", json!({"name": "t"}));
    let script = "read go; stty size";
    let r = j.call(3, "box.exec", json!({"name": "t", "command": "sh", "args": ["-c", script], "tty": true, "interactive": true}));
    let id = r["result"]["execId"].as_str().unwrap().to_owned();
    assert_eq!(
        j.call(
            4,
            "exec.resize",
            json!({"execId": id, "rows": 50, "cols": 120})
        )["result"]["ok"],
        true
    );
    j.call(5, "exec.stdin", json!({"execId": id, "data": "go\n"}));
    assert_eq!(j.exit_of(&id)["exitCode"], 0);
    let text: String = j
        .seen
        .iter()
        .filter(|f| f["execId"] == id.as_str() && f["type"] == "output")
        .filter_map(|f| f["data"].as_str().map(str::to_owned))
        .collect();
    assert!(text.contains("50 120"), "{text:?}");
    let bad = j.call(
        6,
        "exec.resize",
        json!({"execId": id, "rows": 0, "cols": 0}),
    );
    assert!(bad["error"]["code"].is_string(), "{bad}");
    assert_eq!(
        j.call(7, "box.stop", json!({"name": "t", "force": true}))["result"]["ok"],
        true
    );
    let list = j.call(8, "box.list", json!({}));
    assert_eq!(list["result"][0]["state"], "stopped");
}

#[test]
fn a_truncated_last_line_is_still_answered() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    j.next_frame(); // transport
    j.write(br#"{"id":"t","method":"box.list"}"#);
    let (status, seen) = j.close();
    assert!(status.success());
    assert!(
        seen.iter()
            .any(|f| f["id"] == "t" && f["result"].is_array()),
        "{seen:?}"
    );
    // A line cut in the middle of its JSON is a parse error, not a crash.
    let mut j = Jsonl::start(&d.socket);
    j.write(br#"{"id":"u","meth"#);
    let (status, seen) = j.close();
    assert!(status.success());
    assert!(
        seen.iter().any(|f| f["error"]["code"] == "parse_error"),
        "{seen:?}"
    );
}

#[test]
fn published_ports_in_create_start_and_list() {
    use std::io::{Read, Write};
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    // Bad ports are invalid parameters, said by boxd.
    let bad = j.call(
        1,
        "box.create",
        json!({"name": "p", "image": image(), "ports": [{"boxPort": 80, "protocol": "udp"}]}),
    );
    assert_eq!(bad["error"]["code"], "invalid_params", "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only TCP is relayed"),
        "{bad}"
    );
    let created = j.call(
        2,
        "box.create",
        json!({"name": "p", "image": image(), "ports": [{"boxPort": 7000}]}),
    );
    assert_eq!(created["result"]["created"], true, "{created}");
    let started = j.call(3, "box.start", json!({"name": "p"}));
    let port = &started["result"]["ports"][0];
    assert_eq!(port["hostIp"], "127.0.0.1", "{started}");
    assert_eq!(port["boxPort"], 7000);
    assert_eq!(port["protocol"], "tcp");
    let host_port = port["hostPort"].as_u64().unwrap();
    assert_ne!(host_port, 0, "the actual port");
    let list = j.call(4, "box.list", json!({}));
    assert_eq!(list["result"][0]["ports"][0]["hostPort"], host_port);

    // A one-reply server in the box (nc), reached from the host.
    j.request(
        5.into(),
        "box.exec",
        json!({"name": "p", "command": "sh", "args": ["-c", "echo from-box | nc -l -p 7000"]}),
    );
    j.reply(&5.into());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let got = loop {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", host_port as u16)).unwrap();
        let _ = s.write_all(b"ping\n");
        let mut got = String::new();
        let _ = s.read_to_string(&mut got);
        if !got.is_empty() {
            break got;
        }
        // Not listening yet: the relay closed the connection.
        assert!(std::time::Instant::now() < deadline, "nc never answered");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(got, "from-box\n");
}

#[test]
fn copies_in_and_out_round_trip() {
    let d = Daemon::start();
    let mut j = Jsonl::start(&d.socket);
    assert_eq!(j.next_frame()["type"], "transport");
    let caps = j.call(1, "host.describe", json!({}));
    let caps = caps["result"]["capabilities"].as_array().unwrap().clone();
    assert!(caps.contains(&json!("box.copyIn")) && caps.contains(&json!("box.copyOut")));
    j.call(2, "box.create", json!({"name": "cp", "image": image()}));
    j.call(3, "box.start", json!({"name": "cp"}));
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir(host.path().join("src")).unwrap();
    std::fs::write(host.path().join("src/f"), b"through jsonl").unwrap();
    let src = host.path().join("src").to_string_lossy().into_owned();
    let r = j.call(
        4,
        "box.copyIn",
        json!({"name": "cp", "hostPath": src, "path": "/tmp"}),
    );
    assert!(r["result"]["bytes"].as_u64().unwrap() >= 2048, "{r}");
    let back = host.path().join("back").to_string_lossy().into_owned();
    let r = j.call(
        5,
        "box.copyOut",
        json!({"name": "cp", "path": "/tmp/src", "hostPath": back}),
    );
    assert!(r["result"]["bytes"].as_u64().unwrap() >= 2048, "{r}");
    assert_eq!(
        std::fs::read(host.path().join("back/f")).unwrap(),
        b"through jsonl"
    );
    // A missing box path is `not_found`; a relative host path is refused.
    let r = j.call(
        6,
        "box.copyOut",
        json!({"name": "cp", "path": "/nope", "hostPath": back}),
    );
    assert_eq!(r["error"]["code"], "not_found", "{r}");
    let r = j.call(
        7,
        "box.copyIn",
        json!({"name": "cp", "path": "/tmp", "hostPath": "rel"}),
    );
    assert_eq!(r["error"]["code"], "invalid_params", "{r}");
    j.call(8, "box.remove", json!({"name": "cp", "force": true}));
    assert_eq!(j.call(9, "shutdown", json!({}))["result"]["ok"], true);
    assert!(j.close().0.success());
}
