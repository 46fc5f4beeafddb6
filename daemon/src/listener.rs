//! The Unix socket: a private directory, a private socket, a stale socket
//! replaced only when nothing answers, and a peer check on every request.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use boxd_proto::tonic::{Request, Status, transport::server::UdsConnectInfo};
use tokio::net::UnixListener;

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{0}")]
    Setup(String),
    #[error("another daemon is answering on {0}; stop it or pass a different --socket")]
    InUse(String),
}

/// Creates the socket directory (0700, ours), replaces a stale socket and
/// binds a 0600 socket.
pub async fn bind(socket: &Path) -> Result<UnixListener, ListenError> {
    let setup = |what: &str, e: std::io::Error| ListenError::Setup(format!("{what}: {e}"));
    let dir = socket.parent().ok_or_else(|| {
        ListenError::Setup(format!(
            "socket path has no directory: {}",
            socket.display()
        ))
    })?;
    std::fs::create_dir_all(dir).map_err(|e| setup(&format!("create {}", dir.display()), e))?;
    let meta = std::fs::metadata(dir).map_err(|e| setup(&format!("stat {}", dir.display()), e))?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        return Err(ListenError::Setup(format!(
            "socket directory {} belongs to uid {}, not to this user (uid {uid})",
            dir.display(),
            meta.uid()
        )));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| setup(&format!("chmod {}", dir.display()), e))?;

    if socket.exists() {
        if tokio::net::UnixStream::connect(socket).await.is_ok() {
            return Err(ListenError::InUse(socket.display().to_string()));
        }
        tracing::info!(socket = %socket.display(), "replacing a stale socket");
        std::fs::remove_file(socket).map_err(|e| setup("remove stale socket", e))?;
    }
    let listener =
        UnixListener::bind(socket).map_err(|e| setup(&format!("bind {}", socket.display()), e))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| setup(&format!("chmod {}", socket.display()), e))?;
    Ok(listener)
}

/// Refuses any peer whose uid is not the daemon's, whatever the file
/// permissions allowed through.
#[allow(clippy::result_large_err)]
pub fn check_peer(req: Request<()>) -> Result<Request<()>, Status> {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let peer = req
        .extensions()
        .get::<UdsConnectInfo>()
        .and_then(|i| i.peer_cred)
        .map(|c| c.uid());
    match peer {
        Some(uid) if uid == me => Ok(req),
        Some(uid) => {
            tracing::warn!(peer_uid = uid, "refused a peer with another uid");
            Err(Status::permission_denied(format!(
                "boxd serves uid {me} only; this peer is uid {uid}"
            )))
        }
        None => Err(Status::permission_denied(
            "cannot read the peer's credentials",
        )),
    }
}

/// How many client connections are open (for idle exit).
#[derive(Debug, Default)]
pub struct Connections {
    open: std::sync::atomic::AtomicUsize,
}

impl Connections {
    pub fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A client connection, counted in [`Connections`] while it is open.
pub struct Tracked {
    inner: tokio::net::UnixStream,
    conns: std::sync::Arc<Connections>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.conns
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The listener's connections, counted.
pub fn tracked(
    listener: UnixListener,
    conns: std::sync::Arc<Connections>,
) -> impl futures::Stream<Item = std::io::Result<Tracked>> {
    use futures::StreamExt;
    tokio_stream::wrappers::UnixListenerStream::new(listener).map(move |r| {
        r.map(|inner| {
            conns.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Tracked {
                inner,
                conns: conns.clone(),
            }
        })
    })
}

impl boxd_proto::tonic::transport::server::Connected for Tracked {
    type ConnectInfo = UdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl tokio::io::AsyncRead for Tracked {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Tracked {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
