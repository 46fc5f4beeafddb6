//! Host files into and out of boxes over `CopyIn`/`CopyOut`, for `boxctl
//! cp` and the JSONL driver: a host path is packed or unpacked by
//! [`crate::archive`] in a blocking thread, a tar on stdin or stdout is
//! passed through as it is. Bounded channels between the thread and the
//! call keep memory flat whatever the size; a failure on either side ends
//! the call (so the daemon kills its half of the copy) rather than let a
//! truncated archive pass for a whole one.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use boxd_proto::bytes::Bytes;
use boxd_proto::tonic::Status;
use boxd_proto::v1;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::Client;
use crate::archive::{self, Failure, Modes};
use crate::roots::{Found, Root};

/// Archive bytes per message to the daemon (each becomes one write to
/// the copy's stdin, a round trip to the box's supervisor).
pub const CHUNK: usize = 1 << 20;
/// Messages in flight between the blocking thread and the call.
const IN_FLIGHT: usize = 4;

/// Bytes of archive moved so far.
pub type Progress = Arc<dyn Fn(u64) + Send + Sync>;

/// Where a copy into a box reads from.
pub enum Source {
    /// A host file, directory or symlink (`DIR/.`: its contents) that the
    /// user named: the directory it is in is resolved as the user spelled
    /// it, once, and the rest by descriptor ([`crate::roots`]).
    Path {
        path: PathBuf,
        /// When `path` is a symlink, copy what it points at.
        follow_symlinks: bool,
    },
    /// A path something less trusted named (an MCP client), beneath a
    /// root the user allowed: no symlink below the root is followed.
    Beneath {
        root: Arc<Root>,
        rel: PathBuf,
        /// `DIR/.`: the directory's contents.
        contents: bool,
    },
    /// A tar archive, passed as it is (`-`: stdin).
    Tar(Box<dyn Read + Send>),
}

/// Where a copy out of a box writes to.
pub enum Dest {
    /// Unpacked at a host path, by docker's rule (into it when it is a
    /// directory, else as it; its parent must exist).
    Path(PathBuf),
    /// Unpacked beneath a root the user allowed, at a path something less
    /// trusted named (an MCP client): no symlink below the root is
    /// followed, on the way or at the end.
    Beneath { root: Arc<Root>, rel: PathBuf },
    /// The tar archive itself (`-`: stdout).
    Tar(Box<dyn Write + Send>),
}

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The daemon refused or failed the copy.
    #[error("{}", .0.message())]
    Status(#[from] Status),
    /// The host side failed.
    #[error("{0}")]
    Host(#[from] Failure),
}

/// Copies `source` into box `box_name` at `path`; returns the archive
/// bytes the daemon took.
pub async fn copy_in(
    client: &mut Client,
    box_name: &str,
    source: Source,
    path: &str,
    progress: Option<Progress>,
) -> Result<u64, CopyError> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, ()>>(IN_FLIGHT);
    let producer = tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
            sent: 0,
            progress,
        };
        let result = match source {
            Source::Path {
                path,
                follow_symlinks,
            } => pack_user_path(&path, follow_symlinks, &mut w),
            Source::Beneath {
                root,
                rel,
                contents,
            } => root.pack(&rel, contents, &mut w),
            Source::Tar(mut r) => std::io::copy(&mut r, &mut w)
                .map(drop)
                .map_err(|e| Failure::io("reading the archive", e)),
        };
        let result = result.and_then(|()| w.flush().map_err(|e| Failure::io("sending", e)));
        if result.is_err() {
            // Never a clean end: the call is dropped instead.
            let _ = tx.blocking_send(Err(()));
        }
        result
    });
    let start = v1::CopyInRequest {
        msg: Some(v1::copy_in_request::Msg::Start(v1::CopyInStart {
            box_name: box_name.to_owned(),
            path: path.to_owned(),
        })),
    };
    let data = futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Some(Ok(data)) => Some((
                v1::CopyInRequest {
                    msg: Some(v1::copy_in_request::Msg::Data(data)),
                },
                rx,
            )),
            Some(Err(())) => std::future::pending().await,
            None => None,
        }
    });
    let requests = futures::stream::once(async move { start }).chain(data);
    let call = client.copy_in(requests);
    tokio::pin!(call);
    tokio::pin!(producer);
    let produced = tokio::select! {
        p = &mut producer => p,
        // The daemon answered before the archive was all sent: a refusal.
        r = &mut call => return Ok(r?.into_inner().bytes),
    };
    match produced {
        Ok(Ok(())) => Ok(call.await?.into_inner().bytes),
        Ok(Err(f)) => Err(f.into()),
        Err(e) => Err(Failure::io("packing", std::io::Error::other(e)).into()),
    }
}

/// Copies `path` out of box `box_name` to `dest`; returns the archive bytes
/// received.
pub async fn copy_out(
    client: &mut Client,
    box_name: &str,
    path: &str,
    follow_symlinks: bool,
    dest: Dest,
    progress: Option<Progress>,
) -> Result<u64, CopyError> {
    let mut stream = client
        .copy_out(v1::CopyOutRequest {
            box_name: box_name.to_owned(),
            path: path.to_owned(),
            follow_symlinks,
        })
        .await?
        .into_inner();
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(IN_FLIGHT);
    let consumer = tokio::task::spawn_blocking(move || {
        let mut r = ChannelReader { rx, pending: None };
        match dest {
            Dest::Path(p) => unpack_user_path(&p, &mut r),
            Dest::Beneath { root, rel } => root.unpack(&rel, &mut r, Modes { exact: false }),
            Dest::Tar(mut w) => std::io::copy(&mut r, &mut w)
                .and_then(|_| w.flush())
                .map_err(|e| Failure::io("writing the archive", e)),
        }
    });
    let mut received = 0u64;
    let mut failed: Option<Status> = None;
    loop {
        match stream.message().await {
            Ok(Some(m)) => {
                received += m.data.len() as u64;
                if tx.send(Ok(m.data)).await.is_err() {
                    break; // the host side stopped: its error says why
                }
                if let Some(p) = &progress {
                    p(received);
                }
            }
            Ok(None) => break,
            Err(status) => {
                let _ = tx
                    .send(Err(std::io::Error::other(status.message().to_owned())))
                    .await;
                failed = Some(status);
                break;
            }
        }
    }
    drop(tx);
    drop(stream); // ends the call: a copy still running is killed
    let consumed = consumer
        .await
        .map_err(|e| Failure::io("unpacking", std::io::Error::other(e)))?;
    if let Some(status) = failed {
        return Err(status.into());
    }
    consumed?;
    Ok(received)
}

/// The directory a path the user typed is in (resolved as spelled, now),
/// and its last component (`None`: the path names a directory itself,
/// `DIR/.` or `/`).
fn user_root(path: &Path) -> Result<(Root, Option<PathBuf>), Failure> {
    let shown = path.display().to_string();
    let abs = std::path::absolute(path).map_err(|e| Failure::io(&shown, e))?;
    let named_dir = archive::names_contents(&path.to_string_lossy());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) if !named_dir => {
            let root =
                Root::open(parent).map_err(|e| Failure::io(&parent.display().to_string(), e))?;
            Ok((root, Some(PathBuf::from(name))))
        }
        _ => Ok((Root::open(&abs).map_err(|e| Failure::io(&shown, e))?, None)),
    }
}

/// Packs a path the user typed: its directory as spelled, the rest by
/// descriptor ([`Root::pack`]); `follow_symlinks` resolves the named
/// symlink first (its target's directory as it is now).
fn pack_user_path(path: &Path, follow_symlinks: bool, w: &mut impl Write) -> Result<(), Failure> {
    let text = path.to_string_lossy();
    let (root, name) = user_root(path)?;
    let Some(name) = name else {
        return root.pack(Path::new(""), archive::names_contents(&text), w);
    };
    if follow_symlinks && root.find(&name) == Found::Leaves {
        let real = std::fs::canonicalize(path).map_err(|e| Failure::io(&text, e))?;
        let (root, Some(target)) = user_root(&real)? else {
            return root.pack(Path::new(""), false, w);
        };
        return root.pack_as(&target, &name, w);
    }
    if text.ends_with('/') && root.find(&name) != Found::Dir {
        return Err(Failure {
            kind: archive::Kind::Invalid,
            message: format!("{text}: not a directory"),
        });
    }
    root.pack(&name, false, w)
}

/// Unpacks at a path the user typed, by docker's rule: its directory as
/// spelled, the rest by descriptor ([`Root::unpack`]: a symlink there, as
/// a box sharing the directory may have planted, is refused).
fn unpack_user_path(path: &Path, r: impl Read) -> Result<(), Failure> {
    let text = path.to_string_lossy();
    let modes = Modes { exact: false };
    let (root, name) = user_root(path)?;
    let Some(name) = name else {
        return root.unpack(Path::new(""), r, modes);
    };
    if text.ends_with('/') && root.find(&name) != Found::Dir {
        return Err(Failure {
            kind: archive::Kind::Invalid,
            message: format!("{text}: not a directory"),
        });
    }
    root.unpack(&name, r, modes)
}

/// A blocking writer into a bounded channel, in [`CHUNK`]s.
struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes, ()>>,
    buf: Vec<u8>,
    sent: u64,
    progress: Option<Progress>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.sent += data.len() as u64;
        self.tx
            .blocking_send(Ok(data))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the copy ended"))?;
        if let Some(p) = &self.progress {
            p(self.sent);
        }
        Ok(())
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// A blocking reader from a bounded channel.
struct ChannelReader {
    rx: mpsc::Receiver<std::io::Result<Bytes>>,
    pending: Option<Bytes>,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(p) = &mut self.pending {
                if !p.is_empty() {
                    let n = p.len().min(out.len());
                    out[..n].copy_from_slice(&p.split_to(n));
                    return Ok(n);
                }
                self.pending = None;
            }
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.pending = Some(b),
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
    }
}
