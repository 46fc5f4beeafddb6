//! What one client connection's requests may make boxd hold.
//!
//! A connection's bytes reach tonic through the `:authority` rewriter
//! ([`crate::authority`]: at most [`MAX_HEADER_LIST`] bytes of header list
//! per block) and h2 (at most [`MAX_STREAMS`] streams at once, and the
//! HTTP/2 windows: [`CONNECTION_WINDOW`] of DATA it has not handed on).
//! tonic reserves a whole message as soon as its 5-byte prefix declares
//! its length, and keeps that buffer for the rest of a streaming call; so
//! every call goes through [`Bounded`], which reads the prefixes on their
//! way in and:
//!
//! - refuses a message over its method's bound ([`rule`]: large only
//!   where bytes are the point, an exec's stdin and a copy's chunks, and
//!   for a box spec; small everywhere else) before tonic reserves it;
//! - charges each call, against its connection's [`CONNECTION_BUDGET`],
//!   the largest message it has declared and the bytes it has received
//!   ahead of what it has passed on (a call is handed one message at a
//!   time, so tonic never holds more than its current one); the charge is
//!   given back when the call is over. A message that would take the
//!   connection past its budget is refused;
//! - refuses a unary request that has not arrived whole (its message and
//!   its end) within [`REQUEST_WITHIN`]. Streaming requests (`Exec`,
//!   `CopyIn`, reflection) arrive for as long as the call lasts.
//!
//! Each refusal is that call's error (`RESOURCE_EXHAUSTED`,
//! `DEADLINE_EXCEEDED`), logged; the connection and every other call go
//! on.
//!
//! What one connection can make boxd hold, then, is at most about 95 MiB,
//! whatever the client sends:
//!
//! - in the rewriter, 9 MiB: its 64 KiB read buffer; a partial frame (up
//!   to a 1 MiB frame and one read) and the frames one read completed,
//!   each in a vector that may have doubled (4.4 MiB); a header block up
//!   to [`crate::authority::MAX_BLOCK`] (1 MiB, 2 MiB doubled); one
//!   literal being decoded (1.6 MiB, a 1 MiB Huffman string); the header
//!   list (16 KiB) and the HPACK tables (8 KiB);
//! - in h2, 22 MiB: the DATA it has not handed on (the 16 MiB connection
//!   window), the frame being read (1 MiB, 2 MiB doubled), and a header
//!   list of at most 16 KiB per stream, kept twice at most (4 MiB at
//!   [`MAX_STREAMS`]);
//! - in tonic and the handlers, 64 MiB: every charged byte at most twice,
//!   as tonic's buffer and as the message decoded from it. (What waits
//!   here to be handed on is copied out of h2's read buffer, so it keeps
//!   only its own length.)
//!
//! Not counted: what boxd sends back, which is its own (exec output, file
//! chunks), held per stream by hyper's send buffer (400 KiB) and the
//! message being written; and what the calls do (a box, an exec and its
//! output log have bounds of their own).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use boxd_proto::tonic::{Status, body::Body, codegen::http, server::NamedService};
use bytes::Bytes;
use hyper::body::Frame;

pub use crate::authority::MAX_HEADER_LIST;
pub use boxd_proto::wire::CONNECTION_WINDOW;

/// Streams a connection may have open at once (h2's
/// `max_concurrent_streams`; a client's further calls wait for one to
/// end). Four times the most any client here opens (32 execs at once).
pub const MAX_STREAMS: u32 = 128;
/// Bytes of request messages one connection's calls may hold at once:
/// one message of the largest size ([`BULK`]) and as much again.
pub const CONNECTION_BUDGET: usize = 32 << 20;
/// A unary request (its message and its end) arrives within this.
pub const REQUEST_WITHIN: Duration = Duration::from_secs(30);
/// The largest message where bytes are the point: an exec's stdin (on its
/// stream, or `SendInput`: the JSONL driver's come whole from a 4 MiB
/// line), a copy's chunks (1 MiB from boxd's clients), an exec's start
/// (up to 1 MiB of environment and 1 MiB of command line).
pub const BULK: usize = boxd_proto::wire::MAX_MESSAGE;
/// A box spec: 1 MiB of environment (twice that as protobuf, for tiny
/// variables), 64 mounts of two paths, 256 hosts, 64 secrets and ports.
pub const SPEC: usize = 4 << 20;
/// Lists: an allow-list and ports (`UpdateBox`, `ImportBox`), box names
/// (`BoxStats`).
pub const LIST: usize = 1 << 20;
/// Everything else: a name or two, a path (at most 4 KiB), a reference,
/// flags.
pub const SMALL: usize = 64 << 10;

/// A method's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The largest request message taken.
    pub max_message: usize,
    /// The request is a stream: no [`REQUEST_WITHIN`].
    pub streaming: bool,
}

/// The bounds of the method at `path` (`/boxd.v1.Boxd/Exec`).
pub fn rule(path: &str) -> Rule {
    let unary = |max_message| Rule {
        max_message,
        streaming: false,
    };
    let streaming = |max_message| Rule {
        max_message,
        streaming: true,
    };
    let (service, method) = path
        .strip_prefix('/')
        .and_then(|p| p.split_once('/'))
        .unwrap_or(("", ""));
    match (service, method) {
        ("boxd.v1.Boxd", "Exec" | "CopyIn") => streaming(BULK),
        ("boxd.v1.Boxd", "SendInput") => unary(BULK),
        ("boxd.v1.Boxd", "CreateBox") => unary(SPEC),
        ("boxd.v1.Boxd", "UpdateBox" | "ImportBox" | "BoxStats") => unary(LIST),
        (
            "grpc.reflection.v1.ServerReflection" | "grpc.reflection.v1alpha.ServerReflection",
            "ServerReflectionInfo",
        ) => streaming(SMALL),
        _ => unary(SMALL),
    }
}

/// One connection's calls: the bytes they hold (their charges).
#[derive(Debug, Default)]
pub struct Connection {
    held: AtomicUsize,
    refusals: AtomicUsize,
}

impl Connection {
    /// The bytes this connection's calls are charged now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Counts a refusal; whether it is the connection's first (logged as
    /// a warning; the rest, which one client can make by the thousand,
    /// at debug level).
    fn first_refusal(&self) -> bool {
        self.refusals.fetch_add(1, Ordering::Relaxed) == 0
    }
}

/// Logs a refusal: a warning for a connection's first, debug for the rest.
macro_rules! refused {
    ($conn:expr, $($field:tt)*) => {
        if $conn.first_refusal() {
            tracing::warn!(further = "at debug level", $($field)*);
        } else {
            tracing::debug!($($field)*);
        }
    };
}

/// One call's share of its connection's budget, given back when the call
/// is over: when its request body (so tonic's buffer) and its handler are
/// both gone.
#[derive(Debug)]
struct Charge {
    conn: Arc<Connection>,
    /// Changed by the request body only.
    amount: AtomicUsize,
}

impl Charge {
    /// Makes this call's share `new`; when that would take the connection
    /// past [`CONNECTION_BUDGET`], nothing changes and the error is what
    /// the connection would have held.
    fn set(&self, new: usize) -> Result<(), usize> {
        let old = self.amount.load(Ordering::Relaxed);
        if new > old {
            let more = new - old;
            let before = self.conn.held.fetch_add(more, Ordering::SeqCst);
            if before + more > CONNECTION_BUDGET {
                self.conn.held.fetch_sub(more, Ordering::SeqCst);
                return Err(before + more);
            }
        } else {
            self.conn.held.fetch_sub(old - new, Ordering::SeqCst);
        }
        self.amount.store(new, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.conn
            .held
            .fetch_sub(*self.amount.get_mut(), Ordering::SeqCst);
    }
}

/// A service (tonic's generated server, behind its interceptor) whose
/// every call's request is read through [`Intake`].
#[derive(Debug, Clone)]
pub struct Bounded<S> {
    inner: S,
}

impl<S> Bounded<S> {
    pub fn new(inner: S) -> Bounded<S> {
        Bounded { inner }
    }
}

impl<S: NamedService> NamedService for Bounded<S> {
    const NAME: &'static str = S::NAME;
}

type Answer = Result<http::Response<Body>, Infallible>;

impl<S, B> boxd_proto::tonic::codegen::Service<http::Request<Body>> for Bounded<S>
where
    S: boxd_proto::tonic::codegen::Service<
            http::Request<Body>,
            Response = http::Response<B>,
            Error = Infallible,
        >,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<boxd_proto::tonic::codegen::StdError>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let conn = req
            .extensions()
            .get::<crate::listener::Peer>()
            .map(|p| p.intake())
            .unwrap_or_default();
        let charge = Arc::new(Charge {
            conn,
            amount: AtomicUsize::new(0),
        });
        let (parts, body) = req.into_parts();
        let body = Intake::new(body, parts.uri.path(), charge.clone());
        let answer = self
            .inner
            .call(http::Request::from_parts(parts, Body::new(body)));
        Box::pin(async move {
            let answer = answer.await;
            drop(charge);
            answer.map(|a| a.map(Body::new))
        })
    }
}

/// A call's request body as tonic reads it: handed on one message at a
/// time, each message's declared length checked against the method's
/// bound and the connection's budget before tonic sees its prefix whole.
pub struct Intake {
    inner: Body,
    method: String,
    rule: Rule,
    charge: Arc<Charge>,
    /// The largest message this call has declared.
    largest: usize,
    /// Bytes received and not handed on yet.
    ahead: Bytes,
    /// `ahead` is a copy of its own, not a slice keeping h2's read buffer.
    ahead_copied: bool,
    /// The prefix being read, and how much of it is.
    prefix: [u8; 5],
    have: usize,
    /// Bytes of the current message still to hand on; 0 between messages.
    left: usize,
    /// A unary request's deadline, until it has arrived.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Refused: nothing more is handed on.
    done: bool,
}

impl Intake {
    fn new(inner: Body, path: &str, charge: Arc<Charge>) -> Intake {
        let rule = rule(path);
        Intake {
            inner,
            method: path.trim_start_matches('/').to_owned(),
            rule,
            charge,
            largest: 0,
            ahead: Bytes::new(),
            ahead_copied: false,
            prefix: [0; 5],
            have: 0,
            left: 0,
            deadline: (!rule.streaming).then(|| Box::pin(tokio::time::sleep(REQUEST_WITHIN))),
            done: false,
        }
    }

    /// Takes from `ahead` what can go to tonic now: up to the end of the
    /// current message (or all of it, when the message goes on past it).
    fn carve(&mut self) -> Result<Bytes, Status> {
        let mut n = 0;
        while n < self.ahead.len() {
            if self.left > 0 {
                let k = self.left.min(self.ahead.len() - n);
                n += k;
                self.left -= k;
                break;
            }
            let k = (5 - self.have).min(self.ahead.len() - n);
            self.prefix[self.have..self.have + k].copy_from_slice(&self.ahead[n..n + k]);
            self.have += k;
            n += k;
            if self.have < 5 {
                break;
            }
            self.have = 0;
            let len = u32::from_be_bytes(self.prefix[1..].try_into().expect("four bytes")) as usize;
            if len > self.rule.max_message {
                refused!(self.charge.conn, method = %self.method, len, bound = self.rule.max_message, "refused a request message over its method's bound");
                return Err(Status::resource_exhausted(format!(
                    "a request message too large for {}: {len} bytes, where it takes at most {}",
                    self.method, self.rule.max_message
                )));
            }
            self.largest = self.largest.max(len);
            self.left = len;
            if len == 0 {
                break;
            }
        }
        let piece = self.ahead.split_to(n);
        if !self.ahead.is_empty() && !self.ahead_copied {
            // What waits is charged by its length: let it keep no more.
            self.ahead = Bytes::copy_from_slice(&self.ahead);
            self.ahead_copied = true;
        }
        if let Err(would) = self.charge.set(self.largest + self.ahead.len()) {
            refused!(self.charge.conn, method = %self.method, would, bound = CONNECTION_BUDGET, "refused a request: its connection's requests would hold more than their bound");
            return Err(Status::resource_exhausted(format!(
                "this connection's requests would hold {would} bytes at once with this one's, more than boxd takes ({CONNECTION_BUDGET}); send it when others have ended, or on another connection"
            )));
        }
        Ok(piece)
    }
}

impl hyper::body::Body for Intake {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if this.ahead.is_empty() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => {
                    if let Some(deadline) = this.deadline.as_mut()
                        && deadline.as_mut().poll(cx).is_ready()
                    {
                        this.done = true;
                        refused!(this.charge.conn, method = %this.method, within = ?REQUEST_WITHIN, "refused a request that did not arrive in time");
                        return Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                            "the request to {} did not arrive whole within {} s",
                            this.method,
                            REQUEST_WITHIN.as_secs()
                        )))));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(None) => {
                    this.deadline = None;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        this.ahead = data;
                        this.ahead_copied = false;
                    }
                    Err(frame) => {
                        // Trailers: the request's end.
                        this.deadline = None;
                        return Poll::Ready(Some(Ok(frame)));
                    }
                },
            }
        }
        match this.carve() {
            Ok(piece) => Poll::Ready(Some(Ok(Frame::data(piece)))),
            Err(status) => {
                this.done = true;
                this.ahead = Bytes::new();
                Poll::Ready(Some(Err(status)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || (self.ahead.is_empty() && self.inner.is_end_stream())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `Intake` over `chunks` (then the end) for `path`, on `conn`.
    fn intake(path: &str, chunks: Vec<Vec<u8>>, conn: &Arc<Connection>) -> Intake {
        let stream = tokio_stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, Status>(Frame::data(Bytes::from(c)))),
        );
        let body = Body::new(http_body_util::StreamBody::new(stream));
        let charge = Arc::new(Charge {
            conn: conn.clone(),
            amount: AtomicUsize::new(0),
        });
        Intake::new(body, path, charge)
    }

    /// Everything `body` hands on (the pieces), or its error.
    async fn drain(body: &mut Intake) -> Result<Vec<Vec<u8>>, Status> {
        use http_body_util::BodyExt;
        let mut pieces = Vec::new();
        while let Some(frame) = body.frame().await {
            pieces.push(frame?.into_data().expect("data").to_vec());
        }
        Ok(pieces)
    }

    fn message(len: usize) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&(len as u32).to_be_bytes());
        m.resize(5 + len, 7);
        m
    }

    #[tokio::test]
    async fn messages_are_handed_on_one_at_a_time_and_charged_until_the_call_ends() {
        let conn = Arc::new(Connection::default());
        // Three messages in one chunk, a fourth split across two.
        let mut chunk = message(3);
        chunk.extend(message(0));
        chunk.extend(message(10));
        let fourth = message(100);
        chunk.extend_from_slice(&fourth[..2]);
        let mut body = intake(
            "/boxd.v1.Boxd/Exec",
            vec![chunk, fourth[2..50].to_vec(), fourth[50..].to_vec()],
            &conn,
        );
        let pieces = drain(&mut body).await.unwrap();
        let lens: Vec<usize> = pieces.iter().map(Vec::len).collect();
        assert_eq!(lens, [8, 5, 15, 2, 48, 55]);
        assert_eq!(pieces.concat().len(), 8 + 5 + 15 + 105);
        assert_eq!(
            conn.held(),
            100,
            "the largest message, while the call lasts"
        );
        drop(body);
        assert_eq!(conn.held(), 0);
    }

    #[tokio::test]
    async fn a_message_over_its_methods_bound_is_refused_before_its_prefix_is_whole() {
        let conn = Arc::new(Connection::default());
        let mut at = message(0);
        at[1..5].copy_from_slice(&(SMALL as u32).to_be_bytes());
        let mut body = intake("/boxd.v1.Boxd/ListBoxes", vec![at[..5].to_vec()], &conn);
        assert_eq!(drain(&mut body).await.unwrap().concat(), at[..5]);
        let mut over = message(0);
        over[1..5].copy_from_slice(&(SMALL as u32 + 1).to_be_bytes());
        let mut body = intake(
            "/boxd.v1.Boxd/ListBoxes",
            vec![over[..3].to_vec(), over[3..].to_vec()],
            &conn,
        );
        use http_body_util::BodyExt;
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first.len(), 3, "part of a prefix is no message yet");
        let e = body.frame().await.unwrap().unwrap_err();
        assert_eq!(e.code(), boxd_proto::tonic::Code::ResourceExhausted);
        assert!(e.message().contains("boxd.v1.Boxd/ListBoxes"), "{e:?}");
        assert!(e.message().contains(&SMALL.to_string()), "{e:?}");
        assert!(body.frame().await.is_none(), "nothing after the refusal");
        // The bulk methods take the largest.
        let mut big = message(0);
        big[1..5].copy_from_slice(&(BULK as u32).to_be_bytes());
        let mut body = intake("/boxd.v1.Boxd/SendInput", vec![big[..5].to_vec()], &conn);
        assert!(drain(&mut body).await.is_ok());
    }

    #[tokio::test]
    async fn a_connection_past_its_budget_refuses_the_call_that_would_take_it_there() {
        let conn = Arc::new(Connection::default());
        let declare = |len: usize| {
            let mut m = message(0);
            m[1..5].copy_from_slice(&(len as u32).to_be_bytes());
            vec![m[..5].to_vec()]
        };
        let mut first = intake("/boxd.v1.Boxd/SendInput", declare(BULK), &conn);
        assert!(drain(&mut first).await.is_ok());
        let rest = CONNECTION_BUDGET - BULK;
        let mut second = intake("/boxd.v1.Boxd/SendInput", declare(rest), &conn);
        assert!(drain(&mut second).await.is_ok());
        assert_eq!(conn.held(), CONNECTION_BUDGET, "exactly at the budget");
        let mut third = intake("/boxd.v1.Boxd/ListBoxes", declare(1), &conn);
        let e = drain(&mut third).await.unwrap_err();
        assert_eq!(e.code(), boxd_proto::tonic::Code::ResourceExhausted);
        assert!(
            e.message().contains(&CONNECTION_BUDGET.to_string()),
            "{e:?}"
        );
        assert_eq!(conn.held(), CONNECTION_BUDGET);
        drop(first);
        let mut fourth = intake("/boxd.v1.Boxd/ListBoxes", declare(1), &conn);
        assert!(drain(&mut fourth).await.is_ok());
        drop((second, third, fourth));
        assert_eq!(conn.held(), 0);
    }

    #[test]
    fn methods_get_their_bounds() {
        assert_eq!(rule("/boxd.v1.Boxd/Exec").max_message, BULK);
        assert!(rule("/boxd.v1.Boxd/Exec").streaming);
        assert!(rule("/boxd.v1.Boxd/CopyIn").streaming);
        assert!(!rule("/boxd.v1.Boxd/SendInput").streaming);
        assert_eq!(rule("/boxd.v1.Boxd/CreateBox").max_message, SPEC);
        assert_eq!(rule("/boxd.v1.Boxd/ListBoxes").max_message, SMALL);
        assert_eq!(rule("/grpc.health.v1.Health/Check").max_message, SMALL);
        assert!(rule("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo").streaming);
        assert_eq!(rule("nonsense").max_message, SMALL);
    }
}
