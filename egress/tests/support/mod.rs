//! A real TLS upstream, the proxy for one box with a secret for it, and
//! the box's side of a tunnel: shared by the interception tests and the
//! interception bench (`benches/intercept.rs`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use boxd_egress::ca::BoxCa;
use boxd_egress::{AllowList, Proxy, Secret, Secrets};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub const HOST: &str = "api.boxd.test";
pub const TOKEN: &str = "BOXD_SECRET_PLACEHOLDER_API_KEY";
pub const VALUE: &str = "sk-test-0123456789abcdef";
pub const WAIT: Duration = Duration::from_secs(10);

/// What the upstream saw: each request's `authorization` and path.
pub type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

pub struct Upstream {
    pub port: u16,
    pub seen: Seen,
    /// The CA that signed its certificate.
    pub root: CertificateDer<'static>,
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS server for `HOST` (HTTP/2 and HTTP/1.1): `/echo` answers with the
/// authorization it got, `/sse` with two events a moment apart,
/// `/bytes/N` with `N` bytes.
pub async fn upstream() -> Upstream {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![HOST.to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, log) = (acceptor.clone(), log.clone());
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let log = log.clone();
                    async move {
                        let auth = req
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_owned())
                            .unwrap_or_default();
                        let encoding = req
                            .headers()
                            .get("accept-encoding")
                            .map(|v| v.to_str().unwrap().to_owned())
                            .unwrap_or_default();
                        let path = req.uri().path().to_owned();
                        log.lock()
                            .unwrap()
                            .push((auth.clone(), path.clone(), encoding));
                        let body: http_body_util::combinators::BoxBody<
                            Bytes,
                            std::convert::Infallible,
                        > = if path == "/sse" {
                            let (tx, rx) = tokio::sync::mpsc::channel::<
                                Result<Frame<Bytes>, std::convert::Infallible>,
                            >(2);
                            tokio::spawn(async move {
                                let _ =
                                    tx.send(Ok(Frame::data(Bytes::from("data: one\n\n")))).await;
                                tokio::time::sleep(Duration::from_millis(1500)).await;
                                let _ =
                                    tx.send(Ok(Frame::data(Bytes::from("data: two\n\n")))).await;
                            });
                            StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed()
                        } else if let Some(n) = path.strip_prefix("/bytes/") {
                            // `n` bytes of zeros, 256 KiB a frame.
                            let mut left: usize = n.parse().unwrap_or(0);
                            let chunk = Bytes::from(vec![0u8; 256 << 10]);
                            let frames = std::iter::from_fn(move || {
                                let k = left.min(chunk.len());
                                left -= k;
                                (k > 0).then(|| Ok(Frame::data(chunk.slice(..k))))
                            });
                            StreamBody::new(futures::stream::iter(frames)).boxed()
                        } else {
                            Full::new(Bytes::from(format!("invalid key: {auth}"))).boxed()
                        };
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .header("x-echo", auth)
                                .body(body)
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Upstream {
        port,
        seen,
        root: ca.der().clone(),
    }
}

pub struct Running {
    pub addr: SocketAddr,
    pub ca: CertificateDer<'static>,
    pub proxy: Arc<Proxy>,
    _stop: tokio_util::sync::DropGuard,
    _dir: tempfile::TempDir,
}

/// The proxy for a box whose secret goes to `HOST`, trusting `root` upstream.
pub async fn proxy(root: &CertificateDer<'static>, allow: &[&str]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let ca = BoxCa::create(dir.path(), "devbox").unwrap();
    let ca_der = {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap()
    };
    let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    let secrets = Secrets::new(vec![Secret {
        name: "API_KEY".into(),
        hosts: vec![HOST.into()],
        placeholder: TOKEN.into(),
        value: VALUE.into(),
    }])
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let aliases = HashMap::from([(HOST.to_owned(), "127.0.0.1".to_owned())]);
    let proxy = Arc::new(
        Proxy::new(
            "devbox",
            AllowList::parse(&allow).unwrap(),
            secrets,
            aliases,
        )
        .with_ca(Arc::new(ca))
        .trust_upstream(roots),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(proxy.clone().serve(listener, stop.clone()));
    Running {
        addr,
        ca: ca_der,
        proxy,
        _stop: stop.drop_guard(),
        _dir: dir,
    }
}

/// A `CONNECT` through the proxy: the head it answered, and the stream.
pub async fn try_connect(proxy: SocketAddr, target: &str) -> (String, TcpStream) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let _ = s.set_nodelay(true);
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0];
        let n = tokio::time::timeout(WAIT, s.read(&mut byte))
            .await
            .expect("an answer in time")
            .unwrap();
        assert_eq!(n, 1, "closed unanswered after {head:?}");
        head.push(byte[0]);
    }
    (String::from_utf8(head).unwrap(), s)
}

/// A `CONNECT` through the proxy, answered `200`.
pub async fn connect(proxy: SocketAddr, target: &str) -> TcpStream {
    let (head, s) = try_connect(proxy, target).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    s
}

/// The box's TLS through the tunnel: trusting `root` only, naming `sni`.
pub async fn tls(
    tcp: TcpStream,
    root: &CertificateDer<'static>,
    sni: &str,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

pub async fn get(
    tls: tokio_rustls::client::TlsStream<TcpStream>,
    path: &str,
    h2: bool,
) -> (Response<Incoming>, tokio::task::JoinHandle<()>) {
    let io = TokioIo::new(tls);
    let uri = format!("https://{HOST}{path}");
    let req = Request::builder()
        .uri(&uri)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept-encoding", "gzip")
        .body(Full::new(Bytes::new()))
        .unwrap();
    if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        (send.send_request(req).await.unwrap(), task)
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = req;
        *req.uri_mut() = path.parse().unwrap();
        req.headers_mut().insert("host", HOST.parse().unwrap());
        (send.send_request(req).await.unwrap(), task)
    }
}
