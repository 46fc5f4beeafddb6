//! The BoxLite engine on a BoxLite REST server (`boxlite serve`, or a
//! control plane's runner) instead of a runtime on this host: the same
//! engine and the same `BoxliteRuntime` type, opened with
//! `BoxliteRuntime::rest` (the `boxlite` crate's own client: boxd writes
//! no REST code). What that client cannot carry is refused here, before
//! any request, with an error that names it; what the server answers is
//! mapped by `errors` like any BoxLite error.
//!
//! The API key comes from a file or the environment and goes only into
//! the client's `Authorization` header: it is never logged, never in
//! `Describe`, never in a box archive.

use std::time::Duration;

use ::boxlite::{BoxliteError, BoxliteRestOptions, BoxliteRuntime};

use crate::error::{Error, Result};
use crate::model::BoxSpec;

/// What boxes cannot do on a remote runtime (`Describe`'s notes).
pub const LIMITS: &str = "on a remote BoxLite runtime (BoxLite 0.10.8's REST API) boxes take no host mounts, publish no ports, copy no files in or out through boxd, run execs as the box's user only, and use images the server gets itself when a box starts (PullImage is refused)";

/// How long a call that only reads the server's state may take before the
/// server counts as unreachable (the client's own limit is 300 s).
pub const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// How long `Describe` takes the last probe of the server for an answer.
pub const PROBE_FRESH: Duration = Duration::from_secs(2);

/// The capabilities left on a remote runtime: the common ones but what
/// [`check_spec`] and the engine refuse there, and snapshots, clones and
/// archives (the server's, as `/v1/config` says).
pub fn capabilities() -> Vec<String> {
    const NOT_REMOTE: [&str; 3] = ["mounts.readOnly", "net.publish", "files.copy"];
    crate::engine::capabilities(&["box.snapshot", "box.clone", "box.archive"])
        .into_iter()
        .filter(|c| !NOT_REMOTE.contains(&c.as_str()))
        .collect()
}

/// Where the server is and the key it takes.
#[derive(Clone)]
pub struct Remote {
    pub url: String,
    pub api_key: Option<String>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .finish()
    }
}

impl Remote {
    /// `url` checked (`http://` or `https://`, a host, no credentials in
    /// it); the key from `key_file` (its first line) or, without one, the
    /// environment's `BOXD_BOXLITE_API_KEY`.
    pub fn new(
        url: &str,
        key_file: Option<&std::path::Path>,
    ) -> std::result::Result<Remote, String> {
        let parsed =
            url::Url::parse(url).map_err(|e| format!("--boxlite-url {url:?} is not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!(
                "--boxlite-url {url:?}: expected http://HOST:PORT or https://HOST"
            ));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(
                "--boxlite-url must not carry credentials: put the API key in --boxlite-api-key-file".into(),
            );
        }
        let api_key = match key_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!(
                        "cannot read the BoxLite API key file {}: {e}",
                        path.display()
                    )
                })?;
                let key = text.lines().next().unwrap_or("").trim().to_owned();
                if key.is_empty() {
                    return Err(format!(
                        "the BoxLite API key file {} is empty",
                        path.display()
                    ));
                }
                Some(key)
            }
            None => std::env::var("BOXD_BOXLITE_API_KEY")
                .ok()
                .filter(|k| !k.trim().is_empty()),
        };
        Ok(Remote {
            url: url.trim_end_matches('/').to_owned(),
            api_key,
        })
    }

    /// The REST runtime (no request is made yet).
    pub fn open(&self) -> Result<BoxliteRuntime> {
        let mut options = BoxliteRestOptions::new(self.url.clone());
        if let Some(key) = &self.api_key {
            options = options.with_api_key(key.clone());
        }
        BoxliteRuntime::rest(options).map_err(|e| {
            Error::FailedPrecondition(format!(
                "cannot use the BoxLite server at {}: {e}",
                self.url
            ))
        })
    }
}

/// Whether the server answers and takes the key, in words for `Describe`,
/// `boxctl doctor` and `daemon status`: `Ok` or `Err` with the reason.
pub async fn probe(runtime: &BoxliteRuntime, url: &str) -> std::result::Result<String, String> {
    let auth = runtime
        .auth()
        .map_err(|e| format!("the BoxLite server at {url}: {e}"))?;
    match tokio::time::timeout(Duration::from_secs(5), auth.whoami()).await {
        Ok(Ok(_)) => Ok(format!(
            "the BoxLite server at {url} answers and accepts the API key"
        )),
        Ok(Err(BoxliteError::Config(m))) if m.starts_with("auth") => Err(format!(
            "the BoxLite server at {url} refused the API key ({m}): check --boxlite-api-key-file"
        )),
        Ok(Err(e)) => Err(format!(
            "the BoxLite server at {url} cannot be reached: {e}"
        )),
        Err(_) => Err(format!(
            "the BoxLite server at {url} did not answer within 5 s"
        )),
    }
}

/// Refuses, before any request, what the REST client would refuse or drop.
pub fn check_spec(spec: &BoxSpec, url: &str) -> Result<()> {
    if let Some(m) = spec.mounts.first() {
        return Err(unsupported(
            &format!("mounting host directory {}", m.host_path.display()),
            url,
        ));
    }
    if !spec.ports.is_empty() {
        return Err(unsupported("publishing ports", url));
    }
    Ok(())
}

/// An operation the remote runtime cannot do: `UNIMPLEMENTED`, naming it
/// and the server.
pub fn unsupported(what: &str, url: &str) -> Error {
    Error::Unimplemented(format!(
        "{what} is not available on the remote BoxLite runtime at {url}: BoxLite 0.10.8's REST API does not carry it (docs/engines.md, \"Remote BoxLite\")"
    ))
}

/// A read of the server's state, bounded by [`READ_TIMEOUT`].
pub async fn bounded<T>(
    what: &str,
    url: &str,
    call: impl std::future::Future<Output = std::result::Result<T, BoxliteError>>,
) -> Result<T> {
    match tokio::time::timeout(READ_TIMEOUT, call).await {
        Ok(r) => r.map_err(|e| super::errors::map_err(what, e)),
        Err(_) => Err(Error::Engine(format!(
            "{what}: the BoxLite server at {url} did not answer within {} s",
            READ_TIMEOUT.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_keys_never_printed() {
        assert!(Remote::new("ftp://x", None).is_err());
        assert!(Remote::new("not a url", None).is_err());
        assert!(Remote::new("http://u:p@127.0.0.1:1", None).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "s3cret\n").unwrap();
        let r = Remote::new("http://127.0.0.1:8100/", Some(&file)).unwrap();
        assert_eq!(r.url, "http://127.0.0.1:8100");
        assert_eq!(r.api_key.as_deref(), Some("s3cret"));
        assert!(!format!("{r:?}").contains("s3cret"));
        std::fs::write(&file, "\n").unwrap();
        assert!(Remote::new("http://127.0.0.1:8100", Some(&file)).is_err());
    }

    #[test]
    fn what_the_rest_api_cannot_carry_is_refused_by_name() {
        let mut spec = BoxSpec::default();
        assert!(check_spec(&spec, "http://h").is_ok());
        spec.ports.push(crate::model::PortMapping {
            host_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            host_port: 0,
            box_port: 80,
        });
        let e = check_spec(&spec, "http://h").unwrap_err();
        assert!(
            matches!(e, Error::Unimplemented(ref m) if m.contains("publishing ports") && m.contains("http://h")),
            "{e}"
        );
    }
}
