//! Request lines of the JSONL envelope, read with a bound.
//!
//! One request per `\n`-terminated line (`\r\n` accepted, empty lines
//! ignored). A line longer than [`MAX_LINE`] is not buffered: the reader
//! reports it as [`Line::TooLarge`] once, discards the rest of it, and goes
//! on with the next line.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest request line (4 MiB, not counting the newline).
pub const MAX_LINE: usize = 4 << 20;

/// What the reader found.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its terminator (raw bytes: not yet checked
    /// to be UTF-8 or JSON).
    Request(Vec<u8>),
    /// A line over the bound; `len` is its length without the newline.
    TooLarge { len: usize },
}

/// Reads bounded lines from `R`.
pub struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R) -> LineReader<R> {
        LineReader {
            inner,
            max: MAX_LINE,
        }
    }

    /// A reader with another bound (for tests).
    pub fn with_max(inner: R, max: usize) -> LineReader<R> {
        LineReader { inner, max }
    }

    /// The next non-empty line; `None` at end of input. A last line without
    /// a newline counts as a line.
    pub async fn next(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            let mut line = Vec::new();
            let mut len = 0usize;
            let mut too_large = false;
            let mut ended = false;
            loop {
                let buf = self.inner.fill_buf().await?;
                if buf.is_empty() {
                    ended = true;
                    break;
                }
                let (part, found) = match buf.iter().position(|&b| b == b'\n') {
                    Some(i) => (&buf[..i], true),
                    None => (buf, false),
                };
                len += part.len();
                if !too_large {
                    if len > self.max + 1 {
                        // +1: a `\r` before the newline does not count.
                        too_large = true;
                        line = Vec::new();
                    } else {
                        line.extend_from_slice(part);
                    }
                }
                let used = part.len() + usize::from(found);
                self.inner.consume(used);
                if found {
                    break;
                }
            }
            if line.last() == Some(&b'\r') {
                line.pop();
                len = len.saturating_sub(1);
            }
            if too_large || len > self.max {
                return Ok(Some(Line::TooLarge { len }));
            }
            if !line.is_empty() {
                return Ok(Some(Line::Request(line)));
            }
            if ended {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all(input: &[u8], max: usize) -> Vec<Line> {
        let mut r = LineReader::with_max(input, max);
        let mut out = Vec::new();
        while let Some(l) = r.next().await.unwrap() {
            out.push(l);
        }
        out
    }

    fn req(s: &str) -> Line {
        Line::Request(s.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn lines_crlf_and_blank_lines() {
        let got = all(b"a\r\n\n\nbc\nlast", 10).await;
        assert_eq!(got, [req("a"), req("bc"), req("last")]);
    }

    #[tokio::test]
    async fn an_overlong_line_is_reported_once_and_skipped() {
        let got = all(b"12345\n123456\nok\n", 5).await;
        assert_eq!(got, [req("12345"), Line::TooLarge { len: 6 }, req("ok")]);
        // The bound does not count a trailing \r.
        assert_eq!(all(b"12345\r\n", 5).await, [req("12345")]);
    }

    #[tokio::test]
    async fn an_overlong_line_across_reads_is_not_buffered() {
        // A tiny BufReader capacity forces many partial reads.
        let data = [vec![b'x'; 10_000], b"\nafter\n".to_vec()].concat();
        let r = tokio::io::BufReader::with_capacity(7, data.as_slice());
        let mut lines = LineReader::with_max(r, 100);
        assert_eq!(
            lines.next().await.unwrap(),
            Some(Line::TooLarge { len: 10_000 })
        );
        assert_eq!(lines.next().await.unwrap(), Some(req("after")));
        assert_eq!(lines.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn the_real_bound_is_four_mib() {
        let exact = [vec![b'a'; MAX_LINE], b"\n".to_vec()].concat();
        let over = [vec![b'a'; MAX_LINE + 1], b"\n".to_vec()].concat();
        let mut r = LineReader::new(exact.as_slice());
        assert!(matches!(r.next().await.unwrap(), Some(Line::Request(l)) if l.len() == MAX_LINE));
        let mut r = LineReader::new(over.as_slice());
        assert_eq!(
            r.next().await.unwrap(),
            Some(Line::TooLarge { len: MAX_LINE + 1 })
        );
    }
}
