//! The HTTP/2 rewriter in front of h2 (`daemon/src/authority.rs`), given
//! any client bytes in any chunking: it never panics, and what it passes
//! on does not depend on how the bytes were split.
//!
//! Inputs are raw bytes after the preface (first byte even) or a client
//! stream built from a grammar (first byte odd): header blocks (HPACK, with
//! padding, priority, split into CONTINUATIONs) whose `:authority` is a
//! socket path, percent-encoded or not, a good authority, empty or odd
//! bytes, between DATA, SETTINGS, PING and WINDOW_UPDATE frames. For those,
//! every other frame comes out byte for byte and in order, and each header
//! block decodes (with a fresh HPACK decoder, as h2's) to the same headers
//! in the same order, only an `:authority` that is not a valid authority
//! replaced by `localhost`.
//!
//! The grammar also builds header-list bombs: a literal with incremental
//! indexing of a value of up to 4000 bytes (one dynamic-table entry), then
//! from none to a million one-byte references to it (0xBE, index 62), a
//! block of up to `MAX_BLOCK`. A list within `MAX_HEADER_LIST` (as HTTP/2
//! counts it) comes out whole; a larger one is refused, and the stream
//! after it does not matter. Run under a memory cap (`make fuzz` passes
//! `-rss_limit_mb` and `-malloc_limit_mb`): the rewriter stops decoding at
//! the bound, so a bomb costs it kilobytes, never the gigabytes it names.
#![no_main]

use boxd::authority::{MAX_BLOCK, MAX_HEADER_LIST, Rewriter};
use libfuzzer_sys::fuzz_target;
use loona_hpack::{Decoder, Encoder};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const AUTHORITIES: &[&[u8]] = &[
    b"localhost",
    b"/run/user/1000/boxd/boxd.sock",
    b"run%2Fuser%2F1000%2Fboxd%2Fboxd.sock",
    b"boxd.example:8080",
    b"",
    b"[::1]:50051",
    b"a b",
    b"\xff\x00",
    b"host:99999",
];

type Headers = Vec<(Vec<u8>, Vec<u8>)>;

/// A frame of the built stream: kind and payload, or a header block; or
/// a header block whose list is over the bound (the stream's last).
enum Built {
    Frame(u8, u8, u32, Vec<u8>),
    Headers(u32, Headers),
    OverTheBound,
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = (payload.len() as u32).to_be_bytes();
    out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A client stream from the grammar, and what each frame is.
fn build(bytes: &[u8]) -> (Vec<u8>, Vec<Built>) {
    let mut enc = Encoder::new();
    let mut out = PREFACE.to_vec();
    let mut built = Vec::new();
    let mut it = bytes.iter().copied();
    let mut stream = 1u32;
    while let Some(op) = it.next() {
        let arg = it.next().unwrap_or(0);
        match op % 6 {
            0 | 1 => {
                let authority = AUTHORITIES[arg as usize % AUTHORITIES.len()].to_vec();
                let extra: Vec<u8> = (0..op / 8).map(|i| i.wrapping_mul(arg)).collect();
                let headers: Headers = vec![
                    (b":method".to_vec(), b"POST".to_vec()),
                    (b":scheme".to_vec(), b"http".to_vec()),
                    (b":path".to_vec(), b"/boxd.v1.Boxd/ListBoxes".to_vec()),
                    (b":authority".to_vec(), authority),
                    (b"x-extra".to_vec(), extra),
                ];
                let block = enc.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
                let split = (arg as usize).min(block.len());
                let (one, two) = block.split_at(split);
                let padded = op & 0x20 != 0;
                let priority = op & 0x40 != 0;
                let mut payload = Vec::new();
                if padded {
                    payload.push(arg % 7);
                }
                if priority {
                    payload.extend_from_slice(&[0, 0, 0, 1, 15]);
                }
                payload.extend_from_slice(one);
                if padded {
                    payload.extend(std::iter::repeat_n(0, (arg % 7) as usize));
                }
                let whole = two.is_empty();
                let flags = (if padded { 0x8 } else { 0 })
                    | (if priority { 0x20 } else { 0 })
                    | (if whole { 0x4 } else { 0 })
                    | (op & 0x1);
                frame(&mut out, 0x1, flags, stream, &payload);
                if !whole {
                    frame(&mut out, 0x9, 0x4, stream, two);
                }
                built.push(Built::Headers(stream, headers));
                stream += 2;
            }
            2 => {
                let data: Vec<u8> = (0..arg).collect();
                frame(
                    &mut out,
                    0x0,
                    op & 0x1,
                    stream.saturating_sub(2).max(1),
                    &data,
                );
                built.push(Built::Frame(
                    0x0,
                    op & 0x1,
                    stream.saturating_sub(2).max(1),
                    data,
                ));
            }
            3 => {
                frame(&mut out, 0x4, 0, 0, &[]);
                built.push(Built::Frame(0x4, 0, 0, Vec::new()));
            }
            5 => {
                // A header-list bomb. The name is new (the stream's count
                // of frames is in it), so the encoder adds the field to its
                // table with a literal, as the decoder does: index 62 is
                // this entry in both.
                let name = format!("x-big-{}", built.len()).into_bytes();
                let value = vec![b'v'; (arg as usize * 16) % 3990];
                let entry = (name, value);
                let mut block = enc.encode([(entry.0.as_slice(), entry.1.as_slice())]);
                let n = it.next().unwrap_or(0);
                let refs = if n < 128 {
                    n as usize % 8
                } else {
                    ((n - 128) as usize) << 13
                };
                let refs = refs.min(MAX_BLOCK - block.len());
                block.resize(block.len() + refs, 0xbe);
                let mut pieces = block.chunks(16_384).peekable();
                let mut kind = 0x1;
                while let Some(piece) = pieces.next() {
                    let end = if pieces.peek().is_none() { 0x4 } else { 0 };
                    frame(&mut out, kind, end, stream, piece);
                    kind = 0x9;
                }
                let size = (1 + refs) * (entry.0.len() + entry.1.len() + 32);
                if size > MAX_HEADER_LIST {
                    built.push(Built::OverTheBound);
                    break;
                }
                built.push(Built::Headers(stream, vec![entry; 1 + refs]));
                stream += 2;
            }
            _ => {
                let ping = [arg; 8];
                frame(&mut out, 0x6, 0, 0, &ping);
                built.push(Built::Frame(0x6, 0, 0, ping.to_vec()));
            }
        }
    }
    (out, built)
}

/// Feeds `input` in pieces of the sizes `cuts` gives (cycled).
fn feed(input: &[u8], cuts: &[u8]) -> (Vec<u8>, bool) {
    let mut r = Rewriter::default();
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < input.len() {
        let n = if cuts.is_empty() {
            input.len()
        } else {
            1 + cuts[i % cuts.len()] as usize
        };
        let end = (at + n).min(input.len());
        if r.feed(&input[at..end], &mut out).is_err() {
            return (out, false);
        }
        at = end;
        i += 1;
    }
    (out, true)
}

/// The frames of the rewriter's output as h2 reads them: header blocks
/// joined and decoded, the others as they are.
fn read(bytes: &[u8]) -> Vec<Built> {
    assert!(bytes.starts_with(PREFACE));
    let mut dec = Decoder::new();
    let mut at = PREFACE.len();
    let mut frames = Vec::new();
    let mut block: Option<(u32, u8, Vec<u8>)> = None;
    while at < bytes.len() {
        let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
        let (kind, flags) = (bytes[at + 3], bytes[at + 4]);
        let stream = u32::from_be_bytes(bytes[at + 5..at + 9].try_into().unwrap());
        let mut payload = &bytes[at + 9..at + 9 + len];
        at += 9 + len;
        match kind {
            0x1 => {
                assert_eq!(flags & 0x8, 0, "the rewriter pads nothing");
                if flags & 0x20 != 0 {
                    payload = &payload[5..];
                }
                block = Some((stream, flags, payload.to_vec()));
            }
            0x9 => block
                .as_mut()
                .expect("a CONTINUATION after HEADERS")
                .2
                .extend_from_slice(payload),
            _ => {
                assert!(block.is_none(), "a frame inside a header block");
                frames.push(Built::Frame(kind, flags, stream, payload.to_vec()));
                continue;
            }
        }
        if flags & 0x4 != 0 {
            let (stream, _, fragment) = block.take().unwrap();
            frames.push(Built::Headers(
                stream,
                dec.decode(&fragment).expect("the output decodes"),
            ));
        }
    }
    frames
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let (cuts, body) = rest.split_at(rest.len().min(4));
    let (input, built) = if first & 1 == 0 {
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(body);
        (input, None)
    } else {
        let (input, built) = build(body);
        (input, Some(built))
    };
    let (whole, whole_ok) = feed(&input, &[]);
    let (pieces, pieces_ok) = feed(&input, cuts);
    assert_eq!(whole_ok, pieces_ok, "the chunking changed the verdict");
    if whole_ok {
        assert_eq!(whole, pieces, "the chunking changed the output");
    }
    let Some(built) = built else { return };
    if matches!(built.last(), Some(Built::OverTheBound)) {
        assert!(!whole_ok, "a header list over the bound was taken");
        return;
    }
    assert!(whole_ok, "a well-formed client stream was refused");
    let seen = read(&whole);
    assert_eq!(seen.len(), built.len());
    for (seen, built) in seen.iter().zip(&built) {
        match (seen, built) {
            (Built::Frame(k, f, s, p), Built::Frame(k2, f2, s2, p2)) => {
                assert_eq!((k, f, s, p), (k2, f2, s2, p2));
            }
            (Built::Headers(s, h), Built::Headers(s2, h2)) => {
                assert_eq!(s, s2);
                let want: Headers = h2
                    .iter()
                    .map(|(n, v)| {
                        let bad = n == b":authority"
                            && http::uri::Authority::try_from(v.as_slice()).is_err();
                        (
                            n.clone(),
                            if bad {
                                b"localhost".to_vec()
                            } else {
                                v.clone()
                            },
                        )
                    })
                    .collect();
                assert_eq!(h, &want);
            }
            _ => panic!("a frame of another kind came out"),
        }
    }
});
