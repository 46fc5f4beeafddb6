//! A client's side of the bidirectional `Exec` call.

use boxd_proto::bytes::Bytes;
use boxd_proto::tonic::{Status, Streaming};
use boxd_proto::v1::{self, exec_request::Msg, exec_response::Event};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::Client;

/// What an exec sends back, after `started`.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecEvent {
    Stdout(Bytes),
    Stderr(Bytes),
    /// Always the last event.
    Exit(v1::ExecExit),
}

/// A running exec: send input with [`ExecInput`], read events with
/// [`ExecStream::next`]. Dropping it ends the call; the daemon then kills a
/// non-detached exec.
pub struct ExecStream {
    input: ExecInput,
    responses: Streaming<v1::ExecResponse>,
    exec_id: String,
    launch_ms: u64,
}

/// The sending half of an exec; cheap to clone.
#[derive(Clone, Debug)]
pub struct ExecInput {
    tx: mpsc::Sender<v1::ExecRequest>,
}

impl ExecStream {
    /// Starts a command and waits until it runs.
    pub async fn start(client: &mut Client, start: v1::ExecStart) -> Result<ExecStream, Status> {
        Self::open(client, Msg::Start(start)).await
    }

    /// Attaches to an exec that is already running.
    pub async fn attach(client: &mut Client, exec_id: &str) -> Result<ExecStream, Status> {
        Self::open(
            client,
            Msg::Attach(v1::ExecAttach {
                exec_id: exec_id.to_owned(),
                ..Default::default()
            }),
        )
        .await
    }

    async fn open(client: &mut Client, first: Msg) -> Result<ExecStream, Status> {
        let (tx, rx) = mpsc::channel(16);
        tx.send(v1::ExecRequest { msg: Some(first) })
            .await
            .expect("receiver is alive");
        let mut responses = client.exec(ReceiverStream::new(rx)).await?.into_inner();
        match responses.message().await? {
            Some(v1::ExecResponse {
                event: Some(Event::Started(s)),
            }) => Ok(ExecStream {
                input: ExecInput { tx },
                responses,
                exec_id: s.exec_id,
                launch_ms: s.launch_ms,
            }),
            Some(other) => Err(Status::internal(format!(
                "expected `started`, daemon sent {other:?}"
            ))),
            None => Err(Status::unavailable(
                "boxd closed the exec stream before it started",
            )),
        }
    }

    pub fn exec_id(&self) -> &str {
        &self.exec_id
    }

    pub fn launch_ms(&self) -> u64 {
        self.launch_ms
    }

    pub fn input(&self) -> ExecInput {
        self.input.clone()
    }

    /// The next event; `None` after the exit (or if the daemon went away
    /// without one, which is reported as an error instead).
    pub async fn next(&mut self) -> Result<Option<ExecEvent>, Status> {
        loop {
            return match self.responses.message().await.map_err(crate::lost_daemon)? {
                None => Err(Status::unavailable(
                    "boxd ended the exec stream without an exit",
                )),
                Some(v1::ExecResponse { event }) => Ok(match event {
                    Some(Event::Stdout(b)) => Some(ExecEvent::Stdout(b)),
                    Some(Event::Stderr(b)) => Some(ExecEvent::Stderr(b)),
                    Some(Event::Exit(e)) => Some(ExecEvent::Exit(e)),
                    Some(Event::StdinOffset(_)) => continue,
                    Some(Event::Started(_)) | None => {
                        return Err(Status::internal("unexpected message on the exec stream"));
                    }
                }),
            };
        }
    }

    /// Splits into the input half and the event half.
    pub fn into_parts(self) -> (ExecInput, Streaming<v1::ExecResponse>) {
        (self.input, self.responses)
    }
}

impl ExecInput {
    async fn send(&self, msg: Msg) -> Result<(), Status> {
        self.tx
            .send(v1::ExecRequest { msg: Some(msg) })
            .await
            .map_err(|_| Status::cancelled("the exec stream has ended"))
    }

    /// Sends bytes to the command's stdin; waits while the command is not
    /// reading (backpressure).
    pub async fn stdin(&self, data: Vec<u8>) -> Result<(), Status> {
        self.send(Msg::Stdin(data.into())).await
    }

    pub async fn close_stdin(&self) -> Result<(), Status> {
        self.send(Msg::CloseStdin(true)).await
    }

    pub async fn signal(&self, signal: impl Into<String>) -> Result<(), Status> {
        self.send(Msg::Signal(v1::Signal {
            signal: signal.into(),
        }))
        .await
    }

    pub async fn resize(&self, rows: u32, cols: u32) -> Result<(), Status> {
        self.send(Msg::Resize(v1::TtySize { rows, cols })).await
    }
}
