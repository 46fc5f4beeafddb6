//! A running exec as the daemon holds it: an [`ExecHandle`] whose output
//! is an [`ExecLog`] read through subscriptions, each from offsets of its
//! own, and [`LocalExec`], the handle over a [`Process`] whose pipes this
//! process reads (the BoxLite engine's in the daemon; the namespace
//! engine's in each box's supervisor, served to the daemon over a socket).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{ExitStatus, Process, ProcessControl};
use crate::error::{Error, Result};
use crate::exec_log::{Cursor, Event, ExecLog, Offsets, Stream};

/// After the process exits, output still arriving (from a background
/// process holding the pipe) is read until the pipe is quiet this long.
const QUIET_AFTER_EXIT: std::time::Duration = std::time::Duration::from_millis(100);
const CHUNK: usize = 128 * 1024;

/// What a subscription reads, and how its reader acknowledges it.
pub struct Subscription {
    /// Where the output that follows begins in each stream.
    pub start: Offsets,
    /// Bytes of stdin the command has been given so far.
    pub stdin_offset: u64,
    /// Output in order, then the exit; ends after the exit (or when the
    /// exec's engine went away, without one).
    pub events: mpsc::Receiver<Event>,
    pub acks: Box<dyn Acks>,
}

/// Acknowledgements of one subscription: cumulative offsets it took.
pub trait Acks: Send + Sync {
    fn ack(&self, upto: Offsets);
}

/// A running (or finished, and kept) exec.
#[async_trait]
pub trait ExecHandle: Send + Sync {
    /// A new reader of the output from `from` on (as far back as kept).
    async fn subscribe(&self, from: Offsets) -> Result<Subscription>;
    /// Writes `data`, whose first byte is byte `at` of the stdin stream, to
    /// the command's stdin, waiting while it does not read. Bytes it was
    /// given already are skipped (a reattaching client resends them).
    /// Returns the bytes of stdin the command has now been given.
    async fn write_stdin(&self, at: u64, data: Bytes) -> Result<u64>;
    async fn close_stdin(&self) -> Result<()>;
    async fn signal(&self, signal: i32) -> Result<()>;
    async fn resize(&self, rows: u16, cols: u16) -> Result<()>;
    /// Resolves with the exit (after the last output was logged).
    async fn wait(&self) -> ExitStatus;
}

/// A freshly started exec and its first subscription (from offset 0, so
/// that none of its output can go before its client reads it).
pub struct Started {
    pub handle: Arc<dyn ExecHandle>,
    pub first: Subscription,
}

enum StdinMsg {
    /// Bytes from offset `.0` of the stdin stream; answered with the
    /// offset reached, or an error.
    Data(u64, Bytes, tokio::sync::oneshot::Sender<Result<u64>>),
    Close,
}

/// An exec whose process this process holds: its pipes are pumped into
/// the log, its stdin written in order.
pub struct LocalExec {
    log: Arc<ExecLog>,
    stdin: Option<mpsc::Sender<StdinMsg>>,
    control: Arc<dyn ProcessControl>,
}

impl LocalExec {
    /// Pumps `process` into a new log. `detached`: its output runs on
    /// while nobody reads it (keeping the last [`crate::exec_log::KEEP`]).
    pub fn start(process: Process, detached: bool) -> Arc<LocalExec> {
        let log = Arc::new(ExecLog::new(detached));
        let stdin = process.stdin.map(|w| stdin_writer(w, log.clone()));
        let exec = Arc::new(LocalExec {
            log: log.clone(),
            stdin,
            control: process.control,
        });
        tokio::spawn(pump(log, process.stdout, process.stderr, process.exit));
        exec
    }

    pub fn log(&self) -> &Arc<ExecLog> {
        &self.log
    }

    /// A subscription fed by a task; it leaves the log when its reader
    /// goes.
    pub fn subscription(log: &Arc<ExecLog>, from: Offsets) -> Subscription {
        let cursor = log.join(from);
        let (start, stdin_offset) = (cursor.start, log.stdin_offset());
        let (tx, rx) = mpsc::channel(8);
        let shared = Arc::new(CursorAcks {
            log: log.clone(),
            id: cursor.id(),
        });
        tokio::spawn(feed(log.clone(), cursor, tx));
        Subscription {
            start,
            stdin_offset,
            events: rx,
            acks: Box::new(shared),
        }
    }
}

struct CursorAcks {
    log: Arc<ExecLog>,
    id: u64,
}

impl Acks for Arc<CursorAcks> {
    fn ack(&self, upto: Offsets) {
        self.log.ack_id(self.id, upto);
    }
}

async fn feed(log: Arc<ExecLog>, mut cursor: Cursor, tx: mpsc::Sender<Event>) {
    'outer: loop {
        let events = tokio::select! {
            e = log.next(&mut cursor) => e,
            _ = tx.closed() => break,
        };
        if events.is_empty() {
            break;
        }
        for e in events {
            if tx.send(e).await.is_err() {
                break 'outer;
            }
        }
    }
    log.leave(&cursor);
}

fn stdin_writer(
    mut w: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    log: Arc<ExecLog>,
) -> mpsc::Sender<StdinMsg> {
    let (tx, mut rx) = mpsc::channel::<StdinMsg>(8);
    tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            match msg {
                StdinMsg::Data(at, d, done) => {
                    // Written here, one message at a time, so that bytes
                    // sent twice (by a reattaching client) are skipped.
                    let have = log.stdin_offset();
                    if at > have {
                        let _ = done.send(Err(Error::InvalidArgument(format!(
                            "stdin from byte {at}, but the command has only {have} bytes"
                        ))));
                        continue;
                    }
                    let skip = ((have - at) as usize).min(d.len());
                    let d = d.slice(skip..);
                    let ok =
                        d.is_empty() || (w.write_all(&d).await.is_ok() && w.flush().await.is_ok());
                    if ok {
                        log.add_stdin(d.len() as u64);
                    }
                    let _ = done.send(if ok {
                        Ok(log.stdin_offset())
                    } else {
                        Err(stdin_gone())
                    });
                    if !ok {
                        break;
                    }
                }
                StdinMsg::Close => break,
            }
        }
        let _ = w.shutdown().await;
    });
    tx
}

/// Reads the process's streams into the log (only while it has room),
/// then records the exit.
async fn pump(
    log: Arc<ExecLog>,
    stdout: super::Output,
    stderr: Option<super::Output>,
    exit: futures::future::BoxFuture<'static, ExitStatus>,
) {
    let (exited_tx, exited_rx) = tokio::sync::watch::channel(false);
    let out = tokio::spawn(read_stream(
        stdout,
        Stream::Stdout,
        log.clone(),
        exited_rx.clone(),
    ));
    let err = stderr.map(|s| tokio::spawn(read_stream(s, Stream::Stderr, log.clone(), exited_rx)));
    let status = exit.await;
    exited_tx.send_replace(true);
    let _ = out.await;
    if let Some(err) = err {
        let _ = err.await;
    }
    log.finish(status);
}

async fn read_stream(
    mut r: super::Output,
    stream: Stream,
    log: Arc<ExecLog>,
    mut exited: tokio::sync::watch::Receiver<bool>,
) {
    let mut buf = BytesMut::new();
    loop {
        log.room().await;
        // Chunks are handed on without copying: each read fills fresh space.
        buf.reserve(CHUNK);
        let read = if *exited.borrow() {
            match tokio::time::timeout(QUIET_AFTER_EXIT, r.read_buf(&mut buf)).await {
                Ok(res) => res,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                res = r.read_buf(&mut buf) => res,
                _ = exited.changed() => continue,
            }
        };
        match read {
            Ok(0) | Err(_) => break, // EOF, or EIO from a pty whose slave closed
            Ok(_) => log.append(stream, buf.split().freeze()),
        }
    }
}

fn stdin_gone() -> Error {
    Error::FailedPrecondition("the command no longer reads stdin".into())
}

#[async_trait]
impl ExecHandle for LocalExec {
    async fn subscribe(&self, from: Offsets) -> Result<Subscription> {
        Ok(LocalExec::subscription(&self.log, from))
    }

    async fn write_stdin(&self, at: u64, data: Bytes) -> Result<u64> {
        let tx = self.stdin.as_ref().ok_or_else(no_stdin)?;
        let (done, written) = tokio::sync::oneshot::channel();
        tx.send(StdinMsg::Data(at, data, done))
            .await
            .map_err(|_| stdin_gone())?;
        written.await.map_err(|_| stdin_gone())?
    }

    async fn close_stdin(&self) -> Result<()> {
        let tx = self.stdin.as_ref().ok_or_else(no_stdin)?;
        // The writer may be gone already (the command exited); that is EOF too.
        let _ = tx.send(StdinMsg::Close).await;
        Ok(())
    }

    async fn signal(&self, signal: i32) -> Result<()> {
        if self.log.exit().is_some() {
            return Ok(());
        }
        self.control.signal(signal)
    }

    async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        self.control.resize(rows, cols)
    }

    async fn wait(&self) -> ExitStatus {
        self.log.wait().await
    }
}

fn no_stdin() -> Error {
    Error::FailedPrecondition("the exec was started without stdin".into())
}
