//! `boxctl`: the command line for boxd.
//!
//! Exit codes (stable): 0 success; 1 the daemon refused or failed the
//! request, or boxctl refused a socket it cannot trust (another user's);
//! 2 usage error; 3 the daemon is not reachable. `exec` and `run`
//! exit with the command's own code, 128+N when signal N killed it, 125 when
//! boxd could not start it, 126/127 when the box could not execute it;
//! `attach` with the command's code once attached.

mod attach;
mod cp;
mod daemon;
mod doctor;
mod exec;
mod image;
mod output;
mod service;
mod snapshot;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;

use boxd_client::boxes::{self, BoxSpec, Created};
use boxd_client::{Client, ErrorKind, Paths, spec, tonic::Status, v1};
use clap::{Args, CommandFactory, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "boxctl",
    version,
    about = "Create, run and manage boxes served by boxd"
)]
struct Cli {
    /// The daemon's socket [env: BOXD_SOCKET].
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// The daemon's state directory [env: BOXD_HOME].
    #[arg(long, global = true)]
    home: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start, stop or check the daemon.
    Daemon {
        #[command(subcommand)]
        action: daemon::Action,
    },
    /// Create a box (or reuse the one with that name).
    Create(CreateArgs),
    /// Start a box.
    Start { name: String },
    /// Stop a box; its files stay.
    Stop {
        name: String,
        /// Kill at once instead of SIGTERM and a grace period.
        #[arg(short, long)]
        force: bool,
    },
    /// Remove a box and everything it wrote.
    #[command(alias = "remove")]
    Rm {
        name: String,
        /// Stop it first if it is running.
        #[arg(short, long)]
        force: bool,
    },
    /// List boxes.
    #[command(alias = "list")]
    Ls,
    /// Show one box.
    Inspect { name: String },
    /// List a running box's published ports (`8000/tcp -> 127.0.0.1:49153`),
    /// or where one box port is published.
    Port {
        name: String,
        /// Only this box port (`8000` or `8000/tcp`).
        box_port: Option<String>,
    },
    /// Run a command in a running box.
    Exec(exec::ExecArgs),
    /// Create or reuse a box, start it and run a command in it.
    Run(exec::RunArgs),
    /// Attach this terminal to an exec, by id; exit with its exit code.
    ///
    /// The output boxd keeps of it (up to its last 1 MiB, and all that its
    /// own client has not taken yet) is replayed first, as `docker logs`
    /// then `docker attach` would show it. Leaving does not stop the
    /// command; a restart of boxd is survived (the stream reattaches).
    Attach(attach::AttachArgs),
    /// Copy files between the host and a box, as `docker cp`: BOX:PATH on
    /// one side, a host path or - (a tar on stdin/stdout) on the other.
    Cp(cp::CpArgs),
    /// Print the output boxd keeps of a box's execs.
    ///
    /// Up to the last 1 MiB of each, oldest exec first; stdout to stdout,
    /// stderr to stderr, and when there are several execs a header naming
    /// each on stderr. With `--json`, lines of `{execId, stream, data |
    /// dataBase64}` and `{execId, exit}`. Reading never holds a command
    /// back or stops it.
    Logs(attach::LogsArgs),
    /// Pull, list, inspect, remove, prune and import images.
    Image {
        #[command(subcommand)]
        action: image::Action,
    },
    /// Show what running boxes use (CPU, memory, network, disk, processes).
    Stats(stats::StatsArgs),
    /// Create, list, restore and remove snapshots of a box's files.
    Snapshot {
        #[command(subcommand)]
        action: snapshot::Action,
    },
    /// Make a new box with SOURCE's spec and a copy of its files (SOURCE
    /// may be running); the new box is created, not started.
    Clone { source: String, name: String },
    /// Write a box (its spec without secret values, its image reference
    /// and its files) to an archive FILE, which must not exist.
    Export { name: String, file: PathBuf },
    /// Make a new box NAME from an archive `export` wrote. The archive's
    /// mounts, secrets, allow-list and published ports are not imported:
    /// give the network and ports again here.
    #[command(name = "import-box")]
    ImportBox {
        file: PathBuf,
        name: String,
        /// A host the new box may reach (repeatable; as `create`).
        #[arg(long = "allow-net", value_name = "HOST")]
        allow_net: Vec<String>,
        /// A port the new box publishes (repeatable; as `create`).
        #[arg(
            long = "publish",
            short = 'p',
            value_name = "[HOST_IP:]HOST_PORT:BOX_PORT"
        )]
        publish: Vec<String>,
    },
    /// Follow box state changes.
    Events,
    /// Check what this host can run and what is missing, with fixes.
    Doctor,
    /// Speak the JSONL envelope on stdin/stdout (for Studio and other
    /// line-oriented callers); diagnostics go to stderr.
    Jsonl,
    /// Show client and daemon versions.
    Version,
    /// Print shell completions.
    Completions { shell: clap_complete::Shell },
}

/// What a box is made of; shared by `create` and `run`.
#[derive(Args, Debug, Clone)]
pub struct BoxFlags {
    /// A registry reference or a local OCI image layout directory.
    #[arg(long)]
    pub image: String,
    #[arg(long)]
    pub cpus: Option<u32>,
    #[arg(long)]
    pub memory_mib: Option<u32>,
    #[arg(long = "disk-gb")]
    pub disk_gb: Option<u32>,
    /// HOST:GUEST[:ro] (repeatable).
    #[arg(long = "mount", short = 'v')]
    pub mounts: Vec<String>,
    /// A host the box may reach: a name, *.suffix, an IP address or CIDR
    /// (repeatable). None: no network.
    #[arg(long = "allow-net")]
    pub allow_net: Vec<String>,
    /// NAME:HOST[,HOST...][@FILE]: a credential the box sees only as a
    /// placeholder in $NAME; its value (from this environment's $NAME, or
    /// FILE) goes only to those hosts, in plain HTTP (repeatable).
    #[arg(long = "secret", value_name = "NAME:HOSTS[@FILE]")]
    pub secrets: Vec<String>,
    /// Publish a box port on the host while the box runs (repeatable):
    /// connections to HOST_IP:HOST_PORT (default 127.0.0.1; HOST_PORT 0 or
    /// none: any free port) reach BOX_PORT inside the box. TCP only.
    #[arg(
        long = "publish",
        short = 'p',
        value_name = "[HOST_IP:]HOST_PORT:BOX_PORT[/tcp]"
    )]
    pub publish: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct CreateArgs {
    pub name: String,
    #[command(flatten)]
    pub flags: BoxFlags,
    /// K=V (repeatable).
    #[arg(short = 'e', long = "env")]
    pub env: Vec<String>,
    /// The box's default working directory.
    #[arg(short = 'w', long = "workdir")]
    pub workdir: Option<String>,
}

/// A failure and the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
}

impl From<spec::SpecError> for Failure {
    fn from(e: spec::SpecError) -> Failure {
        Failure::usage(e.to_string())
    }
}

impl From<Status> for Failure {
    fn from(s: Status) -> Failure {
        // A connection lost during the call is "not reachable" (3);
        // anything boxd said is a refusal or a failure (1).
        let code = if ErrorKind::of_status(&s) == ErrorKind::LostDaemon {
            3
        } else {
            1
        };
        Failure {
            code,
            message: boxd_client::status_message(&s),
        }
    }
}

impl From<boxd_client::ConnectError> for Failure {
    fn from(e: boxd_client::ConnectError) -> Failure {
        // Reached but refused is a refusal (1), and so is a socket this
        // client refuses to trust (not "start the daemon": someone else's
        // socket is in the way); everything else means the daemon is not
        // reachable as this client needs it (3).
        let code = match ErrorKind::of_connect(&e) {
            ErrorKind::Refused | ErrorKind::Untrusted => 1,
            _ => 3,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

pub struct Ctx {
    pub paths: Paths,
    pub json: bool,
}

impl Ctx {
    pub async fn client(&self) -> Result<Client, Failure> {
        Ok(boxd_client::connect(&self.paths.socket).await?)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "boxctl", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    // A daemon of this home serving another socket (one started with
    // XDG_RUNTIME_DIR, say, when this process has none) is the one to talk to.
    let paths = match Paths::resolve(cli.socket, cli.home).map(Paths::following_lock) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("boxctl: {e}");
            return ExitCode::from(2);
        }
    };
    let ctx = Ctx {
        paths,
        json: cli.json,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(dispatch(&ctx, cli.command));
    let code = match result {
        Ok(code) => code,
        Err(f) => {
            eprintln!("boxctl: {}", f.message);
            f.code
        }
    };
    rt.shutdown_background();
    ExitCode::from(code)
}

async fn dispatch(ctx: &Ctx, command: Command) -> Result<u8, Failure> {
    match command {
        Command::Daemon { action } => daemon::run(ctx, action).await,
        Command::Create(args) => {
            let mut c = ctx.client().await?;
            let spec = box_spec(&args.flags, &args.env, args.workdir.as_deref())?;
            let reply = create(&mut c, &args.name, spec, ctx.json).await?;
            output::created(ctx, &reply);
            Ok(0)
        }
        Command::Start { name } => {
            let reply = ctx
                .client()
                .await?
                .start_box(v1::StartBoxRequest { name })
                .await?
                .into_inner();
            output::started(ctx, &reply);
            Ok(0)
        }
        Command::Stop { name, force } => {
            let reply = ctx
                .client()
                .await?
                .stop_box(v1::StopBoxRequest { name, force })
                .await?
                .into_inner();
            output::one_box(ctx, reply.r#box.as_ref());
            Ok(0)
        }
        Command::Rm { name, force } => {
            ctx.client()
                .await?
                .remove_box(v1::RemoveBoxRequest {
                    name: name.clone(),
                    force,
                })
                .await?;
            output::removed(ctx, &name);
            Ok(0)
        }
        Command::Ls => {
            let reply = ctx
                .client()
                .await?
                .list_boxes(v1::ListBoxesRequest {})
                .await?
                .into_inner();
            output::list(ctx, &reply.boxes);
            Ok(0)
        }
        Command::Inspect { name } => {
            let info = ctx
                .client()
                .await?
                .inspect_box(v1::InspectBoxRequest { name })
                .await?
                .into_inner();
            output::inspect(ctx, &info);
            Ok(0)
        }
        Command::Port { name, box_port } => {
            let wanted = box_port.as_deref().map(port_filter).transpose()?;
            let info = ctx
                .client()
                .await?
                .inspect_box(v1::InspectBoxRequest { name: name.clone() })
                .await?
                .into_inner();
            let ports: Vec<_> = info
                .ports
                .iter()
                .filter(|p| wanted.is_none_or(|w| p.box_port == w))
                .cloned()
                .collect();
            output::ports(ctx, &ports);
            match (wanted, ports.is_empty()) {
                (Some(w), true) => Err(Failure {
                    code: 1,
                    message: format!("box {name} publishes no port {w}/tcp now"),
                }),
                _ => Ok(0),
            }
        }
        Command::Exec(args) => exec::exec(ctx, args).await,
        Command::Run(args) => exec::run(ctx, args).await,
        Command::Attach(args) => attach::attach(ctx, args).await,
        Command::Cp(args) => cp::cp(ctx, args).await,
        Command::Logs(args) => attach::logs(ctx, args).await,
        Command::Image { action } => image::run(ctx, action).await,
        Command::Stats(args) => stats::stats(ctx, args).await,
        Command::Snapshot { action } => snapshot::snapshot(ctx, action).await,
        Command::Clone { source, name } => snapshot::clone(ctx, source, name).await,
        Command::Export { name, file } => snapshot::export(ctx, name, file).await,
        Command::ImportBox {
            file,
            name,
            allow_net,
            publish,
        } => snapshot::import(ctx, file, name, allow_net, publish).await,
        Command::Events => {
            let mut stream = ctx
                .client()
                .await?
                .watch_boxes(v1::WatchBoxesRequest {})
                .await?
                .into_inner();
            while let Some(ev) = stream.message().await? {
                output::event(ctx, &ev);
            }
            Ok(0)
        }
        Command::Doctor => doctor::run(ctx).await,
        Command::Jsonl => {
            let stdin = tokio::io::BufReader::new(tokio::io::stdin());
            match boxd_client::jsonl::driver::serve(&ctx.paths.socket, stdin, tokio::io::stdout())
                .await
            {
                Ok(()) => Ok(0),
                Err(e) => Err(Failure {
                    code: 1,
                    message: format!("jsonl: {e}"),
                }),
            }
        }
        Command::Version => {
            let daemon = match ctx.client().await {
                Ok(mut c) => c
                    .describe(v1::DescribeRequest {})
                    .await
                    .ok()
                    .map(|r| r.into_inner()),
                Err(_) => None,
            };
            output::version(ctx, daemon.as_ref());
            Ok(0)
        }
        Command::Completions { .. } => unreachable!("handled before the runtime starts"),
    }
}

/// `8000` or `8000/tcp`: a box port to look up.
fn port_filter(s: &str) -> Result<u32, Failure> {
    let (port, proto) = s.split_once('/').unwrap_or((s, "tcp"));
    match (port.parse::<u16>(), proto.eq_ignore_ascii_case("tcp")) {
        (Ok(p), true) if p > 0 => Ok(p.into()),
        _ => Err(Failure::usage(format!(
            "invalid box port {s:?}: use PORT or PORT/tcp"
        ))),
    }
}

/// The box spec `create` and `run` ask for, from their flags.
pub fn box_spec(
    flags: &BoxFlags,
    env: &[String],
    workdir: Option<&str>,
) -> Result<BoxSpec, Failure> {
    let words = spec::SpecWords {
        image: &flags.image,
        cpus: flags.cpus,
        memory_mib: flags.memory_mib,
        disk_size_gb: flags.disk_gb,
        mounts: &flags.mounts,
        allow_net: &flags.allow_net,
        env,
        working_dir: workdir,
        secrets: &flags.secrets,
        publish: &flags.publish,
    };
    Ok(words.parse()?)
}

/// Creates (or reuses) a box, pulling its image first, with progress on
/// stderr, when the daemon does not have it.
pub async fn create(
    c: &mut Client,
    name: &str,
    spec: BoxSpec,
    json: bool,
) -> Result<Created, Failure> {
    let show = if json {
        image::Show::JsonStderr
    } else {
        image::Show::auto()
    };
    let mut view = image::PullView::new(spec.image(), show);
    let on_pull = |e: &boxes::PullEvent| {
        view.event(e);
        std::future::ready(())
    };
    Ok(boxes::create_or_reuse(c, name, spec, on_pull).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
