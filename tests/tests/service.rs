//! boxd as a service: socket activation exactly as systemd does it (the
//! test holds the listening socket and starts boxd with it as fd 3,
//! `LISTEN_FDS=1` and `LISTEN_PID` set, and `NOTIFY_SOCKET` to hear
//! `READY=1`), idle exit and re-activation, the configuration file, the
//! protocol check in every client, and the service files.

use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use boxd_tests::{Daemon, bin, busybox};

struct Activated {
    dir: tempfile::TempDir,
    socket: PathBuf,
    listener: UnixListener,
    notify: UnixDatagram,
}

impl Activated {
    fn new() -> Activated {
        let dir = tempfile::Builder::new()
            .prefix("boxd-act-")
            .tempdir_in("/tmp")
            .unwrap();
        // As systemd makes it (DirectoryMode=0700): clients use a socket
        // only in a directory of their own alone.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir.path().join("run"))
            .unwrap();
        let socket = dir.path().join("run/boxd.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let notify = UnixDatagram::bind(dir.path().join("notify")).unwrap();
        notify
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Activated {
            dir,
            socket,
            listener,
            notify,
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Starts boxd the way systemd does: the socket as fd 3, LISTEN_FDS=1,
    /// LISTEN_PID = boxd's own pid (set by the shell that execs it). The
    /// caller waits for the child.
    #[allow(clippy::zombie_processes)]
    fn spawn(&self, idle_exit: u64) -> Child {
        let fd = self.listener.as_raw_fd();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" \"$@\"")
            .arg(bin("boxd"))
            .arg("--home")
            .arg(self.home())
            .args([
                "--engine",
                "namespace",
                "--idle-exit",
                &idle_exit.to_string(),
            ])
            .env("NOTIFY_SOCKET", self.dir.path().join("notify"))
            .env("RUST_LOG", "info")
            .env_remove("BOXD_SOCKET")
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only dup2/fcntl between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if fd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0);
                } else if libc::dup2(fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start boxd");
        // (A previous boxd's STOPPING=1 may still be queued.)
        let mut buf = [0u8; 64];
        loop {
            let n = self.notify.recv(&mut buf).expect("READY=1 within 20 s");
            if &buf[..n] == b"READY=1" {
                return child;
            }
            assert_eq!(&buf[..n], b"STOPPING=1");
        }
    }

    fn boxctl(&self) -> Command {
        let mut c = Command::new(bin("boxctl"));
        c.env("BOXD_SOCKET", &self.socket)
            .env("BOXD_HOME", self.home());
        c
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn ok(mut c: Command) -> String {
    let out = c.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_activated_boxd_serves_exits_when_idle_and_is_started_again() {
    let a = Activated::new();
    let mut boxd = a.spawn(1);
    let mut c = a.boxctl();
    c.args(["--json", "daemon", "status"]);
    let status: serde_json::Value = serde_json::from_str(&ok(c)).unwrap();
    assert_eq!(
        status["daemon"]["pid"],
        boxd.id(),
        "the activated boxd answers"
    );

    // No client, no box: it exits (status 0) and leaves the socket alone.
    let exited = wait_exit(&mut boxd, Duration::from_secs(10)).expect("idle exit");
    assert!(exited.success(), "{exited}");
    assert!(
        a.socket.exists(),
        "the socket belongs to the service manager"
    );

    // A client connecting now waits in the socket's backlog; starting boxd
    // again on the same socket (what systemd does on that connection)
    // serves it.
    let mut client = a.boxctl();
    let waiting = client
        .args(["ls"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut again = a.spawn(1);
    let out = waiting.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = wait_exit(&mut again, Duration::from_secs(10)).expect("idle exit again");
}

#[test]
fn a_running_box_or_an_open_client_keeps_an_idle_daemon_up() {
    let a = Activated::new();
    let mut boxd = a.spawn(1);
    let mut c = a.boxctl();
    c.args(["create", "keep", "--image"]).arg(busybox());
    ok(c);
    let mut c = a.boxctl();
    c.args(["start", "keep"]);
    ok(c);
    assert!(
        wait_exit(&mut boxd, Duration::from_secs(3)).is_none(),
        "a running box keeps boxd up"
    );
    let mut c = a.boxctl();
    c.args(["stop", "keep"]);
    ok(c);
    // An open client (an event stream) keeps it up too.
    let mut watch = a.boxctl();
    let mut events = watch
        .args(["events"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_exit(&mut boxd, Duration::from_secs(3)).is_none(),
        "a connected client keeps boxd up"
    );
    events.kill().unwrap();
    events.wait().unwrap();
    let exited = wait_exit(&mut boxd, Duration::from_secs(10)).expect("idle exit");
    assert!(exited.success());
}

#[test]
fn print_config_merges_flags_environment_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        "engine = \"namespace\"\nidle-exit = 120\nhome = \"/srv/boxd-home\"\n",
    )
    .unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(bin("boxd"));
        c.arg("--config")
            .arg(&file)
            .args(args)
            .arg("--print-config");
        c.env_remove("BOXD_SOCKET").env_remove("BOXD_HOME");
        for (k, v) in env {
            c.env(k, v);
        }
        ok(c)
    };
    let merged = run(&[], &[]);
    assert!(merged.contains("engine = \"namespace\""), "{merged}");
    assert!(merged.contains("idle-exit = 120"), "{merged}");
    assert!(merged.contains("home = \"/srv/boxd-home\""), "{merged}");
    assert!(
        merged.contains("socket = \"/srv/boxd-home/run/boxd.sock\""),
        "{merged}"
    );
    assert!(merged.contains(&format!("config-file = \"{}\"", file.display())));
    let over = run(&["--idle-exit", "5"], &[("BOXD_ENGINE", "auto")]);
    assert!(over.contains("idle-exit = 5"), "flags win: {over}");
    assert!(
        over.contains("engine = \"auto\""),
        "environment wins over the file: {over}"
    );

    std::fs::write(&file, "idle_exit = 1\n").unwrap();
    let out = Command::new(bin("boxd"))
        .arg("--config")
        .arg(&file)
        .arg("--print-config")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field"));
}

#[test]
fn every_client_refuses_a_daemon_of_another_protocol() {
    let d = Daemon::with_env(
        "namespace",
        vec![("BOXD_TEST_PROTOCOL".into(), "boxd.v0".into())],
    );
    let out = d.boxctl().arg("ls").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("speaks protocol boxd.v0, this client speaks boxd.v1"),
        "{err}"
    );

    let out = d
        .proxy()
        .args(["--box", "x", "--image"])
        .arg(busybox())
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("speaks protocol boxd.v0"), "{err}");

    let mut j = boxd_tests::Jsonl::start(&d.socket);
    let reply = j.call(1, "host.describe", serde_json::json!({}));
    assert_eq!(reply["error"]["code"], "unavailable", "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("speaks protocol boxd.v0"),
        "{reply}"
    );
    j.close();

    // `daemon status` still reports it, and says what is wrong.
    let out = d.boxctl().args(["daemon", "status"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("protocol: boxd speaks boxd.v0"), "{text}");
}

#[test]
fn the_systemd_units_install_verify_and_uninstall() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let run = |args: &[&str]| {
        let mut c = Command::new(bin("boxctl"));
        c.env("XDG_CONFIG_HOME", &config).args(args);
        ok(c)
    };
    run(&["daemon", "install", "--no-start", "--idle-exit", "60"]);
    let units = config.join("systemd/user");
    let service = std::fs::read_to_string(units.join("boxd.service")).unwrap();
    let boxd = std::fs::canonicalize(bin("boxd")).unwrap();
    assert!(service.contains(&format!("ExecStart={} --idle-exit 60", boxd.display())));
    if Path::new("/usr/bin/systemd-analyze").exists() {
        let runtime = dir.path().join("runtime");
        std::fs::create_dir_all(&runtime).unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", "--user"])
            .arg(units.join("boxd.socket"))
            .arg(units.join("boxd.service"))
            .env("XDG_RUNTIME_DIR", &runtime)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "systemd-analyze verify: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    run(&["daemon", "uninstall"]);
    assert!(!units.join("boxd.service").exists());
    assert!(!units.join("boxd.socket").exists());
}

#[test]
fn daemon_logs_shows_the_log() {
    let d = Daemon::with_env("namespace", vec![("RUST_LOG".into(), "info".into())]);
    // boxd's log file is written by a background thread, so its "serving"
    // line may reach the file a moment after the socket answers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = d
            .boxctl()
            .args(["daemon", "logs", "-n", "20"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let shown = String::from_utf8_lossy(&out.stdout);
        if shown.contains("boxd is serving") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{shown}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
