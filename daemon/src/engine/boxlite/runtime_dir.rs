//! Where the BoxLite runtime files are, and whether its `mke2fs` is real.
//!
//! boxd builds BoxLite without an embedded runtime, so the runtime is a
//! directory found at start-up and handed to BoxLite through
//! `BOXLITE_RUNTIME_DIR`. A daemon under launchd or systemd has no shell
//! `PATH`, so nothing here (and nothing in BoxLite, which uses the files in
//! this directory by absolute path) relies on `PATH`.

use std::path::{Path, PathBuf};

/// The files BoxLite 0.10.8 uses on Linux.
pub const FILES: [&str; 8] = [
    "boxlite-shim",
    "boxlite-guest",
    "libkrunfw.so.5",
    "mke2fs",
    "debugfs",
    "guest-mke2fs",
    "guest-resize2fs",
    "bwrap",
];

const ENV: &str = "BOXLITE_RUNTIME_DIR";

/// Whether `dir` holds every runtime file.
pub fn is_complete(dir: &Path) -> bool {
    FILES.iter().all(|f| dir.join(f).is_file())
}

/// Candidates, best first: `BOXLITE_RUNTIME_DIR`, `boxlite-runtime/` beside
/// the boxd binary (an installed layout), the cache that
/// `scripts/boxlite-runtime.sh` fills.
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os(ENV).filter(|v| !v.is_empty()) {
        out.push(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        out.push(dir.join("boxlite-runtime"));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    if let Some(cache) = cache {
        out.push(
            cache
                .join("boxd")
                .join(format!("boxlite-{}", ::boxlite::VERSION))
                .join("runtime"),
        );
    }
    out
}

/// The first complete runtime directory.
pub fn find() -> Option<PathBuf> {
    candidates().into_iter().find(|d| is_complete(d))
}

/// Points BoxLite at the runtime found by [`find`].
///
/// # Safety
/// Changes the process environment: call it before any other thread exists.
pub unsafe fn export() {
    if let Some(dir) = find() {
        // SAFETY: the caller guarantees the process is single-threaded.
        unsafe { std::env::set_var(ENV, dir) };
    }
}

/// What `mke2fs -V` says: `Ok(version)` for e2fsprogs, `Err(what it is)`
/// otherwise (Android platform-tools ships an `mke2fs` that is not).
pub fn identify_mke2fs(output: &str) -> Result<String, String> {
    let first = output.lines().next().unwrap_or("").trim();
    let e2fs = output.contains("EXT2FS Library");
    match first.strip_prefix("mke2fs ") {
        Some(rest) if e2fs => Ok(rest.split_whitespace().next().unwrap_or(rest).to_owned()),
        _ => Err(if first.is_empty() {
            "no version output".into()
        } else {
            first.to_owned()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2fsprogs_is_recognized() {
        let real = "mke2fs 1.47.0 (5-Feb-2023)\n\tUsing EXT2FS Library version 1.47.0\n";
        assert_eq!(identify_mke2fs(real), Ok("1.47.0".into()));
        assert!(identify_mke2fs("mke2fs version 2.0 (android)\n").is_err());
        assert!(identify_mke2fs("").is_err());
    }

    #[test]
    fn completeness_needs_every_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_complete(dir.path()));
        for f in FILES {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        assert!(is_complete(dir.path()));
    }
}
