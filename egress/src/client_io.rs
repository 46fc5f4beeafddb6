//! The box's side of one proxy connection as hyper sees it: the accepted
//! TCP stream, whose writes (and shutdown) are dropped until a request
//! head has reached the proxy.
//!
//! hyper answers a head it cannot parse with a bare `400` or `431` of its
//! own before it reports the error. The proxy answers those with its own
//! reply instead ([`super::reply::Reply::for_head_error`]), which says
//! what was wrong; muting the socket until the first head is accepted is
//! what keeps hyper's from going out first. Nothing else is written before
//! that point, so nothing else is lost.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub(super) struct ClientIo {
    stream: TcpStream,
    /// Set once a request head reached the proxy: writes go out from then.
    heard: Arc<AtomicBool>,
}

impl ClientIo {
    pub(super) fn new(stream: TcpStream, heard: Arc<AtomicBool>) -> ClientIo {
        ClientIo { stream, heard }
    }

    pub(super) fn into_stream(self) -> TcpStream {
        self.stream
    }

    fn muted(&self) -> bool {
        !self.heard.load(Ordering::Acquire)
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.muted() {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.muted() {
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.muted() {
            // hyper closes after its own error reply: the proxy's goes first.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
