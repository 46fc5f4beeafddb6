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
    #[error(
        "invalid secret {0:?}: use NAME:HOST[,HOST...] (the value from $NAME) or NAME:HOST[,HOST...]@FILE"
    )]
    Secret(String),
    #[error("secret {name}: {reason}")]
    SecretValue { name: String, reason: String },
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

/// `NAME:HOST[,HOST...]`, the value read from this process's environment
/// variable `NAME`, or `NAME:HOST[,HOST...]@FILE`, the value read from the
/// file (one trailing newline dropped). The value is read here, on the
/// client, and handed to boxd, which keeps it out of the box.
pub fn parse_secret(s: &str) -> Result<v1::Secret, SpecError> {
    parse_secret_with(s, |name| std::env::var(name).ok())
}

fn parse_secret_with(
    s: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<v1::Secret, SpecError> {
    let bad = || SpecError::Secret(s.to_owned());
    let (name, rest) = s.split_once(':').ok_or_else(bad)?;
    let (hosts, file) = match rest.rsplit_once('@') {
        Some((h, f)) => (h, Some(f)),
        None => (rest, None),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect();
    if name.is_empty() || hosts.is_empty() || file == Some("") {
        return Err(bad());
    }
    let value_err = |reason: String| SpecError::SecretValue {
        name: name.to_owned(),
        reason,
    };
    let value = match file {
        Some(f) => {
            let mut v = std::fs::read_to_string(f).map_err(|e| value_err(format!("{f}: {e}")))?;
            if v.ends_with('\n') {
                v.pop();
                if v.ends_with('\r') {
                    v.pop();
                }
            }
            v
        }
        None => env(name).ok_or_else(|| {
            value_err(format!(
                "${name} is not set in this environment (or give the value in a file: {name}:HOSTS@FILE)"
            ))
        })?,
    };
    if value.is_empty() {
        return Err(value_err("the value is empty".into()));
    }
    Ok(v1::Secret {
        name: name.to_owned(),
        hosts,
        placeholder: String::new(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_parse() {
        let env = |n: &str| (n == "API_KEY").then(|| "k-123".to_owned());
        let s = parse_secret_with("API_KEY:api.example.com,*.example.org", env).unwrap();
        assert_eq!(s.name, "API_KEY");
        assert_eq!(s.hosts, ["api.example.com", "*.example.org"]);
        assert_eq!(s.value, "k-123");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("key");
        std::fs::write(&f, "from-file\n").unwrap();
        let s = parse_secret_with(&format!("TOKEN:h.example@{}", f.display()), env).unwrap();
        assert_eq!(s.value, "from-file");
        for bad in ["NOCOLON", ":h", "N:", "N:h@"] {
            assert_eq!(
                parse_secret_with(bad, env),
                Err(SpecError::Secret(bad.into())),
                "{bad}"
            );
        }
        let missing = parse_secret_with("OTHER:h", env).unwrap_err().to_string();
        assert!(missing.contains("$OTHER is not set"), "{missing}");
    }

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
