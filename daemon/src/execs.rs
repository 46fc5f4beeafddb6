//! Exec sessions: a running command, its input, and the clients that read
//! its output.
//!
//! Invariants:
//! - every output chunk of an exec is delivered before its exit, and the
//!   exit is delivered exactly once to each attached client;
//! - backpressure: output is read from the process only as fast as the
//!   slowest attached client takes it; with no client attached (a detached
//!   exec) at most [`BACKLOG_BYTES`] are kept, oldest dropped first;
//! - a non-detached exec whose starting client goes away is killed;
//! - stdin is written in order, and a sender waits while the command does
//!   not read.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boxd_proto::bytes::{Bytes, BytesMut};
use boxd_proto::tonic::Status;
use boxd_proto::v1::{self, exec_response::Event};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use crate::engine::{ExecSpec, ExitStatus, ProcessControl};
use crate::error::{Error, Result};
use crate::registry::{Registry, now_ms};
use crate::validate;

/// `TERM` for a TTY exec whose client gave none.
const DEFAULT_TERM: &str = "xterm-256color";

/// Output kept for a detached exec while no client is attached.
pub const BACKLOG_BYTES: usize = 1 << 20;
/// After the process exits, output still arriving (from a background
/// process holding the pipe) is read until the pipe is quiet this long.
const QUIET_AFTER_EXIT: Duration = Duration::from_millis(100);
const CHUNK: usize = 128 * 1024;

/// What the gRPC layer hands a client's response stream.
pub type Subscriber = mpsc::Sender<Result<v1::ExecResponse, Status>>;

enum Stdin {
    Data(Bytes),
    Close,
}

/// One running (or just finished) command.
pub struct Session {
    pub id: String,
    pub box_name: String,
    pub command: String,
    pub args: Vec<String>,
    pub started_at_ms: i64,
    pub tty: bool,
    pub detach: bool,
    control: Arc<dyn ProcessControl>,
    stdin: Option<mpsc::Sender<Stdin>>,
    stdin_closed: AtomicBool,
    timed_out: AtomicBool,
    out: tokio::sync::Mutex<Fanout>,
    /// How many clients are attached, readable without waiting for `out`
    /// (which a slow client can hold for as long as it is slow).
    attached: std::sync::atomic::AtomicUsize,
    done: watch::Sender<bool>,
}

#[derive(Default)]
struct Fanout {
    subscribers: Vec<Subscriber>,
    backlog: VecDeque<v1::ExecResponse>,
    backlog_bytes: usize,
    exit: Option<v1::ExecExit>,
    /// Whether any client received the exit.
    exit_delivered: bool,
}

impl Fanout {
    fn keep(&mut self, msg: v1::ExecResponse) {
        self.backlog_bytes += payload_len(&msg);
        self.backlog.push_back(msg);
        while self.backlog_bytes > BACKLOG_BYTES {
            match self.backlog.pop_front() {
                Some(old) => self.backlog_bytes -= payload_len(&old),
                None => break,
            }
        }
    }

    /// Sends to every subscriber, waiting for each; drops those gone.
    /// Returns whether anyone received it.
    async fn send(&mut self, msg: &v1::ExecResponse) -> bool {
        let mut i = 0;
        while i < self.subscribers.len() {
            if self.subscribers[i].send(Ok(msg.clone())).await.is_ok() {
                i += 1;
            } else {
                self.subscribers.swap_remove(i);
            }
        }
        !self.subscribers.is_empty()
    }
}

fn payload_len(msg: &v1::ExecResponse) -> usize {
    match &msg.event {
        Some(Event::Stdout(b) | Event::Stderr(b)) => b.len(),
        _ => 0,
    }
}

impl Session {
    pub fn exited(&self) -> bool {
        *self.done.borrow()
    }

    pub fn attached(&self) -> usize {
        self.attached.load(Ordering::SeqCst)
    }

    fn count_attached(&self, out: &Fanout) {
        self.attached.store(out.subscribers.len(), Ordering::SeqCst);
    }

    /// Queues bytes for the command's stdin, waiting while it does not read.
    pub async fn write_stdin(&self, data: Bytes) -> Result<()> {
        let tx = self.stdin_sender()?;
        tx.send(Stdin::Data(data)).await.map_err(|_| stdin_gone())
    }

    pub async fn close_stdin(&self) -> Result<()> {
        let tx = self.stdin_sender()?;
        self.stdin_closed.store(true, Ordering::SeqCst);
        // The writer may be gone already (the command exited); that is EOF too.
        let _ = tx.send(Stdin::Close).await;
        Ok(())
    }

    fn stdin_sender(&self) -> Result<&mpsc::Sender<Stdin>> {
        let tx = self.stdin.as_ref().ok_or_else(|| {
            Error::FailedPrecondition(format!("exec {} was started without stdin", self.id))
        })?;
        if self.stdin_closed.load(Ordering::SeqCst) {
            return Err(Error::FailedPrecondition(format!(
                "stdin of exec {} is closed",
                self.id
            )));
        }
        Ok(tx)
    }

    pub fn signal(&self, signal: i32) -> Result<()> {
        if self.exited() {
            return Err(Error::FailedPrecondition(format!(
                "exec {} has exited",
                self.id
            )));
        }
        self.control.signal(signal)
    }

    pub fn resize(&self, rows: u32, cols: u32) -> Result<()> {
        if !self.tty {
            return Err(Error::FailedPrecondition(format!(
                "exec {} has no TTY",
                self.id
            )));
        }
        let (rows, cols) = tty_size(rows, cols)?;
        self.control.resize(rows, cols)
    }

    /// Resolves when the exec has exited and its exit was handed out.
    pub async fn wait_done(&self) {
        let mut rx = self.done.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    async fn deliver(&self, msg: v1::ExecResponse) {
        let mut out = self.out.lock().await;
        if !out.send(&msg).await {
            out.keep(msg);
        }
        self.count_attached(&out);
    }

    async fn finish(&self, status: ExitStatus) -> bool {
        let exit = v1::ExecExit {
            code: status.code,
            signal: status.signal,
            error: status.error.unwrap_or_default(),
            timed_out: self.timed_out.load(Ordering::SeqCst),
        };
        let mut out = self.out.lock().await;
        let msg = v1::ExecResponse {
            event: Some(Event::Exit(exit.clone())),
        };
        out.exit_delivered = out.send(&msg).await;
        out.exit = Some(exit);
        // Dropping the senders ends every client's stream after the exit.
        out.subscribers.clear();
        self.count_attached(&out);
        self.done.send_replace(true);
        out.exit_delivered
    }

    /// Adds a client: replays what a detached exec kept, then streams.
    /// Returns false when the exec had already exited (the client got the
    /// backlog and the exit, and the session can go).
    async fn attach(&self, sub: Subscriber) -> bool {
        let mut out = self.out.lock().await;
        while let Some(msg) = out.backlog.pop_front() {
            out.backlog_bytes -= payload_len(&msg);
            if sub.send(Ok(msg)).await.is_err() {
                return true;
            }
        }
        if let Some(exit) = out.exit.clone() {
            let _ = sub
                .send(Ok(v1::ExecResponse {
                    event: Some(Event::Exit(exit)),
                }))
                .await;
            out.exit_delivered = true;
            return false;
        }
        out.subscribers.push(sub);
        self.count_attached(&out);
        true
    }
}

fn stdin_gone() -> Error {
    Error::FailedPrecondition("the command no longer reads stdin".into())
}

pub fn tty_size(rows: u32, cols: u32) -> Result<(u16, u16)> {
    match (u16::try_from(rows), u16::try_from(cols)) {
        (Ok(r), Ok(c)) if r > 0 && c > 0 => Ok((r, c)),
        _ => Err(Error::InvalidArgument(format!(
            "invalid TTY size {rows}x{cols}"
        ))),
    }
}

/// All exec sessions of the daemon.
pub struct Execs {
    registry: Arc<Registry>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl Execs {
    pub fn new(registry: Arc<Registry>) -> Arc<Execs> {
        Arc::new(Execs {
            registry,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    pub fn get(&self, id: &str) -> Result<Arc<Session>> {
        self.sessions
            .lock()
            .expect("exec table")
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no exec with id {id:?}")))
    }

    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut v: Vec<_> = self
            .sessions
            .lock()
            .expect("exec table")
            .values()
            .cloned()
            .collect();
        v.sort_by_key(|s| s.started_at_ms);
        v
    }

    pub fn running_in(&self, box_name: &str) -> u32 {
        self.sessions
            .lock()
            .expect("exec table")
            .values()
            .filter(|s| s.box_name == box_name && !s.exited())
            .count() as u32
    }

    fn forget(&self, id: &str) {
        self.sessions.lock().expect("exec table").remove(id);
    }

    /// Starts a command; `sub` receives `started`, the output and the exit.
    pub async fn start(
        self: &Arc<Self>,
        req: v1::ExecStart,
        sub: Subscriber,
    ) -> Result<Arc<Session>> {
        let begin = Instant::now();
        validate::exec_start(&req)?;
        let record = self.registry.running(&req.box_name).await?;
        let mut env: Vec<(String, String)> = record.spec.env.clone().into_iter().collect();
        for (k, v) in &req.env {
            env.retain(|(key, _)| key != k);
            env.push((k.clone(), v.clone()));
        }
        let working_dir = match req.working_dir.as_str() {
            "" => record.spec.working_dir.clone().unwrap_or_default(),
            dir => validate::guest_path("working directory", dir)?,
        };
        if req.tty && !env.iter().any(|(k, _)| k == "TERM") {
            // Full-screen programs (vim, less, htop) need one.
            env.push(("TERM".into(), DEFAULT_TERM.into()));
        }
        let tty = if req.tty {
            let size = req.tty_size.unwrap_or(v1::TtySize { rows: 24, cols: 80 });
            Some(tty_size(size.rows, size.cols)?)
        } else {
            None
        };
        let spec = ExecSpec {
            command: req.command.clone(),
            args: req.args.clone(),
            env,
            working_dir,
            stdin: req.stdin,
            tty,
        };
        let process = self.registry.engine().exec(&record, spec).await?;
        let launch_ms = begin.elapsed().as_millis() as u64;

        let id = new_exec_id();
        let stdin = process.stdin.map(|mut w| {
            let (tx, mut rx) = mpsc::channel::<Stdin>(8);
            tokio::spawn(async move {
                while let Some(msg) = rx.recv().await {
                    match msg {
                        Stdin::Data(d) => {
                            if w.write_all(&d).await.is_err() || w.flush().await.is_err() {
                                break;
                            }
                        }
                        Stdin::Close => break,
                    }
                }
                let _ = w.shutdown().await;
            });
            tx
        });
        let session = Arc::new(Session {
            id: id.clone(),
            box_name: req.box_name.clone(),
            command: req.command,
            args: req.args,
            started_at_ms: now_ms(),
            tty: tty.is_some(),
            detach: req.detach,
            control: process.control,
            stdin,
            stdin_closed: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            out: tokio::sync::Mutex::new(Fanout::default()),
            attached: std::sync::atomic::AtomicUsize::new(0),
            done: watch::channel(false).0,
        });
        let started = v1::ExecResponse {
            event: Some(Event::Started(v1::ExecStarted {
                exec_id: id.clone(),
                launch_ms,
                ..Default::default()
            })),
        };
        // The exec is addressable before its client learns the id, and the
        // client learns the id before any output.
        self.sessions
            .lock()
            .expect("exec table")
            .insert(id.clone(), session.clone());
        let _ = sub.send(Ok(started)).await;
        {
            let mut out = session.out.lock().await;
            out.subscribers.push(sub.clone());
            session.count_attached(&out);
        }
        tracing::debug!(exec_id = %id, box_name = %session.box_name, launch_ms, "exec started");

        self.spawn_pump(
            session.clone(),
            process.stdout,
            process.stderr,
            process.exit,
        );
        if req.timeout_ms > 0 {
            let s = session.clone();
            let limit = Duration::from_millis(req.timeout_ms);
            tokio::spawn(async move {
                if tokio::time::timeout(limit, s.wait_done()).await.is_err() {
                    s.timed_out.store(true, Ordering::SeqCst);
                    let _ = s.control.signal(libc::SIGKILL);
                }
            });
        }
        self.reap_when_gone(session.clone(), sub, true);
        Ok(session)
    }

    /// Attaches another client to a running exec.
    pub async fn attach(self: &Arc<Self>, id: &str, sub: Subscriber) -> Result<Arc<Session>> {
        let session = self.get(id)?;
        let started = v1::ExecResponse {
            event: Some(Event::Started(v1::ExecStarted {
                exec_id: id.to_owned(),
                launch_ms: 0,
                ..Default::default()
            })),
        };
        let _ = sub.send(Ok(started)).await;
        if !session.attach(sub.clone()).await {
            self.forget(id);
        } else {
            self.reap_when_gone(session.clone(), sub, false);
        }
        Ok(session)
    }

    /// Kills a non-detached exec when its starting client goes away.
    fn reap_when_gone(self: &Arc<Self>, session: Arc<Session>, sub: Subscriber, owner: bool) {
        tokio::spawn(async move {
            tokio::select! {
                _ = sub.closed() => {
                    if owner && !session.detach && !session.exited() {
                        tracing::info!(exec_id = %session.id, "client went away; killing its exec");
                        let _ = session.control.signal(libc::SIGKILL);
                    }
                }
                _ = session.wait_done() => {}
            }
        });
    }

    fn spawn_pump(
        self: &Arc<Self>,
        session: Arc<Session>,
        stdout: std::pin::Pin<Box<dyn AsyncRead + Send>>,
        stderr: Option<std::pin::Pin<Box<dyn AsyncRead + Send>>>,
        exit: futures::future::BoxFuture<'static, ExitStatus>,
    ) {
        let execs = self.clone();
        tokio::spawn(async move {
            let (exited_tx, exited_rx) = watch::channel(false);
            let (tx, mut rx) = mpsc::channel::<v1::ExecResponse>(4);
            tokio::spawn(read_stream(
                stdout,
                Event::Stdout,
                tx.clone(),
                exited_rx.clone(),
            ));
            if let Some(stderr) = stderr {
                tokio::spawn(read_stream(stderr, Event::Stderr, tx.clone(), exited_rx));
            }
            drop(tx);
            let waiter = tokio::spawn(async move {
                let status = exit.await;
                exited_tx.send_replace(true);
                status
            });
            while let Some(msg) = rx.recv().await {
                session.deliver(msg).await;
            }
            let status = waiter.await.unwrap_or_else(|e| ExitStatus {
                error: Some(format!("exec waiter failed: {e}")),
                ..ExitStatus::default()
            });
            tracing::debug!(exec_id = %session.id, ?status, "exec exited");
            let delivered = session.finish(status).await;
            if delivered || !session.detach {
                execs.forget(&session.id);
            }
        });
    }

    /// Kills every exec (daemon shutdown).
    pub fn kill_all(&self) {
        for s in self.list() {
            if !s.exited() {
                let _ = s.control.signal(libc::SIGKILL);
            }
        }
    }
}

/// Reads one output stream into the session's ordered channel.
async fn read_stream(
    mut r: std::pin::Pin<Box<dyn AsyncRead + Send>>,
    wrap: fn(Bytes) -> Event,
    tx: mpsc::Sender<v1::ExecResponse>,
    mut exited: watch::Receiver<bool>,
) {
    let mut buf = BytesMut::new();
    loop {
        // Chunks are handed on without copying: each read fills fresh space.
        buf.reserve(CHUNK);
        let read = if *exited.borrow() {
            match tokio::time::timeout(QUIET_AFTER_EXIT, r.read_buf(&mut buf)).await {
                Ok(res) => res,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                res = r.read_buf(&mut buf) => res,
                _ = exited.changed() => continue,
            }
        };
        match read {
            Ok(0) | Err(_) => break, // EOF, or EIO from a pty whose slave closed
            Ok(_) => {
                let msg = v1::ExecResponse {
                    event: Some(wrap(buf.split().freeze())),
                };
                if tx.send(msg).await.is_err() {
                    break;
                }
            }
        }
    }
}

fn new_exec_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    format!("x{:016x}", rng.random::<u64>())
}
