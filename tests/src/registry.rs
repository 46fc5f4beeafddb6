//! A real OCI registry on loopback for the image tests: Debian's
//! `docker-registry` on a free port with its own storage directory, images
//! pushed into it by Debian's `skopeo` from local OCI layouts, optionally
//! behind htpasswd auth, optionally behind a slow proxy (to interrupt a pull
//! half way).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const USER: &str = "boxd";
pub const PASSWORD: &str = "test-password";

pub struct Registry {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub auth: bool,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    /// Starts a registry; with `auth`, it requires `USER`/`PASSWORD`.
    pub fn start(auth: bool) -> Registry {
        assert!(
            Path::new("/usr/bin/docker-registry").is_file(),
            "docker-registry is missing: scripts/install-deps.sh installs it"
        );
        let dir = tempfile::Builder::new()
            .prefix("boxd-registry-")
            .tempdir_in("/tmp")
            .unwrap();
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("data").display()
        );
        if auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd (apache2-utils)");
            assert!(out.status.success());
            std::fs::write(dir.path().join("htpasswd"), out.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: boxd-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let mut r = Registry {
            child: None,
            dir,
            port,
            auth,
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.log_path()).unwrap();
        let child = Command::new("/usr/bin/docker-registry")
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("registry.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Copies an OCI layout into the registry as `name:tag` (all platforms).
    pub fn push(&self, layout: &Path, name_tag: &str) {
        let mut cmd = Command::new("skopeo");
        cmd.args([
            "copy",
            "--quiet",
            "--multi-arch",
            "all",
            "--dest-tls-verify=false",
        ]);
        if self.auth {
            cmd.arg(format!("--dest-creds={USER}:{PASSWORD}"));
        }
        let out = cmd
            .arg(format!("oci:{}", layout.display()))
            .arg(format!("docker://{}/{name_tag}", self.host()))
            .output()
            .expect("skopeo");
        assert!(
            out.status.success(),
            "skopeo copy failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The stored file of a blob.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP proxy to `target` that passes at most `bytes_per_sec` from the
/// server to the client, so a pull takes long enough to be interrupted.
pub struct SlowProxy {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl SlowProxy {
    pub fn start(target: u16, bytes_per_sec: usize) -> SlowProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (mut c_read, mut s_write) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_read, &mut s_write);
                    let _ = s_write.shutdown(std::net::Shutdown::Write);
                });
                let (mut s_read, mut c_write) = (server, client);
                std::thread::spawn(move || {
                    let chunk = 16 * 1024;
                    let pause = Duration::from_secs_f64(chunk as f64 / bytes_per_sec as f64);
                    let mut buf = vec![0u8; chunk];
                    loop {
                        match s_read.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if c_write.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                                std::thread::sleep(pause);
                            }
                        }
                    }
                    let _ = c_write.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        SlowProxy { port, stop }
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
