//! What a namespace box cannot reach or do. Each test has a control that
//! shows the same probe succeeding where the protection does not apply, so
//! it would fail if the protection were removed.

use std::io::{Read, Write};
use std::net::TcpListener;

use boxd_tests::*;

/// `grep FIELD /proc/PID/status` for every process of the box, as lines
/// `PID FIELD VALUE`.
const STATUS_OF_ALL: &str = r#"for p in /proc/[0-9]*; do
  [ -r $p/status ] || continue
  while read k v; do
    case "$k" in CapEff:|CapPrm:|CapBnd:|CapAmb:|NoNewPrivs:|Seccomp:) echo "${p#/proc/} $k $v";; esac
  done < $p/status
done"#;

#[tokio::test(flavor = "multi_thread")]
async fn processes_in_a_box_have_no_capabilities_no_new_privileges_and_a_seccomp_filter() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "iso-caps", busybox_spec()).await;
    // A background process started by an earlier exec, a plain exec, and
    // the box's own processes (bwrap's pid 1 and the init): all of them.
    sh(&mut c, "iso-caps", "sleep 300 >/dev/null 2>&1 &").await;
    let lines = sh(&mut c, "iso-caps", STATUS_OF_ALL).await;
    let pids: std::collections::BTreeSet<&str> =
        lines.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(pids.len() >= 4, "pid 1, the init, sleep and sh: {lines}");
    for line in lines.lines() {
        let mut w = line.split_whitespace();
        let (pid, key, value) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
        let want = match key {
            "NoNewPrivs:" => "1",
            "Seccomp:" => "2",
            _ => "0000000000000000",
        };
        assert_eq!(value, want, "process {pid}: {key} {value}\n{lines}");
    }
    // A TTY exec goes through the same path.
    let mut start = start_req(
        "iso-caps",
        &["sh", "-c", "grep -E 'CapEff|Seccomp:' /proc/self/status"],
    );
    start.tty = true;
    let out = collect(ExecStream::start(&mut c, start).await.unwrap()).await;
    let text = out.stdout_str();
    assert!(
        text.contains("CapEff:\t0000000000000000") && text.contains("Seccomp:\t2"),
        "{text}"
    );

    // Behaviour, not just bookkeeping: with capabilities, root in the box
    // could rename its host (CAP_SYS_ADMIN over its uts namespace); without
    // the filter, unshare(CLONE_NEWUSER) needs no capability at all.
    let out = run(&mut c, "iso-caps", &["hostname", "renamed"]).await;
    assert_ne!(out.exit.code, Some(0), "hostname succeeded: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"));
    let out = run(&mut c, "iso-caps", &["unshare", "-U", "true"]).await;
    assert_ne!(out.exit.code, Some(0), "unshare succeeded: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{out:?}"
    );
    // Control: the same busybox outside any box can create a user namespace.
    let host = std::process::Command::new(boxd_tests::image::busybox_binary())
        .args(["unshare", "-U", "true"])
        .status()
        .unwrap();
    assert!(host.success(), "unshare -U works on this host");
}

#[tokio::test(flavor = "multi_thread")]
async fn host_processes_home_socket_and_other_boxes_are_out_of_reach() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "iso-a", busybox_spec()).await;
    up(&mut c, "iso-b", busybox_spec()).await;

    // A host process with a recognizable command line.
    let mut host = std::process::Command::new("sleep")
        .arg("31337")
        .spawn()
        .unwrap();
    let seen = sh(
        &mut c,
        "iso-a",
        "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; ls -d /proc/[0-9]* | wc -l",
    )
    .await;
    assert!(!seen.contains("31337"), "a host process is visible: {seen}");
    let count: usize = seen.lines().last().unwrap().trim().parse().unwrap();
    assert!(count < 10, "only the box's processes: {seen}");
    let out = run(&mut c, "iso-a", &["kill", "-0", &host.id().to_string()]).await;
    assert_ne!(out.exit.code, Some(0), "signalled a host pid: {out:?}");
    // Control: visible from the host.
    assert!(
        std::fs::read_to_string(format!("/proc/{}/cmdline", host.id()))
            .unwrap()
            .contains("31337")
    );
    let _ = host.kill();
    let _ = host.wait();

    // The user's home, boxd's home and socket: files that exist on the host.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let marker = tempfile::Builder::new()
        .prefix("boxd-isolation-")
        .tempfile_in(&home)
        .unwrap();
    for path in [
        marker.path(),
        d.socket.as_path(),
        d.home.as_path(),
        d.socket.parent().unwrap(),
    ] {
        assert!(
            path.exists(),
            "control: {} exists on the host",
            path.display()
        );
        let out = run(&mut c, "iso-a", &["ls", "-d", path.to_str().unwrap()]).await;
        assert_ne!(
            out.exit.code,
            Some(0),
            "{} is visible in the box: {out:?}",
            path.display()
        );
    }
    let out = run(&mut c, "iso-a", &["ls", "-A", &home]).await;
    let name = marker.path().file_name().unwrap().to_str().unwrap();
    assert!(!out.stdout_str().contains(name), "{out:?}");

    // Another box's files.
    sh(&mut c, "iso-b", "echo private > /secret-of-b").await;
    let found = sh(
        &mut c,
        "iso-a",
        "find / -xdev -name 'secret-of-b' 2>/dev/null; ls /proc/*/root/ 2>/dev/null | grep -c secret-of-b; true",
    )
    .await;
    assert_eq!(found.trim(), "0", "box b's file seen from box a: {found}");
    assert_eq!(
        sh(&mut c, "iso-b", "cat /secret-of-b").await.trim(),
        "private",
        "control"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_with_an_empty_allow_list_has_no_network() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "iso-net", busybox_spec()).await;

    // A server on the host's loopback, answering anyone who connects.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            let mut conn = conn;
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    let url = format!("http://127.0.0.1:{port}/");
    // Control: the host reaches it.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert!(reply.ends_with("hello"), "{reply}");

    let out = run(
        &mut c,
        "iso-net",
        &["wget", "-q", "-O", "-", "-T", "3", &url],
    )
    .await;
    assert_ne!(out.exit.code, Some(0), "reached the host: {out:?}");
    assert!(!out.stdout_str().contains("hello"));
    // Only loopback, and no route anywhere.
    let devs = sh(&mut c, "iso-net", "cat /proc/net/dev").await;
    let names: Vec<&str> = devs
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(names, ["lo"], "{devs}");
    let routes = sh(&mut c, "iso-net", "cat /proc/net/route | wc -l").await;
    assert_eq!(routes.trim(), "1", "only the header: no routes");
    let dns = run(&mut c, "iso-net", &["nslookup", "example.com", "1.1.1.1"]).await;
    assert_ne!(dns.exit.code, Some(0), "{dns:?}");
}
