//! The one interface between the daemon and whatever runs boxes.
//!
//! The daemon owns names, persistence, locking, events and exec sessions;
//! an engine only turns a [`BoxRecord`] into something running and runs
//! processes in it. Every engine error is an [`Error`], mapped to a gRPC
//! status in one place (`error.rs`).
//!
//! The shape follows what BoxLite offers (`create` → `start` → `exec` with
//! stdin/stdout/stderr streams, `kill`/`signal`/`resize_tty`, `wait`,
//! `stop`, `remove`, `list_info` for recovery), so its engine fits here
//! without reshaping this trait.

pub mod box_archive;
pub mod boxlite;
pub mod exec;
#[cfg(test)]
pub mod fake;
#[cfg(target_os = "linux")]
pub mod namespace;

use std::pin::Pin;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::Error;
use crate::model::{BoxRecord, PortMapping};

/// How strongly boxes are isolated from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Hardware-isolated VMs (the BoxLite engine).
    MicroVm,
    Namespace,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::MicroVm => "microvm",
            Isolation::Namespace => "namespace",
        }
    }
}

/// What every engine supports, plus `extra`, as `Describe` lists them.
/// The warnings of an update of a running box: the allow-list always
/// waits for its next start (its network is set up at start), its limits
/// when `limits_wait`.
pub fn changes_at_next_start(
    old: &crate::model::BoxSpec,
    new: &crate::model::BoxSpec,
    limits_wait: bool,
) -> Vec<String> {
    let mut wait = Vec::new();
    if limits_wait {
        wait.push("cpus and memory");
    }
    if old.allow_net != new.allow_net {
        wait.push("the allow-list");
    }
    if wait.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "{} apply when the box next starts (boxctl restart BOX)",
        wait.join(" and ")
    )]
}

pub fn capabilities(extra: &[&str]) -> Vec<String> {
    const COMMON: [&str; 11] = [
        "exec.stdin",
        "exec.tty",
        "exec.signal",
        "exec.timeout",
        "exec.attach",
        "exec.detach",
        "mounts.readOnly",
        "box.watch",
        "box.stats",
        "net.publish",
        "files.copy",
    ];
    COMMON.iter().chain(extra).map(|c| c.to_string()).collect()
}

/// What an engine is, for `Describe` and for every create reply.
#[derive(Debug, Clone)]
pub struct EngineInfo {
    pub name: &'static str,
    pub version: String,
    pub isolation: Isolation,
    /// Optional features (`exec.tty`, `output.binary`, ...).
    pub capabilities: Vec<String>,
    /// What a user should know: why this engine, what it does not enforce.
    pub notes: Vec<String>,
    /// Whether `allow_net` is enforced as a host filter.
    pub network_filtering: bool,
    /// Added to every create reply (e.g. why `auto` fell back to namespaces).
    pub create_warning: Option<String>,
    /// Whether running boxes keep running when the daemon exits (and are
    /// found again by `list` when it restarts).
    pub boxes_outlive_daemon: bool,
    /// Whether running execs keep running (and are found again) too.
    pub execs_outlive_daemon: bool,
    /// Where boxes run: `None` for this host, else `remote: URL`.
    pub host: Option<String>,
}

/// What `create` made.
#[derive(Debug, Clone)]
pub struct Created {
    /// Digest of the image manifest the box was made from.
    pub image_digest: String,
    /// Things the engine could not honour (for example resource limits).
    pub warnings: Vec<String>,
}

/// A box as the engine sees it, for recovery after a daemon restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineBox {
    pub id: String,
    pub running: bool,
}

/// A command to run in a running box. Environment and working directory are
/// already merged (image, then box, then exec).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ExecSpec {
    /// The daemon's id for it.
    pub id: String,
    /// Its output runs on while nobody reads it.
    pub detach: bool,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub stdin: bool,
    /// `Some((rows, cols))`: run on a pseudo-terminal of that size.
    pub tty: Option<(u16, u16)>,
    /// `USER[:GROUP]` to run as; `None`: the image's user, else box root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Run boxd's own code in the box instead of `command` (the namespace
    /// engine's file copies). Such an exec is the daemon's: never listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<Builtin>,
}

/// Work a namespace box's zygote does itself, in a forked child inside the
/// box (chrooted in it, box root, confined): paths resolve in the box.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Builtin {
    /// A tar of `path` on stdout (see [`Engine::copy_out`]).
    TarOut { path: String, follow_symlinks: bool },
    /// A tar from stdin unpacked at `path` (see [`Engine::copy_in`]).
    TarIn { path: String },
}

/// How a process ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The engine could not run the command at all, or the command was
    /// ended by its box ending.
    pub error: Option<String>,
}

/// Something that happened to a box on its own: it ended without being
/// asked to (its init killed from outside, its VM gone), or, while it runs
/// on, the kernel killed a process of it for memory.
#[derive(Debug, Clone)]
pub struct Report {
    pub id: String,
    pub name: String,
    pub message: String,
    /// Whether the box ended (the registry marks it failed).
    pub ended: bool,
}

/// Signals and resizes for a running process. Shared between the tasks of
/// an exec session.
pub trait ProcessControl: Send + Sync {
    /// Sends a signal to the process (and its process group where the
    /// engine has one).
    fn signal(&self, signal: i32) -> Result<(), Error>;
    fn resize(&self, rows: u16, cols: u16) -> Result<(), Error>;
}

/// A process's input, as the exec layer writes it.
pub type Input = Pin<Box<dyn AsyncWrite + Send>>;
/// A process's output, as the exec layer reads it.
pub type Output = Pin<Box<dyn AsyncRead + Send>>;

/// A running process. The exec layer reads its output, feeds its input and
/// awaits `exit` once.
pub struct Process {
    pub stdin: Option<Input>,
    /// With a TTY, the terminal's output.
    pub stdout: Output,
    /// `None` with a TTY.
    pub stderr: Option<Output>,
    pub control: std::sync::Arc<dyn ProcessControl>,
    pub exit: BoxFuture<'static, ExitStatus>,
}

/// An exec that a box kept running (or kept the end of) while the daemon
/// was away, found again at start.
pub struct Adopted {
    pub id: String,
    pub command: String,
    pub args: Vec<String>,
    pub tty: bool,
    pub detach: bool,
    pub started_at_ms: i64,
    pub handle: std::sync::Arc<dyn exec::ExecHandle>,
    /// Set when it has exited.
    pub exit: Option<ExitStatus>,
}

/// Bytes in order (a tar archive of files); an error ends the stream.
pub type ByteStream = futures::stream::BoxStream<'static, Result<bytes::Bytes, Error>>;

/// What a running box uses, as an engine measures it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// CPU time of its processes since it started, when the engine counts it.
    pub cpu_usec: Option<u64>,
    /// CPU use as the engine itself reports it (100 = one core), when it
    /// does not count time.
    pub cpu_percent: Option<f64>,
    pub memory_bytes: u64,
    pub memory_limit_bytes: Option<u64>,
    pub pids: u32,
    pub net_rx_bytes: u64,
    pub net_tx_bytes: u64,
}

/// A snapshot of a box's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub name: String,
    pub created_at_ms: i64,
    pub size_bytes: u64,
}

/// Which boxes use which image: manifest digest → box names.
pub type InUse = std::collections::HashMap<String, Vec<String>>;

/// The images an engine creates boxes from. `reference` is a registry
/// reference, or for `inspect`/`remove` also a manifest digest.
#[async_trait]
pub trait Images: Send + Sync {
    async fn pull(
        &self,
        reference: &str,
        progress: crate::image::pull::Progress,
    ) -> Result<crate::model::ImageInfo, Error>;
    async fn list(&self) -> Result<Vec<crate::model::ImageInfo>, Error>;
    async fn inspect(&self, reference: &str) -> Result<crate::model::ImageInfo, Error>;
    async fn remove(
        &self,
        reference: &str,
        in_use: &InUse,
        force: bool,
    ) -> Result<crate::model::RemovedImage, Error>;
    async fn prune(&self, in_use: &InUse) -> Result<crate::model::Pruned, Error>;
    async fn import(
        &self,
        path: &std::path::Path,
        reference: Option<&str>,
    ) -> Result<crate::model::ImageInfo, Error>;
}

#[async_trait]
pub trait Engine: Send + Sync + 'static {
    fn info(&self) -> &EngineInfo;

    /// The engine's images.
    fn images(&self) -> &dyn Images;

    /// Prepares a new box: resolves its image and makes its writable layer.
    /// The box is not started.
    async fn create(&self, record: &BoxRecord) -> Result<Created, Error>;

    /// Starts a created or stopped box. Returns once commands can run in it.
    async fn start(&self, record: &BoxRecord) -> Result<(), Error>;

    /// Stops a box: every process in it ends. `force` skips the grace period.
    async fn stop(&self, record: &BoxRecord, force: bool) -> Result<(), Error>;

    /// Deletes a stopped box and everything it wrote.
    async fn remove(&self, record: &BoxRecord) -> Result<(), Error>;

    /// Applies `new`'s limits to the running box `record` (whose spec is
    /// still the old one) where the engine can; returns what waits for the
    /// box's next start. The default: everything does.
    async fn update_running(
        &self,
        record: &BoxRecord,
        new: &crate::model::BoxSpec,
    ) -> Result<Vec<String>, Error> {
        let old = &record.spec;
        Ok(changes_at_next_start(
            old,
            new,
            old.cpus != new.cpus || old.memory_mib != new.memory_mib,
        ))
    }

    /// The boxes the engine knows of, to reconcile after a daemon restart.
    async fn list(&self) -> Result<Vec<EngineBox>, Error>;

    /// Runs a command in a running box.
    async fn exec(&self, record: &BoxRecord, spec: ExecSpec) -> Result<exec::Started, Error>;

    /// Finds a box recorded as running again after a daemon restart, with
    /// the execs it kept. `None`: the engine does not run it (any more).
    /// Engines whose boxes do not outlive the daemon find nothing.
    async fn adopt(&self, _record: &BoxRecord) -> Option<Vec<Adopted>> {
        None
    }

    /// Why the engine cannot serve boxes right now (a remote server that
    /// does not answer or refuses the key), asked afresh; `None` when it can.
    async fn problem(&self) -> Option<String> {
        None
    }

    /// The last problem a call met (as [`Engine::problem`] words it),
    /// until a call succeeds; what each box reports as its error meanwhile.
    fn known_problem(&self) -> Option<String> {
        None
    }

    /// Asks afresh when a problem is known (so that a box's report clears
    /// once the engine can serve again); nothing otherwise.
    async fn recheck(&self) {}

    /// Bytes the box's own files take on disk (not the shared image), when
    /// the engine can tell.
    async fn disk_usage(&self, _record: &BoxRecord) -> Option<u64> {
        None
    }

    /// The ports a running box publishes now (actual host ports).
    fn published(&self, _record: &BoxRecord) -> Vec<PortMapping> {
        Vec::new()
    }

    /// `path` in a running box as a tar stream of one top-level entry
    /// named after its last component (a path ending in `/.`: the
    /// directory's contents). Paths resolve inside the box.
    async fn copy_out(
        &self,
        _record: &BoxRecord,
        _path: &str,
        _follow_symlinks: bool,
    ) -> Result<ByteStream, Error> {
        Err(self.unsupported("copying files out of a box"))
    }

    /// Unpacks a tar stream into a running box at `path`: into it when it
    /// is a directory, else as it (its one top-level entry renamed).
    /// Returns the archive bytes taken.
    async fn copy_in(
        &self,
        _record: &BoxRecord,
        _path: &str,
        _archive: ByteStream,
    ) -> Result<u64, Error> {
        Err(self.unsupported("copying files into a box"))
    }

    /// What a running box uses now.
    async fn stats(&self, _record: &BoxRecord) -> Result<Stats, Error> {
        Err(self.unsupported("box stats"))
    }

    /// Records the box's files as snapshot `name`.
    async fn snapshot_create(&self, _record: &BoxRecord, _name: &str) -> Result<Snapshot, Error> {
        Err(self.unsupported("snapshots"))
    }

    async fn snapshot_list(&self, _record: &BoxRecord) -> Result<Vec<Snapshot>, Error> {
        Err(self.unsupported("snapshots"))
    }

    /// Puts a stopped box's files back as snapshot `name` holds them.
    async fn snapshot_restore(&self, _record: &BoxRecord, _name: &str) -> Result<(), Error> {
        Err(self.unsupported("snapshots"))
    }

    async fn snapshot_remove(&self, _record: &BoxRecord, _name: &str) -> Result<(), Error> {
        Err(self.unsupported("snapshots"))
    }

    /// Makes `target` (a new record, its directory made, spec copied) a
    /// box with a copy of `source`'s files; `source` may be running.
    async fn clone_box(&self, _source: &BoxRecord, _target: &BoxRecord) -> Result<Created, Error> {
        Err(self.unsupported("cloning boxes"))
    }

    /// Writes `record` as a box archive at `path` (which must not exist);
    /// returns its size.
    async fn export(&self, _record: &BoxRecord, _path: &std::path::Path) -> Result<u64, Error> {
        Err(self.unsupported("exporting boxes"))
    }

    /// Reads the spec an archive holds (checked as a create's would be
    /// by the caller).
    async fn archive_spec(&self, _path: &std::path::Path) -> Result<crate::model::BoxSpec, Error> {
        Err(self.unsupported("importing boxes"))
    }

    /// Makes `target` (a new record with the archive's spec, its directory
    /// made) the box an archive holds.
    async fn import(&self, _path: &std::path::Path, _target: &BoxRecord) -> Result<Created, Error> {
        Err(self.unsupported("importing boxes"))
    }

    /// The error for what this engine cannot do.
    fn unsupported(&self, what: &str) -> Error {
        Error::Unimplemented(format!(
            "the {} engine does not support {what}",
            self.info().name
        ))
    }

    /// Stops every box the engine runs, before the daemon exits.
    async fn shutdown(&self);

    /// What happened to boxes on their own, for the registry to record
    /// and announce. Taken once; `None` from an engine that cannot tell.
    fn reports(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Report>> {
        None
    }
}
