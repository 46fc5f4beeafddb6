//! End-to-end behaviour through the `boxctl` binary.

use std::io::Write;
use std::process::{Command, Stdio};

use boxd_tests::*;

#[test]
fn lifecycle_through_boxctl() {
    let d = Daemon::start();
    let image = busybox();
    let out = ok(d
        .boxctl()
        .args(["create", "cli", "--image"])
        .arg(&image)
        .args(["-e", "A=1", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["created"], true);
    assert_eq!(v["box"]["isolation"], "namespace");

    ok(d.boxctl().args(["start", "cli"]));
    let out = ok(d
        .boxctl()
        .args(["exec", "cli", "--", "sh", "-c", "echo $A; echo oops >&2"]));
    assert_eq!(out.stdout, b"1\n");
    assert_eq!(out.stderr, b"oops\n");

    let out = d
        .boxctl()
        .args(["exec", "cli", "--", "sh", "-c", "exit 42"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(42));
    let out = d
        .boxctl()
        .args(["exec", "cli", "--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + 15));
    let out = d
        .boxctl()
        .args(["exec", "cli", "--", "missing-binary"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));

    let mut child = d
        .boxctl()
        .args(["exec", "-i", "cli", "--", "tr", "a-z", "A-Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"shout\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.stdout, b"SHOUT\n");

    // A TTY exec gets the caller's terminal type.
    let out = ok(d.boxctl().env("TERM", "vt220").args([
        "exec",
        "-t",
        "cli",
        "--",
        "sh",
        "-c",
        "echo $TERM",
    ]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "vt220");

    // The box's own writes are its disk use, in the table and in JSON.
    ok(d.boxctl().args([
        "exec",
        "cli",
        "--",
        "dd",
        "if=/dev/zero",
        "of=/big",
        "bs=1024",
        "count=2048",
    ]));
    // Disk use is measured in the background: wait (up to 30 s) for a
    // measurement that saw the write.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (v, disk) = loop {
        let out = ok(d.boxctl().args(["ls", "--json"]));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let disk = v[0]["diskBytes"].as_u64().expect("diskBytes");
        if disk >= 2 << 20 || std::time::Instant::now() > deadline {
            break (v, disk);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(v[0]["name"], "cli");
    assert_eq!(v[0]["state"], "running");
    assert!(
        (2 << 20..64 << 20).contains(&disk),
        "2 MiB written, {disk} bytes used"
    );
    let table = String::from_utf8(ok(d.boxctl().arg("ls")).stdout).unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    let col = header
        .iter()
        .position(|h| *h == "DISK")
        .expect("a DISK column");
    assert!(
        row[col].starts_with("2.") && row[col].ends_with('M'),
        "{table}"
    );

    let out = ok(d.boxctl().args(["inspect", "cli", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["spec"]["env"]["A"], "1");

    ok(d.boxctl().args(["stop", "cli"]));
    ok(d.boxctl().args(["rm", "cli"]));
    let out = d.boxctl().args(["inspect", "cli"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no box named"));
}

#[test]
fn run_creates_starts_execs_and_removes() {
    let d = Daemon::start();
    let image = busybox();
    let out = ok(d
        .boxctl()
        .args(["run", "--rm", "once", "--image"])
        .arg(&image)
        .args(["--", "uname", "-s"]));
    assert_eq!(out.stdout, b"Linux\n");
    let out = ok(d.boxctl().args(["ls", "--json"]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[test]
fn errors_have_stable_exit_codes() {
    let d = Daemon::start();
    let out = d.boxctl().args(["start", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // A create boxd refuses exits 125, as docker's.
    let out = d
        .boxctl()
        .args(["create", "bad/name", "--image", "/tmp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let out = d
        .boxctl()
        .args(["create", "x", "--image", "/tmp", "--mount", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = d
        .boxctl()
        .args(["exec", "nope", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let out = d.boxctl().args(["--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));

    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("boxctl"))
        .env("BOXD_AUTOSTART", "0")
        .arg("--socket")
        .arg(dir.path().join("none.sock"))
        .arg("ls")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not running"));
}

#[test]
fn daemon_start_status_stop() {
    let dir = tempfile::Builder::new()
        .prefix("boxd-cli-")
        .tempdir_in("/tmp")
        .unwrap();
    let ctl = || {
        let mut c = Command::new(bin("boxctl"));
        c.env("BOXD_HOME", dir.path().join("home"))
            .env("BOXD_SOCKET", dir.path().join("s.sock"));
        c
    };
    let out = ctl().args(["daemon", "status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    ok(ctl().args(["daemon", "start", "--", "--engine", "namespace"]));
    let out = ok(ctl().args(["daemon", "status", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["running"], true);
    assert_eq!(v["daemon"]["isolation"], "namespace");
    ok(ctl().args(["daemon", "start"])); // already running: fine
    ok(ctl().args(["daemon", "stop"]));
    let out = ctl().args(["daemon", "status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn completions_and_version() {
    let out = ok(Command::new(bin("boxctl")).args(["completions", "bash"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("boxctl"));
    let dir = tempfile::tempdir().unwrap();
    let out = ok(Command::new(bin("boxctl"))
        .arg("--socket")
        .arg(dir.path().join("x.sock"))
        .args(["version", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["daemon"].is_null());
}

#[test]
fn doctor_reports_the_engine_and_the_running_daemon() {
    let d = Daemon::start();
    let out = ok(d.boxctl().args(["doctor", "--json"]));
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let find = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(find("bwrap")["status"], "ok");
    assert!(
        find("engine")["detail"]
            .as_str()
            .unwrap()
            .contains("namespace")
    );
    let daemon = find("daemon");
    assert_eq!(daemon["status"], "ok");
    assert!(
        daemon["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {}", d.pid()))
    );
    // A root-run boxd says so, in doctor and in its log; a user's does not.
    let privileges = find("privileges");
    if boxd_client::trust::my_uid() == 0 {
        assert_eq!(privileges["status"], "warn", "{privileges}");
        assert!(
            privileges["detail"]
                .as_str()
                .unwrap()
                .contains("boxd runs as root")
        );
        let log = std::fs::read_to_string(d.home.join("logs/boxd.log")).unwrap();
        assert!(log.contains("boxd runs as root"), "the log warns: {log}");
    } else {
        assert_eq!(privileges["status"], "ok", "{privileges}");
    }
    let out = ok(d.boxctl().arg("doctor"));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .all(|l| l.starts_with("ok") || l.starts_with("warn") || l.starts_with("      "))
    );
}

#[test]
fn attach_and_logs_show_an_execs_kept_output_and_its_exit() {
    let d = Daemon::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = rt.block_on(async {
        let mut c = d.client().await;
        up(&mut c, "att", busybox_spec()).await;
        let mut req = start_req(
            "att",
            &[
                "sh",
                "-c",
                "echo one; echo two >&2; sleep 1; echo three; exit 7",
            ],
        );
        req.detach = true;
        let exec = ExecStream::start(&mut c, req).await.unwrap();
        exec.exec_id().to_owned()
        // Dropped: a detached exec runs on.
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    // `logs` prints what is kept so far, and leaves the exec running.
    let out = ok(d.boxctl().args(["logs", "att"]));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("two"));
    // `attach` replays, follows to the end, and exits with its code.
    let out = d.boxctl().args(["attach", &id]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\nthree\n");
    assert_eq!(out.status.code(), Some(7));
    // Kept after it exited: `logs` shows it whole.
    let out = ok(d.boxctl().args(["logs", "att", "--exec", &id]));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\nthree\n");
}
