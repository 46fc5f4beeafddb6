//! `boxctl exec` and `boxctl run`: stream a command's stdio through boxd.

use std::io::{IsTerminal, Read, Write};

use boxd_client::{ExecEvent, ExecStream, v1};
use clap::Args;

use crate::{BoxFlags, Ctx, Failure};

/// Exit code when boxd could not start the command.
const EXEC_FAILED: u8 = 125;

#[derive(Args, Debug)]
pub struct ExecFlags {
    /// Keep stdin open and stream it to the command.
    #[arg(short, long)]
    pub interactive: bool,
    /// Run on a pseudo-terminal.
    #[arg(short, long)]
    pub tty: bool,
    /// K=V (repeatable).
    #[arg(short = 'e', long = "env")]
    pub env: Vec<String>,
    /// Working directory inside the box.
    #[arg(short = 'w', long = "workdir")]
    pub workdir: Option<String>,
    /// Kill the command after this many milliseconds.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub flags: ExecFlags,
    pub name: String,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    pub name: String,
    #[command(flatten)]
    pub box_flags: BoxFlags,
    /// Remove the box when the command ends.
    #[arg(long)]
    pub rm: bool,
    #[command(flatten)]
    pub flags: ExecFlags,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub async fn exec(ctx: &Ctx, args: ExecArgs) -> Result<u8, Failure> {
    let mut client = ctx.client().await.map_err(exec_failure)?;
    stream(&mut client, &args.name, &args.flags, &args.command).await
}

pub async fn run(ctx: &Ctx, args: RunArgs) -> Result<u8, Failure> {
    let mut client = ctx.client().await.map_err(exec_failure)?;
    let spec = crate::box_spec(&args.box_flags, &[], None).map_err(exec_failure)?;
    let created = crate::create(&mut client, &args.name, spec)
        .await
        .map_err(exec_failure)?;
    for w in &created.warnings {
        eprintln!("warning: {w}");
    }
    client
        .start_box(v1::StartBoxRequest {
            name: args.name.clone(),
        })
        .await
        .map_err(|s| exec_failure(s.into()))?;
    let code = stream(&mut client, &args.name, &args.flags, &args.command).await;
    if args.rm {
        let _ = client
            .remove_box(v1::RemoveBoxRequest {
                name: args.name.clone(),
                force: true,
            })
            .await;
    }
    code
}

fn exec_failure(f: Failure) -> Failure {
    Failure {
        code: EXEC_FAILED,
        message: f.message,
    }
}

/// Restores the terminal mode when dropped.
struct RawMode(Option<nix::sys::termios::Termios>);

impl RawMode {
    fn enter(on: bool) -> RawMode {
        use nix::sys::termios;
        if !on {
            return RawMode(None);
        }
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(&stdin) else {
            return RawMode(None);
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, &raw);
        RawMode(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                saved,
            );
        }
    }
}

fn terminal_size() -> Option<v1::TtySize> {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into a valid pointer.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_row > 0).then(|| v1::TtySize {
        rows: ws.ws_row.into(),
        cols: ws.ws_col.into(),
    })
}

async fn stream(
    client: &mut boxd_client::Client,
    name: &str,
    flags: &ExecFlags,
    command: &[String],
) -> Result<u8, Failure> {
    let env = crate::parse_env(&flags.env)?;
    let start = v1::ExecStart {
        box_name: name.to_owned(),
        command: command[0].clone(),
        args: command[1..].to_vec(),
        env,
        working_dir: flags.workdir.clone().unwrap_or_default(),
        timeout_ms: flags.timeout_ms.unwrap_or(0),
        stdin: flags.interactive,
        tty: flags.tty,
        tty_size: if flags.tty { terminal_size() } else { None },
        detach: false,
    };
    let mut exec = ExecStream::start(client, start)
        .await
        .map_err(|s| exec_failure(s.into()))?;
    let input = exec.input();
    let _raw = RawMode::enter(flags.tty && std::io::stdin().is_terminal());

    if flags.interactive {
        // A plain thread: a blocked read of stdin must never keep the
        // process from exiting.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Option<Vec<u8>>>(4);
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.blocking_send(None);
                        return;
                    }
                    Ok(n) => {
                        if tx.blocking_send(Some(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let input = input.clone();
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                let sent = match chunk {
                    Some(data) => input.stdin(data).await,
                    None => {
                        let _ = input.close_stdin().await;
                        return;
                    }
                };
                if sent.is_err() {
                    return;
                }
            }
        });
    }
    forward_signals(input.clone(), flags.tty);

    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr();
    loop {
        match exec.next().await.map_err(|s| exec_failure(s.into()))? {
            Some(ExecEvent::Stdout(b)) => {
                if stdout.write_all(&b).and_then(|_| stdout.flush()).is_err() {
                    // Our reader went away (e.g. `| head`); stop the command.
                    let _ = input.signal("SIGPIPE").await;
                }
            }
            Some(ExecEvent::Stderr(b)) => {
                let _ = stderr.write_all(&b);
            }
            Some(ExecEvent::Exit(exit)) => return Ok(exit_code(&exit)),
            None => {
                return Err(Failure {
                    code: EXEC_FAILED,
                    message: "boxd ended the exec without an exit".into(),
                });
            }
        }
    }
}

/// The command's exit code, 128+N for signal N, 125 for an engine error
/// without a code.
pub fn exit_code(exit: &v1::ExecExit) -> u8 {
    if !exit.error.is_empty() {
        eprintln!("boxctl: {}", exit.error);
    }
    if exit.timed_out {
        eprintln!("boxctl: the command timed out");
    }
    match (exit.code, exit.signal) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        (None, None) => EXEC_FAILED,
    }
}

/// Forwards SIGINT, SIGTERM and SIGHUP to the command (and SIGWINCH as a
/// resize when it has a TTY).
fn forward_signals(input: boxd_client::ExecInput, tty: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    for (kind, name) in [
        (SignalKind::interrupt(), "SIGINT"),
        (SignalKind::terminate(), "SIGTERM"),
        (SignalKind::hangup(), "SIGHUP"),
    ] {
        let input = input.clone();
        if let Ok(mut s) = signal(kind) {
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    let _ = input.signal(name).await;
                }
            });
        }
    }
    if tty && let Ok(mut s) = signal(SignalKind::window_change()) {
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                if let Some(size) = terminal_size() {
                    let _ = input.resize(size.rows, size.cols).await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        let e = |code, signal| v1::ExecExit {
            code,
            signal,
            ..Default::default()
        };
        assert_eq!(exit_code(&e(Some(3), None)), 3);
        assert_eq!(exit_code(&e(None, Some(9))), 137);
        assert_eq!(exit_code(&e(None, None)), 125);
        assert_eq!(
            exit_code(&v1::ExecExit {
                code: Some(127),
                error: "not found".into(),
                ..Default::default()
            }),
            127
        );
    }
}
