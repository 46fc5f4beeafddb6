//! BoxLite's errors as boxd's [`Error`], in one place: every call into
//! BoxLite maps its error here, with what was being done.
//!
//! - 0.10.8 reports a taken box name as an invalid argument: it is
//!   `AlreadyExists`;
//! - a runtime that would not open because another process holds its home
//!   is `FailedPrecondition`, naming the home (only one process can use a
//!   BoxLite home at a time);
//! - BoxLite reports unreachable registries as storage errors, but for boxd
//!   they mean the engine could not get the image;
//! - what BoxLite says is quoted with its control characters escaped
//!   ([`plain`]): on a remote runtime it is the server's error body, which
//!   reaches clients' terminals and boxd's log.

/// What BoxLite (or a BoxLite server) said, its control characters
/// escaped.
pub(super) use crate::error::escaped as plain;
use std::path::Path;

use ::boxlite::BoxliteError;

use crate::error::Error;

/// The error for a runtime that would not open.
pub(super) fn open_error(home: &Path, e: BoxliteError) -> Error {
    let text = e.to_string();
    if text.contains("runtime lock") || text.contains("already using directory") {
        return Error::FailedPrecondition(format!(
            "the BoxLite home {} is in use by another process (another boxd, or the boxlite CLI or Python SDK pointed at it); only one process can use a BoxLite home at a time",
            home.display()
        ));
    }
    match e {
        BoxliteError::Unsupported(m) => {
            Error::FailedPrecondition(format!("BoxLite cannot run on this host: {}", plain(&m)))
        }
        e => map_err(
            &format!("open the BoxLite runtime at {}", home.display()),
            e,
        ),
    }
}

/// A failed pull: BoxLite reports unreachable registries as storage
/// errors, but for boxd they mean the engine could not get the image.
pub(super) fn pull_error(reference: &str, e: BoxliteError) -> Error {
    match map_err(&format!("pull {reference}"), e) {
        Error::Internal(m) => Error::Engine(m),
        other => other,
    }
}

/// A BoxLite error as a boxd error, with what was being done.
pub(super) fn map_err(context: &str, e: BoxliteError) -> Error {
    let msg = format!("{context}: {}", plain(&e.to_string()));
    match e {
        // 0.10.8 reports a taken box name as an invalid argument.
        BoxliteError::InvalidArgument(m) if m.contains("already exists") => {
            Error::AlreadyExists(msg)
        }
        // A REST server that refused the API key.
        BoxliteError::Config(m) if m.starts_with("auth") => Error::FailedPrecondition(format!(
            "{msg} (the BoxLite server refused the API key: check --boxlite-api-key-file)"
        )),
        BoxliteError::InvalidArgument(_) | BoxliteError::Config(_) => Error::InvalidArgument(msg),
        BoxliteError::NotFound(_) => Error::NotFound(msg),
        BoxliteError::AlreadyExists(_) => Error::AlreadyExists(msg),
        BoxliteError::InvalidState(_) | BoxliteError::Stopped(_) | BoxliteError::Unsupported(_) => {
            Error::FailedPrecondition(msg)
        }
        BoxliteError::UnsupportedEngine => Error::Unimplemented(msg),
        BoxliteError::Storage(_)
        | BoxliteError::Database(_)
        | BoxliteError::MetadataError(_)
        | BoxliteError::Internal(_) => Error::Internal(msg),
        BoxliteError::Engine(_)
        | BoxliteError::Image(_)
        | BoxliteError::Portal(_)
        | BoxliteError::Network(_)
        | BoxliteError::Rpc(_)
        | BoxliteError::RpcTransport(_)
        | BoxliteError::Execution(_)
        | BoxliteError::ResourceExhausted(_)
        | BoxliteError::SessionReaped(_) => Error::Engine(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_codes() {
        let lock = BoxliteError::Internal("Failed to acquire runtime lock at /h/boxlite: internal error: Another BoxliteRuntime is already using directory: /h/boxlite".into());
        let e = open_error(Path::new("/h/boxlite"), lock);
        assert!(
            matches!(&e, Error::FailedPrecondition(m) if m.contains("/h/boxlite") && m.contains("in use")),
            "{e}"
        );
        let e = open_error(
            Path::new("/h"),
            BoxliteError::Unsupported("KVM is not available on this host.".into()),
        );
        assert!(
            matches!(&e, Error::FailedPrecondition(m) if m.contains("KVM")),
            "{e}"
        );
        let e = map_err(
            "start",
            BoxliteError::Engine("The VM failed to start.".into()),
        );
        assert!(
            matches!(&e, Error::Engine(m) if m == "start: engine reported an error: The VM failed to start."),
            "{e}"
        );
        assert!(matches!(
            map_err("x", BoxliteError::NotFound("b".into())),
            Error::NotFound(_)
        ));
        assert!(matches!(
            map_err("x", BoxliteError::AlreadyExists("b".into())),
            Error::AlreadyExists(_)
        ));
        assert!(matches!(
            map_err("x", BoxliteError::InvalidState("b".into())),
            Error::FailedPrecondition(_)
        ));
        assert!(matches!(
            map_err("x", BoxliteError::InvalidArgument("b".into())),
            Error::InvalidArgument(_)
        ));
        assert!(matches!(
            map_err(
                "x",
                BoxliteError::InvalidArgument("box with name 'n' already exists".into())
            ),
            Error::AlreadyExists(_)
        ));
        assert!(matches!(
            map_err("x", BoxliteError::Database("b".into())),
            Error::Internal(_)
        ));
    }

    #[test]
    fn a_server_s_words_reach_no_terminal_raw() {
        let body = "\x1b]0;pwned-title\x07\x1b]52;c;cHduZWQ=\x07\r\n\u{9b}2J";
        let e = map_err("list BoxLite boxes", BoxliteError::Internal(body.into()));
        let m = e.to_string();
        assert!(!m.chars().any(char::is_control), "{m:?}");
        assert!(
            m.contains(r"\u{1b}]0;pwned-title\u{7}\u{1b}]52;c;cHduZWQ=\u{7}\r\n\u{9b}2J"),
            "{m}"
        );
        assert_eq!(plain("caf\u{e9} \u{7bb1}"), "caf\u{e9} \u{7bb1}");
    }
}
