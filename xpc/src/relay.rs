//! One client connection's relay: request frames in, reply and event frames
//! out, the JSONL driver in between. Transport-neutral: the XPC code feeds
//! frames with [`Relay::send`] and delivers what `on_frame` receives.
//!
//! **Invariants:** the first frame out is `transport`; frames go out whole,
//! one per call; dropping the relay ends the driver's input, which kills the
//! execs it started (boxes stay).

use std::path::PathBuf;

use bytes::Bytes;
use futures::StreamExt;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::StreamReader;

/// The sending side of a relay.
pub struct Relay {
    tx: mpsc::Sender<Vec<u8>>,
}

impl Relay {
    /// Starts the driver for one connection on the current tokio runtime.
    /// `on_frame` gets every outgoing frame, without its newline.
    pub fn start<F>(socket: PathBuf, on_frame: F) -> (Relay, JoinHandle<()>)
    where
        F: FnMut(Vec<u8>) + Send + Unpin + 'static,
    {
        let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
        let input = StreamReader::new(ReceiverStream::new(rx).map(|mut frame| {
            frame.push(b'\n');
            Ok::<_, std::io::Error>(Bytes::from(frame))
        }));
        let output = Frames {
            partial: Vec::new(),
            on_frame,
        };
        let task = tokio::spawn(async move {
            let _ = boxd_client::jsonl::driver::serve(&socket, input, output).await;
        });
        (Relay { tx }, task)
    }

    /// Passes one request frame to the driver (waits while it is busy).
    pub async fn send(&self, frame: Vec<u8>) -> bool {
        self.tx.send(frame).await.is_ok()
    }

    /// The same, from a thread that is not the runtime's (XPC's queues).
    pub fn blocking_send(&self, frame: Vec<u8>) -> bool {
        self.tx.blocking_send(frame).is_ok()
    }
}

/// Splits the driver's output into frames.
struct Frames<F> {
    partial: Vec<u8>,
    on_frame: F,
}

impl<F: FnMut(Vec<u8>) + Unpin> AsyncWrite for Frames<F> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let mut rest = buf;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            this.partial.extend_from_slice(&rest[..i]);
            (this.on_frame)(std::mem::take(&mut this.partial));
            rest = &rest[i + 1..];
        }
        this.partial.extend_from_slice(rest);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}
