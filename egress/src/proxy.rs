//! The proxy: one listener inside a box, connections out from the host.
//!
//! Each accepted connection is served by hyper's HTTP/1 server
//! ([`server`]: bounded head, header-read timeout) and carries exactly one
//! request (a CONNECT tunnel, [`super::tunnel`] or, for a secret's host,
//! [`super::intercept`]; or one plain HTTP request, [`super::forward`]);
//! every answer says `Connection: close` and hyper closes after it, so
//! there is no second request whose framing could disagree with the
//! upstream's. What to do with a request is decided by
//! [`super::request`] before anything is connected; the proxy's own
//! answers are [`super::reply`]'s.
//!
//! **Invariants:** nothing is connected before the host passed the
//! allow-list; hosts are resolved here, on the host side (aliases first),
//! never by hyper; neither header values nor secret values are ever
//! logged; at most [`MAX_CONNECTIONS`] connections are served at once
//! (one more is answered `503`, naming the limit, by at most
//! [`MAX_CONNECTIONS`] refusals at a time; past those it is closed
//! unanswered: a flood holds no more than twice the limit); when [`Proxy::serve`] returns, every
//! connection it accepted is closed (tunnels and intercepted connections
//! run inside the connection's own task, upgraded ones stop with it);
//! upstream connections kept alive in the client's pool close when idle
//! for a minute or when the proxy is dropped.

use std::collections::HashMap;
use std::convert::Infallible;
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
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::ca::BoxCa;
use super::client_io::ClientIo;
use super::forward::ReplyBody;
use super::intercept::Interceptor;
use super::policy::{AllowList, Secrets};
use super::reply::{self, HEAD_LIMIT, MAX_HEADERS, Reply};
use super::request::{Plan, Refusal, Rules};
use super::traffic::Traffic;
use super::tunnel::{self, Tunnel};
use super::upstream::{self, Dialer, UpstreamClient};

/// Connections served at once by one proxy.
pub const MAX_CONNECTIONS: usize = 256;
/// The whole head must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
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
    dialer: Arc<Dialer>,
    /// Every forwarded request goes through it.
    pub(super) client: UpstreamClient,
    /// [`BODY_BUDGET`], one permit per buffered body byte.
    pub(super) bodies: Semaphore,
    /// Bytes to and from upstreams.
    traffic: Arc<Traffic>,
    /// The box's CA, when it has secrets: what intercepts their hosts.
    pub(super) interceptor: Option<Interceptor>,
    /// Cancelled when [`Proxy::serve`] returns (upgraded connections end).
    pub(super) closing: CancellationToken,
}

/// What the serving of one connection learns, shared with its service.
#[derive(Default)]
struct Exchange {
    /// A request head reached the proxy (hyper's writes go out from then).
    heard: Arc<AtomicBool>,
    /// The proxy answered with a [`Reply`]: drain the client before closing.
    replied: AtomicBool,
    /// A CONNECT answered 200, to run once hyper hands the connection over.
    tunnel: Mutex<Option<Opened>>,
}

/// What a CONNECT answered 200 opened.
enum Opened {
    Blind(Tunnel),
    Intercepted(hyper::upgrade::OnUpgrade, String, u16),
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
        let traffic: Arc<Traffic> = Arc::default();
        let dialer = Arc::new(Dialer::new(aliases, traffic.clone()));
        Proxy {
            rules: Rules::new(box_name, allow, secrets),
            client: upstream::client(dialer.clone()),
            dialer,
            bodies: Semaphore::new(BODY_BUDGET as usize),
            traffic,
            interceptor: None,
            closing: CancellationToken::new(),
        }
    }

    /// The proxy that answers TLS to its secrets' hosts with `ca`'s
    /// certificates (without a CA, a `CONNECT` to such a host is refused
    /// with a `502`: the placeholder never goes out as it is).
    pub fn with_ca(mut self, ca: Arc<BoxCa>) -> Proxy {
        self.interceptor = Some(Interceptor::new(ca));
        self
    }

    /// Verifies upstream TLS against exactly `roots` instead of the
    /// host's trust store (for tests).
    pub fn trust_upstream(self, roots: rustls::RootCertStore) -> Proxy {
        self.dialer.trust(roots);
        self
    }

    /// Each refusal from now on.
    pub fn refusals(&self) -> tokio::sync::broadcast::Receiver<Refusal> {
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
        let refusals = Arc::new(Semaphore::new(limit));
        let mut tasks = JoinSet::new();
        loop {
            while tasks.try_join_next().is_some() {}
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, mostly: back off rather than spin.
                    warn!(box_name, "egress proxy cannot accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if let Ok(permit) = permits.clone().try_acquire_owned() {
                let proxy = self.clone();
                tasks.spawn(async move {
                    let _permit = permit;
                    proxy.handle(stream, peer).await;
                });
            } else if let Ok(permit) = refusals.clone().try_acquire_owned() {
                debug!(box_name, %peer, "egress proxy full: {limit} connections");
                let reply = Reply::busy(&box_name, limit);
                tasks.spawn(async move {
                    let _permit = permit;
                    let mut stream = stream;
                    reply.send(&mut stream).await;
                });
            } else {
                debug!(box_name, %peer, "egress proxy full, refusals too: closed");
            }
        }
        tasks.shutdown().await;
        self.closing.cancel();
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
        let opened = exchange.tunnel.lock().expect("tunnel").take();
        if let Some(opened) = opened {
            match opened {
                Opened::Blind(tunnel) => tunnel.run(box_name).await,
                Opened::Intercepted(client, host, port) => {
                    self.clone().intercept(client, host, port).await
                }
            }
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
                Plan::Tunnel {
                    host,
                    port,
                    intercept: true,
                } => {
                    if self.interceptor.is_none() {
                        return Err(Reply::bad_gateway(format_args!(
                            "a secret names {host}, but boxd has no certificate authority for this box to answer its TLS with (restart the box)"
                        )));
                    }
                    let client = upgrade.expect("a CONNECT's upgrade");
                    *exchange.tunnel.lock().expect("tunnel") =
                        Some(Opened::Intercepted(client, host, port));
                    Ok(tunnel::established())
                }
                Plan::Tunnel { host, port, .. } => {
                    let upstream = self.dialer.connect(&host, port).await?;
                    let client = upgrade.expect("a CONNECT's upgrade");
                    *exchange.tunnel.lock().expect("tunnel") = Some(Opened::Blind(Tunnel {
                        client,
                        upstream,
                        host,
                        port,
                    }));
                    Ok(tunnel::established())
                }
                Plan::Forward(forward) => self.send(*forward, body, None).await,
            }
        };
        answer.await.unwrap_or_else(|reply: Reply| {
            exchange.replied.store(true, Ordering::Release);
            reply.into_response().map(http_body_util::Either::Left)
        })
    }
}

#[cfg(test)]
mod tests;
