//! The proxy end to end: real sockets, a box's client on one side, echo
//! and mirror servers upstream.

use super::*;
use crate::policy::Secret;
use crate::reply::HEAD_LIMIT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);
const TOKEN: &str = "$API_TOKEN";
const VALUE: &str = "s3cr3t-value-that-is-longer";

struct Running {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn start(allow: &[&str], secrets: Vec<Secret>, limit: usize) -> Running {
    let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    let aliases = HashMap::from([("Host.Boxd.Internal.".to_owned(), "127.0.0.1".to_owned())]);
    let proxy = Proxy::new(
        "devbox",
        AllowList::parse(&allow).unwrap(),
        Secrets::new(secrets).unwrap(),
        aliases,
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(Arc::new(proxy).serve_limited(listener, shutdown.clone(), limit));
    Running {
        addr,
        shutdown,
        task,
    }
}

fn api_secret() -> Secret {
    Secret {
        name: "api".into(),
        hosts: vec!["127.0.0.1".into()],
        placeholder: TOKEN.into(),
        value: VALUE.into(),
    }
}

/// Sends `request` and reads the whole reply (the proxy always closes).
async fn roundtrip(proxy: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut reply = Vec::new();
    timeout(WAIT, s.read_to_end(&mut reply))
        .await
        .expect("a reply in time")
        .unwrap();
    String::from_utf8_lossy(&reply).into_owned()
}

/// Reads a response head, blank line included, and nothing more.
async fn read_reply_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0];
        let n = timeout(WAIT, s.read(&mut byte))
            .await
            .expect("a head in time")
            .unwrap();
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

async fn read_exactly(s: &mut TcpStream, n: usize) -> String {
    let mut buf = vec![0; n];
    timeout(WAIT, s.read_exact(&mut buf))
        .await
        .expect("bytes in time")
        .unwrap();
    String::from_utf8(buf).unwrap()
}

async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A tiny HTTP server answering each request with the bytes it received,
/// head and body (`Content-Length` or chunked).
async fn mirror_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0; 4096];
                let complete = |got: &[u8]| {
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                        return false;
                    };
                    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                    if let Some(at) = head.find("\r\ncontent-length: ") {
                        let n: usize = head[at + 18..]
                            .split("\r\n")
                            .next()
                            .unwrap()
                            .parse()
                            .unwrap();
                        return got.len() >= end + 4 + n;
                    }
                    // Chunked (good enough here): a last chunk, then the
                    // blank line that ends the trailers.
                    let body = &got[end + 4..];
                    !head.contains("chunked")
                        || (body.windows(5).any(|w| w == b"\r\n0\r\n")
                            && body.ends_with(b"\r\n\r\n"))
                };
                while !complete(&got) {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                // In hex: what the proxy relays back to the box has the
                // secret's value taken out (`redact`), this must not.
                let got = hex(&got);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    got.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(got.as_bytes()).await;
            });
        }
    });
    addr
}

/// The body of a reply, after its head.
fn body(reply: &str) -> &str {
    reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the mirror server received, from its reply through the proxy
/// (chunked when the proxy re-framed it).
fn mirrored(reply: &str) -> String {
    let (head, mut rest) = reply.split_once("\r\n\r\n").unwrap_or((reply, ""));
    let mut hexed = String::new();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            hexed.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
    } else {
        hexed.push_str(rest);
    }
    let bytes: Vec<u8> = (0..hexed.len() / 2)
        .map(|i| u8::from_str_radix(&hexed[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test]
async fn connect_tunnels_bytes_both_ways() {
    let echo = echo_server().await;
    let proxy = start(&["127.0.0.1"], vec![], MAX_CONNECTIONS).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    // Bytes sent right behind the head go through the tunnel too.
    let req = format!(
        "CONNECT 127.0.0.1:{} HTTP/1.1\r\nHost: x\r\n\r\nearly",
        echo.port()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    assert_eq!(
        read_reply_head(&mut s).await,
        "HTTP/1.1 200 Connection Established\r\n\r\n"
    );
    assert_eq!(read_exactly(&mut s, 5).await, "early");
    s.write_all(b"and later").await.unwrap();
    assert_eq!(read_exactly(&mut s, 9).await, "and later");
}

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_is_read() {
    let echo = echo_server().await;
    let proxy = start(&["127.0.0.1"], vec![], MAX_CONNECTIONS).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    // Bare LF line ends are taken too.
    let req = format!("CONNECT 127.0.0.1:{} HTTP/1.1\nHost: x\r\n\n", echo.port());
    for byte in req.bytes() {
        s.write_all(&[byte]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(read_reply_head(&mut s).await.starts_with("HTTP/1.1 200 "));
}

#[tokio::test]
async fn connect_to_an_alias_reaches_its_target() {
    let echo = echo_server().await;
    let proxy = start(&["host.boxd.internal"], vec![], MAX_CONNECTIONS).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    let req = format!(
        "CONNECT HOST.boxd.internal:{} HTTP/1.1\r\n\r\n",
        echo.port()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    assert!(read_reply_head(&mut s).await.starts_with("HTTP/1.1 200 "));
    s.write_all(b"ping").await.unwrap();
    assert_eq!(read_exactly(&mut s, 4).await, "ping");
}

#[tokio::test]
async fn an_unlisted_host_is_refused_and_never_connected() {
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = target.local_addr().unwrap().port();
    let proxy = start(
        &["example.com", "*.github.com", "10.0.0.0/8"],
        vec![],
        MAX_CONNECTIONS,
    )
    .await;
    let reply = roundtrip(
        proxy.addr,
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
    for header in [
        "\r\nX-Boxd-Egress: refused\r\n",
        "\r\nContent-Type: text/plain\r\n",
        "\r\nConnection: close\r\n",
    ] {
        assert!(reply.contains(header), "{header:?} in {reply}");
    }
    assert_eq!(
        body(&reply),
        "boxd: 127.0.0.1 is not in the allow-net list of box devbox; \
         allowed: example.com, *.github.com, 10.0.0.0/8\n"
    );
    let reply = roundtrip(
        proxy.addr,
        b"GET http://api.github.com.evil.org/ HTTP/1.1\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
    assert!(
        body(&reply).starts_with("boxd: api.github.com.evil.org is not"),
        "{reply}"
    );
    assert!(
        timeout(Duration::from_millis(200), target.accept())
            .await
            .is_err(),
        "the refused host was connected"
    );
}

#[tokio::test]
async fn plain_http_goes_out_in_origin_form_with_secrets_substituted() {
    let mirror = mirror_server().await;
    let port = mirror.port();
    let proxy = start(&["127.0.0.1"], vec![api_secret()], MAX_CONNECTIONS).await;
    let sent_body = format!("token={TOKEN}&again={TOKEN}");
    let req = format!(
        "POST http://127.0.0.1:{port}/v1/x?key={TOKEN}#frag HTTP/1.1\r\n\
         Host: evil.example\r\n\
         Authorization: Bearer {TOKEN}\r\n\
         Proxy-Authorization: Basic Ym94ZA==\r\n\
         Proxy-Connection: keep-alive\r\n\
         Connection: keep-alive, X-Hop\r\n\
         X-Hop: 1\r\n\
         Keep-Alive: timeout=5\r\n\
         Content-Length: {}\r\n\
         \r\n{sent_body}",
        sent_body.len()
    );
    let reply = roundtrip(proxy.addr, req.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    let got = mirrored(&reply);
    let want_body = format!("token={VALUE}&again={VALUE}");
    let want = format!(
        "POST /v1/x?key={VALUE} HTTP/1.1\r\n\
         Host: 127.0.0.1:{port}\r\n\
         Authorization: Bearer {VALUE}\r\n\
         Content-Length: {}\r\n\
         Accept-Encoding: identity\r\n\
         Connection: close\r\n\
         \r\n{want_body}",
        want_body.len()
    );
    assert_eq!(got, want);
}

#[tokio::test]
async fn a_placeholder_for_a_host_the_secret_is_not_for_is_refused() {
    let mirror = mirror_server().await;
    let port = mirror.port();
    // Allowed, and the alias reaches the same server, but the secret is
    // for 127.0.0.1 only.
    let proxy = start(
        &["127.0.0.1", "host.boxd.internal"],
        vec![api_secret()],
        MAX_CONNECTIONS,
    )
    .await;
    for (target, header, sent) in [
        (format!("?q={TOKEN}"), "", ""),
        (String::new(), "Authorization: Bearer $API_TOKEN\r\n", ""),
    ] {
        let req = format!(
            "PUT http://host.boxd.internal:{port}/{target} HTTP/1.0\r\n{header}\
             Content-Length: {}\r\n\r\n{sent}",
            sent.len()
        );
        let reply = roundtrip(proxy.addr, req.as_bytes()).await;
        assert!(reply.starts_with("HTTP/1.0 403 "), "{reply}");
        assert!(
            body(&reply)
                .contains("carries the placeholder of secret api, which goes only to 127.0.0.1"),
            "{reply}"
        );
        assert!(!reply.contains(VALUE));
    }
    // Without one it goes through as it is.
    let req = format!("GET http://host.boxd.internal:{port}/ok HTTP/1.0\r\n\r\n");
    let reply = roundtrip(proxy.addr, req.as_bytes()).await;
    assert!(
        mirrored(&reply).starts_with("GET /ok HTTP/1.1\r\n"),
        "{reply}"
    );
}

#[tokio::test]
async fn expect_continue_is_answered_when_the_body_is_read_whole() {
    let mirror = mirror_server().await;
    let proxy = start(&["127.0.0.1"], vec![api_secret()], MAX_CONNECTIONS).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    let req = format!(
        "POST http://127.0.0.1:{}/ HTTP/1.1\r\n\
         Expect: 100-continue\r\nContent-Length: 10\r\n\r\n",
        mirror.port()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    assert_eq!(
        read_reply_head(&mut s).await,
        "HTTP/1.1 100 Continue\r\n\r\n"
    );
    s.write_all(TOKEN.as_bytes()).await.unwrap();
    let mut reply = String::new();
    timeout(WAIT, s.read_to_string(&mut reply))
        .await
        .unwrap()
        .unwrap();
    let got = mirrored(&reply);
    assert!(!got.contains("Expect"), "{got}");
    assert!(
        got.ends_with(&format!(
            "Content-Length: {}\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n{VALUE}",
            VALUE.len()
        )),
        "{got}"
    );
}

#[tokio::test]
async fn a_chunked_body_is_streamed_through_unchanged() {
    let mirror = mirror_server().await;
    let proxy = start(&["127.0.0.1"], vec![api_secret()], MAX_CONNECTIONS).await;
    let chunks = format!(
        "{:x};ext=1\r\n{TOKEN}\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n",
        TOKEN.len()
    );
    let req = format!(
        "POST http://127.0.0.1:{}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\
         Trailer: X-Trailer\r\n\r\n{chunks}",
        mirror.port()
    );
    let reply = roundtrip(proxy.addr, req.as_bytes()).await;
    let got = mirrored(&reply);
    // The same chunks, data and trailer unchanged (placeholder included),
    // framed anew: the chunk extension is the box's connection's only.
    let rechunked = format!(
        "{:X}\r\n{TOKEN}\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n",
        TOKEN.len()
    );
    assert!(
        got.ends_with(&format!(
            "Transfer-Encoding: chunked\r\nTrailer: X-Trailer\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n{rechunked}"
        )),
        "{got}"
    );
    assert!(!got.contains("Content-Length"), "{got}");
}

#[tokio::test]
async fn a_content_length_beside_chunked_never_goes_upstream() {
    // RFC 9112 §6.3: Transfer-Encoding wins, and an intermediary removes
    // the Content-Length before forwarding: one framing upstream.
    let mirror = mirror_server().await;
    let proxy = start(&["127.0.0.1"], vec![], MAX_CONNECTIONS).await;
    let req = format!(
        "POST http://127.0.0.1:{}/ HTTP/1.1\r\nContent-Length: 100\r\n\
         Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        mirror.port()
    );
    let reply = roundtrip(proxy.addr, req.as_bytes()).await;
    let got = mirrored(&reply);
    assert!(
        got.ends_with(
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        ),
        "{got}"
    );
    assert!(!got.contains("Content-Length"), "{got}");
}

#[tokio::test]
async fn an_oversized_head_gets_431() {
    let proxy = start(&["127.0.0.1"], vec![], MAX_CONNECTIONS).await;
    let mut req = b"GET http://127.0.0.1/ HTTP/1.1\r\nX-Pad: ".to_vec();
    req.resize(HEAD_LIMIT + 10_000, b'a');
    let reply = roundtrip(proxy.addr, &req).await;
    assert!(
        reply.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{reply}"
    );
    let mut many = b"GET http://127.0.0.1/ HTTP/1.1\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let reply = roundtrip(proxy.addr, &many).await;
    assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
}

#[tokio::test]
async fn malformed_requests_get_400() {
    let proxy = start(&["127.0.0.1", "example.com"], vec![], MAX_CONNECTIONS).await;
    for (req, says) in [
        (
            &b"\x00\x01\x02 garbage\r\n\r\n"[..],
            "malformed request head",
        ),
        (
            b"GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n",
            "names no host",
        ),
        (
            b"GET ftp://example.com/f HTTP/1.1\r\n\r\n",
            "ftp:// is not proxied",
        ),
        (
            b"GET https://example.com/ HTTP/1.1\r\n\r\n",
            "https through CONNECT",
        ),
        (b"GET example.com HTTP/1.1\r\n\r\n", "is not a URL"),
        (
            b"GET http://u:p@example.com/ HTTP/1.1\r\n\r\n",
            "user names and passwords",
        ),
        (
            b"GET http://example.com:0/ HTTP/1.1\r\n\r\n",
            "bad host or port",
        ),
        (
            b"GET http://example.com:+80/ HTTP/1.1\r\n\r\n",
            "bad host or port",
        ),
        (
            b"CONNECT example.com HTTP/1.1\r\n\r\n",
            "CONNECT needs host:port",
        ),
        (
            // Not even a URI: hyper refuses the head.
            b"CONNECT ::1:443 HTTP/1.1\r\n\r\n",
            "malformed request head: invalid URI",
        ),
        (
            b"POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "must end in chunked",
        ),
        (
            b"POST http://example.com/ HTTP/1.1\r\n\
              Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "conflicting Content-Length",
        ),
        (
            b"GET http://example.com/ HTTP/1.1\r\nX: y",
            "ended inside the request head",
        ),
    ] {
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(req).await.unwrap();
        s.shutdown().await.unwrap();
        let mut reply = String::new();
        timeout(WAIT, s.read_to_string(&mut reply))
            .await
            .unwrap()
            .unwrap();
        assert!(
            reply.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{req:?}: {reply}"
        );
        assert!(reply.contains("\r\nX-Boxd-Egress: error\r\n"), "{reply}");
        assert!(body(&reply).contains(says), "{says:?} in {reply}");
    }
}

#[tokio::test]
async fn upstream_failures_get_502_with_the_reason() {
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = start(
        &["127.0.0.1", "nonexistent.invalid"],
        vec![],
        MAX_CONNECTIONS,
    )
    .await;
    let reply = roundtrip(
        proxy.addr,
        b"CONNECT nonexistent.invalid:443 HTTP/1.1\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{reply}");
    assert!(
        body(&reply).starts_with(
            "boxd: cannot reach nonexistent.invalid port 443: the name does not resolve"
        ),
        "{reply}"
    );
    let reply = roundtrip(
        proxy.addr,
        b"GET http://nonexistent.invalid/ HTTP/1.1\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 502 "), "{reply}");
    let req = format!("GET http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n", closed.port());
    let reply = roundtrip(proxy.addr, req.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 502 "), "{reply}");
    assert!(
        body(&reply).contains(&format!("{closed} refused the connection")),
        "{reply}"
    );
}

#[tokio::test]
async fn a_connection_beyond_the_limit_is_a_503_naming_it() {
    let echo = echo_server().await;
    let proxy = start(&["127.0.0.1"], vec![], 1).await;
    let req = format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port());
    let mut first = TcpStream::connect(proxy.addr).await.unwrap();
    first.write_all(req.as_bytes()).await.unwrap();
    read_reply_head(&mut first).await;
    let reply = roundtrip(proxy.addr, req.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 503 "), "{reply}");
    assert!(
        body(&reply).contains("box devbox has 1 connections open through its egress proxy"),
        "{reply}"
    );
    // The tunnel that holds the slot is untouched, and once it closes
    // the slot serves again.
    first.write_all(b"ping").await.unwrap();
    let mut echoed = [0; 4];
    timeout(WAIT, first.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&echoed, b"ping");
    drop(first);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut next = TcpStream::connect(proxy.addr).await.unwrap();
        next.write_all(req.as_bytes()).await.unwrap();
        let head = read_reply_head(&mut next).await;
        if head.starts_with("HTTP/1.1 200 ") {
            break;
        }
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn shutdown_closes_every_connection() {
    let echo = echo_server().await;
    let proxy = start(&["127.0.0.1"], vec![], MAX_CONNECTIONS).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    let req = format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port());
    s.write_all(req.as_bytes()).await.unwrap();
    read_reply_head(&mut s).await;
    proxy.shutdown.cancel();
    timeout(WAIT, proxy.task)
        .await
        .expect("serve returns")
        .unwrap();
    let mut rest = Vec::new();
    let read = timeout(WAIT, s.read_to_end(&mut rest))
        .await
        .expect("the tunnel is closed");
    assert!(read.is_err() || rest.is_empty());
    assert!(
        TcpStream::connect(proxy.addr).await.is_err(),
        "still listening"
    );
}

#[tokio::test]
async fn a_client_that_closes_its_sending_side_still_gets_the_answer() {
    // As `printf ... | nc` does: the request, then EOF, then the answer.
    let mirror = mirror_server().await;
    let proxy = start(&["127.0.0.1"], vec![], MAX_CONNECTIONS).await;
    let get = format!("GET http://127.0.0.1:{}/x HTTP/1.1\r\n\r\n", mirror.port());
    for (request, answer) in [
        (get.as_bytes(), "HTTP/1.1 200 OK\r\n"),
        (b"CONNECT example.com:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 403 "),
    ] {
        for _ in 0..10 {
            let mut s = TcpStream::connect(proxy.addr).await.unwrap();
            s.write_all(request).await.unwrap();
            s.shutdown().await.unwrap();
            let mut reply = String::new();
            timeout(WAIT, s.read_to_string(&mut reply))
                .await
                .unwrap()
                .unwrap();
            assert!(reply.starts_with(answer), "{reply:?}");
        }
    }
}
