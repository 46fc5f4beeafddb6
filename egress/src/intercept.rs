//! HTTPS to a secret's host: after `CONNECT host:port` the proxy answers
//! the box's TLS itself with a certificate for `host` from the box's own
//! CA ([`crate::ca`]), serves what comes inside with hyper (HTTP/2 or
//! HTTP/1.1, as ALPN agrees with the box), and sends each request on
//! through [`Proxy::send`] as the proxy's own, verified, connection to the
//! real host. Hosts no secret names are never intercepted (a blind
//! tunnel, [`super::tunnel`]).
//!
//! **Invariants:** the TLS ClientHello must name the `CONNECT` host (SNI,
//! compared as allow-list names are); a hello that names another host, or
//! none when the host is a name, is answered with a TLS alert and a
//! [`Why::Sni`] refusal, and nothing is sent upstream; a request inside
//! goes only to the `CONNECT` host and port, whatever its `Host` or
//! `:authority` says; the box's TLS handshake is due within
//! [`HANDSHAKE_TIMEOUT`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::http::header::{self};
use hyper::http::{Request, Response};
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::time::timeout;
use tokio_rustls::LazyConfigAcceptor;
use tracing::{debug, info, warn};

use super::ca::{BoxCa, Leaf};
use super::forward::ReplyBody;
use super::proxy::{Proxy, server};
use super::reply::{HEAD_LIMIT, Reply};
use super::request::Why;

/// The box's TLS handshake must be done within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Streams one HTTP/2 connection from the box may have open at once.
const MAX_STREAMS: u32 = 128;

/// A host's certificate and the TLS settings that present it.
type Presented = (Arc<Leaf>, Arc<rustls::ServerConfig>);

/// A box's CA and the TLS settings made from it, per host.
pub(crate) struct Interceptor {
    ca: Arc<BoxCa>,
    configs: Mutex<HashMap<String, Presented>>,
    /// Answers any hello with an alert (no certificate).
    refuse: Arc<rustls::ServerConfig>,
}

impl Interceptor {
    pub(crate) fn new(ca: Arc<BoxCa>) -> Interceptor {
        let refuse = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCertificate));
        Interceptor {
            ca,
            configs: Mutex::new(HashMap::new()),
            refuse: Arc::new(refuse),
        }
    }

    /// The TLS settings that present `host`'s certificate (minted once,
    /// kept while the CA keeps the certificate).
    fn config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let leaf = self.ca.leaf(host).map_err(|e| e.to_string())?;
        let mut configs = self.configs.lock().expect("tls configs");
        if let Some((kept, config)) = configs.get(host)
            && Arc::ptr_eq(kept, &leaf)
        {
            return Ok(config.clone());
        }
        let chain = leaf
            .chain
            .iter()
            .map(|der| rustls::pki_types::CertificateDer::from(der.clone()))
            .collect();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf.key.clone().into());
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if configs.len() >= 1024 {
            configs.clear();
        }
        configs.insert(host.to_owned(), (leaf, config.clone()));
        Ok(config)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[derive(Debug)]
struct NoCertificate;

impl ResolvesServerCert for NoCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        None
    }
}

/// Whether a ClientHello's server name fits `CONNECT host`: the same name
/// (case and a trailing dot aside), or none when the host is an address.
pub fn sni_fits(host: &str, sni: Option<&str>) -> bool {
    let bare = super::upstream::unbracket(host);
    match sni {
        Some(name) => super::upstream::alias_key(name) == super::upstream::alias_key(bare),
        None => bare.parse::<std::net::IpAddr>().is_ok(),
    }
}

impl Proxy {
    /// Serves the intercepted tunnel `CONNECT host:port` once hyper hands
    /// the client connection over.
    pub(crate) async fn intercept(self: Arc<Self>, client: OnUpgrade, host: String, port: u16) {
        let box_name = self.rules.box_name().to_owned();
        let Some(interceptor) = self.interceptor.as_ref() else {
            return;
        };
        let upgraded = match client.await {
            Ok(upgraded) => upgraded,
            Err(e) => return debug!(box_name, host, port, "tunnel not opened: {e}"),
        };
        let acceptor =
            LazyConfigAcceptor::new(rustls::server::Acceptor::default(), TokioIo::new(upgraded));
        let start = match timeout(HANDSHAKE_TIMEOUT, acceptor).await {
            Ok(Ok(start)) => start,
            Ok(Err(e)) => {
                info!(box_name, host, port, "egress refused: not TLS ({e})");
                self.rules.report(&host, port, Why::NotTls);
                return;
            }
            Err(_) => return debug!(box_name, host, port, "no TLS hello within 30 s"),
        };
        let sni = start.client_hello().server_name().map(str::to_owned);
        if !sni_fits(&host, sni.as_deref()) {
            info!(
                box_name,
                host, port, sni, "egress refused: TLS for another host"
            );
            self.rules.report(&host, port, Why::Sni { sent: sni });
            let _ = timeout(
                HANDSHAKE_TIMEOUT,
                start.into_stream(interceptor.refuse.clone()),
            )
            .await;
            return;
        }
        let config = match interceptor.config(super::upstream::unbracket(&host)) {
            Ok(config) => config,
            Err(e) => {
                warn!(box_name, host, port, "no certificate for the host: {e}");
                let _ = timeout(
                    HANDSHAKE_TIMEOUT,
                    start.into_stream(interceptor.refuse.clone()),
                )
                .await;
                return;
            }
        };
        let tls = match timeout(HANDSHAKE_TIMEOUT, start.into_stream(config)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => return debug!(box_name, host, port, "TLS with the box failed: {e}"),
            Err(_) => return debug!(box_name, host, port, "TLS with the box timed out"),
        };
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        let service = {
            let (proxy, host) = (self.clone(), host.clone());
            service_fn(move |request| {
                let (proxy, host) = (proxy.clone(), host.clone());
                async move { Ok::<_, Infallible>(proxy.inside(&host, port, request).await) }
            })
        };
        let served = if h2 {
            http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_header_list_size(HEAD_LIMIT as u32)
                .max_concurrent_streams(MAX_STREAMS)
                .adaptive_window(true)
                .serve_connection(io, service)
                .await
        } else {
            server().serve_connection(io, service).with_upgrades().await
        };
        if let Err(e) = served {
            debug!(box_name, host, port, "intercepted connection ended: {e}");
        }
    }

    /// The answer to one request inside an intercepted tunnel.
    async fn inside(
        &self,
        host: &str,
        port: u16,
        mut request: Request<Incoming>,
    ) -> Response<ReplyBody> {
        let upgrade = request
            .headers()
            .contains_key(header::UPGRADE)
            .then(|| hyper::upgrade::on(&mut request));
        let (head, body) = request.into_parts();
        let answer = async {
            let forward = self.rules.plan_inside(host, port, head)?;
            self.send(forward, body, upgrade).await
        };
        answer
            .await
            .unwrap_or_else(|reply: Reply| reply.into_response().map(http_body_util::Either::Left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hello_must_name_the_connect_host() {
        assert!(sni_fits("api.example", Some("API.example.")));
        assert!(!sni_fits("api.example", Some("evil.example")));
        assert!(!sni_fits("api.example", None));
        assert!(sni_fits("127.0.0.1", None));
        assert!(sni_fits("[::1]", None));
        assert!(!sni_fits("127.0.0.1", Some("evil.example")));
    }
}
