//! `harness-box-exec`: looks like the agent it wraps, runs it inside a box.
//!
//! An agent host spawns `harness-box-exec [--box NAME] … -- CMD ARGS…` as if
//! it were `CMD`. The proxy makes sure `boxd` runs (starting it when nothing
//! answers), creates or reuses the box, starts it, runs the probe and, only
//! when the probe fails, the provisioning command ([`setup`]), then runs
//! `CMD` in the box with this process's stdio attached:
//!
//! - in ACP mode (the default, [`acp`]) as the agent of an ACP client: the
//!   box is the agent's whole world (its terminals run in the box, its file
//!   requests reach the editor only inside mounts, paths are translated
//!   between the two sides);
//! - with `--raw` byte for byte, for any other command (on a pseudo-terminal
//!   when stdin is one).
//!
//! Invariants: stdout carries protocol bytes only (the command's stdout,
//! or in ACP mode the messages the proxy let through); every diagnostic
//! goes to a stderr that never blocks ([`boxd_client::stderr::Sink`]); the
//! exit code is the command's, 128+N for signal N, 125 when the box or the
//! command could not be started; when the proxy dies its exec is reaped by
//! boxd and the box stays; when boxd restarts, the exec's stream reattaches
//! (one line on stderr says so).

pub mod acp;
pub mod args;
pub mod login;
mod ready;
pub mod setup;

use std::sync::Arc;

use boxd_client::stderr::Sink;
use boxd_client::{ExecStream, spawn, spec, stdio, untrusted, v1};
use tokio::sync::Notify;

pub use args::{Args, ArgsError, Mode};

/// Why the proxy could not run the command; exit code 125. What boxd
/// said (and a probe printed) is shown escaped
/// ([`boxd_client::untrusted`]): it quotes images, boxes and remote
/// servers, and goes to the terminal the agent host runs in.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    #[error(transparent)]
    Paths(#[from] boxd_client::PathsError),
    #[error("{}", untrusted::escape_lines(&.0.to_string()))]
    Spawn(#[from] spawn::SpawnError),
    #[error("{}", untrusted::escape_lines(.0))]
    Daemon(String),
    #[error("box {0:?} does not exist; give --image to create it")]
    NoImage(String),
    #[error("{}", untrusted::escape_lines(.0))]
    NotReady(String),
    /// The client closed stdin before or while box NAME was provisioned.
    #[error(
        "the client closed stdin while box {0} was being provisioned; provisioning stopped (it runs again next time)"
    )]
    ClientGone(String),
}

impl From<boxd_client::tonic::Status> for ProxyError {
    fn from(s: boxd_client::tonic::Status) -> Self {
        ProxyError::Daemon(boxd_client::status_message(&s))
    }
}

/// Runs the proxy; the exit code it should end with.
pub async fn run(args: Args) -> Result<u8, ProxyError> {
    match args.mode() {
        Mode::Raw { tty } => raw(args, tty).await,
        Mode::Acp => acp_mode(args).await,
    }
}

/// The command's `ExecStart` (stdin attached).
fn command_start(args: &Args, box_name: &str, tty: bool) -> Result<v1::ExecStart, ProxyError> {
    let mut env = spec::parse_env(&args.env)?;
    if tty
        && !env.contains_key("TERM")
        && let Ok(term) = std::env::var("TERM")
    {
        env.insert("TERM".into(), term);
    }
    Ok(v1::ExecStart {
        box_name: box_name.to_owned(),
        command: args.command[0].clone(),
        args: args.command[1..].to_vec(),
        env,
        working_dir: args.workdir()?.unwrap_or_default(),
        stdin: true,
        tty,
        tty_size: if tty { stdio::terminal_size() } else { None },
        ..Default::default()
    })
}

async fn raw(args: Args, tty: bool) -> Result<u8, ProxyError> {
    let mut ready = setup::prepare(&args, None).await?;
    let start = command_start(&args, &ready.box_name, tty)?;
    let exec = ExecStream::start(&mut ready.client, start)
        .await?
        // A restart of boxd does not end the command: the stream
        // reattaches, saying so on stderr (stdout stays the command's alone).
        .reconnecting(&ready.socket);
    tracing::debug!("command started (launch {} ms)", exec.launch_ms());
    let how = stdio::Attach {
        stdin: true,
        tty,
        signals: true,
        stderr: Some(Sink::global()),
    };
    let exit = stdio::attach(exec, how).await?;
    if !exit.error.is_empty() {
        tracing::error!("{}", untrusted::escape_lines(&exit.error));
    }
    Ok(stdio::exit_code(&exit))
}

async fn acp_mode(args: Args) -> Result<u8, ProxyError> {
    let gone = Arc::new(Notify::new());
    let chunks = acp::stdin_chunks(gone.clone());
    let mut ready = match setup::prepare(&args, Some(gone)).await {
        Err(e @ ProxyError::ClientGone(_)) => {
            tracing::info!("{e}");
            return Ok(0);
        }
        other => other?,
    };
    let sink = Sink::global();
    let start = command_start(&args, &ready.box_name, false)?;
    let hook = sink.clone();
    let exec = ExecStream::start(&mut ready.client, start)
        .await?
        .reconnecting(&ready.socket)
        .on_reconnect(move |r| hook.write(format!("{}\n", stdio::reconnect_line(r)).as_bytes()));
    tracing::debug!("agent started (launch {} ms)", exec.launch_ms());
    let relaunch = acp::rewrite::Relaunch {
        exe: std::env::current_exe()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "harness-box-exec".into()),
        args: vec![
            "--box".into(),
            ready.box_name.clone(),
            "--socket".into(),
            ready.socket.to_string_lossy().into_owned(),
            "--raw".into(),
            "--".into(),
        ],
    };
    let cx = acp::Context {
        mounts: ready.mounts(),
        allow_net: ready.allow_net(),
        client: ready.client.clone(),
        socket: ready.socket.clone(),
        box_name: ready.box_name.clone(),
        env: spec::parse_env(&args.env)?,
        missing_mounts: ready.missing_mounts.clone(),
        relaunch,
        sink,
    };
    let exit = acp::serve(cx, exec, acp::lines(chunks)).await?;
    if !exit.error.is_empty() {
        tracing::error!("{}", untrusted::escape_lines(&exit.error));
    }
    Ok(stdio::exit_code(&exit))
}
