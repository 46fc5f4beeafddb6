//! Test support: a real `boxd` per test on a temporary socket and home, the
//! busybox test image, and small helpers to run commands through the client
//! library and through `boxctl`.

pub mod agent;
pub mod bench;
pub mod image;
pub mod podman;
pub mod procs;
pub mod registry;
pub mod sdk;
pub mod serve;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use boxd_client::{Client, ExecEvent, ExecStream, v1};

/// Where the workspace's binaries are: `BOXD_BIN_DIR`, else the cargo
/// target directory this test binary runs from.
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("BOXD_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let path = profile_dir().join(name);
    assert!(
        path.is_file(),
        "{} is not built; run `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// The cargo profile directory (`target/debug`) of the running binary,
/// whether it is a test (`target/debug/deps/…`) or a binary.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    match dir.file_name() {
        Some(n) if n == "deps" => dir.parent().expect("profile dir").to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// The workspace's `target/` directory, for shared test fixtures.
pub fn target_dir() -> PathBuf {
    profile_dir().parent().expect("target dir").to_path_buf()
}

/// Bytes free to an unprivileged writer on the file system holding `path`:
/// tests that write gigabytes size themselves by it rather than fail on a
/// small CI disk.
pub fn free_bytes(path: &std::path::Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(path).expect("statvfs");
    st.blocks_available() as u64 * st.fragment_size() as u64
}

/// The busybox OCI layout, built once per target directory.
pub fn busybox() -> PathBuf {
    image::busybox_layout(&target_dir().join("test-images").join("busybox"))
}

/// The ordinary host user that owns the directories tests let boxes write
/// into, when the tests run as root.
pub const HOST_USER: u32 = 4242;

/// A host directory a box may write into. As root it belongs to
/// [`HOST_USER`]: a root-run boxd shows an ordinary user's directory to its
/// boxes as box root's (box root writes there as that user), but root's
/// files as nobody's, since a box never writes as host root.
pub fn host_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    give_to_host_user(dir.path());
    dir
}

/// Hands `path` (recursively) to [`HOST_USER`] when the tests run as root,
/// and lets that user reach it (its parent directories may be private).
pub fn give_to_host_user(path: &std::path::Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let status = Command::new("chown")
        .args(["-R", &format!("{HOST_USER}:{HOST_USER}")])
        .arg(path)
        .status()
        .expect("run chown");
    assert!(status.success(), "chown {}", path.display());
}

/// A Python with the packages of `tests/NAME/requirements.txt` (pinned: an
/// official SDK and what it needs, from PyPI), in a venv of its own under
/// the target directory, made again only when the file changes.
pub fn sdk_python(name: &str) -> PathBuf {
    let venv = target_dir().join("test-venvs").join(name);
    // Tests of one binary, and test binaries run side by side, make the
    // venv once (as `agent::npm_dir` installs once).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _held = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    std::fs::create_dir_all(target_dir().join("test-venvs")).expect("create test-venvs");
    let lock = std::fs::File::create(
        target_dir()
            .join("test-venvs")
            .join(format!(".{name}.lock")),
    )
    .expect("create the venv's lock");
    // SAFETY: flock on a descriptor this process holds; released when
    // `lock` is dropped at the end of this function.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    let python = venv.join("bin/python");
    let stamp = venv.join("requirements.txt");
    let file = agent::workspace()
        .join("tests")
        .join(name)
        .join("requirements.txt");
    let wanted =
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    if python.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return python;
    }
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("run python3 -m venv (apt-get install python3-venv)");
    assert!(status.success(), "python3 -m venv failed");
    let status = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&file)
        .status()
        .expect("run pip");
    assert!(status.success(), "pip install -r {} failed", file.display());
    std::fs::write(&stamp, wanted).expect("write the venv's stamp");
    python
}

/// A static test program from `tests/src/probes/NAME.c`, built once per
/// target directory into a directory of its own (mount it into a box).
/// Returns that directory.
pub fn probes() -> PathBuf {
    let dir = target_dir().join("test-images").join("probes");
    std::fs::create_dir_all(&dir).expect("create the probes directory");
    let sources = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/probes");
    let Ok(entries) = std::fs::read_dir(&sources) else {
        // A copy of the suite run elsewhere (scripts/isolation-as-user.sh)
        // brings its probes along, built.
        assert!(
            dir.join("sockprobe").is_file(),
            "no probes in {}",
            dir.display()
        );
        return dir;
    };
    for entry in entries {
        let src = entry.expect("probe source").path();
        let Some(name) = src
            .file_stem()
            .filter(|_| src.extension().is_some_and(|e| e == "c"))
        else {
            continue;
        };
        let out = dir.join(name);
        let fresh = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        if out.is_file() && fresh(&out) >= fresh(&src) {
            continue;
        }
        let tmp = dir.join(format!(
            ".{}.{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        let status = Command::new("cc")
            .args(["-O2", "-static", "-o"])
            .arg(&tmp)
            .arg(&src)
            .status()
            .expect("run cc (apt-get install gcc libc6-dev)");
        assert!(status.success(), "building {}", src.display());
        std::fs::rename(&tmp, &out).expect("install the probe");
    }
    // Readable by whoever runs a box (an unprivileged daemon's boxes too).
    let _ = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&dir)
        .stderr(Stdio::null())
        .status();
    dir
}

/// A running `boxd` on its own temporary socket and home.
pub struct Daemon {
    child: Option<Child>,
    /// When set, the home is a tmpfs of this size, mounted in a mount
    /// namespace of boxd's own (so a full disk can be tested).
    tmpfs_home: Option<String>,
    /// A shell snippet run just before boxd, in the shell that becomes
    /// boxd (to leave it descriptors, say).
    wrapper: Option<String>,
    engine: &'static str,
    env: Vec<(String, String)>,
    /// Started with no `--socket`/`--home`: found through `HOME` and
    /// `XDG_RUNTIME_DIR` alone ([`Daemon::with_default_paths`]).
    defaults: bool,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub home: PathBuf,
}

impl Daemon {
    /// A daemon with the namespace engine (the one every host here runs).
    pub fn start() -> Daemon {
        Daemon::with_engine("namespace")
    }

    /// A daemon with `--engine ENGINE` (`auto`, `namespace`, `boxlite`).
    pub fn with_engine(engine: &'static str) -> Daemon {
        Daemon::with_env(engine, Vec::new())
    }

    /// A daemon with `--engine ENGINE` and extra environment variables.
    pub fn with_env(engine: &'static str, env: Vec<(String, String)>) -> Daemon {
        let mut d = Daemon::unstarted(engine, env);
        d.spawn();
        d
    }

    /// A namespace-engine daemon whose home is a tmpfs of `size` (`16m`),
    /// visible only to boxd: `unshare --mount` (with `--user` when not
    /// root) mounts it just before boxd starts.
    pub fn with_tmpfs_home(size: &str) -> Daemon {
        let mut d = Daemon::unstarted("namespace", Vec::new());
        std::fs::create_dir_all(&d.home).unwrap();
        d.tmpfs_home = Some(size.to_owned());
        d.spawn();
        d
    }

    /// A namespace-engine daemon with extra environment, started by a shell
    /// that first runs `snippet` and then becomes boxd (`exec 7</`, to
    /// leave it a descriptor).
    pub fn wrapped(snippet: &str, env: Vec<(String, String)>) -> Daemon {
        let mut d = Daemon::unstarted("namespace", env);
        d.wrapper = Some(snippet.to_owned());
        d.spawn();
        d
    }

    /// A namespace-engine daemon whose address space is at most `bytes`
    /// (`RLIMIT_AS`, set by the shell that becomes boxd: `ulimit -v`;
    /// what boxd starts inherits it). Memory a client makes boxd take then
    /// shows as a failed allocation (boxd aborts) instead of a slow host.
    pub fn with_address_space_limit(bytes: u64) -> Daemon {
        Daemon::wrapped(&format!("ulimit -v {}", bytes / 1024), Vec::new())
    }

    /// A daemon that finds its socket and home as a user's own does, from
    /// the per-user defaults: `HOME` is `DIR/user`, `XDG_RUNTIME_DIR` is
    /// `DIR/xdg`, and no flag or `BOXD_*` variable says anything. Its
    /// socket is then `DIR/xdg/boxd/boxd.sock`, its home
    /// `DIR/user/.local/share/boxd`.
    pub fn with_default_paths() -> Daemon {
        let mut d = Daemon::unstarted("namespace", Vec::new());
        let user = d.dir.path().join("user");
        let xdg = d.dir.path().join("xdg");
        for dir in [&user, &xdg] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .unwrap();
        }
        d.socket = xdg.join("boxd/boxd.sock");
        d.home = user.join(".local/share/boxd");
        d.defaults = true;
        d.spawn();
        d
    }

    /// The `HOME` of a [`Daemon::with_default_paths`] daemon's user.
    pub fn user_home(&self) -> PathBuf {
        self.dir.path().join("user")
    }

    /// A temporary socket and home, nothing started.
    fn unstarted(engine: &'static str, env: Vec<(String, String)>) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("boxd-test-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let socket = dir.path().join("run").join("boxd.sock");
        let home = dir.path().join("home");
        Daemon {
            child: None,
            tmpfs_home: None,
            wrapper: None,
            engine,
            env,
            defaults: false,
            dir,
            socket,
            home,
        }
    }

    /// Starts boxd on this socket and home and waits until it answers.
    fn spawn(&mut self) {
        let mut cmd = self.command();
        if let Some(size) = &self.tmpfs_home {
            let boxd = cmd;
            cmd = Command::new("unshare");
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                cmd.args(["--user", "--map-current-user"]);
            }
            cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(format!(
                    "mount -t tmpfs -o size={size},mode=0700 boxd-home \"$0\" && exec \"$@\""
                ))
                .arg(&self.home)
                .arg(boxd.get_program())
                .args(boxd.get_args())
                .envs(boxd.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .stdin(Stdio::null());
        }
        if let Some(snippet) = &self.wrapper {
            let boxd = cmd;
            cmd = Command::new("sh");
            cmd.arg("-c")
                .arg(format!("{snippet}\nexec \"$0\" \"$@\""))
                .arg(boxd.get_program())
                .args(boxd.get_args())
                .envs(boxd.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .stdin(Stdio::null());
        }
        let child = cmd.spawn().expect("spawn boxd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("boxd exited early: {status}");
            }
            assert!(Instant::now() < deadline, "boxd did not come up");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A `boxd` command for this socket and home (not started).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(bin("boxd"));
        if self.defaults {
            cmd.env("HOME", self.user_home())
                .env("XDG_RUNTIME_DIR", self.dir.path().join("xdg"))
                .env_remove("XDG_DATA_HOME")
                .env_remove("BOXD_SOCKET")
                .env_remove("BOXD_HOME");
        } else {
            cmd.arg("--socket")
                .arg(&self.socket)
                .arg("--home")
                .arg(&self.home);
        }
        // The microVM suites against a remote BoxLite runtime
        // (scripts/vm-suite.sh): every BoxLite daemon on that server.
        if self.engine == "boxlite"
            && let (Ok(url), Ok(key)) = (
                std::env::var("BOXD_TEST_BOXLITE_URL"),
                std::env::var("BOXD_TEST_BOXLITE_API_KEY_FILE"),
            )
            && !self.env.iter().any(|(k, _)| k == "BOXD_BOXLITE_URL")
        {
            cmd.arg("--boxlite-url")
                .arg(url)
                .arg("--boxlite-api-key-file")
                .arg(key);
        }
        cmd.arg("--engine")
            .arg(self.engine)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        cmd
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub async fn client(&self) -> Client {
        boxd_client::connect(&self.socket)
            .await
            .expect("connect to boxd")
    }

    /// A `boxctl` command aimed at this daemon.
    pub fn boxctl(&self) -> Command {
        let mut cmd = Command::new(bin("boxctl"));
        cmd.env("BOXD_SOCKET", &self.socket)
            .env("BOXD_HOME", &self.home);
        cmd
    }

    /// A `harness-box-exec --raw` command aimed at this daemon (byte for
    /// byte, for commands that are not ACP agents).
    pub fn proxy(&self) -> Command {
        let mut cmd = self.acp_proxy();
        cmd.arg("--raw");
        cmd
    }

    /// A `harness-box-exec` command aimed at this daemon, in its default
    /// ACP mode (for ACP agents).
    pub fn acp_proxy(&self) -> Command {
        let mut cmd = Command::new(bin("harness-box-exec"));
        cmd.env("BOXD_SOCKET", &self.socket)
            .env("BOXD_HOME", &self.home);
        cmd
    }

    /// Stops boxd with SIGTERM and returns its exit status and how long it took.
    pub fn stop(&mut self) -> (std::process::ExitStatus, Duration) {
        let mut child = self.child.take().expect("running");
        let begin = Instant::now();
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return (status, begin.elapsed());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("boxd ignored SIGTERM for 20 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills boxd with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
    }

    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        self.spawn();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_daemon();
        // Boxes outlive their daemon (under their supervisors): a test's
        // boxes go with its home.
        stop_supervisors(&self.home.join("boxes"));
    }
}

/// Asks every box supervisor under `boxes` to stop its box (as `boxctl
/// stop --force` would through a daemon), in parallel, and waits.
pub fn stop_supervisors(boxes: &std::path::Path) {
    let Ok(dirs) = std::fs::read_dir(boxes) else {
        return;
    };
    let stops: Vec<_> = dirs
        .flatten()
        .map(|d| d.path().join("supervisor.sock"))
        .filter(|s| s.exists())
        .map(|socket| {
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let Ok(mut s) = std::os::unix::net::UnixStream::connect(&socket) else {
                    return;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(15)));
                // One `J` frame: {"Stop":{"force":true}} (the wire of
                // daemon/src/engine/namespace/supervisor/wire.rs).
                let body = br#"{"Stop":{"force":true}}"#;
                let mut frame = ((body.len() + 1) as u32).to_be_bytes().to_vec();
                frame.push(b'J');
                frame.extend_from_slice(body);
                let _ = s.write_all(&frame);
                let _ = s.read(&mut [0u8; 64]);
            })
        })
        .collect();
    for t in stops {
        let _ = t.join();
    }
}

impl Daemon {
    fn stop_daemon(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The host pid of a process one of whose arguments is `word` (a box's
/// `sleep 31338`, seen from the host), waiting up to 4 s for it to appear.
pub fn host_process(word: &str) -> Option<u32> {
    for _ in 0..200 {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.split(|b| *b == 0).any(|w| w == word.as_bytes()) {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A box spec from the busybox image.
pub fn busybox_spec() -> v1::BoxSpec {
    v1::BoxSpec {
        image: busybox().to_string_lossy().into_owned(),
        ..Default::default()
    }
}

/// Creates (or reuses) a box.
pub async fn create(client: &mut Client, name: &str, spec: v1::BoxSpec) -> v1::CreateBoxResponse {
    client
        .create_box(v1::CreateBoxRequest {
            name: name.into(),
            spec: Some(spec),
            ..Default::default()
        })
        .await
        .expect("create box")
        .into_inner()
}

/// Creates and starts a busybox box.
pub async fn up(client: &mut Client, name: &str, spec: v1::BoxSpec) -> v1::BoxInfo {
    client
        .create_box(v1::CreateBoxRequest {
            name: name.into(),
            spec: Some(spec),
            ..Default::default()
        })
        .await
        .expect("create box");
    start(client, name).await
}

/// Every box the daemon lists.
pub async fn list(client: &mut Client) -> Vec<v1::BoxInfo> {
    client
        .list_boxes(v1::ListBoxesRequest {})
        .await
        .expect("list boxes")
        .into_inner()
        .boxes
}

/// Removes a box, running or not (`rm -f`).
pub async fn remove(client: &mut Client, name: &str) {
    client
        .remove_box(v1::RemoveBoxRequest {
            name: name.into(),
            force: true,
        })
        .await
        .unwrap_or_else(|e| panic!("remove {name}: {e:?}"));
}

/// Starts an existing box.
pub async fn start(client: &mut Client, name: &str) -> v1::BoxInfo {
    client
        .start_box(v1::StartBoxRequest { name: name.into() })
        .await
        .expect("start box")
        .into_inner()
        .r#box
        .expect("box info")
}

/// What a finished exec produced.
#[derive(Debug, Default)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: v1::ExecExit,
}

impl Output {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

pub fn start_req(box_name: &str, argv: &[&str]) -> v1::ExecStart {
    v1::ExecStart {
        box_name: box_name.into(),
        command: argv[0].into(),
        args: argv[1..].iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Reads an exec to its end, checking that the exit is the last event.
pub async fn collect(mut exec: ExecStream) -> Output {
    let mut out = Output::default();
    loop {
        match exec.next().await.expect("exec stream") {
            Some(ExecEvent::Stdout(b)) => out.stdout.extend_from_slice(&b),
            Some(ExecEvent::Stderr(b)) => out.stderr.extend_from_slice(&b),
            Some(ExecEvent::Exit(e)) => {
                out.exit = e;
                // Nothing may follow the exit (`next` reads the stream's
                // end and refuses anything else).
                assert!(
                    matches!(exec.next().await, Ok(None)),
                    "an event followed the exit"
                );
                return out;
            }
            None => panic!("stream ended without exit"),
        }
    }
}

/// Runs a command to completion in a box.
pub async fn run(client: &mut Client, box_name: &str, argv: &[&str]) -> Output {
    let exec = ExecStream::start(client, start_req(box_name, argv))
        .await
        .expect("exec start");
    collect(exec).await
}

/// Runs `sh -c SCRIPT` and returns stdout, asserting exit 0.
pub async fn sh(client: &mut Client, box_name: &str, script: &str) -> String {
    let out = run(client, box_name, &["sh", "-c", script]).await;
    assert_eq!(out.exit.code, Some(0), "{script}: {out:?}");
    out.stdout_str()
}

/// A `boxctl jsonl` driver process, fed lines and read frame by frame.
pub struct Jsonl {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    frames: std::sync::mpsc::Receiver<serde_json::Value>,
    /// Every frame read so far, in order.
    pub seen: Vec<serde_json::Value>,
}

impl Jsonl {
    /// Starts the driver against `socket` (it need not answer): `boxctl
    /// jsonl`, or the command in `JSONL_DRIVER` (split on whitespace), so the
    /// conformance suite can be pointed at any implementation of the
    /// envelope. The socket is passed as `BOXD_SOCKET`.
    pub fn start(socket: &std::path::Path) -> Jsonl {
        let mut cmd = match std::env::var("JSONL_DRIVER") {
            Ok(line) if !line.trim().is_empty() => {
                let mut words = line.split_whitespace();
                let mut c = Command::new(words.next().expect("a command"));
                c.args(words);
                c
            }
            _ => {
                let mut c = Command::new(bin("boxctl"));
                c.arg("jsonl");
                c
            }
        };
        // Never a daemon of its own: a test's daemon is the one meant.
        let mut child = cmd
            .env("BOXD_SOCKET", socket)
            .env("BOXD_AUTOSTART", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn boxctl jsonl");
        let stdout = child.stdout.take().expect("piped");
        let (tx, frames) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { return };
                let value = serde_json::from_slice(&line).unwrap_or_else(|e| {
                    panic!(
                        "stdout carried a non-frame ({e}): {:?}",
                        String::from_utf8_lossy(&line)
                    )
                });
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Jsonl {
            child,
            stdin,
            frames,
            seen: Vec::new(),
        }
    }

    /// Writes raw bytes (a line must end in `\n`).
    pub fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to the driver");
        stdin.flush().expect("flush");
    }

    /// Sends a request.
    pub fn request(&mut self, id: serde_json::Value, method: &str, params: serde_json::Value) {
        let line = serde_json::json!({"id": id, "method": method, "params": params}).to_string();
        self.write(format!("{line}\n").as_bytes());
    }

    /// The next frame (panics after 30 s of silence).
    pub fn next_frame(&mut self) -> serde_json::Value {
        let f = self
            .frames
            .recv_timeout(Duration::from_secs(30))
            .expect("a frame within 30 s");
        self.seen.push(f.clone());
        f
    }

    /// Reads frames until the reply (or error) for `id`.
    pub fn reply(&mut self, id: &serde_json::Value) -> serde_json::Value {
        loop {
            let f = self.next_frame();
            if f.get("id") == Some(id) {
                return f;
            }
        }
    }

    /// Sends a request and waits for its answer.
    pub fn call(&mut self, id: u64, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.request(id.into(), method, params);
        self.reply(&id.into())
    }

    /// The `exit` event of `exec_id`, read already or read now.
    pub fn exit_of(&mut self, exec_id: &str) -> serde_json::Value {
        self.frame_where(|f| f["type"] == "exit" && f["execId"] == exec_id)
    }

    /// The first frame, read already or read now, that `matches`. Events
    /// travel apart from replies, so one may come after the reply to the
    /// request that caused it.
    pub fn frame_where(
        &mut self,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        if let Some(f) = self.seen.iter().find(|f| matches(f)) {
            return f.clone();
        }
        loop {
            let f = self.next_frame();
            if matches(&f) {
                return f;
            }
        }
    }

    /// Closes stdin (end of input) and waits for the driver to exit.
    pub fn close(mut self) -> (std::process::ExitStatus, Vec<serde_json::Value>) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for the driver");
        while let Ok(f) = self.frames.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(f);
        }
        (status, self.seen)
    }
}

/// Runs `f` on a thread of its own whose uid and gid are `uid` and `gid`
/// (no supplementary groups); the rest of the process keeps its
/// credentials. Files that thread creates are `uid`'s, and a socket it
/// connects or listens on reports `uid` to `SO_PEERCRED`. Needs root.
/// Raw system calls: glibc's wrappers would change every thread.
#[cfg(target_os = "linux")]
pub fn as_user<T: Send + 'static>(uid: u32, gid: u32, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let check = |rc: libc::c_long, what: &str| {
            assert_eq!(rc, 0, "{what}: {}", std::io::Error::last_os_error());
        };
        // SAFETY: credential system calls on this thread only, with plain
        // integers and an empty group list.
        unsafe {
            check(
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
                "setgroups",
            );
            check(
                libc::syscall(libc::SYS_setresgid, gid, gid, gid),
                "setresgid",
            );
            check(
                libc::syscall(libc::SYS_setresuid, uid, uid, uid),
                "setresuid",
            );
        }
        f()
    })
    .join()
    .expect("the thread running as another user")
}

/// A gRPC client over an already connected stream, with none of
/// `boxd_client::connect`'s checks: for tests of the daemon's own checks
/// (the stream is used once; the channel does not reconnect).
pub async fn client_over(stream: std::os::unix::net::UnixStream) -> Client {
    use boxd_client::tonic::transport::Endpoint;
    stream.set_nonblocking(true).expect("nonblocking");
    let stream = std::sync::Mutex::new(Some(stream));
    let channel = Endpoint::from_static("http://boxd.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let s = stream.lock().unwrap().take();
            async move {
                let s = s.ok_or_else(|| std::io::Error::other("the stream was used"))?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::from_std(s)?,
                ))
            }
        }))
        .await
        .expect("a channel over the stream");
    v1::boxd_client::BoxdClient::new(channel)
}

/// Runs a command (a client) that must succeed; its output.
pub fn ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().expect("run the command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a client command that must be refused (exit 1, nothing on
/// stdout); its stderr.
pub fn fails(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().expect("run the command");
    assert_eq!(out.status.code(), Some(1), "{cmd:?} should fail with 1");
    assert!(out.stdout.is_empty(), "{cmd:?}: stdout {:?}", out.stdout);
    String::from_utf8_lossy(&out.stderr).into_owned()
}
