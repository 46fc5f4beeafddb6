//! Exec sessions: a running command, its input, and the clients that read
//! its output.
//!
//! A session holds an engine's [`ExecHandle`]; its output is a log
//! (`exec_log.rs`) that each client reads through a subscription of its
//! own, from offsets of its own. The log lives where the process's pipes
//! are read: in the box's supervisor for the namespace engine (so that
//! execs outlive the daemon), in the daemon for BoxLite.
//!
//! Invariants:
//! - every output chunk of an exec is delivered before its exit, and the
//!   exit is delivered exactly once to each attached client;
//! - backpressure: output is read from the process only as fast as the
//!   slowest attached client acknowledges it (a resumable client
//!   acknowledges what it took; for the others the daemon acknowledges
//!   what it handed to their connection); with no client attached a
//!   detached exec keeps its last 1 MiB, a non-detached one waits for its
//!   client to come back;
//! - a non-detached exec whose owner goes away is killed (not when the
//!   daemon itself is going: its clients come back to the next one); its
//!   owner is its starting client, or the resumable client that reattached
//!   to it after a daemon restart; one found again at start is killed when
//!   no owner reattaches within [`REATTACH_WITHIN`];
//! - stdin is written in order, each byte once, however often a
//!   reattaching client resends it: bytes carry their offset in the stdin
//!   stream; at most [`STDIN_QUEUE`] bytes are queued per exec.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boxd_proto::bytes::Bytes;
use boxd_proto::tonic::Status;
use boxd_proto::v1::{self, exec_response::Event};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::engine::exec::{Acks, ExecHandle, Subscription};
use crate::engine::{Adopted, ExecSpec, ExitStatus};
use crate::error::{Error, Result};
use crate::exec_log::{self, Offsets, Stream};
use crate::model::{ExecRequest, now_ms};
use crate::registry::Registry;
use crate::validate;

/// `TERM` for a TTY exec whose client gave none.
const DEFAULT_TERM: &str = "xterm-256color";
/// How long an exec found again at start waits for its client.
pub const REATTACH_WITHIN: Duration = Duration::from_secs(30);
/// Stdin bytes queued per exec before a sender waits (a resumable client
/// keeps at most 1 MiB in flight, so it never does).
pub const STDIN_QUEUE: usize = 2 << 20;

/// What the gRPC layer hands a client's response stream.
pub type Subscriber = mpsc::Sender<std::result::Result<v1::ExecResponse, Status>>;

struct StdinChunk {
    at: u64,
    data: Bytes,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

enum StdinMsg {
    Data(StdinChunk),
    Close,
}

/// One running (or finished, and kept) command.
pub struct Session {
    pub id: String,
    pub box_name: String,
    pub command: String,
    pub args: Vec<String>,
    pub started_at_ms: i64,
    pub tty: bool,
    pub detach: bool,
    handle: Arc<dyn ExecHandle>,
    stdin: Option<Stdin>,
    timed_out: AtomicBool,
    /// How many clients are attached.
    attached: AtomicUsize,
    /// How many of them own it (a non-detached exec dies with its last
    /// owner): its starting client, or a client that reattached while it
    /// had none (after a daemon restart).
    owners: AtomicUsize,
    /// Set once the exit is known.
    exit: watch::Sender<Option<ExitStatus>>,
}

/// The session's side of the command's stdin: a byte-bounded queue that
/// one task writes through the engine, in order.
struct Stdin {
    tx: mpsc::UnboundedSender<StdinMsg>,
    room: Arc<Semaphore>,
    /// The offset the next queued byte gets.
    next: tokio::sync::Mutex<u64>,
    closed: AtomicBool,
    /// Bytes the command has been given (as the engine last said).
    taken: watch::Sender<u64>,
}

impl Session {
    fn new(
        meta: Meta,
        handle: Arc<dyn ExecHandle>,
        stdin: bool,
        stdin_at: u64,
        exit: Option<ExitStatus>,
    ) -> Arc<Session> {
        let stdin = stdin.then(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let taken = watch::channel(stdin_at).0;
            tokio::spawn(write_stdin(handle.clone(), rx, taken.clone()));
            Stdin {
                tx,
                room: Arc::new(Semaphore::new(STDIN_QUEUE)),
                next: tokio::sync::Mutex::new(stdin_at),
                closed: AtomicBool::new(false),
                taken,
            }
        });
        let session = Arc::new(Session {
            id: meta.id,
            box_name: meta.box_name,
            command: meta.command,
            args: meta.args,
            started_at_ms: meta.started_at_ms,
            tty: meta.tty,
            detach: meta.detach,
            handle,
            stdin,
            timed_out: AtomicBool::new(false),
            attached: AtomicUsize::new(0),
            owners: AtomicUsize::new(0),
            exit: watch::channel(exit).0,
        });
        let s = session.clone();
        tokio::spawn(async move {
            if s.exit.borrow().is_none() {
                let status = s.handle.wait().await;
                s.exit.send_replace(Some(status));
            }
        });
        session
    }

    pub fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// How it ended, once it has, as the API says it.
    pub fn exit(&self) -> Option<v1::ExecExit> {
        self.exit.borrow().clone().map(|s| self.exit_proto(s))
    }

    fn exit_proto(&self, status: ExitStatus) -> v1::ExecExit {
        v1::ExecExit {
            code: status.code,
            signal: status.signal,
            error: status.error.unwrap_or_default(),
            timed_out: self.timed_out.load(Ordering::SeqCst),
        }
    }

    pub fn attached(&self) -> usize {
        self.attached.load(Ordering::SeqCst)
    }

    /// Queues bytes for the command's stdin; waits while [`STDIN_QUEUE`]
    /// bytes are queued.
    pub async fn write_stdin(&self, data: Bytes) -> Result<()> {
        let stdin = self.stdin_open()?;
        if data.is_empty() {
            return Ok(());
        }
        let want = data.len().min(STDIN_QUEUE) as u32;
        let permit = stdin
            .room
            .clone()
            .acquire_many_owned(want)
            .await
            .map_err(|_| stdin_gone())?;
        let mut next = stdin.next.lock().await;
        let at = *next;
        *next += data.len() as u64;
        stdin
            .tx
            .send(StdinMsg::Data(StdinChunk {
                at,
                data,
                _permit: permit,
            }))
            .map_err(|_| stdin_gone())
    }

    pub async fn close_stdin(&self) -> Result<()> {
        let stdin = self.stdin_open()?;
        stdin.closed.store(true, Ordering::SeqCst);
        // The writer may be gone already (the command exited); that is EOF too.
        let _ = stdin.tx.send(StdinMsg::Close);
        Ok(())
    }

    /// The exec's stdin while it takes more: an exec that has exited
    /// refuses input as it refuses a signal, so a client learns the bytes
    /// went nowhere.
    fn stdin_open(&self) -> Result<&Stdin> {
        self.running()?;
        let stdin = self.stdin.as_ref().ok_or_else(|| {
            Error::FailedPrecondition(format!("exec {} was started without stdin", self.id))
        })?;
        if stdin.closed.load(Ordering::SeqCst) {
            return Err(Error::FailedPrecondition(format!(
                "stdin of exec {} is closed",
                self.id
            )));
        }
        Ok(stdin)
    }

    pub async fn signal(&self, signal: i32) -> Result<()> {
        self.running()?;
        self.handle.signal(signal).await
    }

    fn running(&self) -> Result<()> {
        if self.exited() {
            return Err(Error::FailedPrecondition(format!(
                "exec {} has exited",
                self.id
            )));
        }
        Ok(())
    }

    pub async fn resize(&self, rows: u32, cols: u32) -> Result<()> {
        self.running()?;
        if !self.tty {
            return Err(Error::FailedPrecondition(format!(
                "exec {} has no TTY",
                self.id
            )));
        }
        let (rows, cols) = validate::tty_size(rows, cols)?;
        self.handle.resize(rows, cols).await
    }

    /// Resolves when the exec has exited.
    pub async fn wait_done(&self) {
        let mut rx = self.exit.subscribe();
        let _ = rx.wait_for(|d| d.is_some()).await;
    }
}

/// Writes queued stdin through the engine, in order, and publishes how
/// much the command took.
async fn write_stdin(
    handle: Arc<dyn ExecHandle>,
    mut rx: mpsc::UnboundedReceiver<StdinMsg>,
    taken: watch::Sender<u64>,
) {
    while let Some(msg) = rx.recv().await {
        match msg {
            StdinMsg::Data(chunk) => match handle.write_stdin(chunk.at, chunk.data).await {
                Ok(now) => {
                    taken.send_replace(now);
                }
                Err(_) => break,
            },
            StdinMsg::Close => {
                let _ = handle.close_stdin().await;
                break;
            }
        }
    }
}

fn stdin_gone() -> Error {
    Error::FailedPrecondition("the command no longer reads stdin".into())
}

struct Meta {
    id: String,
    box_name: String,
    command: String,
    args: Vec<String>,
    started_at_ms: i64,
    tty: bool,
    detach: bool,
}

/// A client's subscription, as its input loop sees it: where its
/// acknowledgements go.
pub struct Attached {
    pub session: Arc<Session>,
    pub acks: Arc<dyn Acks>,
    pub resumable: bool,
}

/// All exec sessions of the daemon.
pub struct Execs {
    registry: Arc<Registry>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The daemon is stopping: clients that go now come back to the next
    /// one, so their execs are not killed.
    stopping: AtomicBool,
}

impl Execs {
    pub fn new(registry: Arc<Registry>) -> Arc<Execs> {
        Arc::new(Execs {
            registry,
            sessions: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
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

    fn insert(self: &Arc<Self>, session: Arc<Session>) {
        self.sessions
            .lock()
            .expect("exec table")
            .insert(session.id.clone(), session.clone());
        // Once it exits, the oldest exited beyond `exec_log::KEEP_EXITED` go.
        let execs = Arc::downgrade(self);
        tokio::spawn(async move {
            session.wait_done().await;
            if let Some(execs) = execs.upgrade() {
                execs.prune();
            }
        });
    }

    fn prune(&self) {
        let mut table = self.sessions.lock().expect("exec table");
        exec_log::prune_exited(&mut table, |s| s.exited().then_some(s.started_at_ms));
    }

    /// Starts a command; `sub` receives `started`, the output and the exit.
    pub async fn start(self: &Arc<Self>, req: ExecRequest, sub: Subscriber) -> Result<Attached> {
        let begin = Instant::now();
        let record = self.registry.running(&req.box_name).await?;
        let mut env: Vec<(String, String)> = record.spec.env.clone().into_iter().collect();
        for (k, v) in &req.env {
            env.retain(|(key, _)| key != k);
            env.push((k.clone(), v.clone()));
        }
        let working_dir = req
            .working_dir
            .or_else(|| record.spec.working_dir.clone())
            .unwrap_or_default();
        if req.tty.is_some() && !env.iter().any(|(k, _)| k == "TERM") {
            // Full-screen programs (vim, less, htop) need one.
            env.push(("TERM".into(), DEFAULT_TERM.into()));
        }
        let tty = req.tty;
        let id = new_exec_id();
        let spec = ExecSpec {
            id: id.clone(),
            detach: req.detach,
            command: req.command.clone(),
            args: req.args.clone(),
            env,
            working_dir,
            stdin: req.stdin,
            tty,
            user: req.user.clone(),
            builtin: None,
        };
        let started = self.registry.engine().exec(&record, spec).await?;
        let launch_ms = begin.elapsed().as_millis() as u64;
        let meta = Meta {
            id: id.clone(),
            box_name: req.box_name.to_string(),
            command: req.command,
            args: req.args,
            started_at_ms: now_ms(),
            tty: tty.is_some(),
            detach: req.detach,
        };
        let session = Session::new(meta, started.handle, req.stdin, 0, None);
        // The exec is addressable before its client learns the id, and the
        // client learns the id before any output.
        self.insert(session.clone());
        tracing::debug!(exec_id = %id, box_name = %session.box_name, launch_ms, "exec started");
        if let Some(limit) = req.timeout {
            let s = session.clone();
            tokio::spawn(async move {
                if tokio::time::timeout(limit, s.wait_done()).await.is_err() {
                    s.timed_out.store(true, Ordering::SeqCst);
                    let _ = s.handle.signal(libc::SIGKILL).await;
                }
            });
        }
        let owner = !req.detach;
        if owner {
            session.owners.store(1, Ordering::SeqCst);
        }
        Ok(self.serve(session, started.first, sub, req.resumable, launch_ms, owner))
    }

    /// Attaches another client to an exec, from `from` in its output.
    pub async fn attach(
        self: &Arc<Self>,
        req: v1::ExecAttach,
        sub: Subscriber,
    ) -> Result<Attached> {
        let session = self.get(&req.exec_id)?;
        let from = Offsets {
            stdout: req.stdout_offset,
            stderr: req.stderr_offset,
        };
        let subscription = session.handle.subscribe(from).await?;
        if let Some(stdin) = &session.stdin {
            // A reattaching client resends from here; bytes still queued
            // for the old one are written once (they carry offsets).
            *stdin.next.lock().await = subscription.stdin_offset;
        }
        // A resumable client that comes back to an exec with no owner (its
        // starting client lost the daemon) owns it from now on.
        let owner = !session.detach
            && req.resumable
            && session
                .owners
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
        Ok(self.serve(session, subscription, sub, req.resumable, 0, owner))
    }

    /// Takes in the execs a box kept while the daemon was away.
    pub fn adopt(self: &Arc<Self>, box_name: &str, execs: Vec<Adopted>) {
        for a in execs {
            let meta = Meta {
                id: a.id,
                box_name: box_name.to_owned(),
                command: a.command,
                args: a.args,
                started_at_ms: a.started_at_ms,
                tty: a.tty,
                detach: a.detach,
            };
            let running = a.exit.is_none();
            // Stdin is offered as long as it runs; the engine refuses it
            // when the command was started without.
            let session = Session::new(meta, a.handle, running, 0, a.exit);
            tracing::info!(exec_id = %session.id, box_name, running, "exec found again");
            self.insert(session.clone());
            if running && !session.detach {
                tokio::spawn(async move {
                    tokio::time::sleep(REATTACH_WITHIN).await;
                    if session.owners.load(Ordering::SeqCst) == 0 && !session.exited() {
                        tracing::info!(exec_id = %session.id, "no client came back for it; killing it");
                        let _ = session.handle.signal(libc::SIGKILL).await;
                    }
                });
            }
        }
    }

    /// Sends `started`, then forwards the subscription to the client.
    fn serve(
        self: &Arc<Self>,
        session: Arc<Session>,
        subscription: Subscription,
        sub: Subscriber,
        resumable: bool,
        launch_ms: u64,
        owner: bool,
    ) -> Attached {
        let acks: Arc<dyn Acks> = Arc::from(subscription.acks);
        let started = v1::ExecResponse {
            event: Some(Event::Started(v1::ExecStarted {
                exec_id: session.id.clone(),
                launch_ms,
                stdout_offset: subscription.start.stdout,
                stderr_offset: subscription.start.stderr,
                stdin_offset: subscription.stdin_offset,
            })),
        };
        session.attached.fetch_add(1, Ordering::SeqCst);
        let execs = self.clone();
        let attached = Attached {
            session: session.clone(),
            acks: acks.clone(),
            resumable,
        };
        let mut events = subscription.events;
        let start = subscription.start;
        tokio::spawn(async move {
            let delivered = forward(
                &session,
                &mut events,
                &sub,
                started,
                start,
                resumable,
                &*acks,
            )
            .await;
            session.attached.fetch_sub(1, Ordering::SeqCst);
            // (Owners are counted by whoever made this one an owner.)
            let last_owner = owner && session.owners.fetch_sub(1, Ordering::SeqCst) == 1;
            if !delivered
                && last_owner
                && !session.exited()
                && !execs.stopping.load(Ordering::SeqCst)
            {
                tracing::info!(exec_id = %session.id, "client went away; killing its exec");
                let _ = session.handle.signal(libc::SIGKILL).await;
            }
        });
        attached
    }

    /// The daemon is stopping: execs whose engine keeps them running stay,
    /// for their clients to find at the next start; the others are killed.
    pub async fn stop(&self, execs_outlive_daemon: bool) {
        self.stopping.store(true, Ordering::SeqCst);
        if execs_outlive_daemon {
            return;
        }
        for s in self.list() {
            if !s.exited() {
                let _ = s.handle.signal(libc::SIGKILL).await;
            }
        }
    }
}

/// Forwards one subscription to its client: `started`, output, stdin
/// progress (to a resumable client), the exit. Returns whether the exit
/// was delivered.
async fn forward(
    session: &Session,
    events: &mut mpsc::Receiver<exec_log::Event>,
    sub: &Subscriber,
    started: v1::ExecResponse,
    start: Offsets,
    resumable: bool,
    acks: &dyn Acks,
) -> bool {
    if sub.send(Ok(started)).await.is_err() {
        return false;
    }
    let mut taken = session.stdin.as_ref().map(|s| s.taken.subscribe());
    let mut at = start;
    loop {
        let progress = async {
            match taken.as_mut() {
                Some(t) if resumable => t.changed().await.map(|()| *t.borrow_and_update()),
                _ => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            biased;
            e = events.recv() => e,
            Ok(n) = progress => {
                let msg = v1::ExecResponse { event: Some(Event::StdinOffset(n)) };
                if sub.send(Ok(msg)).await.is_err() {
                    return false;
                }
                continue;
            }
            _ = sub.closed() => return false,
        };
        let msg = match event {
            Some(exec_log::Event::Output(stream, data)) => {
                let n = data.len() as u64;
                match stream {
                    Stream::Stdout => {
                        at.stdout += n;
                        Event::Stdout(data)
                    }
                    Stream::Stderr => {
                        at.stderr += n;
                        Event::Stderr(data)
                    }
                }
            }
            Some(exec_log::Event::Exit(status)) => Event::Exit(session.exit_proto(status)),
            None => {
                // The engine's side went away without an exit (the box's
                // supervisor died, or the daemon is stopping).
                return false;
            }
        };
        let exit = matches!(msg, Event::Exit(_));
        if sub
            .send(Ok(v1::ExecResponse { event: Some(msg) }))
            .await
            .is_err()
        {
            return false;
        }
        if exit {
            return true;
        }
        if !resumable {
            acks.ack(at);
        }
    }
}

fn new_exec_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    format!("x{:016x}", rng.random::<u64>())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn name(s: &str) -> crate::model::BoxName {
        crate::validate::box_name(s).unwrap()
    }
    use crate::engine::fake::FakeEngine;
    use crate::model::BoxSpec;

    /// A registry with one running box, `b`, on the fake engine.
    async fn running_box() -> (tempfile::TempDir, Arc<FakeEngine>, Arc<Execs>) {
        let engine = Arc::new(FakeEngine::default());
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path().join("boxes"), engine.clone(), 0)
            .await
            .unwrap();
        let spec = BoxSpec {
            image: "/images/fake".into(),
            ..BoxSpec::default()
        };
        registry.create(&name("b"), spec).await.unwrap();
        registry.start(&name("b")).await.unwrap();
        (dir, engine, Execs::new(Arc::new(registry)))
    }

    fn request(detach: bool) -> ExecRequest {
        ExecRequest {
            box_name: name("b"),
            command: "cmd".into(),
            args: Vec::new(),
            env: Default::default(),
            working_dir: None,
            timeout: None,
            stdin: true,
            tty: None,
            detach,
            resumable: false,
            user: None,
        }
    }

    type Events = mpsc::Receiver<std::result::Result<v1::ExecResponse, Status>>;

    async fn start(execs: &Arc<Execs>, detach: bool) -> (String, Events) {
        let (tx, rx) = mpsc::channel(4);
        let attached = execs.start(request(detach), tx).await.unwrap();
        (attached.session.id.clone(), rx)
    }

    /// Reads a client's stream to its end: stdout bytes, exits seen, and
    /// whether anything came after the exit.
    async fn drain(rx: &mut Events) -> (Vec<u8>, Vec<v1::ExecExit>) {
        let (mut out, mut exits) = (Vec::new(), Vec::new());
        while let Some(msg) = rx.recv().await {
            match msg.unwrap().event.unwrap() {
                Event::Stdout(b) => {
                    assert!(exits.is_empty(), "output after the exit");
                    out.extend_from_slice(&b);
                }
                Event::Exit(e) => exits.push(e),
                _ => {}
            }
        }
        (out, exits)
    }

    #[tokio::test]
    async fn the_exit_comes_once_after_all_output() {
        let (_dir, engine, execs) = running_box().await;
        let (id, mut rx) = start(&execs, false).await;
        let first = rx.recv().await.unwrap().unwrap();
        assert!(matches!(first.event, Some(Event::Started(_))));
        let mut p = engine.process(&id).await;
        let data: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let writer = tokio::spawn(async move {
            p.stdout.write_all(&data).await.unwrap();
            // The exit is sent while output may still be in the pipe.
            p.exit(ExitStatus {
                code: Some(3),
                ..ExitStatus::default()
            });
            p.stdout.shutdown().await.unwrap();
            (p, data)
        });
        let (out, exits) = drain(&mut rx).await;
        let (_p, data) = writer.await.unwrap();
        assert_eq!(out, data, "every byte, in order");
        assert_eq!(exits.len(), 1, "{exits:?}");
        assert_eq!(exits[0].code, Some(3));
        assert!(execs.get(&id).unwrap().exited());
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_holds_the_command_back() {
        let (_dir, engine, execs) = running_box().await;
        let (id, mut rx) = start(&execs, false).await;
        let mut p = engine.process(&id).await;
        const TOTAL: u64 = 8 << 20;
        let written = Arc::new(AtomicU64::new(0));
        let counter = written.clone();
        let writer = tokio::spawn(async move {
            let chunk = vec![7u8; 64 << 10];
            while counter.load(Ordering::SeqCst) < TOTAL {
                p.stdout.write_all(&chunk).await.unwrap();
                counter.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
            p.exit(ExitStatus {
                code: Some(0),
                ..ExitStatus::default()
            });
            p.stdout.shutdown().await.unwrap();
            p
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The log's window, the pipe, the chunks in flight: far below 8 MiB.
        let held = written.load(Ordering::SeqCst);
        assert!(
            held <= exec_log::WINDOW + (2 << 20),
            "{held} bytes taken from a command nobody reads"
        );
        let (out, exits) = drain(&mut rx).await;
        writer.await.unwrap();
        assert_eq!(out.len() as u64, TOTAL);
        assert_eq!(exits.len(), 1);
    }

    #[tokio::test]
    async fn an_exec_dies_with_its_client_unless_detached() {
        let (_dir, engine, execs) = running_box().await;
        let (id, rx) = start(&execs, false).await;
        let p = engine.process(&id).await;
        drop(rx);
        execs.get(&id).unwrap().wait_done().await;
        assert_eq!(*p.signals.lock().unwrap(), [libc::SIGKILL]);
        assert_eq!(execs.get(&id).unwrap().exit().unwrap().signal, Some(9));

        let (id, rx) = start(&execs, true).await;
        let mut p = engine.process(&id).await;
        drop(rx);
        // It runs on: its stdin still reaches it, nobody signalled it.
        let session = execs.get(&id).unwrap();
        session
            .write_stdin(Bytes::from_static(b"still here"))
            .await
            .unwrap();
        let mut got = [0u8; 10];
        p.stdin.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"still here");
        assert!(p.signals.lock().unwrap().is_empty());
        assert!(!session.exited());
        assert_eq!(execs.running_in("b"), 1);
    }
}
