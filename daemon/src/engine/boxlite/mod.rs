//! The BoxLite engine: every box is a BoxLite microVM (libkrun on KVM, or
//! Hypervisor.framework on macOS), driven through the `boxlite` crate.
//!
//! Layout and identity:
//! - one [`BoxliteRuntime`] per daemon, homed at `HOME/boxlite` (BoxLite
//!   holds an exclusive lock on it, so nothing else may open that home);
//! - each boxd box is one BoxLite box whose BoxLite *name* is the boxd record
//!   id ([`BoxRecord::id`]). That makes [`EngineBox::id`] come straight from
//!   `list_info`, never collides with a leftover of an earlier box of the
//!   same boxd name, and needs no extra state. Boxes are always looked up by
//!   an exact name match in `list_info` and then addressed by their full
//!   BoxLite id, because `runtime.get(x)` also matches id *prefixes*;
//! - boxes are created detached (`detach`, `auto_delete = Some(0)`), so a
//!   box survives a boxd crash and `list` reports it running afterwards.
//!
//! Traps handled here (see `shared/notes/boxlite.md`):
//! - `exec()`, `metrics()` and copies boot a box that is not running, so
//!   they are called only on a box whose recorded status is running
//!   ([`BoxliteEngine::running`]);
//! - a handle is spent after `stop()`, so every operation re-resolves it;
//! - start failures are reported by BoxLite as a sanitized "The VM failed to
//!   start.", so the tail of the shim's stderr and of the console log is
//!   added to the error (`start_diagnostics`);
//! - on hosts where VMs cannot boot (see [`preflight`]) `start` refuses at
//!   once instead of failing after 15-25 s;
//! - exec output arrives as lossily decoded UTF-8 text chunks: it is passed
//!   on as bytes, but binary output is not byte-exact (`process`).
//!
//! This file holds the engine and its [`Engine`] methods; the rest lives
//! beside it: `options` (a box spec as BoxLite's options), `ports`
//! (published ports), `process` (an exec as boxd's `Process`), `copies`
//! (archive streams in and out), `stats`, `errors` (BoxLite's errors as
//! boxd's, in one place), `start_diagnostics`, `info` (what the engine
//! says of itself), `images`, `snapshots`, `preflight`, `runtime_dir`.

mod copies;
mod errors;
mod images;
mod info;
mod options;
mod ports;
pub mod preflight;
mod process;
pub mod remote;
pub mod runtime_dir;
mod snapshots;
mod start_diagnostics;
mod stats;

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use ::boxlite::{BoxInfo, BoxliteError, BoxliteOptions, BoxliteRuntime, LiteBox, RootfsSpec};

use super::{Created, Engine, EngineBox, EngineInfo, ExecSpec};
use crate::error::{Error, Result};
use crate::model::{BoxRecord, BoxSpec, PortMapping};
use copies::{copy_options, from_boxlite, to_boxlite};
use errors::{map_err, open_error, pull_error};
pub use options::{MAX_CPUS, box_options};
pub use ports::port_spec;
pub use preflight::{Verdict, preflight};

/// Seconds `shutdown` gives BoxLite to stop its non-detached boxes.
const SHUTDOWN_TIMEOUT_S: i32 = 5;

pub struct BoxliteEngine {
    info: EngineInfo,
    runtime: BoxliteRuntime,
    /// BoxLite's home (`HOME/boxlite`).
    home: PathBuf,
    verdict: Verdict,
    /// The BoxLite REST server the runtime is a client of; `None` for a
    /// runtime on this host.
    remote: Option<remote::Remote>,
    /// What the last call to the remote server met, until one succeeds.
    problem: std::sync::Mutex<Option<String>>,
    /// When the remote server was last asked whether it answers.
    probed: std::sync::Mutex<Option<std::time::Instant>>,
    /// The ports each running box publishes (by record id), as BoxLite
    /// reported them when the box started or was last listed.
    published: std::sync::Mutex<std::collections::HashMap<String, Vec<PortMapping>>>,
}

/// The BoxLite name of a boxd box.
fn boxlite_name(record: &BoxRecord) -> &str {
    &record.id
}

impl BoxliteEngine {
    /// Opens (creating it if needed) the BoxLite runtime at `HOME/boxlite`.
    ///
    /// Fails when BoxLite's own host check fails (no usable `/dev/kvm`), or
    /// when another process holds that home. Takes about a second in debug
    /// builds (BoxLite hashes its guest binary), a fraction of that in
    /// release builds. Needs no tokio runtime.
    pub fn new(home: &Path) -> Result<BoxliteEngine> {
        let home = std::path::absolute(home)
            .map_err(|e| Error::io(format!("resolve {}", home.display()), e))?;
        let bl_home = home.join("boxlite");
        let verdict = preflight();
        let runtime = BoxliteRuntime::new(BoxliteOptions {
            home_dir: bl_home.clone(),
            ..BoxliteOptions::default()
        })
        .map_err(|e| open_error(&bl_home, e))?;
        let info = info::engine_info(&verdict);
        tracing::info!(home = %bl_home.display(), can_boot = verdict.can_boot, reason = %verdict.reason, "BoxLite runtime opened");
        Ok(BoxliteEngine {
            info,
            runtime,
            home: bl_home,
            verdict,
            remote: None,
            problem: Default::default(),
            probed: Default::default(),
            published: Default::default(),
        })
    }

    /// The engine on the BoxLite REST server `remote` names: boxes are the
    /// server's VMs, never this host's (no local runtime is opened, and
    /// nothing falls back to one). Makes no request: a server that does not
    /// answer yet is reported by [`BoxliteEngine::reachable`], not here.
    pub fn remote(home: &Path, remote: remote::Remote) -> Result<BoxliteEngine> {
        let runtime = remote.open()?;
        tracing::info!(url = %remote.url, key = remote.api_key.is_some(), "BoxLite REST runtime");
        Ok(BoxliteEngine {
            info: info::remote_info(&remote.url),
            runtime,
            home: home.join("boxlite"),
            verdict: Verdict {
                can_boot: true,
                reason: String::new(),
            },
            remote: Some(remote),
            problem: Default::default(),
            probed: Default::default(),
            published: Default::default(),
        })
    }

    /// For a remote runtime, whether its server answers and takes the key
    /// (`Ok`/`Err` with the reason, naming the URL); `None` for a local one.
    pub async fn reachable(&self) -> Option<std::result::Result<String, String>> {
        let remote = self.remote.as_ref()?;
        let r = remote::probe(&self.runtime, &remote.url).await;
        *self.problem.lock().expect("problem") = r.clone().err();
        *self.probed.lock().expect("probed") = Some(std::time::Instant::now());
        Some(r)
    }

    /// Keeps what a call to the remote server met (until one succeeds):
    /// the server away or refusing the key, not an answer about one box.
    fn note<T>(&self, result: &Result<T>) {
        if self.remote.is_none() {
            return;
        }
        let mut problem = self.problem.lock().expect("problem");
        match result {
            Ok(_) => *problem = None,
            Err(e @ Error::Engine(_)) => *problem = Some(e.to_string()),
            Err(e @ Error::FailedPrecondition(m)) if m.contains("API key") => {
                *problem = Some(e.to_string())
            }
            Err(_) => {}
        }
    }

    /// Refuses `what` on a remote runtime.
    pub(super) fn local_only(&self, what: &str) -> Result<()> {
        match &self.remote {
            Some(r) => Err(remote::unsupported(what, &r.url)),
            None => Ok(()),
        }
    }

    /// The BoxLite box of a boxd box, by exact name.
    async fn find(&self, record: &BoxRecord) -> Result<Option<BoxInfo>> {
        let name = boxlite_name(record);
        let all = self.list_info().await?;
        Ok(all.into_iter().find(|i| i.name.as_deref() == Some(name)))
    }

    /// Every BoxLite box; bounded in time on a remote runtime.
    async fn list_info(&self) -> Result<Vec<BoxInfo>> {
        match &self.remote {
            Some(r) => {
                remote::bounded("list BoxLite boxes", &r.url, self.runtime.list_info()).await
            }
            None => self
                .runtime
                .list_info()
                .await
                .map_err(|e| map_err("list BoxLite boxes", e)),
        }
    }

    /// A fresh handle (handles are spent by `stop`), with the box's status
    /// as recorded by BoxLite.
    async fn handle(&self, record: &BoxRecord) -> Result<Option<(BoxInfo, LiteBox)>> {
        let Some(info) = self.find(record).await? else {
            return Ok(None);
        };
        let handle = self
            .runtime
            .get(info.id.as_str())
            .await
            .map_err(|e| map_err("open the BoxLite box", e))?;
        Ok(handle.map(|h| (info, h)))
    }

    /// A handle on a running box. BoxLite's `exec()`, `metrics()` and
    /// copies boot a box that is not running: never let them.
    async fn running(&self, record: &BoxRecord) -> Result<LiteBox> {
        let (info, handle) = self
            .handle(record)
            .await?
            .ok_or_else(|| Self::missing(record))?;
        if !info.status.is_running() {
            return Err(Error::FailedPrecondition(format!(
                "the box's microVM is {}, not running; start the box first",
                info.status
            )));
        }
        Ok(handle)
    }

    fn missing(record: &BoxRecord) -> Error {
        Error::NotFound(format!(
            "box {:?} has no BoxLite VM (BoxLite box {:?} is gone)",
            record.name,
            boxlite_name(record)
        ))
    }
}

#[async_trait]
impl Engine for BoxliteEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn images(&self) -> &dyn super::Images {
        self
    }

    async fn problem(&self) -> Option<String> {
        // Every client asks (Describe, at connect): while all is well, a
        // probe a few seconds old answers them, so that a script's boxctl
        // calls cost the server one request per window, not one each; a
        // known problem is asked afresh, so that its report clears.
        let fresh = self
            .probed
            .lock()
            .expect("probed")
            .is_some_and(|at| at.elapsed() < remote::PROBE_FRESH);
        if fresh && self.known_problem().is_none() {
            return None;
        }
        self.reachable().await.and_then(|r| r.err())
    }

    fn known_problem(&self) -> Option<String> {
        self.problem.lock().expect("problem").clone()
    }

    async fn recheck(&self) {
        if self.known_problem().is_some() {
            self.reachable().await;
        }
    }

    async fn create(&self, record: &BoxRecord) -> Result<Created> {
        if let Some(r) = &self.remote {
            remote::check_spec(&record.spec, &r.url)?;
        }
        let (options, mut warnings) = box_options(&record.spec)?;
        let image_digest = match &options.rootfs {
            RootfsSpec::Image(reference) if self.remote.is_some() => {
                warnings.push(format!(
                    "the BoxLite server gets {reference} itself when the box first starts"
                ));
                String::new()
            }
            RootfsSpec::RootfsPath(path) => {
                warnings.push(format!(
                    "BoxLite reads the image layout {path} again on every start: keep it in place for the life of the box"
                ));
                crate::image::layout_digest(Path::new(path))?
            }
            RootfsSpec::Image(reference) => {
                let images = self
                    .runtime
                    .images()
                    .map_err(|e| map_err("open the image store", e))?;
                let image = images
                    .pull(reference)
                    .await
                    .map_err(|e| pull_error(reference, e))?;
                image.manifest_digest().to_owned()
            }
        };
        let made = self
            .runtime
            .create(options, Some(boxlite_name(record).to_owned()))
            .await
            .map_err(|e| map_err("create the BoxLite box", e));
        self.note(&made);
        made?;
        Ok(Created {
            image_digest,
            warnings,
        })
    }

    async fn start(&self, record: &BoxRecord) -> Result<()> {
        if !self.verdict.can_boot {
            return Err(Error::FailedPrecondition(format!(
                "cannot boot microVMs here: {}",
                self.verdict.reason
            )));
        }
        let (info, handle) = self
            .handle(record)
            .await?
            .ok_or_else(|| Self::missing(record))?;
        if info.status.is_running() {
            return Ok(());
        }
        handle.start().await.map_err(|e| match &self.remote {
            Some(r) => map_err(
                &format!("start the microVM on the BoxLite server at {}", r.url),
                e,
            ),
            None => start_diagnostics::start_error(&self.home, info.id.as_str(), e),
        })?;
        if !record.spec.ports.is_empty() {
            let now = self.find(record).await.ok().flatten();
            self.remember_ports(record, now.as_ref());
        }
        Ok(())
    }

    fn published(&self, record: &BoxRecord) -> Vec<PortMapping> {
        self.recorded_ports(record)
    }

    async fn stop(&self, record: &BoxRecord, _force: bool) -> Result<()> {
        self.remember_ports(record, None);
        let Some((info, handle)) = self.handle(record).await? else {
            return Ok(());
        };
        // A box that is not running has no VM to stop; calling into it
        // could only change its recorded state.
        if !(info.status.is_active() || info.status.is_transient()) {
            return Ok(());
        }
        handle
            .stop()
            .await
            .map_err(|e| map_err("stop the microVM", e))
    }

    async fn remove(&self, record: &BoxRecord) -> Result<()> {
        self.remember_ports(record, None);
        if let Some(info) = self.find(record).await? {
            match self.runtime.remove(info.id.as_str(), true).await {
                Ok(()) | Err(BoxliteError::NotFound(_)) => {}
                Err(e) => return Err(map_err("remove the BoxLite box", e)),
            }
        }
        match tokio::fs::remove_dir_all(&record.dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("remove {}", record.dir.display()), e)),
        }
    }

    async fn list(&self) -> Result<Vec<EngineBox>> {
        let all = self.list_info().await?;
        self.remember_listed(&all);
        Ok(all
            .into_iter()
            .filter_map(|i| {
                Some(EngineBox {
                    running: i.status.is_active(),
                    id: i.name?,
                })
            })
            .collect())
    }

    async fn exec(&self, record: &BoxRecord, spec: ExecSpec) -> Result<super::exec::Started> {
        if spec.builtin.is_some() {
            return Err(Error::Internal(
                "built-in execs are the namespace engine's".into(),
            ));
        }
        if spec.command.is_empty() {
            return Err(Error::Unimplemented(
                "the microVM engine runs only a command given (it does not read the image's Entrypoint or Cmd)".into(),
            ));
        }
        if spec.user.is_some() {
            // BoxLite's REST API has no per-exec user: it would run as the
            // box's, silently.
            self.local_only("running an exec as another user (--user)")?;
        }
        let handle = self.running(record).await?;
        let execution = handle
            .exec(process::box_command(&spec))
            .await
            .map_err(|e| map_err("exec in the microVM", e))?;
        let process = process::process(execution, spec.stdin, spec.tty).await?;
        let exec = super::exec::LocalExec::start(process, spec.detach);
        let first = super::exec::LocalExec::subscription(exec.log(), Default::default());
        Ok(super::exec::Started {
            handle: exec,
            first,
        })
    }

    async fn stats(&self, record: &BoxRecord) -> Result<super::Stats> {
        // metrics() boots a box that is not running: never let it.
        let handle = self.running(record).await?;
        let m = handle
            .metrics()
            .await
            .map_err(|e| map_err("read the microVM's metrics", e))?;
        Ok(stats::vm_stats(
            m.cpu_percent(),
            m.memory_bytes(),
            m.network_bytes_received(),
            m.network_bytes_sent(),
            &record.spec,
        ))
    }

    async fn snapshot_create(&self, record: &BoxRecord, name: &str) -> Result<super::Snapshot> {
        self.snapshot_create_impl(record, name).await
    }

    async fn snapshot_list(&self, record: &BoxRecord) -> Result<Vec<super::Snapshot>> {
        self.snapshot_list_impl(record).await
    }

    async fn snapshot_restore(&self, record: &BoxRecord, name: &str) -> Result<()> {
        self.snapshot_restore_impl(record, name).await
    }

    async fn snapshot_remove(&self, record: &BoxRecord, name: &str) -> Result<()> {
        self.snapshot_remove_impl(record, name).await
    }

    async fn clone_box(&self, source: &BoxRecord, target: &BoxRecord) -> Result<Created> {
        self.clone_impl(source, target).await
    }

    async fn export(&self, record: &BoxRecord, path: &Path) -> Result<u64> {
        self.export_impl(record, path).await
    }

    async fn archive_spec(&self, path: &Path) -> Result<BoxSpec> {
        self.archive_spec_impl(path).await
    }

    async fn import(&self, path: &Path, target: &BoxRecord) -> Result<Created> {
        self.import_impl(path, target).await
    }

    async fn copy_out(
        &self,
        record: &BoxRecord,
        path: &str,
        follow_symlinks: bool,
    ) -> Result<super::ByteStream> {
        self.local_only("copying files out of a box")?;
        let handle = self.running(record).await?;
        let (stream, _shape) = handle
            .copy_out_stream(path, copy_options(follow_symlinks))
            .await
            .map_err(|e| map_err("copy out of the microVM", e))?;
        Ok(from_boxlite(stream))
    }

    async fn copy_in(
        &self,
        record: &BoxRecord,
        path: &str,
        archive: super::ByteStream,
    ) -> Result<u64> {
        self.local_only("copying files into a box")?;
        let handle = self.running(record).await?;
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        handle
            .copy_in_stream(
                to_boxlite(archive, taken.clone()),
                path,
                ::boxlite::CopySourceKind::Unknown,
                copy_options(false),
            )
            .await
            .map_err(|e| map_err("copy into the microVM", e))?;
        Ok(taken.load(std::sync::atomic::Ordering::SeqCst))
    }

    async fn shutdown(&self) {
        if self.remote.is_some() {
            // The server's boxes are the server's: nothing here to stop.
            return;
        }
        // Detached boxes (all of ours) are left running by design; boxd's
        // registry stops the ones it wants stopped before calling this.
        if let Err(e) = self.runtime.shutdown(Some(SHUTDOWN_TIMEOUT_S)).await {
            tracing::warn!(error = %e, "BoxLite runtime shutdown failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::engine::Isolation;
    use crate::model::State;

    /// A real (tiny) OCI layout: one empty layer, verified blobs. Returns
    /// the manifest digest.
    fn tiny_layout(dir: &Path) -> String {
        use sha2::{Digest, Sha256};
        let blobs = dir.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let put = |bytes: &[u8]| {
            let hex = hex::encode(Sha256::digest(bytes));
            std::fs::write(blobs.join(&hex), bytes).unwrap();
            (format!("sha256:{hex}"), bytes.len())
        };
        let (layer, layer_size) = put(&[0u8; 1024]);
        let config = serde_json::json!({"architecture": "amd64", "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [layer.clone()]}, "config": {}});
        let (config, config_size) = put(config.to_string().as_bytes());
        let manifest = serde_json::json!({"schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": layer_size}]});
        let manifest_bytes = manifest.to_string();
        let (digest, size) = put(manifest_bytes.as_bytes());
        let index = serde_json::json!({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": size}]});
        std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        digest
    }

    fn record(home: &Path, id: &str, name: &str, image: &str) -> BoxRecord {
        let dir = home.join("boxes").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        BoxRecord {
            id: id.into(),
            name: name.into(),
            spec: BoxSpec {
                image: image.into(),
                cpus: Some(1),
                memory_mib: Some(256),
                ..BoxSpec::default()
            },
            image_digest: String::new(),
            created_at_ms: 0,
            started_at_ms: 0,
            state: State::Created,
            error: String::new(),
            dir,
        }
    }

    /// BoxLite's runtime needs a host where its KVM check passes.
    fn kvm_usable() -> bool {
        match ::boxlite::system_check::SystemCheck::run() {
            Ok(_) => true,
            Err(e) => {
                eprintln!("skipping: BoxLite cannot open a runtime here: {e}");
                false
            }
        }
    }

    /// A real runtime on a scratch home: lock, create, list, the refusals
    /// that must not boot anything, remove. Boots no VM.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runtime_lifecycle_up_to_boot() {
        if !kvm_usable() {
            return;
        }
        let home = tempfile::tempdir().unwrap();
        let t = std::time::Instant::now();
        let engine = BoxliteEngine::new(home.path()).unwrap();
        eprintln!(
            "BoxliteEngine::new took {:?}; verdict {:?}",
            t.elapsed(),
            engine.verdict
        );
        assert_eq!(engine.info().name, "boxlite");
        assert_eq!(engine.info().version, "0.10.8");
        assert_eq!(engine.info().isolation, Isolation::MicroVm);
        assert!(
            !engine
                .info()
                .capabilities
                .iter()
                .any(|c| c == "output.binary")
        );

        // One runtime per home.
        let e = BoxliteEngine::new(home.path())
            .err()
            .expect("second runtime must fail");
        let bl_home = home.path().join("boxlite");
        assert!(
            matches!(&e, Error::FailedPrecondition(m) if m.contains(&bl_home.display().to_string()) && m.contains("in use")),
            "{e}"
        );

        assert_eq!(engine.list().await.unwrap(), vec![]);

        let layout = home.path().join("layout");
        let digest = tiny_layout(&layout);
        let rec = record(
            home.path(),
            "Ab3dEf6hIj9k",
            "web",
            &layout.display().to_string(),
        );
        let t = std::time::Instant::now();
        let created = engine.create(&rec).await.unwrap();
        eprintln!("create took {:?}: {created:?}", t.elapsed());
        assert_eq!(created.image_digest, digest);
        assert!(created.warnings.iter().any(|w| w.contains("every start")));
        assert_eq!(
            engine.list().await.unwrap(),
            vec![EngineBox {
                id: rec.id.clone(),
                running: false
            }]
        );
        // Same record again: BoxLite refuses the duplicate name.
        let dup = engine.create(&rec).await;
        eprintln!("duplicate create: {:?}", dup.as_ref().err());
        assert!(matches!(dup, Err(Error::AlreadyExists(_))));

        // A box name that is a prefix of the BoxLite id must not find it.
        let info = engine.find(&rec).await.unwrap().unwrap();
        let prefix = record(home.path(), &info.id.as_str()[..3], "other", "alpine");
        assert!(engine.find(&prefix).await.unwrap().is_none());

        // Exec on a box that is not running is refused without booting it.
        let t = std::time::Instant::now();
        let e = engine
            .exec(
                &rec,
                ExecSpec {
                    command: "true".into(),
                    args: vec![],
                    env: vec![],
                    working_dir: String::new(),
                    stdin: false,
                    tty: None,
                    ..Default::default()
                },
            )
            .await
            .err()
            .expect("exec must fail");
        assert!(
            matches!(&e, Error::FailedPrecondition(m) if m.contains("configured")),
            "{e}"
        );
        eprintln!("exec refused after {:?}", t.elapsed());
        // So are copies.
        let e = engine.copy_out(&rec, "/etc", false).await.err().unwrap();
        assert!(matches!(&e, Error::FailedPrecondition(_)), "{e}");
        let e = engine
            .copy_in(&rec, "/tmp", futures::stream::empty().boxed())
            .await
            .unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(_)), "{e}");

        if !engine.verdict.can_boot {
            let t = std::time::Instant::now();
            let e = engine.start(&rec).await.unwrap_err();
            assert!(
                matches!(&e, Error::FailedPrecondition(m) if m.starts_with("cannot boot microVMs here: ")),
                "{e}"
            );
            eprintln!("start refused after {:?}", t.elapsed());
        }

        // Stop of a box that never ran is a no-op; the box stays.
        engine.stop(&rec, false).await.unwrap();
        let info = engine.find(&rec).await.unwrap().unwrap();
        assert_eq!(info.status.as_str(), "configured");

        engine.remove(&rec).await.unwrap();
        assert_eq!(engine.list().await.unwrap(), vec![]);
        assert!(!rec.dir.exists());
        // Removing again (or a box BoxLite never had) is fine.
        engine.remove(&rec).await.unwrap();
        let e = engine.start(&rec).await.unwrap_err();
        if engine.verdict.can_boot {
            assert!(matches!(e, Error::NotFound(_)), "{e}");
        }
        engine.shutdown().await;
        drop(engine);

        // The lock goes with the runtime.
        let again = BoxliteEngine::new(home.path()).unwrap();
        again.shutdown().await;
    }

    /// Snapshots, clones and archives map onto BoxLite's own on a box that
    /// never ran, and none of them boots its VM.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn snapshots_clones_and_archives_never_boot() {
        if !kvm_usable() {
            return;
        }
        let home = tempfile::tempdir().unwrap();
        let engine = BoxliteEngine::new(home.path()).unwrap();
        let layout = home.path().join("layout");
        let digest = tiny_layout(&layout);
        let image = layout.display().to_string();
        let mut rec = record(home.path(), "Src0000000001", "src", &image);
        rec.spec.secrets.push(crate::egress::Secret {
            name: "TOKEN".into(),
            hosts: vec!["example.com".into()],
            placeholder: "PH".into(),
            value: "never-exported".into(),
        });
        std::fs::create_dir_all(&rec.dir).unwrap();
        engine.create(&rec).await.unwrap();

        // BoxLite makes a box's disks at its first start: before it, every
        // copy is refused as such (BoxLite's own errors name a missing
        // disk file), and nothing boots.
        let never = |r: Result<_>| match r {
            Err(Error::FailedPrecondition(m)) => assert!(m.contains("never been started"), "{m}"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a copy of a box that never ran"),
        };
        never(engine.snapshot_create(&rec, "s1").await.map(drop));
        never(engine.snapshot_restore(&rec, "s1").await);
        let copy = record(home.path(), "Copy000000001", "copy", &image);
        never(engine.clone_box(&rec, &copy).await.map(drop));
        assert!(engine.find(&copy).await.unwrap().is_none());
        let out = home.path().join("src.boxd");
        never(engine.export(&rec, &out).await.map(drop));
        assert!(!out.exists(), "a refused export leaves no file");
        assert_eq!(
            std::fs::read_dir(home.path()).unwrap().count(),
            3,
            "boxlite/, boxes/, layout/ and nothing else"
        );
        assert!(engine.snapshot_list(&rec).await.unwrap().is_empty());
        assert!(engine.list().await.unwrap().iter().all(|b| !b.running));
        // A namespace archive (or any other) is refused clearly.
        let other = home.path().join("other.tar");
        std::fs::write(&other, b"not a tar at all").unwrap();
        assert!(engine.archive_spec(&other).await.is_err());
        assert!(!digest.is_empty());
        engine.shutdown().await;
    }

    /// Registry references are pulled at create; with no registry in reach
    /// that fails as UNAVAILABLE, and no BoxLite box is left behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "tries to reach a container registry"]
    async fn registry_image_create_without_network() {
        if !kvm_usable() {
            return;
        }
        let home = tempfile::tempdir().unwrap();
        let engine = BoxliteEngine::new(home.path()).unwrap();
        let rec = record(
            home.path(),
            "Zz9yXx8wVv7u",
            "net",
            "docker.io/library/busybox:latest",
        );
        let t = std::time::Instant::now();
        let r = engine.create(&rec).await;
        eprintln!(
            "create with a registry image: {:?} after {:?}",
            r.as_ref().map(|c| &c.image_digest),
            t.elapsed()
        );
        if let Err(e) = r {
            assert!(
                matches!(e, Error::Engine(_) | Error::InvalidArgument(_)),
                "{e}"
            );
            assert_eq!(engine.list().await.unwrap(), vec![]);
        }
        engine.shutdown().await;
    }

    /// Attempts a boot even where preflight says it cannot, to check that
    /// a start failure quotes the shim's stderr (15-25 s on a PVM host).
    /// Needs a real OCI layout in BOXD_TEST_LAYOUT.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "attempts a microVM boot"]
    async fn start_failure_explains_itself() {
        let Some(layout) = std::env::var_os("BOXD_TEST_LAYOUT") else {
            eprintln!("skipping: set BOXD_TEST_LAYOUT to an OCI image layout");
            return;
        };
        if !kvm_usable() || preflight().can_boot {
            eprintln!("skipping: only meaningful where boots fail");
            return;
        }
        let home = tempfile::tempdir().unwrap();
        let mut engine = BoxliteEngine::new(home.path()).unwrap();
        engine.verdict.can_boot = true; // pretend, to reach BoxLite's start
        let rec = record(
            home.path(),
            "Fa1Fa1Fa1Fa1",
            "fail",
            &layout.to_string_lossy(),
        );
        let created = engine.create(&rec).await.unwrap();
        eprintln!("created: {created:?}");
        let t = std::time::Instant::now();
        let e = engine.start(&rec).await.unwrap_err();
        eprintln!("start failed after {:?}:\n{e}", t.elapsed());
        assert!(
            matches!(&e, Error::Engine(m) if m.contains("shim stderr")),
            "{e}"
        );
        let listed = engine.list().await.unwrap();
        assert_eq!(
            listed,
            vec![EngineBox {
                id: rec.id.clone(),
                running: false
            }]
        );
        engine.remove(&rec).await.unwrap();
        engine.shutdown().await;
    }

    /// Boots a VM: only where preflight says it can. Needs a real OCI
    /// layout in BOXD_TEST_LAYOUT.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "boots a microVM"]
    async fn boot_exec_stop() {
        let Some(layout) = std::env::var_os("BOXD_TEST_LAYOUT") else {
            eprintln!("skipping: set BOXD_TEST_LAYOUT to an OCI image layout");
            return;
        };
        if !preflight().can_boot {
            eprintln!("skipping: {}", preflight().reason);
            return;
        }
        let home = tempfile::tempdir().unwrap();
        let engine = BoxliteEngine::new(home.path()).unwrap();
        let rec = record(
            home.path(),
            "Bt0Bt0Bt0Bt0",
            "boot",
            &layout.to_string_lossy(),
        );
        engine.create(&rec).await.unwrap();
        engine.start(&rec).await.unwrap();
        assert!(engine.list().await.unwrap()[0].running);
        let mut p = engine
            .exec(
                &rec,
                ExecSpec {
                    command: "sh".into(),
                    args: vec![
                        "-c".into(),
                        "read x; echo out:$x; echo err >&2; exit 3".into(),
                    ],
                    env: vec![],
                    working_dir: String::new(),
                    stdin: true,
                    tty: None,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        p.handle
            .write_stdin(0, bytes::Bytes::from_static(b"hello\n"))
            .await
            .unwrap();
        p.handle.close_stdin().await.unwrap();
        let (mut out, mut err, mut exit) = (String::new(), String::new(), None);
        while let Some(e) = p.first.events.recv().await {
            match e {
                crate::exec_log::Event::Output(crate::exec_log::Stream::Stdout, b) => {
                    out.push_str(&String::from_utf8_lossy(&b))
                }
                crate::exec_log::Event::Output(_, b) => err.push_str(&String::from_utf8_lossy(&b)),
                crate::exec_log::Event::Exit(s) => exit = s.code,
            }
        }
        assert_eq!(out, "out:hello\n");
        assert_eq!(err, "err\n");
        assert_eq!(exit, Some(3));
        engine.stop(&rec, false).await.unwrap();
        assert!(!engine.list().await.unwrap()[0].running);
        engine.remove(&rec).await.unwrap();
        engine.shutdown().await;
    }
}
