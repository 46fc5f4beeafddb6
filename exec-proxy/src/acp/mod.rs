//! ACP mode: the proxy between an editor (the client, on this process's
//! stdio) and an agent (a command in the box), which makes the box the
//! agent's whole world while the editor keeps what it shows.
//!
//! Both sides speak ACP (JSON-RPC 2.0, one message per line). The
//! [`relay`] decides where each message goes; this module moves the bytes:
//!
//! ```text
//! stdin ─ client lines ─┐                 ┌─ agent lines ─ exec stdout
//!                       ├─ relay (decide) ┤
//! stdout ◀─ one queue ──┘  │         │    └─▶ one queue ─▶ exec stdin
//!                          ▼         ▼
//!                    terminals   files / MCP checks, in the box (boxd)
//! ```
//!
//! Invariants: stdout carries only ACP messages, through one bounded queue
//! (a client that does not read slows the agent, nothing piles up); the
//! client's messages reach the agent in the order they were sent (a
//! session set-up waits for its MCP checks, and what follows waits for
//! it); what the proxy serves runs concurrently and answers the agent by
//! id; when the agent's stdout ends the queue is flushed, live terminals
//! are killed, and the agent's exit is returned.

pub mod files;
pub mod jsonrpc;
pub mod mcp;
pub mod mounts;
pub mod relay;
pub mod rewrite;
pub mod terminals;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use boxd_client::bytes::Bytes;
use boxd_client::jsonl::lines::LineReader;
use boxd_client::stderr::Sink;
use boxd_client::tonic::Status;
use boxd_client::{Client, ExecEvent, ExecInput, ExecStream, v1};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use relay::{Out, Relay, Work};

/// How often what tool calls show of a running terminal is refreshed.
const REFRESH_EVERY: Duration = Duration::from_millis(250);

/// Lines queued toward either side.
const QUEUE: usize = 64;

/// What the serving loop needs of the box and the proxy.
pub struct Context {
    pub client: Client,
    pub socket: PathBuf,
    pub box_name: String,
    pub env: HashMap<String, String>,
    pub mounts: mounts::Mounts,
    pub missing_mounts: Vec<String>,
    pub allow_net: Vec<String>,
    pub relaunch: rewrite::Relaunch,
    pub sink: Sink,
}

/// Lines read from a byte stream, bounded ([`relay::MAX_LINE`]).
pub type Lines = LineReader<
    tokio_util::io::StreamReader<
        tokio_stream::wrappers::ReceiverStream<std::io::Result<Bytes>>,
        Bytes,
    >,
>;

/// Lines from a channel of byte chunks.
pub fn lines(rx: mpsc::Receiver<std::io::Result<Bytes>>) -> Lines {
    LineReader::with_max(
        tokio_util::io::StreamReader::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
        relay::MAX_LINE,
    )
}

/// This process's stdin as chunks, read on a plain thread (a blocked read
/// must never keep the process from exiting); the channel closes at EOF,
/// and `closed` is told so at once (provisioning stops when the client
/// has gone).
pub fn stdin_chunks(closed: Arc<tokio::sync::Notify>) -> mpsc::Receiver<std::io::Result<Bytes>> {
    use std::io::Read;
    let (tx, rx) = mpsc::channel(QUEUE);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        closed.notify_one();
    });
    rx
}

/// Serves one agent exec until its stdout ends; returns its exit.
pub async fn serve(
    cx: Context,
    exec: ExecStream,
    client_lines: Lines,
) -> Result<v1::ExecExit, Status> {
    let terminals = terminals::Shared::new();
    let relay = Arc::new(Mutex::new(Relay::new(
        &cx.box_name,
        cx.mounts.clone(),
        cx.missing_mounts.clone(),
        cx.relaunch.clone(),
        terminals.clone(),
    )));
    let input = exec.input();
    boxd_client::stdio::forward_signals(input.clone(), false);

    // The agent's stdout as lines, its stderr to ours, its exit kept.
    let (out_tx, out_rx) = mpsc::channel(QUEUE);
    let sink = cx.sink.clone();
    let agent = tokio::spawn(pump_agent(exec, out_tx, sink));

    // One queue to each side.
    let (to_client, client_rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    let client_writer = tokio::spawn(write_stdout(client_rx));
    let (to_agent, agent_rx) = mpsc::channel::<ToAgent>(QUEUE);
    tokio::spawn(write_agent(input.clone(), agent_rx));

    let cx = Arc::new(cx);
    let client_task = tokio::spawn(client_side(
        cx.clone(),
        relay.clone(),
        client_lines,
        to_client.clone(),
        to_agent.clone(),
    ));
    agent_side(
        cx.clone(),
        relay,
        terminals.clone(),
        lines(out_rx),
        to_client,
        to_agent,
    )
    .await;

    // The agent's stdout ended: nothing the client sends matters now, and
    // what the agent said reaches the client before the proxy exits.
    client_task.abort();
    let _ = client_task.await;
    let _ = client_writer.await;
    terminals.kill_all().await;
    agent
        .await
        .unwrap_or_else(|e| Err(Status::internal(format!("the agent's pump failed: {e}"))))
}

/// Reads the agent exec: stdout chunks to `out` (closed at the end),
/// stderr to the sink; returns the exit.
async fn pump_agent(
    mut exec: ExecStream,
    out: mpsc::Sender<std::io::Result<Bytes>>,
    sink: Sink,
) -> Result<v1::ExecExit, Status> {
    loop {
        match exec.next().await? {
            Some(ExecEvent::Stdout(b)) => {
                if out.send(Ok(b)).await.is_err() {
                    // Nobody reads the agent any more; wait for its exit.
                    continue;
                }
            }
            Some(ExecEvent::Stderr(b)) => sink.write(&b),
            Some(ExecEvent::Exit(exit)) => return Ok(exit),
            None => {
                return Err(Status::unavailable(
                    "boxd ended the agent's exec without an exit",
                ));
            }
        }
    }
}

async fn write_stdout(mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut stdout = tokio::io::stdout();
    while let Some(mut line) = rx.recv().await {
        line.push(b'\n');
        if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
            // The client went away; keep draining so that senders never block.
            while rx.recv().await.is_some() {}
            return;
        }
    }
}

/// What goes to the agent's stdin.
#[derive(Debug)]
enum ToAgent {
    Line(Vec<u8>),
    /// The client's stdin ended and everything it sent was queued before:
    /// the agent's stdin closes (answers the proxy still owes it are
    /// dropped; nobody is left to act on them).
    Close,
}

async fn write_agent(input: ExecInput, mut rx: mpsc::Receiver<ToAgent>) {
    while let Some(msg) = rx.recv().await {
        match msg {
            ToAgent::Line(mut line) => {
                line.push(b'\n');
                if input.stdin(line).await.is_err() {
                    break;
                }
            }
            ToAgent::Close => {
                let _ = input.close_stdin().await;
                break;
            }
        }
    }
    // Keep draining so that senders never block.
    while rx.recv().await.is_some() {}
}

/// The client's lines, in order, to the agent (through the relay).
async fn client_side(
    cx: Arc<Context>,
    relay: Arc<Mutex<Relay>>,
    mut lines: Lines,
    to_client: mpsc::Sender<Vec<u8>>,
    to_agent: mpsc::Sender<ToAgent>,
) {
    loop {
        let line = match lines.next().await {
            Ok(Some(l)) => l,
            Ok(None) | Err(_) => break,
        };
        let outs = lock(&relay).from_client(line);
        for out in outs {
            match out {
                Out::Agent(l) => {
                    let _ = to_agent.send(ToAgent::Line(l)).await;
                }
                Out::Client(l) => {
                    let _ = to_client.send(l).await;
                }
                Out::Warn(w) => tracing::warn!("{w}"),
                Out::Setup(mut msg) => {
                    if let Some(p) = msg.get_mut("params") {
                        let mut client = cx.client.clone();
                        let mut view = mcp::BoxView {
                            client: &mut client,
                            box_name: &cx.box_name,
                            env: &cx.env,
                            mounts: &cx.mounts,
                            allow_net: &cx.allow_net,
                        };
                        for w in mcp::decide(p, &mut view).await {
                            tracing::warn!("{w}");
                        }
                    }
                    let _ = to_agent.send(ToAgent::Line(relay::to_line(&msg))).await;
                }
                Out::Serve(_) => {}
            }
        }
    }
    let _ = to_agent.send(ToAgent::Close).await;
}

/// The agent's lines to the client (through the relay), the requests the
/// proxy serves, and refreshes of what tool calls show of terminals.
async fn agent_side(
    cx: Arc<Context>,
    relay: Arc<Mutex<Relay>>,
    terminals: terminals::Shared,
    mut lines: Lines,
    to_client: mpsc::Sender<Vec<u8>>,
    to_agent: mpsc::Sender<ToAgent>,
) {
    let mut refresh_at: Option<tokio::time::Instant> = None;
    loop {
        let sleep = async {
            match refresh_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            line = lines.next() => {
                let line = match line {
                    Ok(Some(l)) => l,
                    Ok(None) | Err(_) => break,
                };
                let outs = lock(&relay).from_agent(line);
                for out in outs {
                    match out {
                        Out::Client(l) => { let _ = to_client.send(l).await; }
                        Out::Agent(l) => { let _ = to_agent.send(ToAgent::Line(l)).await; }
                        Out::Warn(w) => tracing::warn!("{w}"),
                        Out::Serve(work) => {
                            tokio::spawn(serve_work(cx.clone(), relay.clone(), terminals.clone(), work, to_agent.clone()));
                        }
                        Out::Setup(_) => {}
                    }
                }
            }
            _ = terminals.changed.notified() => {
                if refresh_at.is_none() {
                    refresh_at = Some(tokio::time::Instant::now() + REFRESH_EVERY);
                }
            }
            _ = sleep => {
                refresh_at = None;
                let updates = lock(&relay).refresh();
                for u in updates {
                    let _ = to_client.send(u).await;
                }
            }
        }
    }
}

/// Serves one agent request in the box and answers the agent.
async fn serve_work(
    cx: Arc<Context>,
    relay: Arc<Mutex<Relay>>,
    terminals: terminals::Shared,
    work: Work,
    to_agent: mpsc::Sender<ToAgent>,
) {
    let id = work.id().clone();
    let mut client = cx.client.clone();
    let answer: Result<Value, terminals::CallError> = match &work {
        Work::Terminal {
            method,
            params,
            cwd,
            ..
        } => match method.as_str() {
            "terminal/create" => {
                let defaults = terminals::Defaults {
                    box_name: cx.box_name.clone(),
                    socket: cx.socket.clone(),
                    env: cx.env.clone(),
                    cwd: cwd.clone(),
                };
                terminals.create(&mut client, params, &defaults).await
            }
            "terminal/output" => terminals.output(params),
            "terminal/wait_for_exit" => terminals.wait_for_exit(params).await,
            "terminal/kill" => terminals.kill(params).await,
            _ => terminals.release(params).await,
        },
        Work::ReadInBox { params, .. } => {
            files::read_in_box(&mut client, &cx.box_name, params).await
        }
        Work::WriteInBox { params, .. } => {
            files::write_in_box(&mut client, &cx.box_name, &cx.env, params).await
        }
        Work::ReadOnHost {
            root, rel, params, ..
        } => files::read_on_host(root.clone(), rel.clone(), params).await,
        Work::WriteOnHost {
            root, rel, params, ..
        } => files::write_on_host(root.clone(), rel.clone(), params).await,
    };
    lock(&relay).served(&id);
    let reply = match answer {
        Ok(result) => jsonrpc::result(id, result),
        Err((code, message)) => jsonrpc::error(id, code, message),
    };
    let _ = to_agent.send(ToAgent::Line(relay::to_line(&reply))).await;
}

fn lock(relay: &Mutex<Relay>) -> std::sync::MutexGuard<'_, Relay> {
    relay.lock().unwrap_or_else(|e| e.into_inner())
}
