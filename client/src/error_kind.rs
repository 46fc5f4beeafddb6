//! What a failure to reach or use boxd *is*, decided in one place: every
//! client (exit codes, retries, "does it exist?") asks [`ErrorKind`]
//! instead of looking at codes or message text itself.
//!
//! Invariant: a kind comes from the gRPC code, from whether the status was
//! made here from a broken connection (it then carries the transport error
//! as its source; statuses from boxd never do), and from
//! [`ConnectError`]'s variant. Message text is read in exactly one place,
//! [`ErrorKind::of_status`], for the one distinction tonic makes only in
//! words (see there).

use boxd_proto::tonic::{Code, Status};

use crate::ConnectError;

/// What went wrong, in the terms clients act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Nothing answers on the socket (or no socket).
    NotRunning,
    /// The connection to boxd broke during a call (it stopped or crashed).
    LostDaemon,
    /// boxd answered "unavailable" itself (e.g. while shutting down).
    Unavailable,
    /// The socket, or the process on it, is not this user's: nothing sent.
    Untrusted,
    /// The daemon answered and refused the connection.
    Refused,
    /// The daemon speaks another protocol version.
    Protocol,
    /// The socket could not be used for another reason.
    Io,
    NotFound,
    AlreadyExists,
    InvalidArgument,
    FailedPrecondition,
    /// A full disk, or a limit such as `max-boxes`.
    ResourceExhausted,
    /// A call the daemon does not offer (it is older) or a feature its
    /// engine lacks.
    Unsupported,
    PermissionDenied,
    Timeout,
    Cancelled,
    /// Anything else boxd reported (internal, unknown, data loss, ...).
    Other,
}

impl ErrorKind {
    /// The kind of a status from a call to boxd.
    pub fn of_status(s: &Status) -> ErrorKind {
        match s.code() {
            Code::Unavailable if Self::is_lost_connection(s) => ErrorKind::LostDaemon,
            Code::Unavailable => ErrorKind::Unavailable,
            Code::NotFound => ErrorKind::NotFound,
            Code::AlreadyExists => ErrorKind::AlreadyExists,
            Code::InvalidArgument | Code::OutOfRange => ErrorKind::InvalidArgument,
            Code::FailedPrecondition | Code::Aborted => ErrorKind::FailedPrecondition,
            Code::ResourceExhausted => ErrorKind::ResourceExhausted,
            Code::Unimplemented => ErrorKind::Unsupported,
            Code::PermissionDenied => ErrorKind::PermissionDenied,
            Code::DeadlineExceeded => ErrorKind::Timeout,
            Code::Cancelled => ErrorKind::Cancelled,
            _ => ErrorKind::Other,
        }
    }

    /// Whether an `UNAVAILABLE` status means the connection broke rather
    /// than boxd saying so: a status tonic made here from a transport error
    /// carries that error as its source. The message test is the one place
    /// message text decides a kind: a status that was copied or re-made
    /// loses its source, and tonic says "transport error" only in words.
    fn is_lost_connection(s: &Status) -> bool {
        std::error::Error::source(s).is_some() || s.message().contains("transport")
    }

    /// The kind of a failure to connect.
    pub fn of_connect(e: &ConnectError) -> ErrorKind {
        match e {
            ConnectError::NotRunning { .. } => ErrorKind::NotRunning,
            ConnectError::Untrusted { .. } => ErrorKind::Untrusted,
            ConnectError::Io { .. } => ErrorKind::Io,
            ConnectError::Refused { .. } => ErrorKind::Refused,
            ConnectError::Protocol { .. } => ErrorKind::Protocol,
        }
    }

    /// Whether boxd could not be reached (or reached only as the wrong
    /// daemon), as opposed to boxd or this client refusing the request.
    pub fn is_unreachable(self) -> bool {
        matches!(
            self,
            ErrorKind::NotRunning | ErrorKind::LostDaemon | ErrorKind::Io | ErrorKind::Protocol
        )
    }
}

impl From<&Status> for ErrorKind {
    fn from(s: &Status) -> ErrorKind {
        ErrorKind::of_status(s)
    }
}

impl From<&ConnectError> for ErrorKind {
    fn from(e: &ConnectError) -> ErrorKind {
        ErrorKind::of_connect(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn codes_decide_kinds() {
        assert_eq!(
            ErrorKind::of_status(&Status::not_found("no box x")),
            ErrorKind::NotFound
        );
        assert_eq!(
            ErrorKind::of_status(&Status::unimplemented("")),
            ErrorKind::Unsupported
        );
        assert_eq!(
            ErrorKind::of_status(&Status::resource_exhausted("disk full")),
            ErrorKind::ResourceExhausted
        );
        // The words of a message do not change a kind boxd gave.
        assert_eq!(
            ErrorKind::of_status(&Status::not_found("transport")),
            ErrorKind::NotFound
        );
    }

    #[test]
    fn a_broken_connection_is_not_boxd_saying_unavailable() {
        assert_eq!(
            ErrorKind::of_status(&Status::unavailable("boxd is shutting down")),
            ErrorKind::Unavailable
        );
        let mut lost = Status::unavailable("connection closed");
        lost.set_source(std::sync::Arc::new(std::io::Error::other("reset")));
        assert_eq!(ErrorKind::of_status(&lost), ErrorKind::LostDaemon);
        assert_eq!(
            ErrorKind::of_status(&Status::unavailable("transport error")),
            ErrorKind::LostDaemon
        );
        assert!(ErrorKind::LostDaemon.is_unreachable());
        assert!(!ErrorKind::Unavailable.is_unreachable());
    }

    #[test]
    fn connect_errors_have_kinds() {
        let socket = PathBuf::from("/s");
        let e = ConnectError::NotRunning {
            socket: socket.clone(),
        };
        assert_eq!(ErrorKind::of_connect(&e), ErrorKind::NotRunning);
        assert!(ErrorKind::of_connect(&e).is_unreachable());
        let e = ConnectError::Refused {
            socket,
            message: "no".into(),
        };
        assert!(!ErrorKind::of_connect(&e).is_unreachable());
    }
}
