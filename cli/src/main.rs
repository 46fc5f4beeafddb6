//! `boxctl`: the command line for boxd, in docker's shapes where they fit
//! (`run [OPTIONS] IMAGE [COMMAND]`, `exec BOX COMMAND`, `ps -a`, ...).
//!
//! Exit codes (stable; the table is in docs/cli.md): 0 success; 1 the
//! daemon refused or failed a request (a box that is not there, say), or
//! boxctl refused a socket it cannot trust; 2 usage error; 3 the daemon is
//! not reachable (and could not be started). `run`, `exec` and `create`
//! exit 125 when boxd refused or failed them (docker's code), and `run`
//! and `exec` with the command's own code, 126 when it cannot run, 127
//! when it is not found, 128+N when signal N killed it.

mod attach;
mod boxes;
mod complete;
mod cp;
mod daemon;
mod doctor;
mod exec;
mod image;
mod mcp;
mod output;
mod service;
mod snapshot;
mod stats;
mod template;
mod words;

use std::path::PathBuf;
use std::process::ExitCode;

use boxd_client::boxes::{BoxSpec, Created};
use boxd_client::spawn;
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
    /// Create a box from IMAGE (not started), or find the one of that
    /// name when its spec is the same.
    ///
    /// A box has no main command, unlike a docker container: run commands
    /// in it with `exec` (or `run -d`). Older form: `create NAME --image
    /// IMAGE`.
    Create(CreateArgs),
    /// Start boxes (a running box stays as it is).
    Start {
        /// Box names or ids.
        #[arg(required = true, value_name = "BOX", add = crate::complete::boxes())]
        names: Vec<String>,
    },
    /// Stop boxes; their files stay.
    Stop {
        /// Box names or ids.
        #[arg(required = true, value_name = "BOX", add = crate::complete::boxes())]
        names: Vec<String>,
        /// Kill at once instead of SIGTERM and a grace period.
        #[arg(short, long)]
        force: bool,
    },
    /// Stop boxes, then start them again (their files stay).
    Restart {
        /// Box names or ids.
        #[arg(required = true, value_name = "BOX", add = crate::complete::boxes())]
        names: Vec<String>,
    },
    /// Change boxes' limits or allow-list, as `docker update`: cpus and
    /// memory apply at once to a running box (its cgroups), the allow-list
    /// from its next start (`restart`); every later start keeps them.
    Update(boxes::UpdateArgs),
    /// Remove boxes and everything they wrote.
    #[command(alias = "remove")]
    Rm {
        /// Box names or ids.
        #[arg(required = true, value_name = "BOX", add = crate::complete::boxes())]
        names: Vec<String>,
        /// Stop a running box first.
        #[arg(short, long)]
        force: bool,
    },
    /// List boxes (every box; `ps` lists running ones as docker's does).
    #[command(alias = "list")]
    Ls(boxes::ListArgs),
    /// List running boxes (`-a`: all), as `docker ps`.
    Ps(boxes::ListArgs),
    /// Show boxes, by name or id, as JSON (a list for several).
    Inspect {
        /// Box names or ids.
        #[arg(required = true, value_name = "BOX", add = crate::complete::boxes())]
        names: Vec<String>,
        /// A Go template over the JSON, as docker's: `{{.State}}`,
        /// `{{.Name}} {{.Id}}`, `{{json .Spec}}`, `{{index .Spec.Env "K"}}`.
        #[arg(short, long, value_name = "TEMPLATE")]
        format: Option<String>,
    },
    /// List a running box's published ports (`8000/tcp -> 127.0.0.1:49153`),
    /// or where one box port is published.
    Port {
        /// The box.
        #[arg(value_name = "BOX", add = crate::complete::boxes())]
        name: String,
        /// Only this box port (`8000` or `8000/tcp`).
        box_port: Option<String>,
    },
    /// Run a command in a running box: `exec [OPTIONS] BOX COMMAND [ARG...]`.
    Exec(exec::ExecArgs),
    /// Create a box from IMAGE (or reuse the one of that --name when its
    /// spec is the same), start it and run a command in it.
    ///
    /// `run [OPTIONS] IMAGE [COMMAND [ARG...]]`; no COMMAND runs the image's
    /// Entrypoint and Cmd. Without --name the box gets a generated name.
    /// The box outlives the command (unlike a docker container it is not
    /// tied to it): `--rm` removes it after, but only if this command
    /// created it. Older form: `run NAME --image IMAGE -- COMMAND`.
    Run(exec::RunArgs),
    /// Attach this terminal to an exec, by id (or to a box's latest
    /// running exec, by box name); exit with its exit code.
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
    /// List images (as `image ls`).
    Images,
    /// Pull an image (as `image pull`).
    Pull {
        /// A registry reference (`alpine:3.20`, `localhost:5000/app@sha256:…`).
        reference: String,
    },
    /// Boxes as a group: `box prune`.
    #[command(name = "box")]
    Box {
        #[command(subcommand)]
        action: BoxAction,
    },
    /// The daemon's whole store: `system prune`.
    System {
        #[command(subcommand)]
        action: SystemAction,
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
    Clone {
        /// The box to copy.
        source: String,
        /// The new box's name.
        name: String,
    },
    /// Write a box (its spec without secret values, its image reference
    /// and its files) to an archive FILE, which must not exist.
    Export {
        /// The box.
        #[arg(value_name = "BOX", add = crate::complete::boxes())]
        name: String,
        /// The archive to write (it must not exist).
        file: PathBuf,
    },
    /// Make a new box NAME from an archive `export` wrote. The archive's
    /// mounts, secrets, allow-list and published ports are not imported:
    /// give the network and ports again here.
    #[command(name = "import-box")]
    ImportBox {
        /// An archive `boxctl export` wrote.
        file: PathBuf,
        /// The new box's name.
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
    /// Follow box state changes (created, starting, running, stopping,
    /// stopped, removed, failed), with their times, as `docker events`.
    Events(EventsArgs),
    /// Check what this host can run and what is missing, with fixes.
    Doctor,
    /// Speak the JSONL envelope on stdin/stdout (for Studio and other
    /// line-oriented callers); diagnostics go to stderr.
    Jsonl,
    /// Serve boxes to an MCP client (Claude Code, Codex, Cursor, Gemini
    /// CLI, ...) on stdin/stdout. The agent decides what runs in a box;
    /// these flags decide what a box may touch: by default no host path,
    /// no network, no published port.
    #[command(after_help = mcp::HELP)]
    Mcp(McpArgs),
    /// Show client and daemon versions.
    Version,
    /// Print shell completions.
    Completions {
        /// The shell to print them for.
        shell: clap_complete::Shell,
    },
}

#[derive(clap::Args, Debug)]
struct McpArgs {
    /// A host directory that boxes may mount, and copies may read from or
    /// write to, with everything beneath it (repeatable; none by default).
    #[arg(long = "allow-mount", value_name = "DIR")]
    allow_mount: Vec<std::path::PathBuf>,
    /// A host that boxes may be allowed to reach (repeatable; none by
    /// default, so boxes reach no network).
    #[arg(long = "allow-net", value_name = "HOST")]
    allow_net: Vec<String>,
    /// An image boxes may be made from: a reference, or a prefix ending in
    /// `*` (repeatable; any image when none is given).
    #[arg(long = "allow-image", value_name = "REF")]
    allow_image: Vec<String>,
    /// Let boxes publish ports on the host.
    #[arg(long = "allow-publish")]
    allow_publish: bool,
    /// The most boxes made through MCP at once (default 8).
    #[arg(long = "max-boxes", value_name = "N")]
    max_boxes: Option<usize>,
    /// The most memory a box may ask for (512m, 2g).
    #[arg(long = "max-memory", value_name = "SIZE")]
    max_memory: Option<String>,
    /// The most CPUs a box may ask for.
    #[arg(long = "max-cpus", value_name = "N")]
    max_cpus: Option<u32>,
    /// Let the agent use, stop and remove every box, not only those made
    /// through MCP.
    #[arg(long = "any-box")]
    any_box: bool,
    /// The configuration file whose `[mcp]` section adds to these flags
    /// (default: boxd's, `$XDG_CONFIG_HOME/boxd/config.toml`; also
    /// `BOXD_CONFIG`).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

impl McpArgs {
    fn policy(self) -> Result<mcp::policy::Policy, Failure> {
        let file = mcp::config::load(self.config.as_deref()).map_err(|e| Failure {
            code: 1,
            message: e,
            kind: None,
        })?;
        let mut mounts = Vec::new();
        for dir in file.allow_mount.iter().chain(&self.allow_mount) {
            let abs = std::path::absolute(dir)
                .map_err(|e| Failure::usage(format!("--allow-mount {}: {e}", dir.display())))?;
            // Held open from now on: every path the agent names beneath it
            // is used from this descriptor down.
            let root = boxd_client::roots::Root::open(&abs)
                .map_err(|e| Failure::usage(format!("--allow-mount {}: {e}", dir.display())))?;
            mounts.push(std::sync::Arc::new(root));
        }
        let max_memory_mib = match self.max_memory.as_ref().or(file.max_memory.as_ref()) {
            None => None,
            Some(w) => Some(words::memory_mib(w).map_err(Failure::usage)?),
        };
        let both = |file: Vec<String>, flags: Vec<String>| file.into_iter().chain(flags).collect();
        Ok(mcp::policy::Policy {
            mounts,
            net: both(file.allow_net, self.allow_net),
            images: both(file.allow_image, self.allow_image),
            publish: self.allow_publish || file.allow_publish,
            max_boxes: self.max_boxes.or(file.max_boxes).unwrap_or(8),
            max_memory_mib,
            max_cpus: self.max_cpus.or(file.max_cpus),
            any_box: self.any_box || file.any_box,
        })
    }
}

#[derive(clap::Args, Debug)]
struct EventsArgs {
    /// Past events first, from this time: a duration back (10m, 1h30m),
    /// an RFC 3339 time or Unix seconds. boxd keeps its last 1000 events
    /// since it started.
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Stop at this time (same words as --since); without it, follow.
    #[arg(long, value_name = "WHEN")]
    until: Option<String>,
    /// Only events matching: box=NAME (or id), state=STATE (also event=);
    /// repeatable, as docker's (the same key: any; different keys: all).
    #[arg(short, long, value_name = "KEY=VALUE")]
    filter: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum BoxAction {
    /// Remove every box that is not running, with its files.
    Prune {
        /// Do not ask first.
        #[arg(short, long)]
        force: bool,
    },
}

#[derive(Subcommand, Debug)]
enum SystemAction {
    /// Remove every box that is not running and every image no box uses.
    Prune {
        /// Do not ask first.
        #[arg(short, long)]
        force: bool,
    },
}

/// What a box is made of; shared by `create` and `run`.
#[derive(Args, Debug, Clone, Default)]
pub struct BoxFlags {
    /// The box's name (default: a generated one, as docker's).
    #[arg(long)]
    pub name: Option<String>,
    /// The image, in the older form where the first word is the box's name.
    #[arg(long, value_name = "IMAGE", add = crate::complete::images())]
    pub image: Option<String>,
    /// CPUs the box may use (whole CPUs; a fraction such as 0.5 is
    /// rounded up, and boxctl says so).
    #[arg(long, value_name = "CPUS")]
    pub cpus: Option<String>,
    /// Memory limit: 512m, 2g, ... (docker's sizes).
    #[arg(short = 'm', long = "memory", value_name = "SIZE")]
    pub memory: Option<String>,
    /// Memory limit in MiB (the older spelling of --memory).
    #[arg(long = "memory-mib", value_name = "MIB", conflicts_with = "memory")]
    pub memory_mib: Option<u32>,
    /// The box's disk size in GB (the microVM engine; the namespace
    /// engine's boxes use the host's disk).
    #[arg(long = "disk-gb", value_name = "GB")]
    pub disk_gb: Option<u32>,
    /// HOST:GUEST[:ro] (repeatable).
    #[arg(long = "mount", short = 'v', value_name = "HOST:GUEST[:ro]")]
    pub mounts: Vec<String>,
    /// A host the box may reach: a name, *.suffix, an IP address or CIDR
    /// (repeatable). None: no network (docker's --network has no match:
    /// a box reaches only what this names).
    #[arg(long = "allow-net", value_name = "HOST")]
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
    /// keep-id[:uid=N[,gid=M]]: the owners of mounted directories become box
    /// user N (default: your uid), that box's default user, so a non-root
    /// user in the box writes there as the host user (podman's
    /// --userns=keep-id). Without it a mount's owner
    /// is box root. boxd knows no other --userns mode: every box has a user
    /// namespace of its own.
    #[arg(long, value_name = "keep-id[:uid=N[,gid=M]]")]
    pub userns: Option<String>,
    /// Remove an existing box of that name (and its files) and create a new
    /// one, as podman's --replace. Without it, a name whose box has another
    /// spec is refused (exit 125) and the box is kept.
    #[arg(long)]
    pub replace: bool,
}

#[derive(Args, Debug, Clone)]
pub struct CreateArgs {
    /// The image (older form: with --image, the box's name).
    #[arg(value_name = "IMAGE", add = crate::complete::images())]
    pub first: Option<String>,
    /// Refused: a box has no main command (see `create --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub flags: BoxFlags,
    /// The box's environment: K=V, or K for this environment's value
    /// (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V|K")]
    pub env: Vec<String>,
    /// A file of K=V (or K) lines, # comments (repeatable; -e wins).
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<PathBuf>,
    /// The box's default working directory.
    #[arg(short = 'w', long = "workdir")]
    pub workdir: Option<String>,
}

/// A failure and the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// What kind of failure boxd reported, when it did.
    pub kind: Option<ErrorKind>,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
            kind: None,
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
        let kind = ErrorKind::of_status(&s);
        let code = if kind == ErrorKind::LostDaemon { 3 } else { 1 };
        Failure {
            code,
            message: boxd_client::status_message(&s),
            kind: Some(kind),
        }
    }
}

impl From<boxd_client::ConnectError> for Failure {
    fn from(e: boxd_client::ConnectError) -> Failure {
        // Reached but refused is a refusal (1), and so is a socket this
        // client refuses to trust (not "start the daemon": someone else's
        // socket is in the way); everything else means the daemon is not
        // reachable as this client needs it (3).
        let kind = ErrorKind::of_connect(&e);
        let code = match kind {
            ErrorKind::Refused | ErrorKind::Untrusted => 1,
            _ => 3,
        };
        Failure {
            code,
            message: e.to_string(),
            kind: Some(kind),
        }
    }
}

#[derive(Clone)]
pub struct Ctx {
    pub paths: Paths,
    pub json: bool,
}

impl Ctx {
    /// A client of the daemon, which is started first when nothing answers
    /// (as `harness-box-exec` does; one line on stderr says so).
    /// `BOXD_AUTOSTART=0` turns that off.
    pub async fn client(&self) -> Result<Client, Failure> {
        match boxd_client::connect(&self.paths.socket).await {
            Ok(c) => Ok(c),
            Err(e)
                if ErrorKind::of_connect(&e) == ErrorKind::NotRunning
                    && std::env::var("BOXD_AUTOSTART").as_deref() != Ok("0") =>
            {
                let running = spawn::ensure_running(&self.paths, &spawn::boxd_binary(None), &[])
                    .await
                    .map_err(|e| Failure {
                        code: 3,
                        message: format!("boxd is not running and could not be started: {e}"),
                        kind: Some(ErrorKind::NotRunning),
                    })?;
                if running.origin == spawn::Origin::Started {
                    eprintln!(
                        "boxctl: started boxd (pid {}) on {}",
                        running.describe.pid, running.describe.socket
                    );
                }
                Ok(running.client)
            }
            Err(e) => Err(e.into()),
        }
    }
}

async fn events(ctx: &Ctx, args: EventsArgs) -> Result<u8, Failure> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let when = |w: &Option<String>| {
        w.as_deref()
            .map(|w| words::since_ms(w, now))
            .transpose()
            .map_err(Failure::usage)
    };
    let (since, until) = (when(&args.since)?, when(&args.until)?);
    let mut wanted: Vec<(String, String)> = Vec::new();
    for f in &args.filter {
        match f.split_once('=') {
            Some(("box" | "name" | "container" | "id", v)) if !v.is_empty() => {
                wanted.push(("box".into(), v.to_owned()))
            }
            Some(("state" | "event" | "status", v)) if !v.is_empty() => {
                wanted.push(("state".into(), v.to_ascii_lowercase()))
            }
            _ => {
                return Err(Failure::usage(format!(
                    "invalid filter {f:?}: use box=NAME or state=STATE (created, starting, running, stopping, stopped, removed, failed)"
                )));
            }
        }
    }
    let matches = |e: &v1::BoxEvent| {
        ["box", "state"].iter().all(|key| {
            let mut of_key = wanted.iter().filter(|(k, _)| k == key).peekable();
            of_key.peek().is_none()
                || of_key.any(|(_, v)| match *key {
                    "box" => *v == e.name || *v == e.box_id,
                    _ => v == output::state(e.state),
                })
        })
    };
    let mut stream = ctx
        .client()
        .await?
        .watch_boxes(v1::WatchBoxesRequest {
            since_ms: since.unwrap_or(0),
            // boxd ends the stream there.
            until_ms: until.map_or(0, |u| u.max(1)),
            initial: false,
        })
        .await?
        .into_inner();
    while let Some(ev) = stream.message().await? {
        if matches(&ev) {
            output::event(ctx, &ev);
        }
    }
    Ok(0)
}

/// A closed stdout (`boxctl ls | head -1`) ends boxctl as it ends `cat`:
/// killed by SIGPIPE, silently. SIGPIPE itself stays ignored (Rust's
/// default), because a write to a daemon socket that just closed must be
/// an error boxctl handles (reattach, report), never a death; only the
/// panic that `println!` raises on a broken stdout becomes the signal.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            die_of_sigpipe();
        }
        default(info);
    }));
}

/// Ends boxctl as SIGPIPE ends `cat`.
fn die_of_sigpipe() {
    // SAFETY: restoring a signal's default disposition and raising it; the
    // process ends here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    // `COMPLETE=SHELL boxctl -- WORDS…`: the completion script asking.
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
    let cli = Cli::parse();
    if let Command::Completions { shell } = cli.command {
        // The script asks boxctl itself what may follow (box and image
        // names from the daemon). Made whole first, then written: a reader
        // that goes away (`| head`) ends boxctl as SIGPIPE ends `cat`.
        let mut script = Vec::new();
        if let Err(e) = complete::registration(shell, &mut script) {
            eprintln!("boxctl: {e}");
            return ExitCode::FAILURE;
        }
        use std::io::Write as _;
        if let Err(e) = std::io::stdout().write_all(&script) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                die_of_sigpipe();
            }
            eprintln!("boxctl: write the completions: {e}");
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    let json = cli.json;
    // A daemon of this home serving another socket (one started with
    // XDG_RUNTIME_DIR, say, when this process has none) is the one to talk to.
    let paths = match Paths::resolve(cli.socket, cli.home).map(Paths::following_lock) {
        Ok(p) => p,
        Err(e) => {
            report(json, &Failure::usage(e.to_string()));
            return ExitCode::from(2);
        }
    };
    let ctx = Ctx { paths, json };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(dispatch(&ctx, cli.command));
    let code = match result {
        Ok(code) => code,
        Err(f) => {
            report(json, &f);
            f.code
        }
    };
    rt.shutdown_background();
    ExitCode::from(code)
}

/// A failure on stderr: a line of words, or with `--json` one JSON object
/// `{"error": {"message", "exitCode", "kind"}}`. The words are escaped
/// ([`boxd_client::untrusted::escape_lines`]): boxd's errors quote what
/// images, boxes and remote servers said, and only their newlines (a start
/// error's quoted log lines) are kept; JSON is escaped by serde.
fn report(json: bool, f: &Failure) {
    if json {
        let kind = f.kind.map(|k| format!("{k:?}"));
        eprintln!(
            "{}",
            serde_json::json!({"error": {"message": f.message, "exitCode": f.code, "kind": kind}})
        );
    } else {
        eprintln!(
            "boxctl: {}",
            boxd_client::untrusted::escape_lines(&f.message)
        );
    }
}

async fn dispatch(ctx: &Ctx, command: Command) -> Result<u8, Failure> {
    match command {
        Command::Daemon { action } => daemon::run(ctx, action).await,
        Command::Create(args) => {
            // docker's 125 for what boxd refused; a wrong word stays a
            // usage error (2).
            let fail = |mut f: Failure| {
                if f.code != 2 {
                    f.code = 125;
                }
                f
            };
            if !args.command.is_empty() {
                return Err(fail(Failure::usage(format!(
                    "a box has no main command, so create takes none ({:?}): create the box, then run it with boxctl run -d or boxctl exec",
                    args.command.join(" ")
                ))));
            }
            let target = boxes::target(&args.flags, args.first).map_err(fail)?;
            let env = words::env(&args.env_file, &args.env).map_err(|m| fail(Failure::usage(m)))?;
            let mut c = ctx.client().await.map_err(fail)?;
            let reply = boxes::create(
                ctx,
                &mut c,
                &args.flags,
                &target,
                &env,
                args.workdir.as_deref(),
            )
            .await
            .map_err(fail)?;
            output::created(ctx, &reply);
            Ok(0)
        }
        Command::Start { names } => boxes::start(ctx, &names).await,
        Command::Stop { names, force } => boxes::stop(ctx, &names, force).await,
        Command::Restart { names } => boxes::restart(ctx, &names).await,
        Command::Update(args) => boxes::update(ctx, args).await,
        Command::Rm { names, force } => boxes::rm(ctx, &names, force).await,
        Command::Ls(args) => boxes::list(ctx, args, false).await,
        Command::Ps(args) => boxes::list(ctx, args, true).await,
        Command::Inspect { names, format } => boxes::inspect(ctx, &names, format.as_deref()).await,
        Command::Port { name, box_port } => {
            let wanted = box_port.as_deref().map(port_filter).transpose()?;
            let mut client = ctx.client().await?;
            let info = boxes::must_exist(&mut client, &name).await?;
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
                    kind: None,
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
        Command::Images => image::run(ctx, image::Action::Ls).await,
        Command::Pull { reference } => image::run(ctx, image::Action::Pull { reference }).await,
        Command::Box {
            action: BoxAction::Prune { force },
        } => boxes::prune(ctx, force, false).await,
        Command::System {
            action: SystemAction::Prune { force },
        } => boxes::prune(ctx, force, true).await,
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
        Command::Events(args) => events(ctx, args).await,
        Command::Doctor => doctor::run(ctx).await,
        Command::Jsonl => {
            // Started when nothing answers, as every client does (one line
            // on stderr); if that fails, the envelope's methods say
            // `unavailable` with the reason.
            let _ = ctx.client().await;
            let stdin = tokio::io::BufReader::new(tokio::io::stdin());
            match boxd_client::jsonl::driver::serve(&ctx.paths.socket, stdin, tokio::io::stdout())
                .await
            {
                Ok(()) => Ok(0),
                Err(e) => Err(Failure {
                    code: 1,
                    message: format!("jsonl: {e}"),
                    kind: None,
                }),
            }
        }
        Command::Mcp(args) => mcp::serve(ctx, args.policy()?).await,
        Command::Version => {
            let daemon = match boxd_client::connect(&ctx.paths.socket).await {
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

/// Creates a box (`if_exists` says what happens to one of that name),
/// pulling its image first, with progress on stderr, when the daemon does
/// not have it.
pub async fn create(
    c: &mut Client,
    name: &str,
    spec: BoxSpec,
    if_exists: v1::IfExists,
    json: bool,
) -> Result<Created, Failure> {
    let show = if json {
        image::Show::JsonStderr
    } else {
        image::Show::auto()
    };
    let mut view = image::PullView::new(spec.image(), show);
    let on_pull = |e: &boxd_client::boxes::PullEvent| {
        view.event(e);
        std::future::ready(())
    };
    Ok(boxd_client::boxes::create(c, name, spec, if_exists, on_pull).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}

#[cfg(test)]
mod help_tests {
    use super::*;

    /// Every flag and positional of every command says what it is for in
    /// `--help`.
    #[test]
    fn every_argument_has_a_help_line() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_hide_set() {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "boxctl", &mut missing);
        assert!(missing.is_empty(), "no help line: {missing:#?}");
    }
}
