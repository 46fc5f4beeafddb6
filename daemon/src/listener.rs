//! The Unix socket: a private directory, a private socket, a stale socket
//! replaced only when nothing answers, and a peer check on every request.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use std::future::Future;

use boxd_fs::trust;

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
///
/// The way to the socket is checked as clients check it
/// ([`trust::resolve`]): every directory on it belongs to this user or root
/// and is not writable by others unless sticky, every symlink on it belongs
/// to this user or root. A socket directory of another uid is refused; one
/// of ours that group or others may use is closed (0700), never someone
/// else's. An existing socket is replaced only when it is not another
/// user's and nothing answers on it.
pub async fn bind(socket: &Path) -> Result<UnixListener, ListenError> {
    let setup = |what: &str, e: std::io::Error| ListenError::Setup(format!("{what}: {e}"));
    let refuse = |u: trust::Untrusted| {
        ListenError::Setup(format!("refusing to listen on {}: {u}", socket.display()))
    };
    let (Some(dir), Some(_)) = (socket.parent(), socket.file_name()) else {
        return Err(ListenError::Setup(format!(
            "socket path has no directory: {}",
            socket.display()
        )));
    };
    let me = trust::my_uid();
    let (real_dir, st) = match trust::resolve(&trust::RealFs, me, dir, true) {
        Ok(found) => found,
        Err(trust::CheckError::Untrusted(u)) => return Err(refuse(u)),
        Err(trust::CheckError::Io(e)) => {
            return Err(setup(&format!("create {}", dir.display()), e));
        }
    };
    match trust::check_socket_dir(me, &real_dir, st) {
        Ok(()) => {}
        Err(u) if matches!(u.problem, trust::Problem::SocketDirOpen(m) if m & 0o1022 != 0) => {
            // A shared directory (`/tmp`, a group's): others use it by
            // design, so it is never changed, and never trusted.
            return Err(ListenError::Setup(format!(
                "refusing to listen on {}: its directory {} is shared (mode {:04o}) and boxd does not change a shared directory; give the socket a directory of its own (for example {}/boxd-{me}/boxd.sock)",
                socket.display(),
                real_dir.display(),
                st.perms(),
                real_dir.display(),
            )));
        }
        Err(u) if matches!(u.problem, trust::Problem::SocketDirOpen(_)) => {
            // Ours (check_socket_dir judged the owner first): closed, not refused.
            tracing::warn!(dir = %real_dir.display(), mode = format!("{:04o}", st.perms()), "the socket directory was open to other users; making it 0700");
            std::fs::set_permissions(&real_dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| setup(&format!("chmod 700 {}", real_dir.display()), e))?;
        }
        Err(u) => return Err(refuse(u)),
    }

    match std::fs::symlink_metadata(socket) {
        Ok(m) if m.file_type().is_socket() && m.uid() != me => {
            // Left in our directory while it was open: never answered, removed.
            tracing::warn!(socket = %socket.display(), owner = m.uid(), "removing a socket of another user from the socket directory");
            std::fs::remove_file(socket).map_err(|e| setup("remove a foreign socket", e))?;
        }
        Ok(m) if m.file_type().is_socket() => {
            if tokio::net::UnixStream::connect(socket).await.is_ok() {
                return Err(ListenError::InUse(socket.display().to_string()));
            }
            tracing::info!(socket = %socket.display(), "replacing a stale socket");
            std::fs::remove_file(socket).map_err(|e| setup("remove stale socket", e))?;
        }
        Ok(_) => {
            return Err(ListenError::Setup(format!(
                "{} exists and is not a socket; remove it or pass a different --socket",
                socket.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(setup(&format!("stat {}", socket.display()), e)),
    }
    let listener =
        UnixListener::bind(socket).map_err(|e| setup(&format!("bind {}", socket.display()), e))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| setup(&format!("chmod {}", socket.display()), e))?;
    Ok(listener)
}

/// Refuses any peer whose uid is not the daemon's, whatever the file
/// permissions allowed through; and every call on a connection over the
/// cap ([`tracked`]).
#[allow(clippy::result_large_err)]
pub fn check_peer(req: Request<()>) -> Result<Request<()>, Status> {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let Some(info) = req.extensions().get::<Peer>() else {
        return Err(Status::permission_denied(
            "cannot read the peer's credentials",
        ));
    };
    let peer = info.uds.peer_cred.map(|c| c.uid());
    if peer == Some(me)
        && let Some(limit) = info.over_cap
    {
        return Err(Status::resource_exhausted(format!(
            "boxd has {limit} client connections open, its limit; close some (another program of yours holds them) and try again"
        )));
    }
    info.asked.store(true, std::sync::atomic::Ordering::Relaxed);
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

/// How many client connections are open (for idle exit and the cap).
#[derive(Debug, Default)]
pub struct Connections {
    open: std::sync::atomic::AtomicUsize,
}

impl Connections {
    pub fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The default of `max-connections`: the most client connections served
/// at once (further ones get one clear error each, up to [`OVER_CAP`] of
/// them; beyond, they are closed at once); at most three quarters of the
/// open-file limit in any case.
pub const MAX_CONNECTIONS: usize = 2048;
/// Connections over the cap answered with an error before being closed.
pub const OVER_CAP: usize = 32;
/// A connection that has made no call this long after it opened is closed.
pub const FIRST_CALL_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// What a call knows of its connection.
#[derive(Debug, Clone)]
pub struct Peer {
    uds: UdsConnectInfo,
    /// `Some(limit)`: this connection is over the cap.
    over_cap: Option<usize>,
    /// Set by the first call.
    asked: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// What this connection's calls hold ([`crate::intake`]).
    intake: std::sync::Arc<crate::intake::Connection>,
}

impl Peer {
    /// What this connection's calls hold, for [`crate::intake::Bounded`].
    pub fn intake(&self) -> std::sync::Arc<crate::intake::Connection> {
        self.intake.clone()
    }
}

/// A client connection, counted in [`Connections`] while it is open; it
/// reads as closed once [`FIRST_CALL_WITHIN`] passes without a call.
pub struct Tracked {
    inner: tokio::net::UnixStream,
    conns: std::sync::Arc<Connections>,
    peer: Peer,
    first_call: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// The client's bytes on their way to h2, header blocks rewritten so
    /// that any `:authority` is served ([`crate::authority`]).
    rewriter: crate::authority::Rewriter,
    /// Rewritten bytes h2 has not read yet, from `ready_at`.
    ready: Vec<u8>,
    ready_at: usize,
    scratch: Box<[u8]>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.conns
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The listener's connections, counted and capped: at most `max` served
/// (with [`OVER_CAP`] more answered with an error, the rest closed at
/// once), each closed if it makes no call within [`FIRST_CALL_WITHIN`].
pub fn tracked(
    listener: UnixListener,
    conns: std::sync::Arc<Connections>,
    max: usize,
) -> impl futures::Stream<Item = std::io::Result<Tracked>> {
    use futures::StreamExt;
    let accepted = tokio_stream::wrappers::UnixListenerStream::new(listener);
    accepted.filter_map(move |r| {
        let conns = conns.clone();
        std::future::ready(match r {
            Err(e) => Some(Err(e)),
            Ok(inner) => {
                let open = conns.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if open >= max + OVER_CAP {
                    conns.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    tracing::warn!(open, "closed a client connection over the limit");
                    None
                } else {
                    let peer = Peer {
                        uds: boxd_proto::tonic::transport::server::Connected::connect_info(&inner),
                        over_cap: (open >= max).then_some(max),
                        asked: Default::default(),
                        intake: Default::default(),
                    };
                    Some(Ok(Tracked {
                        inner,
                        conns,
                        peer,
                        first_call: Some(Box::pin(tokio::time::sleep(FIRST_CALL_WITHIN))),
                        rewriter: Default::default(),
                        ready: Vec::new(),
                        ready_at: 0,
                        scratch: vec![0; 64 << 10].into_boxed_slice(),
                    }))
                }
            }
        })
    })
}

impl boxd_proto::tonic::transport::server::Connected for Tracked {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.peer.clone()
    }
}

impl tokio::io::AsyncRead for Tracked {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.peer.asked.load(std::sync::atomic::Ordering::Relaxed) {
            self.first_call = None;
        } else if let Some(timer) = self.first_call.as_mut()
            && timer.as_mut().poll(cx).is_ready()
        {
            // Made no call in time: read as closed, so the connection ends.
            return std::task::Poll::Ready(Ok(()));
        }
        let this = &mut *self;
        loop {
            if this.ready_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_at);
                buf.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                return std::task::Poll::Ready(Ok(()));
            }
            this.ready.clear();
            this.ready_at = 0;
            let mut raw = tokio::io::ReadBuf::new(&mut this.scratch);
            std::task::ready!(std::pin::Pin::new(&mut this.inner).poll_read(cx, &mut raw))?;
            if raw.filled().is_empty() {
                return std::task::Poll::Ready(Ok(())); // the client closed
            }
            if let Err(e) = this.rewriter.feed(raw.filled(), &mut this.ready) {
                tracing::warn!(error = %e, "closed a client connection");
                return std::task::Poll::Ready(Err(std::io::Error::other(e)));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[tokio::test]
    async fn the_directory_is_made_private_and_reached_through_our_symlinks() {
        let t = tempfile::tempdir().unwrap();
        // Missing directories are created 0700.
        let socket = t.path().join("a/b/boxd.sock");
        let l = bind(&socket).await.unwrap();
        assert_eq!(mode(&t.path().join("a/b")), 0o700);
        assert_eq!(mode(&socket), 0o600);
        drop(l);
        // One of ours that is too open is closed; a symlink of ours is followed.
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&open, t.path().join("link")).unwrap();
        let l = bind(&t.path().join("link/boxd.sock")).await.unwrap();
        assert_eq!(mode(&open), 0o700);
        assert!(open.join("boxd.sock").exists());
        drop(l);
        // A shared directory (sticky and everyone's, as /tmp; or a
        // group's) is refused and left as it is.
        for shared in [0o1777, 0o775] {
            let dir = t.path().join(format!("shared-{shared:o}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(shared)).unwrap();
            let err = bind(&dir.join("boxd.sock")).await.unwrap_err().to_string();
            assert!(err.contains("is shared"), "{err}");
            assert_eq!(mode(&dir), shared, "a shared directory was changed");
        }
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_anything_else_refused() {
        let t = tempfile::tempdir().unwrap();
        let socket = t.path().join("run/boxd.sock");
        let first = bind(&socket).await.unwrap();
        // Answering: in use.
        let e = bind(&socket).await.unwrap_err();
        assert!(matches!(e, ListenError::InUse(_)), "{e}");
        drop(first);
        // Stale: replaced.
        let again = bind(&socket).await.unwrap();
        drop(again);
        // Not a socket: never removed.
        std::fs::remove_file(&socket).unwrap();
        std::fs::write(&socket, "mine").unwrap();
        let e = bind(&socket).await.unwrap_err();
        assert!(e.to_string().contains("is not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&socket).unwrap(), "mine");
    }

    #[tokio::test]
    async fn a_directory_on_the_way_that_others_may_write_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let public = t.path().join("public");
        std::fs::create_dir(&public).unwrap();
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = bind(&public.join("run/boxd.sock")).await.unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("refusing to listen on"), "{msg}");
        assert!(
            msg.contains("writable by other users and not sticky"),
            "{msg}"
        );
        assert!(!public.join("run").exists());
        // Sticky, like /tmp: fine.
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o1777)).unwrap();
        drop(bind(&public.join("run/boxd.sock")).await.unwrap());
    }
}
