//! Text that something other than this user controls (a box, an image, a
//! remote BoxLite server, an archive), made safe to print on a terminal.
//!
//! A terminal obeys the control characters it is sent: `ESC ] 0 ; … BEL`
//! sets the window title, `ESC ] 52 ; c ; … BEL` writes the clipboard,
//! `CR` overwrites the line, `SO` switches the character set, the C1 byte
//! U+009B starts a CSI sequence as `ESC [` does. [`escape`] turns every
//! such character into visible text: C0 controls and DEL as `\x1b`,
//! `\x07`, `\x7f` (`\n`, `\r`, `\t` by name), C1 controls as `\u{9b}`, and
//! the Unicode controls that reorder or break lines (bidirectional
//! overrides and isolates, U+2028, U+2029) as `\u{202e}`. Printable text,
//! Unicode included, stays as it is; a backslash stays a backslash (the
//! escaped form is for eyes, not for parsing back).
//!
//! Every client prints untrusted text through here: `boxctl`'s human
//! output and errors, `harness-box-exec`'s diagnostics. A command's own
//! output (exec stdout and stderr) is never escaped: it is the command's,
//! byte for byte. JSON output needs none of this (serde escapes control
//! characters).

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character escaped, newlines and tabs too: for
/// one value (an image reference, an env value, a name) or a one-line
/// message.
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_with(text, false)
}

/// `text` with every control character escaped but newlines and tabs: for a
/// multi-line message of boxd's or this client's own whose lines may quote
/// untrusted text (a start error quoting a console log, say), where what
/// an attacker could still do is start a new line, never drive the
/// terminal.
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    escape_with(text, true)
}

/// Bytes that should be text (a probe's output quoted in an error): UTF-8
/// read lossily, then [`escape_lines`].
pub fn escape_bytes(bytes: &[u8]) -> String {
    escape_lines(&String::from_utf8_lossy(bytes)).into_owned()
}

/// Whether `c` must not reach a terminal as it is.
fn needs_escape(c: char, keep_lines: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_lines,
        '\0'..='\x1f' | '\x7f'..='\u{9f}' => true,
        // Arabic letter mark, LRM/RLM, embeddings and overrides, isolates:
        // they reorder what is shown after them ("Trojan source").
        '\u{061c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => true,
        // Line and paragraph separators: a new line to some terminals.
        '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

fn escape_with(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let Some(first) = text.find(|c| needs_escape(c, keep_lines)) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if !needs_escape(c, keep_lines) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0'..='\x1f' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            _ => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hostile image's `User`: a window title and a clipboard write.
    const HOSTILE: &str = "\x1b]0;pwned-title\x07\x1b]52;c;cHduZWQ=\x07";

    #[test]
    fn terminal_controls_become_visible_text() {
        assert_eq!(
            escape(HOSTILE),
            "\\x1b]0;pwned-title\\x07\\x1b]52;c;cHduZWQ=\\x07"
        );
        assert_eq!(escape("a\rb\x0ec\x7fd"), "a\\rb\\x0ec\\x7fd");
        // C1: U+009B is CSI on terminals that take 8-bit controls.
        assert_eq!(escape("x\u{9b}31m"), "x\\u{9b}31m");
        assert_eq!(escape("\u{202e}txt.exe"), "\\u{202e}txt.exe");
        assert_eq!(escape("one\u{2028}two"), "one\\u{2028}two");
        assert_eq!(escape("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(escape_lines("a\nb\tc\x1b[2J"), "a\nb\tc\\x1b[2J");
        assert_eq!(escape_bytes(b"ok\n\x1b\xff"), "ok\n\\x1b\u{fffd}");
    }

    #[test]
    fn printable_text_is_left_alone() {
        for plain in [
            "",
            "no box named web",
            "café ünïcode 箱 🦀",
            r"C:\path and \x1b as typed",
            "docker.io/library/alpine:3.20",
        ] {
            assert!(
                matches!(escape(plain), Cow::Borrowed(s) if s == plain),
                "{plain:?}"
            );
        }
    }

    #[test]
    fn nothing_escaped_holds_a_control_character() {
        let every: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        for out in [escape(&every), escape_lines(&every)] {
            assert!(
                !out.chars()
                    .any(|c| c.is_control() && c != '\n' && c != '\t'),
                "{out:?}"
            );
        }
        assert!(!escape(&every).contains(['\n', '\t']));
    }
}
