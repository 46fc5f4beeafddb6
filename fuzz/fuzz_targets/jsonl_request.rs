//! Any bytes on the driver's stdin: the line reader and the request parser
//! never panic, never return a line over the bound, and every parse error
//! carries a `null` or a valid id.
#![no_main]

use boxd_client::jsonl::{frame, lines};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let mut reader = lines::LineReader::with_max(data, 256);
        while let Ok(Some(line)) = reader.next().await {
            if let lines::Line::Request(bytes) = line {
                assert!(bytes.len() <= 256);
                match frame::parse_request(&bytes) {
                    Ok(r) => assert!(r.id.is_string() || r.id.is_u64()),
                    Err((id, _)) => assert!(id.is_null() || id.is_string() || id.is_u64()),
                }
            }
        }
    });
});
