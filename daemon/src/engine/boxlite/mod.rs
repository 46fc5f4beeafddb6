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
//! - `exec()` and `metrics()` boot a box that is not running, so `exec`
//!   checks the recorded status first and `metrics` is never called;
//! - a handle is spent after `stop()`, so every operation re-resolves it;
//! - start failures are reported by BoxLite as a sanitized "The VM failed to
//!   start.", so the tail of the shim's stderr and of the console log is
//!   added to the error;
//! - on hosts where VMs cannot boot (see [`preflight`]) `start` refuses at
//!   once instead of failing after 15-25 s;
//! - exec output arrives as lossily decoded UTF-8 text chunks: it is passed
//!   on as bytes, but binary output is not byte-exact.

mod images;
pub mod preflight;
pub mod runtime_dir;
mod snapshots;

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use ::boxlite::runtime::options::{PortSpec, VolumeSpec};
use ::boxlite::{
    BoxCommand, BoxInfo, BoxOptions, BoxliteError, BoxliteOptions, BoxliteRuntime, ExecResult,
    ExecStdin, Execution, LiteBox, NetworkSpec, RootfsSpec,
};

use super::{
    Created, Engine, EngineBox, EngineInfo, ExecSpec, ExitStatus, Input, Isolation, Output,
    Process, ProcessControl,
};
use crate::error::{Error, Result};
use crate::registry::{BoxRecord, BoxSpec, PortMapping};
pub use preflight::{Verdict, preflight};

/// BoxLite rejects more vCPUs than this (0.11's `vm_defaults::MAX_CPUS`;
/// 0.10.8 does not check and fails later).
pub const MAX_CPUS: u32 = 16;

/// Seconds `shutdown` gives BoxLite to stop its non-detached boxes.
const SHUTDOWN_TIMEOUT_S: i32 = 5;

/// How much of a log file a start error quotes.
const LOG_TAIL_BYTES: u64 = 4096;
const LOG_TAIL_LINES: usize = 12;

pub struct BoxliteEngine {
    info: EngineInfo,
    runtime: BoxliteRuntime,
    /// BoxLite's home (`HOME/boxlite`).
    home: PathBuf,
    verdict: Verdict,
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
        let mut notes = vec![
            format!("boxes run in BoxLite {} microVMs (a guest kernel per box)", ::boxlite::VERSION),
            "stdout and stderr are decoded as UTF-8 on their way out of the VM (invalid bytes become U+FFFD): binary output is not byte-exact".into(),
            "allow-net is enforced on the host: an empty list means no network at all, entries (host names, *.wildcards, IPv4 addresses or CIDRs) are the only destinations reachable; DNS itself is not filtered".into(),
            "boxes are detached VMs: they keep running if boxd dies, and boxd finds them again when it restarts".into(),
            "stop always shuts the guest down gracefully (up to 10 s) before killing it; force makes no difference".into(),
            "an image given as a local OCI layout is read again on every start: keep it in place for the life of the box".into(),
        ];
        if !verdict.can_boot {
            notes.push(format!(
                "microVMs cannot boot on this host ({}); boxes can be created but not started",
                verdict.reason
            ));
        }
        let info = EngineInfo {
            name: "boxlite",
            version: ::boxlite::VERSION.to_owned(),
            isolation: Isolation::MicroVm,
            capabilities: super::capabilities(&[
                "image.pull",
                "box.snapshot",
                "box.clone",
                "box.archive",
            ]),
            notes,
            network_filtering: true,
            create_warning: None,
            boxes_outlive_daemon: true,
            execs_outlive_daemon: false,
        };
        tracing::info!(home = %bl_home.display(), can_boot = verdict.can_boot, reason = %verdict.reason, "BoxLite runtime opened");
        Ok(BoxliteEngine {
            info,
            runtime,
            home: bl_home,
            verdict,
            published: Default::default(),
        })
    }

    /// The BoxLite box of a boxd box, by exact name.
    async fn find(&self, record: &BoxRecord) -> Result<Option<BoxInfo>> {
        let name = boxlite_name(record);
        let all = self
            .runtime
            .list_info()
            .await
            .map_err(|e| map_err("list BoxLite boxes", e))?;
        Ok(all.into_iter().find(|i| i.name.as_deref() == Some(name)))
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

    /// Records what a box publishes now, from BoxLite's own report.
    fn remember_ports(&self, record: &BoxRecord, info: Option<&BoxInfo>) {
        let mut table = self.published.lock().expect("published ports");
        match info {
            Some(info) if info.status.is_active() => {
                table.insert(record.id.clone(), published_ports(info, &record.spec.ports));
            }
            _ => {
                table.remove(&record.id);
            }
        }
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

    /// The last lines of the shim's stderr and of the guest console, for a
    /// start error: BoxLite's own message is deliberately vague.
    fn start_diagnostics(&self, box_id: &str) -> String {
        let dir = self.home.join("boxes").join(box_id);
        let mut out = String::new();
        for (what, path) in [
            ("shim stderr", dir.join("shim.stderr")),
            ("console", dir.join("logs").join("console.log")),
        ] {
            if let Some(tail) = log_tail(&path) {
                out.push_str(&format!("\n{what} ({}):\n{tail}", path.display()));
            }
        }
        if out.is_empty() {
            out = format!(" (no shim output; see {})", dir.display());
        }
        out
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

    async fn create(&self, record: &BoxRecord) -> Result<Created> {
        let (options, mut warnings) = box_options(&record.spec)?;
        let image_digest = match &options.rootfs {
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
        self.runtime
            .create(options, Some(boxlite_name(record).to_owned()))
            .await
            .map_err(|e| map_err("create the BoxLite box", e))?;
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
        handle.start().await.map_err(|e| {
            let diag = self.start_diagnostics(info.id.as_str());
            match map_err("start the microVM", e) {
                Error::Engine(m) | Error::Internal(m) => Error::Engine(format!("{m}{diag}")),
                other => other,
            }
        })?;
        if !record.spec.ports.is_empty() {
            let now = self.find(record).await.ok().flatten();
            self.remember_ports(record, now.as_ref());
        }
        Ok(())
    }

    fn published(&self, record: &BoxRecord) -> Vec<PortMapping> {
        self.published
            .lock()
            .expect("published ports")
            .get(&record.id)
            .cloned()
            .unwrap_or_default()
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
        let all = self
            .runtime
            .list_info()
            .await
            .map_err(|e| map_err("list BoxLite boxes", e))?;
        let mut table = self.published.lock().expect("published ports");
        Ok(all
            .into_iter()
            .filter_map(|i| {
                let running = i.status.is_active();
                let id = i.name.clone()?;
                // Boxes found running again (after a restart of boxd)
                // publish what BoxLite says they do.
                match (running, &i.network) {
                    (true, Some(n)) if n.published_ports.is_some() => {
                        table.insert(id.clone(), published_ports(&i, &[]));
                    }
                    (false, _) => {
                        table.remove(&id);
                    }
                    _ => {}
                }
                Some(EngineBox { id, running })
            })
            .collect())
    }

    async fn exec(&self, record: &BoxRecord, spec: ExecSpec) -> Result<super::exec::Started> {
        if spec.builtin.is_some() {
            return Err(Error::Internal(
                "built-in execs are the namespace engine's".into(),
            ));
        }
        let handle = self.running(record).await?;
        let execution = handle
            .exec(box_command(&spec))
            .await
            .map_err(|e| map_err("exec in the microVM", e))?;
        let process = process(execution, spec.stdin, spec.tty).await?;
        let exec = super::exec::LocalExec::start(process, spec.detach);
        let first = super::exec::LocalExec::subscription(exec.log(), Default::default());
        Ok(super::exec::Started {
            handle: exec,
            first,
        })
    }

    async fn stats(&self, record: &BoxRecord) -> Result<super::Stats> {
        let (info, handle) = self
            .handle(record)
            .await?
            .ok_or_else(|| Self::missing(record))?;
        // metrics() boots a box that is not running: never let it.
        if !info.status.is_running() {
            return Err(Error::FailedPrecondition(format!(
                "the box's microVM is {}, not running; start the box first",
                info.status
            )));
        }
        let m = handle
            .metrics()
            .await
            .map_err(|e| map_err("read the microVM's metrics", e))?;
        Ok(vm_stats(
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
        // Detached boxes (all of ours) are left running by design; boxd's
        // registry stops the ones it wants stopped before calling this.
        if let Err(e) = self.runtime.shutdown(Some(SHUTDOWN_TIMEOUT_S)).await {
            tracing::warn!(error = %e, "BoxLite runtime shutdown failed");
        }
    }
}

/// A published port as BoxLite takes it: TCP, host port `None` for any
/// free one, the host address always given (BoxLite's default is every
/// interface, boxd's 127.0.0.1).
pub fn port_spec(p: &PortMapping) -> PortSpec {
    PortSpec {
        host_port: (p.host_port != 0).then_some(p.host_port),
        guest_port: p.box_port,
        protocol: ::boxlite::PortProtocol::Tcp,
        host_ip: Some(p.host_ip.to_string()),
    }
}

/// What a running box publishes: BoxLite's concrete bindings when it knows
/// them, else what was asked (`asked`).
fn published_ports(info: &BoxInfo, asked: &[PortMapping]) -> Vec<PortMapping> {
    let Some(bound) = info
        .network
        .as_ref()
        .and_then(|n| n.published_ports.as_ref())
    else {
        return asked.to_vec();
    };
    bound
        .iter()
        .filter(|p| p.protocol == ::boxlite::PortProtocol::Tcp)
        .filter_map(|p| {
            Some(PortMapping {
                host_ip: p.host_ip.parse().ok()?,
                host_port: p.host_port,
                box_port: p.guest_port,
            })
        })
        .collect()
}

/// What BoxLite is asked to create for a box spec, and what of the spec
/// it will not honour as asked.
pub fn box_options(spec: &BoxSpec) -> Result<(BoxOptions, Vec<String>)> {
    let mut warnings = Vec::new();
    let mut o = BoxOptions::default();

    if spec.image.is_empty() {
        return Err(Error::InvalidArgument("an image is required".into()));
    }
    o.rootfs = if Path::new(&spec.image).is_absolute() {
        RootfsSpec::RootfsPath(spec.image.clone())
    } else {
        RootfsSpec::Image(spec.image.clone())
    };

    if let Some(cpus) = spec.cpus {
        if cpus == 0 || cpus > MAX_CPUS {
            return Err(Error::InvalidArgument(format!(
                "cpus must be between 1 and {MAX_CPUS} for a microVM, not {cpus}"
            )));
        }
        let host = std::thread::available_parallelism().map_or(0, |n| n.get() as u32);
        if host > 0 && cpus > host {
            warnings.push(format!(
                "the box gets {cpus} vCPUs but the host has {host} CPUs"
            ));
        }
        o.cpus = Some(cpus as u8);
    }
    if let Some(mib) = spec.memory_mib {
        if mib == 0 {
            return Err(Error::InvalidArgument("memory_mib must be positive".into()));
        }
        o.memory_mib = Some(mib);
    }
    if let Some(gb) = spec.disk_size_gb {
        if gb == 0 {
            return Err(Error::InvalidArgument(
                "disk_size_gb must be positive".into(),
            ));
        }
        o.disk_size_gb = Some(u64::from(gb));
    }

    for m in &spec.mounts {
        let host = m.host_path.to_str().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "mount source {} is not valid UTF-8, which BoxLite cannot take",
                m.host_path.display()
            ))
        })?;
        let mut v = VolumeSpec::bind_mount(host, m.guest_path.clone());
        v.read_only = m.read_only;
        o.volumes.push(v);
    }

    // boxd: an empty allow_net means no network at all (BoxLite's empty
    // list would mean unrestricted).
    o.network = if spec.allow_net.is_empty() {
        NetworkSpec::Disabled
    } else {
        NetworkSpec::Enabled {
            allow_net: spec.allow_net.clone(),
        }
    };

    // Secrets: BoxLite's own proxy keeps the values out of the VM; the box
    // sees each placeholder in $NAME, as on the namespace engine.
    o.secrets = spec
        .secrets
        .iter()
        .map(|s| ::boxlite::Secret {
            name: s.name.clone(),
            hosts: s.hosts.clone(),
            placeholder: s.placeholder.clone(),
            value: s.value.clone(),
        })
        .collect();
    o.env = spec
        .secrets
        .iter()
        .map(|s| (s.name.clone(), s.placeholder.clone()))
        .chain(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())))
        .collect();
    o.working_dir = spec.working_dir.clone().filter(|d| !d.is_empty());

    // Published ports: BoxLite's network backend listens on the host. It
    // publishes only from a box with a network (its rule, checked here so
    // the error says what to do in boxd's words).
    if !spec.ports.is_empty() && spec.allow_net.is_empty() {
        return Err(Error::InvalidArgument(
            "on the microvm engine a box publishes ports only if it has a network: give it --allow-net (BoxLite cannot publish ports of a box with no network)".into(),
        ));
    }
    o.ports = spec.ports.iter().map(port_spec).collect();

    // Survive a boxd restart: detached, and kept after stop (a detached box
    // that is removed on stop is refused by BoxLite).
    o.detach = true;
    o.auto_delete = Some(0);
    Ok((o, warnings))
}

/// BoxLite's copy options for a boxd copy: recursive, overwriting
/// (as `docker cp`), following symlinks only when asked.
fn copy_options(follow_symlinks: bool) -> ::boxlite::CopyOptions {
    ::boxlite::CopyOptions::default().follow_symlinks(follow_symlinks)
}

/// BoxLite's archive stream as boxd's.
fn from_boxlite(stream: ::boxlite::BoxByteStream) -> super::ByteStream {
    stream
        .map(|chunk| {
            chunk
                .map(Bytes::from)
                .map_err(|e| Error::Engine(format!("copy out of the microVM: {e}")))
        })
        .boxed()
}

/// boxd's archive stream as BoxLite takes it, counting the bytes in
/// `taken`. An error ends it as an error (BoxLite then fails the copy
/// rather than keep a truncated archive).
fn to_boxlite(
    archive: super::ByteStream,
    taken: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> impl futures::Stream<Item = std::io::Result<Vec<u8>>> + Send + 'static {
    archive.map(move |chunk| match chunk {
        Ok(b) => {
            taken.fetch_add(b.len() as u64, std::sync::atomic::Ordering::SeqCst);
            Ok(b.to_vec())
        }
        Err(e) => Err(std::io::Error::other(e.to_string())),
    })
}

fn box_command(spec: &ExecSpec) -> BoxCommand {
    let mut cmd = BoxCommand::new(spec.command.clone()).args(spec.args.iter().cloned());
    for (k, v) in &spec.env {
        cmd = cmd.env(k.clone(), v.clone());
    }
    if !spec.working_dir.is_empty() {
        cmd = cmd.working_dir(spec.working_dir.clone());
    }
    cmd.tty(spec.tty.is_some())
}

/// How a BoxLite exec ended, as boxd says it.
fn exit_status(r: &ExecResult) -> ExitStatus {
    let (code, signal) = if r.exit_code < 0 {
        (None, Some(-r.exit_code))
    } else {
        (Some(r.exit_code), None)
    };
    ExitStatus {
        code,
        signal,
        error: r.error_message.clone().filter(|m| !m.is_empty()),
    }
}

/// Turns a BoxLite execution into boxd's [`Process`].
/// boxd's stats from what BoxLite measures of a VM: its CPU use as a
/// percentage (no time), its memory, its network bytes; the VM's memory
/// size is its limit (BoxLite's default, 1 GiB, when the spec sets none).
fn vm_stats(
    cpu_percent: Option<f32>,
    memory_bytes: Option<u64>,
    received: Option<u64>,
    sent: Option<u64>,
    spec: &crate::registry::BoxSpec,
) -> super::Stats {
    super::Stats {
        cpu_usec: None,
        cpu_percent: Some(f64::from(cpu_percent.unwrap_or(0.0))),
        memory_bytes: memory_bytes.unwrap_or(0),
        memory_limit_bytes: Some(u64::from(spec.memory_mib.unwrap_or(1024)) << 20),
        pids: 0,
        net_rx_bytes: received.unwrap_or(0),
        net_tx_bytes: sent.unwrap_or(0),
    }
}

async fn process(
    mut execution: Execution,
    want_stdin: bool,
    tty: Option<(u16, u16)>,
) -> Result<Process> {
    if let Some((rows, cols)) = tty {
        // BoxLite sizes the terminal from the daemon's own (absent) terminal.
        if let Err(e) = execution.resize_tty(u32::from(rows), u32::from(cols)).await {
            tracing::warn!(error = %e, "could not size the exec's terminal");
        }
    }
    let stdout = execution
        .stdout()
        .ok_or_else(|| Error::Internal("BoxLite gave no stdout stream".into()))?;
    let stderr = execution.stderr();
    let stdin = execution.stdin();

    let stdin = match (want_stdin, stdin) {
        (true, Some(s)) => Some(stdin_pipe(s, execution.clone())),
        (true, None) => {
            return Err(Error::Internal("BoxLite gave no stdin stream".into()));
        }
        // Dropping BoxLite's stdin closes it: the process reads EOF.
        (false, _) => None,
    };
    let stderr = match tty {
        Some(_) => None,
        None => stderr.map(text_reader),
    };

    let control = Control::spawn(execution.clone());
    let exit = async move {
        match execution.wait().await {
            Ok(r) => exit_status(&r),
            Err(e) => ExitStatus {
                error: Some(format!("lost track of the process: {e}")),
                ..ExitStatus::default()
            },
        }
    }
    .boxed();
    Ok(Process {
        stdin,
        stdout: text_reader(stdout),
        stderr,
        control,
        exit,
    })
}

fn to_bytes(text: String) -> std::io::Result<Bytes> {
    Ok(Bytes::from(text))
}

/// An exec output stream (text chunks) as a byte reader.
fn text_reader<S>(stream: S) -> Output
where
    S: futures::Stream<Item = String> + Send + Unpin + 'static,
{
    Box::pin(tokio_util::io::StreamReader::new(
        stream.map(to_bytes as fn(String) -> std::io::Result<Bytes>),
    ))
}

/// A writer whose bytes go to the process's stdin; shutting it down or
/// dropping it closes stdin. Ends (and closes) when the process ends.
fn stdin_pipe(mut stdin: ExecStdin, execution: Execution) -> Input {
    let (writer, mut reader) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        let pump = async {
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if stdin.write(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
        };
        tokio::select! {
            () = pump => {}
            _ = execution.wait() => {}
        }
        stdin.close();
    });
    Box::pin(writer)
}

enum Ctl {
    Signal(i32),
    Resize(u16, u16),
}

/// Signals and resizes, delivered in order by one task per process (the
/// trait is synchronous, BoxLite's calls are not). The task ends with the
/// process, after which both calls fail.
struct Control {
    tx: mpsc::UnboundedSender<Ctl>,
}

impl Control {
    fn spawn(execution: Execution) -> std::sync::Arc<dyn ProcessControl> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let ended = execution.wait();
            tokio::pin!(ended);
            loop {
                tokio::select! {
                    biased;
                    ctl = rx.recv() => match ctl {
                        None => break,
                        Some(Ctl::Signal(sig)) => {
                            if let Err(e) = execution.signal(sig).await {
                                tracing::warn!(signal = sig, error = %e, "could not signal an exec");
                            }
                        }
                        Some(Ctl::Resize(rows, cols)) => {
                            if let Err(e) = execution.resize_tty(u32::from(rows), u32::from(cols)).await {
                                tracing::warn!(error = %e, "could not resize an exec's terminal");
                            }
                        }
                    },
                    _ = &mut ended => break,
                }
            }
        });
        std::sync::Arc::new(Control { tx })
    }

    fn send(&self, ctl: Ctl) -> Result<()> {
        self.tx
            .send(ctl)
            .map_err(|_| Error::FailedPrecondition("the process has exited".into()))
    }
}

impl ProcessControl for Control {
    fn signal(&self, signal: i32) -> Result<()> {
        if signal <= 0 || signal > 64 {
            return Err(Error::InvalidArgument(format!("no such signal: {signal}")));
        }
        self.send(Ctl::Signal(signal))
    }

    fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        if rows == 0 || cols == 0 {
            return Err(Error::InvalidArgument(format!(
                "terminal size {rows}x{cols} is not valid"
            )));
        }
        self.send(Ctl::Resize(rows, cols))
    }
}

/// The error for a runtime that would not open.
fn open_error(home: &Path, e: BoxliteError) -> Error {
    let text = e.to_string();
    if text.contains("runtime lock") || text.contains("already using directory") {
        return Error::FailedPrecondition(format!(
            "the BoxLite home {} is in use by another process (another boxd, or the boxlite CLI or Python SDK pointed at it); only one process can use a BoxLite home at a time",
            home.display()
        ));
    }
    match e {
        BoxliteError::Unsupported(m) => {
            Error::FailedPrecondition(format!("BoxLite cannot run on this host: {m}"))
        }
        e => map_err(
            &format!("open the BoxLite runtime at {}", home.display()),
            e,
        ),
    }
}

/// A failed pull: BoxLite reports unreachable registries as storage
/// errors, but for boxd they mean the engine could not get the image.
fn pull_error(reference: &str, e: BoxliteError) -> Error {
    match map_err(&format!("pull {reference}"), e) {
        Error::Internal(m) => Error::Engine(m),
        other => other,
    }
}

/// A BoxLite error as a boxd error, with what was being done.
fn map_err(context: &str, e: BoxliteError) -> Error {
    let msg = format!("{context}: {e}");
    match e {
        // 0.10.8 reports a taken box name as an invalid argument.
        BoxliteError::InvalidArgument(m) if m.contains("already exists") => {
            Error::AlreadyExists(msg)
        }
        BoxliteError::InvalidArgument(_) | BoxliteError::Config(_) => Error::InvalidArgument(msg),
        BoxliteError::NotFound(_) => Error::NotFound(msg),
        BoxliteError::AlreadyExists(_) => Error::AlreadyExists(msg),
        BoxliteError::InvalidState(_) | BoxliteError::Stopped(_) | BoxliteError::Unsupported(_) => {
            Error::FailedPrecondition(msg)
        }
        BoxliteError::UnsupportedEngine => Error::Unimplemented(msg),
        BoxliteError::Storage(_)
        | BoxliteError::Database(_)
        | BoxliteError::MetadataError(_)
        | BoxliteError::Internal(_) => Error::Internal(msg),
        BoxliteError::Engine(_)
        | BoxliteError::Image(_)
        | BoxliteError::Portal(_)
        | BoxliteError::Network(_)
        | BoxliteError::Rpc(_)
        | BoxliteError::RpcTransport(_)
        | BoxliteError::Execution(_)
        | BoxliteError::ResourceExhausted(_)
        | BoxliteError::SessionReaped(_) => Error::Engine(msg),
    }
}

/// The last lines of a log file, without terminal escapes; `None` if it is
/// missing or empty.
fn log_tail(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(LOG_TAIL_BYTES);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    let text = strip_ansi(&String::from_utf8_lossy(&buf));
    let mut lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    if start > 0 && !lines.is_empty() {
        lines.remove(0); // probably cut in the middle
    }
    let keep = lines.len().saturating_sub(LOG_TAIL_LINES);
    let tail = lines[keep..].join("\n");
    (!tail.is_empty()).then_some(tail)
}

/// Removes ANSI CSI sequences (`ESC [ ... final`), as tracing's colours.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;
    use crate::registry::{Mount, State};

    fn spec(image: &str) -> BoxSpec {
        BoxSpec {
            image: image.into(),
            ..BoxSpec::default()
        }
    }

    #[test]
    fn vm_metrics_map_to_stats() {
        let s = vm_stats(Some(150.5), Some(300 << 20), Some(7), Some(9), &spec("img"));
        assert_eq!(s.cpu_usec, None, "BoxLite reports a percentage, not time");
        assert_eq!(s.cpu_percent, Some(150.5));
        assert_eq!(s.memory_bytes, 300 << 20);
        assert_eq!(s.memory_limit_bytes, Some(1 << 30));
        assert_eq!((s.net_rx_bytes, s.net_tx_bytes), (7, 9));
        let mut sized = spec("img");
        sized.memory_mib = Some(256);
        let s = vm_stats(None, None, None, None, &sized);
        assert_eq!(s.memory_limit_bytes, Some(256 << 20));
        assert_eq!((s.cpu_percent, s.memory_bytes), (Some(0.0), 0));
    }

    #[test]
    fn options_map_every_field() {
        let s = BoxSpec {
            image: "/srv/images/busybox".into(),
            cpus: Some(1),
            memory_mib: Some(256),
            disk_size_gb: Some(4),
            mounts: vec![
                Mount {
                    host_path: "/home/u/src".into(),
                    guest_path: "/src".into(),
                    read_only: true,
                },
                Mount {
                    host_path: "/home/u/out".into(),
                    guest_path: "/out".into(),
                    read_only: false,
                },
            ],
            allow_net: vec!["example.com".into(), "10.0.0.0/8".into()],
            env: BTreeMap::from([("A".into(), "1".into()), ("B".into(), "2".into())]),
            working_dir: Some("/work".into()),
            secrets: vec![crate::egress::Secret {
                name: "KEY".into(),
                hosts: vec!["example.com".into()],
                placeholder: "PH".into(),
                value: "v".into(),
            }],
            ports: vec![],
        };
        let (o, warnings) = box_options(&s).unwrap();
        assert_eq!(o.secrets.len(), 1);
        assert_eq!(
            (
                o.secrets[0].placeholder.as_str(),
                o.secrets[0].value.as_str()
            ),
            ("PH", "v")
        );
        assert!(matches!(&o.rootfs, RootfsSpec::RootfsPath(p) if p == "/srv/images/busybox"));
        assert_eq!(o.cpus, Some(1));
        assert_eq!(o.memory_mib, Some(256));
        assert_eq!(o.disk_size_gb, Some(4));
        assert_eq!(o.volumes.len(), 2);
        assert_eq!(o.volumes[0].host_path, "/home/u/src");
        assert_eq!(o.volumes[0].guest_path, "/src");
        assert!(o.volumes[0].read_only);
        assert!(o.volumes[0].managed_volume.is_none());
        assert!(!o.volumes[1].read_only);
        assert!(o.mounts.is_empty());
        assert!(
            matches!(&o.network, NetworkSpec::Enabled { allow_net } if allow_net == &["example.com", "10.0.0.0/8"])
        );
        assert!(matches!(o.inbound_network, NetworkSpec::Disabled));
        assert!(o.ports.is_empty());
        assert_eq!(
            o.env,
            vec![
                ("KEY".into(), "PH".into()),
                ("A".into(), "1".into()),
                ("B".into(), "2".into())
            ]
        );
        assert_eq!(o.working_dir.as_deref(), Some("/work"));
        assert!(o.detach);
        assert_eq!(o.auto_delete, Some(0));
        assert!(o.entrypoint.is_none() && o.cmd.is_none() && o.user.is_none() && !o.tty);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn published_ports_map_to_boxlite() {
        let mut s = spec("alpine");
        s.ports = vec![
            PortMapping {
                host_ip: "127.0.0.1".parse().unwrap(),
                host_port: 0,
                box_port: 8000,
            },
            PortMapping {
                host_ip: "::".parse().unwrap(),
                host_port: 8080,
                box_port: 80,
            },
        ];
        // BoxLite publishes only from a box with a network: said in boxd's words.
        let e = box_options(&s).unwrap_err().to_string();
        assert!(e.contains("--allow-net"), "{e}");
        s.allow_net = vec!["example.com".into()];
        let (o, _) = box_options(&s).unwrap();
        assert_eq!(
            o.ports,
            vec![
                PortSpec {
                    host_port: None,
                    guest_port: 8000,
                    protocol: ::boxlite::PortProtocol::Tcp,
                    host_ip: Some("127.0.0.1".into()),
                },
                PortSpec {
                    host_port: Some(8080),
                    guest_port: 80,
                    protocol: ::boxlite::PortProtocol::Tcp,
                    host_ip: Some("::".into()),
                },
            ]
        );
    }

    #[test]
    fn options_defaults_and_registry_images() {
        let (o, _) = box_options(&spec("docker.io/library/alpine:3.20")).unwrap();
        assert!(matches!(&o.rootfs, RootfsSpec::Image(r) if r == "docker.io/library/alpine:3.20"));
        // Empty allow_net is "no network" in boxd, not BoxLite's "anything".
        assert!(matches!(o.network, NetworkSpec::Disabled));
        assert_eq!((o.cpus, o.memory_mib, o.disk_size_gb), (None, None, None));
        assert!(o.volumes.is_empty() && o.env.is_empty() && o.working_dir.is_none());
        assert!(o.detach);
        assert_eq!(o.auto_delete, Some(0));

        let mut s = spec("alpine");
        s.working_dir = Some(String::new());
        assert!(box_options(&s).unwrap().0.working_dir.is_none());
    }

    #[test]
    fn options_reject_what_boxlite_cannot_do() {
        for cpus in [0, MAX_CPUS + 1, 255, 256] {
            let mut s = spec("alpine");
            s.cpus = Some(cpus);
            let e = box_options(&s).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains("between 1 and 16")),
                "{e}"
            );
        }
        let mut s = spec("alpine");
        s.cpus = Some(MAX_CPUS);
        let (o, warnings) = box_options(&s).unwrap();
        assert_eq!(o.cpus, Some(16));
        if std::thread::available_parallelism().unwrap().get() < 16 {
            assert!(
                warnings.iter().any(|w| w.contains("16 vCPUs")),
                "{warnings:?}"
            );
        }
        assert!(matches!(
            box_options(&spec("")),
            Err(Error::InvalidArgument(_))
        ));
        let mut s = spec("alpine");
        s.memory_mib = Some(0);
        assert!(matches!(box_options(&s), Err(Error::InvalidArgument(_))));
        let mut s = spec("alpine");
        s.disk_size_gb = Some(0);
        assert!(matches!(box_options(&s), Err(Error::InvalidArgument(_))));
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let mut s = spec("alpine");
            s.mounts.push(Mount {
                host_path: PathBuf::from(std::ffi::OsStr::from_bytes(b"/tmp/\xff")),
                guest_path: "/x".into(),
                read_only: false,
            });
            assert!(matches!(box_options(&s), Err(Error::InvalidArgument(_))));
        }
    }

    #[test]
    fn options_pass_boxlite_validation() {
        // BoxLite's own create-time checks (detach needs keep-on-stop, ...).
        let mut s = spec("alpine");
        s.allow_net = vec!["example.com".into()];
        let (o, _) = box_options(&s).unwrap();
        let json = serde_json::to_value(&o).unwrap();
        assert_eq!(json["detach"], true);
        assert_eq!(json["auto_delete"], 0);
    }

    #[tokio::test]
    async fn copies_map_to_boxlite_streams() {
        assert!(!copy_options(false).follow_symlinks);
        assert!(copy_options(true).follow_symlinks);
        assert!(copy_options(false).recursive && copy_options(false).overwrite);
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let archive: super::super::ByteStream = futures::stream::iter(vec![
            Ok(Bytes::from_static(b"abc")),
            Ok(Bytes::from_static(b"de")),
            Err(Error::InvalidArgument("client went away".into())),
        ])
        .boxed();
        let out: Vec<_> = to_boxlite(archive, taken.clone()).collect().await;
        assert_eq!(out[0].as_ref().unwrap(), b"abc");
        assert_eq!(out[1].as_ref().unwrap(), b"de");
        assert!(
            out[2]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("went away")
        );
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 5);
        let back: ::boxlite::BoxByteStream = Box::pin(futures::stream::iter(vec![
            Ok(b"xy".to_vec()),
            Err(std::io::Error::other("vm gone")),
        ]));
        let back: Vec<_> = from_boxlite(back).collect().await;
        assert_eq!(back[0].as_ref().unwrap(), &Bytes::from_static(b"xy"));
        assert!(matches!(&back[1], Err(Error::Engine(m)) if m.contains("vm gone")));
    }

    #[test]
    fn command_maps_spec() {
        let c = box_command(&ExecSpec {
            command: "sh".into(),
            args: vec!["-c".into(), "echo hi".into()],
            env: vec![("K".into(), "V".into())],
            working_dir: "/tmp".into(),
            stdin: true,
            tty: Some((24, 80)),
            ..Default::default()
        });
        let dbg = format!("{c:?}");
        assert!(dbg.contains("command: \"sh\""), "{dbg}");
        assert!(dbg.contains("args: [\"-c\", \"echo hi\"]"), "{dbg}");
        assert!(dbg.contains("env: Some([(\"K\", \"V\")])"), "{dbg}");
        assert!(dbg.contains("working_dir: Some(\"/tmp\")"), "{dbg}");
        assert!(dbg.contains("tty: true"), "{dbg}");
        let c = box_command(&ExecSpec {
            command: "true".into(),
            args: vec![],
            env: vec![],
            working_dir: String::new(),
            stdin: false,
            tty: None,
            ..Default::default()
        });
        let dbg = format!("{c:?}");
        assert!(
            dbg.contains("working_dir: None") && dbg.contains("tty: false"),
            "{dbg}"
        );
    }

    #[test]
    fn exit_results_map_to_statuses() {
        let r = |exit_code, msg: Option<&str>| ExecResult {
            exit_code,
            error_message: msg.map(String::from),
        };
        assert_eq!(
            exit_status(&r(0, None)),
            ExitStatus {
                code: Some(0),
                ..ExitStatus::default()
            }
        );
        assert_eq!(exit_status(&r(3, None)).code, Some(3));
        let killed = exit_status(&r(-9, None));
        assert_eq!((killed.code, killed.signal), (None, Some(9)));
        let err = exit_status(&r(-1, Some("container init died")));
        assert_eq!(err.signal, Some(1));
        assert_eq!(err.error.as_deref(), Some("container init died"));
        assert_eq!(exit_status(&r(1, Some(""))).error, None);
    }

    #[test]
    fn errors_map_to_codes() {
        let lock = BoxliteError::Internal("Failed to acquire runtime lock at /h/boxlite: internal error: Another BoxliteRuntime is already using directory: /h/boxlite".into());
        let e = open_error(Path::new("/h/boxlite"), lock);
        assert!(
            matches!(&e, Error::FailedPrecondition(m) if m.contains("/h/boxlite") && m.contains("in use")),
            "{e}"
        );
        let e = open_error(
            Path::new("/h"),
            BoxliteError::Unsupported("KVM is not available on this host.".into()),
        );
        assert!(
            matches!(&e, Error::FailedPrecondition(m) if m.contains("KVM")),
            "{e}"
        );
        let e = map_err(
            "start",
            BoxliteError::Engine("The VM failed to start.".into()),
        );
        assert!(
            matches!(&e, Error::Engine(m) if m == "start: engine reported an error: The VM failed to start."),
            "{e}"
        );
        assert!(matches!(
            map_err("x", BoxliteError::NotFound("b".into())),
            Error::NotFound(_)
        ));
        assert!(matches!(
            map_err("x", BoxliteError::AlreadyExists("b".into())),
            Error::AlreadyExists(_)
        ));
        assert!(matches!(
            map_err("x", BoxliteError::InvalidState("b".into())),
            Error::FailedPrecondition(_)
        ));
        assert!(matches!(
            map_err("x", BoxliteError::InvalidArgument("b".into())),
            Error::InvalidArgument(_)
        ));
        assert!(matches!(
            map_err(
                "x",
                BoxliteError::InvalidArgument("box with name 'n' already exists".into())
            ),
            Error::AlreadyExists(_)
        ));
        assert!(matches!(
            map_err("x", BoxliteError::Database("b".into())),
            Error::Internal(_)
        ));
    }

    #[test]
    fn log_tails_are_short_and_plain() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("shim.stderr");
        assert_eq!(log_tail(&p), None);
        std::fs::write(&p, "").unwrap();
        assert_eq!(log_tail(&p), None);
        let mut text = String::new();
        for i in 0..500 {
            text.push_str(&format!("\u{1b}[2mline\u{1b}[0m {i}\n\n"));
        }
        text.push_str("\u{1b}[31mERROR\u{1b}[0m krun_vmm::linux::vstate] Received KVM_EXIT_INTERNAL_ERROR signal\n");
        std::fs::write(&p, text).unwrap();
        let tail = log_tail(&p).unwrap();
        let lines: Vec<&str> = tail.lines().collect();
        assert_eq!(lines.len(), LOG_TAIL_LINES);
        assert_eq!(lines[0], "line 489");
        assert_eq!(
            lines[LOG_TAIL_LINES - 1],
            "ERROR krun_vmm::linux::vstate] Received KVM_EXIT_INTERNAL_ERROR signal"
        );
        assert!(!tail.contains('\u{1b}'));
    }

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

    /// The exec adapter, against BoxLite's stub execution (needs the
    /// `test-support` feature of `boxlite`).
    #[cfg(feature = "boxlite-test-support")]
    mod process_adapter {
        use tokio::io::AsyncWriteExt;

        use super::*;

        #[tokio::test]
        async fn streams_stdin_and_exit() {
            let (exec, out_tx, err_tx, mut stdin_rx, result_tx) = Execution::stub("e1");
            let mut p = process(exec, true, None).await.unwrap();
            out_tx.send("hé".into()).unwrap();
            out_tx.send("llo\n".into()).unwrap();
            drop(out_tx);
            err_tx.send("oops\n".into()).unwrap();
            drop(err_tx);
            let mut out = Vec::new();
            p.stdout.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, "héllo\n".as_bytes());
            let mut err = String::new();
            p.stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .await
                .unwrap();
            assert_eq!(err, "oops\n");

            let mut stdin = p.stdin.take().unwrap();
            stdin.write_all(b"abc").await.unwrap();
            stdin.flush().await.unwrap();
            assert_eq!(stdin_rx.recv().await.unwrap(), b"abc");
            stdin.shutdown().await.unwrap();
            drop(stdin);
            // EOF reaches BoxLite as a closed channel.
            assert_eq!(stdin_rx.recv().await, None);

            p.control.signal(15).unwrap();
            p.control.resize(40, 100).unwrap();
            assert!(matches!(
                p.control.signal(0),
                Err(Error::InvalidArgument(_))
            ));
            assert!(matches!(
                p.control.resize(0, 10),
                Err(Error::InvalidArgument(_))
            ));
            result_tx
                .send(ExecResult {
                    exit_code: -9,
                    error_message: None,
                })
                .unwrap();
            let status = p.exit.await;
            assert_eq!((status.code, status.signal), (None, Some(9)));
            // The control task ends with the process.
            for _ in 0..100 {
                if p.control.signal(9).is_err() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(matches!(
                p.control.signal(9),
                Err(Error::FailedPrecondition(_))
            ));
        }

        #[tokio::test]
        async fn no_stdin_means_eof_and_tty_has_no_stderr() {
            let (exec, out_tx, _err_tx, mut stdin_rx, result_tx) = Execution::stub("e2");
            let mut p = process(exec, false, Some((24, 80))).await.unwrap();
            assert!(p.stdin.is_none());
            assert!(p.stderr.is_none());
            assert_eq!(stdin_rx.recv().await, None);
            out_tx.send("\u{fffd}binary".into()).unwrap();
            drop(out_tx);
            let mut out = Vec::new();
            p.stdout.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, "\u{fffd}binary".as_bytes());
            drop(result_tx);
            let status = p.exit.await;
            assert!(status.error.unwrap().contains("lost track"));
        }

        #[tokio::test]
        async fn stdin_closes_when_the_process_ends() {
            let (exec, _out_tx, _err_tx, mut stdin_rx, result_tx) = Execution::stub("e3");
            let mut p = process(exec, true, None).await.unwrap();
            let stdin = p.stdin.take().unwrap();
            result_tx
                .send(ExecResult {
                    exit_code: 0,
                    error_message: None,
                })
                .unwrap();
            assert_eq!(p.exit.await.code, Some(0));
            // The pump lets go of BoxLite's stdin although ours is open.
            assert_eq!(stdin_rx.recv().await, None);
            drop(stdin);
        }
    }
}
