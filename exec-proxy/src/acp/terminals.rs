//! ACP's `terminal/*` methods, served by the proxy in the box: each
//! terminal is an exec through boxd, its stdout and stderr kept together
//! as the output an editor's terminal would show.
//!
//! Invariants: a terminal's command runs in the box, never on the host;
//! its kept output is at most its `outputByteLimit` (and at most
//! [`MAX_OUTPUT`]), cut from the front at a character boundary; its exit
//! is recorded after its last output; a released terminal's command is
//! killed, and its id answers nothing afterwards, while what it showed
//! stays available to tool calls that embed it (the last
//! [`DISPLAY_BYTES`] of it, for the last [`KEPT_DISPLAYS`] terminals).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use boxd_client::{Client, ExecEvent, ExecInput, ExecStream, v1};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use super::jsonrpc::code;
use super::rewrite::fenced;

/// The most output a terminal keeps (16 MiB), whatever it asks for: one
/// `terminal/output` answer then stays well inside what the official SDKs
/// read as one message (32 MiB; a larger one ends their connection).
pub const MAX_OUTPUT: usize = 16 << 20;
/// Terminals alive (not released) at once, per proxy.
pub const MAX_TERMINALS: usize = 64;
/// What a tool call shows of a terminal: its last 256 KiB.
pub const DISPLAY_BYTES: usize = 256 << 10;
/// Released terminals whose output tool calls can still show.
pub const KEPT_DISPLAYS: usize = 256;

/// A failed call: a JSON-RPC error code and message.
pub type CallError = (i64, String);

/// How a terminal's command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<u32>,
    pub signal: Option<String>,
}

impl Exit {
    fn of(exit: &v1::ExecExit) -> Exit {
        Exit {
            code: exit.code.and_then(|c| u32::try_from(c).ok()),
            signal: exit.signal.map(signal_name),
        }
    }

    fn json(&self) -> Value {
        json!({"exitCode": self.code, "signal": self.signal})
    }
}

fn signal_name(n: i32) -> String {
    nix::sys::signal::Signal::try_from(n)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("SIG{n}"))
}

/// Output kept from the end, cut at a character boundary.
#[derive(Debug, Default)]
struct Output {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Output {
    fn new(limit: usize) -> Output {
        Output {
            bytes: Vec::new(),
            limit,
            truncated: false,
        }
    }

    fn push(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
        // Compact once past twice the limit (plus a little), so that a
        // long stream costs amortized constant work per byte.
        if self.bytes.len() > self.limit.saturating_mul(2).max(self.limit + 64 * 1024) {
            self.trim();
        }
    }

    /// Keeps the last `limit` bytes, starting at a character boundary.
    fn trim(&mut self) {
        if self.bytes.len() <= self.limit {
            return;
        }
        let mut cut = self.bytes.len() - self.limit;
        while cut < self.bytes.len() && (self.bytes[cut] & 0xC0) == 0x80 {
            cut += 1;
        }
        self.bytes.drain(..cut);
        self.truncated = true;
    }

    /// The output as text: the kept bytes, a sequence the command has not
    /// finished writing held back while it runs.
    fn text(&mut self, running: bool) -> String {
        self.trim();
        let mut end = self.bytes.len();
        if running {
            end = complete_prefix(&self.bytes);
        }
        String::from_utf8_lossy(&self.bytes[..end]).into_owned()
    }

    /// The last `max` bytes as text, for display.
    fn tail(&mut self, max: usize) -> (String, bool) {
        self.trim();
        let mut start = self.bytes.len().saturating_sub(max);
        while start < self.bytes.len() && (self.bytes[start] & 0xC0) == 0x80 {
            start += 1;
        }
        (
            String::from_utf8_lossy(&self.bytes[start..]).into_owned(),
            start > 0 || self.truncated,
        )
    }
}

/// The length of `b` without a UTF-8 sequence cut short at its end.
fn complete_prefix(b: &[u8]) -> usize {
    let n = b.len();
    for back in 1..=3.min(n) {
        let byte = b[n - back];
        if byte & 0xC0 == 0x80 {
            continue;
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if need > back { n - back } else { n };
    }
    n
}

struct Terminal {
    session_id: String,
    output: Output,
    exit: watch::Receiver<Option<Exit>>,
    input: ExecInput,
}

/// The proxy's terminals.
#[derive(Default)]
pub struct Terminals {
    live: HashMap<String, Terminal>,
    /// What released terminals showed, oldest first.
    shown: VecDeque<(String, String)>,
    next: u64,
}

/// Where and how a terminal's command runs when the request does not say.
pub struct Defaults {
    pub box_name: String,
    pub socket: std::path::PathBuf,
    pub env: HashMap<String, String>,
    /// The session's working directory in the box, by session id.
    pub cwd: Option<String>,
}

/// The shared state, and a signal that some terminal's output changed
/// (what tool calls show is refreshed from it).
#[derive(Clone)]
pub struct Shared {
    pub terminals: Arc<Mutex<Terminals>>,
    pub changed: Arc<Notify>,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            terminals: Arc::new(Mutex::new(Terminals::default())),
            changed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Terminals> {
        self.terminals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `terminal/create`: starts the command in the box and answers with
    /// its id at once. With no `args`, `command` is a shell command line
    /// (`sh -c`), as agents send it to editors, which run it in a shell.
    pub async fn create(
        &self,
        client: &mut Client,
        params: &Value,
        defaults: &Defaults,
    ) -> Result<Value, CallError> {
        let session_id = str_field(params, "sessionId")?.to_owned();
        let command = str_field(params, "command")?.to_owned();
        let args: Vec<String> = match params.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| invalid("args must be strings"))?,
            Some(_) => return Err(invalid("args must be an array of strings")),
        };
        let mut env = defaults.env.clone();
        if let Some(list) = params.get("env").and_then(Value::as_array) {
            for e in list {
                let (Some(k), Some(v)) = (
                    e.get("name").and_then(Value::as_str),
                    e.get("value").and_then(Value::as_str),
                ) else {
                    return Err(invalid("env entries are {name, value} strings"));
                };
                env.insert(k.to_owned(), v.to_owned());
            }
        }
        let limit = match params.get("outputByteLimit") {
            None | Some(Value::Null) => MAX_OUTPUT,
            Some(v) => v
                .as_u64()
                .ok_or_else(|| invalid("outputByteLimit must be a non-negative integer"))?
                .min(MAX_OUTPUT as u64) as usize,
        };
        let cwd = params
            .get("cwd")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| defaults.cwd.clone())
            .unwrap_or_default();
        if self.lock().live.len() >= MAX_TERMINALS {
            return Err((
                code::INTERNAL_ERROR,
                format!("too many terminals: release some first (at most {MAX_TERMINALS} at once)"),
            ));
        }
        let (command, args) = if args.is_empty() {
            ("sh".to_owned(), vec!["-c".to_owned(), command])
        } else {
            (command, args)
        };
        let exec = ExecStream::start(
            client,
            v1::ExecStart {
                box_name: defaults.box_name.clone(),
                command,
                args,
                env,
                working_dir: cwd,
                ..Default::default()
            },
        )
        .await
        .map_err(|s| (code::INTERNAL_ERROR, boxd_client::status_message(&s)))?
        .reconnecting(&defaults.socket);
        let (exit_tx, exit_rx) = watch::channel(None);
        let id = {
            let mut t = self.lock();
            t.next += 1;
            let id = format!("box-term-{}", t.next);
            t.live.insert(
                id.clone(),
                Terminal {
                    session_id,
                    output: Output::new(limit),
                    exit: exit_rx,
                    input: exec.input(),
                },
            );
            id
        };
        tokio::spawn(self.clone().pump(id.clone(), exec, exit_tx));
        Ok(json!({"terminalId": id}))
    }

    /// Takes a terminal's output until its exit.
    async fn pump(self, id: String, mut exec: ExecStream, exit_tx: watch::Sender<Option<Exit>>) {
        let exit = loop {
            match exec.next().await {
                Ok(Some(ExecEvent::Stdout(b) | ExecEvent::Stderr(b))) => {
                    if let Some(t) = self.lock().live.get_mut(&id) {
                        t.output.push(&b);
                    }
                    self.changed.notify_one();
                }
                Ok(Some(ExecEvent::Exit(exit))) => break exit,
                Ok(None) => {
                    break v1::ExecExit {
                        error: "boxd ended the command without an exit".into(),
                        ..Default::default()
                    };
                }
                Err(s) => {
                    break v1::ExecExit {
                        error: boxd_client::status_message(&s),
                        ..Default::default()
                    };
                }
            }
        };
        if !exit.error.is_empty()
            && let Some(t) = self.lock().live.get_mut(&id)
        {
            t.output
                .push(format!("\n[harness-box-exec: {}]\n", exit.error).as_bytes());
        }
        let _ = exit_tx.send(Some(Exit::of(&exit)));
        self.changed.notify_one();
    }

    /// `terminal/output`.
    pub fn output(&self, params: &Value) -> Result<Value, CallError> {
        let id = str_field(params, "terminalId")?;
        let mut t = self.lock();
        let term = find(&mut t.live, id, params)?;
        let exit = term.exit.borrow().clone();
        let output = term.output.text(exit.is_none());
        Ok(json!({
            "output": output,
            "truncated": term.output.truncated,
            "exitStatus": exit.map(|e| e.json()),
        }))
    }

    /// `terminal/wait_for_exit`: answers once the command has exited.
    pub async fn wait_for_exit(&self, params: &Value) -> Result<Value, CallError> {
        let id = str_field(params, "terminalId")?;
        let mut rx = {
            let mut t = self.lock();
            find(&mut t.live, id, params)?.exit.clone()
        };
        let exit = rx
            .wait_for(Option::is_some)
            .await
            .map_err(|_| (code::INTERNAL_ERROR, format!("terminal {id} was released")))?
            .clone()
            .expect("waited for Some");
        Ok(exit.json())
    }

    /// `terminal/kill`: the command is killed; the terminal stays.
    pub async fn kill(&self, params: &Value) -> Result<Value, CallError> {
        let id = str_field(params, "terminalId")?;
        let input = {
            let mut t = self.lock();
            let term = find(&mut t.live, id, params)?;
            if term.exit.borrow().is_some() {
                return Ok(json!({}));
            }
            term.input.clone()
        };
        let _ = input.signal("SIGKILL").await;
        Ok(json!({}))
    }

    /// `terminal/release`: the command is killed if it still runs, and the
    /// id answers nothing from now on.
    pub async fn release(&self, params: &Value) -> Result<Value, CallError> {
        let id = str_field(params, "terminalId")?;
        let (input, running) = {
            let mut t = self.lock();
            find(&mut t.live, id, params)?;
            let mut term = t.live.remove(id).expect("found");
            let running = term.exit.borrow().is_none();
            let (text, cut) = term.output.tail(DISPLAY_BYTES);
            t.shown.push_back((id.to_owned(), display(&text, cut)));
            while t.shown.len() > KEPT_DISPLAYS {
                t.shown.pop_front();
            }
            (term.input, running)
        };
        if running {
            let _ = input.signal("SIGKILL").await;
        }
        Ok(json!({}))
    }

    /// What a tool call embedding terminal `id` shows: its output so far
    /// as a code block; `None` for an id this proxy never gave out.
    pub fn show(&self, id: &str) -> Option<String> {
        let mut t = self.lock();
        if let Some(term) = t.live.get_mut(id) {
            let (text, cut) = term.output.tail(DISPLAY_BYTES);
            return Some(display(&text, cut));
        }
        t.shown
            .iter()
            .rev()
            .find(|(i, _)| i == id)
            .map(|(_, shown)| shown.clone())
    }

    /// Whether `id` is a terminal this proxy gave out (live or released).
    pub fn knows(&self, id: &str) -> bool {
        let t = self.lock();
        t.live.contains_key(id) || t.shown.iter().any(|(i, _)| i == id)
    }

    /// Kills every live terminal's command (the proxy is going).
    pub async fn kill_all(&self) {
        let inputs: Vec<ExecInput> = self.lock().live.values().map(|t| t.input.clone()).collect();
        for i in inputs {
            let _ = i.signal("SIGKILL").await;
        }
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared::new()
    }
}

fn display(text: &str, cut: bool) -> String {
    let shown = fenced(text);
    if cut {
        format!("(earlier output not shown)\n{shown}")
    } else {
        shown
    }
}

fn find<'a>(
    live: &'a mut HashMap<String, Terminal>,
    id: &str,
    params: &Value,
) -> Result<&'a mut Terminal, CallError> {
    let term = live.get_mut(id).ok_or_else(|| {
        invalid(&format!(
            "unknown terminal {id:?} (never created, or released)"
        ))
    })?;
    if let Some(s) = params.get("sessionId").and_then(Value::as_str)
        && s != term.session_id
    {
        return Err(invalid(&format!(
            "terminal {id:?} belongs to another session"
        )));
    }
    Ok(term)
}

fn str_field<'a>(params: &'a Value, name: &str) -> Result<&'a str, CallError> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(&format!("{name} (a string) is required")))
}

fn invalid(message: &str) -> CallError {
    (code::INVALID_PARAMS, message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_from_the_front_at_a_character_boundary() {
        let mut o = Output::new(5);
        o.push("aé€".as_bytes()); // 1 + 2 + 3 = 6 bytes
        assert_eq!(o.text(false), "é€");
        assert!(o.truncated);
        let mut o = Output::new(4);
        o.push("é€".as_bytes()); // 5 bytes: cutting 1 lands inside é
        assert_eq!(o.text(false), "€", "never half a character");
        let mut o = Output::new(100);
        o.push(b"ok");
        assert_eq!(o.text(false), "ok");
        assert!(!o.truncated);
    }

    #[test]
    fn a_running_command_s_half_written_character_is_held_back() {
        let mut o = Output::new(100);
        o.push(&"a€".as_bytes()[..3]);
        assert_eq!(o.text(true), "a");
        o.push(&"€".as_bytes()[2..]);
        assert_eq!(o.text(true), "a€");
        let mut done = Output::new(100);
        done.push(&[b'a', 0xE2]);
        assert_eq!(
            done.text(false),
            "a\u{FFFD}",
            "an exited command's bytes are all shown"
        );
        assert_eq!(complete_prefix(b"abc"), 3);
        assert_eq!(complete_prefix(&[0xF0, 0x9F, 0x98]), 0);
        assert_eq!(complete_prefix(&[0xF0, 0x9F, 0x98, 0x80]), 4);
    }

    #[test]
    fn a_long_stream_costs_little_and_keeps_its_tail() {
        let mut o = Output::new(1000);
        for i in 0..100_000u32 {
            o.push(format!("{i}\n").as_bytes());
        }
        assert!(o.bytes.len() <= 2 * 1000 + 64 * 1024);
        let text = o.text(false);
        assert!(text.ends_with("99999\n"));
        assert!(text.len() <= 1000);
        let (tail, cut) = o.tail(10);
        assert_eq!(tail, "9998\n99999\n"[1..].to_string());
        assert!(cut);
    }

    #[test]
    fn exits_name_their_signal() {
        let e = Exit::of(&v1::ExecExit {
            signal: Some(9),
            ..Default::default()
        });
        assert_eq!(e.json(), json!({"exitCode": null, "signal": "SIGKILL"}));
        let e = Exit::of(&v1::ExecExit {
            code: Some(3),
            ..Default::default()
        });
        assert_eq!(e.json(), json!({"exitCode": 3, "signal": null}));
    }
}
