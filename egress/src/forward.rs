//! A planned request ([`Forward`]) to its upstream and the response back
//! to the box, for plain HTTP and for requests inside an intercepted
//! tunnel alike: through the proxy's one hyper client
//! ([`super::upstream`]), bodies streaming both ways.
//!
//! **Invariants:** bodies stream both ways (a large upload or download is
//! never held whole), except a `Content-Length` body for a secret's host
//! ([`BodyPlan::Substitute`], at most [`super::request::BODY_LIMIT`]),
//! read whole under the proxy's body budget; what a secret's host answers
//! reaches the box with the secret's value replaced by its placeholder
//! ([`super::redact`]), so its `Content-Length` is dropped (the body is
//! re-framed); an HTTP/1 upgrade (a WebSocket) the upstream accepts is
//! relayed as bytes, and ends when the proxy does.

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::http::header::{self, HeaderValue};
use hyper::http::{Method, Request, Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::debug;

use super::proxy::Proxy;
use super::redact::Redacted;
use super::reply::Reply;
use super::request::{BodyPlan, Forward, Why};
use super::upstream;

/// What the proxy answers with: its own reply, or a relayed response.
pub(crate) type ReplyBody = Either<Full<Bytes>, Redacted<Incoming>>;

impl Proxy {
    /// Sends `forward` with `body` and returns the upstream's response to
    /// relay (its body streaming), or the reply to give instead. `upgrade`:
    /// the box's side of an HTTP/1 upgrade it asked for.
    pub(crate) async fn send(
        &self,
        mut forward: Forward,
        body: Incoming,
        upgrade: Option<OnUpgrade>,
    ) -> Result<Response<ReplyBody>, Reply> {
        let (host, port) = (forward.host.clone(), forward.port);
        let mut budget = None;
        let body = match forward.body {
            BodyPlan::Substitute(n) => {
                // n <= BODY_LIMIT < BODY_BUDGET: fits a u32 and never waits forever.
                budget = self.bodies.acquire_many(n as u32).await.ok();
                let whole = body.collect().await.map_err(|_| {
                    Reply::bad_request("the request body ended before its Content-Length")
                })?;
                let whole = self
                    .rules
                    .substitute_body(&mut forward, &whole.to_bytes())?;
                Either::Left(Full::new(whole))
            }
            BodyPlan::Stream => Either::Right(body),
        };
        let head_only = forward.head.method == Method::HEAD;
        let sent = self
            .client
            .request(Request::from_parts(forward.head, body))
            .await;
        drop(budget);
        let mut response = sent.map_err(|e| match upstream::dial_error(&e) {
            Some(dial) => {
                if let Some(reason) = &dial.cert {
                    self.rules.report(
                        &host,
                        port,
                        Why::Upstream {
                            reason: reason.clone(),
                        },
                    );
                }
                dial.reply.clone()
            }
            None => Reply::bad_gateway(format_args!(
                "{host} port {port} closed the connection: {e}"
            )),
        })?;
        if response.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client) = upgrade
        {
            self.relay_upgrade(client, hyper::upgrade::on(&mut response), &host, port);
        }
        let (mut head, body) = response.into_parts();
        let redactor = self.rules.redactor(&host);
        if !redactor.is_empty() {
            redactor.headers(&mut head.headers);
            let bodiless = head_only
                || head.status.is_informational()
                || matches!(
                    head.status,
                    StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
                );
            if !bodiless {
                head.headers.remove(header::CONTENT_LENGTH);
            }
        }
        if forward.plain {
            // One request per client connection: hyper closes it after this.
            head.headers
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Ok(Response::from_parts(
            head,
            Either::Right(redactor.body(body)),
        ))
    }

    /// Relays the bytes of an upgraded connection (both sides said 101)
    /// until either side closes or the proxy stops.
    fn relay_upgrade(&self, client: OnUpgrade, upstream: OnUpgrade, host: &str, port: u16) {
        let closing = self.closing.clone();
        let (box_name, host) = (self.rules.box_name().to_owned(), host.to_owned());
        tokio::spawn(async move {
            let relay = async {
                let (client, upstream) =
                    tokio::try_join!(client, upstream).map_err(|e| e.to_string())?;
                let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
                tokio::io::copy_bidirectional(&mut client, &mut upstream)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            };
            tokio::select! {
                _ = closing.cancelled() => {}
                ended = relay => if let Err(e) = ended {
                    debug!(box_name, host, port, "upgraded connection ended: {e}");
                },
            }
        });
    }
}
