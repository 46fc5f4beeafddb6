//! `boxctl daemon start|stop|status`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use boxd_client::untrusted::{escape, escape_lines};
use boxd_client::{spawn, v1};
use clap::Subcommand;

use crate::{Ctx, Failure, output};

#[derive(Subcommand, Debug)]
pub enum Action {
    /// Start boxd in the background and wait until it answers.
    Start {
        /// The boxd binary [default: next to boxctl, else on PATH].
        #[arg(long)]
        boxd: Option<PathBuf>,
        /// Extra arguments for boxd (e.g. --engine namespace).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Stop boxd (SIGTERM) and wait until it is gone.
    Stop,
    /// Say whether boxd runs, and what it is.
    Status,
    /// Install boxd as a per-user service (systemd user units on Linux, a
    /// LaunchAgent on macOS), socket-activated, and start listening.
    Install {
        /// The boxd binary [default: next to boxctl, else on PATH].
        #[arg(long)]
        boxd: Option<PathBuf>,
        /// Seconds without clients or running boxes before boxd exits (it
        /// is started again on the next connection; 0: never).
        #[arg(long, default_value_t = 300)]
        idle_exit: u64,
        /// Write the files only; do not load them.
        #[arg(long)]
        no_start: bool,
    },
    /// Stop and remove the per-user service.
    Uninstall,
    /// Show the daemon's log.
    Logs {
        /// Keep printing new lines.
        #[arg(short, long)]
        follow: bool,
        /// How many lines to show first.
        #[arg(short = 'n', long, default_value_t = 50)]
        lines: usize,
    },
}

pub async fn run(ctx: &Ctx, action: Action) -> Result<u8, Failure> {
    match action {
        Action::Status => match describe(ctx).await {
            Ok(d) => {
                if ctx.json {
                    println!(
                        "{}",
                        serde_json::json!({"running": true, "daemon": output::describe_json(&d)})
                    );
                } else {
                    // What Describe says, escaped: the engine's problem
                    // quotes the remote BoxLite server's error bodies.
                    println!(
                        "boxd {} is running (pid {}) on {}",
                        escape(&d.daemon_version),
                        d.pid,
                        escape(&d.socket)
                    );
                    println!(
                        "engine: {} {} ({} isolation{})",
                        escape(&d.engine),
                        escape(&d.engine_version),
                        escape(&d.isolation),
                        crate::output::host_suffix(&d.engine_host)
                    );
                    if !d.engine_problem.is_empty() {
                        println!("engine problem: {}", escape_lines(&d.engine_problem));
                    }
                    for n in &d.notes {
                        println!("note: {}", escape_lines(n));
                    }
                    if d.protocol != v1::PROTOCOL {
                        println!(
                            "protocol: boxd speaks {}, this boxctl {}: restart boxd from this release",
                            escape(&d.protocol),
                            v1::PROTOCOL
                        );
                    }
                    if let Some(line) = crate::service::status_line() {
                        println!("{line}");
                    }
                }
                Ok(0)
            }
            Err(f) if f.code == 3 => {
                if ctx.json {
                    println!(
                        "{}",
                        serde_json::json!({"running": false, "socket": ctx.paths.socket})
                    );
                } else {
                    println!(
                        "boxd is not running (socket {})",
                        ctx.paths.socket.display()
                    );
                    if let Some(line) = crate::service::status_line() {
                        println!("{line}");
                    }
                }
                Ok(3)
            }
            Err(f) => Err(f),
        },
        Action::Start { boxd, args } => start(ctx, boxd, args).await,
        Action::Install {
            boxd,
            idle_exit,
            no_start,
        } => crate::service::install(ctx, boxd, idle_exit, !no_start),
        Action::Uninstall => crate::service::uninstall(),
        Action::Logs { follow, lines } => crate::service::logs(ctx, lines, follow).await,
        Action::Stop => {
            let d = describe(ctx).await?;
            // SAFETY: kill has no memory-safety preconditions.
            if unsafe { libc::kill(d.pid as i32, libc::SIGTERM) } != 0 {
                return Err(Failure {
                    code: 1,
                    message: format!("cannot signal boxd (pid {})", d.pid),
                    kind: None,
                });
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                // Gone means the process is gone (and with it the home
                // lock), not merely that the socket stopped answering.
                // SAFETY: kill with signal 0 only checks for existence.
                if unsafe { libc::kill(d.pid as i32, 0) } != 0 {
                    if !ctx.json {
                        println!("boxd (pid {}) stopped", d.pid);
                    } else {
                        println!("{}", serde_json::json!({"stopped": d.pid}));
                    }
                    return Ok(0);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(Failure {
                code: 1,
                message: format!("boxd (pid {}) did not stop within 10 s", d.pid),
                kind: None,
            })
        }
    }
}

/// The daemon's self-description, whatever its protocol version (so that
/// `status` can report a mismatch and `stop` can stop an old daemon).
async fn describe(ctx: &Ctx) -> Result<v1::DescribeResponse, Failure> {
    Ok(boxd_client::connect_unchecked(&ctx.paths.socket)
        .await?
        .describe(v1::DescribeRequest {})
        .await?
        .into_inner())
}

async fn start(ctx: &Ctx, boxd: Option<PathBuf>, args: Vec<String>) -> Result<u8, Failure> {
    let bin = spawn::boxd_binary(boxd);
    let running = spawn::ensure_running(&ctx.paths, &bin, &args)
        .await
        .map_err(|e| Failure {
            code: 1,
            message: e.to_string(),
            kind: None,
        })?;
    let d = running.describe;
    match (running.origin, ctx.json) {
        (spawn::Origin::AlreadyRunning, false) => {
            println!("boxd is already running (pid {})", d.pid)
        }
        (spawn::Origin::Started, false) => println!(
            "boxd {} started (pid {}) on {}",
            escape(&d.daemon_version),
            d.pid,
            escape(&d.socket)
        ),
        (origin, true) => println!(
            "{}",
            serde_json::json!({
                "started": origin == spawn::Origin::Started,
                "daemon": output::describe_json(&d),
            })
        ),
    }
    Ok(0)
}
