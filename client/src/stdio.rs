//! Attaching an exec to this process's own stdin, stdout and stderr: the
//! one pump behind `boxctl exec`, `boxctl run` and `harness-box-exec`.
//!
//! Stdout carries the command's stdout and nothing else; the command's
//! stderr goes to stderr; stdin EOF closes the command's stdin; SIGINT,
//! SIGTERM and SIGHUP are forwarded to the command (SIGWINCH becomes a
//! resize on a TTY); a closed stdout sends the command SIGPIPE once, and
//! this process ends with the command (or 141 after [`PIPE_GRACE`]). When the
//! exec is reconnecting ([`ExecStream::reconnecting`]), losing boxd and
//! reattaching, and any output lost meanwhile, are each told in one line on
//! stderr.

use std::io::{IsTerminal, Read, Write};

use boxd_proto::tonic::Status;
use boxd_proto::v1;

use crate::stderr::Sink;
use crate::{ExecEvent, ExecInput, ExecStream, Reconnect};

/// Exit code when the command could not be started or its exit is unknown.
pub const EXEC_FAILED: u8 = 125;

/// How long a command whose reader went away has to end before this
/// process ends without it (exit 141, as SIGPIPE would make it).
pub const PIPE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Clone, Default)]
pub struct Attach {
    /// Stream this process's stdin to the command.
    pub stdin: bool,
    /// The command runs on a TTY: put ours in raw mode, forward resizes.
    pub tty: bool,
    /// Forward SIGINT, SIGTERM and SIGHUP to the command. Without, they end
    /// this process as usual (a client that merely attached to an exec
    /// leaves it running).
    pub signals: bool,
    /// Where the command's stderr and this module's own lines go: a
    /// [`Sink`] that never blocks (for a process whose host may not read
    /// its stderr), or `None` for this process's stderr as it is.
    pub stderr: Option<Sink>,
}

/// Pumps stdio until the command exits and returns its exit.
pub async fn attach(exec: ExecStream, how: Attach) -> Result<v1::ExecExit, Status> {
    let input = exec.input();
    let raw = RawMode::enter(how.tty && std::io::stdin().is_terminal());
    // A terminal in raw mode needs its carriage return.
    let eol = if raw.0.is_some() { "\r\n" } else { "\n" };
    let err_sink = how.stderr.clone();
    let to_stderr = move |b: &[u8]| match &err_sink {
        Some(s) => s.write(b),
        None => {
            let _ = std::io::stderr().write_all(b);
        }
    };
    let hook = to_stderr.clone();
    let mut exec =
        exec.on_reconnect(move |r| hook(format!("{}{eol}", reconnect_line(r)).as_bytes()));
    if how.stdin {
        pump_stdin(input.clone());
    }
    if how.signals {
        forward_signals(input.clone(), how.tty);
    }
    // Unbuffered, as a pipe is: no line scanning, no copy, each chunk out
    // as it comes (after anything this process printed before).
    let _ = std::io::stdout().flush();
    let mut stdout = raw_stdout();
    // When our reader goes away (`| head`), the command is told as a pipe
    // would tell it: SIGPIPE, once. It then has a moment to end (its exit
    // is ours); one that ignores SIGPIPE does not keep this process.
    let mut reader_gone: Option<tokio::time::Instant> = None;
    loop {
        let next = match reader_gone {
            Some(at) => match tokio::time::timeout_at(at, exec.next()).await {
                Ok(n) => n?,
                Err(_) => {
                    return Ok(v1::ExecExit {
                        signal: Some(libc::SIGPIPE),
                        ..Default::default()
                    });
                }
            },
            None => exec.next().await?,
        };
        match next {
            Some(ExecEvent::Stdout(b)) => {
                if reader_gone.is_none() && stdout.write_all(&b).is_err() {
                    let _ = input.signal("SIGPIPE").await;
                    reader_gone = Some(tokio::time::Instant::now() + PIPE_GRACE);
                }
            }
            Some(ExecEvent::Stderr(b)) => to_stderr(&b),
            Some(ExecEvent::Exit(exit)) => return Ok(exit),
            None => return Err(Status::unavailable("boxd ended the exec without an exit")),
        }
    }
}

/// Descriptor 1 as a file that is never closed here.
fn raw_stdout() -> std::mem::ManuallyDrop<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: descriptor 1 stays open for the process's life; the file is
    // never dropped, so it is never closed here.
    std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) })
}

/// The one line that tells a user of a reconnection.
pub fn reconnect_line(r: &Reconnect) -> String {
    match r {
        Reconnect::Lost { exec_id, .. } => {
            format!("boxd went away; reattaching to exec {exec_id}…")
        }
        Reconnect::Reattached {
            exec_id,
            after,
            stdin_resent,
            ..
        } => {
            let resent = if *stdin_resent > 0 {
                format!(", {stdin_resent} bytes of stdin sent again")
            } else {
                String::new()
            };
            format!(
                "reattached to exec {exec_id} after {:.1} s{resent}",
                after.as_secs_f64()
            )
        }
        Reconnect::Gap {
            exec_id,
            stream,
            from,
            to,
        } => format!(
            "warning: {} bytes of exec {exec_id}'s {} (offsets {from}..{to}) are lost: boxd no longer kept them",
            to - from,
            stream.name()
        ),
    }
}

/// The command's exit code, 128+N for signal N, [`EXEC_FAILED`] for an
/// engine error without a code.
pub fn exit_code(exit: &v1::ExecExit) -> u8 {
    match (exit.code, exit.signal) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        (None, None) => EXEC_FAILED,
    }
}

/// Reads stdin on a plain thread (a blocked read must never keep the process
/// from exiting) and sends it on, closing the command's stdin at EOF.
fn pump_stdin(input: ExecInput) {
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

/// Forwards SIGINT, SIGTERM and SIGHUP that this process gets to the
/// command (and SIGWINCH as a resize, on a TTY).
pub fn forward_signals(input: ExecInput, tty: bool) {
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

/// This terminal's size, if stdout is one.
pub fn terminal_size() -> Option<v1::TtySize> {
    // SAFETY: an all-zero winsize is a valid value.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into a valid pointer.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_row > 0).then(|| v1::TtySize {
        rows: ws.ws_row.into(),
        cols: ws.ws_col.into(),
    })
}

/// Puts stdin's terminal in raw mode; restores it when dropped.
struct RawMode(Option<libc::termios>);

impl RawMode {
    fn enter(on: bool) -> RawMode {
        if !on {
            return RawMode(None);
        }
        // SAFETY: an all-zero termios is a valid buffer for tcgetattr.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr/cfmakeraw/tcsetattr on stdin with valid pointers.
        unsafe {
            if libc::tcgetattr(libc::STDIN_FILENO, &mut saved) != 0 {
                return RawMode(None);
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw);
        }
        RawMode(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            // SAFETY: restores the attributes read in `enter`.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, saved) };
        }
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
        assert_eq!(exit_code(&e(None, None)), EXEC_FAILED);
        assert_eq!(exit_code(&e(Some(127), None)), 127);
    }

    #[test]
    fn reconnect_lines() {
        let lost = Reconnect::Lost {
            exec_id: "x1".into(),
            error: "lost the connection to boxd".into(),
        };
        assert_eq!(
            reconnect_line(&lost),
            "boxd went away; reattaching to exec x1…"
        );
        let back = Reconnect::Reattached {
            exec_id: "x1".into(),
            after: std::time::Duration::from_millis(1300),
            attempts: 4,
            stdin_resent: 0,
        };
        assert_eq!(reconnect_line(&back), "reattached to exec x1 after 1.3 s");
        let gap = Reconnect::Gap {
            exec_id: "x1".into(),
            stream: crate::OutputStream::Stdout,
            from: 100,
            to: 150,
        };
        assert!(reconnect_line(&gap).starts_with("warning: 50 bytes of exec x1's stdout"));
    }
}
