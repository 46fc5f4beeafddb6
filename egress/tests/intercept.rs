//! HTTPS interception end to end on loopback: a box's client (rustls,
//! trusting only the box's CA) through the proxy to a real TLS upstream
//! whose certificate comes from a test CA given to the proxy as its
//! upstream trust.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use boxd_egress::ca::BoxCa;
use boxd_egress::{AllowList, Proxy, Secret, Secrets, Why};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const HOST: &str = "api.boxd.test";
const TOKEN: &str = "BOXD_SECRET_PLACEHOLDER_API_KEY";
const VALUE: &str = "sk-test-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(10);

/// What the upstream saw: each request's `authorization` and path.
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

struct Upstream {
    port: u16,
    seen: Seen,
    /// The CA that signed its certificate.
    root: CertificateDer<'static>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS server for `HOST` (HTTP/2 and HTTP/1.1): `/echo` answers with the
/// authorization it got, `/sse` with two events a moment apart.
async fn upstream() -> Upstream {
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

struct Running {
    addr: SocketAddr,
    ca: CertificateDer<'static>,
    proxy: Arc<Proxy>,
    _stop: tokio_util::sync::DropGuard,
    _dir: tempfile::TempDir,
}

/// The proxy for a box whose secret goes to `HOST`, trusting `root` upstream.
async fn proxy(root: &CertificateDer<'static>, allow: &[&str]) -> Running {
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

/// A `CONNECT` through the proxy, answered `200`.
async fn connect(proxy: SocketAddr, target: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0];
        tokio::time::timeout(WAIT, s.read_exact(&mut byte))
            .await
            .unwrap()
            .unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    s
}

/// The box's TLS through the tunnel: trusting `root` only, naming `sni`.
async fn tls(
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

async fn get(
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

#[tokio::test]
async fn the_upstream_gets_the_value_and_the_box_only_the_placeholder() {
    let up = upstream().await;
    let p = proxy(&up.root, &[HOST]).await;
    for (alpn, h2) in [(&[&b"h2"[..]][..], true), (&[&b"http/1.1"[..]][..], false)] {
        let tcp = connect(p.addr, &format!("{HOST}:{}", up.port)).await;
        let tls = tls(tcp, &p.ca, HOST, alpn)
            .await
            .expect("the box's CA answers");
        assert_eq!(tls.get_ref().1.alpn_protocol() == Some(b"h2"), h2);
        let (response, _conn) = get(tls, "/echo", h2).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-echo"], format!("Bearer {TOKEN}"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, format!("invalid key: Bearer {TOKEN}"), "redacted");
        let seen = up.seen.lock().unwrap().pop().unwrap();
        assert_eq!(
            seen.0,
            format!("Bearer {VALUE}"),
            "the upstream got the value"
        );
        assert_eq!(seen.2, "identity", "an uncompressed answer was asked for");
    }
}

#[tokio::test]
async fn the_first_event_arrives_before_the_body_ends() {
    let up = upstream().await;
    let p = proxy(&up.root, &[HOST]).await;
    let tcp = connect(p.addr, &format!("{HOST}:{}", up.port)).await;
    let tls = tls(tcp, &p.ca, HOST, &[b"h2"]).await.unwrap();
    let (response, _conn) = get(tls, "/sse", true).await;
    let mut body = response.into_body();
    let started = std::time::Instant::now();
    let first = tokio::time::timeout(WAIT, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "data: one\n\n");
    // The second comes 1.5 s after the first: the first was not held for it.
    assert!(started.elapsed() < Duration::from_millis(1400));
    let second = tokio::time::timeout(WAIT, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.into_data().unwrap(), "data: two\n\n");
}

#[tokio::test]
async fn a_hello_for_another_host_or_none_is_refused_with_an_alert() {
    let up = upstream().await;
    let p = proxy(&up.root, &[HOST, "*.test"]).await;
    let mut refusals = p.proxy.refusals();
    let tcp = connect(p.addr, &format!("{HOST}:{}", up.port)).await;
    let err = tls(tcp, &p.ca, "other.test", &[b"h2"]).await.unwrap_err();
    assert!(err.to_string().contains("AccessDenied"), "{err}");
    let refusal = tokio::time::timeout(WAIT, refusals.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        refusal.why,
        Why::Sni {
            sent: Some("other.test".into())
        }
    );
    // Garbage instead of TLS: an event, nothing upstream.
    let mut tcp = connect(p.addr, &format!("{HOST}:{}", up.port)).await;
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(WAIT, tcp.read_to_end(&mut rest))
        .await
        .unwrap();
    let refusal = tokio::time::timeout(WAIT, refusals.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(refusal.why, Why::NotTls);
    assert!(up.seen.lock().unwrap().is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn an_upstream_that_does_not_verify_is_a_502_never_a_connection() {
    let up = upstream().await;
    let other = upstream().await; // another CA: the proxy trusts that one only
    let p = proxy(&other.root, &[HOST]).await;
    let mut refusals = p.proxy.refusals();
    let tcp = connect(p.addr, &format!("{HOST}:{}", up.port)).await;
    let tls = tls(tcp, &p.ca, HOST, &[b"http/1.1"]).await.unwrap();
    let (response, _conn) = get(tls, "/echo", false).await;
    assert_eq!(response.status(), 502);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains(HOST) && body.contains("does not verify"),
        "{body}"
    );
    let refusal = tokio::time::timeout(WAIT, refusals.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(refusal.why, Why::Upstream { .. }), "{refusal:?}");
    assert!(up.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_host_no_secret_names_is_a_blind_tunnel() {
    let up = upstream().await;
    // No secret for 127.0.0.1: the box sees the upstream's own certificate.
    let p = proxy(&up.root, &["127.0.0.1"]).await;
    let tcp = connect(p.addr, &format!("127.0.0.1:{}", up.port)).await;
    // The box's CA does not verify it ...
    assert!(tls(tcp, &p.ca, HOST, &[b"h2"]).await.is_err());
    // ... the upstream's own does.
    let tcp = connect(p.addr, &format!("127.0.0.1:{}", up.port)).await;
    let tls = tls(tcp, &up.root, HOST, &[b"h2"]).await.unwrap();
    let (response, _conn) = get(tls, "/echo", true).await;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, format!("invalid key: Bearer {TOKEN}"), "untouched");
}

/// Raw bytes inside an intercepted HTTP/1.1 tunnel, and what comes back
/// until the proxy closes or goes quiet.
async fn raw_inside(p: &Running, port: u16, request: &[u8]) -> String {
    let tcp = connect(p.addr, &format!("{HOST}:{port}")).await;
    let mut tls = tls(tcp, &p.ca, HOST, &[b"http/1.1"]).await.unwrap();
    let _ = tls.write_all(request).await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), tls.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn smuggling_and_huge_heads_inside_a_tunnel_are_refused() {
    let up = upstream().await;
    let p = proxy(&up.root, &[HOST]).await;
    // Content-Length beside Transfer-Encoding, one framing hiding a second
    // request: chunked wins (RFC 9112 §6.3), the request is framed anew
    // upstream, and the connection closes after it: what hid behind it is
    // never a request.
    let smuggle = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let reply = raw_inside(&p, up.port, smuggle).await;
    assert!(reply.contains("Connection: close"), "{reply}");
    assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "{reply}");
    // Two Content-Lengths that differ.
    let twice =
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc";
    let reply = raw_inside(&p, up.port, twice).await;
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
    // A head of 1 MiB.
    let mut huge = b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 1 << 20));
    huge.extend_from_slice(b"\r\n\r\n");
    let reply = raw_inside(&p, up.port, &huge).await;
    assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
    let seen = up.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|(_, path, _)| path != "/smuggled"),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 1, "the POST only: {seen:?}");
    // The proxy still serves.
    let tcp = connect(p.addr, &format!("{HOST}:{}", up.port)).await;
    let tls = tls(tcp, &p.ca, HOST, &[b"h2"]).await.unwrap();
    let (response, _conn) = get(tls, "/echo", true).await;
    assert_eq!(response.status(), 200);
}
