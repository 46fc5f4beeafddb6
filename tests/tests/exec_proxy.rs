//! `harness-box-exec` end to end: a real `boxd` (started by the test, or by
//! the proxy itself), the busybox image, the proxy as an agent host runs it.

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use boxd_tests::{Daemon, busybox, host_dir, v1};
use sha2::{Digest, Sha256};

/// `harness-box-exec --box NAME --image BUSYBOX ARGS… -- CMD…`.
fn proxy(d: &Daemon, name: &str, args: &[&str], cmd: &[&str]) -> Command {
    let mut c = d.proxy();
    c.args(["--box", name, "--image"])
        .arg(busybox())
        .args(args)
        .arg("--")
        .args(cmd);
    c
}

fn output(mut c: Command, stdin: &[u8]) -> std::process::Output {
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn harness-box-exec");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait");
    writer.join().unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn cat_round_trips_64_mib_byte_exact_and_stdout_holds_nothing_else() {
    let d = Daemon::start();
    let mut data = vec![0u8; 64 << 20];
    rand::fill(&mut data[..]);
    let begin = Instant::now();
    let out = output(proxy(&d, "cat", &["-v"], &["cat"]), &data);
    let took = begin.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout.len(), data.len(), "stdout length");
    assert!(
        Sha256::digest(&out.stdout) == Sha256::digest(&data),
        "stdout differs from stdin"
    );
    eprintln!(
        "64 MiB through `harness-box-exec -- cat` in {took:?} ({:.0} MiB/s)",
        64.0 / took.as_secs_f64()
    );
}

#[test]
fn exit_codes_and_stderr_pass_through() {
    let d = Daemon::start();
    let out = output(
        proxy(
            &d,
            "codes",
            &[],
            &["sh", "-c", "echo out; echo err >&2; exit 7"],
        ),
        b"",
    );
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(
        out.stdout, b"out\n",
        "stdout is the command's and nothing else"
    );
    assert!(text(&out.stderr).contains("err\n"), "{}", text(&out.stderr));

    let out = output(proxy(&d, "codes", &[], &["sh", "-c", "kill -KILL $$"]), b"");
    assert_eq!(out.status.code(), Some(128 + 9), "128+N for signal N");

    let out = output(proxy(&d, "codes", &[], &["no-such-binary"]), b"");
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
}

#[test]
fn stdin_eof_closes_the_commands_stdin() {
    let d = Daemon::start();
    let out = output(
        proxy(&d, "eof", &[], &["sh", "-c", "wc -c; echo done"]),
        b"12345",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).split_whitespace().collect::<Vec<_>>(),
        ["5", "done"]
    );
}

#[test]
fn provisions_only_when_the_probe_fails() {
    let d = Daemon::start();
    let args = [
        "--probe",
        "test -f /ready",
        "--provision",
        "echo provisioning-output; touch /ready",
    ];
    let first = output(proxy(&d, "prov", &args, &["echo", "hello"]), b"");
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(
        first.stdout, b"hello\n",
        "provisioning output stays off stdout"
    );
    let err = text(&first.stderr);
    assert!(err.contains("provisioning-output"), "{err}");
    assert!(err.contains("provisioned box prov in"), "{err}");

    let second = output(proxy(&d, "prov", &args, &["echo", "hello"]), b"");
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(second.stdout, b"hello\n");
    assert!(
        !text(&second.stderr).contains("provision"),
        "the probe hit, nothing was provisioned: {}",
        text(&second.stderr)
    );

    // A provisioning command that fails stops the proxy with 125.
    let bad = ["--probe", "false", "--provision", "echo trying >&2; exit 3"];
    let out = output(proxy(&d, "prov-bad", &bad, &["echo", "never"]), b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("provisioning failed"),
        "{}",
        text(&out.stderr)
    );

    // Provisioning that does not make the probe pass is an error too.
    let noop = ["--probe", "test -f /never", "--provision", "true"];
    let out = output(proxy(&d, "prov-noop", &noop, &["echo", "never"]), b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("still fails"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn mounts_workdir_and_env_reach_the_command() {
    let d = Daemon::start();
    let project = host_dir();
    std::fs::write(project.path().join("marker"), "from the host\n").unwrap();
    let mount = format!("{}:/workspace", project.path().display());
    let out = output(
        proxy(
            &d,
            "mounted",
            &[
                "--mount",
                &mount,
                "--workdir",
                "/workspace",
                "--env",
                "GREETING=hi there",
            ],
            &[
                "sh",
                "-c",
                "pwd; cat marker; echo \"$GREETING\"; echo edit > from-box",
            ],
        ),
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/workspace\nfrom the host\nhi there\n");
    assert_eq!(
        std::fs::read_to_string(project.path().join("from-box")).unwrap(),
        "edit\n",
        "the box's edits land in the project"
    );
}

#[test]
fn signals_are_forwarded_to_the_command() {
    let d = Daemon::start();
    for (signal, name) in [
        (libc::SIGTERM, "TERM"),
        (libc::SIGINT, "INT"),
        (libc::SIGHUP, "HUP"),
    ] {
        let script = format!(
            "trap 'echo got {name}; exit 9' {name}; echo ready; while :; do sleep 0.05; done"
        );
        let mut child = proxy(&d, "signals", &[], &["sh", "-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as i32, signal) };
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(rest, format!("got {name}\n"), "SIG{name}");
        assert_eq!(status.code(), Some(9), "SIG{name}");
    }
}

#[test]
fn a_killed_proxy_has_its_exec_reaped_and_the_box_stays() {
    let d = Daemon::start();
    let mut child = proxy(
        &d,
        "reap",
        &[],
        &["sh", "-c", "echo ready; exec sleep 1000"],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut client = d.client().await;
        let execs = |c: &mut boxd_tests::Client| {
            let mut c = c.clone();
            async move {
                c.list_execs(v1::ListExecsRequest {
                    box_name: "reap".into(),
                })
                .await
                .unwrap()
                .into_inner()
                .execs
                .iter()
                .filter(|e| !e.exited)
                .count()
            }
        };
        assert_eq!(execs(&mut client).await, 1);
        child.kill().unwrap();
        child.wait().unwrap();
        let killed = Instant::now();
        while execs(&mut client).await > 0 {
            assert!(
                killed.elapsed() < Duration::from_secs(5),
                "the exec outlived its proxy"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!(
            "exec reaped {:?} after its proxy was killed",
            killed.elapsed()
        );
        let info = client
            .inspect_box(v1::InspectBoxRequest {
                name: "reap".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(info.state, v1::BoxState::Running as i32, "the box stays");
        let ps = boxd_tests::sh(
            &mut client,
            "reap",
            "ps -o args | grep -c '^sleep 1000' || true",
        )
        .await;
        assert_eq!(ps.trim(), "0", "the command is gone from the box");
    });
}

#[test]
fn an_unknown_box_without_an_image_is_a_clear_error() {
    let d = Daemon::start();
    let out = output(
        {
            let mut c = d.proxy();
            c.args(["--box", "nothing-here", "--", "true"]);
            c
        },
        b"",
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("does not exist; give --image"),
        "{}",
        text(&out.stderr)
    );
    let out = output(proxy(&d, "bad-env", &["--env", "NOVALUE"], &["true"]), b"");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("use K=V"),
        "{}",
        text(&out.stderr)
    );
}

/// The pids of `boxd` processes serving `home`.
fn daemons_for(home: &std::path::Path) -> Vec<u32> {
    let needle = home.as_os_str().as_encoded_bytes().to_vec();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let mut args = cmdline.split(|b| *b == 0);
            let exe = args.next().unwrap_or_default();
            exe.ends_with(b"/boxd") && args.any(|a| a == needle.as_slice())
        })
        .collect()
}

#[test]
fn concurrent_proxies_start_one_daemon() {
    let dir = tempfile::Builder::new()
        .prefix("boxd-proxy-")
        .tempdir_in("/tmp")
        .unwrap();
    let home = dir.path().join("home");
    let children: Vec<_> = (0..6)
        .map(|i| {
            Command::new(boxd_tests::bin("harness-box-exec"))
                .env_remove("BOXD_SOCKET")
                .env("BOXD_HOME", &home)
                .args(["--raw", "--box", &format!("p{}", i % 2), "--image"])
                .arg(busybox())
                .args(["--", "echo", &format!("hello {i}")])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "proxy {i}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), format!("hello {i}\n"));
    }
    // Losers of the race exit on their own; give them a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut pids = daemons_for(&home);
    while pids.len() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        pids = daemons_for(&home);
    }
    assert_eq!(pids.len(), 1, "one daemon serves the home: {pids:?}");
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pids[0] as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemons_for(&home).is_empty() {
        assert!(Instant::now() < deadline, "boxd did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn publish_makes_the_command_reachable_from_the_host() {
    let d = Daemon::start();
    let bad = output(proxy(&d, "pub", &["--publish", "abc"], &["true"]), b"");
    assert_eq!(bad.status.code(), Some(125), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("invalid published port \"abc\""));
    assert!(bad.stdout.is_empty());

    // The agent's command serves one connection on box port 7000.
    let child = proxy(
        &d,
        "pub",
        &["--publish", "127.0.0.1:0:7000"],
        &["sh", "-c", "echo served | nc -l -p 7000"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = loop {
        assert!(Instant::now() < deadline, "never served through the port");
        let out = d.boxctl().args(["--json", "port", "pub"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if let Some(port) = v[0]["hostPort"].as_u64() {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
            let mut got = String::new();
            let _ = s.read_to_string(&mut got);
            if !got.is_empty() {
                break got;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(got, "served\n");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}
