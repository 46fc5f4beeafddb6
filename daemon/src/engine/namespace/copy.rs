//! The daemon's side of copies into and out of a namespace box: each copy
//! is an exec of a [`Builtin`] through the box's supervisor (the zygote's
//! child does the tar work inside the box, see [`super::builtin`]), whose
//! stdout is the archive out and whose stdin takes the archive in.
//!
//! Memory stays bounded: the archive flows through the exec's windowed
//! output and stdin (`exec_log.rs`), a chunk at a time. Copies are the
//! daemon's own execs: not listed, and killed when their caller goes
//! away (the stream or the future dropped) or a restarted daemon finds
//! one (`is_copy`).

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;

use super::builtin::{EXIT_INVALID, EXIT_NOT_FOUND};
use super::supervisor::Supervisor;
use super::supervisor::wire::RunSpec;
use crate::engine::exec::{ExecHandle, Started, Subscription};
use crate::engine::{Builtin, ByteStream, ExecSpec, ExitStatus};
use crate::error::{Error, Result};
use crate::exec_log::{Event, Offsets, Stream};

/// Ids of copy execs start with this (exec ids of clients never do).
const ID_PREFIX: &str = "copy-";
/// The box's message about a failed copy, at most this long.
const MAX_MESSAGE: usize = 4096;
/// Stdin goes to the supervisor in pieces of at most this size (its
/// frames are at most 4 MiB).
const STDIN_PIECE: usize = 1 << 20;

/// Whether the exec `id` is a copy.
pub fn is_copy(id: &str) -> bool {
    id.starts_with(ID_PREFIX)
}

/// A copy's exec. Its `command` names no program a box could provide (no
/// one can make files in `/proc`): a supervisor that predates built-ins
/// fails it as not found (127) rather than run something in its place.
fn spec(builtin: Builtin) -> RunSpec {
    use rand::Rng;
    let (command, path, stdin) = match &builtin {
        Builtin::TarOut { path, .. } => ("/proc/boxd-copy-out", path.clone(), false),
        Builtin::TarIn { path } => ("/proc/boxd-copy-in", path.clone(), true),
    };
    RunSpec {
        spec: ExecSpec {
            id: format!("{ID_PREFIX}{:016x}", rand::rng().random::<u64>()),
            command: command.into(),
            args: vec![path],
            working_dir: "/".into(),
            stdin,
            builtin: Some(builtin),
            ..Default::default()
        },
        started_at_ms: crate::model::now_ms(),
    }
}

/// `path` in the box as a tar stream. A copy that fails before its first
/// byte (a missing path) is an error here, not in the stream.
pub async fn copy_out(
    sup: &Arc<Supervisor>,
    path: &str,
    follow_symlinks: bool,
) -> Result<ByteStream> {
    let started = sup
        .run(spec(Builtin::TarOut {
            path: path.to_owned(),
            follow_symlinks,
        }))
        .await?;
    let mut out = Copy::new(started);
    let first = out.next_stdout().await?;
    let Some(first) = first else {
        return Ok(futures::stream::empty().boxed());
    };
    let rest = futures::stream::unfold(out, |mut out| async move {
        match out.next_stdout().await {
            Ok(Some(b)) => Some((Ok(b), out)),
            Ok(None) => None,
            // The last item: `next_stdout` says `None` from here on.
            Err(e) => Some((Err(e), out)),
        }
    });
    Ok(futures::stream::once(async move { Ok(first) })
        .chain(rest)
        .boxed())
}

/// Unpacks `archive` at `path` in the box; returns the bytes taken.
pub async fn copy_in(sup: &Arc<Supervisor>, path: &str, mut archive: ByteStream) -> Result<u64> {
    let started = sup
        .run(spec(Builtin::TarIn {
            path: path.to_owned(),
        }))
        .await?;
    let handle = started.handle.clone();
    // Killed if this future is dropped (its caller went away) mid-copy.
    let mut guard = KillOnDrop(Some(handle.clone()));
    let mut copy = Copy::new(started);
    // The copy's output (its message) is read beside the writing.
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let result = loop {
            match copy.next_stdout().await {
                Ok(Some(_)) => {}
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let _ = done_tx.send(());
        (result, copy)
    });
    let mut at = 0u64;
    let written: std::result::Result<(), (bool, Error)> = async {
        while let Some(chunk) = archive.next().await {
            let mut chunk = chunk.map_err(|e| (true, e))?;
            while !chunk.is_empty() {
                let piece = chunk.split_to(chunk.len().min(STDIN_PIECE));
                let n = piece.len() as u64;
                handle
                    .write_stdin(at, piece)
                    .await
                    .map_err(|e| (false, e))?;
                at += n;
            }
        }
        handle.close_stdin().await.map_err(|e| (false, e))
    }
    .await;
    match written {
        Ok(()) => {}
        // The caller's archive failed (or it went away): the copy stops.
        Err((true, e)) => {
            let _ = handle.signal(libc::SIGKILL).await;
            let _ = reader.await;
            return Err(e);
        }
        // The copy stopped reading: its own exit says why.
        Err((false, e)) => {
            let ended = tokio::time::timeout(std::time::Duration::from_secs(10), done_rx).await;
            if ended.is_err() {
                let _ = handle.signal(libc::SIGKILL).await;
            }
            let (result, _) = reader
                .await
                .map_err(|e| Error::Internal(format!("copy reader: {e}")))?;
            result?;
            return Err(e);
        }
    }
    let (result, _) = reader
        .await
        .map_err(|e| Error::Internal(format!("copy reader: {e}")))?;
    guard.0 = None;
    result.map(|()| at)
}

/// Kills the copy when dropped still holding it.
struct KillOnDrop(Option<Arc<dyn ExecHandle>>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill(self.0.take());
    }
}

fn kill(handle: Option<Arc<dyn ExecHandle>>) {
    let Some(handle) = handle else { return };
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = handle.signal(libc::SIGKILL).await;
        });
    }
}

/// A running copy exec: its subscription read and acknowledged, its
/// stderr kept (the box's message); killed when dropped before its exit.
struct Copy {
    handle: Arc<dyn ExecHandle>,
    sub: Subscription,
    taken: Offsets,
    stderr: Vec<u8>,
    exited: bool,
}

impl Copy {
    fn new(started: Started) -> Copy {
        Copy {
            handle: started.handle,
            sub: started.first,
            taken: Offsets::default(),
            stderr: Vec::new(),
            exited: false,
        }
    }

    /// The next chunk of stdout; `None` after a successful exit.
    async fn next_stdout(&mut self) -> Result<Option<Bytes>> {
        if self.exited {
            return Ok(None);
        }
        loop {
            match self.sub.events.recv().await {
                Some(Event::Output(Stream::Stdout, b)) => {
                    self.taken.stdout += b.len() as u64;
                    self.sub.acks.ack(self.taken);
                    return Ok(Some(b));
                }
                Some(Event::Output(Stream::Stderr, b)) => {
                    self.taken.stderr += b.len() as u64;
                    self.sub.acks.ack(self.taken);
                    let room = MAX_MESSAGE.saturating_sub(self.stderr.len());
                    self.stderr.extend_from_slice(&b[..b.len().min(room)]);
                }
                Some(Event::Exit(status)) => {
                    self.exited = true;
                    return outcome(&status, &self.stderr).map(|()| None);
                }
                None => {
                    self.exited = true;
                    return Err(Error::Engine(
                        "the copy ended without an exit (its box's supervisor went away)".into(),
                    ));
                }
            }
        }
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        if !self.exited {
            kill(Some(self.handle.clone()));
        }
    }
}

/// A copy's exit as a result: its exit code classes the box's message.
fn outcome(status: &ExitStatus, stderr: &[u8]) -> Result<()> {
    let said = String::from_utf8_lossy(stderr).trim().to_owned();
    let message = match (&status.error, said.is_empty()) {
        (Some(e), true) => e.clone(),
        (Some(e), false) => format!("{said} ({e})"),
        (None, _) => said,
    };
    match (status.code, status.signal) {
        (Some(0), _) => Ok(()),
        (Some(EXIT_NOT_FOUND), _) => Err(Error::NotFound(message)),
        (Some(EXIT_INVALID), _) => Err(Error::InvalidArgument(message)),
        (_, Some(sig)) => Err(Error::Engine(format!(
            "the copy was killed (signal {sig}){}",
            if message.is_empty() {
                String::new()
            } else {
                format!(": {message}")
            }
        ))),
        _ => Err(Error::Engine(if message.is_empty() {
            "the copy failed".into()
        } else {
            format!("the copy failed: {message}")
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_class_the_message() {
        let exit = |code| ExitStatus {
            code: Some(code),
            ..Default::default()
        };
        assert!(outcome(&exit(0), b"").is_ok());
        assert!(matches!(
            outcome(&exit(EXIT_NOT_FOUND), b"/x: No such file or directory\n"),
            Err(Error::NotFound(m)) if m == "/x: No such file or directory"
        ));
        assert!(matches!(
            outcome(&exit(EXIT_INVALID), b"bad"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(outcome(&exit(1), b"disk"), Err(Error::Engine(m)) if m.contains("disk")));
        let killed = ExitStatus {
            signal: Some(9),
            ..Default::default()
        };
        assert!(matches!(outcome(&killed, b""), Err(Error::Engine(_))));
        assert!(is_copy(&spec(Builtin::TarIn { path: "/".into() }).spec.id));
    }
}
