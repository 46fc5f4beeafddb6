//! `boxctl cp SRC DST`: files into and out of a box, as `docker cp`.
//! `BOX:PATH` names a path in a box, on exactly one side; `-` as the host
//! side is a tar archive on stdin or stdout. A progress line goes to
//! stderr when it is a terminal; stdout carries only the archive (`-`) or,
//! with `--json`, `{"bytes": N}`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use boxd_client::copy::{self, CopyError, Dest, Progress, Source};
use clap::Args;

use crate::{Ctx, Failure};

#[derive(Args, Debug)]
pub struct CpArgs {
    /// When the source is a symlink, copy what it points at.
    #[arg(short = 'L', long)]
    follow_link: bool,
    /// BOX:PATH, a host path (DIR/. for its contents), or - (a tar on stdin).
    src: String,
    /// BOX:PATH, a host path, or - (a tar on stdout).
    dst: String,
}

/// One side of a copy.
#[derive(Debug, PartialEq)]
enum Side {
    Box { name: String, path: String },
    Host(PathBuf),
    Stdio,
}

/// `-`, a host path (anything starting with `/` or `.`, or without `:`),
/// or `BOX:PATH`.
fn side(s: &str) -> Side {
    if s == "-" {
        return Side::Stdio;
    }
    if s.starts_with(['/', '.']) {
        return Side::Host(s.into());
    }
    match s.split_once(':') {
        Some((name, path)) if !name.contains('/') => Side::Box {
            name: name.into(),
            path: path.into(),
        },
        _ => Side::Host(s.into()),
    }
}

pub async fn cp(ctx: &Ctx, args: CpArgs) -> Result<u8, Failure> {
    let (src, dst) = (side(&args.src), side(&args.dst));
    let bar = progress(ctx, &src, &dst);
    let report: Option<Progress> = bar
        .clone()
        .map(|b| Arc::new(move |n: u64| b.set_position(n)) as Progress);
    let mut c = ctx.client().await?;
    let (bytes, to_stdout) = match (src, dst) {
        (Side::Box { .. }, Side::Box { .. }) => {
            return Err(Failure::usage(
                "copying between boxes is not supported: one side must be the host",
            ));
        }
        (Side::Host(_) | Side::Stdio, Side::Host(_) | Side::Stdio) => {
            return Err(Failure::usage(
                "one side must be BOX:PATH (a path in a box)",
            ));
        }
        (Side::Box { name, path }, host) => {
            let (dest, to_stdout) = match host {
                Side::Stdio => (Dest::Tar(Box::new(std::io::stdout())), true),
                Side::Host(p) => (Dest::Path(p), false),
                Side::Box { .. } => unreachable!(),
            };
            let n = copy::copy_out(&mut c, &name, &path, args.follow_link, dest, report)
                .await
                .map_err(failure)?;
            (n, to_stdout)
        }
        (host, Side::Box { name, path }) => {
            let source = match host {
                Side::Stdio => Source::Tar(Box::new(std::io::stdin())),
                Side::Host(path) => Source::Path {
                    path,
                    follow_symlinks: args.follow_link,
                },
                Side::Box { .. } => unreachable!(),
            };
            let n = copy::copy_in(&mut c, &name, source, &path, report)
                .await
                .map_err(failure)?;
            (n, false)
        }
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if ctx.json && !to_stdout {
        println!("{}", serde_json::json!({ "bytes": bytes }));
    } else if std::io::stderr().is_terminal() {
        eprintln!(
            "Copied {} to {}",
            crate::output::size(bytes),
            boxd_client::untrusted::escape(&args.dst)
        );
    }
    Ok(0)
}

fn failure(e: CopyError) -> Failure {
    match e {
        CopyError::Status(s) => s.into(),
        CopyError::Host(f) => Failure {
            code: 1,
            message: f.message,
            kind: None,
        },
    }
}

/// A bar of bytes moved, on a terminal's stderr only.
fn progress(ctx: &Ctx, src: &Side, dst: &Side) -> Option<indicatif::ProgressBar> {
    if ctx.json
        || !std::io::stderr().is_terminal()
        || matches!(src, Side::Stdio)
        || matches!(dst, Side::Stdio)
    {
        return None;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {bytes} copied ({bytes_per_sec})")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(bar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_parse_as_docker_cp() {
        assert_eq!(side("-"), Side::Stdio);
        assert_eq!(
            side("b1:/etc/hosts"),
            Side::Box {
                name: "b1".into(),
                path: "/etc/hosts".into()
            }
        );
        assert_eq!(side("/tmp/a:b"), Side::Host("/tmp/a:b".into()));
        assert_eq!(side("./x:y"), Side::Host("./x:y".into()));
        assert_eq!(side("dir/x:y"), Side::Host("dir/x:y".into()));
        assert_eq!(side("plain"), Side::Host("plain".into()));
        assert_eq!(
            side("b:rel"),
            Side::Box {
                name: "b".into(),
                path: "rel".into()
            }
        );
    }
}
