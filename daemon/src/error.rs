//! The daemon's one error type, and the one place it becomes a gRPC status.

use boxd_proto::tonic::{Code, Status};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// The request is valid but the box is in the wrong state for it.
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unimplemented(String),
    /// Out of something: disk space in the daemon's home, or a limit such
    /// as `max-boxes`.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The engine could not do what was asked (a box failed to start, ...).
    #[error("{0}")]
    Engine(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O failure; a full disk (or quota) is named as such, since the
    /// user can fix it.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        let context = context.into();
        if is_no_space(&source) {
            return Error::no_space(&context);
        }
        Error::Io { context, source }
    }

    /// The disk that holds the daemon's state is full.
    pub fn no_space(context: &str) -> Error {
        Error::ResourceExhausted(format!(
            "{context}: no space left on the device that holds boxd's home; free some space (remove boxes or unused images with `boxctl image prune`)"
        ))
    }

    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound(_) => Code::NotFound,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::Unimplemented(_) => Code::Unimplemented,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::Engine(_) => Code::Unavailable,
            Error::Io { .. } | Error::Internal(_) => Code::Internal,
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        if matches!(e, Error::Io { .. } | Error::Internal(_)) {
            tracing::error!(error = %e, "internal error");
        }
        Status::new(e.code(), e.to_string())
    }
}

impl From<crate::image::ImageError> for Error {
    fn from(e: crate::image::ImageError) -> Error {
        use crate::image::ImageError;
        match e {
            ImageError::NotALayout { .. } | ImageError::Invalid { .. } => {
                Error::InvalidArgument(e.to_string())
            }
            ImageError::Io { context, source } if is_no_space(&source) => Error::no_space(&context),
            ImageError::Io { .. } => Error::Internal(e.to_string()),
            ImageError::BadReference { .. } => Error::InvalidArgument(e.to_string()),
            ImageError::NotFound(m) => Error::NotFound(m),
            ImageError::Denied(m) => Error::FailedPrecondition(m),
            ImageError::Registry(m) => Error::Engine(m),
            ImageError::InUse(m) => Error::FailedPrecondition(m),
            ImageError::Stopped => Error::Engine(e.to_string()),
        }
    }
}

/// ENOSPC or EDQUOT, also when wrapped (the tar crate wraps the error of
/// a failed unpack in one of its own, keeping the kind).
pub fn is_no_space(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || matches!(e.kind(), ErrorKind::StorageFull | ErrorKind::QuotaExceeded)
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<std::io::Error>())
            .is_some_and(is_no_space)
}

/// `text` with its control characters escaped as `{:?}` escapes them
/// (`\u{1b}`), the rest as it is: what the daemon says of a string that an
/// image, a box or a remote server controls, so that no terminal that
/// shows it (doctor's, a client's, a log's) takes it for a command (the
/// daemon depends on no client crate, so not `boxd_client::untrusted`).
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_maps_to_its_code() {
        let cases = [
            (Error::InvalidArgument("x".into()), Code::InvalidArgument),
            (Error::NotFound("x".into()), Code::NotFound),
            (Error::AlreadyExists("x".into()), Code::AlreadyExists),
            (
                Error::FailedPrecondition("x".into()),
                Code::FailedPrecondition,
            ),
            (Error::Unimplemented("x".into()), Code::Unimplemented),
            (
                Error::ResourceExhausted("x".into()),
                Code::ResourceExhausted,
            ),
            (Error::Engine("x".into()), Code::Unavailable),
            (Error::Internal("x".into()), Code::Internal),
        ];
        for (e, code) in cases {
            let msg = e.to_string();
            let s = Status::from(e);
            assert_eq!(s.code(), code);
            assert_eq!(s.message(), msg);
        }
    }

    #[test]
    fn a_full_disk_is_named() {
        let e = Error::io(
            "write box.json",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert_eq!(e.code(), Code::ResourceExhausted);
        assert!(e.to_string().contains("no space left"), "{e}");
        let other = Error::io("write", std::io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(other.code(), Code::Internal);
    }
}
