//! The MCP client's bytes, bounded: `rmcp`'s stdio transport reads each
//! message as one line with no limit, so a client that never sends a
//! newline would grow the server without end. [`Lines`] fails the read
//! once a line passes [`MAX_LINE`], naming the bound, and the session ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The longest message an MCP client may send (a `write_file` of 16 MiB
/// as base64, with room to spare).
pub const MAX_LINE: usize = 64 << 20;

/// A reader whose lines are at most `max` bytes (the newline excluded).
pub struct Lines<R> {
    inner: R,
    max: usize,
    /// Bytes since the last newline.
    run: usize,
}

impl<R> Lines<R> {
    pub fn new(inner: R, max: usize) -> Lines<R> {
        Lines { inner, max, run: 0 }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Lines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let mut over = false;
        for &b in &buf.filled()[before..] {
            if b == b'\n' {
                this.run = 0;
            } else {
                this.run += 1;
                over |= this.run > this.max;
            }
        }
        if over {
            // Nothing of this read is handed on.
            buf.set_filled(before);
            let why = format!(
                "the MCP client sent a message longer than {} MiB (the most boxctl mcp takes); closing the session",
                this.max >> 20
            );
            // The transport ends the session on a read error without
            // saying why: say it here, once, on stderr.
            eprintln!("boxctl mcp: {why}");
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                why,
            )));
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn read_all(data: Vec<u8>, max: usize) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        Lines::new(&data[..], max).read_to_end(&mut out).await?;
        Ok(out)
    }

    #[tokio::test]
    async fn a_line_at_the_bound_passes_and_one_past_it_fails_naming_it() {
        let mut at = vec![b'x'; 1 << 20];
        at.push(b'\n');
        at.extend(vec![b'y'; 1 << 20]);
        assert_eq!(read_all(at.clone(), 1 << 20).await.unwrap(), at);
        let over = vec![b'x'; (1 << 20) + 1];
        let e = read_all(over, 1 << 20).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("longer than 1 MiB"), "{e}");
    }
}
