//! The tools that run commands in a box: to the end in one call, or
//! started, read as they go and killed.

use std::collections::HashMap;

use boxd_client::{ExecEvent, ExecStream, v1};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{Json, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Answer, Boxes, DEFAULT_OUTPUT, DEFAULT_TIMEOUT_S, Kept, MAX_OUTPUT, Output, status};

/// What to run, and where: the fields `exec` and `exec_start` share.
#[derive(Debug, Deserialize, JsonSchema)]
struct Command {
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
}

impl Command {
    /// The request, killed after `timeout_s` seconds (0: never).
    fn start(self, timeout_s: u64) -> Result<v1::ExecStart, String> {
        let (command, args) = match (self.shell, self.argv.split_first()) {
            (Some(line), None) => ("sh".to_owned(), vec!["-c".to_owned(), line]),
            (None, Some((first, rest))) => (first.clone(), rest.to_vec()),
            _ => {
                return Err(
                    "give either argv (a non-empty list) or shell (a command line), not both"
                        .into(),
                );
            }
        };
        Ok(v1::ExecStart {
            box_name: self.box_name,
            command,
            args,
            env: self.env,
            working_dir: self.cwd.unwrap_or_default(),
            timeout_ms: timeout_s.saturating_mul(1000),
            user: self.user.unwrap_or_default(),
            ..Default::default()
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Exec {
    #[serde(flatten)]
    command: Command,
    /// Text given to the command's stdin (then closed).
    stdin: Option<String>,
    /// Killed after this many seconds (default 120; 0: no limit).
    timeout_s: Option<u64>,
    /// Output kept of each stream, in bytes (default 1 MiB, at most
    /// 16 MiB); the rest is counted and dropped.
    max_output_bytes: Option<usize>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct ExecResult {
    pub(super) exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    pub(super) signal: Option<i32>,
    pub(super) timed_out: bool,
    /// Why it could not run (126: cannot execute, 127: not found), or that
    /// its box ended.
    pub(super) error: Option<String>,
    pub(super) stdout: Output,
    pub(super) stderr: Output,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct StartExec {
    #[serde(flatten)]
    command: Command,
    /// Killed after this many seconds (default: no limit).
    timeout_s: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Started {
    /// Read its output with exec_output, end it with exec_kill.
    exec_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ReadExec {
    exec_id: String,
    /// Bytes of stdout already read (0 at first; then the
    /// `next_stdout_offset` of the previous answer).
    #[serde(default)]
    stdout_offset: u64,
    #[serde(default)]
    stderr_offset: u64,
    /// Output to return at most, both streams together (default 1 MiB).
    max_bytes: Option<usize>,
    /// How long to wait for output or the exit when none is there yet
    /// (default 1000 ms, at most 30000).
    wait_ms: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ExecProgress {
    stdout: Output,
    stderr: Output,
    /// Where the next read starts.
    next_stdout_offset: u64,
    next_stderr_offset: u64,
    /// Output older than the offsets asked for that boxd no longer keeps
    /// (it keeps the last 1 MiB of each stream), in bytes.
    skipped_bytes: u64,
    running: bool,
    /// Once it ended.
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    error: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct KillExec {
    exec_id: String,
    /// A signal name or number (default KILL).
    signal: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Signalled {
    exec_id: String,
    signal: String,
}

impl Boxes {
    /// Runs `start` to its end, its stdin `stdin` (then closed), keeping
    /// `limit` bytes of each stream.
    pub(super) async fn run_to_end(
        &self,
        start: v1::ExecStart,
        stdin: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<ExecResult, String> {
        let mut client = self.client().await?;
        let start = v1::ExecStart {
            stdin: stdin.is_some(),
            ..start
        };
        // Reattaches through a daemon restart, as the other clients do.
        let mut stream = ExecStream::start(&mut client, start)
            .await
            .map_err(status)?
            .reconnecting(self.ctx.paths.socket.clone());
        if let Some(data) = stdin {
            let input = stream.input();
            tokio::spawn(async move {
                let _ = input.stdin(data).await;
                let _ = input.close_stdin().await;
            });
        }
        let (mut out, mut err) = (Kept::new(limit), Kept::new(limit));
        loop {
            match stream.next().await.map_err(status)? {
                Some(ExecEvent::Stdout(b)) => out.take(&b),
                Some(ExecEvent::Stderr(b)) => err.take(&b),
                Some(ExecEvent::Exit(exit)) => {
                    return Ok(ExecResult {
                        exit_code: exit.code,
                        signal: exit.signal,
                        timed_out: exit.timed_out,
                        error: (!exit.error.is_empty()).then_some(exit.error),
                        stdout: out.done(),
                        stderr: err.done(),
                    });
                }
                None => return Err("boxd ended the exec without its exit".into()),
            }
        }
    }

    /// The box of exec `id`, which the policy must let the agent use.
    async fn exec_box(&self, id: &str) -> Result<String, String> {
        let mut client = self.client().await?;
        let execs = client
            .list_execs(v1::ListExecsRequest::default())
            .await
            .map_err(status)?
            .into_inner();
        let Some(e) = execs.execs.into_iter().find(|e| e.exec_id == id) else {
            return Err(format!("no exec {id} (NotFound)"));
        };
        self.usable(&mut client, &e.box_name).await?;
        Ok(e.box_name)
    }
}

#[tool_router(router = exec_tools, vis = "pub(super)")]
impl Boxes {
    #[tool(
        description = "Run a command in a running box and wait for it: argv (no shell) or a shell line, with working directory, user, environment, stdin text and a timeout (default 120 s). Returns the exit code, stdout and stderr (text, or base64 when not UTF-8; the first max_output_bytes of each). For a long command use exec_start."
    )]
    async fn exec(&self, Parameters(req): Parameters<Exec>) -> Answer<ExecResult> {
        let limit = req
            .max_output_bytes
            .unwrap_or(DEFAULT_OUTPUT)
            .min(MAX_OUTPUT);
        let mut client = self.client().await?;
        self.usable(&mut client, &req.command.box_name).await?;
        let start = req
            .command
            .start(req.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S))?;
        let stdin = req.stdin.map(String::into_bytes);
        self.run_to_end(start, stdin, limit).await.map(Json)
    }

    #[tool(
        description = "Start a long command in a running box and return at once with its exec_id: it keeps running (also across this server's end); read its output as it comes with exec_output and end it with exec_kill."
    )]
    async fn exec_start(&self, Parameters(req): Parameters<StartExec>) -> Answer<Started> {
        let mut client = self.client().await?;
        self.usable(&mut client, &req.command.box_name).await?;
        let start = v1::ExecStart {
            detach: true,
            ..req.command.start(req.timeout_s.unwrap_or(0))?
        };
        let stream = ExecStream::start(&mut client, start)
            .await
            .map_err(status)?;
        Ok(Json(Started {
            exec_id: stream.exec_id().to_owned(),
        }))
    }

    #[tool(
        description = "Read what a command started with exec_start has written since the given offsets (waiting up to wait_ms for something new), and whether it is still running or how it ended. Pass back next_stdout_offset and next_stderr_offset to read on."
    )]
    async fn exec_output(&self, Parameters(req): Parameters<ReadExec>) -> Answer<ExecProgress> {
        self.exec_box(&req.exec_id).await?;
        let limit = req.max_bytes.unwrap_or(DEFAULT_OUTPUT).min(MAX_OUTPUT);
        let wait = std::time::Duration::from_millis(req.wait_ms.unwrap_or(1000).min(30_000));
        let mut client = self.client().await?;
        let mut stream = ExecStream::attach_with(
            &mut client,
            v1::ExecAttach {
                exec_id: req.exec_id.clone(),
                stdout_offset: req.stdout_offset,
                stderr_offset: req.stderr_offset,
                resumable: false,
            },
        )
        .await
        .map_err(status)?;
        let from = stream.offsets();
        let skipped = from.stdout.saturating_sub(req.stdout_offset)
            + from.stderr.saturating_sub(req.stderr_offset);
        let (mut out, mut err) = (Kept::new(limit), Kept::new(limit));
        let deadline = tokio::time::Instant::now() + wait;
        let mut exit = None;
        while out.total + err.total < limit as u64 {
            // Once output came, only what is there already is waited for.
            let until = if out.total + err.total > 0 {
                tokio::time::Instant::now() + std::time::Duration::from_millis(20)
            } else {
                deadline
            };
            match tokio::time::timeout_at(until.min(deadline), stream.next()).await {
                Err(_) => break,
                Ok(event) => match event.map_err(status)? {
                    Some(ExecEvent::Stdout(b)) => out.take(&b),
                    Some(ExecEvent::Stderr(b)) => err.take(&b),
                    Some(ExecEvent::Exit(e)) => {
                        exit = Some(e);
                        break;
                    }
                    None => break,
                },
            }
        }
        // What was read past the limit is not returned, so not counted:
        // the next read gets it again.
        let next_stdout_offset = from.stdout + out.bytes.len() as u64;
        let next_stderr_offset = from.stderr + err.bytes.len() as u64;
        let (stdout, stderr) = (out.done(), err.done());
        Ok(Json(ExecProgress {
            next_stdout_offset,
            next_stderr_offset,
            skipped_bytes: skipped,
            running: exit.is_none(),
            exit_code: exit.as_ref().and_then(|e| e.code),
            signal: exit.as_ref().and_then(|e| e.signal),
            timed_out: exit.as_ref().is_some_and(|e| e.timed_out),
            error: exit
                .as_ref()
                .filter(|e| !e.error.is_empty())
                .map(|e| e.error.clone()),
            stdout,
            stderr,
        }))
    }

    #[tool(description = "Send a signal (default KILL) to a command started with exec_start.")]
    async fn exec_kill(&self, Parameters(req): Parameters<KillExec>) -> Answer<Signalled> {
        self.exec_box(&req.exec_id).await?;
        let signal = req.signal.unwrap_or_else(|| "KILL".into());
        let mut client = self.client().await?;
        client
            .signal_exec(v1::SignalExecRequest {
                exec_id: req.exec_id.clone(),
                signal: Some(v1::Signal {
                    signal: signal.clone(),
                }),
            })
            .await
            .map_err(status)?;
        Ok(Json(Signalled {
            exec_id: req.exec_id,
            signal,
        }))
    }
}
