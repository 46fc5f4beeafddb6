//! A client's side of the bidirectional `Exec` call, resumable.
//!
//! Every exec is started (or attached) `resumable`: the stream tells the
//! daemon which output its caller has taken ([`acks`]), and with
//! [`ExecStream::reconnecting`] it survives losing the daemon: it dials the
//! socket again, attaches by id from the offsets its caller has, and the
//! uplink ([`uplink`]) gives the command the stdin it missed.
//!
//! Invariants:
//! - the caller gets each byte of each stream at most once, in order;
//!   bytes the daemon no longer keeps are reported ([`Reconnect::Gap`]),
//!   never skipped silently;
//! - nothing is acknowledged that [`ExecStream::next`] has not returned;
//! - reconnecting never starts a daemon, never trusts a socket `connect`
//!   refuses, and gives up after [`RECONNECT_WITHIN`] or at once when the
//!   daemon that answers does not know the exec.

mod acks;
mod uplink;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use boxd_proto::bytes::Bytes;
use boxd_proto::tonic::{Code, Status, Streaming};
use boxd_proto::v1::{self, exec_request::Msg, exec_response::Event};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, WatchStream};

pub use acks::{ACK_EVERY, OutputOffsets, OutputStream};
pub use uplink::{ExecInput, STDIN_KEPT};

use crate::{Client, ConnectError};

/// How long a reconnecting stream tries to reach the daemon again.
pub const RECONNECT_WITHIN: Duration = Duration::from_secs(30);
/// The first pause between attempts; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(500);
/// Requests waiting for one call's request stream.
const CALL_QUEUE: usize = 16;

/// What an exec sends back, after `started`.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecEvent {
    Stdout(Bytes),
    Stderr(Bytes),
    /// Always the last event.
    Exit(v1::ExecExit),
}

/// What a reconnecting stream went through, for its owner to tell the
/// user (see [`ExecStream::on_reconnect`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Reconnect {
    /// The connection to boxd failed; reattaching.
    Lost { exec_id: String, error: String },
    /// Reattached: output continues where the caller is, stdin from where
    /// the command had it (`stdin_resent` bytes sent again).
    Reattached {
        exec_id: String,
        after: Duration,
        attempts: u32,
        stdin_resent: u64,
    },
    /// Output lost: the daemon that came back no longer keeps `from..to`
    /// of `stream`; the next bytes of that stream are from `to` on.
    Gap {
        exec_id: String,
        stream: OutputStream,
        from: u64,
        to: u64,
    },
}

type Hook = Arc<dyn Fn(&Reconnect) + Send + Sync>;

/// A running exec: send input with [`ExecInput`], read events with
/// [`ExecStream::next`]. Dropping it ends the call; the daemon then kills a
/// non-detached exec this stream started.
pub struct ExecStream {
    exec_id: String,
    launch_ms: u64,
    resumable: bool,
    link: Link,
    position: acks::Position,
    uplink: uplink::Handle,
    /// Set by [`ExecStream::reconnecting`].
    socket: Option<PathBuf>,
    hook: Option<Hook>,
    /// The exit was returned.
    exited: bool,
}

/// The response side of the current call, and where its acknowledgements
/// go.
struct Link {
    responses: Streaming<v1::ExecResponse>,
    acks: watch::Sender<Option<v1::ExecAck>>,
    /// Fires when the uplink finds the call's request side ended.
    broken: Option<oneshot::Receiver<()>>,
}

impl ExecStream {
    /// Starts a command (`resumable`, whatever `start` says) and waits
    /// until it runs.
    pub async fn start(client: &mut Client, start: v1::ExecStart) -> Result<ExecStream, Status> {
        Self::open(
            client,
            Msg::Start(v1::ExecStart {
                resumable: true,
                ..start
            }),
            true,
        )
        .await
    }

    /// Attaches to an exec, resumable, from the start of the output it
    /// keeps (replayed first: up to its last 1 MiB).
    pub async fn attach(client: &mut Client, exec_id: &str) -> Result<ExecStream, Status> {
        Self::attach_with(
            client,
            v1::ExecAttach {
                exec_id: exec_id.to_owned(),
                resumable: true,
                ..Default::default()
            },
        )
        .await
    }

    /// Attaches as `attach` says: from its offsets, and resumable or not (a
    /// stream that is not acknowledges nothing; the daemon takes output as
    /// acknowledged once handed to the connection, so such a reader never
    /// holds the command back beyond the connection's own flow control).
    pub async fn attach_with(
        client: &mut Client,
        attach: v1::ExecAttach,
    ) -> Result<ExecStream, Status> {
        let resumable = attach.resumable;
        Self::open(client, Msg::Attach(attach), resumable).await
    }

    async fn open(client: &mut Client, first: Msg, resumable: bool) -> Result<ExecStream, Status> {
        let (link, call, started) = call(client, first).await?;
        Ok(ExecStream {
            exec_id: started.exec_id,
            launch_ms: started.launch_ms,
            resumable,
            link,
            position: acks::Position::new(OutputOffsets {
                stdout: started.stdout_offset,
                stderr: started.stderr_offset,
            }),
            uplink: uplink::Handle::spawn(call),
            socket: None,
            hook: None,
            exited: false,
        })
    }

    /// Turns on transparent reconnection: when the call fails (a transport
    /// error, a stream that ends without the exit, a request side that
    /// ends), dial `socket` again (never starting a daemon) for up to
    /// [`RECONNECT_WITHIN`] and attach from where the caller is.
    pub fn reconnecting(mut self, socket: impl Into<PathBuf>) -> ExecStream {
        self.socket = Some(socket.into());
        self
    }

    /// Calls `hook` (on the task calling [`ExecStream::next`]) when a
    /// reconnection starts, when it succeeds, and for each gap in the
    /// output. Replaces any earlier hook.
    pub fn on_reconnect(mut self, hook: impl Fn(&Reconnect) + Send + Sync + 'static) -> ExecStream {
        self.hook = Some(Arc::new(hook));
        self
    }

    pub fn exec_id(&self) -> &str {
        &self.exec_id
    }

    pub fn launch_ms(&self) -> u64 {
        self.launch_ms
    }

    /// The offsets of the next bytes the caller gets: where the output
    /// began (`ExecStarted`) plus what [`ExecStream::next`] returned.
    pub fn offsets(&self) -> OutputOffsets {
        self.position.at()
    }

    pub fn input(&self) -> ExecInput {
        self.uplink.input.clone()
    }

    /// The next event; `None` after the exit. A daemon that goes away
    /// without an exit is an error, unless the stream is reconnecting and
    /// reattaches.
    pub async fn next(&mut self) -> Result<Option<ExecEvent>, Status> {
        if self.exited {
            return self.after_exit().await;
        }
        loop {
            let item = match poll_once(&mut self.link.responses).await {
                Some(item) => Item::Response(item),
                None => {
                    // About to wait: say what the caller took so far.
                    if self.resumable
                        && let Some(ack) = self.position.idle()
                    {
                        self.link.acks.send_replace(Some(ack));
                    }
                    self.wait().await
                }
            };
            let failure = match item {
                Item::Response(Some(Ok(v1::ExecResponse { event }))) => match event {
                    Some(Event::Stdout(b)) => match self.took(OutputStream::Stdout, b) {
                        Some(b) => return Ok(Some(ExecEvent::Stdout(b))),
                        None => continue,
                    },
                    Some(Event::Stderr(b)) => match self.took(OutputStream::Stderr, b) {
                        Some(b) => return Ok(Some(ExecEvent::Stderr(b))),
                        None => continue,
                    },
                    Some(Event::Exit(e)) => {
                        self.exited = true;
                        return Ok(Some(ExecEvent::Exit(e)));
                    }
                    Some(Event::StdinOffset(_)) => continue,
                    Some(Event::Started(_)) | None => {
                        return Err(Status::internal("unexpected message on the exec stream"));
                    }
                },
                Item::Response(Some(Err(s))) if is_transport(&s) => crate::lost_daemon(s),
                Item::Response(Some(Err(s))) => return Err(s),
                Item::Response(None) => {
                    Status::unavailable("boxd ended the exec stream without an exit")
                }
                Item::RequestSideEnded => {
                    if self.socket.is_none() {
                        // Nothing to do about it; the response side tells
                        // the rest.
                        continue;
                    }
                    Status::unavailable("the exec stream stopped taking input")
                }
            };
            self.reattach(failure).await?;
        }
    }

    /// A chunk arrived: the part the caller does not have yet, counted as
    /// taken (and acknowledged every [`ACK_EVERY`] bytes).
    fn took(&mut self, stream: OutputStream, data: Bytes) -> Option<Bytes> {
        let (data, ack) = self.position.take(stream, data);
        if self.resumable
            && let Some(ack) = ack
        {
            self.link.acks.send_replace(Some(ack));
        }
        (!data.is_empty()).then_some(data)
    }

    /// Waits for the next response, or for the request side to end.
    async fn wait(&mut self) -> Item {
        loop {
            let responses = &mut self.link.responses;
            let slot = &mut self.link.broken;
            let broken = async {
                match slot.as_mut() {
                    Some(b) => b.await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                item = responses.message() => return Item::Response(item.transpose()),
                fired = broken => {
                    // Fired, or let go without firing: either way, once.
                    self.link.broken = None;
                    if fired {
                        return Item::RequestSideEnded;
                    }
                }
            }
        }
    }

    /// After the exit: `None`, once the daemon ended the stream (anything
    /// more from it breaks the protocol).
    async fn after_exit(&mut self) -> Result<Option<ExecEvent>, Status> {
        match self.link.responses.message().await {
            Ok(Some(_)) => Err(Status::internal(
                "boxd sent an event after the exit of the exec",
            )),
            Ok(None) | Err(_) => Ok(None),
        }
    }

    fn tell(&self, what: Reconnect) {
        if let Some(hook) = &self.hook {
            hook(&what);
        }
    }

    /// The call failed with `error`: reattach if reconnecting, else return
    /// the error.
    async fn reattach(&mut self, error: Status) -> Result<(), Status> {
        let Some(socket) = self.socket.clone() else {
            return Err(error);
        };
        self.uplink.unlink();
        self.tell(Reconnect::Lost {
            exec_id: self.exec_id.clone(),
            error: error.message().to_owned(),
        });
        let began = Instant::now();
        let deadline = began + RECONNECT_WITHIN;
        let mut pause = BACKOFF_FIRST;
        let mut last;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.try_reattach(&socket)).await {
                Ok(Ok(stdin_resent)) => {
                    self.tell(Reconnect::Reattached {
                        exec_id: self.exec_id.clone(),
                        after: began.elapsed(),
                        attempts,
                        stdin_resent,
                    });
                    return Ok(());
                }
                Ok(Err(Attempt::Fatal(s))) => return Err(s),
                Ok(Err(Attempt::Retry(why))) => last = why,
                Err(_) => last = "boxd did not answer".to_owned(),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Status::unavailable(format!(
                    "lost boxd and could not reattach to exec {} within {} s: {last}",
                    self.exec_id,
                    RECONNECT_WITHIN.as_secs()
                )));
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(BACKOFF_MAX);
        }
    }

    /// One attempt: connect, attach from our offsets, hand the uplink the
    /// new call. Returns how many stdin bytes are resent.
    async fn try_reattach(&mut self, socket: &std::path::Path) -> Result<u64, Attempt> {
        let mut client = match crate::connect(socket).await {
            Ok(c) => c,
            Err(e @ ConnectError::Untrusted { .. }) => {
                return Err(Attempt::Fatal(Status::permission_denied(e.to_string())));
            }
            Err(e @ ConnectError::Protocol { .. }) => {
                return Err(Attempt::Fatal(Status::failed_precondition(e.to_string())));
            }
            Err(e) => return Err(Attempt::Retry(e.to_string())),
        };
        let at = self.position.at();
        let attach = v1::ExecAttach {
            exec_id: self.exec_id.clone(),
            stdout_offset: at.stdout,
            stderr_offset: at.stderr,
            resumable: self.resumable,
        };
        let (link, call, started) = match call(&mut client, Msg::Attach(attach)).await {
            Ok(ok) => ok,
            Err(s) if s.code() == Code::NotFound => {
                return Err(Attempt::Fatal(Status::not_found(format!(
                    "exec {} is gone: the daemon that came back does not know it",
                    self.exec_id
                ))));
            }
            Err(s) if is_transport(&s) || s.code() == Code::Unavailable => {
                return Err(Attempt::Retry(s.message().to_owned()));
            }
            Err(s) => return Err(Attempt::Fatal(s)),
        };
        if started.exec_id != self.exec_id {
            return Err(Attempt::Fatal(Status::internal(format!(
                "asked to attach to exec {}, boxd attached to {}",
                self.exec_id, started.exec_id
            ))));
        }
        let resent = self
            .uplink
            .relink(call, started.stdin_offset)
            .await
            .map_err(Attempt::Fatal)?;
        let gaps = self.position.resume(OutputOffsets {
            stdout: started.stdout_offset,
            stderr: started.stderr_offset,
        });
        self.link = link;
        for g in gaps {
            self.tell(Reconnect::Gap {
                exec_id: self.exec_id.clone(),
                stream: g.stream,
                from: g.from,
                to: g.to,
            });
        }
        Ok(resent)
    }
}

enum Item {
    Response(Option<Result<v1::ExecResponse, Status>>),
    RequestSideEnded,
}

enum Attempt {
    Retry(String),
    Fatal(Status),
}

/// A status made here from a broken connection carries its transport error
/// as a source; statuses from boxd never do.
fn is_transport(s: &Status) -> bool {
    std::error::Error::source(s).is_some()
}

/// The next response if one is ready, without waiting.
async fn poll_once(
    responses: &mut Streaming<v1::ExecResponse>,
) -> Option<Option<Result<v1::ExecResponse, Status>>> {
    std::future::poll_fn(|cx| match Pin::new(&mut *responses).poll_next(cx) {
        Poll::Ready(item) => Poll::Ready(Some(item)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Opens one `Exec` call with `first` and waits for `started`.
async fn call(
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
