//! The file copies a box's zygote runs itself ([`Builtin`]), in a child it
//! forks inside the box: chrooted in the box's root, as box root, confined
//! like every command. The tar work is [`boxd_fs::archive`]'s, the
//! same as the host side's; here every path, and every symlink met on the
//! way, resolves inside the box, so no copy can reach a host file.
//!
//! A failure is one line on stderr and an exit code the daemon maps to an
//! error class ([`EXIT_NOT_FOUND`], [`EXIT_INVALID`], else engine).

use std::io::{self, BufReader, BufWriter, Write};
use std::os::fd::FromRawFd;

use boxd_fs::archive::{self, Failure, Kind, Modes};

use crate::engine::Builtin;

/// The path (or the destination's parent) does not exist.
pub const EXIT_NOT_FOUND: i32 = 2;
/// The request or the archive is not acceptable.
pub const EXIT_INVALID: i32 = 3;
/// Anything else (an I/O error).
pub const EXIT_FAILED: i32 = 1;

const BUF: usize = 1 << 20;

/// Runs `builtin` on this process's stdin/stdout (fds 0 and 1), writes a
/// failure to stderr; returns the exit code.
pub fn run(builtin: &Builtin) -> i32 {
    // SAFETY: the zygote's child owns its stdio; these wrap fds 0 and 1,
    // and the process exits right after.
    let (stdin, stdout) = unsafe { (std::fs::File::from_raw_fd(0), std::fs::File::from_raw_fd(1)) };
    let result = match builtin {
        Builtin::TarOut {
            path,
            follow_symlinks,
        } => {
            let mut w = BufWriter::with_capacity(BUF, stdout);
            archive::pack(path, *follow_symlinks, &mut w)
                .and_then(|()| w.flush().map_err(|e| Failure::io("writing the archive", e)))
        }
        Builtin::TarIn { path } => archive::unpack(
            path,
            BufReader::with_capacity(BUF, stdin),
            Modes { exact: true },
        ),
    };
    match result {
        Ok(()) => 0,
        Err(f) => {
            let _ = writeln!(io::stderr(), "{}", f.message);
            exit_code(f.kind)
        }
    }
}

/// A failure's exit code.
pub fn exit_code(kind: Kind) -> i32 {
    match kind {
        Kind::NotFound => EXIT_NOT_FOUND,
        Kind::Invalid => EXIT_INVALID,
        Kind::Io => EXIT_FAILED,
    }
}
