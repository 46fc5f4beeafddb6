//! The proxy: one listener inside a box, connections out from the host.
//!
//! Each accepted connection is served by hyper's HTTP/1 server
//! ([`server`]: bounded head, header-read timeout) and carries exactly one
//! request (a CONNECT tunnel, [`super::tunnel`], or one plain HTTP request,
//! [`super::forward`]); every answer says `Connection: close` and hyper
//! closes after it, so there is no second request whose framing could
//! disagree with the upstream's. What to do with a request is decided by
//! [`super::request`] before anything is connected; the proxy's own
//! answers are [`super::reply`]'s.
//!
//! **Invariants:** nothing is connected before the host passed the
//! allow-list; hosts are resolved here, on the host side (aliases first),
//! never by hyper; neither header values nor secret values are ever
//! logged; at most [`MAX_CONNECTIONS`] connections are served at once
//! (more wait in the listen backlog); when [`Proxy::serve`] returns, every
//! connection it accepted is closed (tunnels and upstream connections run
//! inside the connection's own task).

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::http::{Method, Request, Response};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::client_io::ClientIo;
use super::forward::ReplyBody;
use super::policy::{AllowList, Secrets};
use super::reply::{self, HEAD_LIMIT, MAX_HEADERS, Reply};
use super::request::{Plan, Rules};
use super::traffic::{Traffic, Upstream};
use super::tunnel::{self, Tunnel};

/// Connections served at once by one proxy.
pub const MAX_CONNECTIONS: usize = 256;
/// The whole head must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Resolving a host, and connecting to each of its addresses, each within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of bodies read whole (to substitute secrets) one proxy holds at
/// once; a body that would exceed it waits (so a box cannot make the
/// daemon hold 256 × 16 MiB).
const BODY_BUDGET: u32 = 64 * 1024 * 1024;

/// hyper's HTTP/1 server as the proxy runs it: the head bounded like
/// before hyper (64 KiB, 256 fields) and due within [`HEAD_TIMEOUT`]; a
/// client that closes its sending side after the request (`nc`) still
/// gets the answer; header names kept as the box wrote them (hyper's own
/// in title case); no `Date` added to relayed responses.
pub fn server() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_header_size(HEAD_LIMIT)
        .max_headers(MAX_HEADERS)
        .half_close(true)
        .title_case_headers(true)
        .preserve_header_case(true)
        .auto_date_header(false);
    builder
}

/// One box's egress proxy.
pub struct Proxy {
    pub(super) rules: Rules,
    /// Host name (normalized) → the host the proxy connects to instead.
    aliases: HashMap<String, String>,
    /// [`BODY_BUDGET`], one permit per buffered body byte.
    pub(super) bodies: Semaphore,
    /// Bytes to and from upstreams.
    traffic: Arc<Traffic>,
}

/// What the serving of one connection learns, shared with its service.
#[derive(Default)]
struct Exchange {
    /// A request head reached the proxy (hyper's writes go out from then).
    heard: Arc<AtomicBool>,
    /// The proxy answered with a [`Reply`]: drain the client before closing.
    replied: AtomicBool,
    /// A CONNECT answered 200, to run once hyper hands the connection over.
    tunnel: Mutex<Option<Tunnel>>,
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
            rules: Rules::new(box_name, allow, secrets),
            aliases,
            bodies: Semaphore::new(BODY_BUDGET as usize),
            traffic: Arc::default(),
        }
    }

    /// The `(host, port)` of each request refused from now on.
    pub fn refusals(&self) -> tokio::sync::broadcast::Receiver<(String, u16)> {
        self.rules.refusals()
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
        let box_name = self.rules.box_name().to_owned();
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
                    warn!(box_name, "egress proxy cannot accept: {e}");
                    drop(permit);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tasks.shutdown().await;
        debug!(box_name, "egress proxy stopped");
    }

    /// Serves one client connection: its one request, then what follows
    /// it (a tunnel, or draining after a reply).
    async fn handle(self: Arc<Self>, client: TcpStream, peer: SocketAddr) {
        let _ = client.set_nodelay(true);
        let exchange = Arc::new(Exchange::default());
        let io = TokioIo::new(ClientIo::new(client, exchange.heard.clone()));
        let service = {
            let (proxy, exchange) = (self.clone(), exchange.clone());
            service_fn(move |request| {
                exchange.heard.store(true, Ordering::Release);
                let (proxy, exchange) = (proxy.clone(), exchange.clone());
                async move { Ok::<_, Infallible>(proxy.respond(&exchange, request).await) }
            })
        };
        let mut conn = server().serve_connection(io, service).with_upgrades();
        let served = (&mut conn).await;
        let box_name = self.rules.box_name();
        let client = conn
            .into_parts()
            .map(|parts| parts.io.into_inner().into_stream());
        match served {
            Err(e) if !exchange.heard.load(Ordering::Acquire) => {
                match (Reply::for_head_error(&e), client) {
                    (Some(reply), Some(mut client)) => reply.send(&mut client).await,
                    _ => debug!(box_name, %peer, "no request: {e}"),
                }
                return;
            }
            Err(e) => debug!(box_name, %peer, "request ended: {e}"),
            Ok(()) => {}
        }
        let tunnel = exchange.tunnel.lock().expect("tunnel").take();
        if let Some(tunnel) = tunnel {
            tunnel.run(box_name).await;
        } else if let Some(mut client) = client
            && exchange.replied.load(Ordering::Acquire)
        {
            reply::drain(&mut client).await;
        }
    }

    /// The answer to the connection's request.
    async fn respond(
        &self,
        exchange: &Exchange,
        mut request: Request<Incoming>,
    ) -> Response<ReplyBody> {
        let upgrade =
            (request.method() == Method::CONNECT).then(|| hyper::upgrade::on(&mut request));
        let (head, body) = request.into_parts();
        let answer = async {
            match self.rules.plan(head)? {
                Plan::Tunnel { host, port } => {
                    let upstream = self.connect(&host, port).await?;
                    let client = upgrade.expect("a CONNECT's upgrade");
                    *exchange.tunnel.lock().expect("tunnel") = Some(Tunnel {
                        client,
                        upstream,
                        host,
                        port,
                    });
                    Ok(tunnel::established())
                }
                Plan::Forward(forward) => self.forward(*forward, body).await,
            }
        };
        answer.await.unwrap_or_else(|reply: Reply| {
            exchange.replied.store(true, Ordering::Release);
            reply.into_response().map(http_body_util::Either::Left)
        })
    }

    /// Resolves `host` here, on the host side (after its alias), and
    /// connects to the first address that answers.
    pub(super) async fn connect(&self, host: &str, port: u16) -> Result<Upstream, Reply> {
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

#[cfg(test)]
mod tests;
