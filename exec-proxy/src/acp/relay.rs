//! Where each ACP message goes, and what it becomes on the way: the
//! proxy's decisions, without its I/O (the serving loop in `mod.rs` reads
//! lines, asks the relay, and does what it says).
//!
//! From the client (editor) to the agent, every message passes; requests
//! are remembered so that their answers can be mapped back, and session
//! setup, prompts and `initialize` are rewritten ([`rewrite`]). From the
//! agent to the client only what the client should act on passes:
//!
//! | agent → client | what the proxy does |
//! | --- | --- |
//! | `terminal/*` | serves it in the box ([`Work::Terminal`]) |
//! | `fs/read_text_file`, `fs/write_text_file` | served by the proxy: on the host beneath the mount's descriptor inside a mount, else in the box ([`files::route`]); never to the editor |
//! | `session/request_permission`, `elicitation/create` | passes (paths mapped) |
//! | `session/update` | passes (paths mapped, terminals shown as text) |
//! | `elicitation/complete`, `auth/status_update`, `$/cancel_request` | pass |
//! | any other request | refused with a JSON-RPC error naming the reason |
//! | any other notification | dropped, with a warning on stderr |
//! | a response to a request the client never made | dropped, with a warning |
//!
//! Invariants: nothing the agent sends reaches the client unless it parsed
//! as one JSON-RPC message and was let through above; what reaches the
//! client is what the relay checked (re-serialized, so no parser
//! difference between the two can smuggle anything); a line the client
//! sends that the relay does not change reaches the agent byte for byte.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use boxd_client::jsonl::lines::Line;
use boxd_fs::roots::Root;
use serde_json::{Value, json};

use super::files;
use super::jsonrpc::{self, Kind, code};
use super::mounts::Mounts;
use super::rewrite::{self, FsCaps, Relaunch};
use super::terminals;

/// The longest line either side may send (64 MiB): a file's whole text
/// travels in one `fs/*` message.
pub const MAX_LINE: usize = 64 << 20;

/// Tool calls whose embedded terminals are refreshed at once, at most.
const MAX_EMBEDS: usize = 256;

/// What to do with a message.
#[derive(Debug)]
pub enum Out {
    /// A line for the agent's stdin (no newline).
    Agent(Vec<u8>),
    /// A line for the client (no newline).
    Client(Vec<u8>),
    /// An agent request the proxy serves; the answer goes to the agent.
    Serve(Work),
    /// A session-setup request whose MCP servers must be decided in the box
    /// before it goes to the agent ([`super::mcp`]).
    Setup(Value),
    /// A warning for stderr.
    Warn(String),
}

/// An agent request served by the proxy.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    Terminal {
        id: Value,
        method: String,
        params: Value,
        /// The session's working directory in the box.
        cwd: Option<String>,
    },
    ReadInBox {
        id: Value,
        params: Value,
    },
    ReadOnHost {
        id: Value,
        root: Arc<Root>,
        rel: PathBuf,
        params: Value,
    },
    WriteOnHost {
        id: Value,
        root: Arc<Root>,
        rel: PathBuf,
        params: Value,
    },
    WriteInBox {
        id: Value,
        params: Value,
    },
}

impl Work {
    pub fn id(&self) -> &Value {
        match self {
            Work::Terminal { id, .. }
            | Work::ReadInBox { id, .. }
            | Work::WriteInBox { id, .. }
            | Work::ReadOnHost { id, .. }
            | Work::WriteOnHost { id, .. } => id,
        }
    }
}

/// What a client request was, for mapping its answer.
#[derive(Debug, Clone, PartialEq)]
enum Asked {
    Initialize,
    /// A session-setup request; its session runs in `cwd` (box path).
    Setup {
        cwd: Option<String>,
        session: Option<String>,
    },
    List,
    Other,
}

/// A tool call that embeds one of the proxy's terminals: the agent's last
/// `session/update` params for it, shown again as the output grows.
struct Embed {
    params: Value,
    shown: String,
}

/// The relay's state.
pub struct Relay {
    pub mounts: Mounts,
    relaunch: Relaunch,
    terminals: terminals::Shared,
    /// How the box and its mounts were described, for errors.
    box_name: String,
    /// The flags' mounts that the reused box lacks (to say so on errors).
    missing_mounts: Vec<String>,
    fs: FsCaps,
    from_client: HashMap<String, Asked>,
    to_client: HashSet<String>,
    served: HashSet<String>,
    sessions: HashMap<String, String>,
    embeds: HashMap<(String, String), Embed>,
    embed_order: VecDeque<(String, String)>,
}

impl Relay {
    pub fn new(
        box_name: &str,
        mounts: Mounts,
        missing_mounts: Vec<String>,
        relaunch: Relaunch,
        terminals: terminals::Shared,
    ) -> Relay {
        Relay {
            mounts,
            relaunch,
            terminals,
            box_name: box_name.to_owned(),
            missing_mounts,
            fs: FsCaps::default(),
            from_client: HashMap::new(),
            to_client: HashSet::new(),
            served: HashSet::new(),
            sessions: HashMap::new(),
            embeds: HashMap::new(),
            embed_order: VecDeque::new(),
        }
    }

    /// A line from the client.
    pub fn from_client(&mut self, line: Line) -> Vec<Out> {
        let raw = match line {
            Line::Request(raw) => raw,
            Line::TooLarge { len } => {
                return vec![Out::Client(to_line(&jsonrpc::error(
                    Value::Null,
                    code::INVALID_REQUEST,
                    format!(
                        "a line of {len} bytes is longer than the {} MiB harness-box-exec accepts",
                        MAX_LINE >> 20
                    ),
                )))];
            }
        };
        let Ok(mut msg) = serde_json::from_slice::<Value>(&raw) else {
            return vec![Out::Client(to_line(&jsonrpc::error(
                Value::Null,
                code::PARSE_ERROR,
                "not JSON (ACP is one JSON-RPC message per line)",
            )))];
        };
        match jsonrpc::classify(&msg) {
            None => vec![Out::Client(to_line(&jsonrpc::error(
                Value::Null,
                code::INVALID_REQUEST,
                "not a JSON-RPC 2.0 message (batches are not part of ACP v1)",
            )))],
            Some(Kind::Notification { .. }) => vec![Out::Agent(raw)],
            Some(Kind::Response { id }) => {
                if self.to_client.remove(&jsonrpc::id_key(&id)) {
                    vec![Out::Agent(raw)]
                } else {
                    vec![Out::Warn(format!(
                        "dropped the client's answer to request {id}, which the agent never sent it"
                    ))]
                }
            }
            Some(Kind::Request { id, method }) => self.client_request(id, &method, raw, &mut msg),
        }
    }

    fn client_request(
        &mut self,
        id: Value,
        method: &str,
        raw: Vec<u8>,
        msg: &mut Value,
    ) -> Vec<Out> {
        let key = jsonrpc::id_key(&id);
        let params = msg.get_mut("params");
        let (asked, out) = match (method, params) {
            ("initialize", Some(p)) => {
                self.fs = rewrite::initialize_request(p);
                (Asked::Initialize, Out::Agent(to_line(msg)))
            }
            ("session/new" | "session/load" | "session/resume" | "session/fork", Some(p)) => {
                let session = p
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                match rewrite::session_dirs(p, &self.mounts) {
                    Ok(cwd) => {
                        let has_mcp = p
                            .get("mcpServers")
                            .and_then(Value::as_array)
                            .is_some_and(|a| !a.is_empty());
                        let out = if has_mcp {
                            Out::Setup(msg.clone())
                        } else {
                            Out::Agent(to_line(msg))
                        };
                        (Asked::Setup { cwd, session }, out)
                    }
                    Err(e) => {
                        return vec![Out::Client(to_line(&jsonrpc::error(
                            id,
                            code::INVALID_PARAMS,
                            self.unmapped_message(&e),
                        )))];
                    }
                }
            }
            ("session/list", Some(p)) => {
                rewrite::list_filter(p, &self.mounts);
                (Asked::List, Out::Agent(to_line(msg)))
            }
            ("session/prompt", Some(p)) => {
                let before = p.clone();
                rewrite::prompt(p, &self.mounts);
                let out = if *p == before {
                    Out::Agent(raw)
                } else {
                    Out::Agent(to_line(msg))
                };
                (Asked::Other, out)
            }
            _ => (Asked::Other, Out::Agent(raw)),
        };
        self.from_client.insert(key, asked);
        vec![out]
    }

    fn unmapped_message(&self, e: &rewrite::Unmapped) -> String {
        let mut m = format!(
            "{} {} is outside every mount of box {} (mounts: {}); start harness-box-exec with --mount {}:{} (or, from that directory, --mount-cwd)",
            e.field,
            e.path,
            self.box_name,
            self.mounts.describe(),
            e.path,
            e.path
        );
        if !self.missing_mounts.is_empty() {
            m.push_str(&format!(
                "; box {} already existed and lacks the mounts asked for ({}): remove it (boxctl rm -f {}) or choose another --box",
                self.box_name,
                self.missing_mounts.join(", "),
                self.box_name
            ));
        }
        m
    }

    /// A line from the agent.
    pub fn from_agent(&mut self, line: Line) -> Vec<Out> {
        let raw = match line {
            Line::Request(raw) => raw,
            Line::TooLarge { len } => {
                return vec![
                    Out::Warn(format!(
                        "dropped a line of {len} bytes from the agent: over the {} MiB limit",
                        MAX_LINE >> 20
                    )),
                    Out::Agent(to_line(&jsonrpc::error(
                        Value::Null,
                        code::INVALID_REQUEST,
                        format!(
                            "a line of {len} bytes is longer than the {} MiB harness-box-exec accepts",
                            MAX_LINE >> 20
                        ),
                    ))),
                ];
            }
        };
        let Ok(mut msg) = serde_json::from_slice::<Value>(&raw) else {
            return vec![Out::Warn(format!(
                "dropped {} bytes from the agent that are not JSON: {}",
                raw.len(),
                preview(&raw)
            ))];
        };
        match jsonrpc::classify(&msg) {
            None => vec![Out::Warn(format!(
                "dropped a line from the agent that is not one JSON-RPC message: {}",
                preview(&raw)
            ))],
            Some(Kind::Response { id }) => self.agent_response(id, &mut msg),
            Some(Kind::Request { id, method }) => self.agent_request(id, &method, &mut msg),
            Some(Kind::Notification { method }) => self.agent_notification(&method, &mut msg),
        }
    }

    fn agent_response(&mut self, id: Value, msg: &mut Value) -> Vec<Out> {
        let Some(asked) = self.from_client.remove(&jsonrpc::id_key(&id)) else {
            return vec![Out::Warn(format!(
                "dropped the agent's answer to request {id}, which the client never made"
            ))];
        };
        let mut out = Vec::new();
        // Auth methods, wherever an answer carries them (an initialize, or
        // any other answer or error a client might read them from), reach
        // the client only in shapes that run nothing of the agent's on the
        // host.
        for at in ["/result", "/error/data"] {
            if let Some(carrier) = msg.pointer_mut(at)
                && (carrier.get("authMethods").is_some()
                    || carrier.get("agentCapabilities").is_some())
            {
                out.extend(
                    rewrite::initialize_result(carrier, &self.relaunch)
                        .into_iter()
                        .map(Out::Warn),
                );
            }
        }
        if let Some(result) = msg.get_mut("result") {
            match asked {
                Asked::Initialize => {}
                Asked::Setup { cwd, session } => {
                    let session = result
                        .get("sessionId")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or(session);
                    if let (Some(s), Some(c)) = (session, cwd) {
                        self.sessions.insert(s, c);
                    }
                }
                Asked::List => rewrite::list_result(result, &self.mounts),
                Asked::Other => {}
            }
        }
        out.push(Out::Client(to_line(msg)));
        out
    }

    fn agent_request(&mut self, id: Value, method: &str, msg: &mut Value) -> Vec<Out> {
        let refuse = |code: i64, why: String| {
            vec![Out::Agent(to_line(&jsonrpc::error(id.clone(), code, why)))]
        };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        match method {
            "terminal/create"
            | "terminal/output"
            | "terminal/wait_for_exit"
            | "terminal/kill"
            | "terminal/release" => {
                let cwd = params
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .and_then(|s| self.sessions.get(s))
                    .cloned();
                self.served.insert(jsonrpc::id_key(&id));
                vec![Out::Serve(Work::Terminal {
                    id,
                    method: method.to_owned(),
                    params,
                    cwd,
                })]
            }
            "fs/read_text_file" | "fs/write_text_file" => {
                let write = method == "fs/write_text_file";
                if !(if write { self.fs.write } else { self.fs.read }) {
                    return refuse(
                        code::METHOD_NOT_FOUND,
                        format!("the client did not offer {method} in initialize"),
                    );
                }
                match files::route(&params, &self.mounts, write) {
                    files::Route::Host { root, rel } => {
                        self.served.insert(jsonrpc::id_key(&id));
                        vec![Out::Serve(if write {
                            Work::WriteOnHost {
                                id,
                                root,
                                rel,
                                params,
                            }
                        } else {
                            Work::ReadOnHost {
                                id,
                                root,
                                rel,
                                params,
                            }
                        })]
                    }
                    files::Route::InBox => {
                        self.served.insert(jsonrpc::id_key(&id));
                        vec![Out::Serve(if write {
                            Work::WriteInBox { id, params }
                        } else {
                            Work::ReadInBox { id, params }
                        })]
                    }
                    files::Route::Refused(code, why) => refuse(code, why),
                }
            }
            "session/request_permission" => {
                if let Some(p) = msg.get_mut("params") {
                    let t = self.terminals.clone();
                    rewrite::request_permission(p, &self.mounts, &|id| t.show(id));
                }
                self.to_client.insert(jsonrpc::id_key(&id));
                vec![Out::Client(to_line(msg))]
            }
            "elicitation/create" => {
                self.to_client.insert(jsonrpc::id_key(&id));
                vec![Out::Client(to_line(msg))]
            }
            _ => refuse(
                code::METHOD_NOT_FOUND,
                format!(
                    "harness-box-exec does not pass {method} to the client: the agent runs in box {} and the client's side of ACP acts on the host",
                    self.box_name
                ),
            ),
        }
    }

    fn agent_notification(&mut self, method: &str, msg: &mut Value) -> Vec<Out> {
        match method {
            "session/update" => {
                if let Some(p) = msg.get_mut("params") {
                    self.track_embeds(p);
                    let t = self.terminals.clone();
                    rewrite::session_update(p, &self.mounts, &|id| t.show(id));
                }
                vec![Out::Client(to_line(msg))]
            }
            "$/cancel_request" => {
                let served = msg
                    .get("params")
                    .and_then(|p| p.get("requestId"))
                    .is_some_and(|id| self.served.contains(&jsonrpc::id_key(id)));
                if served {
                    Vec::new()
                } else {
                    vec![Out::Client(to_line(msg))]
                }
            }
            "elicitation/complete" | "auth/status_update" => vec![Out::Client(to_line(msg))],
            other => vec![Out::Warn(format!(
                "dropped the agent's notification {other}: harness-box-exec passes only ACP's own to the client"
            ))],
        }
    }

    /// A served request has been answered.
    pub fn served(&mut self, id: &Value) {
        self.served.remove(&jsonrpc::id_key(id));
    }

    /// Remembers tool calls that embed one of the proxy's terminals, and
    /// forgets those whose content no longer does.
    fn track_embeds(&mut self, params: &Value) {
        let Some(update) = params.get("update") else {
            return;
        };
        let kind = update.get("sessionUpdate").and_then(Value::as_str);
        if !matches!(kind, Some("tool_call" | "tool_call_update"))
            || update.get("content").is_none()
        {
            return;
        }
        let (Some(session), Some(call)) = (
            params.get("sessionId").and_then(Value::as_str),
            update.get("toolCallId").and_then(Value::as_str),
        ) else {
            return;
        };
        let key = (session.to_owned(), call.to_owned());
        let embeds = rewrite::embedded_terminals(update);
        if embeds.iter().any(|t| self.terminals.knows(t)) {
            if !self.embeds.contains_key(&key) {
                self.embed_order.push_back(key.clone());
                while self.embed_order.len() > MAX_EMBEDS {
                    if let Some(old) = self.embed_order.pop_front() {
                        self.embeds.remove(&old);
                    }
                }
            }
            let shown = embeds
                .iter()
                .filter_map(|t| self.terminals.show(t))
                .collect::<String>();
            self.embeds.insert(
                key,
                Embed {
                    params: params.clone(),
                    shown,
                },
            );
        } else {
            self.embeds.remove(&key);
        }
    }

    /// `session/update`s for the tool calls whose terminals show something
    /// new since they were last sent.
    pub fn refresh(&mut self) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        for embed in self.embeds.values_mut() {
            let update = &embed.params["update"];
            let shown = rewrite::embedded_terminals(update)
                .iter()
                .filter_map(|t| self.terminals.show(t))
                .collect::<String>();
            if shown == embed.shown {
                continue;
            }
            embed.shown = shown;
            let mut params = json!({
                "sessionId": embed.params["sessionId"],
                "update": {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": update["toolCallId"],
                    "content": update["content"],
                },
            });
            let t = self.terminals.clone();
            rewrite::session_update(&mut params, &self.mounts, &|id| t.show(id));
            lines.push(to_line(&jsonrpc::notification("session/update", params)));
        }
        lines
    }
}

pub fn to_line(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("a JSON value serializes")
}

/// The first bytes of a line, for a warning.
fn preview(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(&raw[..raw.len().min(120)]);
    s.escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use super::super::mounts::Mount;
    use super::*;

    fn relay() -> Relay {
        Relay::new(
            "b",
            Mounts::new(vec![Mount {
                host: "/home/me/proj".into(),
                guest: "/workspace".into(),
                read_only: false,
            }]),
            Vec::new(),
            Relaunch {
                exe: "/bin/harness-box-exec".into(),
                args: vec!["--box".into(), "b".into(), "--raw".into(), "--".into()],
            },
            terminals::Shared::new(),
        )
    }

    fn line(v: Value) -> Line {
        Line::Request(serde_json::to_vec(&v).unwrap())
    }

    fn parsed(out: &Out) -> Value {
        match out {
            Out::Agent(l) | Out::Client(l) => serde_json::from_slice(l).unwrap(),
            other => panic!("not a line: {other:?}"),
        }
    }

    fn init(r: &mut Relay, fs: bool) {
        let out = r.from_client(line(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": fs, "writeTextFile": fs}, "terminal": true}}})));
        assert_eq!(
            parsed(&out[0])["params"]["clientCapabilities"]["terminal"],
            true
        );
        let back = r.from_agent(line(
            json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}),
        ));
        assert!(matches!(&back[0], Out::Client(_)));
    }

    #[test]
    fn unchanged_client_lines_pass_byte_for_byte() {
        let mut r = relay();
        let raw = br#"{"jsonrpc":"2.0","id":7,"method":"session/set_mode","params":{"modeId":"x"},  "extra":1}"#.to_vec();
        match &r.from_client(Line::Request(raw.clone()))[0] {
            Out::Agent(l) => assert_eq!(l, &raw),
            other => panic!("{other:?}"),
        }
        let note =
            br#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#.to_vec();
        assert!(
            matches!(&r.from_client(Line::Request(note.clone()))[0], Out::Agent(l) if *l == note)
        );
    }

    #[test]
    fn terminals_never_reach_the_client() {
        let mut r = relay();
        init(&mut r, true);
        for m in [
            "terminal/create",
            "terminal/output",
            "terminal/wait_for_exit",
            "terminal/kill",
            "terminal/release",
        ] {
            let out = r.from_agent(line(json!({"jsonrpc": "2.0", "id": m, "method": m, "params": {"sessionId": "s", "command": "ls", "terminalId": "t"}})));
            assert!(
                matches!(&out[..], [Out::Serve(Work::Terminal { .. })]),
                "{m}: {out:?}"
            );
        }
    }

    #[test]
    fn files_are_served_by_the_proxy_and_only_if_offered() {
        let mut r = relay();
        init(&mut r, false);
        let out = r.from_agent(line(json!({"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file", "params": {"sessionId": "s", "path": "/workspace/a"}})));
        assert_eq!(
            parsed(&out[0])["error"]["code"],
            code::METHOD_NOT_FOUND,
            "not offered"
        );
        let mut r = relay();
        init(&mut r, true);
        let out = r.from_agent(line(json!({"jsonrpc": "2.0", "id": 2, "method": "fs/read_text_file", "params": {"sessionId": "s", "path": "/etc/shadow"}})));
        assert!(
            matches!(&out[..], [Out::Serve(Work::ReadInBox { .. })]),
            "{out:?}"
        );
        let out = r.from_agent(line(json!({"jsonrpc": "2.0", "id": 3, "method": "fs/write_text_file", "params": {"sessionId": "s", "path": "/tmp/x", "content": "c"}})));
        assert!(
            matches!(&out[..], [Out::Serve(Work::WriteInBox { .. })]),
            "{out:?}"
        );
    }

    #[test]
    fn only_acp_s_own_client_methods_pass() {
        let mut r = relay();
        init(&mut r, true);
        for m in [
            "mcp/message",
            "_zed/open_browser",
            "session/new",
            "initialize",
        ] {
            let out = r.from_agent(line(
                json!({"jsonrpc": "2.0", "id": 9, "method": m, "params": {}}),
            ));
            let v = parsed(&out[0]);
            assert_eq!(v["error"]["code"], code::METHOD_NOT_FOUND, "{m}");
            assert!(
                matches!(&out[0], Out::Agent(_)),
                "the refusal goes back to the agent"
            );
        }
        let out = r.from_agent(line(
            json!({"jsonrpc": "2.0", "method": "_x/notify", "params": {}}),
        ));
        assert!(matches!(&out[..], [Out::Warn(_)]));
        let out = r.from_agent(line(json!({"jsonrpc": "2.0", "id": 10, "method": "session/request_permission",
            "params": {"sessionId": "s", "options": [], "toolCall": {"toolCallId": "t", "locations": [{"path": "/workspace/a"}]}}})));
        assert_eq!(
            parsed(&out[0])["params"]["toolCall"]["locations"][0]["path"],
            "/home/me/proj/a"
        );
        // The client's answer goes back; a second answer to it does not.
        let answer = line(
            json!({"jsonrpc": "2.0", "id": 10, "result": {"outcome": {"outcome": "cancelled"}}}),
        );
        assert!(matches!(&r.from_client(answer)[..], [Out::Agent(_)]));
        let again = line(json!({"jsonrpc": "2.0", "id": 10, "result": {}}));
        assert!(matches!(&r.from_client(again)[..], [Out::Warn(_)]));
    }

    #[test]
    fn answers_to_requests_never_made_and_junk_are_dropped() {
        let mut r = relay();
        let out = r.from_agent(line(
            json!({"jsonrpc": "2.0", "id": 77, "result": {"sessionId": "forged"}}),
        ));
        assert!(matches!(&out[..], [Out::Warn(w)] if w.contains("never made")));
        assert!(matches!(
            &r.from_agent(Line::Request(b"not json".to_vec()))[..],
            [Out::Warn(_)]
        ));
        assert!(matches!(
            &r.from_agent(Line::Request(
                b"[{\"id\":1,\"method\":\"fs/read_text_file\"}]".to_vec()
            ))[..],
            [Out::Warn(_)]
        ));
        let out = r.from_agent(Line::TooLarge { len: 1 << 30 });
        assert!(matches!(&out[..], [Out::Warn(_), Out::Agent(_)]));
        let out = r.from_client(Line::Request(b"{oops".to_vec()));
        assert_eq!(parsed(&out[0])["error"]["code"], code::PARSE_ERROR);
        let out = r.from_client(Line::TooLarge { len: 1 << 30 });
        assert_eq!(parsed(&out[0])["error"]["code"], code::INVALID_REQUEST);
    }

    /// Found by the `acp_relay` fuzz target: auth methods in an answer to
    /// a request other than `initialize` (or in an error's data) passed
    /// unchanged.
    #[test]
    fn auth_methods_are_rewritten_in_every_answer() {
        let mut r = relay();
        let bad = json!([{"id": "a", "name": "a", "_meta": {"terminal-auth": {"command": "sh", "env": {"LD_PRELOAD": "/x"}}}},
            {"id": "t", "name": "t", "type": "terminal", "args": ["x"], "env": {"LD_PRELOAD": "/x"}}]);
        r.from_client(line(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/home/me/proj", "mcpServers": []}})));
        let out = r.from_agent(line(
            json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s", "authMethods": bad}}),
        ));
        let v = parsed(out.last().unwrap());
        assert_eq!(
            v["result"]["authMethods"][0]["_meta"]["terminal-auth"]["command"],
            "/bin/harness-box-exec",
            "{v}"
        );
        assert_eq!(v["result"]["authMethods"][1]["args"], json!([]), "{v}");
        r.from_client(line(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s", "prompt": []}})));
        let out = r.from_agent(line(json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32000, "message": "auth required", "data": {"authMethods": bad}}})));
        let v = parsed(out.last().unwrap());
        let m = &v["error"]["data"]["authMethods"];
        assert!(m[0]["_meta"]["terminal-auth"].get("env").is_none(), "{v}");
        assert!(m[1]["env"].get("LD_PRELOAD").is_none(), "{v}");
    }

    #[test]
    fn sessions_map_their_directories_or_fail_naming_the_fix() {
        let mut r = relay();
        let out = r.from_client(line(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/home/me/proj", "mcpServers": []}})));
        assert_eq!(parsed(&out[0])["params"]["cwd"], "/workspace");
        r.from_agent(line(
            json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}),
        ));
        assert_eq!(r.sessions.get("s1").map(String::as_str), Some("/workspace"));
        let out = r.from_agent(line(json!({"jsonrpc": "2.0", "id": 5, "method": "terminal/create", "params": {"sessionId": "s1", "command": "ls"}})));
        assert!(
            matches!(&out[0], Out::Serve(Work::Terminal { cwd: Some(c), .. }) if c == "/workspace")
        );
        let out = r.from_client(line(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/home/me/elsewhere", "mcpServers": []}})));
        let e = parsed(&out[0]);
        assert_eq!(e["id"], 2);
        assert_eq!(e["error"]["code"], code::INVALID_PARAMS);
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("/home/me/elsewhere")
                && msg.contains("--mount /home/me/elsewhere:/home/me/elsewhere"),
            "{msg}"
        );
        assert!(
            matches!(&out[0], Out::Client(_)),
            "answered to the client, never forwarded"
        );
        let out = r.from_client(line(json!({"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {"cwd": "/home/me/proj", "mcpServers": [{"name": "x", "command": "/bin/x", "args": [], "env": []}]}})));
        assert!(matches!(&out[0], Out::Setup(_)));
    }
}
