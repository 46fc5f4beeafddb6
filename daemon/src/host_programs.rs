//! Finding the host's programs: the first regular file of that name in a
//! directory of `PATH`. Used by the engines (`mke2fs`, `newuidmap`) and by
//! `boxd doctor`; depends on nothing else of the daemon.

use std::path::PathBuf;

/// The program `name` as found on `PATH`, if it is there.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
