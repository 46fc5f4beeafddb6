//! A hostile image (or box, or remote BoxLite server) writes terminal
//! escape sequences into what boxd's clients print: an image whose
//! `User` is `ESC]0;pwned-title BEL ESC]52;c;cHduZWQ= BEL` (a window
//! title and a clipboard write) with no passwd entry for it makes every
//! exec fail with an error that quotes the name. Every client prints such
//! text escaped (`boxd_client::untrusted`): the raw ESC (0x1b) and BEL
//! (0x07) never reach the terminal, a visible `\x1b]0;pwned-title` (or
//! the daemon's `\u{1b}]0;pwned-title`) does. Last, the real check: the
//! same exec in a tmux pane leaves the pane's title and tmux's clipboard
//! buffers alone.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use boxd_tests::*;

/// The image's `User`: a window title, then a clipboard write ("pwned").
const HOSTILE: &str = "\x1b]0;pwned-title\x07\x1b]52;c;cHduZWQ=\x07";
/// The title sequence as a terminal shows it escaped: boxctl's and
/// tracing's `\x1b`, the daemon's `{:?}` (`\u{1b}`), JSON's `\u001b`.
const VISIBLE: [&str; 3] = [
    "\\x1b]0;pwned-title",
    "\\u{1b}]0;pwned-title",
    "\\u001b]0;pwned-title",
];
/// The same, then a carriage return (overwrites the line) and SO (switches
/// the terminal's character set): what tracing's own sanitizer leaves.
const HOSTILE_C0: &str = "\x1b]0;pwned-title\x07\rhidden\x0e";

/// The busybox image with `config` as its config (no passwd entry for
/// any hostile user: busybox's has root and nobody).
fn image(dir: &Path, config: serde_json::Value) -> PathBuf {
    boxd_tests::image::busybox_layout_with_config(dir, config)
}

/// An image whose `User` is `user`.
fn user_image(dir: &Path, user: &str) -> PathBuf {
    image(
        dir,
        serde_json::json!({
            "User": user,
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"],
            "Cmd": ["sh"],
            "Labels": {"title": HOSTILE},
        }),
    )
}

/// Creates and starts box `name` from `image`, with `env`.
async fn up_from(c: &mut Client, name: &str, image: &Path, env: &[(&str, &str)]) {
    let spec = v1::BoxSpec {
        image: image.to_string_lossy().into_owned(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    up(c, name, spec).await;
}

/// The control characters a terminal would obey in `bytes`: C0 (but
/// newline and tab), DEL, and C1 as UTF-8 (`0xc2 0x80..=0x9f`).
fn raw_controls(bytes: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        let c1 = *b == 0xc2 && bytes.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n));
        if (*b < 0x20 && *b != b'\n' && *b != b'\t') || *b == 0x7f || c1 {
            found.push(format!("0x{b:02x} at {i}"));
        }
    }
    found
}

/// What one client printed, as observed.
struct Seen {
    what: String,
    bytes: Vec<u8>,
}

impl Seen {
    fn of(what: impl Into<String>, bytes: &[u8]) -> Seen {
        let s = Seen {
            what: what.into(),
            bytes: bytes.to_vec(),
        };
        println!(
            "{}: {}",
            s.what,
            String::from_utf8_lossy(&s.bytes).escape_debug()
        );
        s
    }

    /// No raw control character; the title's text is there, escaped.
    fn check(&self) -> Result<(), String> {
        let raw = raw_controls(&self.bytes);
        let text = String::from_utf8_lossy(&self.bytes);
        if !raw.is_empty() {
            return Err(format!(
                "{}: raw control characters {raw:?} in {:?}",
                self.what, text
            ));
        }
        if !VISIBLE.iter().any(|v| text.contains(v)) {
            return Err(format!(
                "{}: no visible escaped form of the title in {text:?}",
                self.what
            ));
        }
        Ok(())
    }
}

/// Every check at once, after the boxes are gone: each failure named.
fn all_clean(seen: &[Seen]) {
    let failures: Vec<String> = seen.iter().filter_map(|s| s.check().err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run the command")
}

/// `boxctl exec BOX -- true` as the image's hostile user (no passwd entry):
/// the exec fails (126) with boxd's "unable to find user", which boxctl
/// prints escaped; so do `attach` to that exec, `logs` (whose headers show
/// an argv a hostile client gave) and `run` of an image whose `Cmd` names a
/// hostile program.
#[tokio::test(flavor = "multi_thread")]
async fn exec_attach_logs_and_run_print_an_image_s_user_escaped() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let img = user_image(&d.dir.path().join("hostile-user"), HOSTILE);
    up_from(&mut c, "hostile", &img, &[]).await;
    let mut seen = Vec::new();

    let out = run(d.boxctl().args(["exec", "hostile", "--", "true"]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    seen.push(Seen::of("boxctl exec: stderr", &out.stderr));
    let out = run(d.boxctl().args(["--json", "exec", "hostile", "--", "true"]));
    seen.push(Seen::of("boxctl --json exec: stderr", &out.stderr));

    // Two execs of a hostile client's argv (the same user error ends them).
    for _ in 0..2 {
        let exec = ExecStream::start(&mut c, start_req("hostile", &["true", HOSTILE]))
            .await
            .expect("exec start");
        let done = collect(exec).await;
        assert_eq!(done.exit.code, Some(126), "{done:?}");
    }
    let execs = c
        .list_execs(v1::ListExecsRequest {
            box_name: "hostile".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .execs;
    let out = run(d.boxctl().args(["attach", &execs[0].exec_id]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    seen.push(Seen::of("boxctl attach: stderr", &out.stderr));
    let out = run(d.boxctl().args(["logs", "hostile"]));
    assert!(out.status.success(), "{out:?}");
    seen.push(Seen::of("boxctl logs (headers): stderr", &out.stderr));

    // An image whose Cmd names a program called the title sequence.
    let cmd_img = image(
        &d.dir.path().join("hostile-cmd"),
        serde_json::json!({"Env": ["PATH=/bin"], "Cmd": [format!("/bin/{HOSTILE}")]}),
    );
    let out = run(d
        .boxctl()
        .args(["run", "--rm", "--name", "hostile-cmd"])
        .arg(&cmd_img));
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    seen.push(Seen::of("boxctl run (image's Cmd): stderr", &out.stderr));

    remove(&mut c, "hostile").await;
    if list(&mut c).await.iter().any(|b| b.name == "hostile-cmd") {
        remove(&mut c, "hostile-cmd").await;
    }
    all_clean(&seen);
}

/// `boxctl inspect` shows a box's env values (which an imported box
/// archive or another client chose): the human form is JSON, escaped by
/// serde; `--format` prints strings unquoted, escaped by boxctl.
#[tokio::test(flavor = "multi_thread")]
async fn inspect_prints_env_values_escaped() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up_from(&mut c, "hostile-env", &busybox(), &[("T", HOSTILE)]).await;
    let mut seen = Vec::new();
    let out = run(d.boxctl().args(["inspect", "hostile-env"]));
    assert!(out.status.success(), "{out:?}");
    seen.push(Seen::of("boxctl inspect: stdout", &out.stdout));
    for format in [
        r#"{{index .Spec.Env "T"}}"#,
        "{{.Spec.Env}}",
        "{{json .Spec}}",
    ] {
        let out = run(d
            .boxctl()
            .args(["inspect", "--format", format, "hostile-env"]));
        assert!(out.status.success(), "{out:?}");
        seen.push(Seen::of(
            format!("boxctl inspect --format '{format}': stdout"),
            &out.stdout,
        ));
    }
    remove(&mut c, "hostile-env").await;
    all_clean(&seen);
}

/// `harness-box-exec --raw --box NAME -- true` logs boxd's error through
/// tracing to its stderr: escaped there too, CR and SO included (which
/// tracing's own sanitizer lets through).
#[tokio::test(flavor = "multi_thread")]
async fn harness_box_exec_logs_boxd_s_errors_escaped() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let img = user_image(&d.dir.path().join("hostile-c0"), HOSTILE_C0);
    up_from(&mut c, "hostile-c0", &img, &[]).await;
    let out = run(d.proxy().args(["--box", "hostile-c0", "--", "true"]));
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let seen = vec![Seen::of("harness-box-exec --raw: stderr", &out.stderr)];
    remove(&mut c, "hostile-c0").await;
    all_clean(&seen);
}

/// A BoxLite REST server on loopback that answers every request with a 500
/// whose error message is [`HOSTILE`]; its URL.
fn hostile_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                // The request's head, then its body (Content-Length).
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match conn.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let _ = (&mut conn).take(len as u64).read_to_end(&mut Vec::new());
                let body = serde_json::json!({"error": {"message": HOSTILE, "code": "internal"}})
                    .to_string();
                let _ = write!(
                    conn,
                    "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// boxd on a hostile remote BoxLite server: the server's error bodies reach
/// `daemon status` and `doctor` (the engine's problem) and every failed
/// request's error, escaped in each.
#[tokio::test(flavor = "multi_thread")]
async fn daemon_status_doctor_and_errors_escape_a_remote_server_s_words() {
    let url = hostile_server();
    let d = Daemon::with_env("boxlite", vec![("BOXD_BOXLITE_URL".into(), url)]);
    let mut seen = Vec::new();
    let out = run(d.boxctl().args(["daemon", "status"]));
    seen.push(Seen::of("boxctl daemon status: stdout", &out.stdout));
    let out = run(d.boxctl().arg("doctor"));
    seen.push(Seen::of("boxctl doctor: stdout", &out.stdout));
    let out = run(d
        .boxctl()
        .args(["create", "--name", "remote-box", "busybox:latest"]));
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    seen.push(Seen::of("boxctl create: stderr", &out.stderr));
    // Nothing was created (the server refused everything).
    all_clean(&seen);
}

/// `--boxlite-url http://` to a host that is not this one would send the
/// API key (and every box's traffic) in clear: boxd refuses to start,
/// saying how to proceed, unless `BOXD_BOXLITE_INSECURE_HTTP=1` accepts it.
#[test]
fn plain_http_to_another_host_is_refused_at_start() {
    let dir = tempfile::Builder::new()
        .prefix("boxd-test-")
        .tempdir_in("/tmp")
        .unwrap();
    let boxd = |insecure: bool| {
        let mut cmd = Command::new(bin("boxd"));
        cmd.arg("--socket")
            .arg(dir.path().join("run/boxd.sock"))
            .arg("--home")
            .arg(dir.path().join("home"))
            .args(["--engine", "boxlite", "--boxlite-url"])
            // TEST-NET-1: never answers; nothing is sent there.
            .arg("http://192.0.2.1:8100")
            .env("RUST_LOG", "warn")
            .env_remove("BOXD_BOXLITE_INSECURE_HTTP")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if insecure {
            cmd.env("BOXD_BOXLITE_INSECURE_HTTP", "1");
        }
        cmd.spawn().expect("spawn boxd")
    };
    // Ended, or still serving when the socket answers: which one.
    let outcome = |mut child: std::process::Child| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                return (Some(status), err);
            }
            if std::os::unix::net::UnixStream::connect(dir.path().join("run/boxd.sock")).is_ok()
                || Instant::now() > deadline
            {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                let _ = child.wait();
                return (None, String::new());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let (refused, why) = outcome(boxd(false));
    println!("boxd --boxlite-url http://192.0.2.1:8100: {refused:?}: {why}");
    assert!(
        refused.is_some_and(|s| !s.success()),
        "boxd served with a plain-HTTP remote that is not loopback"
    );
    assert!(
        why.contains("https://") && why.contains("BOXD_BOXLITE_INSECURE_HTTP"),
        "{why}"
    );
    let (accepted, _) = outcome(boxd(true));
    println!("with BOXD_BOXLITE_INSECURE_HTTP=1: {accepted:?} (None: it served)");
    assert!(accepted.is_none(), "the explicit opt-in was not honoured");
}

/// A private tmux server, killed when this goes.
struct Tmux {
    dir: tempfile::TempDir,
}

impl Tmux {
    fn socket(&self) -> PathBuf {
        self.dir.path().join("tmux.sock")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.arg("-S").arg(self.socket()).args(["-f", "/dev/null"]);
        // Not a client of a tmux this test may run in.
        cmd.args(args).env_remove("TMUX").stdin(Stdio::null());
        cmd
    }

    fn out(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().expect("run tmux");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).output();
    }
}

/// The terminal itself: `boxctl exec hostile -- true` in a tmux pane with
/// `set-titles on` and `set-clipboard on`, after the pane's title is set
/// to a known one. The title stays, no clipboard buffer appears, and the
/// pane shows the escaped sequence as text.
#[tokio::test(flavor = "multi_thread")]
async fn in_a_tmux_pane_the_title_and_the_clipboard_stay_as_they_were() {
    assert!(
        Command::new("tmux").arg("-V").output().is_ok(),
        "tmux is not installed: apt-get install tmux (scripts/install-deps.sh)"
    );
    let d = Daemon::start();
    let mut c = d.client().await;
    let img = user_image(&d.dir.path().join("hostile-user"), HOSTILE);
    up_from(&mut c, "hostile", &img, &[]).await;

    let tmux = Tmux {
        dir: tempfile::Builder::new()
            .prefix("printed-tmux-")
            .tempdir_in("/tmp")
            .unwrap(),
    };
    // The server's environment (and so the pane's shell's) is this one's.
    let started = tmux
        .cmd(&[
            "new-session",
            "-d",
            "-s",
            "printed",
            "-x",
            "200",
            "-y",
            "50",
            "sh",
        ])
        .env("BOXD_SOCKET", &d.socket)
        .env("BOXD_HOME", &d.home)
        .env("PS1", "$ ")
        .env("ENV", "/dev/null")
        .status()
        .expect("run tmux");
    assert!(started.success(), "tmux new-session: {started}");
    tmux.out(&["set", "-g", "set-titles", "on"]);
    tmux.out(&["set", "-s", "set-clipboard", "on"]);
    tmux.out(&["select-pane", "-t", "printed", "-T", "known-title"]);
    let before = tmux.out(&["display", "-p", "-t", "printed", "#{pane_title}"]);
    assert_eq!(before.trim(), "known-title");

    let line = format!(
        "'{}' exec hostile -- true; echo printed-$((40 + 2))",
        bin("boxctl").display()
    );
    tmux.out(&["send-keys", "-t", "printed", &line, "Enter"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let screen = loop {
        let screen = tmux.out(&["capture-pane", "-p", "-t", "printed"]);
        if screen.lines().any(|l| l.trim() == "printed-42") {
            break screen;
        }
        assert!(
            Instant::now() < deadline,
            "the command did not finish in the pane: {screen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let title = tmux.out(&["display", "-p", "-t", "printed", "#{pane_title}"]);
    let buffers = tmux.out(&["list-buffers", "-F", "#{buffer_name}: #{buffer_sample}"]);
    drop(tmux);
    remove(&mut c, "hostile").await;

    println!("pane title after the exec: {:?}", title.trim());
    println!("tmux buffers: {buffers:?}");
    println!("pane:\n{}", screen.trim_end());
    assert_eq!(title.trim(), "known-title", "the box set the pane's title");
    assert!(
        !buffers.contains("pwned"),
        "the box wrote the clipboard: {buffers}"
    );
    assert!(
        VISIBLE.iter().any(|v| screen.contains(v)),
        "the pane does not show the escaped sequence: {screen}"
    );
}
