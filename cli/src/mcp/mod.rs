//! `boxctl mcp`: an MCP server on stdio (the official Rust SDK, `rmcp`)
//! that hands boxes to any MCP client, as one more thin client of boxd's
//! gRPC API. The agent decides what runs in a box; the person who starts
//! the server decides what a box may touch ([`policy`]).
//!
//! Boxes made here carry `BOXD_MADE_BY=mcp` in their environment, so a
//! later server (each MCP session starts its own) knows them; without
//! `--any-box` the agent may use only those.

mod bounded;
mod boxes;
pub mod config;
mod exec;
mod files;
pub mod policy;

use base64::Engine as _;
use boxd_client::{Client, ErrorKind, v1};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{Implementation, ServerCapabilities, ServerInfo};
use rmcp::{Json, ServerHandler, ServiceExt, tool_handler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Ctx, Failure};
use policy::{Policy, Refused};

/// What `boxctl mcp --help` says after the flags.
pub const HELP: &str = "\
Tools:
  boxes   list_boxes, create_box, start_box, stop_box, remove_box,
          clone_box, box_stats, snapshot_create, snapshot_list,
          snapshot_restore
  exec    exec (to the end, with a timeout and an output limit),
          exec_start, exec_output (read by offsets), exec_kill
  files   read_file (a range), write_file, list_files, stat_path,
          make_dir, remove_path, copy_to_box, copy_from_box (host paths
          only beneath --allow-mount)

Policy: a request past it is a tool error naming the flag that would allow
it. The agent may use only boxes made through MCP (marked BOXD_MADE_BY=mcp)
unless --any-box. The [mcp] section of boxd's config.toml adds to the flags
(allow-mount, allow-net, allow-image, allow-publish, max-boxes, max-memory,
max-cpus, any-box).

An MCP client's configuration:
  {\"command\": \"boxctl\", \"args\": [\"mcp\", \"--allow-mount\", \"/path/to/project\"]}

See docs/mcp.md.";

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
        tools: Boxes::box_tools() + Boxes::exec_tools() + Boxes::file_tools(),
    };
    let running = server
        .serve((
            bounded::Lines::new(tokio::io::stdin(), bounded::MAX_LINE),
            tokio::io::stdout(),
        ))
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
    tools: ToolRouter<Boxes>,
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

#[derive(Debug, Serialize, JsonSchema, Default)]
pub(super) struct Output {
    /// The text, or base64 when it is not UTF-8 (see `encoding`).
    pub(super) text: String,
    /// `utf8` or `base64`.
    pub(super) encoding: String,
    /// Bytes the command wrote to this stream.
    pub(super) bytes: u64,
    /// Whether only the first `max_output_bytes` are here.
    pub(super) truncated: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Done {
    name: String,
    state: String,
}

impl Done {
    /// A box's name and the state a reply left it in.
    fn of(name: String, info: Option<v1::BoxInfo>) -> Done {
        Done {
            name,
            state: info.unwrap_or_default().state().label().into(),
        }
    }
}

fn made_by_mcp(info: &v1::BoxInfo) -> bool {
    info.spec
        .as_ref()
        .and_then(|s| s.env.get(MARK.0))
        .is_some_and(|v| v == MARK.1)
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

#[tool_handler(router = self.tools)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_and_the_docs_name_every_tool() {
        let tools = Boxes::box_tools() + Boxes::exec_tools() + Boxes::file_tools();
        let docs = include_str!("../../../docs/mcp.md");
        let all = tools.list_all();
        assert!(all.len() >= 20, "{} tools", all.len());
        for t in all {
            assert!(
                HELP.contains(&*t.name),
                "boxctl mcp --help lacks {}",
                t.name
            );
            assert!(
                docs.contains(&format!("`{}`", t.name)),
                "docs/mcp.md lacks {}",
                t.name
            );
            assert!(
                t.description.as_deref().is_some_and(|d| d.len() > 20),
                "{}",
                t.name
            );
        }
    }
}
