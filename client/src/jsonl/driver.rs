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
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::frame::{self, ErrorCode, Failure, Request};
use super::lines::{Line, LineReader};
use super::output::{OutputEncoder, Payload};
use crate::{Client, ExecEvent, ExecInput, ExecStream, v1};

/// The envelope version this driver speaks.
pub fn protocol() -> String {
    format!("boxd-{}+jsonl-v1", env!("CARGO_PKG_VERSION"))
}

/// The methods of the envelope.
pub const METHODS: &[&str] = &[
    "host.describe",
    "box.create",
    "box.start",
    "box.exec",
    "box.copyIn",
    "box.copyOut",
    "exec.stdin",
    "exec.kill",
    "exec.resize",
    "box.stop",
    "box.remove",
    "box.list",
    "box.stats",
    "box.snapshot",
    "box.snapshots",
    "box.restore",
    "box.removeSnapshot",
    "box.clone",
    "box.export",
    "box.import",
    "shutdown",
];

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
    let _ = out
        .send(json!({
            "type": "transport",
            "servicePid": service_pid,
            "bridgePid": std::process::id(),
            "transport": "grpc+unix",
            "socket": socket.to_string_lossy(),
        }))
        .await;
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
        if request.method == "shutdown" {
            match params::<Empty>(&request.params) {
                Ok(_) => {
                    driver
                        .send(frame::reply(&request.id, json!({"ok": true})))
                        .await;
                    break;
                }
                Err(f) => driver.send(frame::error(&request.id, &f)).await,
            }
            continue;
        }
        let d = driver.clone();
        tokio::spawn(async move { d.handle(request).await });
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
    let Ok(stream) = client.watch_boxes(v1::WatchBoxesRequest {}).await else {
        return;
    };
    let mut stream = stream.into_inner();
    while let Ok(Some(ev)) = stream.message().await {
        let state = v1::BoxState::try_from(ev.state)
            .unwrap_or(v1::BoxState::Unspecified)
            .label();
        let frame = json!({"type": "boxState", "boxId": ev.box_id, "name": ev.name, "state": state, "elapsedMs": ev.elapsed_ms});
        if out.send(frame).await.is_err() {
            return;
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatsParams {
    names: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MountParams {
    host_path: String,
    guest_path: String,
    read_only: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateParams {
    name: String,
    image: Option<String>,
    cpus: Option<u32>,
    memory_mib: Option<u32>,
    disk_size_gb: Option<u32>,
    mounts: Option<Vec<MountParams>>,
    allow_net: Option<Vec<String>>,
    env: Option<HashMap<String, String>>,
    working_dir: Option<String>,
    secrets: Option<Vec<SecretParams>>,
    ports: Option<Vec<PortParams>>,
}

/// A published port: `hostIp` defaults to 127.0.0.1, `hostPort` to 0 (any
/// free port), `protocol` to `tcp` (the only one relayed).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PortParams {
    host_ip: Option<String>,
    host_port: Option<u32>,
    box_port: u32,
    protocol: Option<String>,
}

impl PortParams {
    fn into_proto(self) -> v1::PortMapping {
        v1::PortMapping {
            host_ip: self.host_ip.unwrap_or_default(),
            host_port: self.host_port.unwrap_or(0),
            box_port: self.box_port,
            protocol: self.protocol.unwrap_or_default(),
        }
    }
}

/// A published port as `box.list` and `box.create` report it.
fn port_json(p: &v1::PortMapping) -> Value {
    json!({"hostIp": p.host_ip, "hostPort": p.host_port, "boxPort": p.box_port, "protocol": "tcp"})
}

/// A secret: its value given inline, or read by the driver (the client
/// side) from its own environment or a file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SecretParams {
    name: String,
    hosts: Vec<String>,
    placeholder: Option<String>,
    value: Option<String>,
    value_from_env: Option<String>,
    value_from_file: Option<String>,
}

impl SecretParams {
    fn into_proto(self) -> Result<v1::Secret, Failure> {
        let invalid = |m: String| Failure::new(ErrorCode::InvalidParams, m);
        let value = match (self.value, self.value_from_env, self.value_from_file) {
            (Some(v), None, None) => v,
            (None, Some(var), None) => std::env::var(&var).map_err(|_| {
                invalid(format!(
                    "secret {}: ${var} is not set for the driver",
                    self.name
                ))
            })?,
            (None, None, Some(path)) => {
                let mut v = std::fs::read_to_string(&path)
                    .map_err(|e| invalid(format!("secret {}: {path}: {e}", self.name)))?;
                if v.ends_with('\n') {
                    v.pop();
                }
                v
            }
            _ => {
                return Err(invalid(format!(
                    "secret {}: give exactly one of value, valueFromEnv, valueFromFile",
                    self.name
                )));
            }
        };
        Ok(v1::Secret {
            name: self.name,
            hosts: self.hosts,
            placeholder: self.placeholder.unwrap_or_default(),
            value,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameParams {
    name: String,
}

/// `box.copyIn` and `box.copyOut`: a path in the box and one on the host.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CopyParams {
    name: String,
    path: String,
    host_path: String,
    follow_symlinks: Option<bool>,
}

impl CopyParams {
    fn host_path(&self) -> Result<std::path::PathBuf, Failure> {
        let p = std::path::PathBuf::from(&self.host_path);
        if !p.is_absolute() {
            return Err(Failure::new(
                ErrorCode::InvalidParams,
                format!("hostPath must be absolute: {:?}", self.host_path),
            ));
        }
        Ok(p)
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotParams {
    name: String,
    snapshot: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloneParams {
    source: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchiveParams {
    name: String,
    path: String,
}

/// A snapshot as the envelope shows it.
fn snapshot_json(s: v1::SnapshotInfo) -> Value {
    json!({"name": s.name, "box": s.box_name, "createdAt": s.created_at_ms, "sizeBytes": s.size_bytes})
}

/// The reply to a call that made a box (create, clone, import).
fn created_json(r: v1::CreateBoxResponse) -> Value {
    let b = r.r#box.unwrap_or_default();
    let mut v =
        json!({"boxId": b.id, "name": b.name, "created": r.created, "elapsedMs": r.elapsed_ms});
    if !r.warnings.is_empty() {
        v["warnings"] = json!(r.warnings);
    }
    v
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForceParams {
    name: String,
    force: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExecParams {
    name: String,
    command: String,
    args: Option<Vec<String>>,
    env: Option<HashMap<String, String>>,
    working_dir: Option<String>,
    timeout_ms: Option<u64>,
    interactive: Option<bool>,
    tty: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StdinParams {
    exec_id: String,
    data: Option<String>,
    data_base64: Option<String>,
    close: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KillParams {
    exec_id: String,
    signal: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResizeParams {
    exec_id: String,
    rows: u32,
    cols: u32,
}

fn params<T: DeserializeOwned>(p: &Value) -> Result<T, Failure> {
    T::deserialize(p).map_err(|e| Failure::new(ErrorCode::InvalidParams, e.to_string()))
}

/// A box's resource use as `box.stats` and `boxctl stats --json` show it.
pub fn stat_json(b: &v1::BoxStat) -> Value {
    json!({
        "boxId": b.id,
        "name": b.name,
        "cpuPercent": b.cpu_percent,
        "cpuUsec": b.cpu_usec,
        "memoryBytes": b.memory_bytes,
        "memoryLimitBytes": b.memory_limit_bytes,
        "pids": b.pids,
        "diskBytes": b.disk_bytes,
        "netRxBytes": b.net_rx_bytes,
        "netTxBytes": b.net_tx_bytes,
        "atMs": b.at_ms,
    })
}

fn ok() -> Value {
    json!({"ok": true})
}

fn state_label(s: i32) -> &'static str {
    v1::BoxState::try_from(s)
        .unwrap_or(v1::BoxState::Unspecified)
        .label()
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

    async fn handle(self: Arc<Self>, req: Request) {
        let reply = match self.clone().dispatch(&req).await {
            Ok(Some(result)) => frame::reply(&req.id, result),
            Ok(None) => return, // the method queued its own reply
            Err(f) => frame::error(&req.id, &f),
        };
        self.send(reply).await;
    }

    async fn dispatch(self: Arc<Self>, req: &Request) -> Result<Option<Value>, Failure> {
        let p = &req.params;
        let result = match req.method.as_str() {
            "host.describe" => {
                params::<Empty>(p)?;
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
                let boxlite = (d.engine == "boxlite").then_some(d.engine_version);
                json!({"protocol": protocol(), "pid": d.pid, "boxlite": boxlite, "engine": d.engine,
                       "isolation": d.isolation, "capabilities": capabilities})
            }
            "box.create" => {
                let c: CreateParams = params(p)?;
                let spec = v1::BoxSpec {
                    image: c.image.unwrap_or_default(),
                    cpus: c.cpus,
                    memory_mib: c.memory_mib,
                    disk_size_gb: c.disk_size_gb,
                    mounts: c
                        .mounts
                        .unwrap_or_default()
                        .into_iter()
                        .map(|m| v1::Mount {
                            host_path: m.host_path,
                            guest_path: m.guest_path,
                            read_only: m.read_only.unwrap_or(false),
                        })
                        .collect(),
                    allow_net: c.allow_net.unwrap_or_default(),
                    env: c.env.unwrap_or_default(),
                    working_dir: c.working_dir.unwrap_or_default(),
                    secrets: c
                        .secrets
                        .unwrap_or_default()
                        .into_iter()
                        .map(SecretParams::into_proto)
                        .collect::<Result<_, _>>()?,
                    ports: c
                        .ports
                        .unwrap_or_default()
                        .into_iter()
                        .map(PortParams::into_proto)
                        .collect(),
                };
                let mut client = self.client()?;
                self.pull_if_missing(&mut client, &req.id, &c.name, &spec.image)
                    .await?;
                let r = client
                    .create_box(v1::CreateBoxRequest {
                        name: c.name,
                        spec: Some(spec),
                    })
                    .await?
                    .into_inner();
                created_json(r)
            }
            "box.start" => {
                let n: NameParams = params(p)?;
                let r = self
                    .client()?
                    .start_box(v1::StartBoxRequest { name: n.name })
                    .await?
                    .into_inner();
                let b = r.r#box.unwrap_or_default();
                json!({"boxId": b.id, "bootMs": r.boot_ms,
                       "ports": b.ports.iter().map(port_json).collect::<Vec<_>>()})
            }
            "box.stop" => {
                let n: ForceParams = params(p)?;
                let req = v1::StopBoxRequest {
                    name: n.name,
                    force: n.force.unwrap_or(false),
                };
                self.client()?.stop_box(req).await?;
                ok()
            }
            "box.remove" => {
                let n: ForceParams = params(p)?;
                let req = v1::RemoveBoxRequest {
                    name: n.name,
                    force: n.force.unwrap_or(false),
                };
                self.client()?.remove_box(req).await?;
                ok()
            }
            "box.list" => {
                params::<Empty>(p)?;
                let boxes = self
                    .client()?
                    .list_boxes(v1::ListBoxesRequest {})
                    .await?
                    .into_inner()
                    .boxes;
                Value::Array(
                    boxes
                        .into_iter()
                        .map(|b| {
                            json!({"boxId": b.id, "name": b.name, "state": state_label(b.state), "image": b.image,
                                   "createdAt": b.created_at_ms, "isolation": b.isolation, "diskBytes": b.disk_bytes,
                                   "ports": b.ports.iter().map(port_json).collect::<Vec<_>>()})
                        })
                        .collect(),
                )
            }
            "box.stats" => {
                let n: StatsParams = params(p)?;
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
                Value::Array(sample.boxes.iter().map(stat_json).collect())
            }
            "box.snapshot" => {
                let n: SnapshotParams = params(p)?;
                let req = v1::CreateSnapshotRequest {
                    box_name: n.name,
                    name: n.snapshot,
                };
                snapshot_json(self.client()?.create_snapshot(req).await?.into_inner())
            }
            "box.snapshots" => {
                let n: NameParams = params(p)?;
                let req = v1::ListSnapshotsRequest { box_name: n.name };
                let list = self.client()?.list_snapshots(req).await?.into_inner();
                Value::Array(list.snapshots.into_iter().map(snapshot_json).collect())
            }
            "box.restore" => {
                let n: SnapshotParams = params(p)?;
                let req = v1::RestoreSnapshotRequest {
                    box_name: n.name,
                    name: n.snapshot,
                };
                self.client()?.restore_snapshot(req).await?;
                ok()
            }
            "box.removeSnapshot" => {
                let n: SnapshotParams = params(p)?;
                let req = v1::RemoveSnapshotRequest {
                    box_name: n.name,
                    name: n.snapshot,
                };
                self.client()?.remove_snapshot(req).await?;
                ok()
            }
            "box.clone" => {
                let n: CloneParams = params(p)?;
                let req = v1::CloneBoxRequest {
                    source: n.source,
                    name: n.name,
                };
                created_json(self.client()?.clone_box(req).await?.into_inner())
            }
            "box.export" => {
                let n: ArchiveParams = params(p)?;
                let req = v1::ExportBoxRequest {
                    name: n.name,
                    path: n.path,
                };
                let r = self.client()?.export_box(req).await?.into_inner();
                json!({"sizeBytes": r.size_bytes})
            }
            "box.import" => {
                let n: ArchiveParams = params(p)?;
                let req = v1::ImportBoxRequest {
                    path: n.path,
                    name: n.name,
                };
                created_json(self.client()?.import_box(req).await?.into_inner())
            }
            "box.copyIn" => {
                let c: CopyParams = params(p)?;
                let source = crate::copy::Source::Path {
                    path: c.host_path()?,
                    follow_symlinks: c.follow_symlinks.unwrap_or(false),
                };
                let mut client = self.client()?;
                let bytes =
                    crate::copy::copy_in(&mut client, &c.name, source, &c.path, None).await?;
                json!({"bytes": bytes})
            }
            "box.copyOut" => {
                let c: CopyParams = params(p)?;
                let dest = crate::copy::Dest::Path(c.host_path()?);
                let mut client = self.client()?;
                let follow = c.follow_symlinks.unwrap_or(false);
                let bytes =
                    crate::copy::copy_out(&mut client, &c.name, &c.path, follow, dest, None)
                        .await?;
                json!({"bytes": bytes})
            }
            "box.exec" => {
                self.clone().exec(req).await?;
                return Ok(None);
            }
            "exec.stdin" => {
                let s: StdinParams = params(p)?;
                let mut data = s.data.map(String::into_bytes).unwrap_or_default();
                if let Some(b64) = s.data_base64 {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .map_err(|e| {
                            Failure::new(ErrorCode::InvalidParams, format!("dataBase64: {e}"))
                        })?;
                    data.extend(bytes);
                }
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
            "exec.kill" => {
                let k: KillParams = params(p)?;
                let signal = match k.signal {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s,
                    Some(Value::Number(n)) => n.to_string(),
                    Some(_) => {
                        return Err(Failure::new(
                            ErrorCode::InvalidParams,
                            "signal is a name or a number",
                        ));
                    }
                };
                let req = v1::SignalExecRequest {
                    exec_id: k.exec_id,
                    signal: Some(v1::Signal { signal }),
                };
                self.client()?.signal_exec(req).await?;
                ok()
            }
            "exec.resize" => {
                let r: ResizeParams = params(p)?;
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
            other => {
                return Err(Failure::new(
                    ErrorCode::UnknownMethod,
                    format!("unknown method {other:?}"),
                ));
            }
        };
        Ok(Some(result))
    }

    /// Before a create: pulls an image the daemon does not have, sending
    /// `imagePull` events (progress at most every 200 ms). A local layout
    /// path, or a reference the daemon has, needs nothing.
    async fn pull_if_missing(
        &self,
        client: &mut Client,
        request_id: &Value,
        name: &str,
        image: &str,
    ) -> Result<(), Failure> {
        use v1::pull_image_event::Event;
        if !crate::image_missing(client, image).await.unwrap_or(false) {
            return Ok(());
        }
        let mut stream = client
            .pull_image(v1::PullImageRequest {
                reference: image.to_owned(),
            })
            .await?
            .into_inner();
        let mut last_progress = std::time::Instant::now();
        while let Some(ev) = stream.message().await? {
            let base = json!({"type": "imagePull", "requestId": request_id, "name": name, "reference": image});
            let extra = match ev.event {
                Some(Event::Started(s)) => json!({"phase": "started", "digest": s.digest,
                    "totalBytes": s.total_bytes, "layers": s.layers.len(),
                    "cachedLayers": s.layers.iter().filter(|l| l.cached).count()}),
                Some(Event::Progress(p)) => {
                    if last_progress.elapsed() < Duration::from_millis(200) {
                        continue;
                    }
                    last_progress = std::time::Instant::now();
                    json!({"phase": "progress", "doneBytes": p.done_bytes, "totalBytes": p.total_bytes})
                }
                Some(Event::LayerDone(d)) => json!({"phase": "layerDone", "layer": d}),
                Some(Event::Unpacking(_)) => json!({"phase": "unpacking"}),
                Some(Event::Done(i)) => {
                    json!({"phase": "done", "digest": i.digest, "size": i.size})
                }
                None => continue,
            };
            let mut frame = base;
            for (k, v) in extra.as_object().into_iter().flatten() {
                frame[k] = v.clone();
            }
            self.send(frame).await;
        }
        Ok(())
    }

    /// `box.exec`: queues the reply, then streams the exec's events.
    async fn exec(self: Arc<Self>, req: &Request) -> Result<(), Failure> {
        let e: ExecParams = params(&req.params)?;
        let start = v1::ExecStart {
            box_name: e.name,
            command: e.command,
            args: e.args.unwrap_or_default(),
            env: e.env.unwrap_or_default(),
            working_dir: e.working_dir.unwrap_or_default(),
            timeout_ms: e.timeout_ms.unwrap_or(0),
            stdin: e.interactive.unwrap_or(false),
            tty: e.tty.unwrap_or(false),
            tty_size: None,
            detach: false,
            resumable: true,
        };
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
        self.send(frame::reply(
            &req.id,
            json!({"execId": exec_id, "launchMs": exec.launch_ms()}),
        ))
        .await;
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
        let mut frame = json!({"type": "exit", "execId": exec_id, "exitCode": null});
        match exit {
            Ok(e) => {
                frame["exitCode"] = json!(e.code);
                if let Some(sig) = e.signal {
                    frame["signal"] = json!(sig);
                }
                if !e.error.is_empty() {
                    frame["errorMessage"] = json!(e.error);
                }
                if e.timed_out {
                    frame["timedOut"] = json!(true);
                }
            }
            Err(msg) => frame["errorMessage"] = json!(msg),
        }
        self.send(frame).await;
        self.execs.lock().expect("exec table").remove(&exec_id);
    }

    async fn output(&self, exec_id: &str, stream: &str, payloads: Vec<Payload>) {
        for p in payloads {
            let mut frame = json!({"type": "output", "execId": exec_id, "stream": stream});
            match p {
                Payload::Text(t) => frame["data"] = json!(t),
                Payload::Base64(b) => frame["dataBase64"] = json!(b),
            }
            self.send(frame).await;
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
