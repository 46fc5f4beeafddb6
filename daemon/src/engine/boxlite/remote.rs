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
//! `Describe`, never in a box archive. Nor is it sent in clear over a
//! network: a plain `http://` URL must name this host (a loopback address
//! or `localhost`, as an SSH tunnel gives); to another host boxd refuses
//! to start unless [`INSECURE_HTTP_ENV`] is `1`, and then warns.
//!
//! What the server says (its error bodies) is quoted with its control
//! characters escaped (`errors::plain`): it reaches clients' terminals
//! (`daemon status`, `doctor`, every failed call) and boxd's log.

use std::time::Duration;

use ::boxlite::{BoxliteError, BoxliteRestOptions, BoxliteRuntime};

use super::errors::plain;
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

/// The environment variable whose value `1` accepts a plain-HTTP
/// `--boxlite-url` to another host (the key and the boxes' traffic in
/// clear, on a network the user trusts).
pub const INSECURE_HTTP_ENV: &str = "BOXD_BOXLITE_INSECURE_HTTP";

/// Whether `host` is this host: a loopback address, or `localhost`.
fn is_loopback(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => d.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(a) => a.is_loopback(),
        url::Host::Ipv6(a) => {
            a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
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
    /// it, plain HTTP only to this host unless [`INSECURE_HTTP_ENV`] is
    /// `1`); the key from `key_file` (its first line) or, without one, the
    /// environment's `BOXD_BOXLITE_API_KEY`.
    pub fn new(
        url: &str,
        key_file: Option<&std::path::Path>,
    ) -> std::result::Result<Remote, String> {
        let insecure = std::env::var(INSECURE_HTTP_ENV).is_ok_and(|v| v.trim() == "1");
        Remote::checked(url, key_file, insecure)
    }

    /// [`Remote::new`], told whether plain HTTP to another host is accepted.
    fn checked(
        url: &str,
        key_file: Option<&std::path::Path>,
        insecure_http: bool,
    ) -> std::result::Result<Remote, String> {
        let parsed =
            url::Url::parse(url).map_err(|e| format!("--boxlite-url {url:?} is not a URL: {e}"))?;
        let Some(host) = parsed
            .host()
            .filter(|_| matches!(parsed.scheme(), "http" | "https"))
        else {
            return Err(format!(
                "--boxlite-url {url:?}: expected https://HOST, or http://127.0.0.1:PORT on this host"
            ));
        };
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(
                "--boxlite-url must not carry credentials: put the API key in --boxlite-api-key-file".into(),
            );
        }
        if parsed.scheme() == "http" && !is_loopback(&host) {
            if !insecure_http {
                return Err(format!(
                    "--boxlite-url {url:?} is plain HTTP to {host}, which is not this host: the API key and every box's traffic (commands, their input and output) would cross the network in clear. Use https://{host}, or reach the server through this host's loopback (an SSH tunnel: ssh -N -L 8100:127.0.0.1:8100 {host}, then --boxlite-url http://127.0.0.1:8100), or set {INSECURE_HTTP_ENV}=1 to accept plain HTTP on a network you trust"
                ));
            }
            tracing::warn!(
                url,
                "{INSECURE_HTTP_ENV}=1: the BoxLite API key and the boxes' traffic go to {host} in clear (plain HTTP to another host)"
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
                "cannot use the BoxLite server at {}: {}",
                self.url,
                plain(&e.to_string())
            ))
        })
    }
}

/// Whether the server answers and takes the key, in words for `Describe`,
/// `boxctl doctor` and `daemon status`: `Ok` or `Err` with the reason.
pub async fn probe(runtime: &BoxliteRuntime, url: &str) -> std::result::Result<String, String> {
    let auth = runtime
        .auth()
        .map_err(|e| format!("the BoxLite server at {url}: {}", plain(&e.to_string())))?;
    match tokio::time::timeout(Duration::from_secs(5), auth.whoami()).await {
        Ok(Ok(_)) => Ok(format!(
            "the BoxLite server at {url} answers and accepts the API key"
        )),
        Ok(Err(BoxliteError::Config(m))) if m.starts_with("auth") => Err(format!(
            "the BoxLite server at {url} refused the API key ({}): check --boxlite-api-key-file",
            plain(&m)
        )),
        Ok(Err(e)) => Err(format!(
            "the BoxLite server at {url} cannot be reached: {}",
            plain(&e.to_string())
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
    fn plain_http_goes_to_this_host_only_unless_accepted() {
        for url in [
            "http://127.0.0.1:8100",
            "http://127.8.9.10:8100",
            "http://localhost:8100",
            "http://LOCALHOST.:8100",
            "http://[::1]:8100",
            "http://[::ffff:127.0.0.1]:8100",
            "https://boxlite.example.com",
            "https://192.0.2.1:8443",
        ] {
            assert!(Remote::checked(url, None, false).is_ok(), "{url}");
        }
        for url in [
            "http://192.0.2.1:8100",
            "http://10.0.0.1",
            "http://boxlite.example.com:8100",
            "http://localhost.example.com:8100",
            "http://[2001:db8::1]:8100",
            "http://0.0.0.0:8100",
        ] {
            let e = Remote::checked(url, None, false).unwrap_err();
            assert!(
                e.contains("in clear") && e.contains("https://") && e.contains(INSECURE_HTTP_ENV),
                "{url}: {e}"
            );
            // The explicit opt-in.
            assert!(Remote::checked(url, None, true).is_ok(), "{url}");
        }
        assert!(Remote::checked("unix:/run/boxlite.sock", None, true).is_err());
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
