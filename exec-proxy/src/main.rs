//! `harness-box-exec`: looks like the command it wraps, runs inside a box.
//!
//! An agent host spawns `harness-box-exec --box NAME … -- CMD ARGS…` as if it
//! were `CMD`. The proxy makes sure `boxd` runs (starting it when nothing
//! answers), creates or reuses the box, starts it, runs the probe and, only
//! when the probe fails, the provisioning command, then runs `CMD` in the box
//! with this process's stdio attached.
//!
//! Invariants: stdout carries the command's stdout byte for byte and nothing
//! else (every diagnostic goes to stderr); the exit code is the command's,
//! 128+N for signal N, 125 when the box or the command could not be started;
//! when the proxy dies its exec is reaped by boxd and the box stays; when
//! boxd restarts, the exec's stream reattaches (one line on stderr says so).

mod ready;

use std::process::ExitCode;
use std::time::Instant;

use boxd_client::{ErrorKind, ExecStream, Paths, boxes, spawn, spec, stdio, v1};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "harness-box-exec", version, about, long_about = None)]
pub struct Args {
    /// The box to run in; created when it does not exist, reused when it does.
    #[arg(long = "box", value_name = "NAME")]
    pub box_name: String,
    /// A registry reference or an OCI image layout directory (needed to
    /// create the box; optional when it exists).
    #[arg(long, value_name = "REF|LAYOUT")]
    pub image: Option<String>,
    /// HOST:GUEST[:ro] (repeatable).
    #[arg(long = "mount", value_name = "HOST:GUEST[:ro]")]
    pub mounts: Vec<String>,
    /// Working directory inside the box, for the box and every command.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// A host the box may reach: a name, *.suffix, an IP address or CIDR
    /// (repeatable). None: no network.
    #[arg(long = "allow-net", value_name = "HOST")]
    pub allow_net: Vec<String>,
    /// NAME:HOST[,HOST...][@FILE]: a credential the box sees only as a
    /// placeholder in $NAME; its value (from this environment's $NAME, or
    /// FILE) goes only to those hosts, in plain HTTP (repeatable).
    #[arg(long = "secret", value_name = "NAME:HOSTS[@FILE]")]
    pub secrets: Vec<String>,
    /// Publish a box port on the host (repeatable); the host address
    /// defaults to 127.0.0.1, host port 0 (or none) means any free port.
    #[arg(long = "publish", value_name = "[HOST_IP:]HOST_PORT:BOX_PORT")]
    pub publish: Vec<String>,
    /// K=V for the probe, the provisioning command and the command (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// A shell command that exits 0 when the box is ready.
    #[arg(long, value_name = "CMD")]
    pub probe: Option<String>,
    /// A shell command that makes the box ready; run only when the probe fails.
    #[arg(long, value_name = "CMD")]
    pub provision: Option<String>,
    #[arg(long)]
    pub cpus: Option<u32>,
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u32>,
    /// The daemon's socket [env: BOXD_SOCKET; default: the per-user socket].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<std::path::PathBuf>,
    /// Only errors on stderr.
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Also report each step and its timing on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to run in the box, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Why the proxy could not run the command; exit code 125.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    #[error(transparent)]
    Paths(#[from] boxd_client::PathsError),
    #[error(transparent)]
    Spawn(#[from] spawn::SpawnError),
    #[error("{0}")]
    Daemon(String),
    #[error("box {0:?} does not exist; give --image to create it")]
    NoImage(String),
    #[error("{0}")]
    NotReady(String),
}

impl From<boxd_client::tonic::Status> for ProxyError {
    fn from(s: boxd_client::tonic::Status) -> Self {
        ProxyError::Daemon(boxd_client::status_message(&s))
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(&args);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::from(stdio::EXEC_FAILED);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(stdio::EXEC_FAILED)
        }
    }
}

fn init_logging(args: &Args) {
    let level = if args.quiet {
        "error"
    } else if args.verbose {
        "debug"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(format!(
            "harness_box_exec={level}"
        )))
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .init();
}

async fn run(args: Args) -> Result<u8, ProxyError> {
    let begin = Instant::now();
    let env = spec::parse_env(&args.env)?;
    let paths = Paths::resolve(args.socket.clone(), None)?;
    let running = spawn::ensure_running(&paths, &spawn::boxd_binary(None), &[]).await?;
    let mut client = running.client;
    if running.origin == spawn::Origin::Started {
        tracing::info!(
            "started boxd {} (pid {}, {} engine) on {}",
            running.describe.daemon_version,
            running.describe.pid,
            running.describe.engine,
            paths.socket.display()
        );
    }
    tracing::debug!("daemon ready after {:?}", begin.elapsed());

    let name = args.box_name.clone();
    match &args.image {
        Some(image) => {
            let spec = spec::SpecWords {
                image,
                cpus: args.cpus,
                memory_mib: args.memory_mib,
                mounts: &args.mounts,
                allow_net: &args.allow_net,
                env: &args.env,
                working_dir: args.workdir.as_deref(),
                secrets: &args.secrets,
                publish: &args.publish,
                ..Default::default()
            }
            .parse()?;
            // A missing image is pulled first; its steps are told with -v.
            let on_pull = |e: &boxes::PullEvent| {
                if let Some(step) = pull_step(e) {
                    tracing::debug!("pulling {image}: {step}");
                }
                std::future::ready(())
            };
            let created = boxes::create_or_reuse(&mut client, &name, spec, on_pull).await?;
            for w in &created.warnings {
                tracing::warn!("{w}");
            }
            tracing::debug!(
                "box {name} {} after {:?}",
                match created.outcome {
                    boxes::Outcome::Created => "created",
                    boxes::Outcome::Reused => "reused",
                },
                begin.elapsed()
            );
        }
        None => {
            let found = client
                .inspect_box(v1::InspectBoxRequest { name: name.clone() })
                .await;
            if matches!(&found, Err(s) if ErrorKind::of_status(s) == ErrorKind::NotFound) {
                return Err(ProxyError::NoImage(name));
            }
            found?;
        }
    }
    let started = client
        .start_box(v1::StartBoxRequest { name: name.clone() })
        .await?
        .into_inner();
    tracing::debug!(
        "box {name} running after {:?} (boot {} ms)",
        begin.elapsed(),
        started.boot_ms
    );

    let shell = ready::Shell {
        box_name: &name,
        env: &env,
        workdir: args.workdir.as_deref(),
    };
    ready::ensure(
        &mut client,
        &shell,
        args.probe.as_deref(),
        args.provision.as_deref(),
    )
    .await?;

    let exec = ExecStream::start(
        &mut client,
        v1::ExecStart {
            box_name: name.clone(),
            command: args.command[0].clone(),
            args: args.command[1..].to_vec(),
            env,
            working_dir: args.workdir.clone().unwrap_or_default(),
            stdin: true,
            ..Default::default()
        },
    )
    .await?
    // A restart of boxd does not end the command: the stream reattaches,
    // saying so on stderr (stdout stays the command's alone).
    .reconnecting(&paths.socket);
    tracing::debug!(
        "command started after {:?} (launch {} ms)",
        begin.elapsed(),
        exec.launch_ms()
    );
    let exit = stdio::attach(
        exec,
        stdio::Attach {
            stdin: true,
            tty: false,
            signals: true,
        },
    )
    .await?;
    if !exit.error.is_empty() {
        tracing::error!("{}", exit.error);
    }
    Ok(stdio::exit_code(&exit))
}

/// One step of a pull, in words, for the verbose log (byte counts left
/// out: they come many times a second).
fn pull_step(e: &boxes::PullEvent) -> Option<String> {
    use boxes::PullEvent;
    Some(match e {
        PullEvent::Started(s) => format!("{} layers, {} bytes", s.layers.len(), s.total_bytes),
        PullEvent::Progress(_) => return None,
        PullEvent::LayerDone(d) => format!("layer {d} done"),
        PullEvent::Unpacking(_) => "unpacking".into(),
        PullEvent::Done(i) => format!("done ({})", i.digest),
    })
}
