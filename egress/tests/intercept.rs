//! HTTPS interception end to end on loopback: a box's client (rustls,
//! trusting only the box's CA) through the proxy to a real TLS upstream
//! whose certificate comes from a test CA given to the proxy as its
//! upstream trust.

mod support;

use std::time::Duration;

use boxd_egress::Why;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::*;

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
