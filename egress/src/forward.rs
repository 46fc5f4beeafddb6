//! A plain HTTP request to its upstream: hyper's HTTP/1 client over the
//! TCP connection the proxy made itself ([`Proxy::connect`]: its own
//! resolution, after the allow-list), and the response relayed back.
//!
//! **Invariants:** bodies stream both ways (a large upload or download is
//! never held whole), except a `Content-Length` body that secrets are
//! substituted in ([`BodyPlan::Substitute`], at most
//! [`super::request::BODY_LIMIT`]), read whole under the proxy's body
//! budget; the upstream connection lives exactly as long as the response
//! relayed from it ([`Relayed`]), so it closes with the client connection
//! and when [`Proxy::serve`] returns.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper::http::header::{CONNECTION, HeaderValue};
use hyper::http::{Request, Response};
use hyper_util::rt::TokioIo;
use tracing::debug;

use super::proxy::Proxy;
use super::reply::Reply;
use super::request::{BodyPlan, Forward};
use super::traffic::Upstream;

/// A request body as sent upstream: substituted and whole, or the box's.
type UpstreamBody = Either<Full<Bytes>, Incoming>;
/// hyper's client connection to one upstream.
type UpstreamConn = http1::Connection<TokioIo<Upstream>, UpstreamBody>;
/// What the proxy answers with: its own reply, or a relayed response.
pub(super) type ReplyBody = Either<Full<Bytes>, Relayed>;

impl Proxy {
    /// Connects, sends `forward` with `body`, and returns the upstream's
    /// response to relay (its body streaming), or the reply to give instead.
    pub(super) async fn forward(
        &self,
        mut forward: Forward,
        body: Incoming,
    ) -> Result<Response<ReplyBody>, Reply> {
        let (host, port) = (forward.host.clone(), forward.port);
        let upstream = self.connect(&host, port).await?;
        let mut budget = None;
        let body = match forward.body {
            BodyPlan::Substitute(n) => {
                // n <= BODY_LIMIT < BODY_BUDGET: fits a u32 and never waits forever.
                budget = self.bodies.acquire_many(n as u32).await.ok();
                let whole = body.collect().await.map_err(|_| {
                    Reply::bad_request("the request body ended before its Content-Length")
                })?;
                let whole = self.rules.substitute_body(&mut forward, &whole.to_bytes());
                Either::Left(Full::new(whole))
            }
            BodyPlan::Stream => Either::Right(body),
        };
        let lost = |e: hyper::Error| {
            Reply::bad_gateway(format_args!(
                "{host} port {port} closed the connection: {e}"
            ))
        };
        let (mut sender, conn) = http1::Builder::new()
            .title_case_headers(true)
            .preserve_header_case(true)
            .handshake(TokioIo::new(upstream))
            .await
            .map_err(lost)?;
        let mut conn = Some(Box::pin(conn));
        let sent = sender.send_request(Request::from_parts(forward.head, body));
        tokio::pin!(sent);
        // The connection must run for the request to go out; if it ends
        // first, the response (or why there is none) is still delivered.
        let response = loop {
            tokio::select! {
                response = &mut sent => break response,
                ended = async { conn.as_mut().expect("running").await }, if conn.is_some() => {
                    if let Err(e) = ended {
                        debug!(box_name = self.rules.box_name(), host, port, "upstream connection: {e}");
                    }
                    conn = None;
                }
            }
        };
        drop(budget);
        let (mut head, body) = response.map_err(lost)?.into_parts();
        // One request per client connection: hyper closes it after this.
        head.headers
            .insert(CONNECTION, HeaderValue::from_static("close"));
        Ok(Response::from_parts(
            head,
            Either::Right(Relayed { body, conn }),
        ))
    }
}

/// A response body relayed from upstream, driving the upstream connection
/// it comes from as it is read.
pub(super) struct Relayed {
    body: Incoming,
    conn: Option<Pin<Box<UpstreamConn>>>,
}

impl Body for Relayed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(conn) = this.conn.as_mut()
            && let Poll::Ready(ended) = conn.as_mut().poll(cx)
        {
            if let Err(e) = ended {
                debug!("upstream connection: {e}");
            }
            this.conn = None;
        }
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
