//! `boxctl mcp`: an MCP server on stdio (the official Rust SDK, `rmcp`)
//! that hands boxes to any MCP client, as one more thin client of boxd's
//! gRPC API. The agent decides what runs in a box; the person who starts
//! the server decides what a box may touch ([`policy`]).
//!
//! Boxes made here carry `BOXD_MADE_BY=mcp` in their environment, so a
//! later server (each MCP session starts its own) knows them; without
//! `--any-box` the agent may use only those.

pub mod policy;

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use boxd_client::{BoxSpec, Client, ErrorKind, ExecEvent, ExecStream, v1};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerInfo};
use rmcp::{Json, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Ctx, Failure};
use policy::{Policy, Refused};

/// The environment variable that marks a box made through MCP.
pub const MARK: (&str, &str) = ("BOXD_MADE_BY", "mcp");
/// Output kept per stream of an exec unless the call asks otherwise.
const DEFAULT_OUTPUT: usize = 1 << 20;
/// The most output a call may ask to keep per stream.
const MAX_OUTPUT: usize = 16 << 20;
const DEFAULT_TIMEOUT_S: u64 = 120;
const DEFAULT_READ: usize = 1 << 20;
const MAX_READ: usize = 16 << 20;

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn serve(ctx: &Ctx, policy: Policy) -> Result<u8, Failure> {
    // Started when nothing answers, as every client does (one line on
    // stderr, never on stdout, which carries the protocol only).
    ctx.client().await?;
    let server = Boxes {
        ctx: ctx.clone(),
        policy,
    };
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Failure {
            code: 1,
            message: format!("mcp: {e}"),
            kind: None,
        })?;
    running.waiting().await.map_err(|e| Failure {
        code: 1,
        message: format!("mcp: {e}"),
        kind: None,
    })?;
    Ok(0)
}

#[derive(Clone)]
struct Boxes {
    ctx: Ctx,
    policy: Policy,
}

/// A tool's failure, as the text the agent reads (`isError`).
type Answer<T> = Result<Json<T>, String>;

fn refused(r: Refused) -> String {
    r.0
}

fn status(s: boxd_client::tonic::Status) -> String {
    let kind = ErrorKind::of_status(&s);
    format!("{} ({kind:?})", s.message())
}

#[derive(Debug, Deserialize, JsonSchema)]
struct BoxName {
    /// The box's name.
    name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct BoxSummary {
    name: String,
    id: String,
    /// created, running, stopped, failed, ...
    state: String,
    image: String,
    /// `namespace` or `microvm`.
    isolation: String,
    /// Made through MCP (the agent may use it).
    made_by_mcp: bool,
    /// Published ports, `HOST_IP:HOST_PORT -> BOX_PORT`.
    ports: Vec<String>,
    /// Hosts the box may reach.
    allow_net: Vec<String>,
    mounts: Vec<MountSpec>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct BoxList {
    boxes: Vec<BoxSummary>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct MountSpec {
    /// Absolute host directory (it must be one the user allowed).
    host_path: String,
    /// Absolute path inside the box.
    box_path: String,
    #[serde(default)]
    read_only: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CreateBox {
    /// 1 to 64 characters of [A-Za-z0-9_.-]; a box of that name with the
    /// same spec is reused.
    name: String,
    /// An OCI image reference (pulled when missing), or an absolute path
    /// to an OCI layout.
    image: String,
    /// Host directories to mount (only those the user allowed).
    #[serde(default)]
    mounts: Vec<MountSpec>,
    /// Environment of every command in the box.
    #[serde(default)]
    env: HashMap<String, String>,
    /// Hosts the box may reach through its egress proxy (only those the
    /// user allowed); nothing else is reachable.
    #[serde(default)]
    allow_net: Vec<String>,
    /// Ports to publish on the host, `[HOST_IP:]HOST_PORT:BOX_PORT`
    /// (only when the user allowed publishing).
    #[serde(default)]
    publish: Vec<String>,
    memory_mib: Option<u32>,
    cpus: Option<u32>,
    /// Working directory of commands (default the image's).
    working_dir: Option<String>,
    /// Start the box at once (default true).
    start: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Exec {
    /// The box to run in.
    #[serde(rename = "box")]
    box_name: String,
    /// The program and its arguments (no shell). Give this or `shell`.
    #[serde(default)]
    argv: Vec<String>,
    /// A shell command line, run with `sh -c`. Give this or `argv`.
    shell: Option<String>,
    /// Working directory in the box.
    cwd: Option<String>,
    /// `USER[:GROUP]` or `UID[:GID]` (default the image's user).
    user: Option<String>,
    #[serde(default)]
    env: HashMap<String, String>,
    /// Text given to the command's stdin (then closed).
    stdin: Option<String>,
    /// Killed after this many seconds (default 120; 0: no limit).
    timeout_s: Option<u64>,
    /// Output kept of each stream, in bytes (default 1 MiB, at most
    /// 16 MiB); the rest is counted and dropped.
    max_output_bytes: Option<usize>,
}

#[derive(Debug, Serialize, JsonSchema, Default)]
struct Output {
    /// The text, or base64 when it is not UTF-8 (see `encoding`).
    text: String,
    /// `utf8` or `base64`.
    encoding: String,
    /// Bytes the command wrote to this stream.
    bytes: u64,
    /// Whether only the first `max_output_bytes` are here.
    truncated: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ExecResult {
    exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    signal: Option<i32>,
    timed_out: bool,
    /// Why it could not run (126: cannot execute, 127: not found), or that
    /// its box ended.
    error: Option<String>,
    stdout: Output,
    stderr: Output,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ReadFile {
    #[serde(rename = "box")]
    box_name: String,
    /// Absolute path in the box.
    path: String,
    /// Bytes to skip first.
    #[serde(default)]
    offset: u64,
    /// Bytes to return at most (default 1 MiB, at most 16 MiB).
    max_bytes: Option<usize>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct FileContent {
    content: Output,
    /// The file's whole size.
    size: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct WriteFile {
    #[serde(rename = "box")]
    box_name: String,
    /// Absolute path in the box; its directory must exist. An existing
    /// file is replaced.
    path: String,
    content: String,
    /// `utf8` (default) or `base64`.
    encoding: Option<String>,
    /// Octal mode, default `644`.
    mode: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Written {
    bytes: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Copy {
    #[serde(rename = "box")]
    box_name: String,
    /// Absolute host path (only beneath what the user allowed).
    host_path: String,
    /// Absolute path in the box.
    box_path: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Copied {
    /// Bytes of the archive that crossed.
    archive_bytes: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Done {
    name: String,
    state: String,
}

fn made_by_mcp(info: &v1::BoxInfo) -> bool {
    info.spec
        .as_ref()
        .and_then(|s| s.env.get(MARK.0))
        .is_some_and(|v| v == MARK.1)
}

fn summary(info: v1::BoxInfo) -> BoxSummary {
    let spec = info.spec.clone().unwrap_or_default();
    BoxSummary {
        made_by_mcp: made_by_mcp(&info),
        state: info.state().label().to_owned(),
        name: info.name,
        id: info.id,
        image: info.image,
        isolation: info.isolation,
        ports: info
            .ports
            .iter()
            .map(|p| format!("{}:{} -> {}", p.host_ip, p.host_port, p.box_port))
            .collect(),
        allow_net: spec.allow_net,
        mounts: spec
            .mounts
            .into_iter()
            .map(|m| MountSpec {
                host_path: m.host_path,
                box_path: m.guest_path,
                read_only: m.read_only,
            })
            .collect(),
    }
}

/// Bytes as text, or base64 when they are not UTF-8.
fn output(bytes: Vec<u8>, total: u64, truncated: bool) -> Output {
    match String::from_utf8(bytes) {
        Ok(text) => Output {
            text,
            encoding: "utf8".into(),
            bytes: total,
            truncated,
        },
        Err(e) => Output {
            text: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            encoding: "base64".into(),
            bytes: total,
            truncated,
        },
    }
}

/// One stream's output, the first `limit` bytes kept.
struct Kept {
    bytes: Vec<u8>,
    total: u64,
    limit: usize,
}

impl Kept {
    fn new(limit: usize) -> Kept {
        Kept {
            bytes: Vec::new(),
            total: 0,
            limit,
        }
    }
    fn take(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.limit.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }
    fn done(self) -> Output {
        let truncated = self.total > self.bytes.len() as u64;
        output(self.bytes, self.total, truncated)
    }
}

impl Boxes {
    async fn client(&self) -> Result<Client, String> {
        self.ctx.client().await.map_err(|f| f.message)
    }

    async fn inspect(&self, client: &mut Client, name: &str) -> Result<v1::BoxInfo, String> {
        client
            .inspect_box(v1::InspectBoxRequest {
                name: name.to_owned(),
            })
            .await
            .map(|r| r.into_inner())
            .map_err(status)
    }

    /// A box the agent names, which the policy lets it use.
    async fn usable(&self, client: &mut Client, name: &str) -> Result<v1::BoxInfo, String> {
        let info = self.inspect(client, name).await?;
        self.policy
            .may_use(name, made_by_mcp(&info))
            .map_err(refused)?;
        Ok(info)
    }

    async fn made_here(&self, client: &mut Client) -> Result<usize, String> {
        let list = client
            .list_boxes(v1::ListBoxesRequest {})
            .await
            .map_err(status)?
            .into_inner();
        Ok(list.boxes.iter().filter(|b| made_by_mcp(b)).count())
    }
}

#[tool_router]
impl Boxes {
    #[tool(
        description = "List boxes (hardware- or namespace-isolated sandboxes, each with its own files, processes and network policy): name, state, image, mounts, network allow-list, published ports, and whether it was made through MCP (only those can be used unless the user allowed every box)."
    )]
    async fn list_boxes(&self) -> Answer<BoxList> {
        let mut client = self.client().await?;
        let list = client
            .list_boxes(v1::ListBoxesRequest {})
            .await
            .map_err(status)?
            .into_inner();
        Ok(Json(BoxList {
            boxes: list.boxes.into_iter().map(summary).collect(),
        }))
    }

    #[tool(
        description = "Create a box from an image and start it (a box of that name with the same spec is reused, one with another spec is an error). A box reaches no network unless hosts are listed in allow_net, and sees no host files unless directories are mounted; both only as far as the user who started this server allows. The image is pulled when missing."
    )]
    async fn create_box(&self, Parameters(req): Parameters<CreateBox>) -> Answer<BoxSummary> {
        let p = &self.policy;
        p.image(&req.image).map_err(refused)?;
        p.allow_net(&req.allow_net).map_err(refused)?;
        p.publish(req.publish.len()).map_err(refused)?;
        p.resources(req.memory_mib, req.cpus).map_err(refused)?;
        let mut mounts = Vec::new();
        for m in &req.mounts {
            let host = p.host_path(&m.host_path).map_err(refused)?;
            mounts.push(v1::Mount {
                host_path: host.to_string_lossy().into_owned(),
                guest_path: m.box_path.clone(),
                read_only: m.read_only,
            });
        }
        let mut ports = Vec::new();
        for word in &req.publish {
            ports.push(boxd_client::spec::parse_publish(word).map_err(|e| e.to_string())?);
        }
        let mut env = req.env.clone();
        env.remove(MARK.0);
        env.insert(MARK.0.into(), MARK.1.into());
        let mut client = self.client().await?;
        let exists = self.inspect(&mut client, &req.name).await.ok();
        match &exists {
            Some(info) => p.may_use(&req.name, made_by_mcp(info)).map_err(refused)?,
            None => p
                .one_more_box(self.made_here(&mut client).await?)
                .map_err(refused)?,
        }
        let spec = BoxSpec::new(boxd_client::spec::image_arg(&req.image))
            .mounts(mounts)
            .envs(env)
            .allow_net(req.allow_net.clone())
            .ports(ports)
            .memory_mib(req.memory_mib)
            .cpus(req.cpus)
            .working_dir(req.working_dir.clone());
        let created = boxd_client::boxes::create(
            &mut client,
            &req.name,
            spec,
            v1::IfExists::SameSpec,
            |_| async {},
        )
        .await
        .map_err(status)?;
        let mut info = created.info;
        if req.start.unwrap_or(true) && info.state() != v1::BoxState::Running {
            info = client
                .start_box(v1::StartBoxRequest {
                    name: req.name.clone(),
                })
                .await
                .map_err(status)?
                .into_inner()
                .r#box
                .unwrap_or(info);
        }
        Ok(Json(summary(info)))
    }

    #[tool(description = "Start a stopped box (its files are as they were).")]
    async fn start_box(&self, Parameters(b): Parameters<BoxName>) -> Answer<Done> {
        let mut client = self.client().await?;
        self.usable(&mut client, &b.name).await?;
        let info = client
            .start_box(v1::StartBoxRequest {
                name: b.name.clone(),
            })
            .await
            .map_err(status)?
            .into_inner()
            .r#box
            .unwrap_or_default();
        Ok(Json(Done {
            name: b.name,
            state: info.state().label().into(),
        }))
    }

    #[tool(description = "Stop a running box: every process in it ends; its files stay.")]
    async fn stop_box(&self, Parameters(b): Parameters<BoxName>) -> Answer<Done> {
        let mut client = self.client().await?;
        self.usable(&mut client, &b.name).await?;
        let info = client
            .stop_box(v1::StopBoxRequest {
                name: b.name.clone(),
                force: false,
            })
            .await
            .map_err(status)?
            .into_inner()
            .r#box
            .unwrap_or_default();
        Ok(Json(Done {
            name: b.name,
            state: info.state().label().into(),
        }))
    }

    #[tool(
        description = "Remove a box with its files (stopping it first). Mounted host directories are not touched."
    )]
    async fn remove_box(&self, Parameters(b): Parameters<BoxName>) -> Answer<Done> {
        let mut client = self.client().await?;
        self.usable(&mut client, &b.name).await?;
        client
            .remove_box(v1::RemoveBoxRequest {
                name: b.name.clone(),
                force: true,
            })
            .await
            .map_err(status)?;
        Ok(Json(Done {
            name: b.name,
            state: "removed".into(),
        }))
    }

    #[tool(
        description = "Run a command in a running box and wait for it: argv (no shell) or a shell line, with working directory, user, environment, stdin text and a timeout. Returns the exit code, stdout and stderr (text, or base64 when not UTF-8; the first max_output_bytes of each)."
    )]
    async fn exec(&self, Parameters(req): Parameters<Exec>) -> Answer<ExecResult> {
        let (command, args) = match (&req.shell, req.argv.split_first()) {
            (Some(line), None) => ("sh".to_owned(), vec!["-c".to_owned(), line.clone()]),
            (None, Some((first, rest))) => (first.clone(), rest.to_vec()),
            _ => {
                return Err(
                    "give either argv (a non-empty list) or shell (a command line), not both"
                        .into(),
                );
            }
        };
        let limit = req
            .max_output_bytes
            .unwrap_or(DEFAULT_OUTPUT)
            .min(MAX_OUTPUT);
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let start = v1::ExecStart {
            box_name: req.box_name.clone(),
            command,
            args,
            env: req.env.clone(),
            working_dir: req.cwd.clone().unwrap_or_default(),
            timeout_ms: req
                .timeout_s
                .unwrap_or(DEFAULT_TIMEOUT_S)
                .saturating_mul(1000),
            stdin: req.stdin.is_some(),
            user: req.user.clone().unwrap_or_default(),
            ..Default::default()
        };
        let mut stream = ExecStream::start(&mut client, start)
            .await
            .map_err(status)?;
        if let Some(text) = req.stdin {
            let input = stream.input();
            tokio::spawn(async move {
                let _ = input.stdin(text.into_bytes()).await;
                let _ = input.close_stdin().await;
            });
        }
        let (mut out, mut err) = (Kept::new(limit), Kept::new(limit));
        loop {
            match stream.next().await.map_err(status)? {
                Some(ExecEvent::Stdout(b)) => out.take(&b),
                Some(ExecEvent::Stderr(b)) => err.take(&b),
                Some(ExecEvent::Exit(exit)) => {
                    return Ok(Json(ExecResult {
                        exit_code: exit.code,
                        signal: exit.signal,
                        timed_out: exit.timed_out,
                        error: (!exit.error.is_empty()).then_some(exit.error),
                        stdout: out.done(),
                        stderr: err.done(),
                    }));
                }
                None => return Err("boxd ended the exec without its exit".into()),
            }
        }
    }

    #[tool(
        description = "Read a file in a box (a range of it: offset and max_bytes). Returns text, or base64 when it is not UTF-8, and the file's size."
    )]
    async fn read_file(&self, Parameters(req): Parameters<ReadFile>) -> Answer<FileContent> {
        let limit = req.max_bytes.unwrap_or(DEFAULT_READ).min(MAX_READ);
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let tar = copy_out_bytes(&mut client, &req.box_name, &req.path, req.offset, limit).await?;
        let (bytes, size) = tar;
        let truncated = req.offset + (bytes.len() as u64) < size;
        Ok(Json(FileContent {
            content: output(bytes, size, truncated),
            size,
        }))
    }

    #[tool(
        description = "Write a file in a box (replacing one that is there), from text or base64. Its directory must exist."
    )]
    async fn write_file(&self, Parameters(req): Parameters<WriteFile>) -> Answer<Written> {
        let data = match req.encoding.as_deref().unwrap_or("utf8") {
            "utf8" => req.content.into_bytes(),
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(req.content.as_bytes())
                .map_err(|e| format!("content is not base64: {e}"))?,
            other => return Err(format!("encoding {other:?}: use utf8 or base64")),
        };
        let mode = u32::from_str_radix(req.mode.as_deref().unwrap_or("644"), 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or("mode: an octal number such as 644")?;
        let path = std::path::Path::new(&req.path);
        let (Some(dir), Some(file)) = (path.parent(), path.file_name()) else {
            return Err(format!("{}: not a file path", req.path));
        };
        if !path.is_absolute() {
            return Err(format!("{}: give an absolute path in the box", req.path));
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mtime(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        );
        let mut archive = tar::Builder::new(Vec::new());
        archive
            .append_data(&mut header, file, data.as_slice())
            .map_err(|e| e.to_string())?;
        let archive = archive.into_inner().map_err(|e| e.to_string())?;
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        boxd_client::copy::copy_in(
            &mut client,
            &req.box_name,
            boxd_client::copy::Source::Tar(Box::new(std::io::Cursor::new(archive))),
            &dir.to_string_lossy(),
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(Json(Written {
            bytes: data.len() as u64,
        }))
    }

    #[tool(
        description = "Copy a host file or directory into a box (as docker cp). The host path must be beneath a directory the user allowed."
    )]
    async fn copy_to_box(&self, Parameters(req): Parameters<Copy>) -> Answer<Copied> {
        let host = self.policy.host_path(&req.host_path).map_err(refused)?;
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let n = boxd_client::copy::copy_in(
            &mut client,
            &req.box_name,
            boxd_client::copy::Source::Path {
                path: host,
                follow_symlinks: false,
            },
            &req.box_path,
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(Json(Copied { archive_bytes: n }))
    }

    #[tool(
        description = "Copy a file or directory out of a box to the host (as docker cp). The host path must be beneath a directory the user allowed."
    )]
    async fn copy_from_box(&self, Parameters(req): Parameters<Copy>) -> Answer<Copied> {
        let host = self.policy.host_path(&req.host_path).map_err(refused)?;
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let n = boxd_client::copy::copy_out(
            &mut client,
            &req.box_name,
            &req.box_path,
            false,
            boxd_client::copy::Dest::Path(host),
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(Json(Copied { archive_bytes: n }))
    }
}

/// The bytes `offset..offset+limit` of the regular file `path` in the box,
/// and its size, from the copy-out archive of that one file (read as it
/// streams: what lies past the range is never kept).
async fn copy_out_bytes(
    client: &mut Client,
    box_name: &str,
    path: &str,
    offset: u64,
    limit: usize,
) -> Result<(Vec<u8>, u64), String> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(8);
    let reader = tokio::task::spawn_blocking(move || -> Result<(Vec<u8>, u64), String> {
        let mut archive = tar::Archive::new(ChannelRead {
            rx,
            pending: Vec::new(),
            at: 0,
        });
        let mut entries = archive.entries().map_err(|e| e.to_string())?;
        let mut entry = match entries.next() {
            Some(e) => e.map_err(|e| e.to_string())?,
            None => return Err("no such file".into()),
        };
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err("not a regular file (list a directory with exec, ls)".into());
        }
        let size = entry.size();
        std::io::copy(
            &mut std::io::Read::take(std::io::Read::by_ref(&mut entry), offset),
            &mut std::io::sink(),
        )
        .map_err(|e| e.to_string())?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(&mut entry, limit as u64),
            &mut bytes,
        )
        .map_err(|e| e.to_string())?;
        Ok((bytes, size))
    });
    let mut stream = client
        .copy_out(v1::CopyOutRequest {
            box_name: box_name.to_owned(),
            path: path.to_owned(),
            follow_symlinks: true,
        })
        .await
        .map_err(status)?
        .into_inner();
    let fed = async {
        let timeout = Duration::from_secs(120);
        loop {
            match tokio::time::timeout(timeout, stream.message()).await {
                Ok(Ok(Some(m))) => {
                    let tx = tx.clone();
                    let data = m.data.to_vec();
                    // The reader stops taking once it has its range: then
                    // the rest of the archive is not needed.
                    if tokio::task::spawn_blocking(move || tx.send(data))
                        .await
                        .map_or(true, |r| r.is_err())
                    {
                        return Ok(());
                    }
                }
                Ok(Ok(None)) => return Ok(()),
                Ok(Err(s)) => return Err(status(s)),
                Err(_) => return Err("the copy stalled".into()),
            }
        }
    };
    let fed = fed.await;
    drop(tx);
    drop(stream);
    let read = reader.await.map_err(|e| e.to_string())?;
    match (fed, read) {
        (Err(e), _) => Err(e),
        (Ok(()), r) => r,
    }
}

/// A blocking reader over chunks sent on a channel.
struct ChannelRead {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    pending: Vec<u8>,
    at: usize,
}

impl std::io::Read for ChannelRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.pending.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.pending = chunk;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[tool_handler]
impl ServerHandler for Boxes {
    fn get_info(&self) -> ServerInfo {
        let mut server = Implementation::new("boxd", env!("CARGO_PKG_VERSION"));
        server.title = Some("boxd: boxes for agents".into());
        ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(server)
            .with_instructions(
                "Boxes are isolated machines with their own files, processes and network. \
                 Make one with create_box (an image, e.g. a Debian or Node image), run commands \
                 in it with exec, move files with read_file/write_file/copy_to_box/copy_from_box, \
                 and remove it with remove_box when done. What a box may reach on the host \
                 (directories, network hosts, ports) is set by the user who started this server; \
                 a refusal says what they would have to allow.",
            )
    }
}
