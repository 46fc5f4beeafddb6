//! Checks on everything a client sends, before anything acts on it.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// Box names: 1 to 64 characters of `[A-Za-z0-9_.-]`, not starting with
/// `.` or `-`.
pub fn box_name(name: &str) -> Result<()> {
    let ok_len = (1..=64).contains(&name.len());
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    let ok_start = !name.starts_with(['.', '-']);
    if ok_len && ok_chars && ok_start {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "invalid box name {:?}: use 1 to 64 characters of A-Z a-z 0-9 _ . - not starting with '.' or '-'",
            truncate(name)
        )))
    }
}

/// A path inside a box: absolute, normalized (no `.` or `..`), not `/`.
pub fn guest_path(what: &str, path: &str) -> Result<String> {
    let p = Path::new(path);
    let bad = || {
        Error::InvalidArgument(format!(
            "{what} must be an absolute path inside the box without '..': {:?}",
            truncate(path)
        ))
    };
    if !p.is_absolute() || path.contains('\0') {
        return Err(bad());
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => return Err(bad()),
        }
    }
    Ok(out.to_string_lossy().into_owned())
}

/// A bind mount's host side: absolute, existing, canonicalized, and not the
/// daemon's own state directory (nor inside it, nor a parent of it).
pub fn host_path(path: &str, state_dir: &Path) -> Result<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() || path.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "mount host path must be absolute: {:?}",
            truncate(path)
        )));
    }
    let canon = p
        .canonicalize()
        .map_err(|e| Error::InvalidArgument(format!("mount host path {path:?}: {e}")))?;
    let state = state_dir
        .canonicalize()
        .unwrap_or_else(|_| state_dir.to_path_buf());
    if canon.starts_with(&state) || state.starts_with(&canon) {
        return Err(Error::InvalidArgument(format!(
            "mount host path {} would expose boxd's state directory {}",
            canon.display(),
            state.display()
        )));
    }
    Ok(canon)
}

/// An image reference or digest as a client typed it: non-empty, at most
/// 1 KiB, no whitespace or control characters. Its grammar is checked where
/// it is parsed (`image::pull::parse_reference`).
pub fn image_reference(s: &str) -> Result<String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(Error::InvalidArgument(
            "an image reference is required".into(),
        ));
    }
    if s.len() > 1024 || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::InvalidArgument(format!(
            "invalid image reference {:?}",
            truncate(s)
        )));
    }
    Ok(s.to_owned())
}

/// A file or directory to import: absolute, existing.
pub fn import_path(path: &str) -> Result<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() || path.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "the path to import must be absolute: {:?}",
            truncate(path)
        )));
    }
    p.canonicalize()
        .map_err(|e| Error::InvalidArgument(format!("{path:?}: {e}")))
}

/// Guest mount points the engine itself provides.
pub fn mount_target(guest: &str) -> Result<()> {
    let reserved = ["/", "/proc", "/dev"];
    if reserved.contains(&guest) || guest.starts_with("/proc/") || guest.starts_with("/dev/") {
        return Err(Error::InvalidArgument(format!(
            "cannot mount over {guest} in a box"
        )));
    }
    Ok(())
}

/// Environment variable names: non-empty, no `=`, no NUL; values no NUL.
pub fn env_var(key: &str, value: &str) -> Result<()> {
    if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "invalid environment variable {:?}",
            truncate(key)
        )));
    }
    Ok(())
}

/// Command words cannot carry NUL bytes.
pub fn command(command: &str, args: &[String]) -> Result<()> {
    if command.is_empty() {
        return Err(Error::InvalidArgument("command is empty".into()));
    }
    if command.contains('\0') || args.iter().any(|a| a.contains('\0')) {
        return Err(Error::InvalidArgument(
            "command and arguments cannot contain NUL bytes".into(),
        ));
    }
    Ok(())
}

/// A signal as a number (`15`) or a name (`SIGTERM`, `TERM`, `sigterm`).
/// Empty means SIGKILL.
pub fn signal(s: &str) -> Result<i32> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(libc::SIGKILL);
    }
    let parsed = match s.parse::<i32>() {
        Ok(n) => nix::sys::signal::Signal::try_from(n).ok(),
        Err(_) => {
            let upper = s.to_ascii_uppercase();
            let name = if upper.starts_with("SIG") {
                upper
            } else {
                format!("SIG{upper}")
            };
            name.parse::<nix::sys::signal::Signal>().ok()
        }
    };
    parsed
        .map(|sig| sig as i32)
        .ok_or_else(|| Error::InvalidArgument(format!("unknown signal {:?}", truncate(s))))
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "box-1", "A.b_c", &"x".repeat(64), "9"] {
            assert!(box_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "-flag",
            &"x".repeat(65),
            "a/b",
            "..",
            "a b",
            "ü",
            "a\0b",
            "../etc",
        ] {
            assert!(box_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn guest_paths() {
        assert_eq!(guest_path("p", "/workspace/").unwrap(), "/workspace");
        assert_eq!(guest_path("p", "/a/./b").unwrap(), "/a/b");
        assert!(guest_path("p", "relative").is_err());
        assert!(guest_path("p", "/a/../etc").is_err());
    }

    #[test]
    fn host_paths() {
        let state = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        assert!(host_path(other.path().to_str().unwrap(), state.path()).is_ok());
        assert!(host_path(state.path().to_str().unwrap(), state.path()).is_err());
        let parent = state.path().parent().unwrap();
        assert!(host_path(parent.to_str().unwrap(), state.path()).is_err());
        assert!(host_path("/definitely/not/here", state.path()).is_err());
        assert!(host_path("rel/path", state.path()).is_err());
    }

    #[test]
    fn signals() {
        assert_eq!(signal("").unwrap(), libc::SIGKILL);
        assert_eq!(signal("15").unwrap(), libc::SIGTERM);
        assert_eq!(signal("SIGTERM").unwrap(), libc::SIGTERM);
        assert_eq!(signal("term").unwrap(), libc::SIGTERM);
        assert_eq!(signal("SIGWINCH").unwrap(), libc::SIGWINCH);
        for bad in ["0", "999", "-1", "SIGNOPE", "KILLL"] {
            assert!(signal(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reserved_targets() {
        for bad in ["/", "/proc", "/proc/1", "/dev", "/dev/shm"] {
            assert!(mount_target(bad).is_err(), "{bad}");
        }
        assert!(mount_target("/workspace").is_ok());
    }
}
