//! The daemon's side of a box's supervisor: starting one, finding one
//! again after a restart, and its execs as [`ExecHandle`]s.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{broadcast, mpsc, watch};

use super::wire::{self, ExecInfo, Frame, Push, Reply, Request, RunSpec, Start, Up};
use crate::engine::ExitStatus;
use crate::engine::exec::{Acks, ExecHandle, Started, Subscription};
use crate::error::{Error, Result};
use crate::exec_log::{Event, Offsets};

/// How long a supervisor may take to start its box.
const START_WITHIN: Duration = Duration::from_secs(60);
/// How long a one-shot request may take (a stop waits for the box).
const REQUEST_WITHIN: Duration = Duration::from_secs(30);

/// A running box's supervisor, as the daemon holds it.
pub struct Supervisor {
    socket: PathBuf,
    pub pid1: i32,
    pub init: i32,
    pub cgroup: super::super::cgroup::BoxCgroup,
    /// The ports it publishes (actual host ports).
    pub ports: Vec<crate::model::PortMapping>,
    /// Each exec's exit, as pushed on the watch connection.
    exits: Arc<Mutex<HashMap<String, watch::Sender<Option<ExitStatus>>>>>,
    /// Why the box ended, once it has (or its supervisor went away).
    ended: watch::Receiver<Option<String>>,
    /// Connections its egress proxy refused, `(host, port)`.
    refused: broadcast::Sender<Refusal>,
}

/// How an exec ends whose supervisor went away before it said.
fn lost() -> ExitStatus {
    ExitStatus {
        error: Some("the command was lost: its box's supervisor went away".into()),
        ..Default::default()
    }
}

fn gone() -> Error {
    Error::Engine("the box's supervisor is gone (the box ended)".into())
}

/// A refusal of the box's egress proxy, with the text of its event.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub host: String,
    pub port: u16,
    pub why: String,
}

fn broken(e: std::io::Error) -> Error {
    Error::Engine(format!("talking to the box's supervisor: {e}"))
}

impl Supervisor {
    /// Starts a supervisor for `start`; returns once its box runs, with
    /// what it could not do as asked.
    pub async fn spawn(start: &Start) -> Result<(Arc<Supervisor>, Vec<String>, Vec<ExecInfo>)> {
        use std::os::unix::fs::OpenOptionsExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(start.dir.join("supervisor.log"))
            .map_err(|e| Error::io("open supervisor.log", e))?;
        let mut helper = super::super::helper::Helper::new(super::serve::HELPER_ARG)?;
        // One init for every box of this daemon (sandbox::adopt_init).
        let init = super::super::sandbox::init_memfd()?;
        helper.pass(
            std::os::fd::AsRawFd::as_raw_fd(init),
            super::super::sandbox::SUPERVISOR_INIT_FD,
        );
        helper
            .cmd
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log);
        // The trust boxd was started with is what the egress proxy verifies
        // upstreams with (rustls-native-certs reads these).
        for var in ["SSL_CERT_FILE", "SSL_CERT_DIR"] {
            if let Some(value) = std::env::var_os(var) {
                helper.cmd.env(var, value);
            }
        }
        let (mut child, channel) = helper.spawn("the box's supervisor")?;
        // The child only forks the supervisor and leaves.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        channel
            .set_nonblocking(true)
            .map_err(|e| Error::io("supervisor channel", e))?;
        let mut channel =
            UnixStream::from_std(channel).map_err(|e| Error::io("supervisor channel", e))?;
        let mut line = serde_json::to_vec(start).map_err(|e| Error::Internal(e.to_string()))?;
        line.push(b'\n');
        channel
            .write_all(&line)
            .await
            .map_err(|e| Error::io("supervisor channel", e))?;
        let ready = async {
            use tokio::io::AsyncBufReadExt;
            let mut text = String::new();
            let mut r = tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(channel, 1 << 20));
            r.read_line(&mut text).await.ok()?;
            serde_json::from_str::<wire::Ready>(&text).ok()
        };
        match tokio::time::timeout(START_WITHIN, ready).await {
            Err(_) => Err(Error::Engine(
                "the box's supervisor did not start it within 60 s".into(),
            )),
            Ok(None) => Err(Error::Engine(format!(
                "the box's supervisor ended before the box ran (see {})",
                start.dir.join("supervisor.log").display()
            ))),
            Ok(Some(wire::Ready::Failed { kind, message })) => Err(if kind == "precondition" {
                Error::FailedPrecondition(message)
            } else {
                Error::Engine(message)
            }),
            Ok(Some(wire::Ready::Running { warnings, .. })) => {
                let (sup, execs) = Supervisor::connect(&start.dir).await?;
                Ok((sup, warnings, execs))
            }
        }
    }

    /// Finds the supervisor of the box in `dir` (after a daemon restart),
    /// with the execs it holds.
    pub async fn connect(dir: &Path) -> Result<(Arc<Supervisor>, Vec<ExecInfo>)> {
        let socket = dir.join(wire::SOCKET);
        let stream = UnixStream::connect(&socket)
            .await
            .map_err(|e| Error::Engine(format!("no supervisor at {}: {e}", socket.display())))?;
        let (mut r, mut w) = stream.into_split();
        wire::write(&mut w, &Frame::json(&Request::Hello))
            .await
            .map_err(broken)?;
        let frame = tokio::time::timeout(REQUEST_WITHIN, wire::read(&mut r))
            .await
            .map_err(|_| Error::Engine("the box's supervisor does not answer".into()))?
            .map_err(broken)?
            .ok_or_else(gone)?;
        let Reply::Hello {
            version,
            pid1,
            init,
            cgroup,
            execs,
            ports,
        } = frame.parse::<Reply>().map_err(broken)?
        else {
            return Err(Error::Engine("the box's supervisor said no hello".into()));
        };
        if version != wire::VERSION {
            return Err(Error::Engine(format!(
                "the box's supervisor speaks version {version}, this boxd {}",
                wire::VERSION
            )));
        }
        let exits: HashMap<_, _> = execs
            .iter()
            .map(|e| (e.id.clone(), watch::channel(e.exit.clone()).0))
            .collect();
        let exits = Arc::new(Mutex::new(exits));
        let (ended_tx, ended) = watch::channel(None);
        let refused = broadcast::channel(64).0;
        tokio::spawn(watch_pushes(r, w, exits.clone(), ended_tx, refused.clone()));
        Ok((
            Arc::new(Supervisor {
                socket,
                pid1,
                init,
                cgroup,
                ports,
                exits,
                ended,
                refused,
            }),
            execs,
        ))
    }

    pub fn ended(&self) -> watch::Receiver<Option<String>> {
        self.ended.clone()
    }

    /// The targets the box's egress proxy refuses from now on, as the
    /// supervisor reports them.
    pub fn refusals(&self) -> broadcast::Receiver<Refusal> {
        self.refused.subscribe()
    }

    async fn open(&self, request: &Request) -> Result<(OwnedReadHalf, OwnedWriteHalf)> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|_| gone())?;
        let (r, mut w) = stream.into_split();
        wire::write(&mut w, &Frame::json(request))
            .await
            .map_err(|_| gone())?;
        Ok((r, w))
    }

    async fn reply(r: &mut OwnedReadHalf) -> Result<Reply> {
        match wire::read(r).await.map_err(broken)? {
            None => Err(gone()),
            Some(f) => match f.parse::<Reply>().map_err(broken)? {
                Reply::Error { code, message } => Err(Reply::into_error(&code, message)),
                reply => Ok(reply),
            },
        }
    }

    /// One request, one reply.
    async fn request(&self, request: Request) -> Result<Reply> {
        let exchange = async {
            let (mut r, _w) = self.open(&request).await?;
            Supervisor::reply(&mut r).await
        };
        tokio::time::timeout(REQUEST_WITHIN, exchange)
            .await
            .map_err(|_| Error::Engine("the box's supervisor does not answer".into()))?
    }

    /// Starts a command; its first subscription reads from the start.
    pub async fn run(self: &Arc<Self>, spec: RunSpec) -> Result<Started> {
        let id = spec.spec.id.clone();
        self.exits
            .lock()
            .expect("exits")
            .insert(id.clone(), watch::channel(None).0);
        let (mut r, w) = self.open(&Request::Run(spec)).await?;
        let first = match Supervisor::reply(&mut r).await {
            Ok(Reply::Subscribed {
                start,
                stdin_offset,
            }) => subscription(r, w, start, stdin_offset),
            Ok(other) => return Err(Error::Internal(format!("supervisor said {other:?}"))),
            Err(e) => {
                self.exits.lock().expect("exits").remove(&id);
                return Err(e);
            }
        };
        Ok(Started {
            handle: self.exec(&id),
            first,
        })
    }

    /// The exec `id` (one it runs, or kept).
    pub fn exec(self: &Arc<Self>, id: &str) -> Arc<RemoteExec> {
        Arc::new(RemoteExec {
            sup: self.clone(),
            id: id.to_owned(),
            stdin: tokio::sync::Mutex::new(None),
        })
    }

    /// What the box uses now.
    pub async fn usage(&self) -> Result<super::super::usage::Usage> {
        match self.request(Request::Usage).await? {
            Reply::Usage(u) => Ok(u),
            other => Err(Error::Internal(format!("supervisor said {other:?}"))),
        }
    }

    /// Stops the box (every process in it ends; `force` skips the grace
    /// period) and waits for its supervisor to record it.
    pub async fn stop(&self, force: bool) -> Result<()> {
        let result = self.request(Request::Stop { force }).await;
        // Gone (the box ended, or a stop raced its end): stopped, once the
        // watch hears of it.
        let mut ended = self.ended.clone();
        let _ = tokio::time::timeout(Duration::from_secs(5), ended.wait_for(Option::is_some)).await;
        match result {
            Err(Error::Engine(_)) if self.ended.borrow().is_some() => Ok(()),
            other => other.map(drop),
        }
    }
}

/// Reads the watch connection: exits and the box's end. When it breaks,
/// the supervisor is gone: so is the box, and every exec not yet known to
/// have exited ended with it.
async fn watch_pushes(
    mut r: OwnedReadHalf,
    // Held: closing it would end the watch.
    _w: OwnedWriteHalf,
    exits: Arc<Mutex<HashMap<String, watch::Sender<Option<ExitStatus>>>>>,
    ended: watch::Sender<Option<String>>,
    refused: broadcast::Sender<Refusal>,
) {
    while let Ok(Some(frame)) = wire::read(&mut r).await {
        match frame.parse::<Push>() {
            Ok(Push::Exited { id, status }) => {
                let mut table = exits.lock().expect("exits");
                table
                    .entry(id)
                    .or_insert_with(|| watch::channel(None).0)
                    .send_replace(Some(status));
            }
            Ok(Push::Ended(reason)) => {
                ended.send_replace(Some(reason));
            }
            Ok(Push::Refused { host, port, why }) => {
                let why = why.unwrap_or_else(|| {
                    format!("egress refused: {host}:{port} is not on the box's allow-list (boxctl update --allow-net {host} BOX, then restart it)")
                });
                let _ = refused.send(Refusal { host, port, why });
            }
            _ => {}
        }
    }
    ended.send_if_modified(|r| {
        if r.is_none() {
            *r = Some("its supervisor went away".into());
            true
        } else {
            false
        }
    });
    for tx in exits.lock().expect("exits").values() {
        tx.send_if_modified(|s| {
            if s.is_none() {
                *s = Some(lost());
                true
            } else {
                false
            }
        });
    }
}

/// A subscription over a connection: output and the exit come down,
/// acknowledgements (coalesced) go up.
fn subscription(
    r: OwnedReadHalf,
    mut w: OwnedWriteHalf,
    start: Offsets,
    stdin_offset: u64,
) -> Subscription {
    let (tx, events) = mpsc::channel(8);
    tokio::spawn(async move {
        let mut frames = wire::Reader::new(r);
        loop {
            let frame = tokio::select! {
                f = frames.next() => f,
                _ = tx.closed() => break,
            };
            let event = match frame {
                Ok(Some(Frame::Output(s, b))) => Event::Output(s, b),
                Ok(Some(f @ Frame::Json(_))) => match f.parse::<Push>() {
                    Ok(Push::Exit(status)) => Event::Exit(status),
                    _ => break,
                },
                _ => break,
            };
            let last = matches!(event, Event::Exit(_));
            if tx.send(event).await.is_err() || last {
                break;
            }
        }
    });
    let (ack_tx, mut ack_rx) = watch::channel(Offsets::default());
    tokio::spawn(async move {
        while ack_rx.changed().await.is_ok() {
            let upto = *ack_rx.borrow_and_update();
            if wire::write(&mut w, &Frame::json(&Up::Ack(upto)))
                .await
                .is_err()
            {
                break;
            }
        }
    });
    Subscription {
        start,
        stdin_offset,
        events,
        acks: Box::new(AckSender(ack_tx)),
    }
}

struct AckSender(watch::Sender<Offsets>);

impl Acks for AckSender {
    fn ack(&self, upto: Offsets) {
        self.0.send_replace(upto);
    }
}

/// An exec in a box's supervisor.
pub struct RemoteExec {
    sup: Arc<Supervisor>,
    id: String,
    /// The stdin connection, opened at the first write.
    stdin: tokio::sync::Mutex<Option<(OwnedReadHalf, OwnedWriteHalf)>>,
}

#[async_trait]
impl ExecHandle for RemoteExec {
    async fn subscribe(&self, from: Offsets) -> Result<Subscription> {
        let (mut r, w) = self
            .sup
            .open(&Request::Attach {
                id: self.id.clone(),
                from,
            })
            .await?;
        match Supervisor::reply(&mut r).await? {
            Reply::Subscribed {
                start,
                stdin_offset,
            } => Ok(subscription(r, w, start, stdin_offset)),
            other => Err(Error::Internal(format!("supervisor said {other:?}"))),
        }
    }

    async fn write_stdin(&self, at: u64, data: Bytes) -> Result<u64> {
        let mut conn = self.stdin.lock().await;
        if conn.is_none() {
            let (mut r, w) = self
                .sup
                .open(&Request::Stdin {
                    id: self.id.clone(),
                })
                .await?;
            Supervisor::reply(&mut r).await?;
            *conn = Some((r, w));
        }
        let (r, w) = conn.as_mut().expect("opened above");
        let written = async {
            wire::write(w, &Frame::Stdin(at, data))
                .await
                .map_err(broken)?;
            Supervisor::reply(r).await
        };
        match written.await {
            Ok(Reply::Taken(n)) => Ok(n),
            Ok(other) => Err(Error::Internal(format!("supervisor said {other:?}"))),
            Err(e) => {
                *conn = None;
                Err(e)
            }
        }
    }

    async fn close_stdin(&self) -> Result<()> {
        self.sup
            .request(Request::CloseStdin {
                id: self.id.clone(),
            })
            .await
            .map(drop)
    }

    async fn signal(&self, signal: i32) -> Result<()> {
        self.sup
            .request(Request::Signal {
                id: self.id.clone(),
                signal,
            })
            .await
            .map(drop)
    }

    async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        self.sup
            .request(Request::Resize {
                id: self.id.clone(),
                rows,
                cols,
            })
            .await
            .map(drop)
    }

    async fn wait(&self) -> ExitStatus {
        let rx = {
            let mut table = self.sup.exits.lock().expect("exits");
            table
                .entry(self.id.clone())
                .or_insert_with(|| watch::channel(None).0)
                .subscribe()
        };
        let mut rx = rx;
        let mut ended = self.sup.ended();
        tokio::select! {
            s = rx.wait_for(Option::is_some) => return s.map(|s| s.clone().unwrap_or_default()).unwrap_or_else(|_| lost()),
            _ = ended.wait_for(Option::is_some) => {}
        }
        // The box ended: its commands' exits follow at once.
        match tokio::time::timeout(Duration::from_secs(5), rx.wait_for(Option::is_some)).await {
            Ok(Ok(s)) => s.clone().unwrap_or_default(),
            _ => lost(),
        }
    }
}
