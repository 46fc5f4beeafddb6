//! One `Exec` call: its request stream (acknowledgements first, then what
//! the uplink sends) and its response side.

use std::pin::Pin;
use std::task::{Context, Poll};

use boxd_proto::tonic::{Status, Streaming};
use boxd_proto::v1::{self, exec_request::Msg, exec_response::Event};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, WatchStream};

use super::uplink;
use crate::Client;

/// Requests waiting for one call's request stream.
const CALL_QUEUE: usize = 16;

/// The response side of the current call, and where its acknowledgements
/// go.
pub struct Link {
    pub responses: Streaming<v1::ExecResponse>,
    pub acks: watch::Sender<Option<v1::ExecAck>>,
    /// Fires when the uplink finds the call's request side ended.
    pub broken: Option<oneshot::Receiver<()>>,
}

/// A status made here from a broken connection carries its transport error
/// as a source; statuses from boxd never do.
pub fn is_transport(s: &Status) -> bool {
    std::error::Error::source(s).is_some()
}

/// The next response if one is ready, without waiting.
pub async fn poll_once(
    responses: &mut Streaming<v1::ExecResponse>,
) -> Option<Option<Result<v1::ExecResponse, Status>>> {
    std::future::poll_fn(|cx| match Pin::new(&mut *responses).poll_next(cx) {
        Poll::Ready(item) => Poll::Ready(Some(item)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Opens one `Exec` call with `first` and waits for `started`.
pub async fn call(
    client: &mut Client,
    first: Msg,
) -> Result<(Link, uplink::Call, v1::ExecStarted), Status> {
    let (tx, rx) = mpsc::channel(CALL_QUEUE);
    let (acks, acks_rx) = watch::channel(None);
    let (broken, broken_rx) = oneshot::channel();
    let body = Body {
        first: Some(v1::ExecRequest { msg: Some(first) }),
        acks: Some(WatchStream::from_changes(acks_rx)),
        rest: ReceiverStream::new(rx),
    };
    let mut responses = client.exec(body).await?.into_inner();
    match responses.message().await? {
        Some(v1::ExecResponse {
            event: Some(Event::Started(started)),
        }) => Ok((
            Link {
                responses,
                acks,
                broken: Some(broken_rx),
            },
            uplink::Call { tx, broken },
            started,
        )),
        Some(other) => Err(Status::internal(format!(
            "expected `started`, daemon sent {other:?}"
        ))),
        None => Err(Status::unavailable(
            "boxd closed the exec stream before it started",
        )),
    }
}

/// One call's request stream: the first request, then acknowledgements
/// (the latest, ahead of anything else) and whatever the uplink sends.
/// It ends when the uplink lets go of the call.
struct Body {
    first: Option<v1::ExecRequest>,
    acks: Option<WatchStream<Option<v1::ExecAck>>>,
    rest: ReceiverStream<v1::ExecRequest>,
}

impl Stream for Body {
    type Item = v1::ExecRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(first));
        }
        if let Some(acks) = self.acks.as_mut() {
            match Pin::new(acks).poll_next(cx) {
                Poll::Ready(Some(Some(ack))) => {
                    return Poll::Ready(Some(v1::ExecRequest {
                        msg: Some(Msg::Ack(ack)),
                    }));
                }
                Poll::Ready(None) => self.acks = None,
                Poll::Ready(Some(None)) | Poll::Pending => {}
            }
        }
        Pin::new(&mut self.rest).poll_next(cx)
    }
}
