//! For the fuzz targets only: a request head parsed by the proxy's own
//! hyper server ([`super::proxy::server`]) from raw bytes, in memory.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use hyper::http::{Request, Response, request};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

/// The first request in `bytes` as the proxy would see it, with up to
/// 1 MiB of its body; `None` when hyper refuses the head. Needs a Tokio
/// runtime with timers.
pub async fn parse(bytes: &[u8]) -> Option<(request::Parts, Bytes)> {
    let (mut near, far) = tokio::io::duplex(bytes.len() + (1 << 20));
    let first = Arc::new(Mutex::new(None));
    let service = {
        let first = first.clone();
        service_fn(move |request: Request<Incoming>| {
            let first = first.clone();
            async move {
                let (head, body) = request.into_parts();
                let body = Limited::new(body, 1 << 20)
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                first.lock().expect("first").get_or_insert((head, body));
                Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
            }
        })
    };
    let conn = super::proxy::server().serve_connection(TokioIo::new(far), service);
    let feed = async {
        let _ = near.write_all(bytes).await;
        let _ = near.shutdown().await;
        near
    };
    let (_, near) = tokio::join!(conn, feed);
    drop(near);
    first.lock().expect("first").take()
}

/// `answer` cut at `cuts` into chunks, through `redactor` as a response
/// body, joined again.
pub async fn redact(redactor: &crate::redact::Redactor, answer: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut chunks = std::collections::VecDeque::new();
    let mut at = 0;
    for &cut in cuts.iter().chain(std::iter::once(&answer.len())) {
        let cut = cut.clamp(at, answer.len());
        chunks.push_back(Bytes::copy_from_slice(&answer[at..cut]));
        at = cut;
    }
    let collected = redactor.body(Chunks(chunks)).collect().await;
    collected.map(|c| c.to_bytes().to_vec()).unwrap_or_default()
}

/// A body of the given chunks.
struct Chunks(std::collections::VecDeque<Bytes>);

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(hyper::body::Frame::data(b))))
    }
}
