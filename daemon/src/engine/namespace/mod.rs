//! The namespace engine: OCI images run under bubblewrap.
//!
//! A started box is one `bwrap` process tree: user, mount, pid, ipc and uts
//! namespaces (plus a network namespace with only loopback when the box may
//! reach nothing), the box's own root filesystem, and a static init that
//! keeps them alive. Every exec joins those namespaces through
//! [`nsexec`], so all processes of a box share one pid namespace and die
//! with it.
//!
//! Invariants:
//! - no process outlives its box: stopping kills bwrap, whose pid 1 dies
//!   with it (`--die-with-parent`), which ends the pid namespace;
//! - a box's files live in `BOX/rootfs`, a private copy of the cached image,
//!   and survive stop, start and daemon restarts until the box is removed.

mod confine;
pub mod egress;
pub mod nsexec;
pub mod options;
mod sandbox;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    Created, Ended, Engine, EngineBox, EngineInfo, ExecSpec, Images, InUse, Isolation, Process,
};
use crate::error::{Error, Result};
use crate::image::ImageConfig;
use crate::image::local::LocalImages;
use crate::registry::BoxRecord;
use sandbox::Sandbox;

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub struct NamespaceEngine {
    info: EngineInfo,
    bwrap: PathBuf,
    images: LocalImages,
    running: Arc<Mutex<HashMap<String, Running>>>,
    ended_tx: tokio::sync::mpsc::UnboundedSender<Ended>,
    ended_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Ended>>>,
}

/// A started box, the image defaults its execs use, and its egress proxy.
struct Running {
    sandbox: Sandbox,
    config: Arc<ImageConfig>,
    /// Stops the box's egress proxy (when it has one) once the box is
    /// forgotten, however that happens: held, never read.
    _proxy: Option<tokio_util::sync::DropGuard>,
}

/// The box to join for an exec, and how to tell that it ended.
struct Target {
    join: nsexec::Target,
    config: Arc<ImageConfig>,
    /// The box's pid 1, and how to tell that it ended.
    pid1: i32,
    ended: tokio::sync::watch::Receiver<Option<String>>,
}

impl NamespaceEngine {
    /// Finds bubblewrap and prepares the image cache under `home`, whose
    /// unpacks and imports run under `limits` (`max-image-size`, and the
    /// daemon's stop signal).
    pub fn new(home: &Path, limits: crate::image::ImageLimits) -> Result<NamespaceEngine> {
        let bwrap = find_bwrap().ok_or_else(|| {
            Error::FailedPrecondition(
                "bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap)".into(),
            )
        })?;
        let version = std::process::Command::new(&bwrap)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        let info = EngineInfo {
            name: "namespace",
            version,
            isolation: Isolation::Namespace,
            capabilities: super::capabilities(&[
                "output.binary",
                "image.pull",
                "image.import",
                "image.prune",
                "net.allowlist",
                "net.secrets",
            ]),
            notes: vec![
                "boxes run in Linux namespaces under bubblewrap, not in microVMs".into(),
                "allow-net is enforced: a box has no route out; an HTTP(S) proxy run by boxd reaches only the listed hosts (names, *.wildcards, IP addresses, CIDRs); an empty list means no network at all".into(),
                "secrets stay in boxd: the box holds a placeholder, which the proxy replaces in plain-HTTP requests to the secret's hosts (not inside HTTPS, which it does not decrypt)".into(),
                "cpus, memory and disk size are recorded but not enforced".into(),
            ],
            network_filtering: true,
            create_warning: None,
            boxes_outlive_daemon: false,
        };
        let (ended_tx, ended_rx) = tokio::sync::mpsc::unbounded_channel();
        Ok(NamespaceEngine {
            info,
            bwrap,
            images: LocalImages::new(home.join("images"), limits),
            running: Arc::default(),
            ended_tx,
            ended_rx: Mutex::new(Some(ended_rx)),
        })
    }

    /// Records why `auto` chose this engine instead of microVMs: first in
    /// `Describe`'s notes and a warning on every create.
    pub fn chosen_because(mut self, reason: String) -> NamespaceEngine {
        let why = format!("boxes run in Linux namespaces, not microVMs: {reason}");
        self.info.notes[0] = why.clone();
        self.info.create_warning = Some(why);
        self
    }

    /// The running box to join, and its image's defaults.
    fn target(&self, id: &str) -> Result<Target> {
        let running = self.running.lock().expect("sandbox table");
        let r = running
            .get(id)
            .ok_or_else(|| Error::FailedPrecondition("the box is not running".into()))?;
        Ok(Target {
            join: nsexec::Target { pid: r.sandbox.pid },
            config: r.config.clone(),
            pid1: r.sandbox.pid1,
            ended: r.sandbox.ended(),
        })
    }

    /// Forgets a box whose sandbox ended without a stop, and reports it.
    /// A stop removes the box from the table first, so it is not reported.
    fn watch_box(
        &self,
        record: &BoxRecord,
        init_pid: i32,
        mut ended: tokio::sync::watch::Receiver<Option<String>>,
    ) {
        let (id, name) = (record.id.clone(), record.name.clone());
        let running = self.running.clone();
        let report = self.ended_tx.clone();
        tokio::spawn(async move {
            let reason = match ended.wait_for(Option::is_some).await {
                Ok(r) => r.clone().unwrap_or_default(),
                Err(_) => return,
            };
            let gone = {
                let mut table = running.lock().expect("sandbox table");
                let ours = table.get(&id).is_some_and(|r| r.sandbox.pid == init_pid);
                ours.then(|| table.remove(&id))
            };
            if gone.is_some() {
                tracing::warn!(box_id = %id, %reason, "box ended");
                let _ = report.send(Ended { id, name, reason });
            }
        });
    }
}

fn find_bwrap() -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("bwrap"));
    from_path
        .chain([
            PathBuf::from("/usr/bin/bwrap"),
            PathBuf::from("/usr/local/bin/bwrap"),
        ])
        .find(|p| p.is_file())
}

fn rootfs(record: &BoxRecord) -> PathBuf {
    record.dir.join("rootfs")
}

fn image_config_path(record: &BoxRecord) -> PathBuf {
    record.dir.join("image.json")
}

#[async_trait]
impl Engine for NamespaceEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn images(&self) -> &dyn Images {
        self
    }

    async fn create(&self, record: &BoxRecord) -> Result<Created> {
        let image = self.images.for_create(&record.spec.image).await?;
        let target = rootfs(record);
        let out = tokio::process::Command::new("cp")
            .arg("-a")
            .arg("--reflink=auto")
            .arg(&image.rootfs)
            .arg(&target)
            .output()
            .await
            .map_err(|e| Error::io("run cp", e))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            if why.contains("No space left") || why.contains("Disk quota exceeded") {
                return Err(Error::no_space("copying the image into the box"));
            }
            return Err(Error::Internal(format!(
                "copying the image into the box failed: {}",
                why.trim()
            )));
        }
        let config =
            serde_json::to_vec(&image.config).map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(image_config_path(record), config)
            .map_err(|e| Error::io("write image.json", e))?;

        let spec = &record.spec;
        let mut warnings = Vec::new();
        if spec.cpus.is_some() || spec.memory_mib.is_some() || spec.disk_size_gb.is_some() {
            warnings.push("the namespace engine does not enforce cpus, memory or disk size".into());
        }
        if !spec.secrets.is_empty() {
            warnings.push(
                "secrets are replaced in plain-HTTP requests only: inside HTTPS the placeholder goes out as it is"
                    .into(),
            );
        }
        Ok(Created {
            image_digest: image.digest,
            warnings,
        })
    }

    async fn start(&self, record: &BoxRecord) -> Result<()> {
        if self
            .running
            .lock()
            .expect("sandbox table")
            .contains_key(&record.id)
        {
            return Ok(());
        }
        // The image's env and working directory, read once per start rather
        // than on every exec.
        let config: ImageConfig = std::fs::read(image_config_path(record))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let sandbox = Sandbox::start(&self.bwrap, record, &rootfs(record)).await?;
        let (init_pid, ended) = (sandbox.pid, sandbox.ended());
        let proxy = match record.spec.allow_net.is_empty() {
            true => None,
            false => match start_proxy(record, init_pid).await {
                Ok(guard) => Some(guard),
                Err(e) => {
                    sandbox.stop(true).await;
                    return Err(e);
                }
            },
        };
        let running = Running {
            sandbox,
            config: Arc::new(config),
            _proxy: proxy,
        };
        self.running
            .lock()
            .expect("sandbox table")
            .insert(record.id.clone(), running);
        self.watch_box(record, init_pid, ended);
        Ok(())
    }

    async fn stop(&self, record: &BoxRecord, force: bool) -> Result<()> {
        let sb = self
            .running
            .lock()
            .expect("sandbox table")
            .remove(&record.id);
        if let Some(r) = sb {
            r.sandbox.stop(force).await;
        }
        Ok(())
    }

    async fn remove(&self, record: &BoxRecord) -> Result<()> {
        self.stop(record, true).await?;
        remove_tree(&record.dir).await
    }

    async fn list(&self) -> Result<Vec<EngineBox>> {
        Ok(self
            .running
            .lock()
            .expect("sandbox table")
            .keys()
            .map(|id| EngineBox {
                id: id.clone(),
                running: true,
            })
            .collect())
    }

    async fn exec(&self, record: &BoxRecord, spec: ExecSpec) -> Result<Process> {
        let Target {
            join,
            config,
            pid1,
            ended,
        } = self.target(&record.id)?;
        let mut env = config.env.clone();
        for (k, v) in egress::exec_env(&record.spec).into_iter().chain(spec.env) {
            env.retain(|(key, _)| *key != k);
            env.push((k, v));
        }
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        let working_dir = Some(spec.working_dir.clone())
            .filter(|d| !d.is_empty())
            .or(config.working_dir.clone().filter(|d| !d.is_empty()))
            .unwrap_or_else(|| "/".into());
        let mut process = nsexec::spawn(
            join,
            &spec.command,
            &spec.args,
            env,
            &working_dir,
            spec.stdin,
            spec.tty,
        )
        .await?;
        let exit = process.exit;
        process.exit = Box::pin(async move {
            let mut status = exit.await;
            if status.signal.is_some() && status.error.is_none() {
                status.error = box_ended(pid1, ended).await;
            }
            status
        });
        Ok(process)
    }

    fn ended(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Ended>> {
        self.ended_rx.lock().expect("ended receiver").take()
    }

    async fn shutdown(&self) {
        let all: Vec<Sandbox> = self
            .running
            .lock()
            .expect("sandbox table")
            .drain()
            .map(|(_, r)| r.sandbox)
            .collect();
        for sb in all {
            sb.stop(true).await;
        }
    }
}

/// Starts the box's egress proxy on a socket inside its network namespace;
/// the proxy runs until the returned guard is dropped.
async fn start_proxy(record: &BoxRecord, init_pid: i32) -> Result<tokio_util::sync::DropGuard> {
    use crate::egress::{AllowList, Proxy, Secrets};
    let spec = &record.spec;
    // Validated at create; an old record that no longer parses is refused.
    let allow = AllowList::parse(&spec.allow_net)
        .map_err(|e| Error::FailedPrecondition(format!("allow-net: {e}")))?;
    let secrets = Secrets::new(spec.secrets.clone())
        .map_err(|e| Error::FailedPrecondition(format!("secrets: {e}")))?;
    let listener = egress::listen_in_box(init_pid, egress::PROXY_PORT).await?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("egress listener", e))?;
    let listener =
        tokio::net::TcpListener::from_std(listener).map_err(|e| Error::io("egress listener", e))?;
    let aliases = HashMap::from([(egress::HOST_ALIAS.to_owned(), "127.0.0.1".to_owned())]);
    let proxy = Arc::new(Proxy::new(record.name.clone(), allow, secrets, aliases));
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(proxy.serve(listener, stop.clone()));
    Ok(stop.drop_guard())
}

/// Why a command killed by a signal died, when it was its box ending: the
/// box's pid 1 is gone (it goes first), and the sandbox's watcher says how
/// (it may take a moment to hear of it). `None` while the box runs.
async fn box_ended(
    pid1: i32,
    mut ended: tokio::sync::watch::Receiver<Option<String>>,
) -> Option<String> {
    if ended.borrow().is_none() && sandbox::process_alive(pid1) {
        return None;
    }
    let wait = ended.wait_for(Option::is_some);
    match tokio::time::timeout(std::time::Duration::from_secs(2), wait).await {
        Ok(Ok(reason)) => reason
            .clone()
            .map(|r| format!("the command was killed because its box ended: {r}")),
        _ => None,
    }
}

/// Deletes a box directory, making read-only directories writable first
/// where the plain removal is refused.
async fn remove_tree(dir: &Path) -> Result<()> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        if std::fs::remove_dir_all(&dir).is_ok() || !dir.exists() {
            return Ok(());
        }
        let _ = std::process::Command::new("chmod")
            .arg("-R")
            .arg("u+rwX")
            .arg(&dir)
            .status();
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(format!("remove {}", dir.display()), e))
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?
}

/// The namespace engine keeps its own images (`image::local`).
#[async_trait]
impl Images for NamespaceEngine {
    async fn pull(
        &self,
        reference: &str,
        progress: crate::image::pull::Progress,
    ) -> Result<boxd_proto::v1::ImageInfo> {
        Ok(self.images.pull(reference, progress).await?)
    }

    async fn list(&self) -> Result<Vec<boxd_proto::v1::ImageInfo>> {
        Ok(self.images.list().await)
    }

    async fn inspect(&self, reference: &str) -> Result<boxd_proto::v1::ImageInfo> {
        Ok(self.images.inspect(reference).await?)
    }

    async fn remove(
        &self,
        reference: &str,
        in_use: &InUse,
        force: bool,
    ) -> Result<boxd_proto::v1::RemoveImageResponse> {
        Ok(self.images.remove(reference, in_use, force).await?)
    }

    async fn prune(&self, in_use: &InUse) -> Result<boxd_proto::v1::PruneImagesResponse> {
        Ok(self.images.prune(in_use).await?)
    }

    async fn import(
        &self,
        path: &Path,
        reference: Option<&str>,
    ) -> Result<boxd_proto::v1::ImageInfo> {
        Ok(self.images.import(path, reference).await?)
    }
}
