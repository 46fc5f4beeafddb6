//! Published ports, the supervisor's side: the host listeners, bound
//! before the box starts (so a taken address fails the start and leaves
//! nothing behind), and a relay per accepted connection into a socket the
//! box's zygote connects inside the box's network namespace.
//!
//! The supervisor owns the listeners, so published ports keep serving
//! across a restart of the daemon; they close before a stop is answered
//! and when the box ends. Publishing is inbound only: nothing here gives
//! the box a way out.

use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::model::PortMapping;

/// At most this many connections relayed at once per box (all its ports);
/// more wait in the listeners' backlog. With two [`BUFFER`]s each, at most
/// 16 MiB of buffers per box.
pub const MAX_CONNECTIONS: usize = 256;
/// Each direction's copy buffer.
const BUFFER: usize = 32 << 10;
/// How long a connection into the box may take to be accepted there.
const CONNECT_WITHIN: Duration = Duration::from_secs(30);

/// What makes connections inside the box: its zygote.
#[async_trait]
pub trait Inside: Send + Sync + 'static {
    /// A non-blocking TCP socket connecting (or connected) to `port` on
    /// the box's loopback (`::1` when `ipv6`), or why not.
    async fn connect(&self, port: u16, ipv6: bool) -> std::result::Result<OwnedFd, String>;
}

/// Host listeners, bound and not yet served.
pub struct Listeners(Vec<(PortMapping, std::net::TcpListener)>);

/// Binds every mapping's host address, or fails naming the one that could
/// not be bound (and closes the others).
pub fn bind(ports: &[PortMapping]) -> Result<Listeners> {
    let mut out = Vec::with_capacity(ports.len());
    for p in ports {
        let listener = std::net::TcpListener::bind(p.host_addr()).map_err(|e| bind_error(p, e))?;
        let actual = listener
            .local_addr()
            .map_err(|e| Error::io("published port", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("published port", e))?;
        out.push((
            PortMapping {
                host_port: actual.port(),
                ..*p
            },
            listener,
        ));
    }
    Ok(Listeners(out))
}

/// A bind failure as the user needs it: which address, and why.
fn bind_error(p: &PortMapping, e: std::io::Error) -> Error {
    let addr = p.host_addr();
    let why = match e.kind() {
        std::io::ErrorKind::AddrInUse => format!("host address {addr} is already in use"),
        std::io::ErrorKind::AddrNotAvailable => {
            format!("{} is not an address of this host", p.host_ip)
        }
        std::io::ErrorKind::PermissionDenied => format!(
            "binding {addr} is not permitted (ports below 1024 need privileges boxd does not have)"
        ),
        _ => format!("binding {addr}: {e}"),
    };
    Error::FailedPrecondition(format!("cannot publish box port {}: {why}", p.box_port))
}

impl Listeners {
    /// Serves every listener, relaying connections through `inside`.
    pub fn serve(self, inside: Arc<dyn Inside>) -> Result<Relays> {
        self.serve_at_most(inside, MAX_CONNECTIONS)
    }

    /// [`serve`](Self::serve), relaying at most `max` connections at once.
    fn serve_at_most(self, inside: Arc<dyn Inside>, max: usize) -> Result<Relays> {
        let stop = CancellationToken::new();
        let limit = Arc::new(Semaphore::new(max));
        let bytes = Arc::new(Bytes::default());
        let mut published = Vec::with_capacity(self.0.len());
        let mut tasks = Vec::with_capacity(self.0.len());
        for (port, listener) in self.0 {
            let listener =
                TcpListener::from_std(listener).map_err(|e| Error::io("published port", e))?;
            published.push(port);
            tasks.push(tokio::spawn(accept(
                listener,
                port.box_port,
                inside.clone(),
                limit.clone(),
                stop.clone(),
                bytes.clone(),
            )));
        }
        Ok(Relays {
            published,
            bytes,
            stop,
            tasks: std::sync::Mutex::new(tasks),
            closed: AtomicBool::new(false),
        })
    }
}

/// Ports being served.
pub struct Relays {
    published: Vec<PortMapping>,
    /// Bytes relayed, as the box's network traffic.
    bytes: Arc<Bytes>,
    stop: CancellationToken,
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    closed: AtomicBool,
}

impl Relays {
    /// What is published (actual host ports); nothing once closed.
    pub fn published(&self) -> Vec<PortMapping> {
        if self.closed.load(Ordering::SeqCst) {
            return Vec::new();
        }
        self.published.clone()
    }

    /// `(into the box, out of it)`: bytes relayed through published ports
    /// so far, live connections included.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.bytes.into_box.load(Ordering::Relaxed),
            self.bytes.out_of_box.load(Ordering::Relaxed),
        )
    }

    /// Ends every relayed connection and closes the listeners; once this
    /// returns, the host ports are free.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("relay tasks"));
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// Accepts connections while a relay slot is free, until `stop`.
async fn accept(
    listener: TcpListener,
    box_port: u16,
    inside: Arc<dyn Inside>,
    limit: Arc<Semaphore>,
    stop: CancellationToken,
    bytes: Arc<Bytes>,
) {
    loop {
        let permit = tokio::select! {
            p = limit.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stop.cancelled() => return,
        };
        let host = tokio::select! {
            r = listener.accept() => match r {
                Ok((host, _)) => host,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it
                    // was taken: not the listener's end.
                    tracing::debug!(error = %e, "accepting a published port's connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let (inside, stop, bytes) = (inside.clone(), stop.clone(), bytes.clone());
        tokio::spawn(async move {
            // The connect runs to its answer even when the ports close:
            // the zygote answers in order, and an answer nobody waits for
            // would go to the next request.
            if let Some(boxed) = connect(inside.as_ref(), box_port).await {
                tokio::select! {
                    _ = relay(Counted { stream: host, bytes }, boxed) => {}
                    _ = stop.cancelled() => {}
                }
            }
            drop(permit);
        });
    }
}

/// One connection's bytes both ways, each direction's end passed on
/// (half-closes kept). (A port nothing listens on in the box never gets
/// here: the host's connection is closed.)
async fn relay(mut host: Counted, mut boxed: TcpStream) {
    let _ = host.stream.set_nodelay(true);
    let _ = boxed.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional_with_sizes(&mut host, &mut boxed, BUFFER, BUFFER).await;
}

/// Relayed bytes, counted as they move.
#[derive(Debug, Default)]
struct Bytes {
    into_box: AtomicU64,
    out_of_box: AtomicU64,
}

/// The host side of a relayed connection: what is read from it goes into
/// the box, what is written to it came out.
struct Counted {
    stream: TcpStream,
    bytes: Arc<Bytes>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        self.bytes.into_box.fetch_add(n, Ordering::Relaxed);
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            self.bytes.out_of_box.fetch_add(n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// A connection to `port` in the box: 127.0.0.1 first, then `::1` (a
/// server listening on `localhost` may have only the IPv6 one).
async fn connect(inside: &dyn Inside, port: u16) -> Option<TcpStream> {
    for ipv6 in [false, true] {
        let fd = match inside.connect(port, ipv6).await {
            Ok(fd) => fd,
            Err(why) => {
                tracing::debug!(port, ipv6, %why, "connecting inside the box");
                continue;
            }
        };
        let Ok(stream) = TcpStream::from_std(std::net::TcpStream::from(fd)) else {
            continue;
        };
        match tokio::time::timeout(CONNECT_WITHIN, stream.writable()).await {
            Ok(Ok(())) => {}
            _ => return None,
        }
        match stream.take_error() {
            Ok(None) => return Some(stream),
            Ok(Some(e)) | Err(e) => {
                tracing::debug!(port, ipv6, error = %e, "connecting inside the box");
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Connects on the host's own loopback: the relay without a box.
    struct Loopback;

    #[async_trait]
    impl Inside for Loopback {
        async fn connect(&self, port: u16, ipv6: bool) -> std::result::Result<OwnedFd, String> {
            let ip: std::net::IpAddr = if ipv6 {
                std::net::Ipv6Addr::LOCALHOST.into()
            } else {
                std::net::Ipv4Addr::LOCALHOST.into()
            };
            let s = std::net::TcpStream::connect((ip, port)).map_err(|e| e.to_string())?;
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok(s.into())
        }
    }

    fn mapping(host_port: u16, box_port: u16) -> PortMapping {
        PortMapping {
            host_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            host_port,
            box_port,
        }
    }

    #[tokio::test]
    async fn relays_both_ways_with_half_close_and_frees_the_port() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let box_port = server.local_addr().unwrap().port();
        // Echoes what it reads, then adds a line after the client's EOF.
        tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(&got).await.unwrap();
            s.write_all(b"after eof").await.unwrap();
        });
        let relays = bind(&[mapping(0, box_port)])
            .unwrap()
            .serve(Arc::new(Loopback))
            .unwrap();
        let published = relays.published();
        assert_ne!(published[0].host_port, 0, "the actual port is reported");
        let mut c = TcpStream::connect(published[0].host_addr()).await.unwrap();
        let payload = vec![7u8; 1 << 20];
        c.write_all(&payload).await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).await.unwrap();
        assert_eq!(back.len(), payload.len() + 9);
        assert!(back.ends_with(b"after eof"));
        relays.close().await;
        assert!(relays.published().is_empty());
        // Freed: the same address binds again.
        std::net::TcpListener::bind(published[0].host_addr()).unwrap();
    }

    #[tokio::test]
    async fn a_port_nothing_serves_closes_the_connection() {
        let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let box_port = unused.local_addr().unwrap().port();
        drop(unused);
        let relays = bind(&[mapping(0, box_port)])
            .unwrap()
            .serve(Arc::new(Loopback))
            .unwrap();
        let mut c = TcpStream::connect(relays.published()[0].host_addr())
            .await
            .unwrap();
        let mut buf = Vec::new();
        // EOF (or a reset), never a hang.
        let _ = c.read_to_end(&mut buf).await;
        assert!(buf.is_empty());
        relays.close().await;
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_wait_for_a_free_slot() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let box_port = server.local_addr().unwrap().port();
        let (accepted_tx, mut accepted) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (s, _) = server.accept().await.unwrap();
                accepted_tx.send(s).unwrap();
            }
        });
        let relays = bind(&[mapping(0, box_port)])
            .unwrap()
            .serve_at_most(Arc::new(Loopback), 2)
            .unwrap();
        let addr = relays.published()[0].host_addr();
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        let mut inner = vec![
            accepted.recv().await.unwrap(),
            accepted.recv().await.unwrap(),
        ];
        // The third waits in the backlog while two are relayed.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(accepted.try_recv().is_err(), "a third relayed at once");
        // One ends (both sides): the third goes through.
        drop(clients.remove(0));
        inner.remove(0).write_all(b"bye").await.ok();
        let third = accepted.recv().await.unwrap();
        drop((inner, third));
        relays.close().await;
    }

    #[test]
    fn a_taken_address_names_itself() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = bind(&[mapping(0, 1), mapping(port, 80)])
            .err()
            .expect("taken")
            .to_string();
        assert!(
            e.contains(&format!("127.0.0.1:{port} is already in use")) && e.contains("box port 80"),
            "{e}"
        );
    }
}
