//! A real `boxlite serve` (BoxLite 0.10.8's REST server, built from the
//! Rust package registry by `scripts/boxlite-serve.sh`) on loopback with an
//! API key, for the remote BoxLite engine's tests. VMs do not boot here:
//! the server creates, lists and removes boxes, and fails their start.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent;

/// The `boxlite` binary (built once per machine, cached).
pub fn binary() -> PathBuf {
    let out = Command::new(agent::workspace().join("scripts/boxlite-serve.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/boxlite-serve.sh");
    assert!(out.status.success(), "scripts/boxlite-serve.sh failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// One server: its port, key, home and configuration stay across
/// [`Serve::restart`].
pub struct Serve {
    child: Option<Child>,
    bin: PathBuf,
    /// BoxLite's options as JSON (`boxlite serve --config`), if any.
    config: Option<PathBuf>,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub key: String,
    /// A 0600 file holding the key (what `--boxlite-api-key-file` reads).
    pub key_file: PathBuf,
}

impl Serve {
    pub fn start() -> Serve {
        Serve::start_with_registries(&[])
    }

    /// A server that pulls from these registries (`HOST:PORT`) over plain
    /// HTTP, as BoxLite's `image_registries` option says.
    pub fn start_with_registries(http_registries: &[String]) -> Serve {
        let dir = tempfile::Builder::new()
            .prefix("boxlite-serve-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let key = format!("k-{:016x}", rand::random::<u64>());
        let key_file = dir.path().join("api-key");
        std::fs::write(&key_file, format!("{key}\n")).unwrap();
        std::fs::set_permissions(
            &key_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let config = (!http_registries.is_empty()).then(|| {
            let registries: Vec<serde_json::Value> = http_registries
                .iter()
                .map(|host| serde_json::json!({ "host": host, "transport": "http" }))
                .collect();
            let path = dir.path().join("config.json");
            std::fs::write(
                &path,
                serde_json::json!({ "image_registries": registries }).to_string(),
            )
            .unwrap();
            path
        });
        let mut s = Serve {
            child: None,
            bin: binary(),
            config,
            dir,
            port,
            key,
            key_file,
        };
        s.spawn();
        s
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("serve.log"))
            .unwrap();
        let mut cmd = Command::new(&self.bin);
        // The binary scripts/boxlite-serve.sh builds has no runtime embedded.
        if std::env::var_os("BOXLITE_RUNTIME_DIR").is_none() {
            let out = Command::new(agent::workspace().join("scripts/boxlite-runtime.sh"))
                .stderr(Stdio::inherit())
                .output()
                .expect("run scripts/boxlite-runtime.sh");
            cmd.env(
                "BOXLITE_RUNTIME_DIR",
                String::from_utf8_lossy(&out.stdout).trim(),
            );
        }
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        let child = cmd
            .args(["serve", "--host", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--home")
            .arg(self.dir.path().join("boxlite"))
            .env("HOME", &home)
            .env("BOXLITE_SERVE_API_KEY", &self.key)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn boxlite serve");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("boxlite serve exited ({status}): {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "boxlite serve did not listen: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// Stops the server (SIGINT, as Ctrl-C; it stops its runtime).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill on a child we spawned and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().unwrap().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// `GET /v1/PATH` with the key, by curl: the server's own view.
    pub fn get(&self, path: &str) -> serde_json::Value {
        let out = Command::new("curl")
            .args(["-sS", "--fail-with-body", "-H"])
            .arg(format!("Authorization: Bearer {}", self.key))
            .arg(format!("{}/v1/{path}", self.url()))
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "GET {path}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `DELETE /v1/PATH` with the key: a change behind boxd's back.
    pub fn delete(&self, path: &str) {
        let out = Command::new("curl")
            .args(["-sS", "--fail-with-body", "-X", "DELETE", "-H"])
            .arg(format!("Authorization: Bearer {}", self.key))
            .arg(format!("{}/v1/{path}", self.url()))
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "DELETE {path}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// The names of the server's boxes.
    pub fn box_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.get("boxes")["boxes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    pub fn home(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop();
    }
}
