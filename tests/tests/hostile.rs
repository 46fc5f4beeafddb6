//! Hostile input: every case gets a clear error, and the daemon stays up
//! and keeps its boxes.

use std::collections::HashMap;

use boxd_client::tonic::Code;
use boxd_tests::*;

/// Creates `name` from `spec` and returns the error (panics on success).
async fn refused(c: &mut Client, name: &str, spec: v1::BoxSpec) -> boxd_client::tonic::Status {
    match c
        .create_box(v1::CreateBoxRequest {
            name: name.into(),
            spec: Some(spec),
            ..Default::default()
        })
        .await
    {
        Ok(r) => panic!("{name:?} was accepted: {:?}", r.into_inner()),
        Err(s) => s,
    }
}

/// The daemon still answers and still has its boxes.
async fn still_up(c: &mut Client, boxes: usize) {
    let list = c
        .list_boxes(v1::ListBoxesRequest {})
        .await
        .expect("boxd answers")
        .into_inner()
        .boxes;
    assert_eq!(list.len(), boxes, "{list:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_names_are_refused() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "keeper", busybox_spec()).await;
    let long = "x".repeat(65);
    for name in [
        "",
        "a/b",
        "../up",
        "..",
        ".",
        ".hidden",
        "-flag",
        "a b",
        "tab\there",
        "nul\0byte",
        "ünïcödé",
        "名前",
        "emoji-📦",
        "back\\slash",
        "semi;colon",
        "new\nline",
        long.as_str(),
    ] {
        let s = refused(&mut c, name, busybox_spec()).await;
        assert_eq!(s.code(), Code::InvalidArgument, "{name:?}: {s:?}");
        assert!(
            s.message().contains("invalid box name"),
            "{name:?}: {}",
            s.message()
        );
        // The other calls that take a name refuse it the same way.
        let e = c
            .start_box(v1::StartBoxRequest { name: name.into() })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{name:?}");
        let e = ExecStream::start(&mut c, start_req(name, &["true"]))
            .await
            .err()
            .expect("exec refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{name:?}");
    }
    // Nothing was created on disk for any of them.
    assert_eq!(std::fs::read_dir(d.home.join("boxes")).unwrap().count(), 1);
    still_up(&mut c, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mounts_that_escape_or_cover_sensitive_paths_are_refused() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let project = tempfile::tempdir().unwrap();
    let links = tempfile::tempdir().unwrap();
    let to_home = links.path().join("to-home");
    let to_socket = links.path().join("to-socket");
    let to_root = links.path().join("to-root");
    std::os::unix::fs::symlink(&d.home, &to_home).unwrap();
    std::os::unix::fs::symlink(d.socket.parent().unwrap(), &to_socket).unwrap();
    std::os::unix::fs::symlink("/", &to_root).unwrap();
    let p = project.path().to_str().unwrap();
    let mount = |host: &str, guest: &str| v1::BoxSpec {
        mounts: vec![v1::Mount {
            host_path: host.into(),
            guest_path: guest.into(),
            read_only: false,
        }],
        ..busybox_spec()
    };
    let home_boxes = d.home.join("boxes");
    let cases: Vec<(String, String, &str)> = vec![
        (
            to_home.display().to_string(),
            "/w".into(),
            "state directory",
        ),
        (
            to_socket.display().to_string(),
            "/w".into(),
            "boxd's socket",
        ),
        (
            to_root.display().to_string(),
            "/w".into(),
            "state directory",
        ),
        (
            home_boxes.display().to_string(),
            "/w".into(),
            "state directory",
        ),
        (d.socket.display().to_string(), "/w".into(), "boxd's socket"),
        ("relative/path".into(), "/w".into(), "absolute"),
        ("/does/not/exist".into(), "/w".into(), "No such file"),
        ("/proc".into(), "/w".into(), "no box may mount"),
        ("/proc/1/root".into(), "/w".into(), "no box may mount"),
        ("/sys/kernel".into(), "/w".into(), "no box may mount"),
        ("/dev".into(), "/w".into(), "no box may mount"),
        ("/dev/null".into(), "/w".into(), "no box may mount"),
        (p.into(), "/".into(), "cannot mount over /"),
        (p.into(), "/proc".into(), "cannot mount over /proc"),
        (p.into(), "/proc/sys".into(), "cannot mount over"),
        (p.into(), "/dev".into(), "cannot mount over /dev"),
        (p.into(), "/dev/shm".into(), "cannot mount over"),
        (p.into(), "/a/../proc".into(), "without '..'"),
        (p.into(), "/a/../../etc".into(), "without '..'"),
        (p.into(), "relative".into(), "absolute path"),
        (p.into(), "/w\0x".into(), "absolute path"),
    ];
    for (host, guest, why) in &cases {
        let s = refused(&mut c, "m", mount(host, guest)).await;
        assert_eq!(s.code(), Code::InvalidArgument, "{host} -> {guest}: {s:?}");
        assert!(
            s.message().contains(why),
            "{host} -> {guest}: {} (wanted {why:?})",
            s.message()
        );
    }
    // Two mounts at one place.
    let mut twice = mount(p, "/w");
    twice.mounts.push(twice.mounts[0].clone());
    let s = refused(&mut c, "m", twice).await;
    assert!(s.message().contains("two mounts at /w"), "{}", s.message());

    // Symlinks inside the box's own root (here, from its image) cannot
    // take a mount outside the box or onto /proc: the guest path resolves
    // inside the box.
    let image = tempfile::tempdir().unwrap();
    boxd_tests::image::layout_with(
        image.path(),
        &[(
            boxd_tests::image::host_arch(),
            vec![boxd_tests::image::symlink_layer(&[
                ("climb", "../../../../../../../tmp"),
                ("absolute", "/tmp"),
                ("into-proc", "/proc/self"),
            ])],
        )],
    )
    .remove(0);
    let marker = "boxd-hostile-mount-target";
    let spec = |guest: &str| v1::BoxSpec {
        image: image.path().to_string_lossy().into_owned(),
        mounts: vec![v1::Mount {
            host_path: p.into(),
            guest_path: guest.into(),
            read_only: true,
        }],
        ..Default::default()
    };
    std::fs::write(project.path().join("file"), "from the host").unwrap();
    up(&mut c, "climber", spec(&format!("/climb/{marker}"))).await;
    // The mount landed at /tmp/MARKER inside the box, not on the host.
    assert_eq!(
        sh(&mut c, "climber", &format!("cat /tmp/{marker}/file")).await,
        "from the host"
    );
    assert!(
        !std::path::Path::new("/tmp").join(marker).exists(),
        "the mount escaped onto the host's /tmp"
    );
    create(&mut c, "prober", spec("/into-proc/x")).await;
    let e = c
        .start_box(v1::StartBoxRequest {
            name: "prober".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("/proc/self/x"), "{}", e.message());
    still_up(&mut c, 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_environments_and_command_lines_are_refused() {
    let d = Daemon::start();
    let mut c = d.client().await;
    up(&mut c, "env", busybox_spec()).await;
    let env_spec = |k: &str, v: &str| v1::BoxSpec {
        env: HashMap::from([(k.to_owned(), v.to_owned())]),
        ..busybox_spec()
    };
    for (k, v) in [
        ("A=B", "x"),
        ("", "x"),
        ("NUL\0", "x"),
        ("OK", "nul\0value"),
    ] {
        let s = refused(&mut c, "e", env_spec(k, v)).await;
        assert_eq!(s.code(), Code::InvalidArgument, "{k:?}");
        assert!(
            s.message().contains("invalid environment variable"),
            "{}",
            s.message()
        );
        let mut start = start_req("env", &["true"]);
        start.env = HashMap::from([(k.to_owned(), v.to_owned())]);
        let e = ExecStream::start(&mut c, start)
            .await
            .err()
            .expect("refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{k:?}");
    }
    // A huge environment: under the message limit, over the exec limit.
    let huge: HashMap<String, String> = (0..3000)
        .map(|i| (format!("VAR_{i}"), "v".repeat(1000)))
        .collect();
    let s = refused(
        &mut c,
        "e",
        v1::BoxSpec {
            env: huge.clone(),
            ..busybox_spec()
        },
    )
    .await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert!(s.message().contains("at most 1048576"), "{}", s.message());
    let mut start = start_req("env", &["true"]);
    start.env = huge;
    let e = ExecStream::start(&mut c, start)
        .await
        .err()
        .expect("refused");
    assert!(e.message().contains("environment"), "{}", e.message());
    // A command line too long to run.
    let long = "a".repeat(2 << 20);
    let e = ExecStream::start(&mut c, start_req("env", &["echo", &long]))
        .await
        .err()
        .expect("refused");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("command line"), "{}", e.message());
    // NUL in a command or argument.
    for argv in [vec!["ec\0ho"], vec!["echo", "a\0b"]] {
        let e = ExecStream::start(&mut c, start_req("env", &argv))
            .await
            .err()
            .expect("refused");
        assert!(e.message().contains("NUL"), "{}", e.message());
    }
    // A binary that does not exist, a directory, a working directory that
    // does not exist: the exec starts and fails with the shell's codes.
    let out = run(&mut c, "env", &["/no/such/binary"]).await;
    assert_eq!(out.exit.code, Some(127), "{out:?}");
    assert!(
        out.exit.error.contains("No such file"),
        "{:?}",
        out.exit.error
    );
    let out = run(&mut c, "env", &["/etc"]).await;
    assert_eq!(out.exit.code, Some(126), "{out:?}");
    let mut start = start_req("env", &["true"]);
    start.working_dir = "/no/such/dir".into();
    let out = collect(ExecStream::start(&mut c, start).await.unwrap()).await;
    assert_eq!(out.exit.code, Some(126), "{out:?}");
    assert!(
        out.exit.error.contains("working directory"),
        "{:?}",
        out.exit.error
    );
    // Unknown signals.
    let exec = ExecStream::start(&mut c, start_req("env", &["sleep", "30"]))
        .await
        .unwrap();
    for bad in ["SIGNOPE", "999", "-1", "KILL\0"] {
        let e = c
            .signal_exec(v1::SignalExecRequest {
                exec_id: exec.exec_id().to_owned(),
                signal: Some(v1::Signal { signal: bad.into() }),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}");
        assert!(e.message().contains("unknown signal"), "{}", e.message());
    }
    exec.input().signal("SIGKILL").await.unwrap();
    assert_eq!(collect(exec).await.exit.signal, Some(9));
    still_up(&mut c, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_at_and_over_the_size_limit() {
    let d = Daemon::start();
    let c = d.client().await;
    // A client that would send more than boxd accepts.
    let mut c = c
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    let limit = boxd_client::MAX_MESSAGE;
    let spec_of = |bytes: usize| v1::BoxSpec {
        env: HashMap::from([("BIG".to_owned(), "x".repeat(bytes))]),
        ..busybox_spec()
    };
    // Just under CreateBox's own limit (4 MiB: the daemon bounds each
    // method's messages, big only where bytes are the point): decoded,
    // then refused by validation.
    let s = refused(&mut c, "big", spec_of((4 << 20) - 4096)).await;
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    // Over it: refused by the transport with the limit named.
    for over in [limit + 1, 3 * limit] {
        let s = refused(&mut c, "big", spec_of(over)).await;
        assert!(
            matches!(s.code(), Code::OutOfRange | Code::ResourceExhausted),
            "{s:?}"
        );
        assert!(s.message().contains("too large"), "{}", s.message());
    }
    // A huge exec input chunk, over the limit, on an open stream.
    let mut c2 = d.client().await;
    up(&mut c2, "sized", busybox_spec()).await;
    // The client library sends stdin in small pieces, so this one is
    // written on the raw call, as a client of its own would.
    let mut c = c;
    let mut start = start_req("sized", &["cat"]);
    start.stdin = true;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let msg = |m| v1::ExecRequest { msg: Some(m) };
    tx.send(msg(v1::exec_request::Msg::Start(start)))
        .await
        .unwrap();
    tx.send(msg(v1::exec_request::Msg::Stdin(
        vec![b'x'; limit + 10].into(),
    )))
    .await
    .unwrap();
    let mut events = c
        .exec(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("the exec call opens")
        .into_inner();
    let err = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            match events.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the stream ended without an error"),
                Err(e) => break e,
            }
        }
    })
    .await
    .expect("an over-limit input ends the stream with an error within 20 s");
    drop(tx);
    assert!(err.message().contains("exec input refused"), "{err:?}");
    still_up(&mut c2, 1).await;
    assert_eq!(sh(&mut c2, "sized", "echo fine").await, "fine\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn thousands_of_boxes_hit_the_limit_not_the_disk() {
    let d = Daemon::with_env("namespace", vec![("BOXD_MAX_BOXES".into(), "32".into())]);
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let socket = d.socket.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = boxd_client::connect(&socket).await.unwrap();
            let mut outcomes = Vec::new();
            for i in 0..250 {
                let r = c
                    .create_box(v1::CreateBoxRequest {
                        name: format!("many-{worker}-{i}"),
                        spec: Some(busybox_spec()),
                        ..Default::default()
                    })
                    .await;
                outcomes.push(
                    r.map(|_| ())
                        .map_err(|s| (s.code(), s.message().to_owned())),
                );
            }
            outcomes
        }));
    }
    let mut ok = 0;
    let mut refused_count = 0;
    for t in tasks {
        for outcome in t.await.unwrap() {
            match outcome {
                Ok(()) => ok += 1,
                Err((code, msg)) => {
                    assert_eq!(code, Code::ResourceExhausted, "{msg}");
                    assert!(msg.contains("max-boxes"), "{msg}");
                    refused_count += 1;
                }
            }
        }
    }
    println!("2000 creates: {ok} created, {refused_count} refused (max-boxes 32)");
    assert_eq!(ok, 32);
    assert_eq!(refused_count, 2000 - 32);
    let mut c = d.client().await;
    still_up(&mut c, 32).await;
    // Removing one makes room for one.
    c.remove_box(v1::RemoveBoxRequest {
        name: "many-0-0".into(),
        force: true,
    })
    .await
    .ok();
    let names: Vec<String> = list(&mut c).await.into_iter().map(|b| b.name).collect();
    let victim = names[0].clone();
    c.remove_box(v1::RemoveBoxRequest {
        name: victim,
        force: true,
    })
    .await
    .unwrap();
    create(&mut c, "one-more", busybox_spec()).await;
    // Too many mounts or allow-net entries for one box.
    let project = tempfile::tempdir().unwrap();
    let spec = v1::BoxSpec {
        mounts: (0..65)
            .map(|i| v1::Mount {
                host_path: project.path().to_string_lossy().into_owned(),
                guest_path: format!("/m{i}"),
                read_only: true,
            })
            .collect(),
        ..busybox_spec()
    };
    let s = refused(&mut c, "mounts", spec).await;
    assert!(s.message().contains("at most 64"), "{}", s.message());
}

/// The socket and the clients that trust it: another local user must not
/// receive a client's requests (and the secrets in them), nor make boxd
/// listen where they can take its place. Every client checks the way to the
/// socket, the socket and the process answering before it sends a byte; the
/// daemon checks the way before it binds. All but the open-directory case
/// act as a second user (`boxtest`), so they need root and that user;
/// without either they say so and skip.
mod socket_trust {
    use super::*;
    use std::io::Read;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    use std::os::unix::net::UnixListener;
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// The other user's uid and gid, when this test can act as them.
    fn other_user() -> Option<(u32, u32)> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("SKIPPED: acting as a second user needs root");
            return None;
        }
        match nix::unistd::User::from_name("boxtest") {
            Ok(Some(u)) => Some((u.uid.as_raw(), u.gid.as_raw())),
            _ => {
                println!("SKIPPED: no user `boxtest` to act as (`useradd -m boxtest`)");
                None
            }
        }
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    /// A scratch directory in /tmp (root's), with `mode`.
    fn scratch(mode: u32) -> tempfile::TempDir {
        let t = tempfile::Builder::new()
            .prefix("boxd-trust-")
            .tempdir_in("/tmp")
            .unwrap();
        chmod(t.path(), mode);
        t
    }

    /// What a listener saw: connections accepted, bytes received.
    #[derive(Debug, Default)]
    struct Seen {
        connections: usize,
        bytes: Vec<u8>,
    }

    /// A listener that accepts every connection and records what arrives.
    struct Fake {
        stop: Arc<AtomicBool>,
        seen: Arc<Mutex<Seen>>,
        thread: std::thread::JoinHandle<()>,
    }

    impl Fake {
        fn serve(listener: UnixListener) -> Fake {
            listener.set_nonblocking(true).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let seen = Arc::new(Mutex::new(Seen::default()));
            let (stopping, seeing) = (stop.clone(), seen.clone());
            let thread = std::thread::spawn(move || {
                while !stopping.load(Ordering::SeqCst) {
                    let Ok((mut conn, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    seeing.lock().unwrap().connections += 1;
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                    let mut buf = [0u8; 4096];
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => seeing.lock().unwrap().bytes.extend_from_slice(&buf[..n]),
                        }
                    }
                }
            });
            Fake { stop, seen, thread }
        }

        /// Stops (after a moment for a late connection) and says what arrived.
        fn finish(self) -> Seen {
            std::thread::sleep(Duration::from_millis(400));
            self.stop.store(true, Ordering::SeqCst);
            self.thread.join().unwrap();
            std::mem::take(&mut *self.seen.lock().unwrap())
        }
    }

    impl Seen {
        fn describe(&self) -> String {
            let head = String::from_utf8_lossy(&self.bytes[..self.bytes.len().min(14)]);
            format!(
                "{} connection(s), {} bytes received{}",
                self.connections,
                self.bytes.len(),
                if self.bytes.is_empty() {
                    String::new()
                } else {
                    format!(" (starting {head:?})")
                }
            )
        }
    }

    /// A listening socket at `path`, bound (the file created) by this
    /// thread, root, and put to listen by `uid`: the kernel then reports
    /// `uid` to every client that connects (`SO_PEERCRED` is taken at
    /// `listen`), whatever the file says.
    fn listening_as(uid: u32, gid: u32, path: &Path) -> UnixListener {
        use nix::sys::socket::{
            AddressFamily, Backlog, SockFlag, SockType, UnixAddr, bind, listen, socket,
        };
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(fd.as_raw_fd(), &UnixAddr::new(path).unwrap()).unwrap();
        chmod(path, 0o600);
        let fd: OwnedFd = as_user(uid, gid, move || {
            listen(&fd, Backlog::new(16).unwrap()).unwrap();
            fd
        });
        UnixListener::from(fd)
    }

    /// What `boxctl ls`, `harness-box-exec` and the client library did
    /// with one socket.
    struct Tried {
        boxctl: (Option<i32>, String),
        proxy: (Option<i32>, String),
        /// Whether harness-box-exec prepared a home to start a daemon.
        proxy_started_boxd: bool,
        /// The library's error, and whether it was `Untrusted`.
        library: Result<(), (bool, String)>,
    }

    /// Aims `boxctl ls`, `harness-box-exec` and the client library at
    /// `socket` (each with a fresh home) and prints what each did.
    async fn try_every_client(socket: &Path) -> Tried {
        let homes = scratch(0o700);
        let home = homes.path().join("home");
        let out = Command::new(bin("boxctl"))
            .arg("--socket")
            .arg(socket)
            .arg("--home")
            .arg(&home)
            .arg("ls")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let boxctl = (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        );
        println!("  boxctl ls: exit {:?}: {}", boxctl.0, boxctl.1);
        let begin = Instant::now();
        let out = Command::new(bin("harness-box-exec"))
            .env("BOXD_HOME", &home)
            .arg("--socket")
            .arg(socket)
            .args([
                "--raw",
                "--box",
                "trust",
                "--image",
                "/nonexistent",
                "--",
                "true",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let proxy = (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        );
        let proxy_started_boxd = home.exists();
        println!(
            "  harness-box-exec: exit {:?} after {:.2?}{}: {}",
            proxy.0,
            begin.elapsed(),
            if proxy_started_boxd {
                ", having started a boxd"
            } else {
                ""
            },
            proxy.1
        );
        let library = match boxd_client::connect(socket).await {
            Ok(_) => Ok(()),
            Err(e) => Err((
                matches!(e, boxd_client::ConnectError::Untrusted { .. }),
                e.to_string(),
            )),
        };
        match &library {
            Ok(()) => println!("  client library: connected"),
            Err((_, e)) => println!("  client library: {e}"),
        }
        Tried {
            boxctl,
            proxy,
            proxy_started_boxd,
            library,
        }
    }

    impl Tried {
        /// Every client refused (exit 1, exit 125, `Untrusted`), none
        /// started a daemon, and every message holds each of `expect`.
        fn all_refused(&self, expect: &[&str]) {
            assert_eq!(self.boxctl.0, Some(1), "{}", self.boxctl.1);
            assert_eq!(self.proxy.0, Some(125), "{}", self.proxy.1);
            assert!(
                !self.proxy_started_boxd,
                "harness-box-exec started a daemon over the socket"
            );
            let library = match &self.library {
                Ok(()) => panic!("the client library connected"),
                Err((untrusted, e)) => {
                    assert!(untrusted, "{e}");
                    e
                }
            };
            for text in [&self.boxctl.1, &self.proxy.1, library] {
                assert!(text.contains("refusing to connect to boxd"), "{text}");
                for e in expect {
                    assert!(text.contains(e), "{text:?} does not say {e:?}");
                }
            }
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_socket_directory_of_another_user_is_refused_before_sending() {
        let Some((uid, gid)) = other_user() else {
            return;
        };
        // Like /tmp: anyone may create entries, none may rename another's.
        let shared = scratch(0o1777);
        // The other user gets there first: `boxd-0`, their own, 0700, with
        // a socket that listens (the old default, /tmp/boxd-$UID).
        let theirs = shared.path().join("boxd-0");
        let socket = theirs.join("boxd.sock");
        let listener = {
            let (theirs, socket) = (theirs.clone(), socket.clone());
            as_user(uid, gid, move || {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&theirs)
                    .unwrap();
                UnixListener::bind(&socket).unwrap()
            })
        };
        let fake = Fake::serve(listener);
        println!(
            "{} is uid {}'s (mode {:04o}), a listener of theirs in it:",
            theirs.display(),
            std::fs::metadata(&theirs).unwrap().uid(),
            mode(&theirs)
        );
        let owner = format!("uid {uid} (boxtest)");
        let tried = try_every_client(&socket).await;
        let seen = fake.finish();
        println!("  their listener: {}", seen.describe());
        assert_eq!(seen.connections, 0, "{}", seen.describe());
        tried.all_refused(&[&theirs.display().to_string(), &owner, "root does not use"]);

        // A symlink of theirs leading to our own daemon's directory: the
        // daemon is genuine, the way to it is not ours (they could point it
        // elsewhere at any time).
        let d = Daemon::start();
        let link = shared.path().join("boxd-link");
        {
            let (link, target) = (link.clone(), d.socket.parent().unwrap().to_path_buf());
            as_user(uid, gid, move || {
                std::os::unix::fs::symlink(target, link).unwrap()
            });
        }
        println!(
            "{} -> {}, a symlink of uid {uid}'s, to a running boxd of ours:",
            link.display(),
            d.socket.parent().unwrap().display()
        );
        let tried = try_every_client(&link.join("boxd.sock")).await;
        tried.all_refused(&[&link.display().to_string(), "a symlink", &owner]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_socket_of_ours_in_an_open_directory_is_refused() {
        // Everything here is ours: no second user needed.
        let base = scratch(0o700);
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        let socket = open.join("boxd.sock");
        let fake = Fake::serve(UnixListener::bind(&socket).unwrap());
        chmod(&socket, 0o600);
        println!(
            "{} is ours and 0777, the socket in it ours and 0600:",
            open.display()
        );
        let tried = try_every_client(&socket).await;
        let seen = fake.finish();
        println!("  the listener: {}", seen.describe());
        assert_eq!(seen.connections, 0, "{}", seen.describe());
        tried.all_refused(&["open to other users (mode 0777)", "chmod 700"]);

        // Control: the same directory made 0700, and the library does
        // connect (and sends its HTTP/2 preface: the listener is no boxd).
        chmod(&open, 0o700);
        let fake = Fake::serve(UnixListener::bind(open.join("ctl.sock")).unwrap());
        chmod(&open.join("ctl.sock"), 0o600);
        let e = boxd_client::connect(&open.join("ctl.sock")).await.err();
        let seen = fake.finish();
        println!(
            "control, directory 0700: the library {}; the listener: {}",
            e.as_ref()
                .map_or("connected".into(), |e| format!("connected, then: {e}")),
            seen.describe()
        );
        assert!(!matches!(
            e,
            Some(boxd_client::ConnectError::Untrusted { .. })
        ));
        assert!(
            seen.bytes.starts_with(b"PRI * HTTP/2.0"),
            "{}",
            seen.describe()
        );
    }

    /// Runs boxd on `socket` (a fresh home): its exit code (`None` when it
    /// was serving; it is then stopped) and the last line of its stderr.
    fn run_boxd(socket: &Path) -> (Option<i32>, String) {
        let homes = scratch(0o700);
        let mut child = Command::new(bin("boxd"))
            .arg("--socket")
            .arg(socket)
            .arg("--home")
            .arg(homes.path().join("home"))
            .args(["--engine", "namespace"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let code = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code();
            }
            if std::os::unix::net::UnixStream::connect(socket).is_ok() || Instant::now() > deadline
            {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        // The last line is boxd's own (`boxd: ...`); the log line before
        // it says the same.
        let last = err.lines().rev().find(|l| !l.trim().is_empty());
        (code, last.unwrap_or("").trim().to_owned())
    }

    #[test]
    fn boxd_refuses_a_socket_directory_it_cannot_trust() {
        let Some((uid, gid)) = other_user() else {
            return;
        };
        let shared = scratch(0o1777);
        let p = shared.path();
        let owner = format!("uid {uid} (boxtest)");
        // Theirs: a directory of the other user's, and one inside a
        // directory of theirs; a symlink of theirs to a directory of ours.
        {
            let p = p.to_path_buf();
            as_user(uid, gid, move || {
                let mk = |d: &str, m: u32| std::fs::DirBuilder::new().mode(m).create(p.join(d));
                mk("theirs", 0o700).unwrap();
                mk("their-parent", 0o755).unwrap();
                std::os::unix::fs::symlink(p.join("ours"), p.join("their-link")).unwrap();
            });
        }
        std::fs::create_dir(p.join("ours")).unwrap();
        chmod(&p.join("ours"), 0o700);
        // World-writable and not sticky: anyone may rename what is in it.
        std::fs::create_dir(p.join("public")).unwrap();
        chmod(&p.join("public"), 0o777);
        let cases: [(&str, &str, Vec<&str>); 4] = [
            (
                "a socket directory of the other user's",
                "theirs/boxd.sock",
                vec!["the socket's directory", owner.as_str()],
            ),
            (
                "our directory reached through their symlink",
                "their-link/boxd.sock",
                vec!["a symlink on the socket's path", owner.as_str()],
            ),
            (
                "a directory of ours to be made in theirs",
                "their-parent/run/boxd.sock",
                vec!["a directory on the socket's path", owner.as_str()],
            ),
            (
                "a directory of ours to be made in a 0777 one",
                "public/run/boxd.sock",
                vec!["writable by other users and not sticky (mode 0777)"],
            ),
        ];
        let ran: Vec<_> = cases
            .iter()
            .map(|(what, rel, _)| {
                let (code, err) = run_boxd(&p.join(rel));
                match code {
                    Some(c) => println!("{what} ({rel}): boxd exit {c}: {err}"),
                    None => println!("{what} ({rel}): boxd SERVED there"),
                }
                (code, err)
            })
            .collect();
        for ((_, rel, expect), (code, err)) in cases.iter().zip(ran) {
            let socket = p.join(rel);
            assert_eq!(code, Some(1), "boxd served on {}: {err}", socket.display());
            assert!(err.contains("refusing to listen on"), "{err}");
            for e in expect {
                assert!(err.contains(e), "{err:?} does not say {e:?}");
            }
            assert!(!socket.exists(), "{} was created", socket.display());
        }
        assert!(!p.join("their-parent/run").exists());
        assert!(!p.join("public/run").exists());
        // Control: a directory of our own that is too open is ours to
        // close, and boxd serves.
        std::fs::create_dir(p.join("mine")).unwrap();
        chmod(&p.join("mine"), 0o755);
        let (code, err) = run_boxd(&p.join("mine/boxd.sock"));
        println!(
            "control, a 0755 directory of ours: boxd {}, the directory now {:04o}",
            code.map_or("served".into(), |c| format!("exited {c}: {err}")),
            mode(&p.join("mine"))
        );
        assert_eq!(code, None, "{err}");
        assert_eq!(mode(&p.join("mine")), 0o700);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_peer_of_another_uid_is_refused_by_its_credentials() {
        let Some((uid, gid)) = other_user() else {
            return;
        };
        // Every file is ours and private; only the process listening is not.
        let base = scratch(0o700);
        let run = base.path().join("run");
        std::fs::DirBuilder::new().mode(0o700).create(&run).unwrap();
        let socket = run.join("boxd.sock");
        let fake = Fake::serve(listening_as(uid, gid, &socket));
        let meta = std::fs::metadata(&socket).unwrap();
        println!(
            "{} is uid {}'s, mode {:04o}, in a {:04o} directory of ours; uid {uid} listens on it:",
            socket.display(),
            meta.uid(),
            meta.mode() & 0o7777,
            mode(&run)
        );
        let tried = try_every_client(&socket).await;
        let seen = fake.finish();
        println!("  their listener: {}", seen.describe());
        assert!(seen.bytes.is_empty(), "{}", seen.describe());
        tried.all_refused(&[&format!("runs as uid {uid} (boxtest)")]);

        // Control: the same set-up listened on by root (us) is used.
        let ctl = run.join("ctl.sock");
        let fake = Fake::serve(listening_as(0, 0, &ctl));
        let e = boxd_client::connect(&ctl).await.err();
        let seen = fake.finish();
        println!(
            "control, root listening: the library {}; the listener: {}",
            e.as_ref()
                .map_or("connected".into(), |e| format!("connected, then: {e}")),
            seen.describe()
        );
        assert!(
            seen.bytes.starts_with(b"PRI * HTTP/2.0"),
            "{}",
            seen.describe()
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_reconnection_is_checked_like_the_first_connection() {
        let Some((uid, gid)) = other_user() else {
            return;
        };
        let mut d = Daemon::start();
        let mut c = d.client().await;
        list(&mut c).await;
        // boxd goes away; another user's process answers on its socket.
        d.stop();
        let _ = std::fs::remove_file(&d.socket);
        let fake = Fake::serve(listening_as(uid, gid, &d.socket));
        let first = c.list_boxes(v1::ListBoxesRequest {}).await.unwrap_err();
        let second = c.list_boxes(v1::ListBoxesRequest {}).await.unwrap_err();
        let seen = fake.finish();
        println!("the open client, after boxd stopped and uid {uid} took its socket:");
        println!("  first call: {:?}: {}", first.code(), first.message());
        println!("  second call: {:?}: {}", second.code(), second.message());
        println!("  their listener: {}", seen.describe());
        assert!(seen.bytes.is_empty(), "{}", seen.describe());
    }
}

// ---------------------------------------------------------------------------
// Hostile images: `docker save` archives that reach for host files, layouts
// whose blobs are not files, a gzip bomb against `max-image-size`, and a
// daemon stopped while a create is stuck on a bad image. Each prints what it
// observed. Rerun: `cargo test -p boxd-tests --test hostile hostile_images
// -- --test-threads 1 --nocapture`.
// ---------------------------------------------------------------------------

mod hostile_images {
    use std::io::{Read, Write};
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    use boxd_client::tonic::Code;
    use boxd_tests::*;
    use serde_json::{Value, json};
    use sha2::{Digest, Sha256};

    const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
    const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

    fn hex_sha256(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// Stores a blob in `layout` and returns its descriptor.
    fn blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Value {
        let hex = hex_sha256(bytes);
        let dir = layout.join("blobs/sha256");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(&hex), bytes).unwrap();
        json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()})
    }

    /// A layout of one image: `layers` are `(media type, blob bytes)`.
    /// Returns the layout and each blob's path (config first, then layers).
    fn layout(dir: &Path, layers: &[(&str, Vec<u8>)]) -> (PathBuf, Vec<PathBuf>) {
        let layout = dir.join("layout");
        std::fs::create_dir_all(&layout).unwrap();
        let mut descs = Vec::new();
        for (media, bytes) in layers {
            descs.push(blob(&layout, media, bytes));
        }
        let config = json!({
            "architecture": image::host_arch(), "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Cmd": ["sh"]},
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        let config = blob(
            &layout,
            "application/vnd.oci.image.config.v1+json",
            &serde_json::to_vec(&config).unwrap(),
        );
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config, "layers": descs,
        });
        let manifest = blob(
            &layout,
            "application/vnd.oci.image.manifest.v1+json",
            &serde_json::to_vec(&manifest).unwrap(),
        );
        std::fs::write(
            layout.join("oci-layout"),
            r#"{"imageLayoutVersion":"1.0.0"}"#,
        )
        .unwrap();
        let index = json!({"schemaVersion": 2, "manifests": [manifest]});
        std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
        let path_of = |d: &Value| {
            layout
                .join("blobs/sha256")
                .join(&d["digest"].as_str().unwrap()[7..])
        };
        let mut paths = vec![path_of(&config)];
        paths.extend(descs.iter().map(path_of));
        (layout, paths)
    }

    fn spec(image: &Path) -> v1::BoxSpec {
        v1::BoxSpec {
            image: image.to_string_lossy().into_owned(),
            ..Default::default()
        }
    }

    /// Tries a create, bounded by `limit`; returns the refusal and how long it took.
    async fn create_err(
        c: &mut Client,
        name: &str,
        image: &Path,
        limit: Duration,
    ) -> (boxd_client::tonic::Status, Duration) {
        let begin = Instant::now();
        let r = tokio::time::timeout(
            limit,
            c.create_box(v1::CreateBoxRequest {
                name: name.into(),
                spec: Some(spec(image)),
                ..Default::default()
            }),
        )
        .await
        .unwrap_or_else(|_| panic!("create {name} still running after {limit:?}"));
        match r {
            Ok(r) => panic!("{name} was created: {:?}", r.into_inner()),
            Err(s) => (s, begin.elapsed()),
        }
    }

    /// The unpacked images and unpacks in progress under the daemon's home.
    fn cache_entries(home: &Path) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(home.join("images")) else {
            return Vec::new();
        };
        let mut names: Vec<String> = dir
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.len() == 64 || n.starts_with("tmp-"))
            .collect();
        names.sort();
        names
    }

    /// One tar entry for a hand-made archive.
    enum Entry<'a> {
        File(&'a str, &'a [u8]),
        Symlink(&'a str, &'a str),
        Hardlink(&'a str, &'a str),
    }

    /// A tar archive with the entries' names written verbatim (absolute
    /// and `..` paths get through).
    fn archive(entries: &[Entry]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for e in entries {
            let mut h = tar::Header::new_gnu();
            let (name, kind, data): (&str, tar::EntryType, &[u8]) = match e {
                Entry::File(n, d) => (n, tar::EntryType::Regular, d),
                Entry::Symlink(n, t) => {
                    h.set_link_name(t).unwrap();
                    (n, tar::EntryType::Symlink, &[])
                }
                Entry::Hardlink(n, t) => {
                    h.set_link_name(t).unwrap();
                    (n, tar::EntryType::Link, &[])
                }
            };
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_entry_type(kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn image_import_of_hostile_archives_leaves_host_files_alone() {
        let d = Daemon::start();
        let host = tempfile::tempdir().unwrap();
        let canary = host.path().join("canary");
        std::fs::write(&canary, "precious").unwrap();
        let ino = std::fs::metadata(&canary).unwrap().ino();
        let dir = host.path().to_str().unwrap().to_owned();
        let canary_s = canary.to_str().unwrap().to_owned();
        let manifest = |config: &str| {
            json!([{"Config": config, "RepoTags": ["hostile/x:1"], "Layers": []}]).to_string()
        };
        let through_dir = manifest("d/canary");
        let via_link = manifest("c.json");
        let absolute = manifest(&canary_s);
        let climbing = manifest(&format!("../../../../../../..{canary_s}"));
        let planted = format!("{dir}/planted");
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "a symlinked directory and a manifest path through it",
                archive(&[
                    Entry::Symlink("d", &dir),
                    Entry::File("manifest.json", through_dir.as_bytes()),
                ]),
            ),
            (
                "a hard link to a host file named as the config",
                archive(&[
                    Entry::Hardlink("c.json", &canary_s),
                    Entry::File("manifest.json", via_link.as_bytes()),
                ]),
            ),
            (
                "a symlink to a host file named as the config",
                archive(&[
                    Entry::Symlink("c.json", &canary_s),
                    Entry::File("manifest.json", via_link.as_bytes()),
                ]),
            ),
            (
                "an absolute config path",
                archive(&[Entry::File("manifest.json", absolute.as_bytes())]),
            ),
            (
                "a climbing config path",
                archive(&[Entry::File("manifest.json", climbing.as_bytes())]),
            ),
            (
                "an entry with an absolute path",
                archive(&[
                    Entry::File(&planted, b"planted"),
                    Entry::File("manifest.json", through_dir.as_bytes()),
                ]),
            ),
        ];
        let work = tempfile::tempdir().unwrap();
        for (i, (what, bytes)) in cases.iter().enumerate() {
            let tarball = work.path().join(format!("hostile-{i}.tar"));
            std::fs::write(&tarball, bytes).unwrap();
            let out = d
                .boxctl()
                .args(["image", "import"])
                .arg(&tarball)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            println!("import of {what}: exit {:?}, {err}", out.status.code());
            assert!(!out.status.success(), "{what}: imported");
            assert!(
                err.contains("not a regular file of the archive") || err.contains("outside"),
                "{what}: {err}"
            );
            assert_eq!(
                std::fs::read_to_string(&canary).ok().as_deref(),
                Some("precious"),
                "{what}: the canary was moved or changed"
            );
            assert_eq!(std::fs::metadata(&canary).unwrap().ino(), ino, "{what}");
            assert!(!Path::new(&planted).exists(), "{what}: planted a file");
        }
        let mut names: Vec<_> = std::fs::read_dir(host.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["canary"]);
        let ls = d.boxctl().args(["image", "ls"]).output().unwrap();
        let ls = String::from_utf8_lossy(&ls.stdout).into_owned();
        assert!(!ls.contains("hostile"), "{ls}");
        println!("canary intact (same inode, same bytes); no image recorded");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn layouts_whose_blobs_are_not_files_are_refused_fast() {
        let d = Daemon::start();
        let mut c = d.client().await;
        let dir = tempfile::tempdir().unwrap();
        let layer = image::file_layer("hello", b"hi\n");

        // The layer blob a symlink to /dev/zero (its descriptor says 1 MiB).
        let (zero, paths) = layout(&dir.path().join("zero"), &[(LAYER, layer.clone())]);
        std::fs::remove_file(&paths[1]).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &paths[1]).unwrap();
        let (s, took) = create_err(&mut c, "zero", &zero, Duration::from_secs(20)).await;
        println!(
            "layer blob → /dev/zero: {:?} in {took:.2?}: {}",
            s.code(),
            s.message()
        );
        assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
        assert!(s.message().contains("symbolic link"), "{}", s.message());
        assert!(took < Duration::from_secs(5), "{took:?}");

        // The config blob a symlink to a host file holding exactly its bytes
        // (so its digest matches): still refused.
        let (hostcfg, paths) = layout(&dir.path().join("host"), &[(LAYER, layer.clone())]);
        let outside = dir.path().join("outside-config.json");
        std::fs::rename(&paths[0], &outside).unwrap();
        std::os::unix::fs::symlink(&outside, &paths[0]).unwrap();
        let (s, took) = create_err(&mut c, "hostcfg", &hostcfg, Duration::from_secs(20)).await;
        println!(
            "config blob → a host file with the right digest: {:?} in {took:.2?}: {}",
            s.code(),
            s.message()
        );
        assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
        assert!(s.message().contains("symbolic link"), "{}", s.message());

        // A blob larger than its descriptor says (the real layer, grown).
        let (grown, paths) = layout(&dir.path().join("grown"), &[(LAYER, layer.clone())]);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&paths[1])
            .unwrap();
        f.write_all(&[0u8; 4096]).unwrap();
        let (s, took) = create_err(&mut c, "grown", &grown, Duration::from_secs(20)).await;
        println!(
            "blob larger than declared: {:?} in {took:.2?}: {}",
            s.code(),
            s.message()
        );
        assert!(s.message().contains("larger than"), "{}", s.message());

        // index.json a FIFO.
        let (fifo, _) = layout(&dir.path().join("fifo"), &[(LAYER, layer)]);
        std::fs::remove_file(fifo.join("index.json")).unwrap();
        nix::unistd::mkfifo(
            &fifo.join("index.json"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let (s, took) = create_err(&mut c, "fifo", &fifo, Duration::from_secs(20)).await;
        println!(
            "index.json a FIFO: {:?} in {took:.2?}: {}",
            s.code(),
            s.message()
        );
        assert!(s.message().contains("a FIFO"), "{}", s.message());
        assert!(list(&mut c).await.is_empty());
        assert_eq!(cache_entries(&d.home), Vec::<String>::new());
    }

    /// Starts creating `name` from `image`, SIGTERMs `d` two seconds later
    /// and returns how long boxd took to exit.
    async fn stop_during_create(d: &mut Daemon, name: &str, image: &Path) -> Duration {
        let mut c = d.client().await;
        let (name, image) = (name.to_owned(), image.to_path_buf());
        let create = tokio::spawn(async move {
            c.create_box(v1::CreateBoxRequest {
                name,
                spec: Some(spec(&image)),
                ..Default::default()
            })
            .await
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        let finished = create.is_finished();
        // Daemon::stop blocks (and panics after 20 s): off the async threads.
        let (status, took) = tokio::task::block_in_place(|| d.stop());
        let outcome = create.await.unwrap();
        println!(
            "  create still running at SIGTERM: {}; boxd exited ({status}) {took:.2?} after SIGTERM; the create got {:?}",
            !finished,
            outcome
                .map(|_| "created")
                .map_err(|s| s.message().to_owned())
        );
        took
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn sigterm_during_a_create_stuck_on_a_bad_image_exits_promptly() {
        let dir = tempfile::tempdir().unwrap();
        let layer = image::file_layer("hello", b"hi\n");

        // A FIFO as the layer blob: nothing ever writes to it.
        let (fifo, paths) = layout(&dir.path().join("fifo"), &[(LAYER, layer.clone())]);
        std::fs::remove_file(&paths[1]).unwrap();
        nix::unistd::mkfifo(&paths[1], nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let mut d = Daemon::start();
        println!("FIFO layer blob:");
        let took = stop_during_create(&mut d, "fifo", &fifo).await;
        assert!(took < Duration::from_secs(8), "{took:?}");

        // A 1 TiB sparse layer blob, declared as such: hashing it takes
        // minutes, and a stop must not wait for that.
        let (huge, paths) = layout(&dir.path().join("huge"), &[(LAYER, layer)]);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&paths[1])
            .unwrap();
        f.set_len(1 << 40).unwrap();
        drop(f);
        let manifest_path = std::fs::read_dir(huge.join("blobs/sha256"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("\"layers\"")))
            .unwrap();
        // Re-declare the layer at its new size; the manifest's digest changes.
        let mut manifest: Value =
            serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
        manifest["layers"][0]["size"] = json!(1u64 << 40);
        let desc = blob(
            &huge,
            "application/vnd.oci.image.manifest.v1+json",
            &serde_json::to_vec(&manifest).unwrap(),
        );
        let index = json!({"schemaVersion": 2, "manifests": [desc]});
        std::fs::write(huge.join("index.json"), index.to_string()).unwrap();
        let mut d = Daemon::start();
        println!("1 TiB sparse layer blob:");
        let took = stop_during_create(&mut d, "huge", &huge).await;
        assert!(took < Duration::from_secs(8), "{took:?}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_gzip_bomb_layer_is_refused_by_max_image_size() {
        // 256 MiB of zeros in one file, gzipped.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        {
            let mut tar = tar::Builder::new(&mut gz);
            let mut h = tar::Header::new_gnu();
            h.set_size(256 << 20);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, "bomb", std::io::repeat(0).take(256 << 20))
                .unwrap();
            tar.finish().unwrap();
        }
        let bomb = gz.finish().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (layout, _) = layout(dir.path(), &[(LAYER_GZIP, bomb.clone())]);
        let d = Daemon::with_env(
            "namespace",
            vec![("BOXD_MAX_IMAGE_SIZE".into(), "16M".into())],
        );
        let mut c = d.client().await;
        let (s, took) = create_err(&mut c, "bomb", &layout, Duration::from_secs(120)).await;
        println!(
            "a {} KiB gzip layer that unpacks to 256 MiB, max-image-size 16M: {:?} in {took:.2?}: {}",
            bomb.len() / 1024,
            s.code(),
            s.message()
        );
        assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
        assert!(s.message().contains("max-image-size"), "{}", s.message());
        assert!(s.message().contains("16 MiB"), "{}", s.message());
        assert_eq!(
            cache_entries(&d.home),
            Vec::<String>::new(),
            "no cache entry left"
        );
        assert!(list(&mut c).await.is_empty());
        println!("no cache entry, no box left");

        // The setting shows in --print-config.
        let out = std::process::Command::new(bin("boxd"))
            .env("BOXD_MAX_IMAGE_SIZE", "16M")
            .env("BOXD_CONFIG", "/dev/null")
            .arg("--print-config")
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(printed.contains("max-image-size = 16777216"), "{printed}");
    }
}
