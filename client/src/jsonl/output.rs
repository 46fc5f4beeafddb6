//! Exec output as JSONL `output` event payloads.
//!
//! The envelope carries output as `data` (text) when the bytes are valid
//! UTF-8 and as `dataBase64` otherwise, and never splits a UTF-8 sequence
//! across two events: a sequence cut by a chunk boundary is held back until
//! its rest arrives. Every payload is small enough that its frame stays
//! within [`MAX_FRAME`] even when JSON escaping inflates it.

use base64::Engine as _;

/// The largest frame the envelope allows (16 MiB).
pub const MAX_FRAME: usize = 16 << 20;

/// The largest raw payload of one event: escaped as JSON (at most 6 bytes
/// per input byte, for `\u00XX`) it still fits a frame with room for the
/// rest of the event.
pub const MAX_PAYLOAD: usize = 2 << 20;

/// One event's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Valid UTF-8, sent as `data`.
    Text(String),
    /// Anything else, sent as `dataBase64`.
    Base64(String),
}

impl Payload {
    /// The bytes this payload stands for.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Payload::Text(s) => s.as_bytes().to_vec(),
            Payload::Base64(b) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("we encoded it"),
        }
    }
}

/// Turns one output stream's chunks into payloads. Keep one per stream
/// (stdout and stderr each hold back their own partial sequences).
#[derive(Debug, Default)]
pub struct OutputEncoder {
    /// The start of a UTF-8 sequence whose rest has not arrived (≤ 3 bytes).
    carry: Vec<u8>,
}

impl OutputEncoder {
    /// Payloads for the next chunk of output, in order. May be empty when
    /// the chunk only holds the start of a sequence.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Payload> {
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            let piece = &rest[..rest.len().min(MAX_PAYLOAD)];
            let last = piece.len() == rest.len();
            match std::str::from_utf8(piece) {
                Ok(text) => {
                    out.push(Payload::Text(text.to_owned()));
                    rest = &rest[piece.len()..];
                }
                Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => {
                    // Text, cut inside a sequence: send the whole characters.
                    let n = e.valid_up_to();
                    let text = std::str::from_utf8(&piece[..n]).expect("valid prefix");
                    out.push(Payload::Text(text.to_owned()));
                    rest = &rest[n..];
                }
                Err(e) if e.error_len().is_none() && last => {
                    // Only the start of a sequence is left: wait for the rest.
                    self.carry = rest.to_vec();
                    return out;
                }
                Err(_) => {
                    out.push(Payload::Base64(
                        base64::engine::general_purpose::STANDARD.encode(piece),
                    ));
                    rest = &rest[piece.len()..];
                }
            }
        }
        out
    }

    /// What is still held back when the stream ends (an incomplete sequence
    /// that will never complete), as a final payload.
    pub fn finish(&mut self) -> Option<Payload> {
        let carry = std::mem::take(&mut self.carry);
        (!carry.is_empty())
            .then(|| Payload::Base64(base64::engine::general_purpose::STANDARD.encode(carry)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode_all(chunks: &[Vec<u8>]) -> Vec<Payload> {
        let mut enc = OutputEncoder::default();
        let mut out: Vec<Payload> = chunks.iter().flat_map(|c| enc.push(c)).collect();
        out.extend(enc.finish());
        out
    }

    /// `data` cut at the given offsets (taken modulo its length, sorted).
    fn cut(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        cuts.sort();
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(data[at..c].to_vec());
            at = c;
        }
        chunks.push(data[at..].to_vec());
        chunks
    }

    fn joined(payloads: &[Payload]) -> Vec<u8> {
        payloads.iter().flat_map(Payload::bytes).collect()
    }

    #[test]
    fn text_stays_text() {
        assert_eq!(
            encode_all(&[b"hello\n".to_vec()]),
            [Payload::Text("hello\n".into())]
        );
    }

    #[test]
    fn a_split_character_is_held_back_until_complete() {
        let euro = "€".as_bytes(); // 3 bytes
        let mut enc = OutputEncoder::default();
        assert_eq!(enc.push(&[b'a', euro[0]]), [Payload::Text("a".into())]);
        assert_eq!(enc.push(&euro[1..2]), []);
        assert_eq!(enc.push(&[euro[2], b'b']), [Payload::Text("€b".into())]);
        assert_eq!(enc.finish(), None);
    }

    #[test]
    fn invalid_bytes_go_as_base64() {
        let out = encode_all(&[vec![0xff, 0xfe, b'x']]);
        assert_eq!(out, [Payload::Base64("//54".into())]);
    }

    #[test]
    fn an_unfinished_sequence_at_the_end_is_flushed() {
        let out = encode_all(&[vec![b'a', 0xe2, 0x82]]);
        assert_eq!(
            out,
            [Payload::Text("a".into()), Payload::Base64("4oI=".into())]
        );
    }

    #[test]
    fn big_output_is_split_within_the_frame_bound() {
        let big = vec![b'\x01'; MAX_PAYLOAD * 2 + 5];
        let out = encode_all(std::slice::from_ref(&big));
        assert_eq!(out.len(), 3);
        assert_eq!(joined(&out), big);
        for p in &out {
            // Escaping a control byte takes 6 bytes: the frame still fits.
            let escaped = serde_json::to_string(&match p {
                Payload::Text(t) => t.clone(),
                Payload::Base64(b) => b.clone(),
            })
            .unwrap();
            assert!(escaped.len() + 256 <= MAX_FRAME);
        }
    }

    proptest! {
        #[test]
        fn any_chunking_round_trips(data in proptest::collection::vec(any::<u8>(), 0..4096), cuts in proptest::collection::vec(0usize..4096, 0..16)) {
            let out = encode_all(&cut(&data, &cuts));
            prop_assert_eq!(joined(&out), data);
            for p in &out {
                if let Payload::Text(t) = p { prop_assert!(!t.is_empty()); }
            }
        }

        #[test]
        fn text_in_any_chunking_is_never_base64(text in "\\PC{0,300}", cuts in proptest::collection::vec(0usize..1200, 0..8)) {
            let data = text.as_bytes();
            let out = encode_all(&cut(data, &cuts));
            prop_assert!(out.iter().all(|p| matches!(p, Payload::Text(_))), "{:?}", out);
            prop_assert_eq!(joined(&out), data.to_vec());
        }
    }
}
