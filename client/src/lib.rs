//! The one way every boxd client finds and reaches the daemon.
//!
//! - [`Paths`] resolves the socket and home directory from flags, the
//!   environment (`BOXD_SOCKET`, `BOXD_HOME`) and the platform's per-user
//!   directories, identically for the daemon and every client.
//! - [`connect`] opens a gRPC channel over the Unix socket, after
//!   [`trust`] found the socket and the process answering on it to be this
//!   user's own.
//! - [`ExecStream`] drives the bidirectional `Exec` call (resumable, and
//!   with [`ExecStream::reconnecting`] surviving a daemon restart);
//!   [`stdio`] attaches one to this process's own stdio.
//! - [`spawn`] starts the daemon on demand; [`spec`] reads box specs from
//!   command-line words.
//! - [`boxes`] is the typed facade for making boxes (a [`BoxSpec`]
//!   builder, pulls with progress, [`boxes::create_or_reuse`]);
//!   [`ErrorKind`] says what a status or a connect error is.

pub mod boxes;
pub mod copy;
mod error_kind;
mod exec;
pub mod jsonl;
pub mod spawn;
pub mod spec;
pub mod stderr;
pub mod stdio;
pub mod untrusted;

pub use boxd_fs::{archive, roots, trust};
pub use boxd_proto::paths::{Paths, PathsError};
pub use boxd_proto::wire::{CONNECTION_WINDOW, MAX_MESSAGE, STREAM_WINDOW};
pub use boxd_proto::{bytes, tonic, v1};
pub use boxes::BoxSpec;
pub use error_kind::ErrorKind;
pub use exec::{
    ACK_EVERY, ExecEvent, ExecInput, ExecStream, OutputOffsets, OutputStream, RECONNECT_WITHIN,
    Reconnect, STDIN_KEPT, STDIN_WINDOW,
};

use std::path::{Path, PathBuf};

use boxd_proto::tonic::transport::{Channel, Endpoint};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

/// The generated client type, over a Unix-socket channel.
pub type Client = v1::boxd_client::BoxdClient<Channel>;

/// Why a client could not reach the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "boxd is not running (nothing answers on {socket}); start it with `boxctl daemon start`"
    )]
    NotRunning { socket: PathBuf },
    /// The socket, its directory, a directory or symlink on the way, or
    /// the process answering is not this user's: nothing was sent. Not a
    /// reason to start a daemon either.
    #[error("refusing to connect to boxd at {socket}: {reason}")]
    Untrusted {
        socket: PathBuf,
        reason: Box<trust::Untrusted>,
    },
    #[error("cannot connect to boxd at {socket}: {source}")]
    Io {
        socket: PathBuf,
        source: std::io::Error,
    },
    /// The daemon answered, and refused (e.g. a peer of another uid).
    #[error("boxd at {socket} refused: {message}")]
    Refused { socket: PathBuf, message: String },
    #[error(
        "boxd at {socket} speaks protocol {daemon}, this client speaks {client}; use a client and a daemon from the same release (restart boxd after an upgrade: `boxctl daemon stop`)"
    )]
    Protocol {
        socket: PathBuf,
        daemon: String,
        client: String,
    },
}

/// What a status from boxd says, in words: its message, or for a call the
/// daemon does not know (an older daemon than the client), how to fix it.
pub fn status_message(s: &boxd_proto::tonic::Status) -> String {
    if ErrorKind::of_status(s) == ErrorKind::Unsupported && s.message().is_empty() {
        return "boxd does not offer this call: it is older than this client; restart it from this release (`boxctl daemon stop`, then start it again)".into();
    }
    s.message().to_owned()
}

/// A status made here from a broken connection (it carries its transport
/// error as a source; statuses from boxd never do) becomes one that says
/// what happened; any other passes unchanged.
pub fn lost_daemon(s: boxd_proto::tonic::Status) -> boxd_proto::tonic::Status {
    if std::error::Error::source(&s).is_none() {
        return s;
    }
    boxd_proto::tonic::Status::unavailable(format!(
        "lost the connection to boxd (it stopped or crashed): {}",
        s.message()
    ))
}

/// Connects to the daemon listening on `socket` and checks that it speaks
/// this client's protocol version.
///
/// The connection is made eagerly, so a daemon that is not running (or of
/// another version) is reported here rather than on the first call.
pub async fn connect(socket: &Path) -> Result<Client, ConnectError> {
    connect_described(socket).await.map(|(client, _)| client)
}

/// [`connect`], also returning what the daemon said of itself (the check
/// asks anyway; callers that need it do not ask twice).
pub async fn connect_described(
    socket: &Path,
) -> Result<(Client, v1::DescribeResponse), ConnectError> {
    let mut client = connect_unchecked(socket).await?;
    let describe = match client.describe(v1::DescribeRequest {}).await {
        Ok(d) => d.into_inner(),
        Err(s) => {
            return Err(ConnectError::Refused {
                socket: socket.to_path_buf(),
                message: s.message().to_owned(),
            });
        }
    };
    if describe.protocol != v1::PROTOCOL {
        return Err(ConnectError::Protocol {
            socket: socket.to_path_buf(),
            daemon: describe.protocol,
            client: v1::PROTOCOL.to_owned(),
        });
    }
    Ok((client, describe))
}

/// Connects without the protocol check (for `boxctl daemon status`, which
/// reports a mismatch rather than failing on it). The trust checks are made
/// all the same.
pub async fn connect_unchecked(socket: &Path) -> Result<Client, ConnectError> {
    let path = socket.to_path_buf();
    // The URI is required by the API but unused: the connector dials the socket.
    let endpoint = Endpoint::from_static("http://boxd.invalid")
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(boxd_proto::wire::MAX_FRAME);
    let connector_path = path.clone();
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_| {
            let p = connector_path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(dial(&p).await?)) }
        }))
        .await
        .map_err(|e| classify(&path, e))?;
    Ok(v1::boxd_client::BoxdClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE))
}

/// Opens one connection to `socket` (every connection of a channel,
/// reconnections included, comes through here). Before a byte is sent:
/// the path to the socket and the socket are this user's
/// ([`trust::check_socket`]), and so is the process that answers
/// ([`trust::check_peer`], from `SO_PEERCRED`); otherwise the error carries
/// a [`trust::Untrusted`].
async fn dial(socket: &Path) -> std::io::Result<UnixStream> {
    let me = trust::my_uid();
    trust::check_socket(&trust::RealFs, me, socket)?;
    let stream = UnixStream::connect(socket).await?;
    let peer = stream.peer_cred()?.uid();
    trust::check_peer(me, socket, peer)?;
    Ok(stream)
}

fn classify(socket: &Path, err: boxd_proto::tonic::transport::Error) -> ConnectError {
    use std::error::Error as _;
    let mut src: Option<&(dyn std::error::Error + 'static)> = err.source();
    while let Some(e) = src {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(u) = io
                .get_ref()
                .and_then(|e| e.downcast_ref::<trust::Untrusted>())
            {
                return ConnectError::Untrusted {
                    socket: socket.to_path_buf(),
                    reason: Box::new(u.clone()),
                };
            }
            return match io.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    ConnectError::NotRunning {
                        socket: socket.to_path_buf(),
                    }
                }
                kind => ConnectError::Io {
                    socket: socket.to_path_buf(),
                    source: std::io::Error::new(kind, io.to_string()),
                },
            };
        }
        src = e.source();
    }
    ConnectError::Io {
        socket: socket.to_path_buf(),
        source: std::io::Error::other(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boxd_proto::tonic::Status;

    #[tokio::test]
    async fn an_untrusted_socket_is_refused_before_connecting() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let socket = dir.join("boxd.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let e = connect(&socket).await.unwrap_err();
        assert!(matches!(e, ConnectError::Untrusted { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("refusing to connect to boxd at"), "{msg}");
        assert!(msg.contains("mode 0777"), "{msg}");
        // Nothing connected.
        let accepted = listener.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{accepted:?}"
        );
        // Private again, and with no socket: "not running", as before.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        drop(listener);
        std::fs::remove_file(&socket).unwrap();
        let e = connect(&socket).await.unwrap_err();
        assert!(matches!(e, ConnectError::NotRunning { .. }), "{e}");
    }

    #[test]
    fn an_unknown_call_says_the_daemon_is_older() {
        assert!(status_message(&Status::unimplemented("")).contains("older than this client"));
        assert_eq!(
            status_message(&Status::unimplemented("prune is not offered")),
            "prune is not offered"
        );
        assert_eq!(status_message(&Status::not_found("no box")), "no box");
    }
}
