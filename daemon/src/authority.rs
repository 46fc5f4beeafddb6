//! Any `:authority` a gRPC client sends on the Unix socket is served.
//!
//! Clients dialing a Unix socket send what they like as `:authority`:
//! grpcio (Python, C++, Ruby) and grpc-java the socket's path, percent-encoded
//! or not; grpcurl the path; grpc-go and grpc-js `localhost`. The HTTP/2
//! server under tonic (h2) refuses any value that is not a URI authority
//! with `RST_STREAM(PROTOCOL_ERROR)` before boxd sees the request, and has
//! no setting to relax it (hyperium/h2#487 is open). So the daemon's side
//! of each connection rewrites the client's header blocks on their way in:
//! every block is decoded with the client's HPACK state and encoded again
//! with the rewriter's own (h2 then decodes exactly what was sent), an
//! `:authority` that h2 would refuse becomes `localhost`, and everything
//! else (the preface, every other frame, DATA above all) passes untouched.
//!
//! A malformed stream (a header block that does not decode, CONTINUATION
//! out of place, a block over [`MAX_BLOCK`]) ends the connection, where h2
//! would have ended it with a `COMPRESSION_ERROR` or `PROTOCOL_ERROR`.

use loona_hpack::{Decoder, Encoder};

/// What a client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest header block (all its frames) taken from a client.
pub const MAX_BLOCK: usize = 1 << 20;
/// The header table size both HPACK contexts keep: HTTP/2's default, which
/// h2 advertises and the client's encoder must stay within.
const TABLE_SIZE: usize = 4096;
/// Frames written towards h2 stay within HTTP/2's initial frame size.
const FRAME: usize = 16_384;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The rewriter of one connection's client-to-server bytes.
pub struct Rewriter {
    preface: usize,
    pending: Vec<u8>,
    block: Option<Block>,
    decoder: Decoder<'static>,
    encoder: Encoder<'static>,
}

struct Block {
    stream: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

impl Default for Rewriter {
    fn default() -> Rewriter {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(TABLE_SIZE);
        let mut encoder = Encoder::new();
        encoder.set_max_table_size(TABLE_SIZE);
        Rewriter {
            preface: 0,
            pending: Vec::new(),
            block: None,
            decoder,
            encoder,
        }
    }
}

/// Why a connection's stream cannot be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed HTTP/2 from the client: {0}")]
pub struct Malformed(&'static str);

impl Rewriter {
    /// Takes bytes read from the client; appends what h2 should read to
    /// `out` (whole frames only; the rest waits for more input).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Malformed> {
        let mut input = input;
        if self.preface < PREFACE.len() {
            let n = (PREFACE.len() - self.preface).min(input.len());
            out.extend_from_slice(&input[..n]);
            self.preface += n;
            input = &input[n..];
        }
        self.pending.extend_from_slice(input);
        let mut at = 0;
        while self.pending.len() - at >= 9 {
            let head = &self.pending[at..at + 9];
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            if self.pending.len() - at < 9 + len {
                if len > MAX_BLOCK + 9 + 256 {
                    return Err(Malformed("a frame larger than boxd takes"));
                }
                break;
            }
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let frame = at..at + 9 + len;
            at += 9 + len;
            match (kind, &mut self.block) {
                (HEADERS, None) => {
                    let mut payload = &self.pending[frame.start + 9..frame.end];
                    if flags & PADDED != 0 {
                        let pad = *payload.first().ok_or(Malformed("padding"))? as usize;
                        if pad + 1 > payload.len() {
                            return Err(Malformed("padding"));
                        }
                        payload = &payload[1..payload.len() - pad];
                    }
                    let mut priority = None;
                    if flags & PRIORITY != 0 {
                        if payload.len() < 5 {
                            return Err(Malformed("priority"));
                        }
                        priority = Some(payload[..5].try_into().expect("five bytes"));
                        payload = &payload[5..];
                    }
                    let block = Block {
                        stream,
                        flags,
                        priority,
                        fragment: payload.to_vec(),
                    };
                    if flags & END_HEADERS != 0 {
                        self.emit(block, out)?;
                    } else {
                        self.block = Some(block);
                    }
                }
                (CONTINUATION, Some(block)) if block.stream == stream => {
                    block
                        .fragment
                        .extend_from_slice(&self.pending[frame.start + 9..frame.end]);
                    if block.fragment.len() > MAX_BLOCK {
                        return Err(Malformed("a header block larger than boxd takes"));
                    }
                    if flags & END_HEADERS != 0 {
                        let block = self.block.take().expect("a block");
                        self.emit(block, out)?;
                    }
                }
                (_, Some(_)) | (CONTINUATION, None) => {
                    return Err(Malformed("a header block interrupted"));
                }
                (_, None) => out.extend_from_slice(&self.pending[frame]),
            }
        }
        self.pending.drain(..at);
        Ok(())
    }

    /// Decodes `block`, fixes its `:authority`, and writes it out again as
    /// HEADERS (and CONTINUATION) frames of the rewriter's own encoding.
    fn emit(&mut self, block: Block, out: &mut Vec<u8>) -> Result<(), Malformed> {
        let mut headers = self
            .decoder
            .decode(&block.fragment)
            .map_err(|_| Malformed("a header block that does not decode"))?;
        for (name, value) in headers.iter_mut() {
            if name.as_slice() == b":authority"
                && hyper::http::uri::Authority::try_from(value.as_slice()).is_err()
            {
                *value = b"localhost".to_vec();
            }
        }
        let encoded = self
            .encoder
            .encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let mut first = Vec::with_capacity(encoded.len().min(FRAME) + 5);
        if let Some(p) = block.priority {
            first.extend_from_slice(&p);
        }
        let room = FRAME - first.len();
        let (head, mut rest) = encoded.split_at(encoded.len().min(room));
        first.extend_from_slice(head);
        let mut flags = block.flags & (END_STREAM | PRIORITY);
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        frame(out, HEADERS, flags, block.stream, &first);
        while !rest.is_empty() {
            let (chunk, more) = rest.split_at(rest.len().min(FRAME));
            let flags = if more.is_empty() { END_HEADERS } else { 0 };
            frame(out, CONTINUATION, flags, block.stream, chunk);
            rest = more;
        }
        Ok(())
    }
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = (payload.len() as u32).to_be_bytes();
    out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_frame(enc: &mut Encoder, flags: u8, stream: u32, h: &[(&[u8], &[u8])]) -> Vec<u8> {
        let block = enc.encode(h.iter().copied());
        let mut out = Vec::new();
        frame(&mut out, HEADERS, flags | END_HEADERS, stream, &block);
        out
    }

    /// What h2 would decode from the rewriter's output: the preface, then
    /// each frame's kind and, for header frames, the headers.
    /// A frame as h2 would see it: kind, headers (of a HEADERS frame),
    /// payload.
    type Seen = (u8, Vec<(Vec<u8>, Vec<u8>)>, Vec<u8>);

    fn read(bytes: &[u8]) -> Vec<Seen> {
        assert!(bytes.starts_with(PREFACE));
        let mut dec = Decoder::new();
        let mut at = PREFACE.len();
        let mut frames = Vec::new();
        while at < bytes.len() {
            let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
            let kind = bytes[at + 3];
            let payload = &bytes[at + 9..at + 9 + len];
            let headers = if kind == HEADERS {
                dec.decode(payload).unwrap()
            } else {
                Vec::new()
            };
            frames.push((kind, headers, payload.to_vec()));
            at += 9 + len;
        }
        frames
    }

    fn request(authority: &[u8]) -> Vec<(&'static [u8], Vec<u8>)> {
        vec![
            (b":method", b"POST".to_vec()),
            (b":scheme", b"http".to_vec()),
            (b":path", b"/boxd.v1.Boxd/ListBoxes".to_vec()),
            (b":authority", authority.to_vec()),
            (b"content-type", b"application/grpc".to_vec()),
        ]
    }

    fn authority_of(h: &[(Vec<u8>, Vec<u8>)]) -> &[u8] {
        &h.iter().find(|(n, _)| n == b":authority").unwrap().1
    }

    #[test]
    fn a_socket_path_becomes_localhost_and_a_good_authority_stays() {
        let mut client = Encoder::new();
        let mut input = PREFACE.to_vec();
        for (i, a) in [
            &b"tmp%2Fx%2Fboxd.sock"[..],
            b"/run/user/1000/boxd/boxd.sock",
            b"localhost",
            b"tmp%2Fx%2Fboxd.sock",
        ]
        .into_iter()
        .enumerate()
        {
            let h = request(a);
            let h: Vec<(&[u8], &[u8])> = h.iter().map(|(n, v)| (*n, v.as_slice())).collect();
            input.extend(headers_frame(&mut client, 0, 1 + 2 * i as u32, &h));
            frame(&mut input, 0x0, END_STREAM, 1 + 2 * i as u32, b"\0\0\0\0\0");
        }
        // Fed a byte at a time: frames come out whole, in order.
        let mut r = Rewriter::default();
        let mut out = Vec::new();
        for b in &input {
            r.feed(std::slice::from_ref(b), &mut out).unwrap();
        }
        let frames = read(&out);
        let authorities: Vec<&[u8]> = frames
            .iter()
            .filter(|f| f.0 == HEADERS)
            .map(|f| authority_of(&f.1))
            .collect();
        assert_eq!(
            authorities,
            [&b"localhost"[..], b"localhost", b"localhost", b"localhost"]
        );
        let data: Vec<&Vec<u8>> = frames.iter().filter(|f| f.0 == 0).map(|f| &f.2).collect();
        assert_eq!(data.len(), 4);
        assert!(data.iter().all(|d| d.as_slice() == b"\0\0\0\0\0"));
        let paths: Vec<&[u8]> = frames
            .iter()
            .filter(|f| f.0 == HEADERS)
            .map(|f| {
                f.1.iter()
                    .find(|(n, _)| n == b":path")
                    .unwrap()
                    .1
                    .as_slice()
            })
            .collect();
        assert!(paths.iter().all(|p| *p == b"/boxd.v1.Boxd/ListBoxes"));
        let mut r = Rewriter::default();
        let mut out = Vec::new();
        let mut input = PREFACE.to_vec();
        let h = request(b"boxd.example:8080");
        let h: Vec<(&[u8], &[u8])> = h.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        input.extend(headers_frame(&mut Encoder::new(), END_STREAM, 1, &h));
        r.feed(&input, &mut out).unwrap();
        assert_eq!(authority_of(&read(&out)[0].1), b"boxd.example:8080");
    }

    #[test]
    fn padding_priority_and_continuation_are_taken_apart_and_put_back() {
        let mut client = Encoder::new();
        let h = request(b"a%2Fb");
        let h: Vec<(&[u8], &[u8])> = h.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        let block = client.encode(h.iter().copied());
        let (one, two) = block.split_at(7);
        let mut payload = vec![3u8]; // three bytes of padding
        payload.extend_from_slice(&[0x80, 0, 0, 3, 15]); // a priority
        payload.extend_from_slice(one);
        payload.extend_from_slice(&[0, 0, 0]);
        let mut input = PREFACE.to_vec();
        frame(
            &mut input,
            HEADERS,
            PADDED | PRIORITY | END_STREAM,
            5,
            &payload,
        );
        frame(&mut input, CONTINUATION, END_HEADERS, 5, two);
        let mut out = Vec::new();
        Rewriter::default().feed(&input, &mut out).unwrap();
        let at = PREFACE.len();
        assert_eq!(out[at + 3], HEADERS);
        assert_eq!(out[at + 4], PRIORITY | END_STREAM | END_HEADERS);
        let len = u32::from_be_bytes([0, out[at], out[at + 1], out[at + 2]]) as usize;
        assert_eq!(&out[at + 9..at + 14], &[0x80, 0, 0, 3, 15]);
        let headers = Decoder::new().decode(&out[at + 14..at + 9 + len]).unwrap();
        assert_eq!(authority_of(&headers), b"localhost");
        assert_eq!(at + 9 + len, out.len(), "one frame");
    }

    #[test]
    fn hostile_streams_end_the_connection_and_never_panic() {
        let mut input = PREFACE.to_vec();
        frame(
            &mut input,
            HEADERS,
            END_HEADERS,
            1,
            &[0xff, 0xff, 0xff, 0xff],
        );
        assert!(Rewriter::default().feed(&input, &mut Vec::new()).is_err());
        let mut input = PREFACE.to_vec();
        frame(&mut input, HEADERS, 0, 1, &[0x82]);
        frame(&mut input, 0x0, 0, 1, b"x");
        assert!(Rewriter::default().feed(&input, &mut Vec::new()).is_err());
        let mut input = PREFACE.to_vec();
        frame(&mut input, HEADERS, PADDED | END_HEADERS, 1, &[9]);
        assert!(Rewriter::default().feed(&input, &mut Vec::new()).is_err());
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&[0xff, 0xff, 0xff, 0x0, 0, 0, 0, 0, 1, 0]);
        assert!(Rewriter::default().feed(&input, &mut Vec::new()).is_err());
        // Random bytes after the preface: an error or frames, never a panic.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut input = PREFACE.to_vec();
            for _ in 0..64 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                input.push(seed as u8);
            }
            let _ = Rewriter::default().feed(&input, &mut Vec::new());
        }
    }
}
