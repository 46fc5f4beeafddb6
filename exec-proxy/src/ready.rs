//! Making a box ready: the probe, and provisioning only when it fails.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use boxd_client::stderr::Sink;
use boxd_client::untrusted::{escape_bytes, escape_lines};
use boxd_client::{Client, ExecEvent, ExecStream, v1};
use tokio::sync::Notify;

use crate::ProxyError;

/// Where and how shell commands run.
pub struct Shell<'a> {
    pub box_name: &'a str,
    pub env: &'a HashMap<String, String>,
    pub workdir: Option<&'a str>,
}

/// A shell command's exit and what it printed (when kept).
struct Outcome {
    exit: v1::ExecExit,
    output: Vec<u8>,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.exit.code == Some(0)
    }
}

/// Runs the probe; when it fails, runs the provisioning command (its output
/// on stderr, which never blocks: [`Sink`]) and the probe again, which must
/// then pass. When `client_gone` is told (the client closed stdin) before or
/// while provisioning runs, provisioning is stopped (its exec goes with
/// the dropped stream) and [`ProxyError::ClientGone`] returned.
pub async fn ensure(
    client: &mut Client,
    shell: &Shell<'_>,
    probe: Option<&str>,
    provision: Option<&str>,
    client_gone: Option<Arc<Notify>>,
) -> Result<(), ProxyError> {
    let gone = client_gone.as_deref();
    let Some(probe) = probe else {
        if let Some(provision) = provision {
            // No way to tell whether it is needed: always provision.
            provision_unless_gone(client, shell, provision, gone).await?;
        }
        return Ok(());
    };
    let begin = Instant::now();
    let first = run(client, shell, probe, false).await?;
    if first.ok() {
        tracing::debug!(
            "probe passed in {:?}; provisioning skipped",
            begin.elapsed()
        );
        return Ok(());
    }
    tracing::debug!(
        "probe failed in {:?} ({}): {}",
        begin.elapsed(),
        describe(&first.exit),
        escape_bytes(&first.output).trim()
    );
    let Some(provision) = provision else {
        return Err(ProxyError::NotReady(format!(
            "the probe `{probe}` failed ({}) and there is no --provision",
            describe(&first.exit)
        )));
    };
    provision_unless_gone(client, shell, provision, gone).await?;
    let again = run(client, shell, probe, false).await?;
    if !again.ok() {
        return Err(ProxyError::NotReady(format!(
            "provisioning finished, but the probe `{probe}` still fails ({}): {}",
            describe(&again.exit),
            escape_bytes(&again.output).trim()
        )));
    }
    Ok(())
}

/// [`run_provision`], stopped when the client goes.
async fn provision_unless_gone(
    client: &mut Client,
    shell: &Shell<'_>,
    provision: &str,
    gone: Option<&Notify>,
) -> Result<(), ProxyError> {
    match gone {
        Some(gone) => tokio::select! {
            r = run_provision(client, shell, provision) => r,
            _ = gone.notified() => Err(ProxyError::ClientGone(shell.box_name.to_owned())),
        },
        None => run_provision(client, shell, provision).await,
    }
}

async fn run_provision(
    client: &mut Client,
    shell: &Shell<'_>,
    provision: &str,
) -> Result<(), ProxyError> {
    tracing::info!("provisioning box {}: {provision}", shell.box_name);
    let begin = Instant::now();
    let done = run(client, shell, provision, true).await?;
    let secs = begin.elapsed().as_secs_f64();
    if !done.ok() {
        return Err(ProxyError::NotReady(format!(
            "provisioning failed after {secs:.1} s ({})",
            describe(&done.exit)
        )));
    }
    tracing::info!("provisioned box {} in {secs:.1} s", shell.box_name);
    Ok(())
}

/// `sh -c CMD` in the box, no stdin. With `stream`, its stdout and stderr go
/// to our stderr as they arrive (never to stdout, and never blocking when
/// nobody reads stderr); otherwise they are kept.
async fn run(
    client: &mut Client,
    shell: &Shell<'_>,
    cmd: &str,
    stream: bool,
) -> Result<Outcome, ProxyError> {
    let mut exec = ExecStream::start(
        client,
        v1::ExecStart {
            box_name: shell.box_name.to_owned(),
            command: "sh".into(),
            args: vec!["-c".into(), cmd.to_owned()],
            env: shell.env.clone(),
            working_dir: shell.workdir.unwrap_or_default().to_owned(),
            ..Default::default()
        },
    )
    .await?;
    let mut output = Vec::new();
    let stderr = Sink::global();
    loop {
        match exec.next().await? {
            Some(ExecEvent::Stdout(b) | ExecEvent::Stderr(b)) => {
                if stream {
                    stderr.write(&b);
                } else if output.len() < 64 * 1024 {
                    output.extend_from_slice(&b);
                }
            }
            Some(ExecEvent::Exit(exit)) => return Ok(Outcome { exit, output }),
            None => {
                return Err(ProxyError::Daemon(
                    "boxd ended an exec without an exit".into(),
                ));
            }
        }
    }
}

/// An exit in words; boxd's error escaped (it quotes the image's user,
/// the box's command).
fn describe(exit: &v1::ExecExit) -> String {
    match (exit.code, exit.signal, exit.error.as_str()) {
        (_, _, e) if !e.is_empty() => escape_lines(e).into_owned(),
        (Some(c), _, _) => format!("exit {c}"),
        (None, Some(s), _) => format!("signal {s}"),
        _ => "no exit status".into(),
    }
}
