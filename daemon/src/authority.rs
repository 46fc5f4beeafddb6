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
//! A block is decoded one field at a time, and the header list it makes
//! (what h2 is then given) is counted as HTTP/2 counts it, each field's
//! name and value and 32 bytes: past [`MAX_HEADER_LIST`] the rewriter stops
//! and ends the connection. HPACK lets one byte name a whole entry of the
//! dynamic table, so a 1 MiB block could otherwise decode to 4 GB.
//!
//! A malformed stream (a header block that does not decode, CONTINUATION
//! out of place, a block over [`MAX_BLOCK`], a frame over
//! [`boxd_proto::wire::MAX_FRAME`]) ends the connection too, where h2
//! would have ended it with a `COMPRESSION_ERROR` or `PROTOCOL_ERROR`.

use std::borrow::Cow;

use loona_hpack::{Decoder, Encoder};

/// What a client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest header block (all its frames) taken from a client.
pub const MAX_BLOCK: usize = 1 << 20;
/// The largest header list taken from a client, counted as HTTP/2 counts
/// it (RFC 9113 §6.5.2, h2's `max_header_list_size`): each field's name
/// and value and 32 bytes. A gRPC request carries a few hundred. The
/// server's h2 is given the same bound (`main.rs`), so the two agree.
pub const MAX_HEADER_LIST: usize = 16 << 10;
/// The largest frame payload taken: what boxd advertises.
const MAX_FRAME: usize = boxd_proto::wire::MAX_FRAME as usize;
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

/// Decoded header fields: names and values.
type HeaderList = Vec<(Vec<u8>, Vec<u8>)>;

/// Why a connection's stream cannot be rewritten: the connection ends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("malformed HTTP/2 from the client: {0}")]
    Malformed(&'static str),
    #[error(
        "a header block from the client (stream {stream}) decodes to more than {MAX_HEADER_LIST} bytes of header list (each field's name and value and 32, as HTTP/2 counts them), more than boxd takes"
    )]
    HeaderListTooLarge { stream: u32 },
}

use Refused::Malformed;

impl Rewriter {
    /// Takes bytes read from the client; appends what h2 should read to
    /// `out` (whole frames only; the rest waits for more input).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Refused> {
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
            if len > MAX_FRAME {
                return Err(Malformed("a frame larger than boxd takes"));
            }
            if self.pending.len() - at < 9 + len {
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
                    if payload.len() > MAX_BLOCK {
                        return Err(Malformed("a header block larger than boxd takes"));
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
                    if block.fragment.len() + len > MAX_BLOCK {
                        return Err(Malformed("a header block larger than boxd takes"));
                    }
                    block
                        .fragment
                        .extend_from_slice(&self.pending[frame.start + 9..frame.end]);
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
    fn emit(&mut self, block: Block, out: &mut Vec<u8>) -> Result<(), Refused> {
        let headers = self.decode(&block.fragment, block.stream)?;
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

    /// Decodes a header block with the client's HPACK state one field at
    /// a time, each `:authority` h2 would refuse made `localhost`, counting
    /// the list as it grows: the first field past [`MAX_HEADER_LIST`] ends
    /// the decoding (the rest of the block is never looked at).
    fn decode(&mut self, fragment: &[u8], stream: u32) -> Result<HeaderList, Refused> {
        const BAD: Refused = Malformed("a header block that does not decode");
        let mut headers = Vec::new();
        let mut size = 0usize;
        let (mut start, mut at) = (0, 0);
        while at < fragment.len() {
            let (len, size_update) = representation(&fragment[at..]).ok_or(BAD)?;
            at += len;
            if size_update {
                // Decoded with the field that follows it.
                continue;
            }
            let (mut fields, mut over) = (0, false);
            self.decoder
                .decode_with_cb(&fragment[start..at], |name, value| {
                    fields += 1;
                    let value = if name.as_ref() == b":authority"
                        && hyper::http::uri::Authority::try_from(value.as_ref()).is_err()
                    {
                        Cow::Borrowed(&b"localhost"[..])
                    } else {
                        value
                    };
                    size += name.len() + value.len() + 32;
                    if size > MAX_HEADER_LIST {
                        over = true;
                    } else {
                        headers.push((name.into_owned(), value.into_owned()));
                    }
                })
                .map_err(|_| BAD)?;
            if over {
                return Err(Refused::HeaderListTooLarge { stream });
            }
            if fields != 1 {
                return Err(BAD);
            }
            start = at;
        }
        if start < fragment.len() {
            // A table size update with no field after it.
            return Err(BAD);
        }
        Ok(headers)
    }
}

/// The length of the HPACK representation at the start of `b` (RFC 7541
/// §6), and whether it is a dynamic table size update (which makes no
/// field). `None` where the decoder fails too: a representation cut short,
/// an integer of more than five octets.
fn representation(b: &[u8]) -> Option<(usize, bool)> {
    let first = *b.first()?;
    let (prefix, literal, size_update) = if first & 0x80 != 0 {
        (7, false, false) // indexed field
    } else if first & 0xc0 == 0x40 {
        (6, true, false) // literal with incremental indexing
    } else if first & 0xe0 == 0x20 {
        (5, false, true) // dynamic table size update
    } else {
        (4, true, false) // literal without indexing, or never indexed
    };
    let (index, mut len) = integer(b, prefix)?;
    if literal {
        if index == 0 {
            len += string(&b[len..])?; // the name
        }
        len += string(&b[len..])?; // the value
    }
    Some((len, size_update))
}

/// An HPACK integer with a `prefix`-bit prefix (RFC 7541 §5.1), as the
/// decoder reads it (at most five octets): its value and length.
fn integer(b: &[u8], prefix: u8) -> Option<(usize, usize)> {
    let mask = ((1u16 << prefix) - 1) as u8;
    let mut value = (b.first()? & mask) as usize;
    if value < mask as usize {
        return Some((value, 1));
    }
    for (i, &octet) in b.iter().enumerate().skip(1).take(4) {
        value += ((octet & 0x7f) as usize) << (7 * (i - 1));
        if octet & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The length of the HPACK string literal at the start of `b`.
fn string(b: &[u8]) -> Option<usize> {
    let (len, head) = integer(b, 7)?;
    let end = head.checked_add(len)?;
    (end <= b.len()).then_some(end)
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

    /// A request whose header list is `size` bytes as HTTP/2 counts it
    /// (with `authority` as it is sent), a field padded to make it so.
    fn sized_request(authority: &[u8], size: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut h: Vec<(Vec<u8>, Vec<u8>)> = request(authority)
            .into_iter()
            .map(|(n, v)| (n.to_vec(), v))
            .collect();
        let counted: usize = h.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        h.push((b"x-pad".to_vec(), vec![b'p'; size - counted - 5 - 32]));
        h
    }

    fn feed_request(h: &[(Vec<u8>, Vec<u8>)]) -> Result<Vec<u8>, Refused> {
        let h: Vec<(&[u8], &[u8])> = h.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(&mut Encoder::new(), END_STREAM, 1, &h));
        let mut out = Vec::new();
        Rewriter::default().feed(&input, &mut out)?;
        Ok(out)
    }

    #[test]
    fn a_header_list_at_the_bound_passes_and_one_byte_more_ends_the_connection() {
        let at = sized_request(b"localhost", MAX_HEADER_LIST);
        let out = feed_request(&at).unwrap();
        assert_eq!(read(&out)[0].1, at);
        let over = sized_request(b"localhost", MAX_HEADER_LIST + 1);
        let e = feed_request(&over).unwrap_err();
        assert_eq!(e, Refused::HeaderListTooLarge { stream: 1 });
        assert!(e.to_string().contains("16384"), "{e}");
        // Counted as h2 is given it: a socket path's `:authority` as
        // `localhost`, 20 bytes shorter.
        let path = b"/run/user/1000/boxd/boxd.sock";
        assert_eq!(path.len(), b"localhost".len() + 20);
        let long = sized_request(path, MAX_HEADER_LIST + 20);
        let out = feed_request(&long).unwrap();
        assert_eq!(authority_of(&read(&out)[0].1), b"localhost");
        let long = sized_request(path, MAX_HEADER_LIST + 21);
        assert_eq!(
            feed_request(&long).unwrap_err(),
            Refused::HeaderListTooLarge { stream: 1 }
        );
    }

    /// A block that adds a 4037-byte entry to the dynamic table (a literal
    /// with incremental indexing of a 4000-byte value) and then refers to
    /// it `refs` times, one byte (0xBE, index 62) each, as HEADERS and
    /// CONTINUATION frames of 16 KiB.
    fn references(refs: usize) -> Vec<u8> {
        let mut block = vec![0x40, 5];
        block.extend_from_slice(b"x-big");
        block.extend_from_slice(&[
            0x7f,
            ((4000 - 127) % 128) as u8 | 0x80,
            ((4000 - 127) / 128) as u8,
        ]);
        block.extend(std::iter::repeat_n(b'a', 4000));
        block.extend(std::iter::repeat_n(0xbe, refs));
        let mut input = PREFACE.to_vec();
        let mut kind = HEADERS;
        let mut pieces = block.chunks(FRAME).peekable();
        while let Some(piece) = pieces.next() {
            let flags = if pieces.peek().is_none() {
                END_HEADERS
            } else {
                0
            };
            frame(&mut input, kind, flags, 3, piece);
            kind = CONTINUATION;
        }
        input
    }

    #[test]
    fn references_to_a_big_table_entry_are_counted_as_they_are_decoded() {
        // Four fields of 4037 bytes fit in the bound, five do not.
        let mut out = Vec::new();
        Rewriter::default().feed(&references(3), &mut out).unwrap();
        let headers = &read(&out)[0].1;
        assert_eq!(headers.len(), 4);
        assert!(
            headers
                .iter()
                .all(|(n, v)| n == b"x-big" && v.len() == 4000)
        );
        let e = Rewriter::default()
            .feed(&references(4), &mut Vec::new())
            .unwrap_err();
        assert_eq!(e, Refused::HeaderListTooLarge { stream: 3 });
        // A block as large as taken, a million references (4 GB of header
        // list): refused as fast, having decoded five fields.
        let input = references(MAX_BLOCK - 4010);
        let mut r = Rewriter::default();
        let e = r.feed(&input, &mut Vec::new()).unwrap_err();
        assert_eq!(e, Refused::HeaderListTooLarge { stream: 3 });
        // One byte more than a block may be is refused before decoding.
        let input = references(MAX_BLOCK - 4010 + 1);
        assert_eq!(
            Rewriter::default()
                .feed(&input, &mut Vec::new())
                .unwrap_err(),
            Malformed("a header block larger than boxd takes")
        );
    }

    #[test]
    fn the_representation_scanner_agrees_with_the_decoder() {
        // Field by field, what the scanner cuts decodes to what the whole
        // block does, for blocks of every kind of representation.
        let mut enc = Encoder::new();
        let h = request(b"a%2Fb");
        let h: Vec<(&[u8], &[u8])> = h.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        let mut block = vec![0x3f, 0xe1, 0x1f]; // a size update to 4096
        block.extend(enc.encode(h.iter().copied()));
        block.extend(enc.encode(h.iter().copied())); // now indexed
        block.extend([0x0f, 0x2b, 0x03]); // never indexed, name 58 (user-agent)
        block.extend(b"abc");
        block.extend([0x10, 0x01, b'x', 0x81, 0x1f]); // a Huffman-coded "a"
        let mut whole = Decoder::new().decode(&block).unwrap();
        assert_eq!(whole.len(), 12);
        assert_eq!(whole[11], (b"x".to_vec(), b"a".to_vec()));
        for (n, v) in whole.iter_mut() {
            if n == b":authority" {
                *v = b"localhost".to_vec();
            }
        }
        let mut input = PREFACE.to_vec();
        frame(&mut input, HEADERS, END_HEADERS, 1, &block);
        let mut out = Vec::new();
        Rewriter::default().feed(&input, &mut out).unwrap();
        assert_eq!(read(&out)[0].1, whole);
        // A size update with nothing after it, an integer of six octets,
        // a string cut short: refused, as the decoder refuses them.
        for bad in [
            &[0x20][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            &[0x00, 0x05, b'a'],
        ] {
            let mut input = PREFACE.to_vec();
            frame(&mut input, HEADERS, END_HEADERS, 1, bad);
            assert!(Decoder::new().decode(bad).is_err());
            assert!(Rewriter::default().feed(&input, &mut Vec::new()).is_err());
        }
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
