//! What a failed start says. BoxLite reports start failures as a sanitized
//! "The VM failed to start.", so the error quotes the tail of the shim's
//! stderr and of the guest console log: at most the last
//! [`LOG_TAIL_LINES`] non-empty lines of the last [`LOG_TAIL_BYTES`] of
//! each, without terminal escapes.

use std::path::Path;

use ::boxlite::BoxliteError;

use super::errors::map_err;
use crate::error::Error;

/// How much of a log file a start error quotes.
const LOG_TAIL_BYTES: u64 = 4096;
const LOG_TAIL_LINES: usize = 12;

/// A failed start of the BoxLite box `box_id` (under BoxLite's `home`) as
/// boxd's error, with the box's logs quoted.
pub(super) fn start_error(home: &Path, box_id: &str, e: BoxliteError) -> Error {
    let diag = start_diagnostics(home, box_id);
    match map_err("start the microVM", e) {
        Error::Engine(m) | Error::Internal(m) => Error::Engine(format!("{m}{diag}")),
        other => other,
    }
}

/// The last lines of the shim's stderr and of the guest console, for a
/// start error: BoxLite's own message is deliberately vague.
fn start_diagnostics(home: &Path, box_id: &str) -> String {
    let dir = home.join("boxes").join(box_id);
    let mut out = String::new();
    for (what, path) in [
        ("shim stderr", dir.join("shim.stderr")),
        ("console", dir.join("logs").join("console.log")),
    ] {
        if let Some(tail) = log_tail(&path) {
            out.push_str(&format!("\n{what} ({}):\n{tail}", path.display()));
        }
    }
    if out.is_empty() {
        out = format!(" (no shim output; see {})", dir.display());
    }
    out
}

/// The last lines of a log file, without terminal escapes; `None` if it is
/// missing or empty.
fn log_tail(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(LOG_TAIL_BYTES);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    let text = strip_ansi(&String::from_utf8_lossy(&buf));
    let mut lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    if start > 0 && !lines.is_empty() {
        lines.remove(0); // probably cut in the middle
    }
    let keep = lines.len().saturating_sub(LOG_TAIL_LINES);
    let tail = lines[keep..].join("\n");
    (!tail.is_empty()).then_some(tail)
}

/// Removes ANSI CSI sequences (`ESC [ ... final`), as tracing's colours.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tails_are_short_and_plain() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("shim.stderr");
        assert_eq!(log_tail(&p), None);
        std::fs::write(&p, "").unwrap();
        assert_eq!(log_tail(&p), None);
        let mut text = String::new();
        for i in 0..500 {
            text.push_str(&format!("\u{1b}[2mline\u{1b}[0m {i}\n\n"));
        }
        text.push_str("\u{1b}[31mERROR\u{1b}[0m krun_vmm::linux::vstate] Received KVM_EXIT_INTERNAL_ERROR signal\n");
        std::fs::write(&p, text).unwrap();
        let tail = log_tail(&p).unwrap();
        let lines: Vec<&str> = tail.lines().collect();
        assert_eq!(lines.len(), LOG_TAIL_LINES);
        assert_eq!(lines[0], "line 489");
        assert_eq!(
            lines[LOG_TAIL_LINES - 1],
            "ERROR krun_vmm::linux::vstate] Received KVM_EXIT_INTERNAL_ERROR signal"
        );
        assert!(!tail.contains('\u{1b}'));
    }
}
