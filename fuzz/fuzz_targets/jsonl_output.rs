//! Any output, cut anywhere: the payloads carry exactly the bytes, and
//! text payloads are non-empty valid UTF-8 (guaranteed by `String`).
#![no_main]

use boxd_client::jsonl::output::{OutputEncoder, Payload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Vec<u8>, Vec<u16>)| {
    let (data, cuts) = input;
    let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c as usize % (data.len() + 1)).collect();
    cuts.sort();
    let mut enc = OutputEncoder::default();
    let mut out: Vec<Payload> = Vec::new();
    let mut at = 0;
    for c in cuts.into_iter().chain([data.len()]) {
        let c = c.max(at);
        out.extend(enc.push(&data[at..c]));
        at = c;
    }
    out.extend(enc.finish());
    let joined: Vec<u8> = out.iter().flat_map(Payload::bytes).collect();
    assert_eq!(joined, data);
    assert!(out.iter().all(|p| !matches!(p, Payload::Text(t) if t.is_empty())));
});
