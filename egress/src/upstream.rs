//! Connections to upstreams, made by boxd on the host side: the one
//! [`Dialer`] (names resolved here, aliases first, never by hyper) and
//! the one hyper client per proxy ([`client`]) that every forwarded
//! request goes through, plain HTTP and intercepted HTTPS alike:
//! keep-alive pooled per upstream, HTTP/2 or HTTP/1.1 as ALPN agrees with
//! the upstream (whatever the box spoke to boxd).
//!
//! **Invariants:** an upstream TLS connection is verified against the
//! host's trust store (`rustls-native-certs`: the system's roots, or
//! `SSL_CERT_FILE`/`SSL_CERT_DIR` as boxd was started with them) for the
//! name the box used, never accepted unverified; a failure is a `502`
//! naming the host and the reason, and a [`Why::Upstream`] refusal.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::http::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::client::TlsStream;

use super::reply::Reply;
use super::traffic::{Traffic, Upstream};

/// Resolving a host, and connecting to each of its addresses, each within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle pooled upstream connection is closed after this.
const POOL_IDLE: Duration = Duration::from_secs(60);

/// A request body as sent upstream: substituted and whole, or the box's.
pub(crate) type UpstreamBody = Either<Full<Bytes>, Incoming>;
/// The proxy's client.
pub(crate) type UpstreamClient = Client<Connector, UpstreamBody>;

/// Where and how the proxy connects.
pub(crate) struct Dialer {
    /// Host name (normalized) → the host connected to instead.
    aliases: HashMap<String, String>,
    traffic: Arc<Traffic>,
    /// The client TLS settings, made once (loading the host's roots) at
    /// the first HTTPS upstream.
    tls: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
}

impl Dialer {
    pub(crate) fn new(aliases: HashMap<String, String>, traffic: Arc<Traffic>) -> Dialer {
        let aliases = aliases
            .into_iter()
            .map(|(name, to)| (alias_key(&name), to))
            .collect();
        Dialer {
            aliases,
            traffic,
            tls: OnceLock::new(),
        }
    }

    /// Trusts exactly `roots` upstream instead of the host's store (tests).
    pub(crate) fn trust(&self, roots: rustls::RootCertStore) {
        let _ = self.tls.set(Ok(client_config(roots)));
    }

    /// Resolves `host` here, on the host side (after its alias), and
    /// connects to the first address that answers.
    pub(crate) async fn connect(&self, host: &str, port: u16) -> Result<Upstream, Reply> {
        let bare = unbracket(host);
        let (dial, shown) = match self.aliases.get(&alias_key(bare)) {
            Some(to) => (unbracket(to), format!("{host} ({to})")),
            None => (bare, host.to_owned()),
        };
        let gateway = |why: String| {
            Reply::bad_gateway(format_args!("cannot reach {shown} port {port}: {why}"))
        };
        let addrs: Vec<SocketAddr> =
            match timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((dial, port))).await {
                Err(_) => return Err(gateway("resolving the name timed out after 10 s".into())),
                Ok(Err(e)) => return Err(gateway(format!("the name does not resolve ({e})"))),
                Ok(Ok(addrs)) => addrs.collect(),
            };
        let mut why = "the name has no address".to_owned();
        for addr in addrs {
            match timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(self.traffic.track(stream));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    why = format!("{addr} refused the connection");
                }
                Ok(Err(e)) => why = format!("connecting to {addr} failed: {e}"),
                Err(_) => why = format!("connecting to {addr} timed out after 10 s"),
            }
        }
        Err(gateway(why))
    }

    fn tls(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.tls
            .get_or_init(|| {
                let found = rustls_native_certs::load_native_certs();
                let mut roots = rustls::RootCertStore::empty();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    let errors: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
                    return Err(format!(
                        "boxd found no trusted root certificate on this host (set SSL_CERT_FILE for boxd){}",
                        if errors.is_empty() { String::new() } else { format!(": {}", errors.join("; ")) }
                    ));
                }
                Ok(client_config(roots))
            })
            .clone()
    }

    /// A verified TLS connection to `host:port` (ALPN `h2`, `http/1.1`).
    async fn tls_connect(&self, host: &str, port: u16) -> Result<TlsStream<Upstream>, DialError> {
        let config = self.tls().map_err(|why| DialError {
            reply: Reply::bad_gateway(format_args!("cannot verify {host}: {why}")),
            cert: None,
        })?;
        let bare = unbracket(host);
        let name = match bare.parse::<std::net::IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => ServerName::try_from(bare.to_owned()).map_err(|_| DialError {
                reply: Reply::bad_request(format_args!("{host} is not a valid TLS server name")),
                cert: None,
            })?,
        };
        let tcp = self
            .connect(host, port)
            .await
            .map_err(|reply| DialError { reply, cert: None })?;
        let connector = tokio_rustls::TlsConnector::from(config);
        match timeout(CONNECT_TIMEOUT, connector.connect(name, tcp)).await {
            Ok(Ok(tls)) => Ok(tls),
            Ok(Err(e)) => {
                let cert = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                    .filter(|e| matches!(e, rustls::Error::InvalidCertificate(_)))
                    .map(|e| e.to_string());
                let reply = match &cert {
                    Some(why) => Reply::bad_gateway(format_args!(
                        "{host} port {port}: its certificate does not verify against this host's trust store ({why}); boxd never connects unverified"
                    )),
                    None => {
                        Reply::bad_gateway(format_args!("TLS with {host} port {port} failed: {e}"))
                    }
                };
                Err(DialError { reply, cert })
            }
            Err(_) => Err(DialError {
                reply: Reply::bad_gateway(format_args!(
                    "TLS with {host} port {port} timed out after 10 s"
                )),
                cert: None,
            }),
        }
    }
}

fn client_config(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// The proxy's hyper client over `dialer`.
pub(crate) fn client(dialer: Arc<Dialer>) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(16)
        .http1_title_case_headers(true)
        .http1_preserve_header_case(true)
        .http2_adaptive_window(true)
        .build(Connector(dialer))
}

/// Why no upstream connection was made: the reply for the box, and
/// (a certificate that did not verify) the reason for the event.
#[derive(Debug)]
pub(crate) struct DialError {
    pub(crate) reply: Reply,
    pub(crate) cert: Option<String>,
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.reply)
    }
}

impl std::error::Error for DialError {}

/// The [`DialError`] behind a client error, if a connection was what failed.
pub(crate) fn dial_error(e: &hyper_util::client::legacy::Error) -> Option<&DialError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(dial) = err.downcast_ref::<DialError>() {
            return Some(dial);
        }
        source = err.source();
    }
    None
}

/// hyper's connector: `http://` plain, `https://` verified TLS.
#[derive(Clone)]
pub(crate) struct Connector(Arc<Dialer>);

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Conn>;
    type Error = DialError;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<Conn>, DialError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), DialError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let dialer = self.0.clone();
        Box::pin(async move {
            let tls = uri.scheme_str() == Some("https");
            let host = uri.host().unwrap_or_default().to_owned();
            let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
            if tls {
                let stream = dialer.tls_connect(&host, port).await?;
                Ok(TokioIo::new(Conn::Tls(Box::new(stream))))
            } else {
                let stream = dialer
                    .connect(&host, port)
                    .await
                    .map_err(|reply| DialError { reply, cert: None })?;
                Ok(TokioIo::new(Conn::Plain(stream)))
            }
        })
    }
}

/// One upstream connection.
pub(crate) enum Conn {
    Plain(Upstream),
    Tls(Box<TlsStream<Upstream>>),
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Conn::Tls(tls) if tls.get_ref().1.alpn_protocol() == Some(b"h2") => {
                Connected::new().negotiated_h2()
            }
            _ => Connected::new(),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Alias keys are matched like allow-list names: case-insensitive, a
/// trailing dot ignored.
pub(crate) fn alias_key(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

pub(crate) fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}
