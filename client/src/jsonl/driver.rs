//! The JSONL driver: envelope frames in, boxd gRPC calls out, replies and
//! events back. Generic over its input and output, so `boxctl jsonl` (stdio)
//! and other front ends share it. It keeps no box state: only the exec
//! streams it opened, so that they end with it.
//!
//! Invariants:
//! - the `transport` frame is the first frame written;
//! - requests are dispatched concurrently; replies and events share one
//!   bounded outbound queue, so a slow reader slows the daemon's streams;
//! - the `box.exec` reply is queued before any event of that exec, and every
//!   `output` event of an exec before its `exit` event;
//! - `shutdown` or end of input: execs started here are killed (and reaped by
//!   boxd when their streams close), queued frames are flushed, `serve`
//!   returns;
//! - an exec outlives a restart of boxd: its stream reattaches
//!   ([`ExecStream::reconnecting`]) and its events go on where they
//!   stopped; the reattach, and any output lost, are told on stderr.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::frame::{self, ErrorCode, Failure, Request};
use super::lines::{Line, LineReader};
pub use super::methods::METHODS;
use super::methods::Method;
use super::output::{OutputEncoder, Payload};
use super::replies::{self, Event, PullPhase, to_value};
use crate::{Client, ExecEvent, ExecInput, ExecStream, boxes, v1};

/// The envelope version this driver speaks.
pub fn protocol() -> String {
    format!("boxd-{}+jsonl-v1", env!("CARGO_PKG_VERSION"))
}

/// Frames waiting to be written; bounded, so a slow reader applies
/// backpressure all the way to boxd.
const QUEUE: usize = 256;
/// How long `shutdown` waits for killed execs to report their exit.
const EXIT_GRACE: Duration = Duration::from_secs(2);

struct Driver {
    client: Option<Client>,
    /// Why there is no client (not running, another protocol version, ...).
    unreachable: String,
    socket: PathBuf,
    out: mpsc::Sender<Value>,
    /// Execs started by this driver, by id.
    execs: Mutex<HashMap<String, OwnExec>>,
}

/// An exec this driver started: its input, and the task streaming its events.
type OwnExec = (ExecInput, Option<JoinHandle<()>>);

/// Serves the envelope on `input`/`output` until `shutdown` or end of input.
pub async fn serve<R, W>(socket: &Path, input: R, output: W) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, rx) = mpsc::channel::<Value>(QUEUE);
    let writer = tokio::spawn(write_frames(rx, output));

    let (client, service_pid, unreachable) = match crate::connect_described(socket).await {
        Ok((c, d)) => (Some(c), Some(d.pid), String::new()),
        Err(e) => (None, None, e.to_string()),
    };
    let transport = Event::Transport {
        service_pid,
        bridge_pid: std::process::id(),
        transport: "grpc+unix",
        socket: socket.to_string_lossy().into_owned(),
    };
    let _ = out.send(to_value(&transport)).await;
    let driver = Arc::new(Driver {
        client,
        unreachable,
        socket: socket.to_path_buf(),
        out: out.clone(),
        execs: Mutex::new(HashMap::new()),
    });
    let watcher = driver
        .client
        .clone()
        .map(|c| tokio::spawn(watch_boxes(c, out.clone())));
    drop(out);

    let mut lines = LineReader::new(input);
    loop {
        let line = match lines.next().await {
            Ok(Some(line)) => line,
            Ok(None) | Err(_) => break, // end of input: as if `shutdown`
        };
        let request = match line {
            Line::TooLarge { len } => {
                let f = Failure::new(
                    ErrorCode::TooLarge,
                    format!("request line of {len} bytes exceeds 4 MiB"),
                );
                driver.send(frame::error(&Value::Null, &f)).await;
                continue;
            }
            Line::Request(bytes) => match frame::parse_request(&bytes) {
                Ok(r) => r,
                Err((id, f)) => {
                    driver.send(frame::error(&id, &f)).await;
                    continue;
                }
            },
        };
        let Request { id, method, params } = request;
        match Method::parse(&method, params) {
            Ok(Method::Shutdown(_)) => {
                driver.send(frame::reply(&id, to_value(&replies::OK))).await;
                break;
            }
            Ok(method) => {
                let d = driver.clone();
                tokio::spawn(async move { d.handle(id, method).await });
            }
            Err(f) => driver.send(frame::error(&id, &f)).await,
        }
    }

    driver.end_execs().await;
    if let Some(w) = watcher {
        w.abort();
    }
    drop(driver);
    writer.await.unwrap_or(Ok(()))
}

async fn write_frames<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<Value>,
    mut output: W,
) -> std::io::Result<()> {
    while let Some(frame) = rx.recv().await {
        let mut line = serde_json::to_vec(&frame).map_err(std::io::Error::other)?;
        line.push(b'\n');
        output.write_all(&line).await?;
        if rx.is_empty() {
            output.flush().await?;
        }
    }
    output.flush().await
}

async fn watch_boxes(mut client: Client, out: mpsc::Sender<Value>) {
    let Ok(stream) = client.watch_boxes(v1::WatchBoxesRequest::default()).await else {
        return;
    };
    let mut stream = stream.into_inner();
    while let Ok(Some(ev)) = stream.message().await {
        if out.send(to_value(&Event::box_state(ev))).await.is_err() {
            return;
        }
    }
}

impl From<crate::copy::CopyError> for Failure {
    fn from(e: crate::copy::CopyError) -> Failure {
        use crate::archive::Kind;
        match e {
            crate::copy::CopyError::Status(s) => s.into(),
            crate::copy::CopyError::Host(f) => Failure::new(
                match f.kind {
                    Kind::NotFound => ErrorCode::NotFound,
                    Kind::Invalid => ErrorCode::InvalidParams,
                    Kind::Io => ErrorCode::Internal,
                },
                f.message,
            ),
        }
    }
}

/// A box's resource use as `box.stats` and `boxctl stats --json` show it.
pub fn stat_json(b: &v1::BoxStat) -> Value {
    to_value(&replies::BoxStat::from(b))
}

impl Driver {
    async fn send(&self, frame: Value) {
        let _ = self.out.send(frame).await;
    }

    fn client(&self) -> Result<Client, Failure> {
        self.client.clone().ok_or_else(|| {
            let why = if self.unreachable.is_empty() {
                format!(
                    "boxd is not running (nothing answers on {})",
                    self.socket.display()
                )
            } else {
                self.unreachable.clone()
            };
            Failure::new(ErrorCode::Unavailable, why)
        })
    }

    async fn handle(self: Arc<Self>, id: Value, method: Method) {
        let reply = match self.clone().dispatch(&id, method).await {
            Ok(Some(result)) => frame::reply(&id, result),
            Ok(None) => return, // the method queued its own reply
            Err(f) => frame::error(&id, &f),
        };
        self.send(reply).await;
    }

    /// Runs one method; its result, or `None` when it queued its own reply.
    async fn dispatch(
        self: Arc<Self>,
        id: &Value,
        method: Method,
    ) -> Result<Option<Value>, Failure> {
        let ok = || to_value(&replies::OK);
        let result = match method {
            Method::HostDescribe(_) => {
                let d = self
                    .client()?
                    .describe(v1::DescribeRequest {})
                    .await?
                    .into_inner();
                let mut capabilities: Vec<String> = METHODS.iter().map(|m| m.to_string()).collect();
                for c in d.capabilities {
                    if !capabilities.contains(&c) {
                        capabilities.push(c);
                    }
                }
                to_value(&replies::Describe {
                    protocol: protocol(),
                    pid: d.pid,
                    boxlite: (d.engine == "boxlite").then_some(d.engine_version),
                    engine: d.engine,
                    isolation: d.isolation,
                    capabilities,
                })
            }
            Method::BoxCreate(c) => {
                let (name, spec) = c.into_spec()?;
                let mut client = self.client()?;
                let image = spec.image().to_owned();
                let mut last_progress = Instant::now();
                let on_pull = |ev: &boxes::PullEvent| {
                    // Progress at most every 200 ms; every other step as it comes.
                    let keep = !matches!(ev, boxes::PullEvent::Progress(_))
                        || last_progress.elapsed() >= Duration::from_millis(200);
                    if keep && matches!(ev, boxes::PullEvent::Progress(_)) {
                        last_progress = Instant::now();
                    }
                    let frame = keep.then(|| {
                        to_value(&Event::ImagePull {
                            request_id: id,
                            name: &name,
                            reference: &image,
                            phase: PullPhase::from(ev),
                        })
                    });
                    let out = self.out.clone();
                    async move {
                        if let Some(frame) = frame {
                            let _ = out.send(frame).await;
                        }
                    }
                };
                let created = boxes::create_or_reuse(&mut client, &name, spec, on_pull).await?;
                to_value(&replies::BoxCreated::from(created))
            }
            Method::BoxStart(n) => {
                let r = self
                    .client()?
                    .start_box(v1::StartBoxRequest { name: n.name })
                    .await?
                    .into_inner();
                to_value(&replies::BoxStarted::from(r))
            }
            Method::BoxStop(n) => {
                let req = v1::StopBoxRequest {
                    name: n.name,
                    force: n.force.unwrap_or(false),
                };
                self.client()?.stop_box(req).await?;
                ok()
            }
            Method::BoxRemove(n) => {
                let req = v1::RemoveBoxRequest {
                    name: n.name,
                    force: n.force.unwrap_or(false),
                };
                self.client()?.remove_box(req).await?;
                ok()
            }
            Method::BoxList(_) => {
                let boxes = self
                    .client()?
                    .list_boxes(v1::ListBoxesRequest {})
                    .await?
                    .into_inner()
                    .boxes;
                let list: Vec<_> = boxes.into_iter().map(replies::BoxSummary::from).collect();
                to_value(&list)
            }
            Method::BoxStats(n) => {
                let mut stream = self
                    .client()?
                    .box_stats(v1::BoxStatsRequest {
                        names: n.names.unwrap_or_default(),
                        stream: false,
                        interval_ms: 0,
                    })
                    .await?
                    .into_inner();
                let sample = stream.message().await?.unwrap_or_default();
                let stats: Vec<_> = sample.boxes.iter().map(replies::BoxStat::from).collect();
                to_value(&stats)
            }
            Method::BoxSnapshot(n) => {
                let req = v1::CreateSnapshotRequest {
                    box_name: n.name,
                    name: n.snapshot,
                };
                let made = self.client()?.create_snapshot(req).await?.into_inner();
                to_value(&replies::Snapshot::from(made))
            }
            Method::BoxSnapshots(n) => {
                let req = v1::ListSnapshotsRequest { box_name: n.name };
                let list = self.client()?.list_snapshots(req).await?.into_inner();
                let list: Vec<_> = list
                    .snapshots
                    .into_iter()
                    .map(replies::Snapshot::from)
                    .collect();
                to_value(&list)
            }
            Method::BoxRestore(n) => {
                let req = v1::RestoreSnapshotRequest {
                    box_name: n.name,
                    name: n.snapshot,
                };
                self.client()?.restore_snapshot(req).await?;
                ok()
            }
            Method::BoxRemoveSnapshot(n) => {
                let req = v1::RemoveSnapshotRequest {
                    box_name: n.name,
                    name: n.snapshot,
                };
                self.client()?.remove_snapshot(req).await?;
                ok()
            }
            Method::BoxClone(n) => {
                let req = v1::CloneBoxRequest {
                    source: n.source,
                    name: n.name,
                };
                let made = self.client()?.clone_box(req).await?.into_inner();
                to_value(&replies::BoxCreated::from(boxes::Created::from(made)))
            }
            Method::BoxExport(n) => {
                let req = v1::ExportBoxRequest {
                    name: n.name,
                    path: n.path,
                };
                let r = self.client()?.export_box(req).await?.into_inner();
                to_value(&replies::Exported {
                    size_bytes: r.size_bytes,
                })
            }
            Method::BoxImport(n) => {
                let req = n.into_request();
                let made = self.client()?.import_box(req).await?.into_inner();
                to_value(&replies::BoxCreated::from(boxes::Created::from(made)))
            }
            Method::BoxCopyIn(c) => {
                let source = crate::copy::Source::Path {
                    path: c.host_path()?,
                    follow_symlinks: c.follow_symlinks.unwrap_or(false),
                };
                let mut client = self.client()?;
                let bytes =
                    crate::copy::copy_in(&mut client, &c.name, source, &c.path, None).await?;
                to_value(&replies::Copied { bytes })
            }
            Method::BoxCopyOut(c) => {
                let dest = crate::copy::Dest::Path(c.host_path()?);
                let mut client = self.client()?;
                let follow = c.follow_symlinks.unwrap_or(false);
                let bytes =
                    crate::copy::copy_out(&mut client, &c.name, &c.path, follow, dest, None)
                        .await?;
                to_value(&replies::Copied { bytes })
            }
            Method::BoxExec(e) => {
                self.clone().exec(id, e.into_start()).await?;
                return Ok(None);
            }
            Method::ExecStdin(mut s) => {
                let data = s.bytes()?;
                let close = s.close.unwrap_or(false);
                let mut client = self.client()?;
                let req = v1::SendInputRequest {
                    exec_id: s.exec_id,
                    data: data.into(),
                    close,
                };
                client.send_input(req).await?;
                ok()
            }
            Method::ExecKill(k) => {
                let req = v1::SignalExecRequest {
                    signal: Some(v1::Signal {
                        signal: k.signal()?,
                    }),
                    exec_id: k.exec_id,
                };
                self.client()?.signal_exec(req).await?;
                ok()
            }
            Method::ExecResize(r) => {
                let req = v1::ResizeExecRequest {
                    exec_id: r.exec_id,
                    size: Some(v1::TtySize {
                        rows: r.rows,
                        cols: r.cols,
                    }),
                };
                self.client()?.resize_exec(req).await?;
                ok()
            }
            // Answered by the reading loop, which then stops reading.
            Method::Shutdown(_) => ok(),
        };
        Ok(Some(result))
    }

    /// `box.exec`: queues the reply, then streams the exec's events.
    async fn exec(self: Arc<Self>, id: &Value, start: v1::ExecStart) -> Result<(), Failure> {
        let mut client = self.client()?;
        let exec = ExecStream::start(&mut client, start)
            .await?
            .reconnecting(&self.socket)
            .on_reconnect(|r| eprintln!("boxd jsonl: {}", crate::stdio::reconnect_line(r)));
        let exec_id = exec.exec_id().to_owned();
        self.execs
            .lock()
            .expect("exec table")
            .insert(exec_id.clone(), (exec.input(), None));
        // The reply goes into the queue before any event of this exec.
        let started = replies::ExecStarted {
            exec_id: exec_id.clone(),
            launch_ms: exec.launch_ms(),
        };
        self.send(frame::reply(id, to_value(&started))).await;
        let driver = self.clone();
        let id = exec_id.clone();
        let task = tokio::spawn(async move { driver.stream_events(id, exec).await });
        if let Some(entry) = self.execs.lock().expect("exec table").get_mut(&exec_id) {
            entry.1 = Some(task);
        }
        Ok(())
    }

    async fn stream_events(self: Arc<Self>, exec_id: String, mut exec: ExecStream) {
        let (mut out_enc, mut err_enc) = (OutputEncoder::default(), OutputEncoder::default());
        let exit = loop {
            match exec.next().await {
                Ok(Some(ExecEvent::Stdout(b))) => {
                    self.output(&exec_id, "stdout", out_enc.push(&b)).await
                }
                Ok(Some(ExecEvent::Stderr(b))) => {
                    self.output(&exec_id, "stderr", err_enc.push(&b)).await
                }
                Ok(Some(ExecEvent::Exit(e))) => break Ok(e),
                Ok(None) => break Err("the exec stream ended without an exit".to_owned()),
                Err(s) => break Err(s.message().to_owned()),
            }
        };
        self.output(&exec_id, "stdout", out_enc.finish().into_iter().collect())
            .await;
        self.output(&exec_id, "stderr", err_enc.finish().into_iter().collect())
            .await;
        let frame = match exit {
            Ok(e) => Event::Exit {
                exec_id: &exec_id,
                exit_code: e.code,
                signal: e.signal,
                error_message: (!e.error.is_empty()).then_some(e.error),
                timed_out: e.timed_out,
            },
            Err(msg) => Event::Exit {
                exec_id: &exec_id,
                exit_code: None,
                signal: None,
                error_message: Some(msg),
                timed_out: false,
            },
        };
        self.send(to_value(&frame)).await;
        self.execs.lock().expect("exec table").remove(&exec_id);
    }

    async fn output(&self, exec_id: &str, stream: &str, payloads: Vec<Payload>) {
        for p in payloads {
            let (data, data_base64) = match p {
                Payload::Text(t) => (Some(t), None),
                Payload::Base64(b) => (None, Some(b)),
            };
            let frame = Event::Output {
                exec_id,
                stream,
                data,
                data_base64,
            };
            self.send(to_value(&frame)).await;
        }
    }
    /// Kills the execs this driver started and lets them report their exit
    /// (briefly); boxd reaps whatever is left when the streams close.
    async fn end_execs(&self) {
        let execs: Vec<OwnExec> = self
            .execs
            .lock()
            .expect("exec table")
            .drain()
            .map(|(_, v)| v)
            .collect();
        let mut tasks = Vec::new();
        for (input, task) in execs {
            let _ = input.signal("SIGKILL").await;
            tasks.extend(task);
        }
        for mut t in tasks {
            if tokio::time::timeout(EXIT_GRACE, &mut t).await.is_err() {
                t.abort();
            }
        }
    }
}
