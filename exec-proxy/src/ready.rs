//! Making a box ready: the probe, and provisioning only when it fails.

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

use boxd_client::{Client, ExecEvent, ExecStream, v1};

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
/// on stderr) and the probe again, which must then pass.
pub async fn ensure(
    client: &mut Client,
    shell: &Shell<'_>,
    probe: Option<&str>,
    provision: Option<&str>,
) -> Result<(), ProxyError> {
    let Some(probe) = probe else {
        if let Some(provision) = provision {
            // No way to tell whether it is needed: always provision.
            run_provision(client, shell, provision).await?;
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
        String::from_utf8_lossy(&first.output).trim()
    );
    let Some(provision) = provision else {
        return Err(ProxyError::NotReady(format!(
            "the probe `{probe}` failed ({}) and there is no --provision",
            describe(&first.exit)
        )));
    };
    run_provision(client, shell, provision).await?;
    let again = run(client, shell, probe, false).await?;
    if !again.ok() {
        return Err(ProxyError::NotReady(format!(
            "provisioning finished, but the probe `{probe}` still fails ({}): {}",
            describe(&again.exit),
            String::from_utf8_lossy(&again.output).trim()
        )));
    }
    Ok(())
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
/// to our stderr as they arrive (never to stdout); otherwise they are kept.
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
    let mut stderr = std::io::stderr();
    loop {
        match exec.next().await? {
            Some(ExecEvent::Stdout(b) | ExecEvent::Stderr(b)) => {
                if stream {
                    let _ = stderr.write_all(&b);
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

fn describe(exit: &v1::ExecExit) -> String {
    match (exit.code, exit.signal, exit.error.as_str()) {
        (_, _, e) if !e.is_empty() => e.to_owned(),
        (Some(c), _, _) => format!("exit {c}"),
        (None, Some(s), _) => format!("signal {s}"),
        _ => "no exit status".into(),
    }
}
