//! The value never comes back: what an upstream sends the box has every
//! secret's value replaced by its placeholder, in header values and in
//! the body as it streams ([`Redacted`]), across chunk boundaries.
//!
//! Only the literal value is found (not its base64, URL or JSON-escaped
//! forms). The body is held back by at most the bytes at the end of a
//! chunk that could begin a value, so a server-sent event is passed on as
//! it arrives (values hold no CR or LF, so an event's closing blank line
//! is never held).
//!
//! **Invariant:** no byte sequence equal to a value leaves a [`Redacted`]
//! body or [`Redactor::headers`], whatever the chunking.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use hyper::http::HeaderMap;
use hyper::http::header::HeaderValue;

/// Each secret's (value, placeholder), found with one automaton.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    inner: Option<Arc<Values>>,
}

#[derive(Debug)]
struct Values {
    /// Finds the leftmost, longest value (the same rule as a scan that
    /// tries the longest value first at each byte).
    finder: AhoCorasick,
    placeholders: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    longest: usize,
}

impl Redactor {
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Redactor {
        let (values, placeholders): (Vec<Vec<u8>>, Vec<Vec<u8>>) = pairs
            .into_iter()
            .filter(|(value, _)| !value.is_empty())
            .map(|(v, p)| (v.as_bytes().to_vec(), p.as_bytes().to_vec()))
            .unzip();
        if values.is_empty() {
            return Redactor::default();
        }
        // Made per request: an NFA builds in far less time than a DFA, and
        // the prefilter finds a value's first bytes as fast either way.
        let finder = AhoCorasick::builder()
            .kind(Some(AhoCorasickKind::ContiguousNFA))
            .match_kind(MatchKind::LeftmostLongest)
            .build(&values)
            .expect("a handful of secret values always builds");
        let longest = values.iter().map(Vec::len).max().unwrap_or(0);
        Redactor {
            inner: Some(Arc::new(Values {
                finder,
                placeholders,
                values,
                longest,
            })),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// `bytes` with every whole value replaced; `None` when none is there.
    fn replace(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let values = self.inner.as_ref()?;
        let mut out: Option<Vec<u8>> = None;
        let mut copied = 0;
        for found in values.finder.find_iter(bytes) {
            let out = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
            out.extend_from_slice(&bytes[copied..found.start()]);
            out.extend_from_slice(&values.placeholders[found.pattern().as_usize()]);
            copied = found.end();
        }
        let mut out = out?;
        out.extend_from_slice(&bytes[copied..]);
        Some(out)
    }

    /// How many bytes at the end of `bytes` could begin a value (and must
    /// wait for the next chunk).
    fn partial_tail(&self, bytes: &[u8]) -> usize {
        let Some(values) = &self.inner else { return 0 };
        let from = bytes.len().saturating_sub(values.longest.saturating_sub(1));
        (from..bytes.len())
            .find(|&i| {
                let tail = &bytes[i..];
                values
                    .values
                    .iter()
                    .any(|v| v.len() > tail.len() && v.starts_with(tail))
            })
            .map_or(0, |i| bytes.len() - i)
    }

    /// Header values with values replaced (a value that no longer parses
    /// is dropped).
    pub fn headers(&self, headers: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        for value in headers.values_mut() {
            if let Some(new) = self.replace(value.as_bytes()) {
                *value = HeaderValue::from_bytes(&new)
                    .unwrap_or_else(|_| HeaderValue::from_static("(redacted by boxd)"));
            }
        }
    }

    /// `body` as the box may see it.
    pub fn body<B>(&self, body: B) -> Redacted<B> {
        Redacted {
            body,
            redactor: self.clone(),
            held: BytesMut::new(),
            trailers: None,
            done: false,
        }
    }
}

/// A body with every value replaced by its placeholder as it streams.
pub struct Redacted<B> {
    body: B,
    redactor: Redactor,
    /// Bytes that could begin a value, waiting for what follows.
    held: BytesMut,
    /// Trailers that arrived while bytes were held: they go after them.
    trailers: Option<Frame<Bytes>>,
    done: bool,
}

impl<B> Body for Redacted<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if this.redactor.is_empty() {
            return Pin::new(&mut this.body).poll_frame(cx);
        }
        loop {
            if let Some(trailers) = this.trailers.take() {
                return Poll::Ready(Some(Ok(trailers)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        // Without held bytes or a value in it, the chunk
                        // goes on as it came (no copy).
                        let chunk = if this.held.is_empty() {
                            data
                        } else {
                            let mut joined = std::mem::take(&mut this.held);
                            joined.extend_from_slice(&data);
                            joined.freeze()
                        };
                        let chunk = match this.redactor.replace(&chunk) {
                            Some(new) => Bytes::from(new),
                            None => chunk,
                        };
                        let keep = this.redactor.partial_tail(&chunk);
                        let cut = chunk.len() - keep;
                        this.held = BytesMut::from(&chunk[cut..]);
                        if cut > 0 {
                            return Poll::Ready(Some(Ok(Frame::data(chunk.slice(..cut)))));
                        }
                    }
                    Err(frame) => {
                        // Trailers: what is held goes first.
                        // (Held bytes are a value's beginning only, never a whole one.)
                        if this.held.is_empty() {
                            return Poll::Ready(Some(Ok(frame)));
                        }
                        this.trailers = Some(frame);
                        let held = std::mem::take(&mut this.held).freeze();
                        return Poll::Ready(Some(Ok(Frame::data(held))));
                    }
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    this.done = true;
                    if this.held.is_empty() {
                        return Poll::Ready(None);
                    }
                    let held = std::mem::take(&mut this.held).freeze();
                    return Poll::Ready(Some(Ok(Frame::data(held))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || (self.held.is_empty() && self.trailers.is_none() && self.body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.redactor.is_empty() {
            self.body.size_hint()
        } else {
            SizeHint::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn redactor() -> Redactor {
        Redactor::new([("sk-live-123456", "$KEY"), ("tok", "$T")])
    }

    async fn through(chunks: &[&[u8]]) -> Vec<Bytes> {
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let body = StreamBody::new(futures::stream::iter(frames));
        let mut body = redactor().body(body);
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            out.push(frame.unwrap().into_data().unwrap());
        }
        out
    }

    #[tokio::test]
    async fn a_value_split_across_chunks_is_replaced() {
        let text = b"error: invalid key sk-live-123456 (tok)\n\n";
        for split in 0..text.len() {
            for split2 in split..text.len() {
                let out = through(&[&text[..split], &text[split..split2], &text[split2..]]).await;
                let joined: Vec<u8> = out.concat();
                assert_eq!(
                    joined, b"error: invalid key $KEY ($T)\n\n",
                    "{split} {split2}"
                );
            }
        }
    }

    #[tokio::test]
    async fn an_event_is_passed_on_at_once_and_only_a_value_s_beginning_waits() {
        let out = through(&[b"data: 1\n\n", b"data: sk-li", b"ve-123456\n\n"]).await;
        assert_eq!(out[0], &b"data: 1\n\n"[..], "not held");
        assert_eq!(out[1], &b"data: "[..]);
        assert_eq!(out[2], &b"$KEY\n\n"[..]);
        // A beginning that never completes comes out at the end as it was.
        let out = through(&[b"x sk-live"]).await;
        assert_eq!(out.concat(), b"x sk-live");
    }

    #[test]
    fn header_values_are_redacted() {
        let mut h = HeaderMap::new();
        h.insert("x-echo", HeaderValue::from_static("Bearer sk-live-123456"));
        redactor().headers(&mut h);
        assert_eq!(h["x-echo"], "Bearer $KEY");
    }
}
