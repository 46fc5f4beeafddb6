//! An exec in a microVM: boxd's [`ExecSpec`] as BoxLite's [`BoxCommand`],
//! and BoxLite's [`Execution`] as boxd's [`Process`] (stdin, stdout and
//! stderr, signals, resizes, the exit).
//!
//! - exec output arrives as lossily decoded UTF-8 text chunks: it is passed
//!   on as bytes, but binary output is not byte-exact;
//! - shutting boxd's stdin writer down or dropping it closes the process's
//!   stdin, and so does the process's end; an exec without stdin reads EOF;
//! - a terminal exec has no stderr, and its terminal is sized as asked
//!   (BoxLite would size it from the daemon's own, absent, terminal);
//! - signals and resizes are delivered in order by one task per process,
//!   which ends with the process, after which both calls fail;
//! - a negative exit code is the signal that ended the process.

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use ::boxlite::{BoxCommand, ExecResult, ExecStdin, Execution};

use crate::engine::{ExecSpec, ExitStatus, Input, Output, Process, ProcessControl};
use crate::error::{Error, Result};

/// boxd's exec spec as BoxLite's command.
pub(super) fn box_command(spec: &ExecSpec) -> BoxCommand {
    let mut cmd = BoxCommand::new(spec.command.clone()).args(spec.args.iter().cloned());
    for (k, v) in &spec.env {
        cmd = cmd.env(k.clone(), v.clone());
    }
    if !spec.working_dir.is_empty() {
        cmd = cmd.working_dir(spec.working_dir.clone());
    }
    if let Some(user) = &spec.user {
        cmd = cmd.user(user.clone());
    }
    cmd.tty(spec.tty.is_some())
}

/// How a BoxLite exec ended, as boxd says it.
fn exit_status(r: &ExecResult) -> ExitStatus {
    let (code, signal) = if r.exit_code < 0 {
        (None, Some(-r.exit_code))
    } else {
        (Some(r.exit_code), None)
    };
    ExitStatus {
        code,
        signal,
        error: r.error_message.clone().filter(|m| !m.is_empty()),
    }
}

/// Turns a BoxLite execution into boxd's [`Process`].
pub(super) async fn process(
    mut execution: Execution,
    want_stdin: bool,
    tty: Option<(u16, u16)>,
) -> Result<Process> {
    if let Some((rows, cols)) = tty {
        // BoxLite sizes the terminal from the daemon's own (absent) terminal.
        if let Err(e) = execution.resize_tty(u32::from(rows), u32::from(cols)).await {
            tracing::warn!(error = %e, "could not size the exec's terminal");
        }
    }
    let stdout = execution
        .stdout()
        .ok_or_else(|| Error::Internal("BoxLite gave no stdout stream".into()))?;
    let stderr = execution.stderr();
    let stdin = execution.stdin();

    let stdin = match (want_stdin, stdin) {
        (true, Some(s)) => Some(stdin_pipe(s, execution.clone())),
        (true, None) => {
            return Err(Error::Internal("BoxLite gave no stdin stream".into()));
        }
        // Dropping BoxLite's stdin closes it: the process reads EOF.
        (false, _) => None,
    };
    let stderr = match tty {
        Some(_) => None,
        None => stderr.map(text_reader),
    };

    let control = Control::spawn(execution.clone());
    let exit = async move {
        match execution.wait().await {
            Ok(r) => exit_status(&r),
            Err(e) => ExitStatus {
                error: Some(format!("lost track of the process: {e}")),
                ..ExitStatus::default()
            },
        }
    }
    .boxed();
    Ok(Process {
        stdin,
        stdout: text_reader(stdout),
        stderr,
        control,
        exit,
    })
}

fn to_bytes(text: String) -> std::io::Result<Bytes> {
    Ok(Bytes::from(text))
}

/// An exec output stream (text chunks) as a byte reader.
fn text_reader<S>(stream: S) -> Output
where
    S: futures::Stream<Item = String> + Send + Unpin + 'static,
{
    Box::pin(tokio_util::io::StreamReader::new(
        stream.map(to_bytes as fn(String) -> std::io::Result<Bytes>),
    ))
}

/// A writer whose bytes go to the process's stdin; shutting it down or
/// dropping it closes stdin. Ends (and closes) when the process ends.
fn stdin_pipe(mut stdin: ExecStdin, execution: Execution) -> Input {
    let (writer, mut reader) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        let pump = async {
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if stdin.write(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
        };
        tokio::select! {
            () = pump => {}
            _ = execution.wait() => {}
        }
        stdin.close();
    });
    Box::pin(writer)
}

enum Ctl {
    Signal(i32),
    Resize(u16, u16),
}

/// Signals and resizes, delivered in order by one task per process (the
/// trait is synchronous, BoxLite's calls are not). The task ends with the
/// process, after which both calls fail.
struct Control {
    tx: mpsc::UnboundedSender<Ctl>,
}

impl Control {
    fn spawn(execution: Execution) -> std::sync::Arc<dyn ProcessControl> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let ended = execution.wait();
            tokio::pin!(ended);
            loop {
                tokio::select! {
                    biased;
                    ctl = rx.recv() => match ctl {
                        None => break,
                        Some(Ctl::Signal(sig)) => {
                            if let Err(e) = execution.signal(sig).await {
                                tracing::warn!(signal = sig, error = %e, "could not signal an exec");
                            }
                        }
                        Some(Ctl::Resize(rows, cols)) => {
                            if let Err(e) = execution.resize_tty(u32::from(rows), u32::from(cols)).await {
                                tracing::warn!(error = %e, "could not resize an exec's terminal");
                            }
                        }
                    },
                    _ = &mut ended => break,
                }
            }
        });
        std::sync::Arc::new(Control { tx })
    }

    fn send(&self, ctl: Ctl) -> Result<()> {
        self.tx
            .send(ctl)
            .map_err(|_| Error::FailedPrecondition("the process has exited".into()))
    }
}

impl ProcessControl for Control {
    fn signal(&self, signal: i32) -> Result<()> {
        if signal <= 0 || signal > 64 {
            return Err(Error::InvalidArgument(format!("no such signal: {signal}")));
        }
        self.send(Ctl::Signal(signal))
    }

    fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        if rows == 0 || cols == 0 {
            return Err(Error::InvalidArgument(format!(
                "terminal size {rows}x{cols} is not valid"
            )));
        }
        self.send(Ctl::Resize(rows, cols))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_maps_spec() {
        let c = box_command(&ExecSpec {
            command: "sh".into(),
            args: vec!["-c".into(), "echo hi".into()],
            env: vec![("K".into(), "V".into())],
            working_dir: "/tmp".into(),
            stdin: true,
            tty: Some((24, 80)),
            ..Default::default()
        });
        let dbg = format!("{c:?}");
        assert!(dbg.contains("command: \"sh\""), "{dbg}");
        assert!(dbg.contains("args: [\"-c\", \"echo hi\"]"), "{dbg}");
        assert!(dbg.contains("env: Some([(\"K\", \"V\")])"), "{dbg}");
        assert!(dbg.contains("working_dir: Some(\"/tmp\")"), "{dbg}");
        assert!(dbg.contains("tty: true"), "{dbg}");
        let c = box_command(&ExecSpec {
            command: "true".into(),
            args: vec![],
            env: vec![],
            working_dir: String::new(),
            stdin: false,
            tty: None,
            ..Default::default()
        });
        let dbg = format!("{c:?}");
        assert!(
            dbg.contains("working_dir: None") && dbg.contains("tty: false"),
            "{dbg}"
        );
    }

    #[test]
    fn exit_results_map_to_statuses() {
        let r = |exit_code, msg: Option<&str>| ExecResult {
            exit_code,
            error_message: msg.map(String::from),
        };
        assert_eq!(
            exit_status(&r(0, None)),
            ExitStatus {
                code: Some(0),
                ..ExitStatus::default()
            }
        );
        assert_eq!(exit_status(&r(3, None)).code, Some(3));
        let killed = exit_status(&r(-9, None));
        assert_eq!((killed.code, killed.signal), (None, Some(9)));
        let err = exit_status(&r(-1, Some("container init died")));
        assert_eq!(err.signal, Some(1));
        assert_eq!(err.error.as_deref(), Some("container init died"));
        assert_eq!(exit_status(&r(1, Some(""))).error, None);
    }

    /// The exec adapter, against BoxLite's stub execution (needs the
    /// `test-support` feature of `boxlite`).
    #[cfg(feature = "boxlite-test-support")]
    mod process_adapter {
        use tokio::io::AsyncWriteExt;

        use super::*;

        #[tokio::test]
        async fn streams_stdin_and_exit() {
            let (exec, out_tx, err_tx, mut stdin_rx, result_tx) = Execution::stub("e1");
            let mut p = process(exec, true, None).await.unwrap();
            out_tx.send("hé".into()).unwrap();
            out_tx.send("llo\n".into()).unwrap();
            drop(out_tx);
            err_tx.send("oops\n".into()).unwrap();
            drop(err_tx);
            let mut out = Vec::new();
            p.stdout.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, "héllo\n".as_bytes());
            let mut err = String::new();
            p.stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .await
                .unwrap();
            assert_eq!(err, "oops\n");

            let mut stdin = p.stdin.take().unwrap();
            stdin.write_all(b"abc").await.unwrap();
            stdin.flush().await.unwrap();
            assert_eq!(stdin_rx.recv().await.unwrap(), b"abc");
            stdin.shutdown().await.unwrap();
            drop(stdin);
            // EOF reaches BoxLite as a closed channel.
            assert_eq!(stdin_rx.recv().await, None);

            p.control.signal(15).unwrap();
            p.control.resize(40, 100).unwrap();
            assert!(matches!(
                p.control.signal(0),
                Err(Error::InvalidArgument(_))
            ));
            assert!(matches!(
                p.control.resize(0, 10),
                Err(Error::InvalidArgument(_))
            ));
            result_tx
                .send(ExecResult {
                    exit_code: -9,
                    error_message: None,
                })
                .unwrap();
            let status = p.exit.await;
            assert_eq!((status.code, status.signal), (None, Some(9)));
            // The control task ends with the process.
            for _ in 0..100 {
                if p.control.signal(9).is_err() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(matches!(
                p.control.signal(9),
                Err(Error::FailedPrecondition(_))
            ));
        }

        #[tokio::test]
        async fn no_stdin_means_eof_and_tty_has_no_stderr() {
            let (exec, out_tx, _err_tx, mut stdin_rx, result_tx) = Execution::stub("e2");
            let mut p = process(exec, false, Some((24, 80))).await.unwrap();
            assert!(p.stdin.is_none());
            assert!(p.stderr.is_none());
            assert_eq!(stdin_rx.recv().await, None);
            out_tx.send("\u{fffd}binary".into()).unwrap();
            drop(out_tx);
            let mut out = Vec::new();
            p.stdout.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, "\u{fffd}binary".as_bytes());
            drop(result_tx);
            let status = p.exit.await;
            assert!(status.error.unwrap().contains("lost track"));
        }

        #[tokio::test]
        async fn stdin_closes_when_the_process_ends() {
            let (exec, _out_tx, _err_tx, mut stdin_rx, result_tx) = Execution::stub("e3");
            let mut p = process(exec, true, None).await.unwrap();
            let stdin = p.stdin.take().unwrap();
            result_tx
                .send(ExecResult {
                    exit_code: 0,
                    error_message: None,
                })
                .unwrap();
            assert_eq!(p.exit.await.code, Some(0));
            // The pump lets go of BoxLite's stdin although ours is open.
            assert_eq!(stdin_rx.recv().await, None);
            drop(stdin);
        }
    }
}
