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
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound(_) => Code::NotFound,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::Unimplemented(_) => Code::Unimplemented,
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
            ImageError::Io { .. } => Error::Internal(e.to_string()),
            ImageError::BadReference { .. } => Error::InvalidArgument(e.to_string()),
            ImageError::NotFound(m) => Error::NotFound(m),
            ImageError::Denied(m) => Error::FailedPrecondition(m),
            ImageError::Registry(m) => Error::Engine(m),
            ImageError::InUse(m) => Error::FailedPrecondition(m),
        }
    }
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
}
