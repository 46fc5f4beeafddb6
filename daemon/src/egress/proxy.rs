//! The proxy: one listener inside a box, connections out from the host.
//!
//! Each accepted connection carries exactly one request (a CONNECT tunnel or
//! one plain HTTP request) and is closed after it: no keep-alive, so there is
//! no second request whose framing could disagree with the upstream's.
//!
//! **Invariants:** nothing is connected before the host passed the
//! allow-list; a plain request reaches its upstream in origin-form, with
//! `Host` set from its target (RFC 9112 §3.2.2: the box's `Host` header is
//! ignored, so a shared front end cannot route a substituted secret to
//! another site), without proxy and hop-by-hop headers and with
//! `Connection: close`; placeholders are substituted only for secrets whose
//! hosts match the target; neither header values nor secret values are ever
//! logged; at most [`MAX_CONNECTIONS`] connections are served at once (more
//! wait in the listen backlog); when [`Proxy::serve`] returns, every
//! connection it accepted is closed.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::policy::{AllowList, Secrets};
use super::traffic::{Traffic, Upstream};

/// Connections served at once by one proxy.
pub const MAX_CONNECTIONS: usize = 256;
/// The request head (request line and headers) may not be longer.
const HEAD_LIMIT: usize = 64 * 1024;
/// Buffer per direction for relayed bytes: tokio's 8 KiB default holds a
/// download on loopback to about a tenth of a direct one.
const COPY_BUFFER: usize = 256 * 1024;
/// Header fields in a head; more is answered like an overlong head.
const MAX_HEADERS: usize = 256;
/// The whole head must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Resolving a host, and connecting to each of its addresses, each within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A `Content-Length` body up to this size is read whole to substitute
/// secrets in it; a larger one is streamed unchanged.
const BODY_LIMIT: u64 = 16 * 1024 * 1024;
/// Bytes of such bodies one proxy holds at once; a body that would exceed
/// it waits (so a box cannot make the daemon hold 256 × 16 MiB).
const BODY_BUDGET: u32 = 64 * 1024 * 1024;
/// A chunk-size line or a trailer line may not be longer.
const CHUNK_LINE_LIMIT: u64 = 4096;
/// All trailer lines together may not be longer.
const TRAILER_LIMIT: usize = 64 * 1024;

/// Headers that concern one connection only, never forwarded (`Host` and
/// `Content-Length` are written by the proxy itself).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// One box's egress proxy.
pub struct Proxy {
    allow: AllowList,
    secrets: Secrets,
    /// Host name (normalized) → the host the proxy connects to instead.
    aliases: HashMap<String, String>,
    box_name: String,
    /// [`BODY_BUDGET`], one permit per buffered body byte.
    bodies: Semaphore,
    /// Bytes to and from upstreams.
    traffic: Arc<Traffic>,
}

impl Proxy {
    /// `aliases` maps a name the box uses (`host.boxd.internal`) to the host
    /// connected to (`127.0.0.1`); the allow-list and the secrets see the
    /// name the box used, so an alias must be allowed like any other name.
    pub fn new(
        box_name: impl Into<String>,
        allow: AllowList,
        secrets: Secrets,
        aliases: HashMap<String, String>,
    ) -> Proxy {
        let aliases = aliases
            .into_iter()
            .map(|(name, to)| (alias_key(&name), to))
            .collect();
        Proxy {
            allow,
            secrets,
            aliases,
            box_name: box_name.into(),
            bodies: Semaphore::new(BODY_BUDGET as usize),
            traffic: Arc::default(),
        }
    }

    /// The bytes this proxy moved to and from the network.
    pub fn traffic(&self) -> Arc<Traffic> {
        self.traffic.clone()
    }

    /// Serves `listener` until `shutdown` is cancelled, then closes every
    /// connection it accepted and returns.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        self.serve_limited(listener, shutdown, MAX_CONNECTIONS)
            .await
    }

    async fn serve_limited(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: CancellationToken,
        limit: usize,
    ) {
        let permits = Arc::new(Semaphore::new(limit));
        let mut tasks = JoinSet::new();
        loop {
            while tasks.try_join_next().is_some() {}
            let next = async {
                let permit = permits.clone().acquire_owned().await;
                (permit, listener.accept().await)
            };
            let (permit, accepted) = tokio::select! {
                _ = shutdown.cancelled() => break,
                next = next => next,
            };
            let Ok(permit) = permit else { break };
            match accepted {
                Ok((stream, peer)) => {
                    let proxy = self.clone();
                    tasks.spawn(async move {
                        let _permit = permit;
                        proxy.handle(stream, peer).await;
                    });
                }
                Err(e) => {
                    // Out of descriptors, mostly: back off rather than spin.
                    warn!(box_name = %self.box_name, "egress proxy cannot accept: {e}");
                    drop(permit);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tasks.shutdown().await;
        debug!(box_name = %self.box_name, "egress proxy stopped");
    }

    async fn handle(&self, mut client: TcpStream, peer: SocketAddr) {
        let _ = client.set_nodelay(true);
        let head = match timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
            Err(_) => {
                debug!(box_name = %self.box_name, %peer, "no request head within 30 s; closing");
                return;
            }
            Ok(Ok(Some(head))) => head,
            Ok(Ok(None)) => return,
            Ok(Err(reply)) => return reply.send(&mut client).await,
        };
        let outcome = if head.method == "CONNECT" {
            self.tunnel(&mut client, head).await
        } else {
            self.forward(&mut client, head).await
        };
        if let Err(reply) = outcome {
            reply.send(&mut client).await;
        }
    }

    /// `CONNECT host:port`: a byte tunnel once the host is allowed and reached.
    async fn tunnel(&self, client: &mut TcpStream, head: Head) -> Result<(), Reply> {
        let (host, port) = split_authority(&head.target, None).ok_or_else(|| {
            Reply::bad_request(format!(
                "CONNECT needs host:port, as in CONNECT example.com:443 (got {:?})",
                head.target
            ))
        })?;
        self.check(host, port, "CONNECT")?;
        let mut upstream = self.connect(host, port).await?;
        let opened = async {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await?;
            upstream.write_all(&head.rest).await?;
            tokio::io::copy_bidirectional_with_sizes(
                client,
                &mut *upstream,
                COPY_BUFFER,
                COPY_BUFFER,
            )
            .await
        };
        if let Err(e) = opened.await {
            debug!(box_name = %self.box_name, host, port, "tunnel ended: {e}");
        }
        Ok(())
    }

    /// An absolute-form plain HTTP request: rewritten, secrets substituted,
    /// sent, and the response streamed back until the upstream closes.
    async fn forward(&self, client: &mut TcpStream, head: Head) -> Result<(), Reply> {
        let target = Target::parse(&head.method, &head.target)?;
        let host = target.host.as_str();
        self.check(host, target.port, &head.method)?;
        let framing = Framing::of(&head.headers)?;
        let mut upstream = self.connect(host, target.port).await?;

        let substitutes = self.secrets.for_host(host).next().is_some();
        let mut budget = None;
        let (body, stream) = match framing {
            Framing::Length(n) if substitutes && n <= BODY_LIMIT => {
                // n <= BODY_LIMIT < BODY_BUDGET: fits a u32 and never waits forever.
                budget = self.bodies.acquire_many(n as u32).await.ok();
                if wants_continue(&head.headers) {
                    // The Expect header is dropped below: the proxy answers it.
                    let _ = client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
                }
                let body = read_body(client, &head.rest, n).await.map_err(|_| {
                    Reply::bad_request("the request body ended before its Content-Length".into())
                })?;
                let body = self.secrets.substitute(host, &body).into_owned();
                (Some(body), Stream::Nothing)
            }
            Framing::Length(n) => (None, Stream::Length(n)),
            Framing::Chunked => (None, Stream::Chunked),
            Framing::None => (None, Stream::Nothing),
        };
        let length = match framing {
            Framing::Length(n) => Some(body.as_ref().map_or(n, |b| b.len() as u64)),
            _ => None,
        };
        let request = self.request_head(&head, &target, length, body.is_some());
        let sent = async {
            upstream.write_all(&request).await?;
            upstream
                .write_all(body.as_deref().unwrap_or_default())
                .await
        };
        sent.await.map_err(|e| {
            Reply::bad_gateway(format!(
                "{host} port {} closed the connection: {e}",
                target.port
            ))
        })?;
        drop((body, budget));
        if let Err(e) = exchange(client, &mut upstream, &head.rest, stream).await {
            debug!(box_name = %self.box_name, host, port = target.port, "request ended: {e}");
        }
        Ok(())
    }

    /// The allow-list decision, logged; a refusal says how to fix it.
    fn check(&self, host: &str, port: u16, method: &str) -> Result<(), Reply> {
        if self.allow.allows(host) {
            debug!(box_name = %self.box_name, host, port, method, "egress allowed");
            return Ok(());
        }
        info!(box_name = %self.box_name, host, port, method, "egress refused");
        Err(Reply {
            status: 403,
            reason: "Forbidden",
            refused: true,
            body: format!(
                "boxd: {host} is not in the allow-net list of box {}; allowed: {}\n",
                self.box_name, self.allow
            ),
        })
    }

    /// Resolves `host` here, on the host side (after its alias), and
    /// connects to the first address that answers.
    async fn connect(&self, host: &str, port: u16) -> Result<Upstream, Reply> {
        let bare = unbracket(host);
        let (dial, shown) = match self.aliases.get(&alias_key(bare)) {
            Some(to) => (unbracket(to), format!("{host} ({to})")),
            None => (bare, host.to_owned()),
        };
        let gateway =
            |why: String| Reply::bad_gateway(format!("cannot reach {shown} port {port}: {why}"));
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

    /// The head sent upstream: origin-form request line, `Host` from the
    /// target, the box's headers minus proxy, hop-by-hop and framing ones
    /// (values substituted), then `Content-Length` and `Connection: close`.
    fn request_head(
        &self,
        head: &Head,
        target: &Target,
        content_length: Option<u64>,
        drop_expect: bool,
    ) -> Vec<u8> {
        let sub = |bytes: &[u8]| self.secrets.substitute(&target.host, bytes).into_owned();
        // Headers the Connection header names are hop-by-hop too, except
        // the ones that frame the request.
        let named: Vec<String> = head
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("connection"))
            .flat_map(|(_, value)| value.split(|&b| b == b','))
            .map(|token| String::from_utf8_lossy(token.trim_ascii()).to_ascii_lowercase())
            .filter(|token| {
                !matches!(
                    token.as_str(),
                    "host" | "content-length" | "transfer-encoding"
                )
            })
            .collect();
        let mut out = Vec::with_capacity(HEAD_LIMIT.min(head.size + 128));
        out.extend_from_slice(head.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(&sub(target.path.as_bytes()));
        out.extend_from_slice(format!(" HTTP/1.{}\r\n", head.version).as_bytes());
        out.extend_from_slice(format!("Host: {}\r\n", target.authority).as_bytes());
        for (name, value) in &head.headers {
            let lower = name.to_ascii_lowercase();
            if HOP_BY_HOP.contains(&lower.as_str())
                || matches!(lower.as_str(), "host" | "content-length")
                || (drop_expect && lower == "expect")
                || named.contains(&lower)
            {
                continue;
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(&sub(value));
            out.extend_from_slice(b"\r\n");
        }
        if let Some(n) = content_length {
            out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        out
    }
}

/// Alias keys are matched like allow-list names: case-insensitive, a
/// trailing dot ignored.
fn alias_key(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// A parsed request head, owned, and the bytes read past it.
struct Head {
    method: String,
    target: String,
    /// The minor version: HTTP/1.0 or HTTP/1.1.
    version: u8,
    headers: Vec<(String, Vec<u8>)>,
    /// The head's length in bytes.
    size: usize,
    /// What the client sent after the head (body or tunnel bytes).
    rest: Vec<u8>,
}

/// Reads one request head: `None` when the client closed (or failed) first,
/// an error reply when it is malformed or too long. The head ends at a blank
/// line (httparse also takes bare LF line ends).
async fn read_head(client: &mut TcpStream) -> Result<Option<Head>, Reply> {
    let mut buf = Vec::with_capacity(8 * 1024);
    loop {
        if buf.len() >= HEAD_LIMIT {
            return Err(Reply::head_too_large());
        }
        let start = buf.len();
        buf.resize(HEAD_LIMIT.min(start + 16 * 1024), 0);
        let n = match client.read(&mut buf[start..]).await {
            Ok(n) => n,
            Err(_) => return Ok(None),
        };
        buf.truncate(start + n);
        if n == 0 {
            return match buf.is_empty() {
                true => Ok(None),
                false => Err(Reply::bad_request(
                    "the connection ended inside the request head".into(),
                )),
            };
        }
        // Parse the first bytes (garbage is answered at once), then only when
        // the new bytes may end the head: re-parsing after every read would
        // make a client sending a byte at a time cost quadratic time.
        let new = &buf[start.saturating_sub(2)..];
        let may_end =
            new.windows(2).any(|w| w == b"\n\n") || new.windows(3).any(|w| w == b"\n\r\n");
        if (start == 0 || may_end)
            && let Some(head) = parse_head(&buf)?
        {
            return Ok(Some(head));
        }
    }
}

fn parse_head(buf: &[u8]) -> Result<Option<Head>, Reply> {
    let mut headers = vec![httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(size)) => Ok(Some(Head {
            method: req.method.unwrap_or_default().to_owned(),
            target: req.path.unwrap_or_default().to_owned(),
            version: req.version.unwrap_or(1),
            headers: req
                .headers
                .iter()
                .map(|h| (h.name.to_owned(), h.value.to_owned()))
                .collect(),
            size,
            rest: buf[size..].to_vec(),
        })),
        Err(httparse::Error::TooManyHeaders) => Err(Reply::head_too_large()),
        Err(e) => Err(Reply::bad_request(format!("malformed request head: {e}"))),
    }
}

/// Where a plain request goes, from its absolute-form target.
#[derive(Debug)]
struct Target {
    /// As written (IPv6 in brackets), for the allow-list and the secrets.
    host: String,
    port: u16,
    /// `host[:port]` as written: the upstream's `Host` header.
    authority: String,
    /// Origin-form: path and query, never empty, no fragment.
    path: String,
}

impl Target {
    fn parse(method: &str, target: &str) -> Result<Target, Reply> {
        if target.starts_with('/') || target == "*" {
            return Err(Reply::bad_request(format!(
                "{method} {target} names no host: send the full URL through this proxy \
                 (http://host/path), or CONNECT host:443 for https"
            )));
        }
        let Some((scheme, rest)) = target.split_once("://") else {
            return Err(Reply::bad_request(format!(
                "{target:?} is not a URL; a proxied request names http://host/path"
            )));
        };
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(Reply::bad_request(format!(
                "{scheme}:// is not proxied: plain http:// requests go through as they are, \
                 https through CONNECT"
            )));
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return Err(Reply::bad_request(
                "user names and passwords in the URL are not supported".into(),
            ));
        }
        let (host, port) = split_authority(authority, Some(80))
            .ok_or_else(|| Reply::bad_request(format!("bad host or port in {target:?}")))?;
        let tail = tail.split('#').next().unwrap_or_default();
        let path = match tail.as_bytes().first() {
            None => "/".to_owned(),
            Some(b'?') => format!("/{tail}"),
            Some(_) => tail.to_owned(),
        };
        Ok(Target {
            host: host.to_owned(),
            port,
            authority: authority.to_owned(),
            path,
        })
    }
}

/// `host:port` or `[v6]:port` into host (brackets kept) and port; the port
/// may be left out only when there is a default. Port 0 is refused.
fn split_authority(authority: &str, default: Option<u16>) -> Option<(&str, u16)> {
    let split = match authority.strip_prefix('[') {
        Some(inner) => inner.find(']').map(|i| i + 2)?,
        None => authority.find(':').unwrap_or(authority.len()),
    };
    let (host, port) = authority.split_at(split);
    if host.is_empty() {
        return None;
    }
    let port = match port.strip_prefix(':') {
        None if port.is_empty() => default?,
        None => return None,
        Some(digits) => {
            if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            digits.parse().ok().filter(|&p| p != 0)?
        }
    };
    Some((host, port))
}

/// How the request body is delimited (RFC 9112 §6).
#[derive(Debug, Clone, Copy)]
enum Framing {
    None,
    Length(u64),
    Chunked,
}

impl Framing {
    /// Refuses what could be read two ways: both framings, differing
    /// lengths, or a transfer coding that does not end in chunked.
    fn of(headers: &[(String, Vec<u8>)]) -> Result<Framing, Reply> {
        let named = |n: &'static str| {
            headers
                .iter()
                .filter(move |(name, _)| name.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.as_slice())
        };
        if let Some(last) = named("transfer-encoding").next_back() {
            if named("content-length").next().is_some() {
                return Err(Reply::bad_request(
                    "a request may not carry both Content-Length and Transfer-Encoding".into(),
                ));
            }
            let coding = last.rsplit(|&b| b == b',').next().unwrap_or_default();
            if !coding.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(Reply::bad_request(
                    "a request's Transfer-Encoding must end in chunked".into(),
                ));
            }
            return Ok(Framing::Chunked);
        }
        let mut length = None;
        for value in named("content-length").flat_map(|v| v.split(|&b| b == b',')) {
            let digits = value.trim_ascii();
            let n =
                (!digits.is_empty() && digits.len() <= 18 && digits.iter().all(u8::is_ascii_digit))
                    .then(|| std::str::from_utf8(digits).ok()?.parse::<u64>().ok())
                    .flatten();
            match (n, length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => {
                    return Err(Reply::bad_request(
                        "bad or conflicting Content-Length".into(),
                    ));
                }
            }
        }
        Ok(length.map_or(Framing::None, Framing::Length))
    }
}

fn wants_continue(headers: &[(String, Vec<u8>)]) -> bool {
    headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("expect")
            && value.trim_ascii().eq_ignore_ascii_case(b"100-continue")
    })
}

/// The first `n` body bytes: those already read with the head, then the rest.
async fn read_body(client: &mut TcpStream, rest: &[u8], n: u64) -> io::Result<Vec<u8>> {
    let n = usize::try_from(n).map_err(io::Error::other)?;
    let mut body = Vec::with_capacity(n);
    let mut src = rest.chain(client).take(n as u64);
    src.read_to_end(&mut body).await?;
    if body.len() < n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(body)
}

/// The part of the request body still to be streamed after the head.
enum Stream {
    Nothing,
    Length(u64),
    Chunked,
}

/// Streams the rest of the request body up and the response down; done when
/// the upstream closes (the response is delimited by that, as requested by
/// `Connection: close`). A request body that breaks off ends it early.
async fn exchange(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    rest: &[u8],
    body: Stream,
) -> io::Result<()> {
    let (mut from_client, mut to_client) = client.split();
    let (mut from_upstream, mut to_upstream) = upstream.split();
    let upload = async {
        match body {
            Stream::Nothing => Ok(()),
            Stream::Length(n) => {
                let mut src = rest.chain(&mut from_client).take(n);
                let sent = tokio::io::copy(&mut src, &mut to_upstream).await?;
                match sent < n {
                    true => Err(io::ErrorKind::UnexpectedEof.into()),
                    false => Ok(()),
                }
            }
            Stream::Chunked => {
                let mut src = BufReader::new(rest.chain(&mut from_client));
                copy_chunked(&mut src, &mut to_upstream).await
            }
        }
    };
    let download = async {
        let mut from_upstream = BufReader::with_capacity(COPY_BUFFER, &mut from_upstream);
        tokio::io::copy_buf(&mut from_upstream, &mut to_client).await?;
        to_client.shutdown().await
    };
    tokio::pin!(upload, download);
    let mut uploading = true;
    loop {
        tokio::select! {
            sent = &mut upload, if uploading => {
                uploading = false;
                sent?;
            }
            received = &mut download => return received,
        }
    }
}

/// Copies one chunked body exactly (chunks, the last chunk, trailers),
/// unchanged, so nothing after it is taken for part of it. Lines must end
/// in CRLF.
async fn copy_chunked<R, W>(src: &mut R, dst: &mut W) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_owned());
    loop {
        let line = read_line(src).await?;
        dst.write_all(&line).await?;
        let digits = line
            .split(|&b| b == b';' || b == b'\r')
            .next()
            .unwrap_or_default();
        let digits = digits.trim_ascii();
        if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad("bad chunk size"));
        }
        let size = u64::from_str_radix(std::str::from_utf8(digits).unwrap_or("0"), 16)
            .map_err(|_| bad("bad chunk size"))?;
        if size == 0 {
            break;
        }
        let copied = tokio::io::copy(&mut (&mut *src).take(size), dst).await?;
        if copied < size {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let mut crlf = [0; 2];
        src.read_exact(&mut crlf).await?;
        if crlf != *b"\r\n" {
            return Err(bad("chunk data not followed by CRLF"));
        }
        dst.write_all(&crlf).await?;
    }
    let mut trailers = 0;
    loop {
        let line = read_line(src).await?;
        trailers += line.len();
        if trailers > TRAILER_LIMIT {
            return Err(bad("trailers too long"));
        }
        dst.write_all(&line).await?;
        if line == b"\r\n" {
            return Ok(());
        }
    }
}

/// One CRLF-terminated line, terminator included, of at most
/// [`CHUNK_LINE_LIMIT`] bytes.
async fn read_line<R: AsyncBufRead + Unpin>(src: &mut R) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    (&mut *src)
        .take(CHUNK_LINE_LIMIT)
        .read_until(b'\n', &mut line)
        .await?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "chunked framing: a line is too long, unterminated or not ended by CRLF",
        ));
    }
    Ok(line)
}

/// A response the proxy gives itself, before any upstream byte was relayed.
#[derive(Debug)]
struct Reply {
    status: u16,
    reason: &'static str,
    /// A policy refusal (`X-Boxd-Egress: refused`) rather than an error.
    refused: bool,
    body: String,
}

impl Reply {
    fn bad_request(why: String) -> Reply {
        Reply {
            status: 400,
            reason: "Bad Request",
            refused: false,
            body: format!("boxd: {why}\n"),
        }
    }

    fn bad_gateway(why: String) -> Reply {
        Reply {
            status: 502,
            reason: "Bad Gateway",
            refused: false,
            body: format!("boxd: {why}\n"),
        }
    }

    fn head_too_large() -> Reply {
        Reply {
            status: 431,
            reason: "Request Header Fields Too Large",
            refused: false,
            body: format!(
                "boxd: the request head exceeds {} KiB or {MAX_HEADERS} header fields\n",
                HEAD_LIMIT / 1024
            ),
        }
    }

    /// Sends the reply and closes, first draining (for up to a second) what
    /// the client is still sending, so that closing with unread bytes does
    /// not reset the connection before the client has read the reply.
    async fn send(&self, client: &mut TcpStream) {
        let reply = format!(
            "HTTP/1.1 {} {}\r\nX-Boxd-Egress: {}\r\nContent-Type: text/plain\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{}",
            self.status,
            self.reason,
            if self.refused { "refused" } else { "error" },
            self.body.len(),
            self.body
        );
        if client.write_all(reply.as_bytes()).await.is_err() || client.shutdown().await.is_err() {
            return;
        }
        let drain = async {
            let mut sink = [0; 8192];
            let mut left = 1usize << 20;
            while let Ok(n @ 1..) = client.read(&mut sink).await {
                left = left.saturating_sub(n);
                if left == 0 {
                    break;
                }
            }
        };
        let _ = timeout(Duration::from_secs(1), drain).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::policy::Secret;

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
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        got.len()
                    );
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(&got).await;
                });
            }
        });
        addr
    }

    /// The body of a reply, after its head.
    fn body(reply: &str) -> &str {
        reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
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
        let got = body(&reply);
        let want_body = format!("token={VALUE}&again={VALUE}");
        let want = format!(
            "POST /v1/x?key={VALUE} HTTP/1.1\r\n\
             Host: 127.0.0.1:{port}\r\n\
             Authorization: Bearer {VALUE}\r\n\
             Content-Length: {}\r\n\
             Connection: close\r\n\
             \r\n{want_body}",
            want_body.len()
        );
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn a_host_the_secret_is_not_for_keeps_the_placeholder() {
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
        let req = format!(
            "PUT http://host.boxd.internal:{port}?q={TOKEN} HTTP/1.0\r\n\
             Authorization: Bearer {TOKEN}\r\n\
             Content-Length: 10\r\n\
             \r\n{TOKEN}"
        );
        let reply = roundtrip(proxy.addr, req.as_bytes()).await;
        let want = format!(
            "PUT /?q={TOKEN} HTTP/1.0\r\n\
             Host: host.boxd.internal:{port}\r\n\
             Authorization: Bearer {TOKEN}\r\n\
             Content-Length: 10\r\n\
             Connection: close\r\n\
             \r\n{TOKEN}"
        );
        assert_eq!(body(&reply), want);
        assert!(!reply.contains(VALUE));
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
        let got = body(&reply);
        assert!(!got.contains("Expect"), "{got}");
        assert!(
            got.ends_with(&format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n{VALUE}",
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
            "POST http://127.0.0.1:{}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}",
            mirror.port()
        );
        let reply = roundtrip(proxy.addr, req.as_bytes()).await;
        let got = body(&reply);
        assert!(
            got.ends_with(&format!(
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunks}"
            )),
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
                b"CONNECT ::1:443 HTTP/1.1\r\n\r\n",
                "CONNECT needs host:port",
            ),
            (
                b"POST http://example.com/ HTTP/1.1\r\n\
                  Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                "both Content-Length and Transfer-Encoding",
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
    async fn connections_beyond_the_limit_wait_for_a_free_slot() {
        let echo = echo_server().await;
        let proxy = start(&["127.0.0.1"], vec![], 1).await;
        let req = format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port());
        let mut first = TcpStream::connect(proxy.addr).await.unwrap();
        first.write_all(req.as_bytes()).await.unwrap();
        read_reply_head(&mut first).await;
        let mut second = TcpStream::connect(proxy.addr).await.unwrap();
        second.write_all(req.as_bytes()).await.unwrap();
        let mut byte = [0];
        assert!(
            timeout(Duration::from_millis(300), second.read(&mut byte))
                .await
                .is_err(),
            "a second connection was served beyond the limit"
        );
        drop(first);
        assert!(
            read_reply_head(&mut second)
                .await
                .starts_with("HTTP/1.1 200 ")
        );
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
}
