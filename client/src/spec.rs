//! Box specs from command-line words, shared by `boxctl` and
//! `harness-box-exec` so that `--mount`, `--env` and `--image` mean the same
//! in both.

use std::collections::HashMap;
use std::path::Path;

use crate::v1;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("invalid mount {0:?}: use HOST:GUEST[:ro]")]
    Mount(String),
    #[error("mount {path:?}: {reason}")]
    MountPath { path: String, reason: String },
    #[error("invalid environment variable {0:?}: use K=V")]
    Env(String),
}

/// A local OCI layout is an existing directory given as an absolute path or
/// one starting with `.`; it is sent as an absolute path. Anything else is a
/// registry reference.
pub fn image_arg(image: &str) -> String {
    let p = Path::new(image);
    if (p.is_absolute() || image.starts_with('.'))
        && p.is_dir()
        && let Ok(abs) = p.canonicalize()
    {
        return abs.to_string_lossy().into_owned();
    }
    image.to_owned()
}

/// `HOST:GUEST[:ro|:rw]`; the host side may be relative to the current directory.
pub fn parse_mount(s: &str) -> Result<v1::Mount, SpecError> {
    let parts: Vec<&str> = s.split(':').collect();
    let (host, guest, read_only) = match parts.as_slice() {
        [h, g] => (*h, *g, false),
        [h, g, "ro"] => (*h, *g, true),
        [h, g, "rw"] => (*h, *g, false),
        _ => return Err(SpecError::Mount(s.to_owned())),
    };
    if host.is_empty() || guest.is_empty() {
        return Err(SpecError::Mount(s.to_owned()));
    }
    let host = std::path::absolute(host).map_err(|e| SpecError::MountPath {
        path: host.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(v1::Mount {
        host_path: host.to_string_lossy().into_owned(),
        guest_path: guest.to_owned(),
        read_only,
    })
}

/// `K=V` words; the value may contain `=` or be empty.
pub fn parse_env(vars: &[String]) -> Result<HashMap<String, String>, SpecError> {
    vars.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(SpecError::Env(kv.clone())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_parse() {
        let m = parse_mount("/a:/b:ro").unwrap();
        assert_eq!(
            (m.host_path.as_str(), m.guest_path.as_str(), m.read_only),
            ("/a", "/b", true)
        );
        assert!(!parse_mount("/a:/b").unwrap().read_only);
        for bad in ["/a", "/a:/b:rx", ":/b", "/a:", "a:b:c:d"] {
            assert!(parse_mount(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_parses() {
        let e = parse_env(&["A=1".into(), "B=x=y".into(), "C=".into()]).unwrap();
        assert_eq!(e["B"], "x=y");
        assert_eq!(e["C"], "");
        assert!(parse_env(&["=v".into()]).is_err());
        assert!(parse_env(&["novalue".into()]).is_err());
    }

    #[test]
    fn registry_refs_stay_as_they_are() {
        assert_eq!(image_arg("alpine:3.20"), "alpine:3.20");
        assert_eq!(image_arg("./does-not-exist"), "./does-not-exist");
    }
}
