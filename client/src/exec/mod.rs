//! A client's side of the bidirectional `Exec` call, resumable.
//!
//! Every exec is started (or attached) `resumable`: the stream tells the
//! daemon which output its caller has taken ([`acks`]), and with
//! [`ExecStream::reconnecting`] it survives losing the daemon: it dials the
//! socket again, attaches by id from the offsets its caller has, and the
//! uplink ([`uplink`]) gives the command the stdin it missed. [`call`]
//! opens one `Exec` call; [`reconnect`] finds the daemon again.
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
mod call;
mod reconnect;
mod uplink;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use boxd_proto::bytes::Bytes;
use boxd_proto::tonic::Status;
use boxd_proto::v1::{self, exec_request::Msg, exec_response::Event};

pub use acks::{ACK_EVERY, OutputOffsets, OutputStream};
pub use reconnect::{RECONNECT_WITHIN, Reconnect};
pub use uplink::{ExecInput, STDIN_KEPT, STDIN_WINDOW};

use crate::Client;
use call::{Link, call, is_transport, poll_once};

/// What an exec sends back, after `started`.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecEvent {
    Stdout(Bytes),
    Stderr(Bytes),
    /// Always the last event.
    Exit(v1::ExecExit),
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
    /// How long to try; [`RECONNECT_WITHIN`] unless set.
    within: Duration,
    hook: Option<Hook>,
    /// The exit was returned.
    exited: bool,
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
            uplink: uplink::Handle::spawn(call, started.stdin_offset, resumable),
            socket: None,
            within: RECONNECT_WITHIN,
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

    /// How long a reconnection tries before it gives up
    /// ([`RECONNECT_WITHIN`] unless set).
    pub fn reconnect_within(mut self, within: Duration) -> ExecStream {
        self.within = within;
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
    /// reattaches. Cancel-safe: dropping it mid-way loses no event (a
    /// reattach under way starts over at the next call).
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
                    Some(Event::StdinOffset(n)) => {
                        // How far the command read: opens the stdin window.
                        self.uplink.given(n);
                        continue;
                    }
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
}

enum Item {
    Response(Option<Result<v1::ExecResponse, Status>>),
    RequestSideEnded,
}
