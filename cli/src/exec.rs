//! `boxctl exec` and `boxctl run`: stream a command's stdio through boxd,
//! surviving a restart of boxd (the stream reattaches).
//!
//! Invariant: `run --rm` removes a box only when this very command
//! created it; a box found by name is never removed (nor changed: a name
//! with another spec is refused, see [`crate::boxes::create`]).

use std::io::IsTerminal;
use std::path::PathBuf;

use boxd_client::untrusted::{escape, escape_lines};
use boxd_client::{ExecStream, stdio, v1};
use clap::Args;

use crate::{BoxFlags, Ctx, Failure};

/// Exit code when boxd could not start the command (docker's 125).
const EXEC_FAILED: u8 = stdio::EXEC_FAILED;

#[derive(Args, Debug)]
pub struct ExecFlags {
    /// Keep stdin open and stream it to the command.
    #[arg(short, long)]
    pub interactive: bool,
    /// Run on a pseudo-terminal (with -i, stdin must be a terminal).
    #[arg(short, long)]
    pub tty: bool,
    /// Run in the background: print nothing of it and return at once
    /// (`boxctl logs -f BOX` and `boxctl attach` follow it).
    #[arg(short, long)]
    pub detach: bool,
    /// K=V, or K alone for this environment's value (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V|K")]
    pub env: Vec<String>,
    /// A file of K=V (or K) lines, # comments (repeatable; -e wins).
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<PathBuf>,
    /// Working directory inside the box.
    #[arg(short = 'w', long = "workdir")]
    pub workdir: Option<String>,
    /// USER[:GROUP] or UID[:GID] to run as, names from the box's
    /// /etc/passwd and /etc/group (default: the image's user, else root).
    #[arg(short = 'u', long = "user", value_name = "USER[:GROUP]")]
    pub user: Option<String>,
    /// Kill the command after this many milliseconds.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub flags: ExecFlags,
    /// The box (by name).
    #[arg(add = crate::complete::boxes())]
    pub name: String,
    /// The command and its arguments (a `--` before them is optional).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub box_flags: BoxFlags,
    /// Remove the box when the command ends, if this command created it
    /// (a box that existed is never removed). Not with -d.
    #[arg(long)]
    pub rm: bool,
    #[command(flatten)]
    pub flags: ExecFlags,
    /// The image: a registry reference or a local OCI layout directory.
    /// (Older form: with --image, this word is the box's name.)
    #[arg(value_name = "IMAGE", add = crate::complete::images())]
    pub first: String,
    /// The command and its arguments (none: the image's Entrypoint and
    /// Cmd).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

pub async fn exec(ctx: &Ctx, args: ExecArgs) -> Result<u8, Failure> {
    let command = strip_dashes(args.command);
    if command.is_empty() {
        return Err(Failure::usage("exec needs a command to run"));
    }
    check_terminal(&args.flags)?;
    let mut client = ctx.client().await.map_err(exec_failure)?;
    // No lookup first (a round trip on every exec): a box that is not
    // there fails the exec, which then says which box was meant.
    stream(ctx, &mut client, &args.name, &args.flags, &command).await
}

pub async fn run(ctx: &Ctx, args: RunArgs) -> Result<u8, Failure> {
    if args.rm && args.flags.detach {
        return Err(Failure {
            code: EXEC_FAILED,
            message: "--rm with -d: boxd does not remove a box when a detached command ends; run -d without --rm and remove the box with boxctl rm".into(),
            kind: None,
        });
    }
    check_terminal(&args.flags)?;
    let target = crate::boxes::target(&args.box_flags, Some(args.first)).map_err(exec_failure)?;
    let command = strip_dashes(args.command);
    // The box's environment and directory are what -e and -w say (so the
    // same `run` finds the same box again, and `exec` in it later sees
    // them too).
    let env = crate::words::env(&args.flags.env_file, &args.flags.env)
        .map_err(|m| exec_failure(Failure::usage(m)))?;
    let mut client = ctx.client().await.map_err(exec_failure)?;
    let created = crate::boxes::create(
        ctx,
        &mut client,
        &args.box_flags,
        &target,
        &env,
        args.flags.workdir.as_deref(),
    )
    .await
    .map_err(exec_failure)?;
    let name = created.info.name.clone();
    client
        .start_box(v1::StartBoxRequest { name: name.clone() })
        .await
        .map_err(|s| exec_failure(s.into()))?;
    let code = stream(ctx, &mut client, &name, &args.flags, &command).await;
    if args.flags.detach && code.is_ok() {
        // What `logs -f`, `attach`, `stop` and `rm` take.
        println!("{}", escape(&name));
    }
    if args.rm
        && created.created()
        && let Err(s) = client
            .remove_box(v1::RemoveBoxRequest {
                name: name.clone(),
                force: true,
            })
            .await
    {
        eprintln!(
            "boxctl: could not remove box {name}: {}",
            escape_lines(&boxd_client::status_message(&s))
        );
    }
    code
}

/// `exec BOX -- cmd` and `exec BOX cmd` are the same.
fn strip_dashes(mut command: Vec<String>) -> Vec<String> {
    if command.first().is_some_and(|w| w == "--") {
        command.remove(0);
    }
    command
}

/// `-it` with a stdin that is not a terminal fails at once, as docker's
/// does, instead of waiting on input that is no keyboard.
fn check_terminal(flags: &ExecFlags) -> Result<(), Failure> {
    if flags.interactive && flags.tty && !std::io::stdin().is_terminal() {
        return Err(Failure {
            code: 1,
            message: "the input device is not a TTY (leave out -t, or run from a terminal)".into(),
            kind: None,
        });
    }
    if flags.detach && (flags.interactive || flags.tty) {
        return Err(Failure::usage(
            "-d runs the command in the background: it takes no -i or -t (attach to it later with boxctl attach -i)",
        ));
    }
    Ok(())
}

fn exec_failure(f: Failure) -> Failure {
    Failure {
        code: EXEC_FAILED,
        ..f
    }
}

async fn stream(
    ctx: &Ctx,
    client: &mut boxd_client::Client,
    name: &str,
    flags: &ExecFlags,
    command: &[String],
) -> Result<u8, Failure> {
    let words = crate::words::env(&flags.env_file, &flags.env).map_err(Failure::usage)?;
    let mut env = boxd_client::spec::parse_env(&words).map_err(|e| exec_failure(e.into()))?;
    if flags.tty && !env.contains_key("TERM") {
        // The terminal the command draws on is this one.
        if let Ok(term) = std::env::var("TERM") {
            env.insert("TERM".into(), term);
        }
    }
    let (program, args) = match command.split_first() {
        Some((c, a)) => (c.clone(), a.to_vec()),
        // The image's Entrypoint and Cmd.
        None => (String::new(), Vec::new()),
    };
    let start = v1::ExecStart {
        box_name: name.to_owned(),
        command: program,
        args,
        env,
        working_dir: flags.workdir.clone().unwrap_or_default(),
        timeout_ms: flags.timeout_ms.unwrap_or(0),
        stdin: flags.interactive,
        tty: flags.tty,
        tty_size: if flags.tty {
            stdio::terminal_size()
        } else {
            None
        },
        detach: flags.detach,
        resumable: !flags.detach,
        user: flags.user.clone().unwrap_or_default(),
    };
    let exec = match ExecStream::start(client, start).await {
        Ok(exec) => exec,
        Err(s) if s.code() == boxd_client::tonic::Code::NotFound => {
            return Err(exec_failure(crate::boxes::not_found(client, name, s).await));
        }
        Err(s) => return Err(exec_failure(s.into())),
    };
    if flags.detach {
        // Started: it runs on without this stream.
        return Ok(0);
    }
    // A restart of boxd does not end the command for us: the stream
    // reattaches (and says so on stderr).
    let exec = exec.reconnecting(&ctx.paths.socket);
    let how = stdio::Attach {
        stdin: flags.interactive,
        tty: flags.tty,
        signals: true,
        stderr: None,
    };
    let exit = stdio::attach(exec, how)
        .await
        .map_err(|s| exec_failure(s.into()))?;
    if !exit.error.is_empty() {
        // boxd's words, quoting what the image or box chose (its user, its
        // command): escaped, unlike the command's own output.
        eprintln!("boxctl: {}", escape_lines(&exit.error));
    }
    if exit.timed_out {
        eprintln!("boxctl: the command timed out");
    }
    Ok(stdio::exit_code(&exit))
}
