//! `boxctl exec` and `boxctl run`: stream a command's stdio through boxd,
//! surviving a restart of boxd (the stream reattaches).

use boxd_client::{ExecStream, stdio, v1};
use clap::Args;

use crate::{BoxFlags, Ctx, Failure};

/// Exit code when boxd could not start the command.
const EXEC_FAILED: u8 = stdio::EXEC_FAILED;

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
    stream(ctx, &mut client, &args.name, &args.flags, &args.command).await
}

pub async fn run(ctx: &Ctx, args: RunArgs) -> Result<u8, Failure> {
    let mut client = ctx.client().await.map_err(exec_failure)?;
    let spec = crate::box_spec(&args.box_flags, &[], None).map_err(exec_failure)?;
    let created = crate::create(&mut client, &args.name, spec, false)
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
    let code = stream(ctx, &mut client, &args.name, &args.flags, &args.command).await;
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

async fn stream(
    ctx: &Ctx,
    client: &mut boxd_client::Client,
    name: &str,
    flags: &ExecFlags,
    command: &[String],
) -> Result<u8, Failure> {
    let mut env = boxd_client::spec::parse_env(&flags.env)?;
    if flags.tty && !env.contains_key("TERM") {
        // The terminal the command draws on is this one.
        if let Ok(term) = std::env::var("TERM") {
            env.insert("TERM".into(), term);
        }
    }
    let start = v1::ExecStart {
        box_name: name.to_owned(),
        command: command[0].clone(),
        args: command[1..].to_vec(),
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
        detach: false,
        resumable: true,
    };
    // A restart of boxd does not end the command for us: the stream
    // reattaches (and says so on stderr).
    let exec = ExecStream::start(client, start)
        .await
        .map_err(|s| exec_failure(s.into()))?
        .reconnecting(&ctx.paths.socket);
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
        eprintln!("boxctl: {}", exit.error);
    }
    if exit.timed_out {
        eprintln!("boxctl: the command timed out");
    }
    Ok(stdio::exit_code(&exit))
}
