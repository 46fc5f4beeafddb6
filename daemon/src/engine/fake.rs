//! An engine that runs nothing, for unit tests of the registry and exec
//! sessions: boxes are entries in a table, and each exec is a process
//! whose other ends the test holds ([`FakeProcess`]): it writes the
//! command's output, reads its stdin, and ends it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::DuplexStream;
use tokio::sync::oneshot;

use super::{
    Created, Engine, EngineBox, EngineInfo, ExecSpec, ExitStatus, Images, InUse, Isolation,
    Process, ProcessControl,
};
use crate::error::{Error, Result};
use crate::model::BoxRecord;

/// How the fake's next operations fail or wait.
#[derive(Debug, Default, Clone)]
pub struct Script {
    /// `create` waits this long first (to overlap concurrent creates).
    pub create_delay: Duration,
    pub fail_create: Option<fn() -> Error>,
    pub fail_start: Option<fn() -> Error>,
}

/// The test's side of an exec: the command's stdout and stderr to write,
/// its stdin to read, its end, and the signals it was sent.
pub struct FakeProcess {
    pub spec: ExecSpec,
    pub stdout: DuplexStream,
    pub stderr: DuplexStream,
    pub stdin: DuplexStream,
    exit: Arc<Mutex<Option<oneshot::Sender<ExitStatus>>>>,
    pub signals: Arc<Mutex<Vec<i32>>>,
}

impl FakeProcess {
    /// Ends the command with `status` (output written so far comes first).
    pub fn exit(&self, status: ExitStatus) {
        if let Some(tx) = self.exit.lock().expect("exit").take() {
            let _ = tx.send(status);
        }
    }
}

pub struct FakeEngine {
    info: EngineInfo,
    pub script: Mutex<Script>,
    /// `create` calls, by box name.
    pub creates: Mutex<Vec<String>>,
    pub running: Mutex<HashSet<String>>,
    /// Execs started, for the test to pick up by exec id.
    pub processes: Mutex<HashMap<String, FakeProcess>>,
    pub execs_started: AtomicUsize,
}

/// Pipe capacity between the fake process and the exec layer.
const PIPE: usize = 64 * 1024;

impl Default for FakeEngine {
    fn default() -> FakeEngine {
        FakeEngine {
            info: EngineInfo {
                name: "fake",
                version: "0".into(),
                isolation: Isolation::Namespace,
                capabilities: super::capabilities(&[]),
                notes: Vec::new(),
                network_filtering: false,
                create_warning: None,
                boxes_outlive_daemon: false,
                execs_outlive_daemon: false,
                host: None,
            },
            script: Mutex::default(),
            creates: Mutex::default(),
            running: Mutex::default(),
            processes: Mutex::default(),
            execs_started: AtomicUsize::new(0),
        }
    }
}

impl FakeEngine {
    /// The test's side of exec `id`, once it started.
    pub async fn process(&self, id: &str) -> FakeProcess {
        for _ in 0..500 {
            if let Some(p) = self.processes.lock().expect("processes").remove(id) {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("exec {id} never started");
    }
}

/// Signals go to the test; SIGKILL also ends the command, as a kernel would.
struct Control {
    exit: Arc<Mutex<Option<oneshot::Sender<ExitStatus>>>>,
    signals: Arc<Mutex<Vec<i32>>>,
}

impl ProcessControl for Control {
    fn signal(&self, signal: i32) -> Result<()> {
        self.signals.lock().expect("signals").push(signal);
        if signal == libc::SIGKILL
            && let Some(tx) = self.exit.lock().expect("exit").take()
        {
            let _ = tx.send(ExitStatus {
                signal: Some(signal),
                ..ExitStatus::default()
            });
        }
        Ok(())
    }

    fn resize(&self, _rows: u16, _cols: u16) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl Engine for FakeEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn images(&self) -> &dyn Images {
        self
    }

    async fn create(&self, record: &BoxRecord) -> Result<Created> {
        let script = self.script.lock().expect("script").clone();
        tokio::time::sleep(script.create_delay).await;
        self.creates
            .lock()
            .expect("creates")
            .push(record.name.clone());
        if let Some(e) = script.fail_create {
            return Err(e());
        }
        Ok(Created {
            image_digest: "sha256:fake".into(),
            warnings: Vec::new(),
        })
    }

    async fn start(&self, record: &BoxRecord) -> Result<()> {
        if let Some(e) = self.script.lock().expect("script").fail_start {
            return Err(e());
        }
        self.running
            .lock()
            .expect("running")
            .insert(record.id.clone());
        Ok(())
    }

    async fn stop(&self, record: &BoxRecord, _force: bool) -> Result<()> {
        self.running.lock().expect("running").remove(&record.id);
        Ok(())
    }

    async fn remove(&self, record: &BoxRecord) -> Result<()> {
        self.running.lock().expect("running").remove(&record.id);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<EngineBox>> {
        let running = self.running.lock().expect("running");
        Ok(running
            .iter()
            .map(|id| EngineBox {
                id: id.clone(),
                running: true,
            })
            .collect())
    }

    async fn exec(&self, _record: &BoxRecord, spec: ExecSpec) -> Result<super::exec::Started> {
        let (stdout_w, stdout_r) = tokio::io::duplex(PIPE);
        let (stderr_w, stderr_r) = tokio::io::duplex(PIPE);
        let (stdin_w, stdin_r) = tokio::io::duplex(PIPE);
        let (tx, rx) = oneshot::channel();
        let exit = Arc::new(Mutex::new(Some(tx)));
        let signals = Arc::new(Mutex::new(Vec::new()));
        let process = Process {
            stdin: spec.stdin.then(|| Box::pin(stdin_w) as super::Input),
            stdout: Box::pin(stdout_r),
            stderr: Some(Box::pin(stderr_r)),
            control: Arc::new(Control {
                exit: exit.clone(),
                signals: signals.clone(),
            }),
            exit: Box::pin(async move { rx.await.unwrap_or_default() }),
        };
        let exec = super::exec::LocalExec::start(process, spec.detach);
        let first = super::exec::LocalExec::subscription(exec.log(), Default::default());
        self.execs_started.fetch_add(1, Ordering::SeqCst);
        self.processes.lock().expect("processes").insert(
            spec.id.clone(),
            FakeProcess {
                spec,
                stdout: stdout_w,
                stderr: stderr_w,
                stdin: stdin_r,
                exit,
                signals,
            },
        );
        Ok(super::exec::Started {
            handle: exec,
            first,
        })
    }

    async fn shutdown(&self) {}
}

#[async_trait]
impl Images for FakeEngine {
    async fn pull(
        &self,
        _reference: &str,
        _progress: crate::image::pull::Progress,
    ) -> Result<crate::model::ImageInfo> {
        Err(self.unsupported("images"))
    }
    async fn list(&self) -> Result<Vec<crate::model::ImageInfo>> {
        Ok(Vec::new())
    }
    async fn inspect(&self, _reference: &str) -> Result<crate::model::ImageInfo> {
        Err(self.unsupported("images"))
    }
    async fn remove(
        &self,
        _reference: &str,
        _in_use: &InUse,
        _force: bool,
    ) -> Result<crate::model::RemovedImage> {
        Err(self.unsupported("images"))
    }
    async fn prune(&self, _in_use: &InUse) -> Result<crate::model::Pruned> {
        Ok(crate::model::Pruned::default())
    }
    async fn import(
        &self,
        _path: &std::path::Path,
        _reference: Option<&str>,
    ) -> Result<crate::model::ImageInfo> {
        Err(self.unsupported("images"))
    }
}
