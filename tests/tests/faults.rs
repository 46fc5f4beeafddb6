//! Faults: a crashed daemon, killed clients, a full disk, a stale socket
//! and lock, a box's init killed from outside. Run with `make faults`; each
//! test prints what it observed (`--nocapture`), which docs/reliability.md
//! records.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use boxd_tests::*;

fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
}

/// Every process that runs (zombies, dead and waiting to be reaped by
/// whoever inherited them, are not counted).
fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, r)| !r.starts_with('Z'))
            })
        })
        .collect()
}

fn pid_ns(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// The supervisors of the boxes under `home`: the processes listening on
/// `home/boxes/*/supervisor.sock` (found through /proc/net/unix).
fn supervisor_pids(home: &std::path::Path) -> Vec<i32> {
    let prefix = home.join("boxes").display().to_string();
    let inodes: Vec<String> = std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 8 && w[7].starts_with(&prefix) && w[7].ends_with("supervisor.sock"))
                .then(|| format!("socket:[{}]", w[6]))
        })
        .collect();
    all_pids()
        .into_iter()
        .filter(|p| {
            std::fs::read_dir(format!("/proc/{p}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path())
                        .is_ok_and(|l| inodes.contains(&l.display().to_string()))
                })
            })
        })
        .collect()
}

/// The boxes of the daemon whose home is `home`: for each `bwrap` its
/// boxes' supervisors started, the box's name, pid 1 and pid namespace.
fn boxes_of(home: &std::path::Path) -> Vec<(String, i32, PathBuf)> {
    let sups = supervisor_pids(home);
    let pids = all_pids();
    let mut out = Vec::new();
    for bwrap in pids
        .iter()
        .copied()
        .filter(|p| ppid(*p).is_some_and(|pp| sups.contains(&pp)))
    {
        let cmdline = std::fs::read_to_string(format!("/proc/{bwrap}/cmdline")).unwrap_or_default();
        let words: Vec<&str> = cmdline.split('\0').collect();
        let Some(i) = words.iter().position(|w| *w == "--hostname") else {
            continue;
        };
        for pid1 in pids.iter().copied().filter(|p| ppid(*p) == Some(bwrap)) {
            if let Some(ns) = pid_ns(pid1) {
                out.push((words[i + 1].to_owned(), pid1, ns));
            }
        }
    }
    out
}

/// Whether a process with this command line runs in one of the spaces.
fn running_in(spaces: &[PathBuf], cmdline: &str) -> bool {
    all_pids().into_iter().any(|p| {
        pid_ns(p).is_some_and(|ns| spaces.contains(&ns))
            && std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|l| l.replace('\0', " ").trim_end() == cmdline)
    })
}

/// Waits until `cond` holds; returns how long that took, or panics with
/// `what` after `limit`.
fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let begin = Instant::now();
    while !cond() {
        assert!(begin.elapsed() < limit, "{what} (waited {limit:?})");
        std::thread::sleep(Duration::from_millis(5));
    }
    begin.elapsed()
}

/// Waits for a child with a deadline; panics if it hangs.
fn wait_child(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let begin = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if begin.elapsed() > limit {
            let _ = child.kill();
            panic!("{what} hung for {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut s);
    }
    s
}

/// One exec's work: 60 bursts of 1,000 numbered lines, 100 ms apart (so
/// that it streams across a daemon's crash and restart), then `exit CODE`.
fn bursts(code: usize) -> String {
    format!(
        "for i in $(seq 1 60); do seq $((i*1000)) $((i*1000+999)); usleep 100000; done; exit {code}"
    )
}

/// What [`bursts`] prints.
fn bursts_output() -> String {
    (1..=60u64)
        .flat_map(|i| i * 1000..=i * 1000 + 999)
        .map(|n| format!("{n}\n"))
        .collect()
}

/// The supervisors of a daemon's boxes (by their sockets in its home).
fn supervisors(home: &std::path::Path) -> usize {
    std::fs::read_dir(home.join("boxes"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("supervisor.sock").exists())
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_under_fifty_streaming_execs_every_exec_completes_byte_exact() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let boxes: Vec<String> = (0..5).map(|i| format!("crash-{i}")).collect();
    for b in &boxes {
        up(&mut c, b, busybox_spec()).await;
        sh(
            &mut c,
            b,
            &format!("echo kept-{b} > /kept; mkdir -p /data/deep; echo {b} > /data/deep/file"),
        )
        .await;
    }
    let expected = bursts_output();
    let out_dir = tempfile::tempdir().unwrap();

    // 50 streaming execs through every client: 30 `boxctl exec`, 10
    // `harness-box-exec`, 10 in one `boxctl jsonl` driver; each exits with
    // a code of its own.
    let mut clients: Vec<(String, usize, PathBuf, Child)> = Vec::new();
    for i in 0..40 {
        let (what, mut cmd) = if i < 30 {
            let mut cmd = d.boxctl();
            cmd.args(["exec", &boxes[i % 5], "--"]);
            ("boxctl exec", cmd)
        } else {
            let mut cmd = d.proxy();
            cmd.args(["--box", &boxes[i % 5], "--"]);
            ("harness-box-exec", cmd)
        };
        let out = out_dir.path().join(format!("out-{i}"));
        let code = 3 + i % 50;
        let child = cmd
            .args(["sh", "-c", &bursts(code)])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        clients.push((format!("{what} #{i}"), code, out, child));
    }
    let mut jsonl = Jsonl::start(&d.socket);
    let mut jsonl_execs = std::collections::BTreeMap::new();
    for i in 40..50usize {
        let code = 3 + i;
        let reply = jsonl.call(
            100 + i as u64,
            "box.exec",
            serde_json::json!({"name": boxes[i % 5], "command": "sh", "args": ["-c", bursts(code)]}),
        );
        let id = reply["result"]["execId"].as_str().unwrap().to_owned();
        jsonl_execs.insert(id, code);
    }
    let running = wait_until(Duration::from_secs(30), "50 execs running", || {
        let n: usize = boxes
            .iter()
            .map(|b| {
                let out = d.boxctl().args(["inspect", b, "--json"]).output().unwrap();
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                v["runningExecs"].as_u64().unwrap_or(0) as usize
            })
            .sum();
        n >= 50
    });
    std::thread::sleep(Duration::from_millis(1500));
    println!("50 execs streaming after {running:?}; SIGKILL to boxd");
    let killed_at = Instant::now();
    d.kill();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(supervisors(&d.home), 5, "every box outlives its daemon");
    d.restart();
    let restarted = killed_at.elapsed();

    // Every exec completes, byte-exact, with its own exit code.
    for (what, code, out, child) in &mut clients {
        let status = wait_child(child, Duration::from_secs(90), what);
        let err = stderr_of(child);
        assert_eq!(status.code(), Some(*code as i32), "{what}: {status} {err}");
        let got = std::fs::read_to_string(&*out).unwrap();
        assert!(
            got == expected,
            "{what}: {} bytes of {}, not byte-exact; stderr: {err}",
            got.len(),
            expected.len()
        );
    }
    let is_exit = |f: &serde_json::Value| f["type"] == "exit";
    while jsonl.seen.iter().filter(|f| is_exit(f)).count() < jsonl_execs.len() {
        jsonl.next_frame();
    }
    // Every frame the driver wrote, in order (replies' reads included).
    let mut data: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    let mut exits = std::collections::BTreeMap::new();
    for f in &jsonl.seen {
        let Some(id) = f["execId"].as_str() else {
            continue;
        };
        match f["type"].as_str() {
            Some("output") if f["stream"] == "stdout" => {
                let bytes = match (f["data"].as_str(), f["dataBase64"].as_str()) {
                    (Some(t), _) => t.as_bytes().to_vec(),
                    (None, Some(b)) => {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD.decode(b).unwrap()
                    }
                    _ => Vec::new(),
                };
                data.entry(id.to_owned()).or_default().extend(bytes);
            }
            Some("exit") => {
                exits.insert(id.to_owned(), f.clone());
            }
            _ => {}
        }
    }
    for (id, code) in &jsonl_execs {
        let exit = &exits[id];
        assert_eq!(exit["exitCode"], *code as u64, "jsonl exec {id}: {exit}");
        let got = data.get(id).cloned().unwrap_or_default();
        assert!(
            got == expected.as_bytes(),
            "jsonl exec {id}: {} bytes of {}",
            got.len(),
            expected.len()
        );
    }
    println!(
        "boxd restarted {restarted:?} after the SIGKILL; all 50 execs completed byte-exact \
         ({} bytes each) with their own exit codes, {:?} after the SIGKILL",
        expected.len(),
        killed_at.elapsed()
    );

    // The boxes ran on: files intact, no restart needed.
    let mut c = d.client().await;
    for info in list(&mut c).await {
        assert_eq!(info.state, v1::BoxState::Running as i32, "{info:?}");
    }
    for b in &boxes {
        let got = sh(&mut c, b, "cat /kept /data/deep/file").await;
        assert_eq!(got, format!("kept-{b}\n{b}\n"));
    }
}

/// Stdin too: bytes written while the daemon restarts reach the command
/// once each, in order.
#[tokio::test(flavor = "multi_thread")]
async fn stdin_and_stdout_cross_a_daemon_restart_byte_exact() {
    use std::io::Write;
    let mut d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "pipe", busybox_spec()).await;
    let mut child = d
        .proxy()
        .args(["--box", "pipe", "--", "sh", "-c", "cat; exit 5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut got).unwrap();
        got
    });
    let mut stdin = child.stdin.take().unwrap();
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let (first, rest) = data.split_at(data.len() / 2);
    stdin.write_all(first).unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let begin = Instant::now();
    d.restart(); // SIGTERM, then a new daemon
    println!("boxd stopped and started again in {:?}", begin.elapsed());
    stdin.write_all(rest).unwrap();
    drop(stdin);
    let status = wait_child(&mut child, Duration::from_secs(60), "harness-box-exec");
    let err = stderr_of(&mut child);
    let got = reader.join().unwrap();
    assert_eq!(status.code(), Some(5), "{err}");
    assert!(
        got == data,
        "{} bytes of {} came back; stderr: {err}",
        got.len(),
        data.len()
    );
    println!(
        "4 MiB through `cat` across a daemon restart, byte-exact; the proxy said: {}",
        err.trim()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_socket_and_lock_after_a_crash_need_no_manual_step() {
    let mut d = Daemon::start();
    let pid = d.pid();
    d.kill();
    assert!(d.socket.exists(), "a crash leaves the socket file behind");
    let lock = std::fs::read_to_string(d.home.join("boxd.lock")).unwrap();
    assert!(
        lock.contains(&pid.to_string()),
        "and the lock names the dead daemon: {lock}"
    );

    // A client that starts the daemon on demand.
    let out = d
        .proxy()
        .env("BOXD_ENGINE", "namespace")
        .args(["--box", "after-crash", "--image"])
        .arg(busybox())
        .args(["--", "echo", "up"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "up\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = d
        .boxctl()
        .args(["daemon", "status", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let new_pid = v["daemon"]["pid"].as_u64().unwrap();
    assert_ne!(new_pid, pid as u64);
    // Stop that daemon so the next start is ours again.
    let out = d.boxctl().args(["daemon", "stop"]).output().unwrap();
    assert!(out.status.success());
    // And the plain start over a stale socket and lock, again.
    d.restart();
    d.kill();
    d.restart();
    let mut c = d.client().await;
    start(&mut c, "after-crash").await;
    assert_eq!(sh(&mut c, "after-crash", "echo again").await, "again\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_client_has_its_exec_reaped() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "reap", busybox_spec()).await;
    let spaces: Vec<PathBuf> = boxes_of(&d.home).into_iter().map(|b| b.2).collect();
    let sleeping = |c: &str| running_in(&spaces, c);
    type MakeClient<'a> = Box<dyn Fn(&str) -> Command + 'a>;
    let clients: [(&str, MakeClient); 3] = [
        (
            "boxctl exec",
            Box::new(|m| {
                let mut cmd = d.boxctl();
                cmd.args(["exec", "reap", "--", "sleep", m]);
                cmd
            }),
        ),
        (
            "harness-box-exec",
            Box::new(|m| {
                let mut cmd = d.proxy();
                cmd.args(["--box", "reap", "--", "sleep", m]);
                cmd
            }),
        ),
        (
            "boxctl jsonl",
            Box::new(|m| {
                let mut cmd = d.boxctl();
                cmd.arg("jsonl");
                let _ = m;
                cmd
            }),
        ),
    ];
    for (i, (what, make)) in clients.iter().enumerate() {
        let mark = format!("{}", 7000 + i);
        let mut cmd = make(&mark);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if *what == "boxctl jsonl" {
            use std::io::Write;
            let line = serde_json::json!({"id": 1, "method": "box.exec", "params": {"name": "reap", "command": "sleep", "args": [mark]}});
            writeln!(child.stdin.as_mut().unwrap(), "{line}").unwrap();
        }
        wait_until(Duration::from_secs(20), "the command started", || {
            sleeping(&format!("sleep {mark}"))
        });
        child.kill().unwrap();
        let _ = child.wait();
        let took = wait_until(Duration::from_secs(10), "the exec was not reaped", || {
            !sleeping(&format!("sleep {mark}"))
        });
        println!("{what} SIGKILLed: its command was reaped {took:?} later");
    }
    // The box stays, and every exec of it was killed (boxd keeps them,
    // exited, with their last output). The exit reaches boxd from the
    // box's supervisor a moment after the process is gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let execs = loop {
        let execs = c
            .list_execs(v1::ListExecsRequest {
                box_name: "reap".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .execs;
        if execs.iter().all(|e| e.exited) || std::time::Instant::now() > deadline {
            break execs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        execs
            .iter()
            .all(|e| e.exited && e.exit.as_ref().and_then(|x| x.signal) == Some(9)),
        "{execs:?}"
    );
    assert_eq!(sh(&mut c, "reap", "echo still").await, "still\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_home_gives_clear_errors_and_corrupts_nothing() {
    let d = Daemon::with_tmpfs_home("24m");
    let mut c = d.client().await;
    up(&mut c, "full-a", busybox_spec()).await;
    sh(&mut c, "full-a", "echo precious > /precious").await;

    // Fill the disk from inside the box (its root is on the same tmpfs).
    let out = run(
        &mut c,
        "full-a",
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/filler bs=1M count=64 2>&1; df -k / | tail -1",
        ],
    )
    .await;
    let fill = out.stdout_str();
    assert!(fill.contains("No space left"), "the disk filled up: {fill}");

    // A create copies the image: refused with the reason, nothing left behind.
    let full = |c: &mut Client, name: &str, spec: v1::BoxSpec| {
        let mut c = c.clone();
        let name = name.to_owned();
        async move {
            let err = c
                .create_box(v1::CreateBoxRequest {
                    name,
                    spec: Some(spec),
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert_eq!(
                err.code(),
                boxd_client::tonic::Code::ResourceExhausted,
                "{err:?}"
            );
            assert!(err.message().contains("no space left"), "{}", err.message());
            err
        }
    };
    let err = full(&mut c, "full-b", busybox_spec()).await;
    println!("create on a full disk: {:?}: {}", err.code(), err.message());
    // A new image cannot be unpacked either.
    let dir = tempfile::tempdir().unwrap();
    boxd_tests::image::layout_with(
        dir.path(),
        &[(
            boxd_tests::image::host_arch(),
            vec![boxd_tests::image::file_layer("big", &vec![7u8; 4 << 20])],
        )],
    );
    let image = v1::BoxSpec {
        image: dir.path().to_string_lossy().into_owned(),
        ..Default::default()
    };
    let err = full(&mut c, "full-c", image).await;
    println!("unpack on a full disk: {:?}: {}", err.code(), err.message());

    // The daemon is up; the stored box and its files are intact.
    let listed = list(&mut c).await;
    assert_eq!(
        listed.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        ["full-a"]
    );
    assert_eq!(sh(&mut c, "full-a", "cat /precious").await, "precious\n");
    // Stop and start write the record: on a full disk the error says so,
    // and the record on disk stays whole.
    let stop = c
        .stop_box(v1::StopBoxRequest {
            name: "full-a".into(),
            ..Default::default()
        })
        .await;
    println!(
        "stop on a full disk: {:?}",
        stop.as_ref()
            .map(|_| "ok")
            .map_err(|e| e.message().to_owned())
    );
    if let Err(e) = &stop {
        assert_eq!(
            e.code(),
            boxd_client::tonic::Code::ResourceExhausted,
            "{e:?}"
        );
    }
    c.start_box(v1::StartBoxRequest {
        name: "full-a".into(),
    })
    .await
    .ok();

    // Free the space: everything works again, and nothing was corrupted.
    c.start_box(v1::StartBoxRequest {
        name: "full-a".into(),
    })
    .await
    .ok();
    let freed = run(&mut c, "full-a", &["rm", "/filler"]).await;
    assert_eq!(freed.exit.code, Some(0), "{freed:?}");
    up(&mut c, "full-b", busybox_spec()).await;
    assert_eq!(sh(&mut c, "full-a", "cat /precious").await, "precious\n");
    assert_eq!(sh(&mut c, "full-b", "echo fresh").await, "fresh\n");
    let boxes = list(&mut c).await;
    assert_eq!(boxes.len(), 2, "{boxes:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_box_whose_init_is_killed_is_reported_and_its_execs_end_with_an_error() {
    let d = Daemon::start();
    let mut c = d.client().await;
    // It publishes a port, which must close with it.
    let spec = v1::BoxSpec {
        ports: vec![v1::PortMapping {
            box_port: 8000,
            ..Default::default()
        }],
        ..busybox_spec()
    };
    let published = up(&mut c, "victim", spec).await.ports[0].clone();
    let port_addr = format!("{}:{}", published.host_ip, published.host_port);
    assert!(std::net::TcpStream::connect(&port_addr).is_ok());
    up(&mut c, "bystander", busybox_spec()).await;
    let mut events = c
        .watch_boxes(v1::WatchBoxesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let exec = ExecStream::start(&mut c, start_req("victim", &["sleep", "1000"]))
        .await
        .unwrap();

    let (_, pid1, _) = boxes_of(&d.home)
        .into_iter()
        .find(|b| b.0 == "victim")
        .expect("the victim's pid 1");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid1, libc::SIGKILL) }, 0);

    let out = tokio::time::timeout(Duration::from_secs(20), collect(exec))
        .await
        .expect("the exec ended");
    assert_eq!(out.exit.signal, Some(9), "{out:?}");
    assert!(out.exit.error.contains("box ended"), "{:?}", out.exit.error);
    println!(
        "exec in the killed box: signal 9, error {:?}",
        out.exit.error
    );

    let failed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = events.message().await.unwrap().unwrap();
            if e.name == "victim" && e.state == v1::BoxState::Failed as i32 {
                return e;
            }
        }
    })
    .await
    .expect("a failed event");
    println!("event: failed, {:?}", failed.message);
    let info = c
        .inspect_box(v1::InspectBoxRequest {
            name: "victim".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.state, v1::BoxState::Failed as i32);
    assert!(info.error.contains("init was killed"), "{}", info.error);
    assert!(info.ports.is_empty(), "{:?}", info.ports);
    assert!(
        std::net::TcpStream::connect(&port_addr).is_err(),
        "the published port closed with the box"
    );
    println!("its published port {port_addr} closed with it");

    // The daemon and the other box are fine; the victim starts again.
    assert_eq!(sh(&mut c, "bystander", "echo fine").await, "fine\n");
    start(&mut c, "victim").await;
    assert_eq!(sh(&mut c, "victim", "echo back").await, "back\n");
}
