//! Bytes a box's egress proxy moved to and from the network, counted by
//! the kernel: each upstream socket's `TCP_INFO` (bytes received, bytes
//! sent and acknowledged), read while it is open and once as it closes.
//! The kernel counts a connection's SYN and FIN as a byte each, so a
//! count may exceed the payload by two bytes per connection each way.
//!
//! **Invariant:** a descriptor is read only while its socket is open: it
//! leaves the live table, its last count taken, before it is closed.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// One proxy's counts: the closed connections' totals and the live ones.
#[derive(Debug, Default)]
pub struct Traffic {
    inner: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// `(received, sent)` by connections already closed.
    closed: (u64, u64),
    live: HashMap<u64, RawFd>,
    next: u64,
}

impl Traffic {
    /// `(received, sent)` bytes so far, open connections included.
    pub fn totals(&self) -> (u64, u64) {
        let counts = self.inner.lock().expect("traffic");
        counts
            .live
            .values()
            .map(|fd| socket_bytes(*fd))
            .fold(counts.closed, |(r, s), (dr, ds)| (r + dr, s + ds))
    }

    /// Counts `stream`'s bytes until the returned guard drops (then closes it).
    pub fn track(self: &Arc<Self>, stream: TcpStream) -> Upstream {
        let mut counts = self.inner.lock().expect("traffic");
        counts.next += 1;
        let key = counts.next;
        counts.live.insert(key, stream.as_raw_fd());
        Upstream {
            stream,
            key,
            traffic: self.clone(),
        }
    }
}

/// An upstream connection whose bytes count towards its proxy's traffic.
pub struct Upstream {
    stream: TcpStream,
    key: u64,
    traffic: Arc<Traffic>,
}

impl std::ops::Deref for Upstream {
    type Target = TcpStream;
    fn deref(&self) -> &TcpStream {
        &self.stream
    }
}

impl std::ops::DerefMut for Upstream {
    fn deref_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }
}

impl AsyncRead for Upstream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let mut counts = self.traffic.inner.lock().expect("traffic");
        counts.live.remove(&self.key);
        let (r, s) = socket_bytes(self.stream.as_raw_fd());
        counts.closed.0 += r;
        counts.closed.1 += s;
        // The stream closes after this, with the lock released.
    }
}

/// `(received, sent and acknowledged)` bytes of an open TCP socket.
#[cfg(target_os = "linux")]
fn socket_bytes(fd: RawFd) -> (u64, u64) {
    // SAFETY: tcp_info is plain data; the kernel fills at most `len` bytes
    // of it, and `fd` is open (see the module's invariant).
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        if rc != 0 {
            return (0, 0);
        }
        (info.tcpi_bytes_received, info.tcpi_bytes_acked)
    }
}

#[cfg(not(target_os = "linux"))]
fn socket_bytes(_fd: RawFd) -> (u64, u64) {
    (0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_both_ways_are_counted_open_and_closed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = vec![0u8; 1000];
            s.read_exact(&mut got).await.unwrap();
            s.write_all(&[7u8; 5000]).await.unwrap();
            s.shutdown().await.unwrap();
        });
        let traffic = Arc::new(Traffic::default());
        let mut up = traffic.track(TcpStream::connect(addr).await.unwrap());
        up.write_all(&[1u8; 1000]).await.unwrap();
        let mut back = Vec::new();
        up.read_to_end(&mut back).await.unwrap();
        server.await.unwrap();
        assert_eq!(back.len(), 5000);
        let payload =
            |(rx, tx): (u64, u64)| (5000..=5002).contains(&rx) && (1000..=1002).contains(&tx);
        let open = traffic.totals();
        assert!(payload(open), "while open: {open:?}");
        drop(up);
        assert_eq!(traffic.totals(), open, "once closed");
    }
}
